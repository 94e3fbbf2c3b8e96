"""``imp bench engine``: in-process maintenance throughput of the incremental engine.

For ``q_having_2`` (5000 groups) and ``q_joinsel`` it bootstraps the pipeline on a
synthetic table, then applies mixed batches (half inserts of fresh rows, half deletes of
live rows) of each delta size, for each fragment count, and reports delta tuples per
second and the batch-latency percentiles. No Spark, no Ray: only the engine.
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass
from typing import Any, Iterable

import numpy as np
import pyarrow as pa

from benchmarks.common import environment, percentile
from imp_core.engine.operators.base import TableDelta
from imp_core.engine.pipeline import EngineOptions, IncrementalQuery
from imp_core.sketch.partition import PartitionSet, RangePartition
from imp_core.sql import plan_sql
from imp_core.workloads.queries import load_query
from imp_core.workloads.schemas import catalog
from imp_core.workloads.synthetic import generate_groups_table, generate_joinhelp

QUERIES = ("q_having_2", "q_joinsel")
DELTA_SIZES = (10, 100, 1000, 10000)
FRAGMENTS = (10, 100, 1000, 5000)


@dataclass
class _Table:
    """A growing table with a live mask, to draw valid deletions from."""

    data: pa.Table
    alive: np.ndarray
    next_id: int
    rng: np.random.Generator

    def batch(self, size: int, groups: int) -> TableDelta:
        n_del = size // 2
        n_ins = size - n_del
        live = np.flatnonzero(self.alive)
        dels = self.rng.choice(live, size=min(n_del, len(live)), replace=False)
        self.alive[dels] = False
        fresh = generate_groups_table(groups, max(n_ins, 1), seed=int(self.rng.integers(1 << 30)))
        fresh = fresh.slice(0, n_ins)
        ids = np.arange(self.next_id, self.next_id + n_ins, dtype=np.int64)
        fresh = fresh.set_column(0, self.data.schema.field("id"), pa.array(ids))
        self.next_id += n_ins
        rows = pa.concat_tables([self.data.take(pa.array(dels, type=pa.int64())), fresh])
        self.data = pa.concat_tables([self.data, fresh])
        self.alive = np.concatenate([self.alive, np.ones(n_ins, dtype=bool)])
        weights = np.concatenate([-np.ones(len(dels), np.int64), np.ones(n_ins, np.int64)])
        return TableDelta(rows, weights)


def run_engine_bench(rows: int = 200_000, queries: Iterable[str] = QUERIES,
                     delta_sizes: Iterable[int] = DELTA_SIZES,
                     fragments: Iterable[int] = FRAGMENTS, min_seconds: float = 0.5,
                     min_batches: int = 5, max_batches: int = 200, seed: int = 0,
                     progress: bool = True) -> dict[str, Any]:
    cat = catalog()
    results: list[dict[str, Any]] = []
    delta_sizes, fragments = list(delta_sizes), list(fragments)
    for qname in queries:
        wq = load_query(qname)
        plan = plan_sql(wq.sql, cat)
        base = generate_groups_table(5000, rows, seed=seed)
        helper = generate_joinhelp(500, groups=5000, fanout=1, selectivity=0.1, seed=seed) \
            if "tjoinhelp" in plan.root.tables() else None
        for nfrag in fragments:
            part = RangePartition.equi_depth("t5000g", "a", base.column("a"), nfrag)
            pset = PartitionSet((part,))
            pipe = IncrementalQuery(plan, pset, EngineOptions(keep_result=False))
            t0 = time.perf_counter()
            init = {"t5000g": TableDelta.inserts(base)}
            if helper is not None:
                init["tjoinhelp"] = TableDelta.inserts(helper)
            pipe.apply(init)
            bootstrap = time.perf_counter() - t0
            table = _Table(base, np.ones(rows, dtype=bool), rows + 1,
                           np.random.default_rng(seed + nfrag))
            for size in delta_sizes:
                times: list[float] = []
                spent = 0.0
                while len(times) < max_batches and (len(times) < min_batches
                                                     or spent < min_seconds):
                    delta = table.batch(size, 5000)
                    t1 = time.perf_counter()
                    pipe.apply({"t5000g": delta})
                    dt = time.perf_counter() - t1
                    times.append(dt)
                    spent += dt
                row = {
                    "query": qname, "delta_size": size, "fragments": part.size,
                    "fragments_requested": nfrag, "table_rows": rows,
                    "tuples_per_s": round(size * len(times) / spent, 1),
                    "batch_ms_p50": round(1000 * percentile(times, 50), 4),
                    "batch_ms_p95": round(1000 * percentile(times, 95), 4),
                    "batches": len(times), "bootstrap_s": round(bootstrap, 4),
                    "state_bytes": pipe.state_bytes(),
                    "sketch_fragments": len(pipe.sketch().fragments),
                }
                results.append(row)
                if progress:
                    print(f"  {qname:11s} fragments={part.size:5d} delta={size:6d} "
                          f"{row['tuples_per_s']:>12,.0f} tuples/s  p50 "
                          f"{row['batch_ms_p50']:.3f} ms", file=sys.stderr, flush=True)
    return {"benchmark": "engine", "environment": environment(),
            "parameters": {"rows": rows, "delta_sizes": delta_sizes, "fragments": fragments,
                           "min_seconds": min_seconds, "batch": "mixed: half inserts, "
                           "half deletes", "seed": seed},
            "results": results}


def summarize(report: dict[str, Any]) -> dict[str, Any]:
    """The issue's targets, checked on the report's rows."""
    rows = report["results"]

    def pick(q, d, f):
        for r in rows:
            if r["query"] == q and r["delta_size"] == d and r["fragments_requested"] == f:
                return r
        return None

    out: dict[str, Any] = {}
    r = pick("q_having_2", 10000, 1000)
    if r:
        out["q_having_2_delta10000_f1000_tuples_per_s"] = r["tuples_per_s"]
        out["target_1M_tuples_per_s_met"] = r["tuples_per_s"] >= 1_000_000
    p50s = [r["batch_ms_p50"] for r in rows if r["delta_size"] == 10]
    if p50s:
        out["max_batch_ms_p50_at_delta_10"] = max(p50s)
        out["target_p50_1ms_met"] = max(p50s) <= 1.0
    ratios = []
    for q in {r["query"] for r in rows}:
        for d in {r["delta_size"] for r in rows}:
            lo, hi = pick(q, d, 10), pick(q, d, 5000)
            if lo and hi:
                ratios.append(hi["tuples_per_s"] / lo["tuples_per_s"])
    if ratios:
        out["min_throughput_ratio_5000_vs_10_fragments"] = round(min(ratios), 3)
        out["target_flat_in_fragments_met"] = min(ratios) >= 0.5
    return out
