"""Issue 28, without Ray: the runtime watch (a lost runtime makes calls fail at once and
health NOT_SERVING, and its return SERVING), restarts (an evicted or not yet restored
query shows its kept version and its staleness; eager queries are restored at start),
the supervisor's restart rules, client fail-over between targets, and the operators'
metrics."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from collections import Counter

import numpy as np
import pytest
from runtime_support import fill_store, make_config, random_batch, reference_sketch, workload_spec
from waiting import wait_until

from imp_actors.coordinator import Coordinator
from imp_actors.runtime_config import Eager
from imp_actors.runtime_watch import RuntimeState, RuntimeWatch
from imp_core.errors import RuntimeUnavailableError
from imp_core.workloads.queries import load_query
from services.client import RemoteError, SketchClient
from services.server import SketchServer
from services.server_config import ServerConfig


@pytest.fixture
def root(tmp_path):
    fill_store(tmp_path / "svc", ("synthetic",))
    return tmp_path / "svc"


class FlakyBackend:
    """A backend whose runtime is lost or back as the test says."""

    kind = "ray"

    def __init__(self) -> None:
        self.broken: str | None = None
        self.lost: str | None = None

    def problem(self, timeout: float) -> str | None:
        return self.broken

    def mark_lost(self, reason: str | None) -> None:
        self.lost = reason


def test_the_watch_moves_between_up_and_down_and_tells_listeners_once():
    backend, counters, heard = FlakyBackend(), Counter(), []
    watch = RuntimeWatch(backend, counters, interval=0.05)
    watch.add_listener(lambda state, reason: heard.append((state, reason)))
    assert watch.probe() is RuntimeState.UP and heard == []
    backend.broken = "the local Ray's raylet (exit code -9) exited"
    assert watch.probe() is RuntimeState.DOWN
    assert watch.probe() is RuntimeState.DOWN  # no second report of the same loss
    assert backend.lost == backend.broken
    with pytest.raises(RuntimeUnavailableError, match="raylet .* exited.*nothing was done"):
        watch.check()
    backend.broken = None
    watch.start()  # the thread notices the return by itself
    wait_until(lambda: watch.state is RuntimeState.UP, timeout=5,
               what="the watch's thread to find the runtime back")
    watch.stop()
    assert watch.state is RuntimeState.UP and backend.lost is None
    watch.check()
    assert [s for s, _ in heard] == [RuntimeState.DOWN, RuntimeState.UP]
    assert counters["runtime_losses"] == 1 and counters["runtime_recoveries"] == 1


def test_a_lost_runtime_sets_health_not_serving_and_its_return_serving(root):
    """The health service said SERVING while the runtime was gone (issue 28)."""
    cfg = make_config(root)
    with Coordinator(cfg) as c:
        flaky = FlakyBackend()
        c.runtime.backend = flaky  # only the probe is replaced: the workers stay local
        server = SketchServer(ServerConfig(listen="127.0.0.1:0"), c).start()
        try:
            with SketchClient(server.address) as client:
                assert client.health() == "SERVING"
                flaky.broken = "the Ray cluster 10.0.0.1:6379 does not answer within 5 s"
                c.runtime.probe()
                assert client.health() == "NOT_SERVING"
                assert client.health("imp.v1.SketchService") == "NOT_SERVING"
                assert client.stats()["coordinator"]["runtime"]["state"] == "down"
                flaky.broken = None
                c.runtime.probe()
                assert client.health() == "SERVING"
                assert c.metrics().runtime_up
        finally:
            server.stop(0)


def test_restarted_queries_show_their_kept_version_and_eager_ones_are_restored(root):
    """After a restart ``imp ls`` showed "evicted seq 0 0/64 fragments" (a lost sketch,
    to a reader), an eager query stayed evicted until read and evicted queries published
    no staleness."""
    rng = np.random.default_rng(28)
    cfg = make_config(root, checkpoint_every_batches=1)
    with Coordinator(cfg) as c:
        c.register(workload_spec("lazy", "q_having_2"))
        c.register(workload_spec("eager", "q_endtoend", strategy=Eager(batch_tuples=1)))
        for step in range(2):
            ins, dels = random_batch(c.ctx.store, "t5000g", rng, 10, 9 * 10**7 + 100 * step)
            c.apply_update("t5000g", inserts=ins, deletes=dels)
            c.get_sketch("lazy")
        c.wait_idle(["eager", "lazy"])
        before = {n: c.info(n) for n in ("lazy", "eager")}
    ins, dels = random_batch(c.ctx.store, "t5000g", rng, 10, 9 * 10**7 + 900)
    c.ctx.store.apply("t5000g", inserts=ins, deletes=dels)  # committed while no server ran
    with Coordinator(cfg) as c2:
        lazy = c2.info("lazy")
        assert lazy.state == "evicted" and lazy.sketch_seq == before["lazy"].sketch_seq > 0
        assert lazy.sketch_fragments == before["lazy"].sketch_fragments
        assert lazy.versions == before["lazy"].versions
        stale = {m.name: m for m in c2.metrics().queries}["lazy"]
        assert stale.staleness_versions == 1 and stale.stale_since is not None
        # the eager one comes back by itself and catches up with the commit made meanwhile
        def caught_up():
            eager = c2.info("eager")
            return eager.state == "live" and eager.versions["t5000g"] == \
                c2.ctx.probe.latest("t5000g") and eager

        eager = wait_until(caught_up, timeout=60, what="the eager query to catch up")
        assert eager.sketch_seq > before["eager"].sketch_seq
        latest = c2.get_sketch("eager", fresh=False)
        assert latest.sketch == reference_sketch(c2, "eager", latest)


# -- the supervisor ---------------------------------------------------------------------------
CHILD = textwrap.dedent("""
    import os, sys, pathlib
    runs = pathlib.Path(sys.argv[1])
    n = len(runs.read_text().splitlines()) if runs.exists() else 0
    with runs.open("a") as f:
        f.write(os.environ["IMP_SERVER_RESTARTS"] + "\\n")
    codes = [int(c) for c in sys.argv[2].split(",")]
    sys.exit(codes[min(n, len(codes) - 1)])
""")


def _supervise(tmp_path, codes: str) -> tuple[int, list[str]]:
    script = tmp_path / "child.py"
    script.write_text(CHILD)
    runs = tmp_path / "runs"
    driver = textwrap.dedent(f"""
        import sys
        from services.supervisor import supervise
        sys.exit(supervise([], 5, [sys.executable, {str(script)!r}, {str(runs)!r},
                                   {codes!r}]))
    """)
    env = dict(os.environ)
    env.pop("IMP_SUPERVISOR_PID", None)
    proc = subprocess.run([sys.executable, "-c", driver], env=env, capture_output=True,
                          text=True, timeout=120)
    return proc.returncode, runs.read_text().split()


def test_the_supervisor_restarts_a_server_that_died_and_stops_on_a_clean_end(tmp_path):
    # a lost runtime (75), then a crash (1), then a clean stop
    code, runs = _supervise(tmp_path, "75,1,0")
    assert code == 0 and runs == ["0", "1", "2"]


def test_the_supervisor_does_not_restart_a_refused_start(tmp_path):
    code, runs = _supervise(tmp_path, "2")
    assert code == 2 and runs == ["0"]


def test_the_supervisor_passes_sigterm_on_and_ends_with_its_server(tmp_path):
    script = tmp_path / "server.py"
    script.write_text(textwrap.dedent("""
        import signal, sys, time
        signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
        print("ready", flush=True)
        time.sleep(60)
    """))
    driver = textwrap.dedent(f"""
        import sys
        from services.supervisor import supervise
        sys.exit(supervise([], 5, [sys.executable, {str(script)!r}]))
    """)
    proc = subprocess.Popen([sys.executable, "-c", driver], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "ready"
        t0 = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0 and time.monotonic() - t0 < 10
    finally:
        if proc.poll() is None:
            proc.kill()


# -- clients with several targets ----------------------------------------------------------
def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_a_client_fails_over_to_the_next_target(root):
    cfg = make_config(root)
    dead = f"127.0.0.1:{_free_port()}"  # nobody listens here
    with Coordinator(cfg) as c:
        server = SketchServer(ServerConfig(listen="127.0.0.1:0"), c).start()
        try:
            sql = load_query("q_having_2").sql
            with SketchClient(f"{dead},{server.address}", timeout=10, retries=0) as client:
                # not idempotent, but it never reached a server: safe to send elsewhere
                client.register("h", sql, partitions={"t5000g.a": 8})
                assert client.target == server.address and client.failovers == 1
                assert client.sketch("h").seq >= 1
            with SketchClient(dead, timeout=5, retries=0) as alone:
                with pytest.raises(RemoteError) as err:
                    alone.queries()
                assert err.value.code == "UNAVAILABLE" and err.value.kind is None
        finally:
            server.stop(0)
    with pytest.raises(ValueError, match="no target"):
        SketchClient(" , ")


def test_the_metrics_say_what_the_process_is(root):
    import urllib.request

    cfg = make_config(root)
    with Coordinator(cfg) as c:
        server = SketchServer(ServerConfig(listen="127.0.0.1:0",
                                           metrics_listen="127.0.0.1:0"), c).start()
        try:
            text = urllib.request.urlopen(f"http://{server.metrics_address}/metrics",
                                          timeout=10).read().decode()
        finally:
            server.stop(0)
    for name in ("process_resident_memory_bytes", "process_cpu_seconds_total",
                 "imp_build_info{", "imp_server_restarts_total", "imp_runtime_up 1.0",
                 "imp_ray_nodes_alive 1.0"):
        assert name in text, name
