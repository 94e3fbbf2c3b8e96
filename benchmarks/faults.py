"""``imp bench faults``: faults injected under a running service, and what they cost.

Four faults, each with updates streaming in and two registered queries (one lazy, one
eager) on ``t5000g``. Each batch is inserted under fresh ids into ``t5000g`` (keyed) and
into ``events`` (the same rows, keyless), through the client with an idempotency key per
batch: a batch cut off by the fault is sent again with its key until a server answers, so
every acknowledged batch can be found again, and a batch applied twice would show in the
keyless table as a repeated id.

- ``raylet``: ``kill -9`` of the raylet of the local Ray under a supervised
  ``imp serve`` (a real process, a real socket). The server ends, its supervisor starts
  a new one, which recovers the queries from checkpoints and the change feed.
- ``node``: a worker node of a 3-node Ray cluster (``ray.cluster_utils``) removed while
  a sharded query's actors run on it, under an in-process coordinator: the lost shards
  are restored on the other nodes from their checkpoints plus replay.
- ``failover`` (local backend) and ``failover_ray`` (each server with its own local
  Ray): ``kill -9`` of the active ``imp serve`` while a standby on the same store waits
  for its lease (its runtime already started); the client, given both addresses, goes on
  with the standby once it has taken over.

Per fault: ``recover_s``, from the fault to the first update acknowledged again;
``acked``, batches the service acknowledged; ``lost``, acknowledged rows missing from
either table at the end (goal: 0); ``duplicated``, rows of the keyless table applied more
than once (goal: 0); ``refused``, batches refused for good (the client gave up or was
refused; goal: 0); ``retried``, attempts the client sent again with their key;
``replayed``, batches a server found already committed by an attempt whose reply was lost;
``exact``, every query's fresh sketch at the end equals a recapture from scratch by the
reference evaluator at the same table versions.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable

import numpy as np
import pyarrow as pa

from benchmarks.common import environment
from benchmarks.paper_common import log

TABLE = "t5000g"
KEYLESS = "events"  # the same rows as TABLE's batches, in a table without a key
QUERIES = {"lazy": "q_having_2", "eager": "q_endtoend"}
FRESH_KEYS = 2_000_000_000  # inserted rows get keys from here on (beyond the generated)
FAULTS = ("raylet", "node", "failover", "failover_ray")
RETRY_S = 300.0  # how long the stream's client retries a batch cut off by a fault


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def make_store(root: Path, rows: int) -> None:
    """``t5000g`` with ``rows`` rows in a new table store at ``root``."""
    from imp_core.storage import DeltaStore
    from imp_core.workloads.schemas import TABLES
    from imp_core.workloads.synthetic import generate_groups_table

    info = TABLES[TABLE]
    store = DeltaStore(root)
    store.create_table(TABLE, generate_groups_table(5000, rows, seed=5),
                       key=info.key, domains=info.domains)
    store.create_table(KEYLESS, generate_groups_table(50, 100, seed=6), key=None)


class Stream:
    """Insert batches under fresh keys into TABLE and KEYLESS; remembers which were
    acknowledged."""

    def __init__(self, store_root: Path, batch: int, seed: int = 11):
        # the service's ``apply_update`` (a client's or a coordinator's), set once it runs
        self.apply: Callable[..., Any] = lambda *a, **k: None
        from imp_core.storage import DeltaStore

        self.template = DeltaStore(store_root).read(TABLE).slice(0, 5000)
        self.rng = np.random.default_rng(seed)
        self.batch = batch
        self.next_key = FRESH_KEYS
        self.acked: list[int] = []  # every acknowledged key (of both tables)
        self.refused = 0
        self.replayed = 0
        self.errors: list[str] = []

    def rows(self) -> tuple[pa.Table, list[int]]:
        pick = self.rng.choice(self.template.num_rows, self.batch, replace=False)
        rows = self.template.take(pa.array(pick, pa.int64()))
        keys = list(range(self.next_key, self.next_key + self.batch))
        self.next_key += self.batch
        i = rows.schema.get_field_index("id")
        return rows.set_column(i, rows.schema.field(i), pa.array(keys, pa.int64())), keys

    def send(self, times: int = 1) -> bool:
        """``times`` batches through ``self.apply``; True when the last was acknowledged."""
        ok = False
        for _ in range(times):
            ok = self._send_one()
        return ok

    def _send_one(self) -> bool:
        rows, keys = self.rows()
        try:
            for table in (TABLE, KEYLESS):
                done = self.apply(table, inserts=rows)
                self.replayed += bool(getattr(done, "replayed", False))
        except Exception as exc:  # refused for good: not acknowledged, so not counted
            self.refused += 1
            self.errors.append(str(exc)[:200])
            return False
        self.acked.extend(keys)
        return True

    def _ids(self, store_root: Path, table: str) -> list[int]:
        from imp_core.storage import DeltaStore

        ids = DeltaStore(store_root).read(table, columns=["id"]).column("id").to_pylist()
        return [i for i in ids if i >= FRESH_KEYS]

    def lost(self, store_root: Path) -> int:
        """Acknowledged rows missing from either table."""
        return sum(sum(1 for k in self.acked if k not in set(self._ids(store_root, t)))
                   for t in (TABLE, KEYLESS))

    def duplicated(self, store_root: Path) -> int:
        """Rows of the keyless table applied more than once (the keyed table refuses a
        repeated key, which ``refused`` counts)."""
        ids = self._ids(store_root, KEYLESS)
        return len(ids) - len(set(ids))

    def report(self, store_root: Path, batch: int) -> dict[str, Any]:
        return {"acked": len(self.acked) // batch, "refused": self.refused,
                "lost": self.lost(store_root), "duplicated": self.duplicated(store_root),
                "replayed": self.replayed, "errors": self.errors[:3]}


def exact_over_grpc(client: Any, store_root: Path) -> bool:
    """Every query's fresh sketch equals the reference evaluator's recapture."""
    from imp_core.oracle.reference import reference_capture
    from imp_core.sql import plan_sql
    from imp_core.storage import DeltaStore
    from imp_core.workloads.queries import load_query

    store = DeltaStore(store_root)
    ok = True
    for name, template in QUERIES.items():
        record = client.sketch(name, include_partitions=True)
        sketch = record.sketch()
        tables = {t: store.read(t, v) for t, v in record.versions.items()}
        plan = plan_sql(load_query(template).sql, {t: store.schema(t) for t in tables})
        ok &= reference_capture(plan, tables, sketch.partitions).sketch == sketch
    return bool(ok)


def _register(client: Any, fragments: int = 16) -> None:
    from imp_actors.runtime_config import Eager
    from imp_core.workloads.queries import load_query

    for name, template in QUERIES.items():
        wq = load_query(template)
        parts = {f"{t}.{c}": fragments for t, c in wq.sketch}
        client.register(name, wq.sql, partitions=parts,
                        strategy=Eager(batch_tuples=1) if name == "eager" else None)


def _serve(root: Path, port: int, backend: str, **env_extra: str) -> subprocess.Popen:
    env = {k: v for k, v in os.environ.items() if not k.startswith("IMP_")}
    env.update(IMP_LISTEN=f"127.0.0.1:{port}", IMP_ROOT=str(root), IMP_BACKEND=backend,
               IMP_METRICS_LISTEN="off", IMP_LEASE_SECONDS="5")
    env.update(env_extra)
    log_file = (root.parent / f"server-{port}.log").open("w")  # what went wrong, if any
    return subprocess.Popen([sys.executable, "-m", "services.cli", "serve"], env=env,
                            stdout=subprocess.DEVNULL, stderr=log_file,
                            start_new_session=True)


def _serving(address: str) -> bool:
    """``address`` answers SERVING now (False: it does not answer, or says otherwise)."""
    from services.client import RemoteError, SketchClient

    with SketchClient(address, timeout=5, retries=0) as client:
        try:
            return client.health(timeout=2) == "SERVING"
        except RemoteError:
            return False


def _wait_serving(address: str, timeout: float) -> float:
    """Seconds until ``address`` answers SERVING."""
    return _until(lambda: _serving(address), timeout, f"{address} did not serve")


def _wait_not_serving(address: str, timeout: float) -> None:
    """Until ``address`` stops answering SERVING (it ended, or lost its runtime)."""
    _until(lambda: not _serving(address), timeout, f"{address} still serves after the fault")


def _until(done: Callable[[], bool], timeout: float, what: str) -> float:
    """Seconds until ``done()`` holds (tried every 0.2 s); ``TimeoutError`` naming
    ``what`` past ``timeout``."""
    t0 = time.monotonic()
    while not done():
        if time.monotonic() - t0 > timeout:
            raise TimeoutError(f"{what} within {timeout:.0f} s")
        time.sleep(0.2)
    return time.monotonic() - t0


def _succeeds(call: Callable[[], Any]) -> bool:
    try:
        call()
    except Exception:  # refused or cut off: the service is not back yet
        return False
    return True


def _all_sketches(client: Any) -> bool:
    """Every query's current sketch could be had (maintained first)."""
    return _succeeds(lambda: [client.sketch(name) for name in QUERIES])


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)


def raylet_fault(work: Path, rows: int = 50_000, batches: int = 8, batch: int = 20,
                 progress: bool = False) -> dict[str, Any]:
    """``kill -9`` of the local raylet under a supervised ``imp serve``."""
    from imp_actors.reaper import descendants
    from services.client import SketchClient

    root = work / "raylet"
    make_store(root, rows)
    port = free_port()
    address = f"127.0.0.1:{port}"
    proc = _serve(root, port, "ray")
    stream = Stream(root, batch)
    try:
        _wait_serving(address, 300)
        # a batch cut off by the fault is sent again with its key until a server answers
        with SketchClient(address, timeout=60, retry_seconds=RETRY_S) as client:
            stream.apply = client.apply_update
            _register(client)
            stream.send(batches // 2)
            client.sketch("lazy")
            raylets = [p for p in descendants(proc.pid)
                       if "raylet" in Path(f"/proc/{p}/cmdline").read_text()]
            if not raylets:
                raise RuntimeError("no raylet found under the server")
            log(progress, f"  raylet: kill -9 {raylets[0]}")
            t0 = time.monotonic()
            os.kill(raylets[0], signal.SIGKILL)
            # the server notices within a probe (2 s), meanwhile it may still answer: what
            # counts is the first server that serves after it has let go
            _wait_not_serving(address, 60)
            # recovered once an update is taken and every sketch maintained over it (the
            # old server may still commit an update before it notices the loss: its
            # maintenance then fails, as its actors went with the raylet)
            _until(lambda: stream.send() and _all_sketches(client), 300,
                   "no server maintained the sketches")
            recover = time.monotonic() - t0
            stream.send(batches // 2)
            exact = exact_over_grpc(client, root)
            restarts = client.stats()["coordinator"]["counters"]
            retried = client.retried
    finally:
        _stop(proc)
    return {"fault": "raylet", "recover_s": round(recover, 2), **stream.report(root, batch),
            "retried": retried, "exact": exact, "restored": restarts.get("restores", 0)}


def failover_fault(work: Path, rows: int = 50_000, batches: int = 8, batch: int = 20,
                   progress: bool = False, backend: str = "local") -> dict[str, Any]:
    """``kill -9`` of the active server; a standby on the same store, its runtime started
    while it waited, takes over. ``backend``: of both servers ("ray": each its own Ray)."""
    from services.client import SketchClient

    name = "failover" if backend == "local" else f"failover_{backend}"
    root = work / name
    make_store(root, rows)
    ports, metrics = (free_port(), free_port()), (free_port(), free_port())
    # no supervisor: the standby is what recovers from the kill here
    active = _serve(root, ports[0], backend, IMP_SUPERVISE="off",
                    IMP_METRICS_LISTEN=f"127.0.0.1:{metrics[0]}")
    _wait_serving(f"127.0.0.1:{ports[0]}", 300)
    standby = _serve(root, ports[1], backend, IMP_STANDBY="on", IMP_SUPERVISE="off",
                     IMP_METRICS_LISTEN=f"127.0.0.1:{metrics[1]}")
    stream = Stream(root, batch)
    try:
        _until(lambda: "standby:" in _log_of(root, ports[1]), 300,
               "the standby did not get ready")  # its runtime started, waiting
        targets = ",".join(f"127.0.0.1:{p}" for p in ports)
        with SketchClient(targets, timeout=30, retry_seconds=RETRY_S) as client:
            stream.apply = client.apply_update
            _register(client)
            stream.send(batches // 2)
            log(progress, f"  {name}: kill -9 the active server {active.pid}")
            t0 = time.monotonic()
            os.killpg(active.pid, signal.SIGKILL)
            active.wait(10)
            _until(stream.send, 120, "the standby took no update")
            recover = time.monotonic() - t0
            stream.send(batches // 2)
            exact = exact_over_grpc(client, root)
            took_over = client.stats()["coordinator"]["counters"].get("lease_takeovers", 0)
            target = client.target
            retried = client.retried
            takeovers_metric = _metric_takeovers(metrics[1])
    finally:
        _stop(active)
        _stop(standby)
    took_line = next((line for line in _log_of(root, ports[1]).splitlines()
                      if "took the store" in line), "")
    return {"fault": name, "backend": backend, "recover_s": round(recover, 2),
            **stream.report(root, batch), "retried": retried, "exact": exact,
            "lease_takeovers": took_over, "takeovers_metric": takeovers_metric,
            "takeover_logged": bool(took_line),
            "served_by_standby": target == f"127.0.0.1:{ports[1]}"}


def _log_of(root: Path, port: int) -> str:
    path = root.parent / f"server-{port}.log"
    return path.read_text(errors="replace") if path.exists() else ""


def _metric_takeovers(port: int) -> float | None:
    """``imp_coordinator_events_total{event="lease_takeovers"}`` of the metrics endpoint
    on ``port``, or None when it does not answer."""
    import urllib.request

    address = f"127.0.0.1:{port}"
    try:
        text = urllib.request.urlopen(f"http://{address}/metrics", timeout=5).read().decode()
    except OSError:
        return None
    for line in text.splitlines():
        if line.startswith("imp_coordinator_events_total{") and \
                'event="lease_takeovers"' in line:
            return float(line.rsplit(" ", 1)[1])
    return 0.0


def node_fault(work: Path, rows: int = 50_000, batches: int = 8, batch: int = 20,
               progress: bool = False, cluster: Any = None) -> dict[str, Any]:
    """A worker node of a 3-node cluster removed while a query's shards run on it."""
    import ray

    from imp_actors.coordinator import Coordinator
    from imp_actors.runtime_config import EvictionPolicy, RuntimeConfig

    own = cluster is None
    if own:
        from ray.cluster_utils import Cluster

        cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1})
        for _ in range(2):
            cluster.add_node(num_cpus=1)
        cluster.wait_for_nodes()
    root = work / "node"
    make_store(root, rows)
    config = RuntimeConfig(root=str(root), backend="ray", ray_address=cluster.address,
                           warm_actors=0, poll_seconds=None, checkpoint_every_batches=2,
                           eviction=EvictionPolicy(max_live_actors=None, idle_seconds=None))
    stream = Stream(root, batch)
    c = Coordinator(config).start()
    try:
        _register(_Embedded(c))
        c.scale("lazy", 3)
        stream.apply = c.apply_update
        stream.send(batches // 2)
        c.get_sketch("lazy")
        # neither the head nor the raylet this driver attached to (with several raylets
        # on one address the driver may attach to a worker node's) may be removed
        keep = {cluster.head_node.node_id, ray.get_runtime_context().get_node_id()}
        shard_nodes = c.diagnostics.nodes("lazy")
        victim = next((n for n in cluster.worker_nodes
                       if n.node_id in set(shard_nodes) - keep), None)
        if victim is None:
            raise AssertionError(f"no shard of 'lazy' on a removable worker node: shards on "
                                 f"{shard_nodes}, head and driver on {sorted(keep)}")
        log(progress, f"  node: removing worker node {victim.node_id[:8]}")
        t0 = time.monotonic()
        cluster.remove_node(victim, allow_graceful=False)
        # until the cluster has marked the node dead its orphaned actor processes may
        # still answer; recovery counts from the fault, detection included
        _until(lambda: not any(n["NodeID"] == victim.node_id and n["Alive"]
                               for n in ray.nodes()), 120, "the removed node was not marked dead")
        stream.send()
        _until(lambda: _succeeds(lambda: c.get_sketch("lazy")), 300,
               "the lost shards were not recovered")
        recover = time.monotonic() - t0
        stream.send(batches // 2 - 1)
        exact = all(_exact_embedded(c, n) for n in QUERIES)
        moved = sorted(set(c.diagnostics.nodes("lazy")))
        restarts = sum(m.restarts for m in c.metrics().queries)
    finally:
        c.close()
        if own:
            ray.shutdown()
            cluster.shutdown()
    return {"fault": "node", "recover_s": round(recover, 2), **stream.report(root, batch),
            "exact": exact, "shard_restarts": restarts,
            "victim_gone": victim.node_id not in moved}


class _Embedded:
    """``register`` of the client, on an in-process coordinator."""

    def __init__(self, c: Any):
        self.c = c

    def register(self, name: str, sql: str, partitions: dict, strategy: Any = None) -> None:
        from imp_actors.runtime_config import Lazy
        from imp_actors.types import QuerySpec

        self.c.register(QuerySpec(name, sql, partitions=partitions,
                                  strategy=strategy or Lazy()))


def _exact_embedded(c: Any, name: str) -> bool:
    from imp_core.oracle.reference import reference_capture

    sv = c.get_sketch(name)
    tables = {t: c.ctx.store.read(t, v) for t, v in sv.versions.items()}
    return reference_capture(c.ctx.queries.get(name).plan, tables, sv.sketch.partitions).sketch \
        == sv.sketch


def run_faults_bench(faults: tuple[str, ...] = FAULTS, rows: int = 50_000,
                     batches: int = 8, work: str | Path = ".imp/bench-faults",
                     progress: bool = True) -> dict[str, Any]:
    import shutil

    work = Path(work)
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    run: dict[str, Callable[..., dict[str, Any]]] = {
        "raylet": raylet_fault, "node": node_fault, "failover": failover_fault,
        "failover_ray": lambda *a, **k: failover_fault(*a, backend="ray", **k)}
    results = []
    for fault in faults:
        log(progress, f"fault {fault} ...")
        results.append(run[fault](work, rows=rows, batches=batches, progress=progress))
        log(progress, f"  {results[-1]}")
    return {"suite": "faults", "environment": environment(),
            "parameters": {"faults": list(faults), "rows": rows, "batches": batches},
            "results": results,
            "summary": {"updates_lost": sum(r["lost"] for r in results),
                        "updates_duplicated": sum(r["duplicated"] for r in results),
                        "updates_refused": sum(r["refused"] for r in results),
                        "all_exact": all(r["exact"] for r in results),
                        "failover_s": {r["backend"]: r["recover_s"] for r in results
                                       if r["fault"].startswith("failover")}}}
