"""Issue 50: a server killed between an update's commit and its reply. The update is in
the table, the client saw only UNAVAILABLE; it retries with the same idempotency key and
the server that answers (the same one restarted by its supervisor, or a standby that took
the store over) finds the key in the table's Delta log: every batch is applied exactly
once, on a keyed and on a keyless table. Real ``imp serve`` processes, real sockets; the
kill is a failpoint (``IMP_FAILPOINTS``) placed right after the commit."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from runtime_support import fill_store

from benchmarks.faults import _stop, _wait_serving, free_port
from imp_core.storage import DeltaStore
from services.client import SketchClient

pytestmark = [pytest.mark.grpc, pytest.mark.integration]

MARK = 10**12  # ids (keyed) and aa values (keyless) of the rows these tests insert


def _serve(root: Path, port: int, log: Path, **env_extra: str) -> subprocess.Popen:
    env = {k: v for k, v in os.environ.items() if not k.startswith("IMP_")}
    env.update(IMP_LISTEN=f"127.0.0.1:{port}", IMP_ROOT=str(root), IMP_BACKEND="local",
               IMP_METRICS_LISTEN="off", IMP_LEASE_SECONDS="5", **env_extra)
    return subprocess.Popen([sys.executable, "-m", "services.cli", "serve"], env=env,
                            stdout=subprocess.DEVNULL, stderr=log.open("w"),
                            start_new_session=True)


def _batch(store: DeltaStore, table: str, i: int, n: int = 7) -> pa.Table:
    """``n`` rows marked as batch ``i`` of these tests."""
    rows = store.read(table).slice(0, n)
    column = "id" if table == "t1000g" else "aa"
    at = rows.schema.get_field_index(column)
    values = pa.array([MARK + i * 100 + j for j in range(n)], rows.schema.field(at).type)
    return rows.set_column(at, rows.schema.field(at), values)


def _marked(store: DeltaStore, table: str) -> list[int]:
    column = "id" if table == "t1000g" else "aa"
    values = store.read(table, columns=[column]).column(column)
    return sorted(pc.filter(values, pc.greater_equal(values, MARK)).to_pylist())


def _send_all(client: SketchClient, store: DeltaStore, batches: int) -> list:
    results = []
    for i in range(batches):
        for table in ("t1000g", "tjoinhelp"):
            results.append(client.apply_update(table, inserts=_batch(store, table, i)))
    return results


def _expected(batches: int, n: int = 7) -> list[int]:
    return sorted(MARK + i * 100 + j for i in range(batches) for j in range(n))


def test_a_supervised_server_killed_after_commit_applies_each_batch_once(tmp_path):
    root = tmp_path / "root"
    fill_store(root)
    store = DeltaStore(root)
    port = free_port()
    # every server process is killed right after its third commit, before the reply
    server = _serve(root, port, tmp_path / "server.log",
                    IMP_FAILPOINTS="table_writes.after_commit=kill@3")
    try:
        _wait_serving(f"127.0.0.1:{port}", 120)
        with SketchClient(f"127.0.0.1:{port}", timeout=30, retry_seconds=120) as client:
            results = _send_all(client, store, 4)
            assert client.retried >= 1  # the kills were seen as UNAVAILABLE and retried
        assert sum(r.replayed for r in results) >= 2  # found in the log by the new server
        for table in ("t1000g", "tjoinhelp"):
            assert _marked(store, table) == _expected(4), table
        versions = [r.version for r in results]
        assert all(v > 0 for v in versions)
        log = (tmp_path / "server.log").read_text()
        assert "failpoint table_writes.after_commit" in log
        assert "ended unexpectedly (signal 9" in log  # the supervisor restarted it
    finally:
        _stop(server)


def test_a_standby_answers_the_retry_of_an_update_its_active_committed(tmp_path):
    root = tmp_path / "root"
    fill_store(root)
    store = DeltaStore(root)
    ports = free_port(), free_port()
    active = _serve(root, ports[0], tmp_path / "active.log", IMP_SUPERVISE="off",
                    IMP_FAILPOINTS="table_writes.after_commit=kill@2")
    standby = None
    try:
        _wait_serving(f"127.0.0.1:{ports[0]}", 120)
        standby = _serve(root, ports[1], tmp_path / "standby.log", IMP_SUPERVISE="off",
                         IMP_STANDBY="on")
        targets = ",".join(f"127.0.0.1:{p}" for p in ports)
        with SketchClient(targets, timeout=30, retry_seconds=120) as client:
            results = _send_all(client, store, 3)
            assert client.target == f"127.0.0.1:{ports[1]}" and client.failovers >= 1
            status = client.update_status(client_key := "never-sent-" + str(ports[0]))
            assert status["state"] == "not_applied", (client_key, status)
        assert active.wait(30) == -signal.SIGKILL
        assert results[1].replayed  # the standby found the killed server's commit
        for table in ("t1000g", "tjoinhelp"):
            assert _marked(store, table) == _expected(3), table
    finally:
        _stop(active)
        if standby is not None:
            _stop(standby)
