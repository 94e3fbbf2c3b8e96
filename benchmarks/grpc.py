"""``imp bench grpc``: GetSketch over gRPC on a current sketch, 1 and 50 concurrent clients.

The server is the real ``imp serve`` in a subprocess (in-process coordinator, the
``local`` backend: what is measured is the front end, not Ray) over a fresh service root
holding ``t5000g`` with ``rows`` rows; ``q_having_2`` is registered through gRPC on
``fragments`` fragments and made current once. Each client is its own thread with its own
channels; clients are spread over client processes so that the client side is not one
Python interpreter. Every client calls GetSketch (freshness CURRENT: the server checks
the Delta log for new versions, finds none and answers with the kept sketch) back to
back for ``warmup`` seconds, then ``seconds`` more that are measured: latency per call
(percentiles over all clients' calls) and calls per second. Back to back, 50 clients
measure the server at saturation (latency = clients / throughput); a last round at the
largest client count paces each client at ``paced_rate`` calls per second, the latency
of a loaded but not saturated server.

Beside it, in the same run and with the same clients, a no-op Python gRPC server (only
the standard health service, as many threads as the service's pool) answers the health
Check: the ceiling of Python gRPC on this machine. The two are measured in alternate
rounds (``rounds`` each, AB BA AB ...) by the same client processes, whose channels stay
open from round to round: on 2 cores one round's throughput may differ from the next by
a fifth with nothing changed, so one round of each would compare the noise.
``ratio_to_noop`` is the service's mean calls per second over the no-op server's, at
each client count; ``ratio_to_noop_ci90`` a 90% bootstrap interval of it over the rounds.
"""

from __future__ import annotations

import math
import multiprocessing as mp
import os
import random
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
WATCHES = 1  # the served query's watch streams allowed (one thread each in the pool)


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
           "--log-level", "WARNING", "--max-watches", str(WATCHES), "--metrics-listen", "off",
           "--supervise", "off"]  # the measured process is the server itself
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


def _client_process(targets: list[tuple[str, str | None]], threads: int, conn: Any) -> None:
    """Runs ``threads`` clients, each with one channel to every target of ``targets``
    ((address, query): GetSketch of that query; query None: the health Check of the no-op
    server), kept open across rounds. Says "ready" once every channel is connected, then
    runs each round the parent sends (target index, start time, warm-up, seconds, rate)
    and sends back its measured latencies (seconds) and errors; None ends it."""
    import threading

    import grpc
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    from services.protos import pb, rpc

    def stub(address: str, query: str | None) -> tuple[Any, Any, Any]:
        channel = grpc.insecure_channel(address)
        if query is None:
            return channel, health_pb2_grpc.HealthStub(channel).Check, \
                health_pb2.HealthCheckRequest()
        return channel, rpc.SketchServiceStub(channel).GetSketch, \
            pb.GetSketchRequest(query=query, freshness=pb.FRESHNESS_CURRENT)

    latencies: list[list[float]] = [[] for _ in range(threads)]
    errors: list[str] = []
    connected = threading.Barrier(threads + 1)
    go = threading.Barrier(threads + 1)
    done = threading.Barrier(threads + 1)
    spec: dict[str, Any] = {}

    def run(i: int) -> None:
        calls = [stub(address, query) for address, query in targets]
        try:
            for _, call, request in calls:
                call(request, timeout=60)  # connect before any clock starts
        except grpc.RpcError as exc:  # reported with the first round
            errors.append(f"{exc.code().name}: {exc.details()}")
        connected.wait()
        go.wait()
        while spec["round"] is not None:
            index, start_at, warmup, seconds, rate = spec["round"]
            _, call, request = calls[index]
            mine = latencies[i]
            try:
                _one_round(call, request, mine, start_at, warmup, seconds, rate, i, threads)
            except grpc.RpcError as exc:
                errors.append(f"{exc.code().name}: {exc.details()}")
            done.wait()
            go.wait()
        for channel, _, _ in calls:
            channel.close()

    pool = [threading.Thread(target=run, args=(i,)) for i in range(threads)]
    spec["round"] = None
    for t in pool:
        t.start()
    connected.wait()
    conn.send("ready")
    while True:
        spec["round"] = conn.recv()
        go.wait()
        if spec["round"] is None:
            break
        done.wait()
        conn.send(([x for lat in latencies for x in lat], list(errors)))
        for lat in latencies:
            lat.clear()
        errors.clear()
    for t in pool:
        t.join()
    conn.close()


def _one_round(call: Any, request: Any, mine: list[float], start_at: float, warmup: float,
               seconds: float, rate: float, i: int, threads: int) -> None:
    """One client's calls of a round: back to back, or at ``rate`` calls per second."""
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


class _Clients:
    """``clients`` bench clients spread over ``processes`` processes, connected to every
    target once and reused for every round (no process start or connection set-up
    between the rounds being compared)."""

    def __init__(self, targets: list[tuple[str, str | None]], clients: int, processes: int):
        ctx = mp.get_context("spawn")
        self.clients = clients
        self.processes = max(1, min(processes, clients))
        share = [clients // self.processes + (1 if i < clients % self.processes else 0)
                 for i in range(self.processes)]
        self.conns, self.workers = [], []
        for threads in share:
            mine, theirs = ctx.Pipe()
            p = ctx.Process(target=_client_process, args=(targets, threads, theirs))
            p.start()
            theirs.close()
            self.conns.append(mine)
            self.workers.append(p)
        for conn in self.conns:
            if conn.recv() != "ready":
                raise RuntimeError("a bench client process did not start")

    def run(self, index: int, warmup: float, seconds: float, rate: float = 0.0
            ) -> tuple[list[float], list[str]]:
        """Every client calls target ``index`` for ``warmup`` + ``seconds``; the latencies
        (seconds) of the calls of the measured ``seconds``, and the errors."""
        start_at = time.time() + 0.2
        for conn in self.conns:
            conn.send((index, start_at, warmup, seconds, rate))
        latencies: list[float] = []
        errors: list[str] = []
        for conn in self.conns:
            lat, errs = conn.recv()
            latencies.extend(lat)
            errors.extend(errs)
        return latencies, errors

    def close(self) -> None:
        for conn in self.conns:
            try:
                conn.send(None)
            except OSError:
                pass
        for p in self.workers:
            p.join(30)
            if p.is_alive():
                p.kill()

    def __enter__(self) -> _Clients:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _figures(latencies: list[float], errors: list[str], seconds: float, clients: int,
             processes: int, rate: float = 0.0) -> dict[str, Any]:
    ms = [1000 * x for x in latencies]
    return {
        "mode": "paced" if rate else "back-to-back", "rate_per_client": rate or None,
        "clients": clients, "client_processes": processes, "calls": len(ms),
        "failed_calls": len(errors), "errors": errors[:5],
        "calls_per_s": round(len(ms) / seconds, 1),
        "getsketch_p50_ms": round(percentile(ms, 50), 3),
        "getsketch_p99_ms": round(percentile(ms, 99), 3),
        "getsketch_mean_ms": round(sum(ms) / len(ms), 3) if ms else float("nan"),
    }


def _compare(clients: _Clients, warmup: float, seconds: float, rounds: int
             ) -> dict[str, Any]:
    """The service (target 0) and the no-op server (target 1) measured alternately,
    ``rounds`` times each, in the order AB BA AB ... (the machine's state drifts and its
    throughput jumps between rounds: alternating keeps both out of the ratio). The
    service's figures are over all its rounds' calls; the ratio is of the two servers'
    mean throughputs."""
    runs: dict[int, list[tuple[list[float], list[str]]]] = {0: [], 1: []}
    for r in range(rounds):
        for index in ((0, 1) if r % 2 == 0 else (1, 0)):
            runs[index].append(clients.run(index, warmup, seconds))
    imp = _figures([x for lat, _ in runs[0] for x in lat],
                   [e for _, errs in runs[0] + runs[1] for e in errs],
                   seconds * rounds, clients.clients, clients.processes)
    noop = _figures([x for lat, _ in runs[1] for x in lat], [], seconds * rounds,
                    clients.clients, clients.processes)
    pairs = [(len(a) / seconds, len(b) / seconds) for (a, _), (b, _) in zip(runs[0], runs[1])]
    return {**imp, "rounds": rounds,
            "ratio_to_noop_ci90": _ratio_interval(pairs),
            "round_calls_per_s": [round(len(lat) / seconds, 1) for lat, _ in runs[0]],
            "noop_round_calls_per_s": [round(len(lat) / seconds, 1) for lat, _ in runs[1]],
            "mean_calls_per_s": imp["calls_per_s"],
            "noop_calls_per_s": noop["calls_per_s"],
            "noop_p50_ms": noop["getsketch_p50_ms"],
            "ratio_to_noop": round(imp["calls_per_s"] / noop["calls_per_s"], 3)
            if noop["calls_per_s"] else None}


def _ratio_interval(pairs: list[tuple[float, float]], draws: int = 2000,
                    seed: int = 0) -> list[float] | None:
    """A 90% bootstrap interval of the ratio of mean throughputs, resampling the rounds
    (each a pair: the service's round and the no-op server's next to it)."""
    if len(pairs) < 2:
        return None
    rnd = random.Random(seed)
    ratios = []
    for _ in range(draws):
        sample = [pairs[rnd.randrange(len(pairs))] for _ in pairs]
        noop = sum(b for _, b in sample)
        ratios.append(sum(a for a, _ in sample) / noop if noop else 0.0)
    ratios.sort()
    return [round(ratios[int(0.05 * draws)], 3), round(ratios[int(0.95 * draws) - 1], 3)]


def run_grpc_bench(clients: tuple[int, ...] | list[int] = CLIENTS, seconds: float = 2.0,
                   warmup: float = 0.5, rows: int = 20_000, fragments: int = 256,
                   processes: int = 0, workers: int = 16, paced_rate: float = 10.0,
                   progress: bool = True, rounds: int = 20) -> dict[str, Any]:
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
        # as many threads as the service's pool: its workers and its one watch thread
        noop, noop_target = _start_noop_server(workers + WATCHES)
        _log(progress, f"bench grpc: no-op server (health only) at {noop_target}")
        wq = load_query(QUERY)
        (table, column), = wq.sketch
        with SketchClient(target, timeout=300) as client:
            info = client.register(QUERY, wq.sql, partitions={f"{table}.{column}": fragments})
            sketch = client.sketch(QUERY)
            targets = [(target, QUERY), (noop_target, None)]
            results, paced = [], []
            for n in clients:
                procs = processes or min(os.cpu_count() or 1, math.ceil(n / 25))
                _log(progress, f"bench grpc: {n} client(s) in {procs} process(es), "
                     f"{rounds} rounds each of {warmup:g} s warm-up + {seconds:g} s, the "
                     "service and the no-op server alternately")
                with _Clients(targets, n, procs) as pool:
                    results.append(_compare(pool, warmup, seconds, rounds))
                    if paced_rate and n == max(clients):
                        _log(progress, f"bench grpc: {n} client(s) at {paced_rate:g} calls/s "
                             "each")
                        lat, errors = pool.run(0, warmup, seconds, paced_rate)
                        paced.append(_figures(lat, errors, seconds, n, pool.processes,
                                              paced_rate))
            server = client.stats()
        return {
            "bench": "grpc",
            "environment": environment(),
            "parameters": {"clients": list(clients), "seconds": seconds, "warmup": warmup,
                           "rounds": rounds, "load_at_start": list(load_start),
                           "load_at_end": list(os.getloadavg()),
                           "rows": rows, "fragments": fragments, "server_workers": workers,
                           "noop_threads": workers + WATCHES,
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
    out["ratio_to_noop_ci90"] = top.get("ratio_to_noop_ci90")
    out["ratio_to_noop_target"] = RATIO_TARGET
    out["ratio_to_noop_met"] = bool((top.get("ratio_to_noop") or 0) >= RATIO_TARGET)
    for r in report.get("paced", []):
        prefix = f"paced_{r['clients']}x{r['rate_per_client']:g}per_s"
        out[f"{prefix}_p50_ms"] = r["getsketch_p50_ms"]
        out[f"{prefix}_p99_ms"] = r["getsketch_p99_ms"]
    out["failed_calls"] = sum(r["failed_calls"] for r in rows + report.get("paced", []))
    return out
