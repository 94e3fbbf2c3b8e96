"""A server killed with SIGKILL and started again on the same store (issue 13, P3): the
sketch sequence numbers go on after the ones the killed server published, so a
``(query, seq)`` always names the same sketch, and a watch resumes with the next
version. Real ``imp serve`` processes over real sockets."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from grpc_harness import reference
from runtime_support import fill_store, random_batch
from waiting import wait_until

from imp_core.storage import DeltaStore
from imp_core.workloads.queries import load_query
from services.client import RemoteError, SketchClient

pytestmark = [pytest.mark.grpc, pytest.mark.integration]


class _Tables:
    """What ``reference`` reads of a coordinator: its context's table store (the one the
    servers shared) and its tables."""

    def __init__(self, store: DeltaStore):
        self.ctx = SimpleNamespace(store=store)

    def tables(self) -> list[str]:
        return self.ctx.store.tables()


def _serve(root) -> tuple[subprocess.Popen, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("IMP_")}
    env.update(IMP_LISTEN="127.0.0.1:0", IMP_ROOT=str(root), IMP_BACKEND="local",
               IMP_METRICS_LISTEN="off", IMP_SUPERVISE="off")  # the server itself killed
    proc = subprocess.Popen([sys.executable, "-m", "services.cli", "serve"], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    line = proc.stdout.readline()
    assert line.startswith("imp: serving on "), line
    return proc, line.rsplit(" ", 1)[1].strip()


def _stop(proc: subprocess.Popen, sig: int) -> None:
    proc.send_signal(sig)
    proc.wait(60)


def test_sequence_numbers_survive_kill_9(tmp_path):
    root = tmp_path / "root"
    fill_store(root)
    sql = "-- sketch: t1000g.a\n" + load_query("q_groups_1000").sql
    rng = np.random.default_rng(3)
    seen: dict[int, tuple[int, ...]] = {}
    last = 0
    for life in range(2):
        proc, address = _serve(root)
        try:
            with SketchClient(address) as client:
                if life == 0:
                    client.register("g", sql, fragments=16)
                else:
                    # the version the watcher saw is gone, not renamed
                    with pytest.raises(RemoteError) as gone:
                        client.sketch("g", seq=last)
                    assert gone.value.code == "OUT_OF_RANGE"
                    fresh = client.sketch("g")  # maintained by the restarted server
                    # (restored from its checkpoint, it may publish the checkpoint's
                    # version first: that one, too, numbered after the killed server's)
                    resumed = next(iter(client.watch("g", after_seq=last, timeout=30)))
                    assert last < resumed.seq <= fresh.seq
                    last = fresh.seq
                for step in range(3):
                    ins, dels = random_batch(DeltaStore(root), "t1000g", rng, 8,
                                             salt=50_000_000 + 1000 * life + 100 * step)
                    client.apply_update("t1000g", inserts=ins, deletes=dels)
                    record = client.sketch("g", include_partitions=True)
                    assert record.seq > last and record.seq not in seen
                    seen[record.seq] = tuple(record.fragments)
                    last = record.seq
                    assert client.sketch("g", seq=record.seq).fragments == record.fragments
        finally:
            _stop(proc, signal.SIGKILL if life == 0 else signal.SIGTERM)
    assert len(seen) == 6
    # and the last sketch is exact
    proc, address = _serve(root)
    try:
        with SketchClient(address) as client:
            record = client.sketch("g", include_partitions=True)
            assert record.seq > last
            assert record.sketch() == reference(_Tables(DeltaStore(root)),
                                                load_query("q_groups_1000").sql, record)
    finally:
        _stop(proc, signal.SIGTERM)


HANGING_SERVER = """
import sys, time
from imp_actors.coordinator import Coordinator
from services.cli.main import main
Coordinator.close = lambda self, checkpoint=True: time.sleep(1000)  # a shutdown that hangs
sys.exit(main(["serve"]))
"""


def test_sigterm_ends_the_process_whatever_runs(tmp_path):
    """Issue 13 P1: SIGTERM left a busy server running (kill -9 needed). Whatever hangs
    in the shutdown, the process ends within the grace period plus ten seconds."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("IMP_")}
    env.update(IMP_LISTEN="127.0.0.1:0", IMP_ROOT=str(tmp_path / "root"), IMP_METRICS_LISTEN="off",
               IMP_BACKEND="local", IMP_GRACE_SECONDS="1", IMP_SUPERVISE="off")
    proc = subprocess.Popen([sys.executable, "-c", HANGING_SERVER], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().startswith("imp: serving on ")
        t0 = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(timeout=60)
        assert time.monotonic() - t0 < 1 + 10 + 5
        assert code == 1 and "did not finish" in proc.stderr.read()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


@pytest.mark.ray
def test_kill_9_leaves_no_ray_processes_behind(tmp_path):
    """Issue 13: after kill -9 of a server that started a local Ray, Ray's dashboard and
    runtime-env agents stayed behind. The server's reaper (``imp_actors.reaper``) ends
    every process the server started once the server is gone."""
    from imp_actors.reaper import descendants

    root = tmp_path / "root"
    fill_store(root)
    env = {k: v for k, v in os.environ.items() if not k.startswith("IMP_")}
    env.update(IMP_LISTEN="127.0.0.1:0", IMP_ROOT=str(root), IMP_BACKEND="ray",
               IMP_METRICS_LISTEN="off", IMP_SUPERVISE="off")  # the server itself killed
    proc = subprocess.Popen([sys.executable, "-m", "services.cli", "serve"], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        line = proc.stdout.readline()
        assert line.startswith("imp: serving on "), line
        address = line.rsplit(" ", 1)[1].strip()
        with SketchClient(address) as client:  # a query actor too
            client.register("g", load_query("q_groups_1000").sql, partitions={"t1000g.a": 4})
        started = descendants(proc.pid)
        names = {(Path(f"/proc/{p}/cmdline").read_text().split("\0")[0]) for p in started}
        assert any("DashboardAgent" in n or "RuntimeEnvAgent" in n for n in names), names
        proc.kill()
        proc.wait(30)
        def alive() -> dict[int, int]:
            return {p: t for p, t in started.items() if _started_at(p) == t}

        wait_until(lambda: not alive(), timeout=60, interval=0.5,
                   what=lambda: {p: Path(f"/proc/{p}/cmdline").read_text() for p in alive()})
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def _started_at(pid: int) -> int | None:
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return int(text[text.rindex(")") + 2:].split()[19])
