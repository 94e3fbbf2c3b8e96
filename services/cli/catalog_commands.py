"""The ``imp`` commands that need no server: ``data`` (tables of a table store, read and
written where the store is) and ``workloads`` (the shipped workload queries).

``imp data load`` declares a table's key and value domains (``--key``, ``--domain``,
parsed by ``imp_core.storage.declared``); ``imp data ls`` shows them. Both print readable
text, or one JSON document with ``--json``. A mistake (a malformed flag, a missing file,
a table that exists, rows outside a declared domain) ends in one ``error:`` line and
exit status 2 with nothing written.
"""

from __future__ import annotations

import argparse
import difflib
import json
import sys
from pathlib import Path
from typing import Any

from imp_core.process.stdout import json_out

# where the tables of each suite come from
_SUITE_DATA = {"tpch22": "imp data tpch", "tpch": "imp data tpch",
               "tpcds99": "imp data tpcds --root DIR (a store of its own)",
               "synthetic": "imp data synthetic t50g t1000g t5000g t500000g tjoinhelp",
               "crimes": "imp data synthetic crimes"}


def _columns(text: str) -> list[str]:
    return text.split(",")


def add_catalog_commands(sub: argparse._SubParsersAction) -> None:
    """Adds ``data`` and ``workloads`` to ``imp``'s subparsers."""
    data = sub.add_parser("data", help="load tables into a service's table store (run "
                          "where the store is; a running service sees them at once)")
    dsub = data.add_subparsers(dest="what", required=True)

    tp = dsub.add_parser("tpch", help="generate TPC-H with tpchgen-cli and load it")
    ds = dsub.add_parser("tpcds", help="generate TPC-DS (24 tables) with tpcgen-cli and load "
                         "it, with keys and domains (into a store without TPC-H: both have "
                         "a customer table)")
    for gen, tool, count in ((tp, "tpchgen-cli", "eight"), (ds, "tpcgen-cli", "24")):
        gen.add_argument("--sf", type=float, default=1.0,
                         help="scale factor")
        gen.add_argument("--tables", type=_columns, default=None,
                         help=f"comma-separated subset (default: all {count})")
        gen.add_argument("--work-dir", default=".imp/data", help=f"where {tool} writes Parquet")
    syn = dsub.add_parser("synthetic", help="generate the synthetic workload tables")
    syn.add_argument("tables", nargs="+",
                     help="t50g, t1000g, t5000g, t500000g, tjoinhelp, crimes")
    syn.add_argument("--rows", type=int, default=1_000_000, help="rows per table")
    syn.add_argument("--seed", type=int, default=0, help="random seed of the generator")
    ld = dsub.add_parser("load", help="a table from a Parquet file or folder, or a copy of "
                         "a Delta table (its CHECK constraints' simple bounds become domains)")
    ld.add_argument("name", help="the table's name in the store")
    ld.add_argument("path", help="a Parquet file, a folder of Parquet parts or a Delta table")
    ld.add_argument("--key", type=_columns, default=None, metavar="COL[,COL]",
                    help="key columns, unique in the table (none: a hidden row id keeps "
                    "bag semantics)")
    ld.add_argument("--domain", action="append", default=[], metavar="COL=LO..HI",
                    help="declare that every value of COL lies in [LO, HI] (numbers, dates "
                    "as YYYY-MM-DD; leave a side empty for no bound); repeatable. The "
                    "safety rules prove sketches safe from domains (e.g. a SUM over a "
                    "column >= 0); rows outside are refused")
    ld.add_argument("--cluster-by", type=_columns, default=None, metavar="COL[,COL]",
                    help="sort on these columns (the sketch attributes)")
    for cmd in (tp, ds, syn, ld, dsub.add_parser("ls", help="the tables of the store, their "
                                             "keys and declared domains")):
        cmd.add_argument("--root", default=None,
                         help="table store root (default: IMP_TABLES, else IMP_ROOT, else "
                         ".imp/service)")
        cmd.add_argument("--json", action="store_true", help="print JSON on stdout")
        cmd.add_argument("--quiet", action="store_true", help="no progress bars")
    data.set_defaults(func=_data)

    wl = sub.add_parser("workloads", help="the shipped workload suites and their queries "
                        "(names for `imp register NAME --workload QUERY`)")
    wl.add_argument("name", nargs="?", default=None,
                    help="a suite (only its queries) or a query (its sketch header and SQL)")
    wl.add_argument("--json", action="store_true", help="print JSON on stdout")
    wl.set_defaults(func=_workloads)


# -- imp data ----------------------------------------------------------------------------------


def _data(args: argparse.Namespace) -> int:
    try:
        return _run_data(args)
    except BrokenPipeError:  # main ends quietly
        raise
    except (ValueError, OSError, RuntimeError) as exc:  # flags, files, a generator that
        # failed (an ImpError: main says it)
        print(f"error: {exc}", file=sys.stderr)
        return 2


def _run_data(args: argparse.Namespace) -> int:
    from imp_actors.runtime_config import RuntimeConfig
    from imp_core.storage import DeltaStore, datasets

    root = args.root or RuntimeConfig.from_env().tables_dir
    store = DeltaStore(root)
    progress = not args.quiet
    if args.what == "tpch":
        names = datasets.load_tpch(store, args.sf, Path(args.work_dir),
                                   tables=args.tables, progress=progress)
    elif args.what == "tpcds":
        names = datasets.load_tpcds(store, args.sf, Path(args.work_dir),
                                    tables=args.tables, progress=progress)
    elif args.what == "synthetic":
        names = datasets.load_synthetic(store, args.tables, args.rows, args.seed, progress)
    elif args.what == "load":
        datasets.load_parquet(store, args.name, args.path, key=args.key,
                              cluster_by=args.cluster_by or (), progress=progress,
                              domains=args.domain)
        names = [args.name.lower()]
    else:
        names = store.tables()
    rows = [_table_row(store, t) for t in names]
    if args.json:
        from services.cli.output import to_json

        print(json.dumps(to_json({"root": str(root), "tables": rows}), indent=2),
              file=json_out())
        return 0
    from imp_core.storage.declared import describe_domains, describe_key

    print(f"table store {root}")
    width = max([12, *(len(r["table"]) for r in rows)])
    for r in rows:
        print(f"  {r['table']:{width}s} version {r['version']:>5d}  {r['rows']:>12,d} rows  "
              f"key {describe_key(r['key'])}")
        if r["domains"]:
            print(f"  {'':{width}s} domains {describe_domains(r['domains'])}")
    return 0


def _table_row(store: Any, name: str) -> dict[str, Any]:
    entry = store.entry(name)
    return {"table": name, "version": store.version(name), "rows": store.read(name).num_rows,
            "location": entry.location, "key": list(entry.key) if entry.key else None,
            "domains": {c: list(b) for c, b in entry.domains.items()}}


# -- imp workloads -------------------------------------------------------------------------------


def workload_sql(name: str) -> str:
    """The shipped query ``name`` with its ``-- sketch:`` header; ValueError (pointing at
    ``imp workloads``) for an unknown name."""
    from imp_core.workloads.queries import load_query

    try:
        wq = load_query(name)
    except KeyError:
        raise ValueError(_unknown(name, "workload query")) from None
    header = ", ".join(f"{t}.{c}" for t, c in wq.sketch)
    return f"-- sketch: {header}\n{wq.sql}"


def _unknown(name: str, what: str) -> str:
    from imp_core.workloads.queries import SUITES, list_queries

    known = [*SUITES, *(q.name for s in SUITES for q in list_queries(s))]
    close = difflib.get_close_matches(name, known, n=3, cutoff=0.6)
    maybe = f" (did you mean {', '.join(close)}?)" if close else ""
    return f"unknown {what} {name!r}{maybe}; `imp workloads` lists them"


def _workloads(args: argparse.Namespace) -> int:
    from imp_core.workloads.queries import SUITE_DESCRIPTIONS, list_queries, load_query

    if args.name is not None and args.name not in SUITE_DESCRIPTIONS:
        try:
            wq = load_query(args.name)
        except KeyError:
            print(f"error: {_unknown(args.name, 'workload suite or query')}", file=sys.stderr)
            return 2
        if args.json:
            print(json.dumps({"suite": wq.suite, "name": wq.name, "sketch": _attrs(wq),
                              "sql": wq.sql}, indent=2), file=json_out())
        else:
            print(workload_sql(wq.name))
        return 0
    suites = [s for s in SUITE_DESCRIPTIONS if args.name in (None, s)]
    doc = [{"suite": s, "description": SUITE_DESCRIPTIONS[s], "data": _SUITE_DATA[s],
            "queries": [{"name": q.name, "sketch": _attrs(q)} for q in list_queries(s)]}
           for s in suites]
    if args.json:
        print(json.dumps({"suites": doc}, indent=2), file=json_out())
        return 0
    for suite in doc:
        print(f"{suite['suite']}: {suite['description']} ({len(suite['queries'])} queries; "
              f"tables: {suite['data']})")
        for q in suite["queries"]:
            print(f"  {q['name']:16s} sketch {', '.join(q['sketch'])}")
    print("register one with: imp register NAME --workload QUERY; its SQL: "
          "imp workloads QUERY")
    return 0


def _attrs(wq: Any) -> list[str]:
    return [f"{t}.{c}" for t, c in wq.sketch]
