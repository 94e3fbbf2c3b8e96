"""Issue 50: a request that crashes the server in native code leaves a record and is not
run again. A supervised ``imp serve`` (real process, real socket) is made to segfault
while a registration runs (the failpoint ``registration.sql`` fires only for SQL holding
a marker); meanwhile a client streams keyed updates. The supervisor restarts the server;
the new one logs the calls in flight with faulthandler's stacks, names the registration,
and quarantines it: the client's automatic retry (same key) and the same SQL sent again
are refused with FAILED_PRECONDITION, and the server that refused them is still the one
serving afterwards. No acknowledged update is lost or applied twice."""

from __future__ import annotations

import threading

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from runtime_support import fill_store
from test_exactly_once import _serve, _stop
from waiting import wait_until

from benchmarks.faults import _wait_serving, free_port
from imp_core.storage import DeltaStore
from services.client import RemoteError, SketchClient

pytestmark = [pytest.mark.grpc, pytest.mark.integration]

MARK = 10**12
GOOD = "SELECT a, sum(b) AS s FROM t1000g GROUP BY a HAVING sum(b) > 10"
BAD = "SELECT a, count(*) AS n /* CRASH_ME */ FROM t1000g GROUP BY a"


def test_a_crashing_request_is_recorded_quarantined_and_not_run_again(tmp_path):
    root = tmp_path / "root"
    fill_store(root)
    store = DeltaStore(root)
    port = free_port()
    address = f"127.0.0.1:{port}"
    log_path = tmp_path / "server.log"
    server = _serve(root, port, log_path, IMP_FAILPOINTS="registration.sql=segv~CRASH_ME")
    stop = threading.Event()
    acked: list[int] = []
    errors: list[str] = []

    def stream() -> None:
        template = store.read("t50g").slice(0, 3)
        at = template.schema.get_field_index("id")
        with SketchClient(address, timeout=30, retry_seconds=120) as client:
            i = 0
            while not stop.is_set():
                ids = [MARK + i * 10 + j for j in range(3)]
                rows = template.set_column(at, template.schema.field(at),
                                           pa.array(ids, pa.int64()))
                try:
                    client.apply_update("t50g", inserts=rows)
                except RemoteError as exc:  # a refusal: not acknowledged, not counted
                    errors.append(str(exc))
                else:
                    acked.extend(ids)
                i += 1
                stop.wait(0.05)  # paced; ends as soon as the test says so

    writer = threading.Thread(target=stream)
    try:
        _wait_serving(address, 120)
        with SketchClient(address, timeout=60, retry_seconds=120) as client:
            client.register("good", GOOD, partitions={"t1000g.a": 8})
            writer.start()
            # the crash comes while updates stream: some acknowledged before it
            wait_until(lambda: len(acked) >= 3, timeout=60, what="updates acknowledged")
            with pytest.raises(RemoteError) as refused:
                client.register("bad", BAD, partitions={"t1000g.a": 8},
                                idempotency_key="crash-key-1")
            # the retry after the restart found the registration quarantined
            assert refused.value.code == "FAILED_PRECONDITION", refused.value
            assert "quarantined" in refused.value.message
            assert "RegisterQuery" in refused.value.message
            pid = client.stats()["service"]["pid"]
            # the same SQL sent again as a new call (another key): refused, not run
            with pytest.raises(RemoteError) as again:
                client.register("bad2", BAD, partitions={"t1000g.a": 8})
            assert again.value.code == "FAILED_PRECONDITION"
            status = client.update_status("crash-key-1")
            assert status["state"] == "quarantined", status
            # the stream goes on with the restarted server: more updates acknowledged
            so_far = len(acked)
            wait_until(lambda: len(acked) >= so_far + 3, timeout=60,
                       what="updates acknowledged by the restarted server")
            stop.set()
            writer.join(120)
            # the same process answers: neither refusal crashed it
            assert client.stats()["service"]["pid"] == pid
            assert client.health() == "SERVING"
            assert [q.name for q in client.queries()] == ["good"]
            incidents = client.stats()["coordinator"]["incidents"]
            assert incidents["quarantined"] and incidents["deaths"]
            assert "RegisterQuery" in incidents["deaths"][0]["culprits"][0]
            # the sketch of the query registered before the crash is still exact
            assert client.sketch("good").seq >= 1
        ids = store.read("t50g", columns=["id"]).column("id")
        ours = sorted(pc.filter(ids, pc.greater_equal(ids, MARK)).to_pylist())
        assert ours == sorted(acked) and len(acked) > 0 and not errors, (len(acked), errors)
        log = log_path.read_text()
        assert "Fatal Python error: Segmentation fault" in log
        assert "died (Segmentation fault)" in log and "RegisterQuery(" in log
        assert "query=bad" in log and "request=" in log
        assert "quarantined key crash-key-1" in log
        assert log.count("ended unexpectedly (signal 11 while serving: "
                         "RegisterQuery(query=bad))") == 1
    finally:
        stop.set()
        if writer.is_alive():
            writer.join(30)
        _stop(server)
