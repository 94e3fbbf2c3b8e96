"""SketchService end to end over a real gRPC channel on loopback (in-process coordinator,
Delta tables, token auth): registration, updates, current sketches equal to a recapture
by the reference evaluator, watch streams, actor operations, and every error case with
its status code, leaving the service's state unchanged."""

from __future__ import annotations

import hashlib
import re
import threading
import time

import grpc
import numpy as np
import pyarrow as pa
import pytest
from grpc_harness import TOKEN, reference, running_service
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc
from runtime_support import random_batch
from waiting import wait_until

from imp_actors.runtime_config import Eager, Lazy
from imp_core.errors import WorkerLostError
from imp_core.workloads.queries import load_query
from services.client import RemoteError, SketchClient
from services.protos import SERVICE_NAME, pb
from services.server_config import Limits

pytestmark = [pytest.mark.grpc, pytest.mark.integration]

QUOTA_TOKEN = "quota-token-abcdef"
LIMITS = Limits(max_sql_chars=4000, max_batch_rows=2000, max_batch_bytes=256 * 1024,
                max_message_bytes=512 * 1024, max_registrations_per_client=6, max_watches=4)
WORKERS = 3
QUERIES = {  # name -> (workload query, strategy)
    "groups": ("q_groups_1000", Lazy()),
    "having": ("q_having_2", Eager(batch_tuples=1, max_delay_s=None)),
    "selpd": ("q_selpd", Lazy()),
}


def _sql(name: str) -> str:
    return load_query(QUERIES[name][0]).sql


@pytest.fixture(scope="module")
def svc(tmp_path_factory):
    root = tmp_path_factory.mktemp("grpc-service")
    # few workers: open watches must not take the threads the other calls need
    with running_service(root, tokens=(TOKEN, QUOTA_TOKEN), limits=LIMITS,
                         workers=WORKERS) as service:
        client = service.client()
        for name, (wq, strategy) in QUERIES.items():
            table = load_query(wq).sketch[0]
            client.register(name, _sql(name), partitions={f"{table[0]}.{table[1]}": 16},
                            strategy=strategy)
        yield service


@pytest.fixture(scope="module")
def client(svc):
    return svc.client()


def _update(svc, client, table: str, seed: int, size: int = 12):
    rng = np.random.default_rng(seed)
    inserts, deletes = random_batch(svc.coordinator.ctx.store, table, rng, size,
                                    salt=10_000_000 + 1000 * seed)
    return client.apply_update(table, inserts=inserts, deletes=deletes)


# -- end to end ------------------------------------------------------------------------------


def test_health_is_serving_without_a_token(svc):
    anonymous = SketchClient(svc.address)
    try:
        assert anonymous.health() == "SERVING"
        assert anonymous.health(SERVICE_NAME) == "SERVING"
    finally:
        anonymous.close()


def test_reflection_lists_the_services(svc):
    channel = grpc.insecure_channel(svc.address)
    try:
        stub = reflection_pb2_grpc.ServerReflectionStub(channel)
        req = reflection_pb2.ServerReflectionRequest(list_services="")
        [resp] = list(stub.ServerReflectionInfo(iter([req]), timeout=10,
                                                metadata=(("authorization", f"Bearer {TOKEN}"),)))
        names = {s.name for s in resp.list_services_response.service}
        assert {SERVICE_NAME, "grpc.health.v1.Health"} <= names
    finally:
        channel.close()


def test_registered_queries_are_listed_with_their_settings(client):
    infos = {q.name: q for q in client.queries()}
    assert set(QUERIES) <= set(infos)
    for name, (_, strategy) in QUERIES.items():
        q = infos[name]
        assert q.strategy == strategy and q.shards == 1 and q.state == "live"
        assert q.sketch_seq >= 1 and q.total_fragments == 16
        assert q.partitions[0]["column"] == "a" and len(q.partitions[0]["bounds"]) == 15
    tables = {t.name: t for t in client.tables()}
    assert tables["t1000g"].schema.field("a").type == pa.int64()


def test_probed_join_sides_are_reported(svc, client):
    """A join input beyond the actors' state budget is probed from the table files, the
    sketch stays exact, and QueryInfo says which inputs are probed."""
    from dataclasses import replace

    c = svc.coordinator
    saved = c.config
    c.ctx.config = replace(saved, join_state_budget_bytes=0)  # probe every equi-join input
    try:
        client.register("probed", load_query("q_joinsel").sql, partitions={"t5000g.a": 16})
    finally:
        c.ctx.config = saved
    try:
        info = {q.name: q for q in client.queries()}["probed"]
        assert len(info.probed_join_sides) == 2
        assert info.probed_join_sides == c.info("probed").probed_join_sides
        _update(svc, client, "tjoinhelp", seed=71)
        got = client.sketch("probed", include_partitions=True)
        assert got.sketch() == reference(c, load_query("q_joinsel").sql, got)
    finally:
        client.drop("probed")


def test_updates_then_current_sketch_equals_recapture(svc, client):
    for step in range(3):
        for table in ("t1000g", "t5000g"):
            before = svc.coordinator.ctx.store.version(table)
            result = _update(svc, client, table, seed=100 + 10 * step + len(table))
            assert result.version == before + 1 and result.inserted > 0 and result.deleted > 0
        for name in QUERIES:
            sketch = client.sketch(name, include_partitions=True)
            assert dict(sketch.versions) == {t: svc.coordinator.ctx.store.version(t)
                                             for t in sketch.versions}
            assert sketch.sketch() == reference(svc.coordinator, _sql(name), sketch), name
            assert sketch.fragments == tuple(sketch.sketch().fragments)
            table = sketch.tables[0]
            assert table.predicate in sketch.where
            assert [r.lo for r in table.ranges][1:] == [
                table.bounds[f - 1] for f in _run_starts(table.fragments)][1:]


def _run_starts(fragments):
    return [f for i, f in enumerate(fragments) if i == 0 or fragments[i - 1] != f - 1]


def test_eager_query_is_maintained_by_the_update(svc, client):
    before = client.sketch("having", fresh=False).seq
    result = _update(svc, client, "t5000g", seed=7)
    assert "having" in result.maintained
    wait_until(lambda: client.sketch("having", fresh=False).versions["t5000g"]
               == result.version, what="the update's eager maintenance")
    latest = client.sketch("having", fresh=False, include_partitions=True)
    assert latest.seq > before and latest.versions["t5000g"] == result.version
    assert latest.sketch() == reference(svc.coordinator, _sql("having"), latest)


def test_many_fresh_sketches_in_one_call(svc, client):
    """GetSketches (issue 14): a client tracking many queries gets every fresh sketch in
    one call, each as GetSketch would answer it; the ones it already holds are left out,
    and an unknown query is an error of its own, not of the call."""
    _update(svc, client, "t1000g", seed=61)
    got, errors = client.sketches(include_partitions=True)
    assert set(got) == {q.name for q in client.queries()} and not errors
    for name in QUERIES:
        assert got[name].versions == client.sketch(name, fresh=False).versions
        assert got[name].sketch() == reference(svc.coordinator, _sql(name), got[name])
    known = {name: record.seq for name, record in got.items()}
    again, errors = client.sketches(list(QUERIES) + ["nosuch"], known=known)
    assert again == {} and set(errors) == {"nosuch"} and errors["nosuch"].code == "NOT_FOUND"
    _update(svc, client, "t5000g", seed=62)
    changed, _ = client.sketches(list(QUERIES), known=known)
    readers = {q.name for q in client.queries() if "t5000g" in q.tables}
    assert set(changed) == readers & set(QUERIES)
    stale, _ = client.sketches(list(QUERIES), fresh=False)
    assert all(stale[n].seq == client.sketch(n, fresh=False).seq for n in QUERIES)


def test_latest_maintained_does_not_maintain_current_does(svc, client):
    latest = client.sketch("groups", fresh=True)
    result = _update(svc, client, "t1000g", seed=11)
    stale = client.sketch("groups", fresh=False)
    assert stale.seq == latest.seq and stale.versions["t1000g"] < result.version
    current = client.sketch("groups", fresh=True, include_partitions=True)
    assert current.seq == latest.seq + 1 and current.versions["t1000g"] == result.version
    assert current.sketch() == reference(svc.coordinator, _sql("groups"), current)
    again = client.sketch("groups", seq=latest.seq)  # a kept past version, unchanged
    assert again.seq == latest.seq and again.fragments == latest.fragments


def test_watch_delivers_every_version_in_order(svc, client):
    start = client.sketch("groups", fresh=True).seq
    received, errors = [], []
    ready = threading.Event()

    def watch():
        try:
            ready.set()
            for record in client.watch("groups", after_seq=start, timeout=60):
                received.append(record)
                if len(received) == 4:
                    break
        except Exception as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    thread = threading.Thread(target=watch)
    thread.start()
    ready.wait()
    made = []
    for step in range(4):
        _update(svc, client, "t1000g", seed=300 + step)
        made.append(client.sketch("groups", fresh=True))
    thread.join(60)
    assert not errors and not thread.is_alive()
    assert [r.seq for r in received] == [start + 1, start + 2, start + 3, start + 4]
    assert [(r.seq, r.fragments, dict(r.versions)) for r in received] == \
        [(m.seq, m.fragments, dict(m.versions)) for m in made]


def test_watch_ends_at_its_deadline_and_frees_its_slot(svc, client):
    latest = client.sketch("selpd", fresh=False).seq
    t0 = time.perf_counter()
    assert list(client.watch("selpd", after_seq=latest, timeout=0.5)) == []
    assert time.perf_counter() - t0 < 10
    wait_until(lambda: client.stats()["service"]["open_watches"] == 0, timeout=10,
               what="the ended watch to free its slot")


def test_cancelled_watch_stops_on_the_server(svc, client):
    latest = client.sketch("selpd", fresh=False).seq
    stream = client.stub.WatchSketch(pb.WatchSketchRequest(query="selpd", after_seq=latest),
                                     metadata=(("authorization", f"Bearer {TOKEN}"),))
    wait_until(lambda: client.stats()["service"]["open_watches"] > 0, timeout=10,
               what="the watch to open")
    assert client.stats()["service"]["open_watches"] == 1
    stream.cancel()
    wait_until(lambda: client.stats()["service"]["open_watches"] == 0, timeout=10,
               what="the cancelled watch to stop on the server")


def test_maintain_by_table_and_by_name(svc, client):
    _update(svc, client, "t1000g", seed=21)
    done = client.maintain(tables=["t1000g"])
    assert set(done) == {"groups", "selpd"}
    version = svc.coordinator.ctx.store.version("t1000g")
    assert all(s.versions["t1000g"] == version for s in done.values())
    assert set(client.maintain(queries=["having"])) == {"having"}


def test_checkpoint_evict_restore_scale(svc, client):
    points = client.checkpoint("groups")
    assert len(points) == 1 and points[0].bytes > 0 and len(points[0].sha256) == 64
    client.evict("groups")
    assert client.info("groups").state == "evicted"
    _update(svc, client, "t1000g", seed=31)
    sketch = client.sketch("groups", include_partitions=True)  # restores transparently
    assert sketch.sketch() == reference(svc.coordinator, _sql("groups"), sketch)
    client.evict("groups")
    assert client.restore("groups").state == "live"
    info = client.scale("groups", 2)
    assert info.shards == 2
    _update(svc, client, "t1000g", seed=32)
    sketch = client.sketch("groups", include_partitions=True)
    assert sketch.sketch() == reference(svc.coordinator, _sql("groups"), sketch)
    assert client.scale("groups", 1).shards == 1


def test_stats_report_coordinator_and_calls(client):
    stats = client.stats()
    assert stats["coordinator"]["registered_queries"] >= len(QUERIES)
    calls = stats["service"]["methods"]
    assert calls["GetSketch"]["calls"] >= 1 and calls["GetSketch"]["by_status"]["OK"] >= 1


def test_register_and_drop(svc, client):
    sql = "-- sketch: t1000g.a\nSELECT a, sum(b) AS sb FROM t1000g GROUP BY a HAVING sum(b) > 50"
    info = client.register("temp", sql, fragments=8)
    assert info.total_fragments == 8 and info.sketch_seq == 1
    sketch = client.sketch("temp", include_partitions=True)
    assert sketch.sketch() == reference(svc.coordinator, sql, sketch)
    client.drop("temp")
    assert "temp" not in {q.name for q in client.queries()}


def test_partitions_by_explicit_bounds(svc, client):
    sql = "SELECT a, avg(b) AS ab FROM t1000g GROUP BY a HAVING avg(c) < 300"
    info = client.register("bounded", sql, partitions={"t1000g.a": [100, 250, 500, 900]})
    try:
        assert info.partitions[0]["bounds"] == [100, 250, 500, 900]
        sketch = client.sketch("bounded", include_partitions=True)
        assert sketch.tables[0].bounds == (100, 250, 500, 900)
        assert sketch.sketch() == reference(svc.coordinator, sql, sketch)
    finally:
        client.drop("bounded")


# -- errors: status code, message, nothing changed ---------------------------------------------


def _ipc(table: pa.Table) -> bytes:
    from services.convert import table_to_ipc

    return table_to_ipc(table)


def _rows(svc, table: str, n: int) -> pa.Table:
    data = svc.coordinator.ctx.store.read(table)
    return data.take(pa.array(np.arange(n) % data.num_rows))


ERRORS = {
    "malformed SQL": (lambda s, c: c.register("bad", "SELECT a FROM t1000g WHERE", fragments=4),
                      "INVALID_ARGUMENT", "malformed SQL"),
    "unsupported SQL": (lambda s, c: c.register(
        "bad", "SELECT a FROM t1000g UNION SELECT a FROM t5000g LIMIT 1",
        partitions={"t1000g.a": 4}), "UNIMPLEMENTED", "LIMIT without ORDER BY"),
    "non-SELECT register": (lambda s, c: c.register("bad", "DROP TABLE t1000g", fragments=4),
                            "INVALID_ARGUMENT", "only read-only SELECT"),
    "non-SELECT run": (lambda s, c: c.run_query(sql="DELETE FROM t1000g WHERE a = 1"),
                       "INVALID_ARGUMENT", "only read-only SELECT"),
    "JVM call run": (lambda s, c: c.run_query(
        sql="SELECT java_method('java.lang.System', 'exit', 1)", use_sketch=False),
        "INVALID_ARGUMENT", "java_method"),
    "unknown table": (lambda s, c: c.register("bad", "SELECT x FROM nope", fragments=4),
                      "NOT_FOUND", "nope"),
    "unknown column": (lambda s, c: c.register(
        "bad", "SELECT a FROM t1000g", partitions={"t1000g.zz": 4}), "INVALID_ARGUMENT", "zz"),
    "unknown query sketch": (lambda s, c: c.sketch("nope"), "NOT_FOUND", "nope"),
    "unknown query drop": (lambda s, c: c.drop("nope"), "NOT_FOUND", "nope"),
    "unknown query evict": (lambda s, c: c.evict("nope"), "NOT_FOUND", "nope"),
    "unknown query watch": (lambda s, c: list(c.watch("nope", timeout=5)), "NOT_FOUND", "nope"),
    "unknown query run": (lambda s, c: c.run_query(query="nope"), "NOT_FOUND", "nope"),
    "sketch version gone": (lambda s, c: c.sketch("groups", seq=10_000), "OUT_OF_RANGE",
                            "not kept"),
    "duplicate name": (lambda s, c: c.register("groups", _sql("groups"), fragments=4),
                       "ALREADY_EXISTS", "groups"),
    "unsafe attribute": (lambda s, c: c.register("bad", _sql("having"),
                                                 partitions={"t5000g.b": 8}),
                         "FAILED_PRECONDITION", "t5000g.b"),
    "unshardable": (lambda s, c: c.register(
        "bad", "SELECT a, avg(b) AS ab FROM t5000g GROUP BY a ORDER BY a LIMIT 10",
        partitions={"t5000g.a": 8}, shards=2), "FAILED_PRECONDITION", "shard"),
    "bad strategy": (lambda s, c: c._call("RegisterQuery", pb.RegisterQueryRequest(
        name="bad", sql=_sql("groups"), fragments=4,
        strategy=pb.Strategy(eager=pb.Eager(batch_tuples=5, max_delay_s=-1)))),
        "INVALID_ARGUMENT", "max_delay_s"),
    "schema mismatch": (lambda s, c: c.apply_update(
        "t1000g", inserts=pa.table({"id": [1], "zz": ["x"]})), "INVALID_ARGUMENT", "t1000g"),
    "type mismatch": (lambda s, c: c.apply_update(
        "t1000g", inserts=_rows(s, "t1000g", 2).set_column(
            1, "a", pa.array(["x", "y"]))), "INVALID_ARGUMENT", "a"),
    "unknown table update": (lambda s, c: c.apply_update("nope", inserts=_rows(s, "t1000g", 1)),
                             "NOT_FOUND", "nope"),
    "not Arrow IPC": (lambda s, c: c._call("ApplyUpdate", pb.ApplyUpdateRequest(
        table="t1000g", inserts=b"not arrow at all")), "INVALID_ARGUMENT", "Arrow IPC"),
    "update without new rows": (lambda s, c: c._call("ApplyUpdate", pb.ApplyUpdateRequest(
        table="t1000g", update_old=_ipc(_rows(s, "t1000g", 1)))),
        "INVALID_ARGUMENT", "update_new"),
    "SQL too long": (lambda s, c: c.register(
        "bad", "SELECT a FROM t1000g WHERE " + " OR ".join(["a = 1"] * 1000), fragments=4),
        "RESOURCE_EXHAUSTED", "characters"),
    "batch too many rows": (lambda s, c: c.apply_update("t1000g", inserts=_rows(s, "t1000g",
                                                                                2001)),
                            "RESOURCE_EXHAUSTED", "rows"),
    "batch too many bytes": (lambda s, c: c.apply_update(
        "t1000g", inserts=pa.table({"id": np.arange(100), "pad": ["x" * 3000] * 100})),
        "RESOURCE_EXHAUSTED", "bytes"),
    "message too large": (lambda s, c: c.apply_update(
        "t1000g", inserts=pa.table({"id": np.arange(80_000)})), "RESOURCE_EXHAUSTED", ""),
    "zero shards": (lambda s, c: c.scale("groups", 0), "INVALID_ARGUMENT", "shards"),
    # issue 13: every request bounded before work starts (P1, P2) and the smaller items
    "too many shards": (lambda s, c: c.register("bad", _sql("groups"), fragments=4,
                                                shards=100_000),
                        "RESOURCE_EXHAUSTED", "IMP_MAX_SHARDS"),
    "too many shards to scale": (lambda s, c: c.scale("groups", 100_000),
                                 "RESOURCE_EXHAUSTED", "IMP_MAX_SHARDS"),
    "too many fragments": (lambda s, c: c.register(
        "bad", _sql("groups"), partitions={"t1000g.a": 4_294_967_295}),
                           "RESOURCE_EXHAUSTED", "IMP_MAX_FRAGMENTS"),
    "too many split points": (lambda s, c: c.register(
        "bad", _sql("groups"), partitions={"t1000g.a": list(range(66_000))}),
        "RESOURCE_EXHAUSTED", "IMP_MAX_FRAGMENTS"),
    "string split points on an int column": (lambda s, c: c.register(
        "bad", _sql("groups"), partitions={"t1000g.a": ["x", "y"]}),
        "INVALID_ARGUMENT", "values of its type int64"),
    "fractional split point on an int column": (lambda s, c: c.register(
        "bad", _sql("groups"), partitions={"t1000g.a": [1.5, 300]}),
        "INVALID_ARGUMENT", "values of its type int64"),
    "NaN max delay": (lambda s, c: c._call("RegisterQuery", pb.RegisterQueryRequest(
        name="bad", sql=_sql("groups"), fragments=4,
        strategy=pb.Strategy(eager=pb.Eager(batch_tuples=5, max_delay_s=float("nan"))))),
        "INVALID_ARGUMENT", "max_delay_s"),
    "infinite max delay": (lambda s, c: c._call("RegisterQuery", pb.RegisterQueryRequest(
        name="bad", sql=_sql("groups"), fragments=4,
        strategy=pb.Strategy(eager=pb.Eager(batch_tuples=5, max_delay_s=float("inf"))))),
        "INVALID_ARGUMENT", "max_delay_s"),
    "update rows unpaired": (lambda s, c: c._call("ApplyUpdate", pb.ApplyUpdateRequest(
        table="t1000g", update_old=_ipc(_rows(s, "t1000g", 1)),
        update_new=_ipc(_rows(s, "t1000g", 2)))), "INVALID_ARGUMENT", "pair row by row"),
    "bytes after the Arrow stream": (lambda s, c: c._call("ApplyUpdate", pb.ApplyUpdateRequest(
        table="t1000g", deletes=_ipc(_rows(s, "t1000g", 1)) + b"trailing")),
        "INVALID_ARGUMENT", "after the end of the Arrow IPC stream"),
    "delete of a key not stored": (lambda s, c: c.apply_update(
        "t1000g", deletes=pa.table({"id": pa.array([-5], pa.int64())})),
        "INVALID_ARGUMENT", "no row with key"),
    "run without SQL or query": (lambda s, c: c.run_query(), "INVALID_ARGUMENT", "SQL"),
}


@pytest.mark.parametrize("case", list(ERRORS))
def test_error_status_and_nothing_changed(svc, client, case):
    call, code, text = ERRORS[case]
    before = svc.state()
    with pytest.raises(RemoteError) as info:
        call(svc, client)
    assert info.value.code == code, info.value
    assert text in info.value.message
    assert "Traceback" not in info.value.message
    assert svc.state() == before


def test_deletes_by_key_columns_only(svc, client):
    """The proto allows deletions that give only a keyed table's key columns (they were
    refused): the stored rows of those keys are deleted, and sketches stay exact."""
    rows = _rows(svc, "t1000g", 3)
    before = svc.coordinator.ctx.store.read("t1000g").num_rows
    res = client.apply_update("t1000g", deletes=rows.select(["id"]))
    assert res.deleted == 3
    assert svc.coordinator.ctx.store.read("t1000g").num_rows == before - 3
    record = client.sketch("groups", include_partitions=True)
    assert record.sketch() == reference(svc.coordinator, _sql("groups"), record)
    client.apply_update("t1000g", inserts=rows)  # as it was, for the other tests


def test_a_plan_too_large_for_memory_is_refused_naming_the_operator(svc, client,
                                                                   monkeypatch):
    # 3000 x 3000 pairs of a join without an equi-join condition, against a 64 MiB budget
    monkeypatch.setenv("IMP_REGISTRATION_MEMORY_BYTES", str(64 << 20))
    before = svc.state()
    with pytest.raises(RemoteError) as info:
        client.register("huge", "SELECT count(*) AS n FROM t1000g JOIN t5000g "
                        "ON t1000g.b < t5000g.c", partitions={"t1000g.a": 8})
    err = info.value
    assert err.code == "RESOURCE_EXHAUSTED", err
    assert "Join ON (`t1000g.b` < `t5000g.c`)" in err.message
    # about 3000 x 3000 (earlier tests of this module change the tables' sizes a little)
    pairs = re.search(r"~([\d,]+) joined row pairs", err.message)
    assert pairs and 8e6 < int(pairs.group(1).replace(",", "")) < 1e7, err.message
    assert "64.0 MiB" in err.message
    assert "Traceback" not in err.message
    assert svc.state() == before
    assert "huge" not in [q.name for q in client.queries()]


def test_malformed_sql_carries_its_position(client):
    with pytest.raises(RemoteError) as info:
        client.register("bad", "SELECT a\nFROM t1000g\nWHERE a >", fragments=4)
    err = info.value
    assert err.code == "INVALID_ARGUMENT" and err.kind == "SqlSyntaxError"
    assert err.line == 3 and err.column is not None
    assert f"line {err.line}" in err.message


def test_unsupported_sql_names_the_construct(client):
    with pytest.raises(RemoteError) as info:
        client.register("bad", "SELECT a FROM t1000g WHERE a IN (SELECT a FROM t5000g "
                        "INTERSECT SELECT a FROM t1000g)", partitions={"t1000g.a": 4})
    assert info.value.code == "UNIMPLEMENTED" and \
        info.value.construct == "INTERSECT in a WHERE or HAVING subquery"


def test_unexpected_exception_is_internal_without_details(svc, client, monkeypatch, caplog):
    def broken():
        raise RuntimeError("secret detail /var/lib/imp/tokens")

    monkeypatch.setattr(svc.coordinator, "stats", broken)
    with caplog.at_level("ERROR", logger="imp.services"):
        with pytest.raises(RemoteError) as info:
            client.stats()
    assert info.value.code == "INTERNAL"
    assert "secret" not in info.value.message and "incident" in info.value.message
    incident = info.value.message.split("incident ")[1].split(")")[0]
    assert any(incident in r.getMessage() and r.exc_info for r in caplog.records)


def test_a_request_out_of_memory_fails_alone(svc, client, monkeypatch):
    """Issue 13 P7: one request that exhausts memory must not take the server down. The
    registration's first state here asks for an allocation no machine has (a real
    MemoryError): the call ends with RESOURCE_EXHAUSTED, nothing is registered, and the
    server serves on."""
    bootstrap = svc.coordinator.state.bootstrap

    def greedy(q):
        bytearray(1 << 62)  # more memory than any machine: malloc refuses at once
        return bootstrap(q)

    before = svc.state()
    monkeypatch.setattr(svc.coordinator.state, "bootstrap", greedy)
    with pytest.raises(RemoteError) as info:
        client.register("hungry", _sql("groups"), partitions={"t1000g.a": 4})
    assert info.value.code == "RESOURCE_EXHAUSTED" and "memory" in info.value.message
    assert svc.state() == before
    monkeypatch.setattr(svc.coordinator.state, "bootstrap", bootstrap)
    assert client.health() == "SERVING"
    client.register("fed", _sql("groups"), partitions={"t1000g.a": 4})
    client.drop("fed")


def test_missing_and_wrong_tokens_are_refused(svc):
    for token in (None, "wrong-token", TOKEN + "x"):
        c = SketchClient(svc.address, token=token)
        try:
            with pytest.raises(RemoteError) as info:
                c.queries()
            assert info.value.code == "UNAUTHENTICATED"
            with pytest.raises(RemoteError):
                list(c.watch("groups", timeout=5))
        finally:
            c.close()


def test_registrations_per_client_are_limited(svc):
    quota = svc.client(token=QUOTA_TOKEN)
    sql = "SELECT a, sum(b) AS sb FROM t1000g GROUP BY a HAVING sum(b) > 50"
    names = [f"quota{i}" for i in range(LIMITS.max_registrations_per_client)]
    try:
        for name in names:
            quota.register(name, sql, partitions={"t1000g.a": 2})
        before = svc.state()
        with pytest.raises(RemoteError) as info:
            quota.register("quota_over", sql, partitions={"t1000g.a": 2})
        assert info.value.code == "RESOURCE_EXHAUSTED" and "limit" in info.value.message
        assert svc.state() == before
        quota.drop(names.pop())  # a dropped query frees its slot
        quota.register("quota_again", sql, partitions={"t1000g.a": 2})
        names.append("quota_again")
    finally:
        for name in names:
            quota.drop(name)


def test_failed_registration_does_not_use_a_slot(svc):
    identity = "token:" + hashlib.sha256(QUOTA_TOKEN.encode()).hexdigest()[:16]
    quota = svc.client(token=QUOTA_TOKEN)
    before = svc.server.guard.registrations(identity)
    with pytest.raises(RemoteError):
        quota.register("broken", "SELECT nope FROM t1000g", fragments=2)
    assert svc.server.guard.registrations(identity) == before


def _fail_once(monkeypatch, obj, name):
    real = getattr(obj, name)
    calls = []

    def flaky(*args, **kwargs):
        calls.append(args)
        if len(calls) == 1:
            raise WorkerLostError("a query actor died (injected)")
        return real(*args, **kwargs)

    monkeypatch.setattr(obj, name, flaky)
    return calls


def test_idempotent_and_keyed_calls_are_retried(svc, client, monkeypatch):
    def count(method, status):
        return client.stats()["service"]["methods"].get(method, {}).get(
            "by_status", {}).get(status, 0)

    before = count("GetSketch", "UNAVAILABLE")
    calls = _fail_once(monkeypatch, svc.coordinator, "get_sketch")
    assert client.sketch("groups").query == "groups"  # UNAVAILABLE once, then retried
    assert len(calls) == 2 and count("GetSketch", "UNAVAILABLE") == before + 1

    # an update is retried with its idempotency key: applied once, by the second try
    version = svc.coordinator.ctx.store.version("t1000g")
    calls = _fail_once(monkeypatch, svc.coordinator, "apply_update")
    done = client.apply_update("t1000g", inserts=_rows(svc, "t1000g", 1).set_column(
        0, "id", pa.array([77_000_001], pa.int64())))
    assert len(calls) == 2 and done.version == version + 1 and done.inserted == 1
    assert svc.coordinator.ctx.store.version("t1000g") == version + 1
    # without retries, a call refused UNAVAILABLE stays refused and changes nothing
    state = svc.state()
    calls = _fail_once(monkeypatch, svc.coordinator, "apply_update")
    with svc.client(retries=0) as once, pytest.raises(RemoteError) as info:
        once.apply_update("t1000g", inserts=_rows(svc, "t1000g", 1).set_column(
            0, "id", pa.array([77_000_002], pa.int64())))
    assert info.value.code == "UNAVAILABLE" and len(calls) == 1
    assert svc.state() == state


def test_open_watches_do_not_starve_other_calls(svc, client):
    latest = client.sketch("selpd", fresh=False).seq
    metadata = (("authorization", f"Bearer {TOKEN}"),)
    streams = [client.stub.WatchSketch(pb.WatchSketchRequest(query="selpd", after_seq=latest),
                                       metadata=metadata) for _ in range(LIMITS.max_watches)]
    try:
        wait_until(lambda: client.stats()["service"]["open_watches"] >= LIMITS.max_watches,
                   timeout=20, what="every watch to open")
        assert client.stats()["service"]["open_watches"] == LIMITS.max_watches
        with pytest.raises(RemoteError) as info:  # one watch more than allowed
            list(client.watch("selpd", after_seq=latest, timeout=10))
        assert info.value.code == "RESOURCE_EXHAUSTED"
        calls = [threading.Thread(target=client.sketch, args=("groups",)) for _ in range(20)]
        for t in calls:
            t.start()
        for t in calls:
            t.join(30)
        assert not any(t.is_alive() for t in calls)
    finally:
        for s in streams:
            s.cancel()
