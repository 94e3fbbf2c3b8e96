"""``imp bench skew``: adaptive ranges under skewed inserts.

A table ``t(k, a, v)`` of ``rows`` rows with ``a`` uniform over [0, 1,000,000) is laid
out in order of ``a`` (``DeltaStore.layout``); ``batches`` batches of ``batch_rows``
new rows follow, ``hot`` of each batch in the lowest 1% of ``a``'s domain. Maintainers
keep the same queries on ``t.a`` (``fragments`` equi-depth ranges): one with the ranges
of the registration (static), and one with adaptive ranges
(``imp_core.sketch.adaptive``) per overflow threshold of ``overflows`` (a fragment
beyond that many times the mean is split). After every batch each sketch must equal its
recapture on its current ranges. At the end, for a selective query whose provenance lies in the hot
region (the ten smallest ``a``), the share of the table its sketch's fragments hold
(what a scan of the table laid out by ``a`` reads) is compared with a fresh equi-depth
partition's on the final data: adaptive within 1.5x of it is the target; the static
ranges show what the skew costs without it.
"""

from __future__ import annotations

import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from benchmarks.common import environment
from benchmarks.paper_common import log

DOMAIN = 1_000_000
QUERIES = {
    "smallest": "SELECT k, a, v FROM t ORDER BY a LIMIT 10",
    "hot_groups": "SELECT a, count(*) AS n FROM t WHERE a < 2000 GROUP BY a",
    "having": "SELECT a, sum(v) AS s FROM t GROUP BY a HAVING sum(v) > 2500",
}
SELECTIVE = "smallest"


def _rows(rng: np.random.Generator, n: int, start: int, hot: float) -> pa.Table:
    a = rng.integers(0, DOMAIN, n)
    k = int(hot * n)
    a[:k] = rng.integers(0, DOMAIN // 100, k)
    return pa.table({"k": np.arange(start, start + n, dtype=np.int64), "a": a,
                     "v": rng.integers(0, 1000, n)})


def _share(sketch: Any, table: pa.Table) -> float:
    """The share of ``table``'s rows in the sketch's fragments of t."""
    part, off = sketch.partitions.for_table("t")
    ids = part.annotate(table.column("a"))
    kept = np.isin(ids, np.array(sketch.table_fragments("t"), dtype=np.int64))
    return float(kept.sum()) / max(table.num_rows, 1)


def run_skew_bench(rows: int = 200_000, batches: int = 50, batch_rows: int = 2000,
                   hot: float = 0.5, fragments: int = 64, seed: int = 1,
                   progress: bool = True, root: str | Path | None = None,
                   overflows: tuple[float, ...] = (4.0, 2.0, 1.5)) -> dict[str, Any]:
    from imp_core.embedded.maintainer import Maintainer
    from imp_core.oracle.reference import reference_capture
    from imp_core.sketch.partition import PartitionSet, RangePartition
    from imp_core.storage import DeltaStore

    started = time.perf_counter()
    folder = Path(root) if root is not None else Path(tempfile.mkdtemp(prefix="imp-skew-"))
    rng = np.random.default_rng(seed)
    store = DeltaStore(folder / "store")
    store.create_table("t", _rows(rng, rows, 0, 0.0), key="k", domains={"v": (0, None)})
    store.layout("t", ["a"])
    variants = {f"adaptive {o:g}x": Maintainer(store, overflow=o) for o in overflows}
    variants["static"] = Maintainer(store, adaptive=False)
    for name, sql in QUERIES.items():
        for m in variants.values():
            m.register(name, sql, {"t.a": fragments})
    exact = True
    times: dict[str, list[float]] = {label: [] for label in variants}
    start = rows
    for b in range(batches):
        store.apply("t", inserts=_rows(rng, batch_rows, start, hot))
        start += batch_rows
        for label, m in variants.items():
            for name in QUERIES:
                t0 = time.perf_counter()
                m.maintain(name)
                times[label].append(time.perf_counter() - t0)
                exact &= m.query(name).sketch == m.reference_sketch(name)
        if progress and (b + 1) % 10 == 0:
            parts = {label: len(m.query(SELECTIVE).repartitions)
                     for label, m in variants.items() if m.adaptive}
            log(progress, f"  batch {b + 1}/{batches}: repartitions {parts}, exact so far: "
                f"{exact}")
    final = store.read("t")
    fresh_part = RangePartition.equi_depth("t", "a", final.column("a"), fragments)
    plan = variants["static"].query(SELECTIVE).plan
    fresh = _share(reference_capture(plan, {"t": final}, PartitionSet((fresh_part,))).sketch,
                   final)
    results: dict[str, Any] = {"queries": list(QUERIES), "selective": SELECTIVE,
                               "fresh_equi_depth_read_share": round(fresh, 5),
                               "all_exact": exact, "variants": {}}
    for label, m in variants.items():
        share = _share(m.query(SELECTIVE).sketch, final)
        q = m.query(SELECTIVE)
        results["variants"][label] = {
            "read_share": round(share, 5),
            "over_fresh": round(share / fresh, 3) if fresh else None,
            "repartitions": sum(len(m.query(n).repartitions) for n in QUERIES),
            "largest_fragment_over_mean": round(q.counts["t"].ratio()[0], 2)
            if q.counts else None,
            "maintain_ms_median": round(1000 * statistics.median(times[label]), 2),
            "maintain_ms_mean": round(1000 * statistics.fmean(times[label]), 2),
        }
    summary = {"all_exact": exact,
               **{f"{label} over fresh": v["over_fresh"]
                  for label, v in results["variants"].items()}}
    return {"bench": "skew", "environment": environment(),
            "parameters": {"rows": rows, "batches": batches, "batch_rows": batch_rows,
                           "hot": hot, "fragments": fragments, "seed": seed},
            "results": results, "summary": summary,
            "total_s": round(time.perf_counter() - started, 1)}
