"""``imp bench use``: does a sketch ever cost the user time? RunQuery with and without it.

For each workload query over TPC-H (scale factor SF; the TPC-H store of ``imp bench
tpch``), sketched on its header's attribute with ``fragments`` equi-depth ranges: the
accurate sketch is captured on Spark, then the query runs through the service's own
RunQuery path (``imp_actors.spark_work.SparkWork.run``: the access path of
``imp_core.spark.access`` decides whether each table is read with the sketch's filter)
and plainly, alternately, ``repeats`` times each after one warm-up run of both; the
medians are reported with the access path taken, the estimated read share, rows read and
whether both returned the same rows. ``use_over_plain`` above 1 means the sketch cost
time; the summary gives the largest.
"""

from __future__ import annotations

import statistics
import time
from pathlib import Path
from typing import Any, Iterable

from benchmarks.common import environment
from benchmarks.paper_common import log
from imp_core.results import same_rows


def measure(work: Any, store: Any, qname: str, fragments: int, repeats: int,
            max_read_share: float) -> dict[str, Any]:
    from imp_core.prepare import StoreTables, prepare_query
    from imp_core.workloads.queries import load_query

    wq = load_query(qname)
    table, column = wq.sketch[0]
    row: dict[str, Any] = {"query": qname, "sketch": f"{table}.{column}"}
    prepared = prepare_query(wq.sql, StoreTables(store), {f"{table}.{column}": fragments},
                             force=True)
    versions = dict(prepared.versions)
    sketch, fm_s = work.recapture(prepared.plan, prepared.partitions, versions)
    row["fm_s"] = round(fm_s, 3)
    row["sketch_fragments"] = len(sketch.fragments)
    row["fragments"] = prepared.partitions.size
    use = plain = None
    use_s, plain_s = [], []
    for i in range(repeats + 1):  # the first round warms both plans
        use = work.run(prepared.plan, versions, sketch, max_read_share)
        plain = work.run(prepared.plan, versions, None)
        if i:
            use_s.append(use.seconds)
            plain_s.append(plain.seconds)
    assert use is not None and plain is not None
    row["access"] = use.access
    row["read_share"] = {t: round(s, 4) for t, s in use.read_share.items()}
    row["use_s"] = round(statistics.median(use_s), 3)
    row["plain_s"] = round(statistics.median(plain_s), 3)
    row["use_over_plain"] = round(row["use_s"] / row["plain_s"], 3) if row["plain_s"] else None
    row["rows_read_use"] = use.rows_read.get(table)
    row["rows_read_plain"] = plain.rows_read.get(table)
    row["same_result"] = same_rows(plain.rows, use.rows)
    return row


def run_use_bench(sf: float = 1.0, queries: Iterable[str] = ("all22",), fragments: int = 1000,
                  repeats: int = 3, max_read_share: float | None = None,
                  data_root: str | Path = ".imp", progress: bool = True) -> dict[str, Any]:
    from benchmarks.tpch import expand_queries, prepare_tpch_store
    from imp_actors.config import RuntimeConfig
    from imp_actors.spark_work import SparkWork

    started = time.perf_counter()
    share = RuntimeConfig().sketch_max_read_share if max_read_share is None else max_read_share
    names = expand_queries(queries)
    store, root = prepare_tpch_store(sf, Path(data_root), progress, changed=())
    work = SparkWork(store)
    results = []
    for qname in names:
        row = measure(work, store, qname, fragments, repeats, share)
        results.append(row)
        log(progress, f"  {qname}: {row['access']:6s} use {row['use_s']:6.2f} s plain "
            f"{row['plain_s']:6.2f} s ({row['use_over_plain']:.2f}x) read share "
            f"{row['read_share']} same={row['same_result']}")
    ratios = [r["use_over_plain"] for r in results if r["use_over_plain"] is not None]
    summary = {"queries": len(results), "max_use_over_plain": max(ratios, default=None),
               "sketch_used": sum(r["access"] == "sketch" for r in results),
               "all_same_result": all(r["same_result"] for r in results),
               "max_read_share": share}
    return {"bench": "use", "environment": environment(),
            "parameters": {"sf": sf, "queries": names, "fragments": fragments,
                           "repeats": repeats, "max_read_share": share, "store": str(root)},
            "results": results, "summary": summary,
            "total_s": round(time.perf_counter() - started, 1)}
