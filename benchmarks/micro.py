"""``imp bench micro``: the paper's microbenchmarks (8.3, 8.4) on the synthetic tables.

Every experiment registers a query with an in-process coordinator over a Delta store of
synthetic tables (``rows`` rows per ``tNg`` table), then per delta size commits mixed
batches on the query's ``tNg`` table (half fresh insertions, half deletions of stored
rows) and times the sketch request (``imp_ms``, the service's maintenance), against a
warm Spark recapture (``fm_s``). After the last batch the maintained sketch is compared
with the recaptured one (``sketch_ok``). Experiments (``experiment`` / ``variant``):

- ``groups``: ``q_groups_{50,1000,5000,500000}``;
- ``aggregates``: ``q_having_{1,2,3,10}`` (1, 2, 3, 10 aggregation functions);
- ``joins``: the ``q_join`` template: 1-n (``t50g``, ``t5000g``, ``t500000g`` joined to a
  ``tjoinhelp`` holding each group id once; n = rows per group) and m-n (``t5000g`` joined
  to a ``tjoinhelp`` holding each id m = 2, 20, 50 times);
- ``joinsel``: ``q_joinsel`` with 1%, 5%, 10% of the group ids present in ``tjoinhelp``;
- ``fragments``: the ``q_join`` template on ``t5000g`` with 10 .. 5000 fragments
  (``per_tuple_us``: IMP time per delta tuple);
- ``delta_filter``: ``q_selpd`` with the selection pushed into the delta (on) or not (off);
- ``bloom``: ``q_joinsel`` (1/5/10%) with the join Bloom filters on and off;
- ``buffers`` (engine only, no Spark): top-k (``q_topk``, k = 10) and min/max buffers of
  l entries under the paper's deletion strategies (``min``: delete the two smallest
  groups per update; ``random``: random tuples until the table is empty; ``R:M`` mixes),
  with the number of refills (recaptures of the operator's input) and state bytes.
"""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path
from typing import Any, Callable, Iterable

import numpy as np

from benchmarks.paper_common import (
    SyntheticUpdates,
    bar,
    ensure_synthetic,
    finish_report,
    log,
    make_coordinator,
    median,
    ms,
    open_store,
    pyplot,
    ratio,
    save_figure,
    start_report,
    timed_maintenance,
)

DELTA_SIZES = (10, 100, 1000)
EXPERIMENTS = ("groups", "aggregates", "joins", "joinsel", "fragments", "delta_filter",
               "bloom", "buffers")
FRAGMENTS = (10, 100, 1000, 5000)
JOIN_SQL = ("SELECT a, avg(b) AS ab FROM (SELECT a, b, c FROM {t} WHERE b < {x}) tt "
            "JOIN {h} ON a = ttid GROUP BY a HAVING avg(c) < {y}")
JOINSEL_SQL = ("SELECT a, avg(b) AS ab FROM t5000g JOIN {h} ON a = ttid WHERE b < 1000 "
               "GROUP BY a HAVING avg(c) < 1000")
# the paper's constants per 1-n table (A.1.3)
ONE_N = (("t50g", 50, 10, 10), ("t5000g", 5000, 1000, 1000),
         ("t500000g", 500000, 100000, 100000))
M_N = (2, 20, 50)
SELECTIVITY = (0.01, 0.05, 0.10)
GROUPS = (50, 1000, 5000, 500000)


@dataclasses.dataclass
class Case:
    """One measured query: where it runs and how its updates look."""

    experiment: str
    variant: str
    sql: str
    table: str  # the updated tNg table
    groups: int
    fragments: int = 1000
    options: Any = None  # EngineOptions for this case (None: defaults)
    no_pushdown: bool = False  # strip the pushed-down selection from the delta


def _sql(name: str) -> str:
    from imp_core.workloads.queries import load_query

    return load_query(name).sql


def helper_name(groups: int, fanout: int, selectivity: float) -> str:
    return f"tjoinhelp_g{groups}_f{fanout}_s{int(round(100 * selectivity))}"


def ensure_helper(store, groups: int, fanout: int, selectivity: float, seed: int,
                  progress: bool) -> str:
    from imp_core.workloads.synthetic import generate_joinhelp

    name = helper_name(groups, fanout, selectivity)
    if name in store.tables():
        return name
    present = max(1, round(selectivity * groups))
    data = generate_joinhelp(present * fanout, groups=groups, fanout=fanout,
                             selectivity=selectivity, seed=seed)
    from imp_core.workloads.schemas import TABLES

    info = TABLES["tjoinhelp"]
    t0 = time.perf_counter()
    store.create_table(name, data, key=info.key, domains=info.domains)
    log(progress, f"  created {name} ({data.num_rows:,} rows, {time.perf_counter() - t0:.1f} s)")
    return name


def measure_case(coordinator, store, case: Case, sizes: list[int], repeats: int,
                 rng: np.random.Generator, progress: bool = True, verify: bool = True,
                 stop: Callable[[float, float], bool] | None = None) -> list[dict[str, Any]]:
    """Register ``case``, time FM, then per delta size ``repeats`` mixed batches (IMP);
    ``stop(imp_s, fm_s)`` ends the size sweep early (break-even search)."""
    from imp_actors.types import QuerySpec

    name = f"{case.experiment}_{case.variant}".replace(".", "_").replace("%", "pct") \
        .replace(" ", "_")
    t0 = time.perf_counter()
    info = coordinator.register(QuerySpec(name=name, sql=case.sql, force=True,
                                          partitions={f"{case.table}.a": case.fragments},
                                          pushdown=not case.no_pushdown))
    boot = time.perf_counter() - t0
    coordinator.recapture(name)  # warm
    _, fm0 = coordinator.recapture(name)
    fm_times = [fm0]
    updates = SyntheticUpdates(store, case.table, case.groups, rng)
    ins, dels = updates.batch(sizes[0], "mixed")  # warm-up: lazily built indexes
    coordinator.apply_update(case.table, inserts=ins, deletes=dels)
    coordinator.get_sketch(name)
    rows = []
    with bar(progress, len(sizes) * repeats, name) as pb:
        for n in sizes:
            times, ops, commits = [], [], []
            for _ in range(repeats):
                ins, dels = updates.batch(n, "mixed")
                t1 = time.perf_counter()
                coordinator.apply_update(case.table, inserts=ins, deletes=dels)
                commits.append(time.perf_counter() - t1)
                t = timed_maintenance(coordinator, name)
                times.append(t["total"])
                ops.append(t["ops"])
                pb.update(1)
            imp = median(times)
            rows.append({"experiment": case.experiment, "variant": case.variant,
                         "query": name, "delta": n, "imp_ms": ms(imp),
                         "imp_ops_ms": ms(median(ops)),
                         "per_tuple_us": round(1e6 * imp / n, 3),
                         "commit_s": round(median(commits), 3), "samples": len(times),
                         "fragments": info.total_fragments,
                         "bootstrap_s": round(boot, 3)})
            if stop is not None and stop(imp, fm0):
                break
    verified: dict[str, Any] = {}
    if verify:
        sv = coordinator.get_sketch(name)
        sketch, fm1 = coordinator.recapture(name, dict(sv.versions), sv.sketch.partitions)
        fm_times.append(fm1)
        verified = {"sketch_ok": set(sketch.fragments) == set(sv.sketch.fragments)}
    fm = median(fm_times)
    stats = [op for shard in coordinator.diagnostics.operator_stats(name) for op in shard]
    state_bytes = coordinator.info(name).state_bytes
    # join probes the Bloom filters answered, if the operator stats report them
    joins = [op for op in stats if op["kind"] == "join"]
    probes = sum(op["probes_skipped"] for op in joins) \
        if all("probes_skipped" in op for op in joins) else None
    for r in rows:
        r.update({"fm_s": round(fm, 3), "fm_over_imp": ratio(1000 * fm, r["imp_ms"]),
                  "state_bytes": state_bytes, "bloom_skipped_probes": probes,
                  **verified})
    coordinator.drop(name)
    return rows


def cases(experiments: Iterable[str], rows: int, store, seed: int, progress: bool,
          fragments: Iterable[int] = FRAGMENTS) -> list[Case]:
    from imp_core.engine.pipeline import EngineOptions

    out: list[Case] = []
    exps = set(experiments)
    if "groups" in exps:
        for g in GROUPS:
            out.append(Case("groups", f"{g}", _sql(f"q_groups_{g}"), f"t{g}g", g))
    if "aggregates" in exps:
        for k in (1, 2, 3, 10):
            out.append(Case("aggregates", f"{k}", _sql(f"q_having_{k}"), "t5000g", 5000))
    if "joins" in exps:
        for t, g, x, y in ONE_N:
            h = ensure_helper(store, g, 1, 1.0, seed, progress)
            n = max(1, rows // g)
            out.append(Case("joins", f"1-{n}", JOIN_SQL.format(t=t, x=x, y=y, h=h), t, g))
        for m in M_N:
            h = ensure_helper(store, 5000, m, 1.0, seed, progress)
            out.append(Case("joins", f"{m}-{max(1, rows // 5000)}",
                            JOIN_SQL.format(t="t5000g", x=1000, y=1000, h=h), "t5000g", 5000))
    if "joinsel" in exps or "bloom" in exps:
        for s in SELECTIVITY:
            h = ensure_helper(store, 5000, 1, s, seed, progress)
            if "joinsel" in exps:
                out.append(Case("joinsel", f"{int(100 * s)}%", JOINSEL_SQL.format(h=h),
                                "t5000g", 5000))
            if "bloom" in exps:
                for on in (True, False):
                    out.append(Case("bloom", f"{int(100 * s)}% {'on' if on else 'off'}",
                                    JOINSEL_SQL.format(h=h), "t5000g", 5000,
                                    options=EngineOptions(use_bloom=on)))
    if "fragments" in exps:
        h = ensure_helper(store, 5000, 1, 1.0, seed, progress)
        for f in fragments:
            out.append(Case("fragments", f"{f}", JOIN_SQL.format(t="t5000g", x=1000, y=1000,
                                                                 h=h), "t5000g", 5000, f))
    if "delta_filter" in exps:
        for on in (True, False):
            out.append(Case("delta_filter", "on" if on else "off", _sql("q_selpd"), "t1000g",
                            1000, no_pushdown=not on))
    return out


def prepare_synthetic_store(rows: int, data_root: Path, tables: Iterable[str], seed: int,
                            progress: bool):
    root = data_root / "bench" / f"paper-synthetic-{rows}"
    store = open_store(root)
    for t in tables:
        ensure_synthetic(store, t, rows, seed, progress)
    return store, root


def run_cases(case_list: list[Case], store, root: Path, sizes: list[int], repeats: int,
              seed: int, progress: bool) -> list[dict[str, Any]]:
    """Each case with a coordinator of its engine options (one per distinct options)."""
    from imp_core.engine.pipeline import EngineOptions

    rng = np.random.default_rng(seed)
    results: list[dict[str, Any]] = []
    coordinators: dict[Any, Any] = {}
    try:
        for case in case_list:
            opts = case.options or EngineOptions()
            if opts not in coordinators:
                coordinators[opts] = make_coordinator(store, root / f"svc-{len(coordinators)}",
                                                      opts)
            rows = measure_case(coordinators[opts], store, case, sizes, repeats, rng, progress)
            results.extend(rows)
            log(progress, f"  {case.experiment:12s} {case.variant:12s} FM {rows[0]['fm_s']:.2f} s"
                + "".join(f"  d={r['delta']}: {r['imp_ms']:.2f} ms" for r in rows)
                + f"  sketch ok: {rows[0].get('sketch_ok')}")
    finally:
        for c in coordinators.values():
            c.close(checkpoint=False)
    return results


# -- bounded buffers (engine only) -----------------------------------------------------------
MINMAX_SQL = "SELECT a, min(b) AS mb FROM t5000g GROUP BY a HAVING min(b) < 5000"
STRATEGIES = ("min", "random", "2:1", "4:1")


def run_buffers(rows: int = 50_000, updates: int = 500, per_update: int = 20,
                buffers: Iterable[int | None] = (20, 50, 100, None), seed: int = 0,
                progress: bool = True, sample_every: int = 10) -> list[dict[str, Any]]:
    """Top-k (``q_topk``, k = 10, buffer l) and min/max (``MINMAX_SQL``, buffer m) under
    deletion strategies; engine only (refills read the in-memory tables)."""
    from imp_core.embedded.api import Engine
    from imp_core.engine.pipeline import EngineOptions
    from imp_core.workloads.synthetic import generate_groups_table

    base = generate_groups_table(5000, rows, seed=seed)
    out = []
    for which, sql in (("topk", _sql("q_topk")), ("minmax", MINMAX_SQL)):
        for buf in buffers:
            for strategy in STRATEGIES:
                opts = EngineOptions(topk_buffer=buf, keep_result=False) if which == "topk" \
                    else EngineOptions(minmax_buffer=None if buf is None else max(1, buf // 10),
                                       keep_result=False)
                eng = Engine(opts)
                eng.create_table("t5000g", base, key="id")
                q = eng.register(sql, partitions={"t5000g.a": 1000}, force=True)
                rng = np.random.default_rng(seed + 1)
                total, steps, memory = 0.0, 0, []
                limit = updates if strategy != "random" else rows // per_update
                with bar(progress, limit, f"{which} l={buf} {strategy}") as pb:
                    for i in range(limit):
                        data = eng.table("t5000g")
                        if data.num_rows == 0:
                            break
                        dels = _victims(data, strategy, i, per_update, rng, which)
                        d = eng.delete("t5000g", dels)[q.name]
                        total += d.seconds
                        steps += 1
                        if i % sample_every == 0:
                            memory.append((i, q.pipeline.state_bytes()))
                        pb.update(1)
                refills = sum(getattr(op, "refills", 0) for op in q.pipeline.operators)
                exact = set(q.sketch.fragments) == set(q.reference().sketch.fragments)
                label = buf if which == "topk" else opts.minmax_buffer
                out.append({"experiment": "buffers", "operator": which, "buffer": label,
                            "strategy": strategy, "updates": steps,
                            "tuples_per_update": per_update, "total_s": round(total, 4),
                            "refills": refills, "sketch_ok": exact,
                            "state_bytes_end": q.pipeline.state_bytes(),
                            "state_bytes_series": memory})
                log(progress, f"  buffers {which:6s} l={label!s:5s} {strategy:6s} "
                    f"{total:.3f} s, {refills} refills, exact: {exact}")
    return out


def _victims(data, strategy: str, i: int, n: int, rng: np.random.Generator, which: str):
    """Rows to delete: ``min`` the smallest two groups (top-k order) or, for min/max, the
    current minimum rows; ``random`` n random rows; ``R:M`` R random updates, then M."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if strategy in ("2:1", "4:1"):
        r, m = (int(x) for x in strategy.split(":"))
        strategy = "random" if i % (r + m) < r else "min"
    if strategy == "random":
        idx = rng.choice(data.num_rows, size=min(n, data.num_rows), replace=False)
        return data.take(pa.array(idx))
    if which == "topk":
        a = data.column("a")
        uniq = np.unique(a.to_numpy())[:2]
        return data.filter(pc.is_in(a, pa.array(uniq)))
    b = data.column("b").to_numpy()
    idx = np.argsort(b, kind="stable")[:n]
    return data.take(pa.array(idx))


# -- the suite ---------------------------------------------------------------------------------
def run_micro_bench(rows: int = 1_000_000, experiments: Iterable[str] = EXPERIMENTS,
                    delta_sizes: Iterable[int] = DELTA_SIZES, repeats: int = 3,
                    seed: int = 0, data_root: str | Path = ".imp",
                    buffer_rows: int = 50_000, buffer_updates: int = 500,
                    fragments: Iterable[int] = FRAGMENTS, max_load: float | None = None,
                    progress: bool = True,
                    out: str | Path = "bench-results/micro.json") -> dict[str, Any]:
    experiments, sizes = list(experiments), sorted(delta_sizes)
    fragments = list(fragments)
    params = {"rows": rows, "experiments": experiments, "delta_sizes": sizes,
              "repeats": repeats, "seed": seed, "fragments": 1000,
              "fragment_counts": fragments,
              "buffer_rows": buffer_rows, "buffer_updates": buffer_updates,
              "batches": "mixed: half fresh insertions, half deletions of stored rows "
                         "(from a few random data files)",
              "backend": "local (in-process coordinator)"}
    report = start_report("micro", params, max_load, progress)
    results: list[dict[str, Any]] = []
    spark_exps = [e for e in experiments if e != "buffers"]
    if spark_exps:
        tables = _tables_for(spark_exps)
        log(progress, f"preparing synthetic tables ({rows:,} rows each): {', '.join(tables)}")
        store, root = prepare_synthetic_store(rows, Path(data_root), tables, seed, progress)
        from imp_core.spark import get_spark

        report["environment"]["spark"] = get_spark().version
        case_list = cases(spark_exps, rows, store, seed, progress, fragments)
        results.extend(run_cases(case_list, store, root, sizes, repeats, seed, progress))
    if "buffers" in experiments:
        results.extend(run_buffers(buffer_rows, buffer_updates, seed=seed, progress=progress))
    report["results"] = results
    report["summary"] = summarize(report)
    finish_report(report, out, lambda base: plot(report, base))
    return report


def _tables_for(experiments: list[str]) -> list[str]:
    need = set()
    for e in experiments:
        if e == "groups":
            need |= {f"t{g}g" for g in GROUPS}
        elif e == "joins":
            need |= {"t50g", "t5000g", "t500000g"}
        elif e == "delta_filter":
            need.add("t1000g")
        else:
            need.add("t5000g")
    return sorted(need, key=lambda t: int(t[1:-1]))


def summarize(report: dict[str, Any]) -> dict[str, Any]:
    rows = [r for r in report["results"] if r["experiment"] != "buffers"]
    out: dict[str, Any] = {"rows": report["parameters"]["rows"]}
    frag = [r for r in rows if r["experiment"] == "fragments"]
    if frag:
        by = {}
        for r in frag:
            by.setdefault(r["delta"], {})[int(r["variant"])] = r["per_tuple_us"]
        ratios = {d: round(v[max(v)] / v[min(v)], 2) for d, v in by.items() if len(v) > 1}
        out["per_tuple_cost_ratio_max_vs_min_fragments"] = ratios
        out["target_flat_in_fragments_met"] = bool(ratios) and max(ratios.values()) <= 2.0
    if rows:
        vals = [r["fm_over_imp"] for r in rows if r["fm_over_imp"]]
        out["min_fm_over_imp"] = min(vals) if vals else None
        out["all_sketches_ok"] = all(r.get("sketch_ok", True) for r in report["results"])
    bloom = [r for r in rows if r["experiment"] == "bloom"]
    if bloom:
        out["bloom_speedup"] = {}
        for r in bloom:
            if r["variant"].endswith(" on"):
                off = next((x for x in bloom if x["delta"] == r["delta"] and
                            x["variant"] == r["variant"][:-3] + " off"), None)
                if off:
                    out["bloom_speedup"][f"{r['variant'][:-3]} d={r['delta']}"] = \
                        ratio(off["imp_ms"], r["imp_ms"])
    return out


def plot(report: dict[str, Any], base: Path) -> list[str]:
    plt = pyplot()
    rows = [r for r in report["results"] if r["experiment"] != "buffers"]
    exps = [e for e in EXPERIMENTS if any(r["experiment"] == e for r in rows)]
    paths = []
    if exps:
        cols = min(3, len(exps))
        nrows = -(-len(exps) // cols)
        fig, axes = plt.subplots(nrows, cols, figsize=(4 * cols, 3 * nrows), squeeze=False)
        for ax, e in zip(axes.flat, exps):
            for v in dict.fromkeys(r["variant"] for r in rows if r["experiment"] == e):
                pts = sorted((r["delta"], r["imp_ms"]) for r in rows
                             if r["experiment"] == e and r["variant"] == v)
                line, = ax.plot(*zip(*pts), marker="o", label=f"IMP {v}")
                fm = next(r["fm_s"] for r in rows if r["experiment"] == e and r["variant"] == v)
                ax.axhline(1000 * fm, color=line.get_color(), linestyle="--", linewidth=0.8)
            ax.set_xscale("log")
            ax.set_yscale("log")
            ax.set_title(f"{e} (dashed: FM)", fontsize=9)
            ax.set_xlabel("delta tuples", fontsize=8)
            ax.set_ylabel("ms", fontsize=8)
            ax.legend(fontsize=6)
        for ax in list(axes.flat)[len(exps):]:
            ax.axis("off")
        paths.append(save_figure(fig, base.with_name(base.name + "-imp-vs-fm.png")))
    buf = [r for r in report["results"] if r["experiment"] == "buffers"]
    if buf:
        fig, axes = plt.subplots(1, 2, figsize=(9, 3.2))
        for ax, which in zip(axes, ("topk", "minmax")):
            sub = [r for r in buf if r["operator"] == which]
            labels = list(dict.fromkeys(str(r["buffer"]) for r in sub))
            x = np.arange(len(labels))
            for i, s in enumerate(STRATEGIES):
                vals = [next((r["total_s"] for r in sub if str(r["buffer"]) == lb
                              and r["strategy"] == s), np.nan) for lb in labels]
                ax.bar(x + i * 0.2, vals, 0.2, label=s)
            ax.set_xticks(x + 0.3, labels)
            ax.set_xlabel("buffer entries (None: all)")
            ax.set_ylabel("total seconds")
            ax.set_title(which)
            ax.legend(fontsize=7)
        paths.append(save_figure(fig, base.with_name(base.name + "-buffers.png")))
    return paths
