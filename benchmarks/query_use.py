"""``imp bench use``: does a sketch make the user's query read less and run faster, and
never cost time? RunQuery with and without it, on the same layout.

For each workload query over TPC-H (scale factor SF; the TPC-H store of ``imp bench
tpch``), the sketch attributes are chosen by the attribute advisor (``attributes``
"auto", ``imp_core.advice.attributes``: safe candidates captured on Spark and measured against the
tables' pages) or taken from the query's header ("header"), with ``fragments``
equi-depth ranges; the accurate sketch is captured on Spark, then the query runs through
the service's own RunQuery path (``imp_actors.spark_work.SparkWork.run``: the sketch
fitted to the pages, and the access path of ``imp_core.spark.access`` deciding whether
each table is read with its filter) and plainly, alternately, ``repeats`` times each
after one warm-up run of both. Reported per query: the attributes and why (the advisor's
line), the provenance share, the estimated and the actual share of each sketched table
Spark read (rows from its scans' metrics), the compressed bytes of the pages read
(estimated from the pages the filter meets: Spark's input metrics undercount Parquet
reads), the median times, ``use_over_plain`` (above 1: the sketch cost time) and whether both
returned the same rows.
"""

from __future__ import annotations

import statistics
import time
from pathlib import Path
from typing import Any, Iterable

from benchmarks.common import environment
from benchmarks.paper_common import log
from imp_core.oracle.results import same_rows

ATTRIBUTES = ("auto", "header")


def prepare(work: Any, store: Any, qname: str, fragments: int, attributes: str,
            progress: bool) -> Any:
    """The query prepared on the store's latest versions with its attributes chosen."""
    from imp_core.query.prepare import StoreTables, prepare_query
    from imp_core.storage.row_groups import StoreLayout
    from imp_core.workloads.queries import load_query

    wq = load_query(qname)
    if attributes == "header":
        specs: Any = {f"{t}.{c}": fragments for t, c in wq.sketch}
    else:
        specs = "auto"
    return prepare_query(
        wq.sql, StoreTables(store), specs, fragments, force=attributes == "header",
        capture=lambda plan, pset, versions: work.recapture(plan, pset, versions)[0],
        layout=StoreLayout(store), progress=lambda line: log(progress, f"    {line}"))


def measure(work: Any, store: Any, qname: str, fragments: int, repeats: int,
            max_read_share: float, attributes: str = "auto",
            progress: bool = False) -> dict[str, Any]:
    t0 = time.perf_counter()
    prepared = prepare(work, store, qname, fragments, attributes, progress)
    advice = prepared.advice
    row: dict[str, Any] = {"query": qname, "attributes": attributes,
                           "sketch": [f"{p.table}.{p.column}"
                                      for p in prepared.partitions.partitions],
                           "why": advice.why if advice is not None else "",
                           "advise_s": round(time.perf_counter() - t0, 3)}
    versions = dict(prepared.versions)
    sketch, fm_s = work.recapture(prepared.plan, prepared.partitions, versions)
    row["fm_s"] = round(fm_s, 3)
    row["sketch_fragments"] = len(sketch.fragments)
    row["fragments"] = prepared.partitions.size
    row["provenance_share"] = {
        c.table: round(c.provenance_share, 4) for c in
        (advice.chosen_candidates() if advice is not None else ())
        if c.provenance_share is not None}
    use = plain = None
    use_s, plain_s = [], []
    for i in range(repeats + 1):  # the first round warms both plans
        use = work.run(prepared.plan, versions, sketch, max_read_share)
        plain = work.run(prepared.plan, versions, None)
        if i:
            use_s.append(use.seconds)
            plain_s.append(plain.seconds)
    assert use is not None and plain is not None
    sketched = [p.table for p in prepared.partitions.partitions]
    row["access"] = use.access
    row["access_reason"] = use.access_reason
    row["estimated_read_share"] = {t: round(s, 4) for t, s in use.read_share.items()}
    row["rows_read_use"] = {t: use.rows_read.get(t) for t in sketched}
    row["rows_read_plain"] = {t: plain.rows_read.get(t) for t in sketched}
    row["table_rows"] = {t: use.table_rows.get(t) for t in sketched}
    row["read_share"] = {t: round(use.rows_read[t] / (use.table_rows[t]
                                                      * use.table_scans.get(t, 1)), 4)
                         for t in sketched if use.table_rows.get(t) and t in use.rows_read}
    row["within_bound"] = within_bound(store, prepared, sketch, row)
    row["bytes_estimate_use"] = {t: use.bytes_estimate.get(t) for t in sketched}
    row["bytes_estimate_plain"] = {t: plain.bytes_estimate.get(t) for t in sketched}
    row["use_s"] = round(statistics.median(use_s), 3)
    row["plain_s"] = round(statistics.median(plain_s), 3)
    row["use_over_plain"] = round(row["use_s"] / row["plain_s"], 3) if row["plain_s"] else None
    row["same_result"] = same_rows(plain.rows, use.rows)
    return row


def within_bound(store: Any, prepared: Any, sketch: Any, row: dict[str, Any]
                 ) -> dict[str, bool]:
    """Per sketched table: whether Spark read at most twice the provenance's rows plus
    one row group per fragment of the sketch (the target of issue 27)."""
    from imp_core.storage.row_groups import StoreLayout

    layout, out = StoreLayout(store), {}
    for p in prepared.partitions.partitions:
        t, share = p.table, row["provenance_share"].get(p.table)
        rows, read = row["table_rows"].get(t), row["rows_read_use"].get(t)
        found = layout(t, prepared.versions[t], p.column)
        if share is None or not rows or read is None or found is None or not found.groups:
            continue
        group = found.total_rows / found.groups
        out[t] = read <= 2 * share * rows + len(sketch.table_fragments(t)) * group
    return out


def summarize(results: list[dict[str, Any]], max_read_share: float) -> dict[str, Any]:
    ratios = [r["use_over_plain"] for r in results if r["use_over_plain"] is not None]
    used = [r for r in results if r["access"] == "sketch"]
    speedups = [1 / r["use_over_plain"] for r in used if r["use_over_plain"]]
    selective = [r for r in results if r["provenance_share"]
                 and min(r["provenance_share"].values()) <= 0.25]
    return {"queries": len(results), "max_use_over_plain": max(ratios, default=None),
            "sketch_used": len(used), "used": [r["query"] for r in used],
            "median_speedup_used": round(statistics.median(speedups), 3) if speedups
            else None,
            "selective": len(selective),
            "selective_used": sum(r["access"] == "sketch" for r in selective),
            "selective_within_bound": sum(all(r.get("within_bound", {}).values())
                                          for r in selective if r["access"] == "sketch"),
            "not_used": {r["query"]: r["why"] or r["access_reason"] for r in results
                         if r["access"] != "sketch"},
            "all_same_result": all(r["same_result"] for r in results),
            "max_read_share": max_read_share}


def lay_out(work: Any, store: Any, names: list[str], fragments: int, attributes: str,
            progress: bool) -> dict[str, Any]:
    """Each query's sketch captured on its chosen attributes, then every sketched table
    laid out in the order the layout advice recommends for all of them."""
    from imp_core.advice.layouts import advise_layout
    from imp_core.storage.clustering import cluster_column

    by_table: dict[str, dict[str, Any]] = {}
    for qname in names:
        log(progress, f"  {qname}: choosing attributes for the layout advice ...")
        prepared = prepare(work, store, qname, fragments, attributes, progress)
        sketch, _ = work.recapture(prepared.plan, prepared.partitions,
                                   dict(prepared.versions))
        for p in prepared.partitions.partitions:
            by_table.setdefault(p.table, {})[qname] = sketch
    out = {}
    for table, sketches in sorted(by_table.items()):
        entry = store.entry(table)
        current = tuple(entry.sketch_columns) or tuple(
            c for c in (cluster_column(store, table),) if c)
        columns = {s.partitions.for_table(table)[0].column for s in sketches.values()}
        data = store.read(table, columns=sorted(columns | set(current)))
        advice = advise_layout(table, sketches, data, current,
                               page_rows=store.options.page_rows or 2048,
                               max_group_rows=store.options.max_row_group_size)
        done = None
        if advice.recommended and advice.recommended != current:
            done = store.layout(table, advice.recommended)
            log(progress, f"  laid {table} out by {', '.join(done.columns)} ({done.order}): "
                f"{done.row_groups} row groups in {done.seconds:.1f} s")
        out[table] = {"advice": advice.to_json(),
                      "applied": None if done is None else
                      {"columns": list(done.columns), "order": done.order,
                       "row_groups": done.row_groups, "seconds": round(done.seconds, 1)}}
    return out


def _layout_store(root: Path, sf: float) -> Path:
    """A copy of the bench's TPC-H store to lay out (the other suites keep theirs)."""
    import shutil

    copy = root.parent / f"{root.name}-use-layout"
    if not copy.exists():
        shutil.copytree(root, copy)
    return copy


def run_use_bench(sf: float = 1.0, queries: Iterable[str] = ("all22",), fragments: int = 64,
                  repeats: int = 3, max_read_share: float | None = None,
                  data_root: str | Path = ".imp", progress: bool = True,
                  attributes: str = "auto", layout: bool = False) -> dict[str, Any]:
    from benchmarks.tpch import expand_queries, prepare_tpch_store
    from imp_actors.runtime_config import RuntimeConfig
    from imp_actors.spark_work import SparkWork

    if attributes not in ATTRIBUTES:
        raise ValueError(f"attributes {attributes!r}: one of {', '.join(ATTRIBUTES)}")
    started = time.perf_counter()
    share = RuntimeConfig().sketch_max_read_share if max_read_share is None else max_read_share
    names = expand_queries(queries)
    store, root = prepare_tpch_store(sf, Path(data_root), progress, changed=())
    layouts = None
    if layout:
        from benchmarks.paper_common import open_store

        root = _layout_store(Path(root), sf)
        store = open_store(root)
        layouts = lay_out(SparkWork(store), store, names, fragments, attributes, progress)
    work = SparkWork(store)
    results = []
    for qname in names:
        log(progress, f"  {qname}: choosing attributes ({attributes}) ...")
        row = measure(work, store, qname, fragments, repeats, share, attributes, progress)
        results.append(row)
        log(progress, f"  {qname}: {', '.join(row['sketch'])}: {row['access']:6s} use "
            f"{row['use_s']:6.2f} s plain {row['plain_s']:6.2f} s "
            f"({row['use_over_plain']:.2f}x) read {row['read_share']} "
            f"same={row['same_result']}")
    return {"bench": "use", "environment": environment(),
            "parameters": {"sf": sf, "queries": names, "fragments": fragments,
                           "repeats": repeats, "max_read_share": share, "store": str(root),
                           "attributes": attributes, "layout": layout},
            "layouts": layouts, "results": results, "summary": summarize(results, share),
            "total_s": round(time.perf_counter() - started, 1)}
