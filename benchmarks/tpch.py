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
registration, and one at each verification point (after a mixed batch of the largest
size, and after the outside writer's cycles), where the maintained sketch must equal the
recaptured one (``sketch_ok``). A ``-partial.json`` report is rewritten after every
query. A query that fails (say, a construct Spark cannot compile yet) is listed under
``failed`` with its error, the rows its batches had deleted are re-inserted, and the run
goes on with the next query. The measurement loop is ``benchmarks.fm_vs_imp``'s, shared
with ``imp bench tpcds``; this module says what is TPC-H's (``TPCH``).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Iterable

import numpy as np

from benchmarks import fm_vs_imp
from benchmarks.fm_vs_imp import (  # noqa: F401 - the bench's API, as before
    Registered,
    Workload,
    aggregate,
    outside_commit,
    plot,
    summarize,
)
from benchmarks.paper_common import log, open_store

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


def _register(coordinator, qname: str, fragments: int) -> Registered:
    """Register on the header's attribute; an unsafe one is registered forced (as the
    Spark bench), and the reason kept."""
    from imp_actors.types import QuerySpec
    from imp_core.errors import UnsafeSketchError
    from imp_core.workloads.queries import load_query

    wq = load_query(qname)
    table, column = sketch_attribute(qname)
    parts = {f"{table}.{column}": fragments}
    t0 = time.perf_counter()
    try:
        info = coordinator.register(QuerySpec(name=qname, sql=wq.sql, partitions=parts))
        note = None
    except UnsafeSketchError as exc:  # maintain anyway, and say so
        note = str(exc)
        t0 = time.perf_counter()
        info = coordinator.register(QuerySpec(name=qname, sql=wq.sql, partitions=parts,
                                              force=True))
    return Registered(info, time.perf_counter() - t0, table, column, note)


def _changed(queries: list[str]) -> list[str]:
    tables = {sketch_attribute(q)[0] for q in queries}
    return ["lineitem"] + sorted(tables - {"lineitem"})


def _prepare(sf: float, data_root: Path, progress: bool, changed: list[str]):
    return prepare_tpch_store(sf, data_root, progress, changed)


TPCH = Workload(name="tpch", label="TPC-H", main_table="lineitem", prepare=_prepare,
                register=_register, table_key=table_key, changed_tables=_changed)


def measure_query(coordinator, store, qname: str, sizes: list[int], fragments: int,
                  repeats: int, feed_repeats: int, rng: np.random.Generator,
                  progress: bool, fm_runs: int = 1, outside_repeats: int = 0
                  ) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """``fm_vs_imp.measure_query`` of a TPC-H query: on its header's sketch attribute,
    batches of the sketched table."""
    return fm_vs_imp.measure_query(coordinator, store, qname, sizes, fragments, repeats,
                                   feed_repeats, rng, progress, fm_runs, outside_repeats,
                                   TPCH)


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
    sketched = sorted({"{}.{}".format(*sketch_attribute(q)) for q in queries})
    params = {"sketch": sketched[0] if len(sketched) == 1 else
              "per query, its workload header (queries[].sketch)"}
    return fm_vs_imp.run_bench(TPCH, sf, queries, sizes, fragments, repeats, feed_repeats,
                               fm_runs, seed, outside_repeats, Path(data_root), max_load,
                               progress, out, params)


def merge_reports(paths: Iterable[str | Path], out: str | Path) -> dict[str, Any]:
    """One report from several runs, a query rerun keeping its last run (``fm_vs_imp``)."""
    return fm_vs_imp.merge_reports(paths, out, "TPC-H")


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
    lines += fm_vs_imp.problem_rows(report, len(head), (("failed", "message"),), 120)
    return "\n".join(lines)


if __name__ == "__main__":  # python -m benchmarks.tpch REPORT.json [DELTA]
    import json
    import sys

    _report = json.loads(Path(sys.argv[1]).read_text())
    print(markdown_table(_report, int(sys.argv[2]) if len(sys.argv) > 2 else None))
