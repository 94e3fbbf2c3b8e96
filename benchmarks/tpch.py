"""``imp bench tpch``: incremental (IMP) versus full maintenance (FM) on TPC-H (paper 8.2.1).

Queries: by default the paper's twelve (suite ``tpch``, ``q01`` .. ``q19``); ``all22``
stands for the 22 standard TPC-H queries as written (suite ``tpch22``, ``h01`` ..
``h22``), and names of either suite can be mixed (``--queries h04,h21,q06``). Each query
is sketched on the attribute of its workload header (``-- sketch: table.column``, read
from the file on every run: ``lineitem.l_orderkey`` for the paper's queries and most of
the 22, another attribute for the others), with ``fragments`` equi-depth ranges, and
its update batches change that sketched table (the "sketched table" below).

Each query is registered with an in-process coordinator (the service's path: commit
through ``apply_update``, maintenance on ``get_sketch``); a query whose sketch attribute
the safety check refuses is registered forced and reported with ``forced`` and the
reason (``safety``). Then for each delta size n it runs a cycle of three batches of the
sketched table, drawn from tuples satisfying the query's selection on that table (the
pushed-down predicate of its scan) and identified by the table's key columns:

1. ``delete``: n stored tuples D deleted;
2. ``mixed``: n/2 fresh tuples E deleted and the first n/2 of D re-inserted;
3. ``insert``: the rest of D and E re-inserted (the table is back where it started).

Each batch is committed (``commit_s``, not part of IMP) and then the sketch is requested
(``imp_ms``: the coordinator's maintenance: changes of its own commit, restriction to the
query's columns and selection, the operators including joins, sketch out). The cycle runs
``repeats`` times (``own``: the service's own commits); ``feed_repeats`` more cycles
(``feed``) drop the coordinator's cached changes before each request, so the delta is
read back from the Delta change files (``imp_feed_ms``); ``outside_repeats`` more cycles
(``outside``) are committed by another writer, delta-rs on the table's files directly (a
MERGE that deletes and inserts, or an append), and the coordinator learns of the new
version from the Delta log and reads its changes from the change feed
(``imp_outside_ms``: from the sketch request, version discovery and change files
included). FM is a warm Spark recapture
(``coordinator.recapture``): one warm-up run, ``fm_runs`` timed runs right after
registration, and one at a verification point (after a mixed batch of the largest
size), where the maintained sketch must equal the recaptured one (``sketch_ok``). A
``-partial.json`` report is rewritten after every query. A query that fails (say, a
construct Spark cannot compile yet) is listed under ``failed`` with its error, the rows
its batches had deleted are re-inserted, and the run goes on with the next query.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Iterable

import numpy as np
import pyarrow as pa

from benchmarks.paper_common import (
    RowSampler,
    bar,
    count_rows,
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
    write_partial,
)
from imp_core.storage.clustering import recluster_decayed

QUERIES = ("q01", "q03", "q04", "q05", "q06", "q07", "q08", "q09", "q10", "q12", "q14", "q19")
# the 22 standard TPC-H queries (workload suite tpch22); ``all22`` in a query list
ALL22 = tuple(f"h{i:02d}" for i in range(1, 23))
QUERY_SETS = {"all22": ALL22, "paper12": QUERIES}
DELTA_SIZES = (10, 50, 100, 500, 1000)
KINDS = ("insert", "delete", "mixed")
LINEITEM_KEY = ("l_orderkey", "l_linenumber")


def expand_queries(names: Iterable[str]) -> list[str]:
    """``names`` with ``all22`` replaced by ``h01`` .. ``h22`` and ``paper12`` by the
    paper's twelve TPC-H queries (duplicates dropped, order
    kept); every name must be a workload query (``KeyError`` otherwise)."""
    from imp_core.workloads.queries import load_query

    out: list[str] = []
    for name in names:
        for q in QUERY_SETS.get(name, (name,)):
            if q not in out:
                load_query(q)  # fail before any data is prepared
                out.append(q)
    return out


def sketch_attribute(qname: str) -> tuple[str, str]:
    """The (table, column) of the query's workload header (its first sketch attribute)."""
    from imp_core.workloads.queries import load_query

    return load_query(qname).sketch[0]


def table_key(table: str) -> tuple[str, ...]:
    """The key columns that identify a row of ``table`` in the bench's batches."""
    from imp_core.workloads.schemas import TABLES

    key = TABLES[table].key
    if not key:
        raise ValueError(f"table {table} has no key; its rows cannot be drawn and "
                         f"re-inserted as distinct tuples")
    return tuple(key)


def prepare_tpch_store(sf: float, data_root: Path, progress: bool = True,
                       changed: Iterable[str] = ("lineitem",)):
    """TPC-H at ``sf`` in a Delta store under ``data_root/bench`` (small files; lineitem
    clustered on ``l_orderkey``); created once; the tables this run will change
    (``changed``) are re-clustered (compacted) when earlier runs left versions behind."""
    from imp_core.workloads.schemas import TABLES, TPCH_TABLES
    from imp_core.workloads.tpch import generate_tpch

    label = f"{sf:g}"
    root = data_root / "bench" / f"paper-tpch-sf{label}"
    store = open_store(root)
    have = set(store.tables())
    missing = [t for t in TPCH_TABLES if t not in have]
    if missing:
        paths = generate_tpch(sf, data_root / "data" / f"tpch-sf{label}", progress=progress,
                              tables=missing)
        for t in missing:
            t0 = time.perf_counter()
            info = TABLES[t]
            store.create_table_from_parquet(
                t, paths[t], key=info.key, domains=info.domains,
                cluster_by=("l_orderkey",) if t == "lineitem" else (), progress=False)
            log(progress, f"  loaded {t} ({time.perf_counter() - t0:.1f} s)")
    else:
        for t in dict.fromkeys(changed):
            if store.version(t) > 0:
                t0 = time.perf_counter()
                store.optimize(t)
                log(progress, f"  re-clustered {t} ({time.perf_counter() - t0:.1f} s)")
    return store, root


def _register(coordinator, qname: str, fragments: int, attribute: tuple[str, str]
              ) -> tuple[Any, float, str | None]:
    from imp_actors.types import QuerySpec
    from imp_core.errors import UnsafeSketchError
    from imp_core.workloads.queries import load_query

    wq = load_query(qname)
    parts = {f"{attribute[0]}.{attribute[1]}": fragments}
    t0 = time.perf_counter()
    try:
        info = coordinator.register(QuerySpec(name=qname, sql=wq.sql, partitions=parts))
        note = None
    except UnsafeSketchError as exc:  # maintain anyway (as the Spark bench), and say so
        note = str(exc)
        t0 = time.perf_counter()
        info = coordinator.register(QuerySpec(name=qname, sql=wq.sql, partitions=parts,
                                              force=True))
    return info, time.perf_counter() - t0, note


def _keys(rows: pa.Table, key: tuple[str, ...] = LINEITEM_KEY) -> set[tuple]:
    return set(zip(*(rows.column(k).to_pylist() for k in key)))


def outside_commit(store, table: str, key: tuple[str, ...], ins: pa.Table | None,
                   dels: pa.Table | None) -> None:
    """Commit a batch as another writer would: delta-rs on the table's files (one MERGE
    deleting ``dels`` by key and inserting ``ins``, or an append of ``ins`` alone); the
    service is not told."""
    from deltalake import DeltaTable, write_deltalake

    location = store.entry(table).location
    if dels is None or not dels.num_rows:
        if ins is not None and ins.num_rows:
            write_deltalake(location, ins, mode="append")
        return
    op = "__bench_op"
    parts = [dels.append_column(op, pa.array(["d"] * dels.num_rows))]
    if ins is not None and ins.num_rows:
        parts.append(ins.select(dels.column_names).append_column(
            op, pa.array(["i"] * ins.num_rows)))
    source = pa.concat_tables(parts)
    merge = DeltaTable(location).merge(
        source=source, predicate=" AND ".join(f"t.{k} = s.{k}" for k in key),
        source_alias="s", target_alias="t").when_matched_delete(predicate=f"s.{op} = 'd'")
    if len(parts) > 1:
        merge = merge.when_not_matched_insert(
            updates={c: f"s.{c}" for c in dels.column_names}, predicate=f"s.{op} = 'i'")
    merge.execute()


def measure_query(coordinator, store, qname: str, sizes: list[int], fragments: int,
                  repeats: int, feed_repeats: int, rng: np.random.Generator,
                  progress: bool, fm_runs: int = 1, outside_repeats: int = 0
                  ) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Register ``qname`` on its header's sketch attribute, time FM, run the update cycles
    on the sketched table (own commits, then from the change feed), verify the sketch
    against a recapture once, drop the query; its summary and its samples."""
    table, column = sketch_attribute(qname)
    key = table_key(table)
    info, boot_s, note = _register(coordinator, qname, fragments, (table, column))
    log(progress, f"  {qname}: registered on {table}.{column} (bootstrap {boot_s:.1f} s)"
        + (" forced: unsafe sketch attribute" if note else ""))
    spec = coordinator.scan_specs(qname).get(table)
    predicate = spec.predicate if spec is not None else None
    fm_times: list[float] = []
    for i in range(fm_runs + 1):  # the first run warms Spark (files, code generation)
        _, fm = coordinator.recapture(qname)
        if i:
            fm_times.append(fm)
    sampler = RowSampler(store, table, rng, predicate)
    samples: list[dict[str, Any]] = []
    verified: dict[str, Any] = {}
    # rows deleted by this query's batches and not yet re-inserted: put back if it fails,
    # so that the queries after it see the table as it was
    missing: list[pa.Table | None] = [None]

    def commit(ins: pa.Table | None, dels: pa.Table | None, outside: bool = False) -> float:
        """Commit one batch through the coordinator (or as another writer, ``outside``);
        the commit's seconds."""
        t0 = time.perf_counter()
        if outside:
            outside_commit(store, table, key, ins, dels)
        else:
            coordinator.apply_update(table, inserts=ins, deletes=dels)
        seconds = time.perf_counter() - t0
        out = [t for t in (missing[0], dels) if t is not None and t.num_rows]
        if ins is not None and ins.num_rows and out:
            back = _keys(ins, key)
            out = [t.filter(pa.array([k not in back for k in zip(
                *(t.column(c).to_pylist() for c in key))], type=pa.bool_())) for t in out]
        out = [t for t in out if t.num_rows]
        missing[0] = pa.concat_tables(out) if out else None
        return seconds

    try:
        warm = sampler.draw(sizes[0], key)  # warm-up: lazily built indexes
        for ins, dels in ((None, warm), (warm, None)):
            commit(ins, dels)
            coordinator.get_sketch(qname)
        cycles = [("own", r) for r in range(repeats)] + \
            [("feed", r) for r in range(feed_repeats)] + \
            [("outside", r) for r in range(outside_repeats)]
        steps = len(sizes) * len(cycles) * 3
        with bar(progress, steps, f"{qname}") as pb:
            for n in sizes:
                for mode, _rep in cycles:
                    forget = (table,) if mode == "feed" else ()
                    d = sampler.draw(n, key)
                    half = d.num_rows // 2
                    batches = [("delete", None, d)]
                    sampler.exclude = _keys(d, key)
                    e = sampler.draw(n // 2, key)
                    sampler.exclude = set()
                    batches.append(("mixed", d.slice(0, half), e))
                    batches.append(("insert", pa.concat_tables([d.slice(half), e]), None))
                    for kind, ins, dels in batches:
                        commit_s = commit(ins, dels, outside=mode == "outside")
                        t = timed_maintenance(coordinator, qname, forget)
                        changed = (0 if ins is None else ins.num_rows) + \
                            (0 if dels is None else dels.num_rows)
                        samples.append({"query": qname, "delta": n, "kind": kind,
                                        "mode": mode, "rows": changed,
                                        "imp_ms": ms(t["total"]), "ops_ms": ms(t["ops"]),
                                        "join_ms": ms(t["join"]), "pull_ms": ms(t["pull"]),
                                        "other_ms": ms(t["other"]),
                                        "commit_s": round(commit_s, 3)})
                        pb.update(1)
                        if kind == "mixed" and n == sizes[-1] and not verified:
                            sv = coordinator.get_sketch(qname)
                            sketch, fm = coordinator.recapture(
                                qname, dict(sv.versions), sv.sketch.partitions)
                            fm_times.append(fm)
                            verified = {"sketch_ok": set(sketch.fragments) ==
                                        set(sv.sketch.fragments),
                                        "at_versions": dict(sv.versions),
                                        "sketch_fragments": len(sv.sketch.fragments),
                                        "fm_sketch_fragments": len(sketch.fragments)}
    except BaseException:
        if missing[0] is not None:
            try:
                coordinator.apply_update(table, inserts=missing[0])
            except Exception as exc:  # noqa: BLE001 - the first failure is the one to see
                log(progress, f"  {qname}: could not re-insert {missing[0].num_rows} rows "
                    f"of {table}: {exc!r}")
        raise
    stats = [op for shard in coordinator.diagnostics.operator_stats(qname) for op in shard]
    summary = {"query": qname, "sketch": f"{table}.{column}", "table": table,
               "bootstrap_s": round(boot_s, 2), "forced": note is not None,
               "fragments": info.total_fragments, "sketch_fragments": info.sketch_fragments,
               "fm_s": round(median(fm_times), 3), "fm_runs_s": [round(x, 3) for x in fm_times],
               "state_bytes": coordinator.info(qname).state_bytes,
               # join sides beyond the actor's state budget, probed from the table files
               "probed_join_sides": list(coordinator.info(qname).probed_join_sides),
               "state_by_operator": [{"op": s["op"], "kind": s["kind"],
                                      "state_bytes": s["state_bytes"]}
                                     for s in stats if s["state_bytes"]],
               **verified}
    if note:
        summary["safety"] = note
    coordinator.drop(qname)
    return summary, samples


def aggregate(queries: list[dict[str, Any]], samples: list[dict[str, Any]]
              ) -> list[dict[str, Any]]:
    """One row per (query, delta, kind): medians of the samples, FM, FM / IMP."""
    fm = {q["query"]: q["fm_s"] for q in queries}
    ok = {q["query"]: q.get("sketch_ok") for q in queries}
    cells: dict[tuple, dict[str, list]] = {}
    for s in samples:
        c = cells.setdefault((s["query"], s["delta"], s["kind"]), {})
        c.setdefault(s["mode"], []).append(s)
    out = []
    for (q, n, kind), modes in cells.items():
        own = modes.get("own", [])
        feed = modes.get("feed", [])
        outside = modes.get("outside", [])
        imp = median([s["imp_ms"] for s in own])
        row = {"query": q, "delta": n, "kind": kind, "imp_ms": round(imp, 3),
               "imp_ops_ms": round(median([s["ops_ms"] for s in own]), 3),
               "imp_join_ms": round(median([s["join_ms"] for s in own]), 3),
               "imp_other_ms": round(median([s["other_ms"] for s in own]), 3),
               "imp_feed_ms": round(median([s["imp_ms"] for s in feed]), 3) if feed else None,
               "commit_s": round(median([s["commit_s"] for s in own + feed]), 3),
               "fm_s": fm[q], "fm_over_imp": ratio(1000 * fm[q], imp),
               "fm_over_imp_feed": ratio(1000 * fm[q], median([s["imp_ms"] for s in feed]))
               if feed else None,
               "imp_outside_ms": round(median([s["imp_ms"] for s in outside]), 3)
               if outside else None,
               "fm_over_imp_outside": ratio(1000 * fm[q], median([s["imp_ms"] for s in outside]))
               if outside else None,
               "sketch_ok": ok[q], "samples": len(own)}
        out.append(row)
    return out


def run_tpch_bench(sf: float = 1.0, queries: Iterable[str] = QUERIES,
                   delta_sizes: Iterable[int] = DELTA_SIZES, fragments: int = 1000,
                   repeats: int = 3, feed_repeats: int = 1, fm_runs: int = 1, seed: int = 0,
                   outside_repeats: int = 1,
                   data_root: str | Path = ".imp", max_load: float | None = None,
                   progress: bool = True, out: str | Path = "bench-results/tpch.json"
                   ) -> dict[str, Any]:
    """Run the TPC-H IMP-vs-FM experiment (module docstring) and write the report to
    ``out`` (plots beside it, ``-partial.json`` after every query). ``queries`` may name
    ``all22`` (``h01`` .. ``h22``)."""
    queries, sizes = expand_queries(queries), sorted(delta_sizes)
    attributes = {q: sketch_attribute(q) for q in queries}
    sketched = sorted({f"{t}.{c}" for t, c in attributes.values()})
    params = {"sf": sf, "queries": queries, "delta_sizes": sizes, "fragments": fragments,
              "repeats": repeats, "feed_repeats": feed_repeats, "fm_runs": fm_runs,
              "outside_repeats": outside_repeats,
              "seed": seed,
              "sketch": sketched[0] if len(sketched) == 1 else
              "per query, its workload header (queries[].sketch)",
              "backend": "local (in-process coordinator)",
              "batches": "per size a cycle: delete n, mixed (delete n/2 fresh, re-insert "
                         "n/2), insert (re-insert the rest); tuples of the sketched table "
                         "satisfy the query's selection on it, drawn from a few random "
                         "data files"}
    report = start_report("tpch", params, max_load, progress)
    data_root = Path(data_root)
    log(progress, f"preparing TPC-H SF {sf:g}")
    changed = ["lineitem"] + sorted({t for t, _ in attributes.values()} - {"lineitem"})
    store, root = prepare_tpch_store(sf, data_root, progress, changed)
    report["setup"] = {"lineitem_rows": count_rows(store, "lineitem"),
                       "lineitem_files": len(store.file_uris("lineitem")), "store": str(root)}
    for t in changed[1:]:
        report["setup"][f"{t}_rows"] = count_rows(store, t)
        report["setup"][f"{t}_files"] = len(store.file_uris(t))
    from imp_core.spark import get_spark

    t0 = time.perf_counter()
    spark = get_spark()
    report["setup"]["spark_start_s"] = round(time.perf_counter() - t0, 2)
    report["environment"]["spark"] = spark.version
    coordinator = make_coordinator(store, root)
    rng = np.random.default_rng(seed)
    summaries, samples = [], []
    failed: list[dict[str, Any]] = []
    try:
        for qname in queries:
            # every table: one a query reads may be left out of order by an earlier run
            # whose queries changed it (e.g. customer, by Q13 and Q22)
            for t, _, seconds in recluster_decayed(store, changed + sorted(
                    set(store.tables()) - set(changed))):
                report.setdefault("reclustered", []).append(
                    {"before": qname, "table": t, "seconds": round(seconds, 2)})
                log(progress, f"  re-clustered {t} before {qname} ({seconds:.1f} s)")
            try:
                s, rows = measure_query(coordinator, store, qname, sizes, fragments, repeats,
                                        feed_repeats, rng, progress, fm_runs, outside_repeats)
            except Exception as exc:  # noqa: BLE001 - one query's failure must not cost
                # the others' measurements: recorded, reported, and the run goes on
                failed.append({"query": qname, "error": type(exc).__name__,
                               "message": str(exc)[:2000]})
                log(progress, f"  {qname}: FAILED: {type(exc).__name__}: {exc}")
                try:
                    coordinator.drop(qname)
                except Exception:  # noqa: BLE001 - it may never have been registered
                    pass
                write_partial(report, out, queries=summaries, failed=failed,
                              results=aggregate(summaries, samples), samples=samples)
                continue
            summaries.append(s)
            samples.extend(rows)
            write_partial(report, out, queries=summaries, failed=failed,
                          results=aggregate(summaries, samples), samples=samples)
            mid = [r for r in rows if r["mode"] == "own" and r["kind"] == "mixed"]
            log(progress, f"  {qname}: bootstrap {s['bootstrap_s']:.1f} s, FM "
                f"{s['fm_s']:.2f} s, IMP mixed "
                + ", ".join(f"{n}: {median([r['imp_ms'] for r in mid if r['delta'] == n]):.2f}"
                            " ms" for n in sizes)
                + f", sketch ok: {s.get('sketch_ok')}")
    finally:
        coordinator.close(checkpoint=False)
    report["queries"] = summaries
    report["failed"] = failed
    report["results"] = aggregate(summaries, samples)
    report["samples"] = samples
    report["summary"] = summarize(report)
    finish_report(report, out, lambda base: plot(report, base))
    return report


def merge_reports(paths: Iterable[str | Path], out: str | Path) -> dict[str, Any]:
    """One report from several runs over disjoint query sets (e.g. a ``-partial.json`` of
    an interrupted run and a run of the remaining queries); written to ``out``."""
    import json

    reports = [json.loads(Path(p).read_text()) for p in paths]
    first = reports[0]
    queries = [q for r in reports for q in r["queries"]]
    samples = [s for r in reports for s in r["samples"]]
    report = {k: v for k, v in first.items() if k not in ("partial", "plots")}
    report["parameters"] = {**first["parameters"],
                            "queries": [q["query"] for q in queries],
                            "merged_from": [str(p) for p in paths]}
    report["load"] = {**first["load"], "at_end": reports[-1]["load"].get("at_end"),
                      "runs": [r["load"] for r in reports]}
    report["total_s"] = round(sum(r.get("total_s") or 0 for r in reports), 1)
    report["queries"], report["samples"] = queries, samples
    done = {q["query"] for q in queries}
    report["failed"] = [f for r in reports for f in r.get("failed", [])
                        if f["query"] not in done]
    report["results"] = aggregate(queries, samples)
    report["summary"] = summarize(report)
    out = Path(out)
    report["plots"] = plot(report, out.with_suffix(""))
    out.write_text(json.dumps(report, indent=2, default=str))
    return report


def summarize(report: dict[str, Any]) -> dict[str, Any]:
    """The issue's target: at delta 100 (or the nearest size), mixed, FM / IMP >= 100 for
    every query and median >= 500."""
    rows = [r for r in report["results"] if r["kind"] == "mixed"]
    if not rows:
        return {}
    sizes = sorted({r["delta"] for r in rows})
    n = min(sizes, key=lambda s: abs(s - 100))
    at = {r["query"]: r for r in rows if r["delta"] == n}
    ratios = {q: r["fm_over_imp"] for q, r in at.items()}
    vals = [v for v in ratios.values() if v is not None]
    out: dict[str, Any] = {"delta": n, "sf": report["parameters"]["sf"],
                           "fm_over_imp_mixed": ratios,
                           "min_ratio": min(vals) if vals else None,
                           "median_ratio": round(median(vals), 1) if vals else None,
                           "all_sketches_ok": all(q.get("sketch_ok") for q in report["queries"])}
    if report.get("failed"):
        out["failed_queries"] = [f["query"] for f in report["failed"]]
        out["all_sketches_ok"] = False
    out["target_min_100_met"] = bool(vals) and min(vals) >= 100
    out["target_median_500_met"] = bool(vals) and median(vals) >= 500
    feed = [r["fm_over_imp_feed"] for r in at.values() if r.get("fm_over_imp_feed")]
    if feed:
        out["min_ratio_feed"] = min(feed)
        out["median_ratio_feed"] = round(median(feed), 1)
    outside = {q: r["fm_over_imp_outside"] for q, r in at.items()
               if r.get("fm_over_imp_outside")}
    if outside:
        out["fm_over_imp_outside"] = outside
        out["min_ratio_outside"] = min(outside.values())
        out["median_ratio_outside"] = round(median(list(outside.values())), 1)
        out["target_outside_min_100_met"] = min(outside.values()) >= 100
    return out


def plot(report: dict[str, Any], base: Path) -> list[str]:
    plt = pyplot()
    rows = report["results"]
    queries = [q["query"] for q in report["queries"]]
    sizes = sorted({r["delta"] for r in rows})
    paths = []
    fig, ax = plt.subplots(figsize=(9, 4))
    width = 0.8 / (len(sizes) + 1)
    x = np.arange(len(queries))
    for i, n in enumerate(sizes):
        vals = [next((r["imp_ms"] / 1000 for r in rows if r["query"] == q and r["delta"] == n
                      and r["kind"] == "mixed"), np.nan) for q in queries]
        ax.bar(x + i * width, vals, width, label=f"IMP delta {n}")
    fm = [q["fm_s"] for q in report["queries"]]
    ax.bar(x + len(sizes) * width, fm, width, label="FM", color="black")
    ax.set_yscale("log")
    ax.set_xticks(x + 0.4, queries)
    ax.set_ylabel("seconds (log)")
    ax.set_title(f"TPC-H SF {report['parameters']['sf']:g}: IMP (mixed batches) vs FM")
    ax.legend(fontsize=7, ncol=3)
    paths.append(save_figure(fig, base.with_name(base.name + "-imp-vs-fm.png")))
    fig, ax = plt.subplots(figsize=(9, 4))
    for kind in ("insert", "delete", "mixed"):
        for q in queries:
            pts = sorted((r["delta"], r["imp_ms"]) for r in rows
                         if r["query"] == q and r["kind"] == kind)
            if pts and kind == "mixed":
                ax.plot(*zip(*pts), marker="o", label=q)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("delta size (tuples)")
    ax.set_ylabel("IMP ms (log)")
    ax.set_title("IMP maintenance vs delta size (mixed)")
    ax.legend(fontsize=7, ncol=4)
    paths.append(save_figure(fig, base.with_name(base.name + "-imp-by-delta.png")))
    return paths


def markdown_table(report: dict[str, Any], delta: int | None = None) -> str:
    """One Markdown row per query of ``report`` at delta ``delta`` (default: the
    summary's, the size nearest 100): the sketch attribute, FM, IMP per batch kind (own
    commits; mixed also from the change feed), FM/IMP both ways, ``sketch = FM``, state,
    bootstrap; failed queries last with their error. The table of docs/benchmarks.md's
    "All 22 TPC-H queries" (``python -m benchmarks.tpch REPORT``)."""

    def cell(x: Any) -> str:
        if x is None:
            return "-"
        if isinstance(x, bool):
            return "yes" if x else "**no**"
        if isinstance(x, float):
            return f"{x:,.0f}" if abs(x) >= 1000 else f"{x:.2f}"
        return str(x)

    n = delta if delta is not None else report.get("summary", {}).get("delta", 100)
    head = ["query", "sketch", "forced", "FM s", f"IMP ms ins {n}", f"del {n}",
            f"mixed {n}", "mixed, from feed", "mixed, outside writer", "FM/IMP",
            "FM/IMP feed", "FM/IMP outside", "sketch = FM", "state MiB", "bootstrap s"]
    lines = ["| " + " | ".join(head) + " |",
             "|" + "|".join("---" if i < 3 else "---:" for i in range(len(head))) + "|"]
    for q in report["queries"]:
        at = {r["kind"]: r for r in report["results"]
              if r["query"] == q["query"] and r["delta"] == n}
        mixed = at.get("mixed", {})
        row = [q["query"], f"`{q.get('sketch', 'lineitem.l_orderkey')}`",
               "yes" if q.get("forced") else "no", q["fm_s"],
               at.get("insert", {}).get("imp_ms"), at.get("delete", {}).get("imp_ms"),
               mixed.get("imp_ms"), mixed.get("imp_feed_ms"), mixed.get("imp_outside_ms"),
               mixed.get("fm_over_imp"), mixed.get("fm_over_imp_feed"),
               mixed.get("fm_over_imp_outside"), q.get("sketch_ok"),
               round(q["state_bytes"] / 2**20, 1), q["bootstrap_s"]]
        lines.append("| " + " | ".join(cell(c) for c in row) + " |")
    for f in report.get("failed", []):
        msg = f["message"].splitlines()[0] if f["message"] else ""
        msg = (msg[:117] + "...") if len(msg) > 120 else msg
        lines.append(f"| {f['query']} | failed: {f['error']} | " + " | ".join(
            ["-"] * (len(head) - 3)) + f" | {msg.replace('|', '/')} |")
    return "\n".join(lines)


if __name__ == "__main__":  # python -m benchmarks.tpch REPORT.json [DELTA]
    import json
    import sys

    _report = json.loads(Path(sys.argv[1]).read_text())
    print(markdown_table(_report, int(sys.argv[2]) if len(sys.argv) > 2 else None))
