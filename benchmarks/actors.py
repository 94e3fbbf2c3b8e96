"""``imp bench actors``: the actor runtime on a local Ray.

One service root under ``<data_root>/bench-actors`` holds the synthetic tables
(``t5000g`` with ``rows`` rows, clustered on ``a``); the coordinator runs its query
workers as Ray actors. Measured, each in the same run:

- ``getsketch_fresh_p50_ms`` / ``_p99_ms``: ``Coordinator.get_sketch(fresh=True)`` of a
  query whose sketch is already current (the version check against the Delta log is
  included);
- ``maintain_ms_delta1000`` (and ``_direct`` / ``_own``): lazy maintenance of
  ``q_having_2`` after a 1000-tuple delta committed by another writer, pulled through
  Spark (through delta-rs in-process; and for an update committed by the service itself,
  whose changes need no pull);
- ``restore_ms``: an evicted 5000-group query (``q_groups_5000``, 1000 fragments) back to
  current after a small update: actor, checkpoint load and catch-up;
- ``registered_queries`` / ``live_actors_max``: ``queries`` registrations (variants of the
  synthetic templates) under a cap of ``max_live`` live actors, every sketch then read
  fresh once and a sample checked against a recapture; the workers' resident memory;
- ``chaos_exact``: random query actors killed during a random workload, and the
  coordinator once; true when every final sketch equals the recapture.
"""

from __future__ import annotations

import shutil
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from benchmarks.common import environment, percentile

TEMPLATES = ("q_having_1", "q_having_2", "q_having_3", "q_groups_5000", "q_endtoend",
             "q_topk")


def _log(progress: bool, text: str) -> None:
    if progress:
        print(text, file=sys.stderr, flush=True)


def _update(store, rng: np.random.Generator, size: int, salt: int) -> tuple[pa.Table, pa.Table]:
    """Half deletions of stored rows, half the same rows re-inserted with ``b`` and ``c``
    permuted among them (values stay in their domains)."""
    data = store.read("t5000g")
    half = size // 2
    dels = data.take(pa.array(rng.choice(data.num_rows, half, replace=False), pa.int64()))
    ins = dels
    for col in ("b", "c"):
        perm = pa.array(rng.permutation(half), pa.int64())
        i = ins.schema.get_field_index(col)
        ins = ins.set_column(i, ins.schema.field(col), ins.column(col).take(perm))
    return ins, dels


def _spec(name: str, template: str, fragments: int, strategy=None):
    from imp_actors.runtime_config import Lazy
    from imp_actors.types import QuerySpec
    from imp_core.workloads.queries import load_query

    wq = load_query(template)
    return QuerySpec(name, wq.sql, partitions={f"{t}.{c}": fragments for t, c in wq.sketch},
                     strategy=strategy or Lazy())


def _rss_mib(pids: list[int]) -> float:
    total = 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/status") as f:
                for line in f:
                    if line.startswith("VmRSS:"):
                        total += int(line.split()[1])
        except OSError:
            continue
    return total / 1024


def run_actors_bench(rows: int = 1_000_000, queries: int = 200, max_live: int = 16,
                     calls: int = 2000, data_root: str = ".imp", chaos_steps: int = 12,
                     progress: bool = True) -> dict[str, Any]:
    from imp_actors.coordinator import Coordinator
    from imp_actors.runtime_config import EvictionPolicy, RuntimeConfig
    from imp_core.spark.session import get_spark
    from imp_core.workloads.schemas import TABLES
    from imp_core.workloads.synthetic import generate_groups_table

    root = Path(data_root) / "bench-actors"
    shutil.rmtree(root, ignore_errors=True)
    config = RuntimeConfig(root=str(root), backend="ray", warm_actors=2, poll_seconds=None,
                           eviction=EvictionPolicy(max_live_actors=max_live, idle_seconds=None),
                           checkpoint_every_batches=None)
    results: dict[str, Any] = {}
    rng = np.random.default_rng(7)
    _log(progress, f"generating t5000g ({rows:,} rows) ...")
    c = Coordinator(config)
    info = TABLES["t5000g"]
    c.ctx.store.create_table("t5000g", generate_groups_table(5000, rows, seed=3), key=info.key,
                         domains=info.domains, cluster_by=("a",))
    _log(progress, "starting Ray and the coordinator ...")
    c.start()
    spark_started = time.perf_counter()
    get_spark()
    results["spark_start_s"] = round(time.perf_counter() - spark_started, 2)
    try:
        # -- fresh sketch of a current query ------------------------------------------------
        c.register(_spec("having2", "q_having_2", 1000))
        c.get_sketch("having2")
        lat = []
        for _ in range(calls):
            t0 = time.perf_counter()
            c.get_sketch("having2", fresh=True)
            lat.append(1000 * (time.perf_counter() - t0))
        results["getsketch_fresh_p50_ms"] = round(percentile(lat, 50), 4)
        results["getsketch_fresh_p99_ms"] = round(percentile(lat, 99), 4)
        _log(progress, f"fresh GetSketch p50 {results['getsketch_fresh_p50_ms']} ms")

        # -- lazy maintenance of a 1000-tuple delta ----------------------------------------
        for path in ("spark", "direct", "own"):
            times = []
            for rep in range(4):
                ins, dels = _update(c.ctx.store, rng, 1000, 0)
                if path == "own":
                    c.apply_update("t5000g", inserts=ins, deletes=dels)
                else:
                    c.ctx.feed.path = path
                    c.ctx.store.apply("t5000g", inserts=ins, deletes=dels)  # another writer
                t0 = time.perf_counter()
                sv = c.get_sketch("having2", fresh=True)
                if rep:  # the first pull of a path warms it (Spark: schema of the files)
                    times.append(1000 * (time.perf_counter() - t0))
            c.ctx.feed.path = "auto"
            key = "maintain_ms_delta1000" + ("" if path == "spark" else f"_{path}")
            results[key] = round(float(np.median(times)), 2)
            _log(progress, f"{key}: {results[key]} ms")
        fm, fm_s = c.recapture("having2", sv.versions, sv.sketch.partitions)
        results["maintained_equals_recapture"] = fm == sv.sketch
        results["fm_s_having2"] = round(fm_s, 3)

        # -- restore of an evicted 5000-group query ------------------------------------------
        c.register(_spec("groups5000", "q_groups_5000", 1000))
        restores = []
        for _ in range(3):
            c.evict("groups5000")
            ins, dels = _update(c.ctx.store, rng, 100, 0)
            c.apply_update("t5000g", inserts=ins, deletes=dels)
            time.sleep(1.0)  # the warm pool refills in the background
            t0 = time.perf_counter()
            c.get_sketch("groups5000", fresh=True)
            restores.append(1000 * (time.perf_counter() - t0))
        results["restore_ms"] = round(float(np.median(restores)), 1)
        results["restore_state_bytes"] = c.info("groups5000").state_bytes
        _log(progress, f"restore {results['restore_ms']} ms")

        # -- many registrations under a live-actor cap ---------------------------------------
        live_max = c.stats()["live_actors"]
        t0 = time.perf_counter()
        for i in range(queries):
            template = TEMPLATES[i % len(TEMPLATES)]
            c.register(_spec(f"many{i:04d}", template, 64 + (i % 5) * 16))
            live_max = max(live_max, c.stats()["live_actors"])
            if progress and (i + 1) % 25 == 0:
                _log(progress, f"registered {i + 1}/{queries} "
                               f"(live actors {c.stats()['live_actors']})")
        results["register_s_per_query"] = round((time.perf_counter() - t0) / queries, 3)
        ins, dels = _update(c.ctx.store, rng, 200, 0)
        c.apply_update("t5000g", inserts=ins, deletes=dels)
        exact = True
        for i in range(queries):
            sv = c.get_sketch(f"many{i:04d}", fresh=True)
            live_max = max(live_max, c.stats()["live_actors"])
            if i % 40 == 0:
                fm, _ = c.recapture(f"many{i:04d}", sv.versions, sv.sketch.partitions)
                exact &= fm == sv.sketch
        stats = c.stats()
        results["registered_queries"] = stats["registered_queries"]
        results["live_actors_max"] = live_max
        results["many_sample_exact"] = exact
        results["evictions"] = stats["counters"].get("evictions", 0)
        # resident memory of every live worker process (query shards and warm workers)
        results["live_worker_rss_mib"] = round(_rss_mib(c.diagnostics.worker_pids()), 1)
        _log(progress, f"{results['registered_queries']} queries registered, at most "
                       f"{live_max} live actors")
        for name in [q.name for q in c.queries() if q.name.startswith("many")]:
            c.drop(name)
        results["chaos_exact"], c = _chaos(c, config, rng, chaos_steps, progress)
    finally:
        c.close()
        import ray

        ray.shutdown()
    return {"environment": environment(), "parameters": {
        "rows": rows, "queries": queries, "max_live": max_live, "calls": calls,
        "chaos_steps": chaos_steps}, "results": results}


def _chaos(c, config, rng: np.random.Generator, steps: int, progress: bool):
    """Kill random shard actors during a random workload, and the coordinator once
    (abandoned, as a crash leaves it, and replaced by a new one on the same state).
    Returns (exact, the coordinator in charge at the end)."""
    from dataclasses import replace

    from imp_actors.coordinator import Coordinator
    from imp_actors.runtime_config import Eager

    names = {"chaos_lazy": ("q_having_2", None, 1), "chaos_eager": ("q_endtoend", 50, 1),
             "chaos_sharded": ("q_groups_5000", None, 3)}
    for n, (template, batch, shards) in names.items():
        spec = _spec(n, template, 256, Eager(batch_tuples=batch) if batch else None)
        c.register(replace(spec, shards=shards))
    for step in range(steps):
        ins, dels = _update(c.ctx.store, rng, int(rng.integers(10, 200)), 0)
        c.apply_update("t5000g", inserts=ins, deletes=dels)
        if step % 3 == 1:
            name = list(names)[int(rng.integers(0, len(names)))]
            info = c.info(name)
            if info.state == "live":
                c.diagnostics.kill_shard(name, int(rng.integers(0, info.shards)))
        if step == steps // 2:
            c.abandon()
            c = Coordinator(config).start()
        c.get_sketch(list(names)[step % len(names)])
    exact = True
    for n in names:
        sv = c.get_sketch(n, fresh=True)
        fm, _ = c.recapture(n, sv.versions, sv.sketch.partitions)
        exact &= fm == sv.sketch
    _log(progress, f"chaos run exact: {exact}")
    return bool(exact), c


def summarize(report: dict[str, Any]) -> dict[str, Any]:
    r = report["results"]
    return {
        "fresh p50 <= 2 ms": r.get("getsketch_fresh_p50_ms", float("inf")) <= 2,
        "restore <= 1 s (5000 groups)": r.get("restore_ms", float("inf")) <= 1000,
        ">= 200 queries with <= 16 live actors": r.get("registered_queries", 0) >= 200
        and r.get("live_actors_max", 99) <= 16,
        "chaos exact": r.get("chaos_exact", False),
    }
