"""``imp bench strategies``: eager maintenance in batches versus lazy (paper 8.5).

For ``q_endtoend`` and ``q_joinsel`` (5% join selectivity) on ``t5000g`` (``rows`` rows),
one query per strategy is registered with the same in-process coordinator: eager with
batch sizes 1 .. 1000 tuples (``Eager(batch_tuples=b)``, no time trigger) and lazy. Then
``updates`` single-tuple updates (alternating fresh insertions and deletions of stored
rows) are committed through the coordinator; after each commit the eager maintenance it
triggered (run by the coordinator's background pool) is waited for, so maintenances never
overlap the next commit. At the end every query's sketch is requested (the lazy query
maintains all updates at once; an eager query its remainder). ``maintain_s`` is the sum
of the maintenance times of all sketch versions a query published; ``maintenances`` their
number.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Iterable

import numpy as np

from benchmarks.micro import JOINSEL_SQL, _sql, ensure_helper
from benchmarks.paper_common import (
    SyntheticUpdates,
    bar,
    ensure_synthetic,
    finish_report,
    log,
    make_coordinator,
    median,
    open_store,
    pyplot,
    save_figure,
    start_report,
)

BATCH_SIZES = (1, 10, 50, 100, 500, 1000)
QUERIES = ("q_endtoend", "q_joinsel")


def run_template(coordinator, store, template: str, sql: str, batches: list[int],
                 updates: int, rng: np.random.Generator, progress: bool
                 ) -> list[dict[str, Any]]:
    from imp_actors.runtime_config import Eager, Lazy
    from imp_actors.types import QuerySpec

    names = {}
    for b in batches:
        names[f"eager {b}"] = f"{template}_eager_{b}"
        coordinator.register(QuerySpec(name=names[f"eager {b}"], sql=sql, force=True,
                                       partitions={"t5000g.a": 1000},
                                       strategy=Eager(batch_tuples=b, max_delay_s=None)))
    names["lazy"] = f"{template}_lazy"
    coordinator.register(QuerySpec(name=names["lazy"], sql=sql, force=True,
                                   partitions={"t5000g.a": 1000}, strategy=Lazy()))
    seq0 = {n: coordinator.info(n).sketch_seq for n in names.values()}
    gen = SyntheticUpdates(store, "t5000g", 5000, rng)
    commit = 0.0
    with bar(progress, updates, template) as pb:
        for i in range(updates):
            ins, dels = (gen.inserts(1), None) if i % 2 == 0 else (None, gen.deletes(1))
            t0 = time.perf_counter()
            res = coordinator.apply_update("t5000g", inserts=ins, deletes=dels)
            commit += time.perf_counter() - t0
            if res.maintained:
                coordinator.wait_idle(list(res.maintained))
            pb.update(1)
    out = []
    for label, n in names.items():
        coordinator.get_sketch(n)  # the final request: lazy maintains everything here
        versions = [coordinator.sketch_version(n, s) for s in coordinator.sketch_seqs(n)
                    if s > seq0[n]]
        total = sum(v.maintain_seconds for v in versions)
        out.append({"query": template, "strategy": label.split()[0],
                    "batch": None if label == "lazy" else int(label.split()[1]),
                    "updates": updates, "maintenances": len(versions),
                    "maintain_s": round(total, 4),
                    "maintain_ms_per_update": round(1000 * total / updates, 4),
                    "maintenance_ms_p50": round(1000 * median([v.maintain_seconds
                                                               for v in versions]), 3)
                    if versions else None,
                    "maintenance_ms_max": round(1000 * max((v.maintain_seconds
                                                            for v in versions), default=0), 3),
                    "commit_s": round(commit, 2)})
        coordinator.drop(n)
    for r in out:
        log(progress, f"  {template:10s} {r['strategy']:5s} batch {r['batch']!s:5s}: "
            f"{r['maintenances']:5d} maintenances, total {r['maintain_s']:.3f} s")
    return out


def run_strategies_bench(rows: int = 1_000_000, updates: int = 1000,
                         batch_sizes: Iterable[int] = BATCH_SIZES,
                         queries: Iterable[str] = QUERIES, seed: int = 0,
                         data_root: str | Path = ".imp", max_load: float | None = None,
                         progress: bool = True,
                         out: str | Path = "bench-results/strategies.json") -> dict[str, Any]:
    batches, queries = sorted(batch_sizes), list(queries)
    params = {"rows": rows, "updates": updates, "batch_sizes": batches, "queries": queries,
              "seed": seed, "update": "one tuple: alternately a fresh insertion and a "
              "deletion of a stored row", "joinsel_selectivity": 0.05}
    report = start_report("strategies", params, max_load, progress)
    root = Path(data_root) / "bench" / f"paper-strategies-{rows}"
    store = open_store(root)
    ensure_synthetic(store, "t5000g", rows, seed, progress)
    rng = np.random.default_rng(seed)
    # versions of every query kept, to sum their maintenance times
    coordinator = make_coordinator(store, root, versions_kept=updates + 8)
    results = []
    try:
        for template in queries:
            if template == "q_joinsel":
                sql = JOINSEL_SQL.format(h=ensure_helper(store, 5000, 1, 0.05, seed, progress))
            else:
                sql = _sql(template)
            results.extend(run_template(coordinator, store, template, sql, batches, updates,
                                        rng, progress))
    finally:
        coordinator.close(checkpoint=False)
    report["results"] = results
    report["summary"] = summarize(report)
    finish_report(report, out, lambda base: plot(report, base))
    return report


def summarize(report: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for q in report["parameters"]["queries"]:
        rows = [r for r in report["results"] if r["query"] == q]
        lazy = next((r for r in rows if r["strategy"] == "lazy"), None)
        eager = {r["batch"]: r["maintain_s"] for r in rows if r["strategy"] == "eager"}
        if lazy and eager:
            out[q] = {"lazy_s": lazy["maintain_s"], "eager_s": eager,
                      "eager_batch1_over_lazy": round(eager[min(eager)] / lazy["maintain_s"], 1)
                      if lazy["maintain_s"] else None}
    return out


def plot(report: dict[str, Any], base: Path) -> list[str]:
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(7, 4))
    for q in report["parameters"]["queries"]:
        rows = [r for r in report["results"] if r["query"] == q]
        pts = sorted((r["batch"], r["maintain_s"]) for r in rows if r["strategy"] == "eager")
        line, = ax.plot(*zip(*pts), marker="o", label=f"eager {q}")
        lazy = next(r["maintain_s"] for r in rows if r["strategy"] == "lazy")
        ax.axhline(lazy, color=line.get_color(), linestyle="--", label=f"lazy {q}")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("eager batch size (tuples)")
    ax.set_ylabel(f"total maintenance s, {report['parameters']['updates']} updates")
    ax.legend(fontsize=7)
    return [save_figure(fig, base.with_name(base.name + ".png"))]
