"""The ``imp`` command line.

Subcommands: ``demo`` (the engine demo), ``bench engine|spark|actors|grpc``, and the
service's ``serve`` and client commands (``register``, ``sketch``, ``watch``, ``update``,
``query``, ``ls``, ``drop``, ``evict``, ``restore``, ``scale``, ``maintain``,
``checkpoint``, ``stats``; see ``services/cli.py``).
Output is readable by default; ``--json`` prints machine-readable JSON on stdout
(progress goes to stderr).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from imp_core.errors import ImpError


def _ints(text: str) -> list[int]:
    try:
        return [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected comma-separated integers, got {text!r}") from None


def _write_report(report: dict, args: argparse.Namespace, readable) -> int:
    """Write the full report to ``args.out``; print JSON (``--json``) or ``readable()``."""
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2, default=str))
    print(f"full report (with machine and versions): {out}", file=sys.stderr)
    if args.json:
        print(json.dumps(report if args.full else report["results"], indent=2, default=str))
    else:
        readable()
        for k, v in report.get("summary", {}).items():
            print(f"{k}: {v}")
    return 0


def _bench_engine(args: argparse.Namespace) -> int:
    from imp_core.bench.engine import DELTA_SIZES, FRAGMENTS, QUERIES, run_engine_bench, summarize

    report = run_engine_bench(
        rows=args.rows, queries=args.queries or QUERIES,
        delta_sizes=args.delta_sizes or DELTA_SIZES, fragments=args.fragments or FRAGMENTS,
        min_seconds=args.min_seconds, min_batches=2 if args.min_seconds == 0 else 5,
        progress=not args.quiet)
    report["summary"] = summarize(report)

    def readable() -> None:
        print(f"{'query':12s} {'frags':>6s} {'delta':>6s} {'tuples/s':>14s} {'p50 ms':>9s} "
              f"{'p95 ms':>9s}")
        for r in report["results"]:
            print(f"{r['query']:12s} {r['fragments']:6d} {r['delta_size']:6d} "
                  f"{r['tuples_per_s']:14,.0f} {r['batch_ms_p50']:9.3f} {r['batch_ms_p95']:9.3f}")

    return _write_report(report, args, readable)


def _bench_spark(args: argparse.Namespace) -> int:
    from imp_core.bench.spark import DELTA_SIZES, QUERIES, run_spark_bench, summarize

    report = run_spark_bench(
        sf=args.sf, rows=args.rows, queries=args.queries or QUERIES,
        fragments=args.fragments, delta_sizes=args.delta_sizes or DELTA_SIZES,
        repeats=args.repeats, data_root=args.data_root, row_group_rows=args.row_group_rows,
        page_rows=args.page_rows, progress=not args.quiet, bootstrap=args.bootstrap)
    report["summary"] = summarize(report)

    def readable() -> None:
        print(f"{'query':14s} {'boot s':>7s} {'fm s':>7s} {'ns s':>7s} {'use s':>7s} "
              f"{'read ns':>10s} {'read use':>10s} {'share':>7s} same")
        for r in report["results"]:
            share = "-" if r["rows_read_share"] is None else f"{100 * r['rows_read_share']:.1f}%"
            print(f"{r['query']:14s} {r['bootstrap_s']:7.2f} {r['fm_s']:7.2f} {r['ns_s']:7.2f} "
                  f"{r['use_s']:7.2f} {r['rows_read_ns'] or 0:10,d} {r['rows_read_use'] or 0:10,d}"
                  f" {share:>7s} {r['same_result']}")
        print(f"{'table':9s} {'delta':>6s} {'spark ms':>9s} {'direct ms':>10s}")
        for d in report["deltas"]:
            print(f"{d['table']:9s} {d['delta_size']:6d} {d['delta_ms_spark']:9.1f} "
                  f"{d['delta_ms_direct']:10.1f}")

    return _write_report(report, args, readable)


def _bench_actors(args: argparse.Namespace) -> int:
    from imp_core.bench.actors import run_actors_bench, summarize

    report = run_actors_bench(rows=args.rows, queries=args.queries, max_live=args.max_live,
                              calls=args.calls, data_root=args.data_root,
                              chaos_steps=args.chaos_steps, progress=not args.quiet)
    report["summary"] = summarize(report)

    def readable() -> None:
        for k, v in report["results"].items():
            print(f"{k}: {v}")

    return _write_report(report, args, readable)


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
        print(json.dumps({"root": str(root), "tables": rows}, indent=2))
    else:
        print(f"table store {root}")
        for r in rows:
            print(f"  {r['table']:12s} version {r['version']:>5d}  {r['rows']:>12,d} rows")
    return 0


def _demo(args: argparse.Namespace) -> int:
    if args.engine:
        from imp_core.demo import run_demo as run_engine_demo

        run_engine_demo(rows=args.rows, batches=args.batches, seed=args.seed,
                        tpch_scale=args.tpch_scale)
        return 0
    from services.demo import run_demo

    return run_demo(root=args.root, tpch_scale=args.tpch_scale, rows=args.rows,
                    batches=args.batches, batch_size=args.batch_size, seed=args.seed,
                    backend=args.backend)

    run_demo(rows=args.rows, batches=args.batches, seed=args.seed, tpch_scale=args.tpch_scale)
    return 0


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

    bench = sub.add_parser("bench", help="run a benchmark suite")
    bsub = bench.add_subparsers(dest="suite", required=True)
    eng = bsub.add_parser("engine", help="in-process engine throughput (no Spark, no Ray)")
    eng.add_argument("--json", action="store_true", help="print JSON on stdout")
    eng.add_argument("--full", action="store_true",
                     help="with --json: print the whole report, not only the result rows")
    eng.add_argument("--rows", type=int, default=200_000, help="rows of t5000g")
    eng.add_argument("--queries", type=lambda s: s.split(","), default=None)
    eng.add_argument("--delta-sizes", type=_ints, default=None)
    eng.add_argument("--fragments", type=_ints, default=None)
    eng.add_argument("--min-seconds", type=float, default=0.5,
                     help="measure each point for at least this long")
    eng.add_argument("--out", default="bench-results/engine.json",
                     help="where to write the full JSON report")
    eng.add_argument("--quiet", action="store_true", help="no progress lines")
    eng.set_defaults(func=_bench_engine)

    spk = bsub.add_parser("spark", help="the Spark layer on TPC-H and t5000g: recapture, "
                          "bootstrap, query with/without sketch, delta extraction")
    spk.add_argument("--json", action="store_true", help="print JSON on stdout")
    spk.add_argument("--full", action="store_true",
                     help="with --json: print the whole report, not only the result rows")
    spk.add_argument("--sf", type=float, default=1.0, help="TPC-H scale factor")
    spk.add_argument("--rows", type=int, default=1_000_000, help="rows of t5000g")
    spk.add_argument("--queries", type=lambda s: s.split(","), default=None)
    spk.add_argument("--fragments", type=int, default=1000,
                     help="fragments of each query's sketch attribute")
    spk.add_argument("--delta-sizes", type=_ints, default=None)
    spk.add_argument("--repeats", type=int, default=3,
                     help="timed pulls per delta (after one warm-up); the median is reported")
    spk.add_argument("--row-group-rows", type=int, default=65_536,
                     help="rows per Parquet row group of the bench's Delta tables")
    spk.add_argument("--page-rows", type=int, default=2048,
                     help="rows per Parquet data page (page-index skipping granularity)")
    spk.add_argument("--data-root", default=".imp",
                     help="TPC-H cache (<root>/data) and Delta store (<root>/bench)")
    spk.add_argument("--out", default="bench-results/spark.json",
                     help="where to write the full JSON report")
    spk.add_argument("--bootstrap", choices=("spark", "engine", "both"), default="spark",
                     help="how registration builds the state (both: also time the engine "
                     "path, as bootstrap_engine_s)")
    spk.add_argument("--quiet", action="store_true", help="no progress lines")
    spk.set_defaults(func=_bench_spark)

    act = bsub.add_parser("actors", help="the actor runtime on a local Ray: fresh sketch "
                          "latency, maintenance, restore, registrations under a live-actor "
                          "cap, chaos")
    act.add_argument("--json", action="store_true", help="print JSON on stdout")
    act.add_argument("--full", action="store_true",
                     help="with --json: print the whole report, not only the results")
    act.add_argument("--rows", type=int, default=1_000_000, help="rows of t5000g")
    act.add_argument("--queries", type=int, default=200, help="queries to register")
    act.add_argument("--max-live", type=int, default=16, help="live query actors at most")
    act.add_argument("--calls", type=int, default=2000, help="GetSketch calls timed")
    act.add_argument("--chaos-steps", type=int, default=12, help="update steps of the chaos run")
    act.add_argument("--data-root", default=".imp", help="where the bench's service root goes")
    act.add_argument("--out", default="bench-results/actors.json",
                     help="where to write the full JSON report")
    act.add_argument("--quiet", action="store_true", help="no progress lines")
    act.set_defaults(func=_bench_actors)

    # the IMP paper's experiments (issue 6): tpch, micro, breakeven, mixed, strategies, ...
    from imp_core.bench.paper_cli import add_paper_suites

    add_paper_suites(bsub)

    # the service: `serve`, the client commands and `bench grpc` (services/cli.py)
    from services.cli import add_bench_command, add_client_commands

    add_bench_command(bsub)
    add_client_commands(sub)
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except ImpError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
