"""``imp bench``: the benchmark suites' command line, added to ``imp`` by
``services.cli.main`` when this package is installed (``add_bench_commands``).

Suites: ``engine``, ``spark``, ``actors``, ``grpc``, ``coverage``, ``fuzz`` here, and the IMP
paper's experiments (``benchmarks.paper_cli``). Each writes its full report to ``--out``
(JSON with machine and versions) and prints the result rows as JSON with ``--json`` (the
whole report with ``--full``), else a readable table. A suite's module is imported only
when it runs.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from benchmarks.paper_cli import add_paper_suites
from imp_core.process.stdout import json_out


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
        print(json.dumps(report if args.full else report["results"], indent=2, default=str),
              file=json_out())
    else:
        readable()
        for k, v in report.get("summary", {}).items():
            print(f"{k}: {v}")
    return 0


def _bench_engine(args: argparse.Namespace) -> int:
    from benchmarks.engine import DELTA_SIZES, FRAGMENTS, QUERIES, run_engine_bench, summarize

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
    from benchmarks.spark import DELTA_SIZES, QUERIES, run_spark_bench, summarize

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
    from benchmarks.actors import run_actors_bench, summarize

    report = run_actors_bench(rows=args.rows, queries=args.queries, max_live=args.max_live,
                              calls=args.calls, data_root=args.data_root,
                              chaos_steps=args.chaos_steps, progress=not args.quiet)
    report["summary"] = summarize(report)

    def readable() -> None:
        for k, v in report["results"].items():
            print(f"{k}: {v}")

    return _write_report(report, args, readable)


def _bench_grpc(args: argparse.Namespace) -> int:
    from benchmarks.grpc import CLIENTS, run_grpc_bench, summarize

    report = run_grpc_bench(clients=args.clients or CLIENTS, seconds=args.seconds,
                            warmup=args.warmup, rows=args.rows, fragments=args.fragments,
                            processes=args.processes, paced_rate=args.paced_rate,
                            progress=not args.quiet, rounds=args.rounds)
    report["summary"] = summarize(report)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2))
    print(f"full report (with machine and versions): {out}", file=sys.stderr)
    if args.json:
        print(json.dumps(report if args.full else report["results"], indent=2),
              file=json_out())
    else:
        print(f"{'clients':>8s} {'mode':>14s} {'calls':>9s} {'calls/s':>10s} {'p50 ms':>8s} "
              f"{'p99 ms':>8s} {'no-op/s':>9s} {'ratio':>6s}")
        for r in report["results"] + report["paced"]:
            mode = r["mode"] if not r["rate_per_client"] else f"{r['rate_per_client']:g}/s each"
            noop = r.get("noop_calls_per_s")
            ratio = r.get("ratio_to_noop")
            print(f"{r['clients']:8d} {mode:>14s} {r['calls']:9,d} {r['calls_per_s']:10,.0f} "
                  f"{r['getsketch_p50_ms']:8.3f} {r['getsketch_p99_ms']:8.3f} "
                  f"{'-' if noop is None else f'{noop:,.0f}':>9s} "
                  f"{'-' if ratio is None else f'{ratio:.2f}':>6s}")
        for k, v in report["summary"].items():
            print(f"{k}: {v}")
    return 0


def _bench_coverage(args: argparse.Namespace) -> int:
    """``imp bench coverage``: with ``--json`` only the JSON report on stdout (anything the
    run prints goes to stderr), else a short table."""
    import contextlib

    from benchmarks.coverage import format_table, run_coverage

    with contextlib.redirect_stdout(sys.stderr):
        report = run_coverage(folder=args.folder, suite=args.suite, sf=args.sf,
                              data_root=args.data_root, fragments=args.fragments,
                              progress=not args.quiet, benchmark=args.benchmark,
                              advisor=args.advisor)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2, default=str))
    print(f"full report: {out}", file=sys.stderr)
    if args.json:
        print(json.dumps({k: report[k] for k in ("parameters", "summary", "results")},
                         indent=2, default=str), file=json_out())
    else:
        print(format_table(report))
    return 0


def _bench_fuzz(args: argparse.Namespace) -> int:
    from benchmarks.fuzz import run_fuzz_bench

    report = run_fuzz_bench(sql_cases=args.sql_cases, batches=args.batches,
                            seconds=args.seconds, requests=args.requests, seed=args.seed,
                            progress=not args.quiet, oracle=args.oracle)

    def readable() -> None:
        for part in ("sql", "requests", "expressions"):
            for finding in report.get(part, {}).get("findings", ()):
                print(f"finding ({part}): {finding}")
        if "expressions" in report:
            x = report["expressions"]
            print(f"expressions: {x['cases']} cases, {x['registered']} registered, "
                  f"{x['crashes']} crashes; largest IN list registered: "
                  f"{x['largest_in_registered']:,} values in "
                  f"{x['largest_in_register_seconds']} s")
        if "sql" in report:
            print("SQL refusals by kind:")
            for kind, n in report["sql"]["refused"].items():
                print(f"  {n:6d}  {kind}")

    code = _write_report(report, args, readable)
    return 1 if report["summary"]["findings"] else code


def _bench_use(args: argparse.Namespace) -> int:
    from benchmarks.query_use import run_use_bench

    report = run_use_bench(sf=args.sf, queries=args.queries, fragments=args.fragments,
                           repeats=args.repeats, max_read_share=args.max_read_share,
                           data_root=args.data_root, progress=not args.quiet,
                           attributes=args.attributes, layout=args.layout)

    def readable() -> None:
        print(f"{'query':8s} {'sketch on':40s} {'access':7s} {'read':>22s} {'use s':>7s} "
              f"{'plain s':>8s} {'ratio':>6s} same")
        for r in report["results"]:
            read = " ".join(f"{100 * v:.1f}%" for v in r["read_share"].values()) or "-"
            print(f"{r['query']:8s} {', '.join(r['sketch'])[:40]:40s} {r['access']:7s} "
                  f"{read:>22s} {r['use_s']:7.2f} {r['plain_s']:8.2f} "
                  f"{r['use_over_plain']:6.2f} {r['same_result']}")
        summary = report["summary"]
        print(f"sketch used for {summary['sketch_used']} of {summary['queries']} "
              f"(median speed-up {summary['median_speedup_used']}); not used:")
        for q, why in summary["not_used"].items():
            print(f"  {q}: {why}")

    return _write_report(report, args, readable)


def _bench_skew(args: argparse.Namespace) -> int:
    from benchmarks.skew import run_skew_bench

    report = run_skew_bench(rows=args.rows, batches=args.batches, batch_rows=args.batch_rows,
                            hot=args.hot, fragments=args.fragments, progress=not args.quiet)

    def readable() -> None:
        r = report["results"]
        print(f"selective query {r['selective']}: a fresh equi-depth partition reads "
              f"{100 * r['fresh_equi_depth_read_share']:.2f}% of t")
        for label, v in r["variants"].items():
            print(f"  {label:14s} reads {100 * v['read_share']:6.2f}% "
                  f"({v['over_fresh']}x fresh), {v['repartitions']} re-partitions, "
                  f"maintenance mean {v['maintain_ms_mean']} ms")

    return _write_report(report, args, readable)


def _bench_faults(args: argparse.Namespace) -> int:
    from benchmarks.faults import FAULTS, run_faults_bench

    faults = tuple(f.strip() for f in args.faults.split(",") if f.strip())
    unknown = sorted(set(faults) - set(FAULTS))
    if unknown:
        raise ValueError(f"unknown faults {unknown}: choose from {', '.join(FAULTS)}")
    report = run_faults_bench(faults, rows=args.rows, batches=args.batches,
                              progress=not args.quiet)

    def readable() -> None:
        print(f"{'fault':10s} {'recover s':>10s} {'acked':>6s} {'refused':>8s} "
              f"{'lost':>5s} exact")
        for r in report["results"]:
            print(f"{r['fault']:10s} {r['recover_s']:10.2f} {r['acked']:6d} "
                  f"{r['refused']:8d} {r['lost']:5d} {r['exact']}")

    return _write_report(report, args, readable)


def _report_options(p: argparse.ArgumentParser, out: str) -> None:
    """--json, --full, --out and --quiet of a suite writing its report to ``out``."""
    p.add_argument("--json", action="store_true", help="print the results as JSON on stdout")
    p.add_argument("--full", action="store_true",
                   help="with --json: print the whole report, not only the results")
    p.add_argument("--out", default=out, help="where to write the full JSON report")
    p.add_argument("--quiet", action="store_true", help="no progress lines")


def add_bench_commands(sub: argparse._SubParsersAction) -> None:
    """Adds ``bench`` with every suite to ``imp``'s subparsers."""
    bench = sub.add_parser("bench", help="run a benchmark suite")
    bsub = bench.add_subparsers(dest="suite", required=True)
    eng = bsub.add_parser("engine", help="in-process engine throughput (no Spark, no Ray)")
    eng.add_argument("--json", action="store_true", help="print JSON on stdout")
    eng.add_argument("--full", action="store_true",
                     help="with --json: print the whole report, not only the result rows")
    eng.add_argument("--rows", type=int, default=200_000, help="rows of t5000g")
    eng.add_argument("--queries", type=lambda s: s.split(","), default=None,
                     help="comma list of workload queries (default q_having_2,q_joinsel)")
    eng.add_argument("--delta-sizes", type=_ints, default=None,
                     help="comma list of delta sizes in rows (default 10,100,1000,10000)")
    eng.add_argument("--fragments", type=_ints, default=None,
                     help="comma list of fragment counts (default 10,100,1000,5000)")
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
    spk.add_argument("--queries", type=lambda s: s.split(","), default=None,
                     help="comma list of workload queries (default: the paper's TPC-H and "
                     "synthetic ones)")
    spk.add_argument("--fragments", type=int, default=1000,
                     help="fragments of each query's sketch attribute")
    spk.add_argument("--delta-sizes", type=_ints, default=None,
                     help="comma list of delta sizes in rows (default 10,100,1000)")
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

    p = bsub.add_parser("grpc", help="GetSketch latency and throughput over gRPC with 1 and "
                        "50 concurrent clients (server in a subprocess)")
    p.add_argument("--json", action="store_true", help="print JSON on stdout")
    p.add_argument("--full", action="store_true",
                   help="with --json: print the whole report, not only the results")
    p.add_argument("--clients", type=lambda s: [int(x) for x in s.split(",")], default=None,
                   help="concurrent client counts (default 1,50)")
    p.add_argument("--seconds", type=float, default=2.0, help="measuring time per round")
    p.add_argument("--rounds", type=int, default=20,
                   help="alternating rounds of the service and the no-op server per client "
                   "count (the ratio is of their mean calls per second)")
    p.add_argument("--warmup", type=float, default=0.5, help="warm-up time per round")
    p.add_argument("--rows", type=int, default=20_000, help="rows of the bench table")
    p.add_argument("--fragments", type=int, default=256, help="fragments of the sketch")
    p.add_argument("--paced-rate", type=float, default=10.0,
                   help="also run the largest client count at this many calls/s per client "
                   "(0: skip)")
    p.add_argument("--processes", type=int, default=0,
                   help="client processes (0: one per 25 clients, at most the CPUs)")
    p.add_argument("--out", default="bench-results/grpc.json",
                   help="where to write the full JSON report")
    p.add_argument("--quiet", action="store_true", help="no progress lines")
    p.set_defaults(func=_bench_grpc)

    cov = bsub.add_parser("coverage", help="which queries of a folder of .sql files register "
                          "(embedded engine, small TPC-H or TPC-DS, each file's sketch "
                          "header) and why the others are refused, by construct (no Spark, "
                          "no Ray)")
    where = cov.add_mutually_exclusive_group()
    where.add_argument("--folder", default=None,
                       help="folder of .sql query files (default: the tpch22 suite's)")
    where.add_argument("--suite", default=None,
                       help="a workload suite's folder instead (tpch, tpch22, tpcds99, ...)")
    cov.add_argument("--benchmark", choices=("tpch", "tpcds"), default=None,
                     help="whose tables to load (default: tpcds for the tpcds99 suite, "
                     "else tpch)")
    cov.add_argument("--advisor", action=argparse.BooleanOptionalAction, default=None,
                     help="after an unsafe header attribute, try the advisor's (default: "
                     "on for tpcds99)")
    cov.add_argument("--json", action="store_true",
                     help="print only the JSON report (parameters, summary, results)")
    cov.add_argument("--sf", type=float, default=0.01, help="TPC-H or TPC-DS scale factor")
    cov.add_argument("--fragments", type=int, default=64,
                     help="ranges per sketch attribute")
    cov.add_argument("--data-root", default=".imp", help="generated data cache (<root>/data)")
    cov.add_argument("--out", default="bench-results/coverage.json",
                     help="where to write the full JSON report")
    cov.add_argument("--quiet", action="store_true", help="no progress lines")
    cov.set_defaults(func=_bench_coverage)

    use = bsub.add_parser("use", help="RunQuery with the sketch (the service's access path) "
                          "against the plain query, per TPC-H query: does a sketch ever cost "
                          "time?")
    _report_options(use, "bench-results/use.json")
    use.add_argument("--sf", type=float, default=1.0, help="TPC-H scale factor")
    use.add_argument("--queries", type=lambda s: s.split(","), default=["all22"],
                     help="workload queries (all22: h01..h22; paper12: the paper's twelve)")
    use.add_argument("--fragments", type=int, default=64, help="ranges per attribute")
    use.add_argument("--attributes", choices=("auto", "header"), default="auto",
                     help="chosen by the attribute advisor (default) or the query's "
                     "-- sketch: header")
    use.add_argument("--repeats", type=int, default=3, help="timed runs of each (median)")
    use.add_argument("--max-read-share", type=float, default=None,
                     help="the access path's threshold (default IMP_SKETCH_MAX_READ_SHARE's)")
    use.add_argument("--data-root", default=".imp", help="TPC-H cache and store")
    use.set_defaults(func=_bench_use)
    use.add_argument("--layout", action="store_true",
                     help="first lay every sketched table out in the order the layout "
                     "advice recommends for the chosen sketches (imp layout)")

    sk = bsub.add_parser("skew", help="adaptive ranges under skewed inserts: sketches exact "
                         "after every batch, read share against a fresh equi-depth "
                         "partition's and static ranges'")
    _report_options(sk, "bench-results/skew.json")
    sk.add_argument("--rows", type=int, default=200_000, help="rows of t at the start")
    sk.add_argument("--batches", type=int, default=50, help="skewed insertion batches")
    sk.add_argument("--batch-rows", type=int, default=2000, help="rows per batch")
    sk.add_argument("--hot", type=float, default=0.5,
                    help="share of each batch inserted into 1%% of the domain")
    sk.add_argument("--fragments", type=int, default=64,
                    help="equi-depth ranges of the sketch attribute t.a")
    sk.set_defaults(func=_bench_skew)

    flt = bsub.add_parser("faults", help="faults under a running service (a killed raylet, "
                          "a lost Ray node, the active server killed with a standby): time "
                          "to recover, acknowledged updates lost or duplicated, sketches "
                          "exact")
    _report_options(flt, "bench-results/faults.json")
    flt.add_argument("--faults", default="raylet,node,failover,failover_ray",
                     help="comma-separated: raylet, node, failover (local backend), "
                          "failover_ray (default: all)")
    flt.add_argument("--rows", type=int, default=50_000, help="rows of t5000g")
    flt.add_argument("--batches", type=int, default=8,
                     help="update batches per fault (half before it, half after)")
    flt.set_defaults(func=_bench_faults)

    fz = bsub.add_parser("fuzz", help="random SQL over random update streams (sketch = "
                         "recapture, result = DuckDB) and mutated requests against a live "
                         "server (clear statuses, nothing changed); exit 1 on a finding")
    _report_options(fz, "bench-results/fuzz.json")
    fz.add_argument("--sql-cases", type=int, default=2000, help="random queries (0: none)")
    fz.add_argument("--batches", type=int, default=6, help="update batches per query")
    fz.add_argument("--seconds", type=float, default=None,
                    help="stop drawing queries after this long")
    fz.add_argument("--requests", type=int, default=3000,
                    help="mutated requests, then wide and deep expressions to an imp serve "
                         "subprocess (0: neither)")
    fz.add_argument("--seed", type=int, default=1, help="seed of both fuzzers")
    fz.add_argument("--oracle", choices=("duckdb", "spark"), default=None,
                    help="the SQL fuzzer's oracle besides the recapture (default: "
                         "IMP_FUZZ_ORACLE, else duckdb; spark runs the SQL text on Spark)")
    fz.set_defaults(func=_bench_fuzz)

    # the IMP paper's experiments (issue 6): tpch, micro, breakeven, mixed, strategies, ...
    add_paper_suites(bsub)
