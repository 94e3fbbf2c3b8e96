"""The ``imp`` command line.

Subcommands: ``data`` (load tables into a service's table store), ``demo`` (the whole
service, or ``--engine`` the in-process engine), ``serve`` and the client commands
(``register``, ``sketch``, ``watch``, ``update``, ``query``, ``ls``, ``drop``, ``evict``,
``restore``, ``scale``, ``maintain``, ``checkpoint``, ``stats``; ``services.cli.commands``),
and ``bench`` with the benchmark suites when the ``benchmarks`` package is installed.
Output is readable by default; ``--json`` prints machine-readable JSON on stdout
(progress goes to stderr). An ``ImpError`` ends the command with exit status 2.
"""

from __future__ import annotations

import argparse
import importlib
import io
import json
import os
import sys
from pathlib import Path

from imp_core.errors import ImpError
from imp_core.stdout import json_only_stdout, json_out
from services.cli.commands import add_client_commands

# The benchmark suites sit above the service (they drive the coordinator and the gRPC
# server) and are not part of the service's image, so the front end finds their commands
# by name at run time instead of importing them: the layers stay one-way and ``imp``
# works without them.
BENCH_COMMANDS = "benchmarks.cli"


def _data(args: argparse.Namespace) -> int:
    from imp_actors.config import RuntimeConfig
    from imp_core import datasets
    from imp_core.storage import DeltaStore

    root = args.root or RuntimeConfig.from_env().tables_dir
    store = DeltaStore(root)
    progress = not args.quiet
    if args.what == "tpch":
        names = datasets.load_tpch(store, args.sf, Path(args.work_dir),
                                   tables=args.tables, progress=progress)
    elif args.what == "synthetic":
        names = datasets.load_synthetic(store, args.tables, args.rows, args.seed, progress)
    elif args.what == "load":
        datasets.load_parquet(store, args.name, args.path, key=args.key,
                              cluster_by=args.cluster_by or (), progress=progress)
        names = [args.name.lower()]
    else:
        names = store.tables()
    rows = [{"table": t, "version": store.version(t), "rows": store.read(t).num_rows,
             "location": store.entry(t).location} for t in names]
    if args.json:
        print(json.dumps({"root": str(root), "tables": rows}, indent=2), file=json_out())
    else:
        print(f"table store {root}")
        for r in rows:
            print(f"  {r['table']:12s} version {r['version']:>5d}  {r['rows']:>12,d} rows")
    return 0


def _demo(args: argparse.Namespace) -> int:
    if args.engine:
        from services.demo_engine import run_demo as run_engine_demo

        run_engine_demo(rows=args.rows, batches=args.batches, seed=args.seed,
                        tpch_scale=args.tpch_scale)
        return 0
    from services.demo import run_demo

    return run_demo(root=args.root, tpch_scale=args.tpch_scale, rows=args.rows,
                    batches=args.batches, batch_size=args.batch_size, seed=args.seed,
                    backend=args.backend)


def _add_bench_commands(sub: argparse._SubParsersAction) -> None:
    """``imp bench ...``, added by the benchmarks package when it is installed."""
    try:
        bench = importlib.import_module(BENCH_COMMANDS)
    except ModuleNotFoundError as exc:
        if exc.name not in ("benchmarks", BENCH_COMMANDS):
            raise
        return
    bench.add_bench_commands(sub)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="imp", description="Incremental maintenance of "
                                "provenance sketches (IMP).")
    sub = p.add_subparsers(dest="command", required=True)

    data = sub.add_parser("data", help="load tables into a service's table store (run "
                          "where the store is; a running service sees them at once)")
    dsub = data.add_subparsers(dest="what", required=True)

    def data_common(cmd: argparse.ArgumentParser) -> None:
        cmd.add_argument("--root", default=None,
                         help="table store root (default: IMP_TABLES, IMP_ROOT, .imp/service)")
        cmd.add_argument("--json", action="store_true", help="print JSON on stdout")
        cmd.add_argument("--quiet", action="store_true", help="no progress bars")

    tp = dsub.add_parser("tpch", help="generate TPC-H with tpchgen-cli and load it")
    tp.add_argument("--sf", type=float, default=1.0, help="scale factor")
    tp.add_argument("--tables", type=lambda s: s.split(","), default=None,
                    help="comma-separated subset (default: all eight)")
    tp.add_argument("--work-dir", default=".imp/data", help="where tpchgen-cli writes Parquet")
    syn = dsub.add_parser("synthetic", help="generate the synthetic workload tables")
    syn.add_argument("tables", nargs="+",
                     help="t50g, t1000g, t5000g, t500000g, tjoinhelp, crimes")
    syn.add_argument("--rows", type=int, default=1_000_000)
    syn.add_argument("--seed", type=int, default=0)
    ld = dsub.add_parser("load", help="a table from a Parquet file or folder")
    ld.add_argument("name")
    ld.add_argument("path")
    ld.add_argument("--key", type=lambda s: s.split(","), default=None,
                    help="key columns (none: a hidden row id keeps bag semantics)")
    ld.add_argument("--cluster-by", type=lambda s: s.split(","), default=None,
                    help="sort on these columns (the sketch attributes)")
    for cmd in (tp, syn, ld, dsub.add_parser("ls", help="the tables of the store")):
        data_common(cmd)
    data.set_defaults(func=_data)

    demo = sub.add_parser("demo", help="the whole service on the embedded defaults: TPC-H, "
                          "queries registered and maintained through gRPC, updates streamed")
    demo.add_argument("--root", default=".imp/demo", help="service root (recreated)")
    demo.add_argument("--rows", type=int, default=200_000, help="rows of t5000g")
    demo.add_argument("--batches", type=int, default=4, help="update batches")
    demo.add_argument("--batch-size", type=int, default=200,
                      help="changed rows per table and batch")
    demo.add_argument("--tpch-scale", type=float, default=0.05, help="TPC-H scale factor")
    demo.add_argument("--backend", choices=("ray", "local"), default="ray",
                      help="query workers as Ray actors (default) or in-process")
    demo.add_argument("--engine", action="store_true",
                      help="the in-process engine demo instead (no Spark, Ray or gRPC)")
    demo.add_argument("--seed", type=int, default=7)
    demo.set_defaults(func=_demo)

    _add_bench_commands(sub)
    add_client_commands(sub)
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    args.argv = list(sys.argv[1:] if argv is None else argv)  # as given: a supervisor's child
    try:
        if getattr(args, "json", False):
            with json_only_stdout():  # the JSON document and nothing else on stdout
                return args.func(args)
        return args.func(args)
    except ImpError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # the reader went away (``imp ls | head -1``): stop quietly
        try:  # so the flush at exit does not fail again
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        except (OSError, ValueError, AttributeError, io.UnsupportedOperation):
            pass
        return 1


if __name__ == "__main__":
    sys.exit(main())
