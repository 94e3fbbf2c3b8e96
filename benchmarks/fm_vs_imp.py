"""IMP versus full maintenance (FM) per query, for any workload: the measurement loop of
``imp bench tpch`` and ``imp bench tpcds``.

A ``Workload`` says what differs between benchmarks: how its Delta store is prepared,
how a query is registered (and on which attribute), which table its update batches
change, the key that identifies a row of that table, and whether inserted rows get fresh
keys. The rest is shared:

Each query is registered with an in-process coordinator (the service's path: commit
through ``apply_update``, maintenance on ``get_sketch``). Then for each delta size n it
runs a cycle of three batches of its batch table, drawn from tuples satisfying the
query's selection on that table (the pushed-down predicate of its scan) and identified
by the table's key columns:

1. ``delete``: n stored tuples D deleted;
2. ``mixed``: n/2 other stored tuples E deleted and the first n/2 of D inserted;
3. ``insert``: the rest of D and E inserted (the table has its row count again).

Inserted rows are the deleted ones as they were (TPC-H), or copies of them with a fresh
value in the key column that no other table refers to (``Workload.fresh_column``: the
ticket or order number of a TPC-DS sales or returns table), so that every insert is a
new row that still joins its dimensions. Each batch is committed (``commit_s``, not part
of IMP) and then the sketch is requested (``imp_ms``: the coordinator's maintenance). The
cycle runs ``repeats`` times (``own``: the service's own commits); ``feed_repeats`` more
cycles (``feed``) drop the coordinator's cached changes first, so the delta is read
back from the Delta change files; ``outside_repeats`` more cycles (``outside``) are
committed by another writer, delta-rs on the table's files directly (a MERGE deleting
and inserting, or an append), and the coordinator learns of the new version from the
Delta log and reads its changes from the change feed (``imp_outside_ms``); the request
comes ``OUTSIDE_SETTLE_S`` after the writer's commit returns. FM is a warm
Spark recapture (``coordinator.recapture``): one warm-up run, ``fm_runs`` timed runs
right after registration, one at a verification point after the first mixed batch of
the largest size and one after the last cycle (outside-writer commits, when there are
any), where the maintained sketch must equal the recaptured one (``sketch_ok``: both).
A ``-partial.json`` report is rewritten after every query. A query that fails is listed
under ``failed`` with its error (the rows its batches had deleted are put back), one the
workload refuses to register under ``refused`` with the reason, and the run goes on.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from benchmarks.paper_common import (
    RowSampler,
    bar,
    count_rows,
    finish_report,
    log,
    make_coordinator,
    median,
    ms,
    pyplot,
    ratio,
    save_figure,
    start_report,
    timed_maintenance,
    write_partial,
)
from imp_core.storage.clustering import recluster_decayed

# how long after an outside writer's commit returns its sketch is requested: the writer
# stands in for another process on another machine, but runs in this one, and its
# threads' work after the commit returns took the two cores from the request (TPC-DS
# q30 at SF 1, batches of 100: 22 ms a batch with no pause, 14 ms with 0.3 s, as many as
# with the service's own commits)
OUTSIDE_SETTLE_S = 0.2


class Refused(Exception):
    """The workload will not register the query (its reason in the message)."""

    def __init__(self, reason: str, error: str = "ImpError"):
        super().__init__(reason)
        self.error = error


@dataclass(frozen=True)
class Registered:
    """A query as the workload registered it."""

    info: Any  # QueryInfo
    seconds: float  # the registration's wall time (planning, ranges, first state)
    table: str  # sketched on table.column
    column: str
    note: str | None = None  # registered forced: the safety check's reason
    via: str = "header"  # header (the file's -- sketch: line) or advisor


@dataclass(frozen=True)
class Workload:
    name: str  # the report's "benchmark"
    label: str  # for titles: "TPC-H"
    main_table: str  # described in the report's setup
    # (sf, data_root, progress, tables the run may change) -> (store, store root)
    prepare: Callable[[float, Path, bool, list[str]], tuple[Any, Path]]
    # (coordinator, query, fragments) -> Registered; raises Refused
    register: Callable[[Any, str, int], Registered]
    table_key: Callable[[str], tuple[str, ...]]
    # queries -> the tables the run may change (prepared, re-clustered when decayed)
    changed_tables: Callable[[list[str]], list[str]]
    # (coordinator, store, query, Registered) -> the table its batches change
    batch_table: Callable[[Any, Any, str, Registered], str] = \
        lambda coordinator, store, qname, reg: reg.table
    # the key column inserts get fresh values in (None: rows go back as they were)
    fresh_column: Callable[[str], str | None] = lambda table: None


def _keys(rows: pa.Table, key: tuple[str, ...]) -> set[tuple]:
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


class FreshKeys:
    """Copies of rows with new values in ``column``: above every value stored when made
    (and above the ones it handed out)."""

    def __init__(self, store, table: str, column: str):
        self.column = column
        top = pc.max(store.read(table, columns=[column]).column(0)).as_py()
        self.next = int(top or 0) + 1

    def __call__(self, rows: pa.Table) -> pa.Table:
        i = rows.schema.get_field_index(self.column)
        field = rows.schema.field(i)
        values = pa.array(np.arange(self.next, self.next + rows.num_rows), type=field.type)
        self.next += rows.num_rows
        return rows.set_column(i, field, values)


def _verify(coordinator, qname: str, fm_times: list[float]) -> dict[str, Any]:
    """The maintained sketch against a recapture at its versions (the FM time kept)."""
    sv = coordinator.get_sketch(qname)
    sketch, fm = coordinator.recapture(qname, dict(sv.versions), sv.sketch.partitions)
    fm_times.append(fm)
    return {"sketch_ok": set(sketch.fragments) == set(sv.sketch.fragments),
            "at_versions": dict(sv.versions), "sketch_fragments": len(sv.sketch.fragments),
            "fm_sketch_fragments": len(sketch.fragments)}


def measure_query(coordinator, store, qname: str, sizes: list[int], fragments: int,
                  repeats: int, feed_repeats: int, rng: np.random.Generator,
                  progress: bool, fm_runs: int = 1, outside_repeats: int = 0,
                  workload: Workload | None = None
                  ) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Register ``qname`` as ``workload`` says, time FM, run the update cycles on its
    batch table (own commits, from the change feed, by an outside writer), verify the
    sketch against recaptures, drop the query; its summary and its samples."""
    assert workload is not None
    reg = workload.register(coordinator, qname, fragments)
    table = workload.batch_table(coordinator, store, qname, reg)
    key = workload.table_key(table)
    fresh_column = workload.fresh_column(table)
    fresh = FreshKeys(store, table, fresh_column) if fresh_column else None
    log(progress, f"  {qname}: registered on {reg.table}.{reg.column} ({reg.via}, "
        f"{reg.seconds:.1f} s), batches of {table}"
        + (" forced: unsafe sketch attribute" if reg.note else ""))
    spec = coordinator.scan_specs(qname).get(table)
    predicate = spec.predicate if spec is not None else None
    fm_times: list[float] = []
    for i in range(fm_runs + 1):  # the first run warms Spark (files, code generation)
        _, fm = coordinator.recapture(qname)
        if i:
            fm_times.append(fm)
    sampler = RowSampler(store, table, rng, predicate)
    samples: list[dict[str, Any]] = []
    checks: list[dict[str, Any]] = []
    # rows deleted by this query's batches and not yet inserted again (as they were or as
    # copies): put back if it fails, so that the queries after it see the table as it was
    missing: list[pa.Table | None] = [None]

    def commit(ins: pa.Table | None, dels: pa.Table | None, outside: bool = False) -> float:
        """Commit one batch (``ins``: deleted rows to insert again, as fresh copies with
        ``fresh``) through the coordinator, or as another writer (``outside``)."""
        rows = fresh(ins) if fresh is not None and ins is not None else ins
        t0 = time.perf_counter()
        if outside:
            outside_commit(store, table, key, rows, dels)
        else:
            coordinator.apply_update(table, inserts=rows, deletes=dels)
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
        with bar(progress, len(sizes) * len(cycles) * 3, f"{qname}") as pb:
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
                        if mode == "outside":
                            time.sleep(OUTSIDE_SETTLE_S)
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
                        if kind == "mixed" and n == sizes[-1] and not checks:
                            checks.append(_verify(coordinator, qname, fm_times))
        if outside_repeats:  # the sketch maintained from another writer's commits
            checks.append(_verify(coordinator, qname, fm_times))
    except BaseException:
        if missing[0] is not None:
            try:
                coordinator.apply_update(table, inserts=missing[0])
            except Exception as exc:  # noqa: BLE001 - the first failure is the one to see
                log(progress, f"  {qname}: could not re-insert {missing[0].num_rows} rows "
                    f"of {table}: {exc!r}")
        raise
    stats = [op for shard in coordinator.diagnostics.operator_stats(qname) for op in shard]
    info = coordinator.info(qname)
    verified: dict[str, Any] = dict(checks[0]) if checks else {}
    if checks:
        verified["sketch_ok"] = all(c["sketch_ok"] for c in checks)
        verified["checks"] = [{"sketch_ok": c["sketch_ok"], "at_versions": c["at_versions"]}
                              for c in checks]
    summary = {"query": qname, "sketch": f"{reg.table}.{reg.column}", "sketch_via": reg.via,
               "table": table, "fresh_keys": fresh_column,
               "bootstrap_s": round(reg.seconds, 2), "forced": reg.note is not None,
               "fragments": reg.info.total_fragments,
               "sketch_fragments": reg.info.sketch_fragments,
               "fm_s": round(median(fm_times), 3), "fm_runs_s": [round(x, 3) for x in fm_times],
               "state_bytes": info.state_bytes,
               # join sides beyond the actor's state budget, probed from the table files
               "probed_join_sides": list(info.probed_join_sides),
               "state_by_operator": [{"op": s["op"], "kind": s["kind"],
                                      "state_bytes": s["state_bytes"]}
                                     for s in stats if s["state_bytes"]],
               **verified}
    if reg.note:
        summary["safety"] = reg.note
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

    def imp(rows: list[dict[str, Any]], field: str = "imp_ms") -> float | None:
        return round(median([s[field] for s in rows]), 3) if rows else None

    out = []
    for (q, n, kind), modes in cells.items():
        own, feed = modes.get("own", []), modes.get("feed", [])
        outside = modes.get("outside", [])
        row = {"query": q, "delta": n, "kind": kind, "imp_ms": imp(own),
               "imp_ops_ms": imp(own, "ops_ms"), "imp_join_ms": imp(own, "join_ms"),
               "imp_other_ms": imp(own, "other_ms"), "imp_feed_ms": imp(feed),
               "commit_s": round(median([s["commit_s"] for s in own + feed + outside]), 3),
               "fm_s": fm[q], "fm_over_imp": ratio(1000 * fm[q], imp(own) or 0),
               "fm_over_imp_feed": ratio(1000 * fm[q], imp(feed)) if feed else None,
               "imp_outside_ms": imp(outside),
               "imp_outside_ops_ms": imp(outside, "ops_ms"),
               "imp_outside_join_ms": imp(outside, "join_ms"),
               "imp_outside_pull_ms": imp(outside, "pull_ms"),
               "fm_over_imp_outside": ratio(1000 * fm[q], imp(outside)) if outside else None,
               "sketch_ok": ok[q], "samples": len(own)}
        out.append(row)
    return out


def summarize(report: dict[str, Any]) -> dict[str, Any]:
    """The issue's target: at delta 100 (or the nearest size), mixed, FM / IMP >= 100 for
    every query and median >= 500 (own commits, and from an outside writer)."""
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
    if report.get("refused"):
        out["refused_queries"] = [f["query"] for f in report["refused"]]
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


def plot(report: dict[str, Any], base: Path, label: str = "TPC-H") -> list[str]:
    plt = pyplot()
    rows = report["results"]
    queries = [q["query"] for q in report["queries"]]
    sizes = sorted({r["delta"] for r in rows})
    own = any(r["imp_ms"] is not None for r in rows)
    field, what = ("imp_ms", "mixed batches") if own else \
        ("imp_outside_ms", "mixed batches of an outside writer")
    paths = []
    fig, ax = plt.subplots(figsize=(max(9, len(queries) * 0.25), 4))
    width = 0.8 / (len(sizes) + 1)
    x = np.arange(len(queries))
    for i, n in enumerate(sizes):
        vals = [next(((r[field] or np.nan) / 1000 for r in rows if r["query"] == q
                      and r["delta"] == n and r["kind"] == "mixed"), np.nan)
                for q in queries]
        ax.bar(x + i * width, vals, width, label=f"IMP delta {n}")
    fm = [q["fm_s"] for q in report["queries"]]
    ax.bar(x + len(sizes) * width, fm, width, label="FM", color="black")
    ax.set_yscale("log")
    ax.set_xticks(x + 0.4, queries, rotation=90 if len(queries) > 24 else 0)
    ax.set_ylabel("seconds (log)")
    ax.set_title(f"{label} SF {report['parameters']['sf']:g}: IMP ({what}) vs FM")
    ax.legend(fontsize=7, ncol=3)
    paths.append(save_figure(fig, base.with_name(base.name + "-imp-vs-fm.png")))
    fig, ax = plt.subplots(figsize=(9, 4))
    for q in queries:
        pts = sorted((r["delta"], r[field]) for r in rows
                     if r["query"] == q and r["kind"] == "mixed" and r[field] is not None)
        if pts:
            ax.plot(*zip(*pts), marker="o", label=q)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("delta size (tuples)")
    ax.set_ylabel("IMP ms (log)")
    ax.set_title(f"IMP maintenance vs delta size ({what})")
    if ax.get_legend_handles_labels()[0]:  # a report with no query measured has none
        ax.legend(fontsize=7, ncol=4)
    paths.append(save_figure(fig, base.with_name(base.name + "-imp-by-delta.png")))
    return paths


def run_bench(workload: Workload, sf: float, queries: list[str], sizes: list[int],
              fragments: int, repeats: int, feed_repeats: int, fm_runs: int, seed: int,
              outside_repeats: int, data_root: Path, max_load: float | None, progress: bool,
              out: str | Path, params: dict[str, Any]) -> dict[str, Any]:
    """The measurement loop over ``queries`` (module docstring); the report, written to
    ``out`` (plots beside it, ``-partial.json`` after every query)."""
    report = start_report(workload.name, {
        "sf": sf, "queries": queries, "delta_sizes": sizes, "fragments": fragments,
        "repeats": repeats, "feed_repeats": feed_repeats, "fm_runs": fm_runs,
        "outside_repeats": outside_repeats, "seed": seed,
        "backend": "local (in-process coordinator)",
        "batches": "per size a cycle: delete n, mixed (delete n/2 other rows, insert n/2), "
                   "insert (the rest); tuples of the batch table satisfy the query's "
                   "selection on it, drawn from a few random data files", **params},
        max_load, progress)
    log(progress, f"preparing {workload.label} SF {sf:g}")
    changed = workload.changed_tables(queries)
    store, root = workload.prepare(sf, data_root, progress, changed)
    report["setup"] = {"store": str(root)}
    for t in dict.fromkeys([workload.main_table] + changed):
        report["setup"][f"{t}_rows"] = count_rows(store, t)
        report["setup"][f"{t}_files"] = len(store.file_uris(t))
    from imp_core.spark import get_spark

    t0 = time.perf_counter()
    spark = get_spark()
    report["setup"]["spark_start_s"] = round(time.perf_counter() - t0, 2)
    report["environment"]["spark"] = spark.version
    coordinator = make_coordinator(store, root)
    rng = np.random.default_rng(seed)
    summaries: list[dict[str, Any]] = []
    samples: list[dict[str, Any]] = []
    failed: list[dict[str, Any]] = []
    refused: list[dict[str, Any]] = []

    def partial() -> None:
        write_partial(report, out, queries=summaries, failed=failed, refused=refused,
                      results=aggregate(summaries, samples), samples=samples)

    try:
        for qname in queries:
            t_query = time.perf_counter()
            # every table: one a query reads may be left out of order by an earlier run
            # whose queries changed it
            for t, _, seconds in recluster_decayed(store, changed + sorted(
                    set(store.tables()) - set(changed))):
                report.setdefault("reclustered", []).append(
                    {"before": qname, "table": t, "seconds": round(seconds, 2)})
                log(progress, f"  re-clustered {t} before {qname} ({seconds:.1f} s)")
            try:
                s, rows = measure_query(coordinator, store, qname, sizes, fragments, repeats,
                                        feed_repeats, rng, progress, fm_runs, outside_repeats,
                                        workload)
            except Refused as exc:
                refused.append({"query": qname, "error": exc.error, "reason": str(exc)[:2000]})
                log(progress, f"  {qname}: refused: {exc}")
                partial()
                continue
            except Exception as exc:  # noqa: BLE001 - one query's failure must not cost
                # the others' measurements: recorded, reported, and the run goes on
                failed.append({"query": qname, "error": type(exc).__name__,
                               "message": str(exc)[:2000]})
                log(progress, f"  {qname}: FAILED: {type(exc).__name__}: {exc}")
                try:
                    coordinator.drop(qname)
                except Exception:  # noqa: BLE001 - it may never have been registered
                    pass
                partial()
                continue
            s["wall_s"] = round(time.perf_counter() - t_query, 1)
            summaries.append(s)
            samples.extend(rows)
            partial()
            mixed: dict[tuple[str, int], list[float]] = {}
            for r in rows:
                if r["kind"] == "mixed":
                    mixed.setdefault((r["mode"], r["delta"]), []).append(r["imp_ms"])
            log(progress, f"  {qname}: bootstrap {s['bootstrap_s']:.1f} s, FM "
                f"{s['fm_s']:.2f} s, IMP mixed "
                + ", ".join(f"{m} {n}: {median(v):.2f} ms" for (m, n), v in mixed.items())
                + f", sketch ok: {s.get('sketch_ok')}, {s['wall_s']:.0f} s")
    finally:
        coordinator.close(checkpoint=False)
    report["queries"], report["failed"], report["refused"] = summaries, failed, refused
    report["results"] = aggregate(summaries, samples)
    report["samples"] = samples
    report["summary"] = summarize(report)
    finish_report(report, out, lambda base: plot(report, base, workload.label))
    return report


def merge_reports(paths: Iterable[str | Path], out: str | Path, label: str = "TPC-H"
                  ) -> dict[str, Any]:
    """One report from several runs (e.g. a ``-partial.json`` of an interrupted run and a
    run of the remaining queries, or a rerun of some queries after a fix); written to
    ``out``. A query measured in several runs keeps the last run's measurement (its
    summary and samples); one failed or refused in several runs is listed once, with the
    last run's reason, and not at all if a run measured it."""
    reports = [json.loads(Path(p).read_text()) for p in paths]
    first = reports[0]
    last_run = {q["query"]: i for i, r in enumerate(reports) for q in r["queries"]}
    queries = [q for i, r in enumerate(reports) for q in r["queries"]
               if last_run[q["query"]] == i]
    samples = [s for i, r in enumerate(reports) for s in r["samples"]
               if last_run.get(s["query"]) == i]
    report = {k: v for k, v in first.items() if k not in ("partial", "plots")}
    report["parameters"] = {**first["parameters"],
                            "queries": [q["query"] for q in queries],
                            "merged_from": [str(p) for p in paths]}
    report["load"] = {**first["load"], "at_end": reports[-1]["load"].get("at_end"),
                      "runs": [r["load"] for r in reports]}
    report["total_s"] = round(sum(r.get("total_s") or 0 for r in reports), 1)
    report["queries"], report["samples"] = queries, samples
    done = {q["query"] for q in queries}
    for part in ("failed", "refused"):
        latest = {f["query"]: f for r in reports for f in r.get(part, [])
                  if f["query"] not in done}
        report[part] = list(latest.values())
    if not any(r.get("refused") for r in reports):
        report.pop("refused")
    report["results"] = aggregate(queries, samples)
    report["summary"] = summarize(report)
    out = Path(out)
    report["plots"] = plot(report, out.with_suffix(""), label)
    out.write_text(json.dumps(report, indent=2, default=str))
    return report


def problem_rows(report: dict[str, Any], columns: int,
                 kinds: Sequence[tuple[str, str]], limit: int) -> list[str]:
    """Markdown rows of ``columns`` cells for the report's queries under each ``(kind,
    text field)`` of ``kinds`` (``failed``, ``refused``): the error, dashes, and the
    text's first line cut to ``limit`` characters."""
    lines = []
    for kind, key in kinds:
        for f in report.get(kind, []):
            msg = (f.get(key) or "").splitlines()[0] if f.get(key) else ""
            msg = (msg[:limit - 3] + "...") if len(msg) > limit else msg
            lines.append(f"| {f['query']} | {kind}: {f['error']} | " + " | ".join(
                ["-"] * (columns - 3)) + f" | {msg.replace('|', '/')} |")
    return lines
