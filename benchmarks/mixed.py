"""``imp bench mixed``: end-to-end workloads mixing queries and updates (paper 8.1).

A workload is ``operations`` operations on ``t5000g`` (``rows`` rows): updates (mixed
batches of ``delta`` changed tuples: half fresh insertions, half deletions) and queries
(``q_endtoend``), in the pattern of a query-update ratio (``1U1Q``: U Q U Q ...,
``1U5Q``: U Q Q Q Q Q ..., ``5U1Q``: U U U U U Q ...). All three methods run side by side
on the same table versions; each query is answered by every method in turn:

- IMP: the service: the query registered first (its capture counted), then per query the
  sketch maintained on request and the query run on Spark with it
  (``Coordinator.run_query``);
- FM: per query, recapture the sketch on Spark when the table changed since the last
  capture (full maintenance), then run the query with it;
- NS: the plain query on Spark.

Update commits are the same for all methods and reported apart (``commit_s``). Every
method's answer is compared with NS's once per workload (``same_result``).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Iterable

import numpy as np

from benchmarks.paper_common import (
    SyntheticUpdates,
    bar,
    count_rows,
    ensure_synthetic,
    finish_report,
    log,
    make_coordinator,
    open_store,
    pyplot,
    ratio,
    save_figure,
    start_report,
    write_partial,
)

RATIOS = ("1U1Q", "1U5Q", "5U1Q")
DELTA_SIZES = (1, 20, 200, 2000)


def pattern(ratio_name: str, operations: int) -> list[str]:
    """The workload's operations, ``"U"`` or ``"Q"``, starting with an update."""
    u, q = ratio_name.upper().split("U")
    unit = ["U"] * int(u) + ["Q"] * int(q.rstrip("Q") or 1)
    return (unit * (operations // len(unit) + 1))[:operations]


def run_workload(coordinator, store, spark, ratio_name: str, delta: int, operations: int,
                 rng: np.random.Generator, progress: bool) -> dict[str, Any]:
    from imp_actors.types import QuerySpec
    from imp_core.oracle.results import same_rows
    from imp_core.sql import plan_sql
    from imp_core.workloads.queries import load_query

    sql = load_query("q_endtoend").sql
    name = f"e2e_{ratio_name}_{delta}"
    ops = pattern(ratio_name, operations)
    totals = {"imp": 0.0, "fm": 0.0, "ns": 0.0}
    parts = {"imp_capture": 0.0, "imp_maintain": 0.0, "imp_use": 0.0, "fm_capture": 0.0,
             "fm_use": 0.0, "commit": 0.0}
    counts = {"updates": 0, "queries": 0, "fm_recaptures": 0}
    same = None
    t0 = time.perf_counter()
    coordinator.register(QuerySpec(name=name, sql=sql, partitions={"t5000g.a": 1000}))
    parts["imp_capture"] = time.perf_counter() - t0
    totals["imp"] += parts["imp_capture"]
    plan = plan_sql(sql, coordinator.catalog())  # the registered query's plan, for FM's use
    updates = SyntheticUpdates(store, "t5000g", 5000, rng)
    fm_sketch, fm_versions = None, None
    with bar(progress, len(ops), name) as pb:
        for op in ops:
            if op == "U":
                ins, dels = updates.batch(delta, "mixed")
                t1 = time.perf_counter()
                coordinator.apply_update("t5000g", inserts=ins, deletes=dels)
                parts["commit"] += time.perf_counter() - t1
                counts["updates"] += 1
                pb.update(1)
                continue
            counts["queries"] += 1
            # NS: the plain query
            t1 = time.perf_counter()
            ns = coordinator.run_query(sql=sql, use_sketch=False)
            totals["ns"] += time.perf_counter() - t1
            # IMP: maintain on request, then use the sketch
            t1 = time.perf_counter()
            coordinator.get_sketch(name)
            t2 = time.perf_counter()
            imp = coordinator.run_query(query=name, use_sketch=True)
            t3 = time.perf_counter()
            parts["imp_maintain"] += t2 - t1
            parts["imp_use"] += t3 - t2
            totals["imp"] += t3 - t1
            # FM: recapture when stale, then use
            versions = {"t5000g": coordinator.ctx.probe.latest("t5000g")}
            t1 = time.perf_counter()
            if fm_versions != versions:
                fm_sketch, _ = coordinator.recapture(name, versions)
                fm_versions = versions
                counts["fm_recaptures"] += 1
            t2 = time.perf_counter()
            fm = coordinator.ctx.spark.run(plan, versions, fm_sketch)  # as IMP's use runs
            t3 = time.perf_counter()
            parts["fm_capture"] += t2 - t1
            parts["fm_use"] += t3 - t2
            totals["fm"] += t3 - t1
            if same is None:
                same = same_rows(ns.rows, imp.rows) and same_rows(ns.rows, fm.rows)
            pb.update(1)
    coordinator.drop(name)
    row = {"ratio": ratio_name, "delta": delta, "operations": len(ops), **counts,
           "imp_s": round(totals["imp"], 3), "fm_s": round(totals["fm"], 3),
           "ns_s": round(totals["ns"], 3),
           **{f"{k}_s": round(v, 3) for k, v in parts.items()},
           "same_result": same,
           "imp_below_fm_and_ns": totals["imp"] < totals["fm"] and totals["imp"] < totals["ns"],
           "fm_over_imp": ratio(totals["fm"], totals["imp"]),
           "ns_over_imp": ratio(totals["ns"], totals["imp"])}
    log(progress, f"  {ratio_name} delta {delta:5d}: IMP {row['imp_s']:8.2f} s  FM "
        f"{row['fm_s']:8.2f} s  NS {row['ns_s']:8.2f} s  (commits {row['commit_s']:.1f} s)"
        f"  same: {same}")
    return row


def run_mixed_bench(rows: int = 10_000_000, operations: int = 1000,
                    ratios: Iterable[str] = RATIOS, delta_sizes: Iterable[int] = DELTA_SIZES,
                    seed: int = 0, data_root: str | Path = ".imp",
                    max_load: float | None = None, progress: bool = True,
                    out: str | Path = "bench-results/mixed.json") -> dict[str, Any]:
    ratios, sizes = list(ratios), list(delta_sizes)
    params = {"rows": rows, "operations": operations, "ratios": ratios,
              "delta_sizes": sizes, "seed": seed, "query": "q_endtoend",
              "fragments": 1000, "backend": "local (in-process coordinator)",
              "update": "mixed batch: half fresh insertions, half deletions of stored rows"}
    report = start_report("mixed", params, max_load, progress)
    root = Path(data_root) / "bench" / f"paper-mixed-{rows}"
    store = open_store(root)
    ensure_synthetic(store, "t5000g", rows, seed, progress)
    from imp_core.spark import get_spark

    spark = get_spark()
    report["environment"]["spark"] = spark.version
    report["setup"] = {"table_rows": count_rows(store, "t5000g"),
                       "files": len(store.file_uris("t5000g"))}
    rng = np.random.default_rng(seed)
    coordinator = make_coordinator(store, root)
    results = []
    try:
        # warm Spark and the file cache once before the first workload
        from imp_actors.types import QuerySpec
        from imp_core.workloads.queries import load_query

        sql = load_query("q_endtoend").sql
        coordinator.register(QuerySpec(name="warmup", sql=sql, partitions={"t5000g.a": 1000}))
        coordinator.run_query(sql=sql, use_sketch=False)
        coordinator.run_query(query="warmup")
        coordinator.recapture("warmup")
        coordinator.drop("warmup")
        for r in ratios:
            for d in sizes:
                results.append(run_workload(coordinator, store, spark, r, d, operations, rng,
                                            progress))
                write_partial(report, out, results=results)
    finally:
        coordinator.close(checkpoint=False)
    report["results"] = results
    report["summary"] = summarize(report)
    finish_report(report, out, lambda base: plot(report, base))
    return report


def summarize(report: dict[str, Any]) -> dict[str, Any]:
    rows = report["results"]
    wins = [r["imp_below_fm_and_ns"] for r in rows]
    return {"rows": report["parameters"]["rows"],
            "operations": report["parameters"]["operations"],
            "configurations": len(rows), "imp_wins": sum(wins),
            "target_all_configurations_met": bool(rows) and all(wins),
            "losses": [f"{r['ratio']} delta {r['delta']}" for r in rows
                       if not r["imp_below_fm_and_ns"]],
            "all_same_result": all(r["same_result"] for r in rows if r["same_result"]
                                   is not None)}


def plot(report: dict[str, Any], base: Path) -> list[str]:
    plt = pyplot()
    rows = report["results"]
    labels = [f"{r['ratio']}\n{r['delta']}" for r in rows]
    x = np.arange(len(rows))
    fig, ax = plt.subplots(figsize=(10, 4))
    for i, (key, lab) in enumerate((("imp_s", "IMP"), ("fm_s", "FM"), ("ns_s", "NS"))):
        ax.bar(x + i * 0.27, [r[key] for r in rows], 0.27, label=lab)
    ax.set_xticks(x + 0.27, labels, fontsize=7)
    ax.set_yscale("log")
    ax.set_ylabel("total seconds (log)")
    ax.set_title(f"Mixed workloads: {report['parameters']['operations']} operations, "
                 f"{report['parameters']['rows']:,} rows (ratio / delta size)")
    ax.legend()
    return [save_figure(fig, base.with_name(base.name + ".png"))]
