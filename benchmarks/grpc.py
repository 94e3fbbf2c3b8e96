"""``imp bench grpc``: GetSketch over gRPC on a current sketch, 1 and 50 concurrent clients.

The server is the real ``imp serve`` in a subprocess (in-process coordinator, the
``local`` backend: what is measured is the front end, not Ray) over a fresh service root
holding ``t5000g`` with ``rows`` rows; ``q_having_2`` is registered through gRPC on
``fragments`` fragments and made current once. Each client is its own channel and
thread; clients are spread over client processes so that the client side is not one
Python interpreter. Every client calls GetSketch (freshness CURRENT: the server checks
the Delta log for new versions, finds none and answers with the kept sketch) back to
back for ``warmup`` seconds, then ``seconds`` more that are measured: latency per call
(percentiles over all clients' calls) and calls per second. Back to back, 50 clients
measure the server at saturation (latency = clients / throughput); a second run at the
largest client count paces each client at ``paced_rate`` calls per second, the latency
of a loaded but not saturated server.

Beside it, in the same run and with the same client processes, a no-op Python gRPC
server (only the standard health service, the same number of threads) answers the
health Check: the ceiling of Python gRPC on this machine. ``ratio_to_noop`` is the
service's calls per second over the no-op server's at each client count.
"""

from __future__ import annotations

import math
import multiprocessing as mp
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.common import environment, percentile

CLIENTS = (1, 50)
QUERY = "q_having_2"
TARGETS = {"getsketch_p50_ms": 2.0, "getsketch_p99_ms": 10.0}  # at 50 clients
RATIO_TARGET = 0.9  # of the no-op server's calls per second, at 50 clients


def _log(progress: bool, text: str) -> None:
    if progress:
        print(text, file=sys.stderr, flush=True)


def _make_root(root: Path, rows: int) -> None:
    from imp_core.storage import DeltaStore
    from imp_core.workloads.schemas import TABLES
    from imp_core.workloads.synthetic import generate_groups_table

    info = TABLES["t5000g"]
    DeltaStore(root).create_table("t5000g", generate_groups_table(5000, rows, seed=1),
                                  key=info.key, domains=info.domains, cluster_by=("a",))


def _start_server(root: Path, workers: int) -> tuple[subprocess.Popen, str]:
    """``imp serve`` on a free loopback port; returns the process and its address."""
    cmd = [sys.executable, "-m", "services.cli", "serve", "--listen", "127.0.0.1:0",
           "--root", str(root), "--backend", "local", "--workers", str(workers),
           "--log-level", "WARNING", "--max-watches", "1", "--metrics-listen", "off"]
    env = {k: v for k, v in os.environ.items() if not k.startswith("IMP_")}
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True, env=env)
    return proc, _address(proc, "imp: serving on ")


def _address(proc: subprocess.Popen, banner: str) -> str:
    """The address a server process prints after ``banner`` on its first line."""
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if not line.startswith(banner):
        proc.kill()
        raise RuntimeError(f"the server did not start (said {line!r}, exit {proc.poll()})")
    return line.split(banner, 1)[1].strip()


NOOP_SERVER = """
import sys, time
from concurrent import futures
import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
server = grpc.server(futures.ThreadPoolExecutor(max_workers=int(sys.argv[1])))
servicer = health.HealthServicer()
servicer.set("", health_pb2.HealthCheckResponse.SERVING)
health_pb2_grpc.add_HealthServicer_to_server(servicer, server)
port = server.add_insecure_port("127.0.0.1:0")
server.start()
print(f"noop: serving on 127.0.0.1:{port}", flush=True)
server.wait_for_termination()
"""


def _start_noop_server(workers: int) -> tuple[subprocess.Popen, str]:
    """A Python gRPC server with only the health service (``workers`` threads)."""
    proc = subprocess.Popen([sys.executable, "-c", NOOP_SERVER, str(workers)],
                            stdout=subprocess.PIPE, text=True)
    return proc, _address(proc, "noop: serving on ")


def _stop(proc: subprocess.Popen | None) -> None:
    if proc is None:
        return
    proc.terminate()
    try:
        proc.wait(30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def _client_process(target: str, query: str | None, threads: int, warmup: float,
                    seconds: float, rate: float, conn: Any) -> None:
    """Runs ``threads`` clients (one channel each), back to back or, with ``rate``, each
    at ``rate`` calls per second. Says "ready" once every client is connected, waits for
    the common start time, then sends back the measured latencies (seconds) and errors.
    ``query``: GetSketch of that query; None: the health Check (the no-op server)."""
    import threading

    import grpc
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    from services.protos import pb, rpc

    if query is None:
        request: Any = health_pb2.HealthCheckRequest()
    else:
        request = pb.GetSketchRequest(query=query, freshness=pb.FRESHNESS_CURRENT)
    latencies: list[list[float]] = [[] for _ in range(threads)]
    errors: list[str] = []
    connected = threading.Barrier(threads + 1)
    start = threading.Event()
    clock: dict[str, float] = {}

    def run(i: int) -> None:
        channel = grpc.insecure_channel(target)
        call = health_pb2_grpc.HealthStub(channel).Check if query is None else \
            rpc.SketchServiceStub(channel).GetSketch
        mine = latencies[i]
        try:
            try:
                call(request, timeout=60)  # connect before the clock starts
            finally:
                connected.wait()
            start.wait()
            start_at = clock["start"]
            measure_from, stop_at = start_at + warmup, start_at + warmup + seconds
            while time.time() < start_at:
                time.sleep(0.0005)
            # paced clients start spread over one period, not all at once
            due = start_at + (i / threads) / rate if rate else 0.0
            while True:
                if rate:
                    due += 1.0 / rate
                    wait = due - time.time()
                    if wait > 0:
                        time.sleep(wait)
                t0 = time.perf_counter()
                now = time.time()
                if now >= stop_at:
                    break
                call(request, timeout=60)
                if now >= measure_from:
                    mine.append(time.perf_counter() - t0)
        except grpc.RpcError as exc:
            errors.append(f"{exc.code().name}: {exc.details()}")
        finally:
            channel.close()

    pool = [threading.Thread(target=run, args=(i,)) for i in range(threads)]
    for t in pool:
        t.start()
    connected.wait()
    conn.send("ready")
    clock["start"] = conn.recv()
    start.set()
    for t in pool:
        t.join()
    conn.send(([x for lat in latencies for x in lat], errors))
    conn.close()


def _measure(target: str, query: str | None, clients: int, processes: int, warmup: float,
             seconds: float, rate: float = 0.0) -> dict[str, Any]:
    ctx = mp.get_context("spawn")
    procs = max(1, min(processes, clients))
    share = [clients // procs + (1 if i < clients % procs else 0) for i in range(procs)]
    conns, workers = [], []
    for threads in share:
        mine, theirs = ctx.Pipe()
        p = ctx.Process(target=_client_process,
                        args=(target, query, threads, warmup, seconds, rate, theirs))
        p.start()
        theirs.close()
        conns.append(mine)
        workers.append(p)
    for conn in conns:
        if conn.recv() != "ready":
            raise RuntimeError("a bench client process did not start")
    start_at = time.time() + 0.2
    for conn in conns:
        conn.send(start_at)
    latencies: list[float] = []
    errors: list[str] = []
    for conn in conns:
        lat, errs = conn.recv()
        latencies.extend(lat)
        errors.extend(errs)
    for p in workers:
        p.join()
    ms = [1000 * x for x in latencies]
    return {
        "mode": "paced" if rate else "back-to-back", "rate_per_client": rate or None,
        "clients": clients, "client_processes": procs, "calls": len(ms),
        "failed_calls": len(errors), "errors": errors[:5],
        "calls_per_s": round(len(ms) / seconds, 1),
        "getsketch_p50_ms": round(percentile(ms, 50), 3),
        "getsketch_p99_ms": round(percentile(ms, 99), 3),
        "getsketch_mean_ms": round(sum(ms) / len(ms), 3) if ms else float("nan"),
    }


def _compare(target: str, noop_target: str, clients: int, procs: int, warmup: float,
             seconds: float, rounds: int) -> dict[str, Any]:
    """The service and the no-op server measured alternately, ``rounds`` times each (the
    machine's state drifts: alternating keeps it out of the ratio); the service's figures
    of its median round, with the summed calls per second of both and their ratio."""
    imps, bases = [], []
    for _ in range(rounds):
        imps.append(_measure(target, QUERY, clients, procs, warmup, seconds))
        bases.append(_measure(noop_target, None, clients, procs, warmup, seconds))
    imp = sorted(imps, key=lambda r: r["calls_per_s"])[len(imps) // 2]
    imp_rate = sum(r["calls_per_s"] for r in imps) / rounds
    noop_rate = sum(r["calls_per_s"] for r in bases) / rounds
    return {**imp, "rounds": rounds,
            "round_calls_per_s": [r["calls_per_s"] for r in imps],
            "noop_round_calls_per_s": [r["calls_per_s"] for r in bases],
            "mean_calls_per_s": round(imp_rate, 1),
            "noop_calls_per_s": round(noop_rate, 1),
            "noop_p50_ms": sorted(r["getsketch_p50_ms"] for r in bases)[rounds // 2],
            "ratio_to_noop": round(imp_rate / noop_rate, 3) if noop_rate else None}


def run_grpc_bench(clients: tuple[int, ...] | list[int] = CLIENTS, seconds: float = 5.0,
                   warmup: float = 1.0, rows: int = 20_000, fragments: int = 256,
                   processes: int = 0, workers: int = 16, paced_rate: float = 10.0,
                   progress: bool = True, rounds: int = 3) -> dict[str, Any]:
    from imp_core.workloads.queries import load_query
    from services.client import SketchClient

    root = Path(tempfile.mkdtemp(prefix="imp-bench-grpc-"))
    load_start = os.getloadavg()
    proc = noop = None
    try:
        _log(progress, f"bench grpc: t5000g with {rows:,} rows in {root}")
        _make_root(root, rows)
        proc, target = _start_server(root, workers)
        _log(progress, f"bench grpc: imp serve (local backend) at {target}")
        noop, noop_target = _start_noop_server(workers)
        _log(progress, f"bench grpc: no-op server (health only) at {noop_target}")
        wq = load_query(QUERY)
        (table, column), = wq.sketch
        with SketchClient(target, timeout=300) as client:
            info = client.register(QUERY, wq.sql, partitions={f"{table}.{column}": fragments})
            sketch = client.sketch(QUERY)
            results = []
            for n in clients:
                procs = processes or min(os.cpu_count() or 1, math.ceil(n / 25))
                _log(progress, f"bench grpc: {n} client(s) in {procs} process(es), "
                     f"{rounds} round(s) of {warmup:g} s warm-up + {seconds:g} s against "
                     "the service, then the no-op server")
                results.append(_compare(target, noop_target, n, procs, warmup, seconds,
                                        rounds))
            paced = []
            if paced_rate:
                n = max(clients)
                procs = processes or min(os.cpu_count() or 1, math.ceil(n / 25))
                _log(progress, f"bench grpc: {n} client(s) at {paced_rate:g} calls/s each")
                paced.append(_measure(target, QUERY, n, procs, warmup, seconds, paced_rate))
            server = client.stats()
        return {
            "bench": "grpc",
            "environment": environment(),
            "parameters": {"clients": list(clients), "seconds": seconds, "warmup": warmup,
                           "rounds": rounds, "load_at_start": list(load_start),
                           "load_at_end": list(os.getloadavg()),
                           "rows": rows, "fragments": fragments, "server_workers": workers,
                           "paced_rate_per_client": paced_rate,
                           "query": QUERY, "backend": "local",
                           "sketch_fragments": len(sketch.fragments),
                           "sketch_ranges": sum(len(t.ranges) for t in sketch.tables),
                           "state_bytes": info.state_bytes},
            "results": results,
            "paced": paced,
            "server": server,
        }
    finally:
        _stop(proc)
        _stop(noop)
        shutil.rmtree(root, ignore_errors=True)


def summarize(report: dict[str, Any]) -> dict[str, Any]:
    """The figures at the largest client count against the targets."""
    rows = report["results"]
    if not rows:
        return {}
    top = max(rows, key=lambda r: r["clients"])
    out: dict[str, Any] = {"clients": top["clients"]}
    for key, target in TARGETS.items():
        out[key] = top[key]
        out[f"{key}_target"] = target
        out[f"{key}_met"] = bool(top[key] <= target)
    out["calls_per_s"] = top["calls_per_s"]
    out["noop_calls_per_s"] = top.get("noop_calls_per_s")
    out["ratio_to_noop"] = top.get("ratio_to_noop")
    out["ratio_to_noop_target"] = RATIO_TARGET
    out["ratio_to_noop_met"] = bool((top.get("ratio_to_noop") or 0) >= RATIO_TARGET)
    for r in report.get("paced", []):
        prefix = f"paced_{r['clients']}x{r['rate_per_client']:g}per_s"
        out[f"{prefix}_p50_ms"] = r["getsketch_p50_ms"]
        out[f"{prefix}_p99_ms"] = r["getsketch_p99_ms"]
    out["failed_calls"] = sum(r["failed_calls"] for r in rows + report.get("paced", []))
    return out
