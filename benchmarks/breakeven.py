"""``imp bench breakeven``: the delta size at which FM becomes cheaper than IMP (paper 8.3).

For ``q_having_2``, ``q_groups_{50,1000,5000,500000}`` and ``q_joinsel`` (5%), the query is
registered with an in-process coordinator; mixed batches (half fresh insertions, half
deletions) of growing shares of the table (``shares``) are committed and maintained until
IMP's time exceeds FM's (a warm Spark recapture), then the crossing is narrowed by
bisection between the last two shares (``bisect_steps``). ``breakeven_share`` is the
first share found where IMP >= FM (interpolated on the log scale between the bracketing
measurements); ``None`` with ``beyond_largest`` when IMP was still cheaper at the largest
share tried.
"""

from __future__ import annotations

import math
import time
from pathlib import Path
from typing import Any, Iterable

import numpy as np

from benchmarks.micro import (
    JOINSEL_SQL,
    Case,
    _sql,
    ensure_helper,
    prepare_synthetic_store,
)
from benchmarks.paper_common import (
    SyntheticUpdates,
    count_rows,
    finish_report,
    log,
    make_coordinator,
    median,
    ms,
    pyplot,
    save_figure,
    start_report,
    timed_maintenance,
)

QUERIES = ("q_having_2", "q_groups_50", "q_groups_1000", "q_groups_5000", "q_groups_500000",
           "q_joinsel")
SHARES = (0.001, 0.01, 0.05, 0.1, 0.2, 0.5, 1.0)


def _case(qname: str, store, seed: int, progress: bool) -> Case:
    if qname == "q_joinsel":
        h = ensure_helper(store, 5000, 1, 0.05, seed, progress)
        return Case("breakeven", "q_joinsel_5pct", JOINSEL_SQL.format(h=h), "t5000g", 5000)
    if qname.startswith("q_groups_"):
        g = int(qname.rsplit("_", 1)[1])
        return Case("breakeven", qname, _sql(qname), f"t{g}g", g)
    return Case("breakeven", qname, _sql(qname), "t5000g", 5000)


def search(coordinator, store, case: Case, shares: list[float], repeats: int,
           bisect_steps: int, rng: np.random.Generator, progress: bool) -> dict[str, Any]:
    from imp_actors.types import QuerySpec

    name = case.variant
    info = coordinator.register(QuerySpec(name=name, sql=case.sql, force=True,
                                          partitions={f"{case.table}.a": case.fragments}))
    coordinator.recapture(name)  # warm
    fms = [coordinator.recapture(name)[1]]
    table_rows = count_rows(store, case.table)
    updates = SyntheticUpdates(store, case.table, case.groups, rng)
    points: list[dict[str, Any]] = []

    def measure(share: float) -> float:
        n = max(2, int(round(share * table_rows)))
        times = []
        for _ in range(repeats):
            ins, dels = updates.batch(n, "mixed")
            coordinator.apply_update(case.table, inserts=ins, deletes=dels)
            times.append(timed_maintenance(coordinator, name)["total"])
        imp = median(times)
        # FM re-measured now and then: its cost follows the table's current files
        if len(points) % 3 == 2:
            fms.append(coordinator.recapture(name)[1])
        points.append({"share": share, "delta": n, "imp_ms": ms(imp),
                       "fm_s": round(median(fms), 3)})
        log(progress, f"  {name:16s} share {100 * share:7.3f}% ({n:,} tuples): IMP "
            f"{1000 * imp:9.1f} ms  FM {median(fms):6.2f} s")
        return imp

    lo, hi = None, None
    for share in shares:
        if measure(share) >= median(fms):
            hi = share
            break
        lo = share
    if hi is not None and lo is not None:
        for _ in range(bisect_steps):
            mid = math.sqrt(lo * hi)
            if measure(mid) >= median(fms):
                hi = mid
            else:
                lo = mid
    sv = coordinator.get_sketch(name)
    sketch, fm_end = coordinator.recapture(name, dict(sv.versions), sv.sketch.partitions)
    fms.append(fm_end)
    fm = median(fms)
    out = {"query": case.variant, "table": case.table, "table_rows": table_rows,
           "fragments": info.total_fragments, "fm_s": round(fm, 3), "points": points,
           "sketch_ok": set(sketch.fragments) == set(sv.sketch.fragments)}
    if hi is None:
        out.update(breakeven_share=None, beyond_largest=True, cheaper_up_to_share=lo)
    else:
        out.update(breakeven_share=_crossing(points, fm, lo, hi), beyond_largest=False,
                   bracket=[lo, hi])
    coordinator.drop(name)
    return out


def _crossing(points: list[dict[str, Any]], fm_s: float, lo: float | None, hi: float
              ) -> float:
    """Share where IMP = FM, interpolated in log-log between the bracketing points."""
    if lo is None:
        return hi
    a = next(p for p in points if p["share"] == lo)
    b = next(p for p in points if p["share"] == hi)
    ya, yb, y = math.log(a["imp_ms"]), math.log(b["imp_ms"]), math.log(1000 * fm_s)
    if yb <= ya:
        return hi
    t = min(max((y - ya) / (yb - ya), 0.0), 1.0)
    return round(math.exp(math.log(lo) + t * (math.log(hi) - math.log(lo))), 5)


def run_breakeven_bench(rows: int = 1_000_000, queries: Iterable[str] = QUERIES,
                        shares: Iterable[float] = SHARES, repeats: int = 1,
                        bisect_steps: int = 2, seed: int = 0, data_root: str | Path = ".imp",
                        max_load: float | None = None, progress: bool = True,
                        out: str | Path = "bench-results/breakeven.json") -> dict[str, Any]:
    queries, shares = list(queries), sorted(shares)
    params = {"rows": rows, "queries": queries, "shares": shares, "repeats": repeats,
              "bisect_steps": bisect_steps, "seed": seed, "fragments": 1000,
              "batches": "mixed: half fresh insertions, half deletions of stored rows"}
    report = start_report("breakeven", params, max_load, progress)
    tables = sorted({"t5000g"} | {f"t{q.rsplit('_', 1)[1]}g" for q in queries
                                  if q.startswith("q_groups_")}, key=lambda t: int(t[1:-1]))
    store, root = prepare_synthetic_store(rows, Path(data_root), tables, seed, progress)
    from imp_core.spark import get_spark

    report["environment"]["spark"] = get_spark().version
    rng = np.random.default_rng(seed)
    coordinator = make_coordinator(store, root / "svc-breakeven")
    results = []
    try:
        for q in queries:
            t0 = time.perf_counter()
            r = search(coordinator, store, _case(q, store, seed, progress), shares, repeats,
                       bisect_steps, rng, progress)
            r["search_s"] = round(time.perf_counter() - t0, 1)
            results.append(r)
    finally:
        coordinator.close(checkpoint=False)
    report["results"] = results
    report["summary"] = summarize(report)
    finish_report(report, out, lambda base: plot(report, base))
    return report


def summarize(report: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {"rows": report["parameters"]["rows"], "breakeven_share": {}}
    single = []
    for r in report["results"]:
        share = r["breakeven_share"]
        lower = share if share is not None else r.get("cheaper_up_to_share")
        out["breakeven_share"][r["query"]] = share if share is not None else \
            f">= {r.get('cheaper_up_to_share')}"
        if r["query"] != "q_joinsel_5pct":
            single.append(lower or 0.0)
    if single:
        out["min_single_table_share"] = min(single)
        out["target_10pct_single_table_met"] = min(single) >= 0.10
    out["all_sketches_ok"] = all(r["sketch_ok"] for r in report["results"])
    return out


def plot(report: dict[str, Any], base: Path) -> list[str]:
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(8, 4))
    for r in report["results"]:
        pts = sorted((p["share"], p["imp_ms"] / 1000) for p in r["points"])
        line, = ax.plot(*zip(*pts), marker="o", label=f"IMP {r['query']}")
        ax.axhline(r["fm_s"], color=line.get_color(), linestyle="--", linewidth=0.8)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("delta size (share of the table)")
    ax.set_ylabel("seconds (dashed: FM)")
    ax.set_title(f"Break-even, {report['parameters']['rows']:,} rows")
    ax.legend(fontsize=7)
    return [save_figure(fig, base.with_name(base.name + ".png"))]
