"""Issue 50: a call that changes state carries an idempotency key, and a retry with the
same key returns the first call's outcome and never applies twice — over a real server,
real Delta tables and real sockets; the durable anchors (the Delta commit, the registry
write) are checked by asking a second coordinator that never saw the first call."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
from grpc_harness import running_service
from runtime_support import make_config

from imp_actors.coordinator import Coordinator
from imp_core.storage import DeltaStore
from imp_core.storage.calls import CallTag
from services.client import RemoteError, new_key
from services.protos import pb

pytestmark = pytest.mark.integration


def _fresh_rows(store: DeltaStore, table: str, n: int, first_id: int) -> pa.Table:
    rows = store.read(table).slice(0, n)
    key = "id" if "id" in rows.column_names else None
    if key is not None:
        i = rows.schema.get_field_index(key)
        rows = rows.set_column(i, rows.schema.field(i),
                               pa.array(range(first_id, first_id + n), pa.int64()))
    return rows


@pytest.mark.parametrize("table", ["t1000g", "tjoinhelp"])  # keyed, keyless
def test_an_update_retried_with_its_key_is_committed_once(tmp_path, table):
    with running_service(tmp_path / "svc") as svc:
        client = svc.client()
        store = svc.coordinator.ctx.store
        before_rows, before_version = store.read(table).num_rows, store.version(table)
        rows = _fresh_rows(store, table, 5, 10**9)
        key = new_key()
        first = client.apply_update(table, inserts=rows, idempotency_key=key)
        again = client.apply_update(table, inserts=rows, idempotency_key=key)
        assert not first.replayed and again.replayed
        assert (again.version, again.inserted) == (first.version, first.inserted) == \
            (before_version + 1, 5)
        assert store.version(table) == before_version + 1
        assert store.read(table).num_rows == before_rows + 5
        # a delete by key, retried: the rows are gone after the first, and the retry is
        # answered with the first outcome instead of "no row with this key"
        dkey = new_key()
        gone = client.apply_update(table, deletes=rows, idempotency_key=dkey)
        assert client.apply_update(table, deletes=rows, idempotency_key=dkey).replayed
        assert store.version(table) == gone.version
        assert store.read(table).num_rows == before_rows


def test_a_key_is_found_in_the_table_log_by_a_server_that_never_saw_the_call(tmp_path):
    """The durable anchor: a second coordinator on the same store (a restarted server,
    a standby that took over) finds the key in the Delta commit and does not apply it."""
    root = tmp_path / "svc"
    with running_service(root) as svc:
        store = svc.coordinator.ctx.store
        rows = _fresh_rows(store, "t1000g", 3, 2 * 10**9)
        key = new_key()
        first = svc.client().apply_update("t1000g", inserts=rows, idempotency_key=key)
    with Coordinator(make_config(root)) as c:
        tag = CallTag(key, "0" * 32)  # another request under the same key: refused
        from imp_core.errors import IdempotencyKeyError

        with pytest.raises(IdempotencyKeyError, match="used before for another request"):
            c.apply_update("t1000g", inserts=rows, call=tag)
        found = c.applied_update(key)
        assert found is not None and found.version == first.version and found.inserted == 3
        assert c.ctx.store.version("t1000g") == first.version


def test_the_same_key_for_another_request_is_refused_and_changes_nothing(tmp_path):
    with running_service(tmp_path / "svc") as svc:
        client = svc.client()
        store = svc.coordinator.ctx.store
        key = new_key()
        client.apply_update("t1000g", inserts=_fresh_rows(store, "t1000g", 2, 3 * 10**9),
                            idempotency_key=key)
        before = svc.state()
        with pytest.raises(RemoteError) as err:
            client.apply_update("t1000g", inserts=_fresh_rows(store, "t1000g", 2, 4 * 10**9),
                                idempotency_key=key)
        assert err.value.code == "INVALID_ARGUMENT" and "another request" in err.value.message
        assert svc.state() == before
        with pytest.raises(RemoteError) as bad:
            client.apply_update("t1000g", inserts=_fresh_rows(store, "t1000g", 1, 5 * 10**9),
                                idempotency_key="not a key!")
        assert bad.value.code == "INVALID_ARGUMENT" and "idempotency key" in bad.value.message
        assert svc.state() == before


def test_update_status_tells_applied_from_not_applied(tmp_path):
    with running_service(tmp_path / "svc") as svc:
        client = svc.client()
        store = svc.coordinator.ctx.store
        key = new_key()
        unknown = client.update_status(key)
        assert unknown["state"] == "not_applied" and "same key" in unknown["message"]
        done = client.apply_update("t5000g", inserts=_fresh_rows(store, "t5000g", 4,
                                                                 6 * 10**9),
                                   idempotency_key=key)
        status = client.update_status(key, "t5000g")
        assert status["state"] == "applied" and status["method"] == "ApplyUpdate"
        assert status["update"].version == done.version and status["update"].inserted == 4
    # a server that never saw the call finds it in the table's log
    with running_service(tmp_path / "svc", fill=False) as svc:
        status = svc.client().update_status(key)
        assert status["state"] == "applied" and status["update"].version == done.version
        assert svc.client().update_status(new_key())["state"] == "not_applied"


def test_registration_and_drop_retried_with_their_keys(tmp_path):
    sql = "SELECT a, sum(b) AS s FROM t1000g GROUP BY a HAVING sum(b) > 10"
    root = tmp_path / "svc"
    with running_service(root) as svc:
        client = svc.client()
        rkey = new_key()
        first = client.register("q", sql, partitions={"t1000g.a": 8}, idempotency_key=rkey)
        again = client.register("q", sql, partitions={"t1000g.a": 8}, idempotency_key=rkey)
        assert again.name == first.name and again.sketch_seq == first.sketch_seq
        assert [q.name for q in client.queries()] == ["q"]
        with pytest.raises(RemoteError) as taken:  # a new call under the name: refused
            client.register("q", sql, partitions={"t1000g.a": 8})
        assert taken.value.code == "ALREADY_EXISTS"
    # after a restart the registry remembers the key: a retry is answered, not refused
    with running_service(root, fill=False) as svc:
        client = svc.client()
        again = client.register("q", sql, partitions={"t1000g.a": 8}, idempotency_key=rkey)
        assert again.name == "q"
        status = client.update_status(rkey)
        assert status["state"] == "applied" and status["query"] == "q"
        dkey = new_key()
        client.drop("q", idempotency_key=dkey)
        client.drop("q", idempotency_key=dkey)  # the retry of a drop that took effect
        with pytest.raises(RemoteError) as gone:
            client.drop("q")  # a new drop of a query that is gone
        assert gone.value.code == "NOT_FOUND"
        # this server answers a retry with the first outcome it kept
        assert client.register("q", sql, partitions={"t1000g.a": 8},
                               idempotency_key=rkey).name == "q"
    # a server that never saw them finds both keys in the registry: the drop's retry is
    # answered, the registration's names the drop (its full first outcome is not kept)
    with running_service(root, fill=False) as svc:
        client = svc.client()
        client.drop("q", idempotency_key=dkey)
        with pytest.raises(RemoteError) as dropped:
            client.register("q", sql, partitions={"t1000g.a": 8}, idempotency_key=rkey)
        assert dropped.value.code == "NOT_FOUND" and "dropped since" in dropped.value.message
        assert client.queries() == []


def test_concurrent_retries_of_one_key_apply_once(tmp_path):
    """Retries that arrive while the first call still runs wait for it (one commit)."""
    from concurrent.futures import ThreadPoolExecutor

    with running_service(tmp_path / "svc") as svc:
        store = svc.coordinator.ctx.store
        before = store.version("t50g")
        rows = _fresh_rows(store, "t50g", 50, 7 * 10**9)
        key = new_key()
        clients = [svc.client() for _ in range(6)]
        with ThreadPoolExecutor(6) as pool:
            results = list(pool.map(
                lambda c: c.apply_update("t50g", inserts=rows, idempotency_key=key),
                clients))
        assert {r.version for r in results} == {before + 1}
        assert sum(not r.replayed for r in results) == 1
        assert store.version("t50g") == before + 1


def test_a_raw_request_without_a_key_is_still_served(tmp_path):
    """Keys are optional on the wire (older clients, other languages): a request without
    one is applied as before."""
    import grpc

    from services.convert import table_to_ipc

    with running_service(tmp_path / "svc") as svc:
        store = svc.coordinator.ctx.store
        rows = _fresh_rows(store, "t1000g", 2, 8 * 10**9)
        with grpc.insecure_channel(svc.address) as channel:
            stub = __import__("services.protos", fromlist=["rpc"]).rpc.SketchServiceStub(
                channel)
            resp = stub.ApplyUpdate(pb.ApplyUpdateRequest(table="t1000g",
                                                          inserts=table_to_ipc(rows)),
                                    metadata=(("authorization", f"Bearer {svc.token}"),))
        assert resp.inserted == 2 and not resp.replayed
        assert np.int64(store.version("t1000g")) == resp.version
