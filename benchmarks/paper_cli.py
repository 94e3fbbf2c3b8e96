"""Command-line wiring of the paper suites: ``imp bench tpch|tpcds|scale|micro|breakeven|
mixed|strategies|memory|all`` (``benchmarks.cli`` adds them with ``add_paper_suites``).

Each writes its full report to ``--out`` (JSON with machine, versions, load, parameters,
plus PNG plots beside it), shows progress on stderr, and prints the result rows as JSON
on stdout with ``--json`` (the whole report with ``--full``), else a short summary.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any, Callable

from imp_core.process.stdout import json_out


def _ints(text: str) -> list[int]:
    try:
        return [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected comma-separated integers, got {text!r}") from None


def _floats(text: str) -> list[float]:
    try:
        return [float(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected comma-separated numbers, got {text!r}") from None


def _names(text: str) -> list[str]:
    return [x.strip() for x in text.split(",") if x.strip()]


def _emit(report: dict[str, Any], args: argparse.Namespace) -> int:
    print(f"full report (with machine, versions and load): {args.out}", file=sys.stderr)
    if args.json:
        print(json.dumps(report if args.full else report["results"], indent=2, default=str),
              file=json_out())
    else:
        for k, v in report.get("summary", {}).items():
            print(f"{k}: {v}")
        for p in report.get("plots", []):
            print(f"plot: {p}")
    return 0


def _common(p: argparse.ArgumentParser, out: str) -> None:
    p.add_argument("--json", action="store_true", help="print the result rows as JSON")
    p.add_argument("--full", action="store_true", help="with --json: the whole report")
    p.add_argument("--data-root", default=".imp",
                   help="data cache (<root>/data) and bench Delta stores (<root>/bench)")
    p.add_argument("--max-load", type=float, default=None,
                   help="wait (up to 30 min) while the 1-minute load is above this")
    p.add_argument("--seed", type=int, default=0, help="random seed of data and updates")
    p.add_argument("--out", default=out, help="where to write the full JSON report")
    p.add_argument("--quiet", action="store_true", help="no progress on stderr")


def _listed(what: str, default: Any) -> str:
    """Help text of a comma-list flag: what it lists and its default."""
    return f"comma list of {what} (default {','.join(map(str, default))})"


_ROWS = "rows per synthetic table (default 1,000,000)"


def _run(fn: Callable[..., dict[str, Any]], **fixed: Any):
    def handler(args: argparse.Namespace) -> int:
        kwargs = {k: getattr(args, k) for k in fixed.values()}
        report = fn(seed=args.seed, data_root=args.data_root, max_load=args.max_load,
                    progress=not args.quiet, out=args.out,
                    **{k: v for k, v in kwargs.items() if v is not None})
        return _emit(report, args)

    return handler


def add_paper_suites(bsub: argparse._SubParsersAction) -> None:
    from benchmarks import breakeven, memory, micro, mixed, scale, strategies, tpcds, tpch

    def maintenance_suite(name: str, module, help_text: str, queries_help: str) -> None:
        """``imp bench tpch`` / ``imp bench tpcds``: the same options (``fm_vs_imp``)."""
        p = bsub.add_parser(name, help=help_text)
        _common(p, f"bench-results/{name}.json")
        p.add_argument("--sf", type=float, default=1.0, help="scale factor")
        p.add_argument("--delta-sizes", type=_ints, default=None,
                       help=f"default {','.join(map(str, module.DELTA_SIZES))}")
        p.add_argument("--queries", type=_names, default=None, help=queries_help)
        p.add_argument("--fragments", type=int, default=None, help="default 1000")
        p.add_argument("--repeats", type=int, default=None, help="timed cycles (default 3)")
        p.add_argument("--feed-repeats", type=int, default=None,
                       help="cycles reading the delta back from the change feed (default 1)")
        p.add_argument("--outside-repeats", type=int, default=None,
                       help="cycles committed by another writer (delta-rs on the table's "
                       "files), maintained from the change feed (default 1)")
        p.add_argument("--fm-runs", type=int, default=None,
                       help="timed FM runs after registration (default 1; more are timed "
                       "at the verification points)")
        p.add_argument("--merge", type=_names, default=None,
                       help="instead of running: combine these reports (e.g. an "
                       "interrupted run's -partial.json and the rest; a query in several "
                       "keeps the last report's measurement) into --out")
        fn = tpch.run_tpch_bench if name == "tpch" else module.run_tpcds_bench
        run = _run(fn, a="sf", b="delta_sizes", c="queries", d="fragments",
                   e="repeats", f="feed_repeats", g="fm_runs", h="outside_repeats")

        def handler(args: argparse.Namespace) -> int:
            if args.merge:
                return _emit(module.merge_reports(args.merge, args.out), args)
            if args.queries:
                try:
                    args.queries = module.expand_queries(args.queries)  # all22, tpcds99
                except KeyError as exc:
                    print(f"imp bench {name}: {exc.args[0]}", file=sys.stderr)
                    return 2
            return run(args)

        p.set_defaults(func=handler)

    maintenance_suite(
        "tpch", tpch, "IMP vs full maintenance on TPC-H: the paper's 12 queries (lineitem "
        "batches) or the 22 standard ones (--queries all22; batches of each query's "
        "sketched table)",
        f"comma list of workload queries; all22 = h01..h22 (the 22 standard TPC-H queries, "
        f"each on its header's sketch attribute); default {','.join(tpch.QUERIES)}")
    maintenance_suite(
        "tpcds", tpcds, "IMP vs full maintenance on the TPC-DS queries (suite tpcds99): "
        "each on its header's attribute when safe, else the advisor's; batches of its "
        "fact table, committed by the service and by an outside writer",
        "comma list of workload queries (ds01..ds99, ds14a, ...); default tpcds99 = all "
        "of the suite (queries refused at registration are listed, not run)")

    p = bsub.add_parser("scale", help="every TPC-H query registered at once in one "
                        "service at --sf (default 10), maintained together at --delta; "
                        "state, peak memory, sketches against recaptures")
    _common(p, "bench-results/scale.json")
    p.add_argument("--sf", type=float, default=None, help="TPC-H scale factor (default 10)")
    p.add_argument("--queries", type=_names, default=None,
                   help="comma list of workload queries (default all22 = h01..h22)")
    p.add_argument("--delta", type=int, default=None,
                   help="rows deleted and put back per table and round (default 100)")
    p.add_argument("--rounds", type=int, default=None, help="default 2")
    p.add_argument("--fragments", type=int, default=None, help="default 1000")
    p.add_argument("--cluster", default=None, metavar="DIR",
                   help="run the queries as actors on the Ray cluster `imp cluster up "
                   "--dir DIR` started (default: in-process, local backend)")
    p.add_argument("--remove-node", type=int, default=None, metavar="I",
                   help="with --cluster: kill worker node I after the first batch "
                   "(recovery time and exactness reported)")
    p.add_argument("--no-paired-fm", dest="paired_fm", action="store_false", default=None,
                   help="skip the recapture after each registration (FM at registration, "
                   "with the page cache emptied before both where allowed)")
    p.add_argument("--keep-page-cache", dest="drop_cache", action="store_false",
                   default=None, help="do not empty the page cache before a registration "
                   "and its recapture")
    scale_run = _run(scale.run_scale_bench, a="sf", b="queries", c="delta", d="rounds",
                     e="fragments", f="cluster", g="remove_node", h="paired_fm",
                     i="drop_cache")

    def scale_handler(args: argparse.Namespace) -> int:
        if args.queries:
            try:
                args.queries = tpch.expand_queries(args.queries)
            except KeyError as exc:
                print(f"imp bench scale: {exc.args[0]}", file=sys.stderr)
                return 2
        if args.cluster is not None or args.remove_node is not None:
            from benchmarks.scale import join_cluster
            from services.ray_cluster import ClusterError

            try:  # a wrong cluster is said before any data is prepared
                join_cluster(args.cluster, args.remove_node)
            except (ValueError, ClusterError) as exc:
                print(f"imp bench scale: {exc}", file=sys.stderr)
                return 2
        return scale_run(args)

    p.set_defaults(func=scale_handler)

    p = bsub.add_parser("scale-model", help="fit per-batch time, state and memory to "
                        "`imp bench scale` reports at several scale factors, check the "
                        "fit against the largest, project SF 100 and 1000")
    p.add_argument("reports", nargs="+", help="`imp bench scale` JSON reports (--out)")
    p.add_argument("--node-memory-gib", type=float, default=24.0,
                   help="memory of one node, for the nodes a projection needs (default 24)")
    p.add_argument("--json", action="store_true", help="print the model as JSON")
    p.set_defaults(func=_scale_model)

    p = bsub.add_parser("micro", help="microbenchmarks: groups, aggregates, joins, join "
                        "selectivity, fragments, delta filter, Bloom filters, buffers")
    _common(p, "bench-results/micro.json")
    p.add_argument("--rows", type=int, default=None, help="rows per synthetic table "
                   "(default 1,000,000; the paper: 10M)")
    p.add_argument("--experiments", type=_names, default=None,
                   help=f"default {','.join(micro.EXPERIMENTS)}")
    p.add_argument("--delta-sizes", type=_ints, default=None,
                   help=_listed("delta sizes in rows", micro.DELTA_SIZES))
    p.add_argument("--repeats", type=int, default=None, help="timed runs of each (default 3)")
    p.add_argument("--buffer-rows", type=int, default=None,
                   help="rows of the buffers experiment's table (default 50,000)")
    p.add_argument("--buffer-updates", type=int, default=None,
                   help="updates of the buffers experiment (default 500)")
    p.add_argument("--fragments", type=_ints, default=None,
                   help=f"fragment counts of the fragments experiment (default "
                   f"{','.join(map(str, micro.FRAGMENTS))})")
    p.set_defaults(func=_run(micro.run_micro_bench, a="rows", b="experiments",
                             c="delta_sizes", d="repeats", e="buffer_rows",
                             f="buffer_updates", g="fragments"))

    p = bsub.add_parser("breakeven", help="delta share where FM becomes cheaper than IMP")
    _common(p, "bench-results/breakeven.json")
    p.add_argument("--rows", type=int, default=None, help=_ROWS)
    p.add_argument("--queries", type=_names, default=None,
                   help=_listed("workload queries", breakeven.QUERIES))
    p.add_argument("--shares", type=_floats, default=None,
                   help=_listed("delta shares of the table to try", breakeven.SHARES))
    p.add_argument("--bisect-steps", type=int, default=None,
                   help="bisections between the two shares around the crossing (default 2)")
    p.set_defaults(func=_run(breakeven.run_breakeven_bench, a="rows", b="queries",
                             c="shares", d="bisect_steps"))

    p = bsub.add_parser("mixed", help="end-to-end workloads mixing queries and updates: "
                        "IMP vs FM vs NS")
    _common(p, "bench-results/mixed.json")
    p.add_argument("--rows", type=int, default=None, help="default 10,000,000")
    p.add_argument("--operations", type=int, default=None, help="default 1000")
    p.add_argument("--ratios", type=_names, default=None, help="default 1U1Q,1U5Q,5U1Q")
    p.add_argument("--delta-sizes", type=_ints, default=None, help="default 1,20,200,2000")
    p.set_defaults(func=_run(mixed.run_mixed_bench, a="rows", b="operations", c="ratios",
                             d="delta_sizes"))

    p = bsub.add_parser("strategies", help="eager (batch sizes) vs lazy maintenance")
    _common(p, "bench-results/strategies.json")
    p.add_argument("--rows", type=int, default=None, help=_ROWS)
    p.add_argument("--updates", type=int, default=None, help="default 1000")
    p.add_argument("--batch-sizes", type=_ints, default=None,
                   help=_listed("eager batch sizes", strategies.BATCH_SIZES))
    p.add_argument("--queries", type=_names, default=None,
                   help=_listed("workload queries", strategies.QUERIES))
    p.set_defaults(func=_run(strategies.run_strategies_bench, a="rows", b="updates",
                             c="batch_sizes", d="queries"))

    p = bsub.add_parser("memory", help="state bytes per operator and query; sketch and "
                        "range sizes")
    _common(p, "bench-results/memory.json")
    p.add_argument("--rows", type=int, default=None, help=_ROWS)
    p.add_argument("--sf", type=float, default=None, help="TPC-H scale of the Q10 top-k "
                   "buffer experiment (0: skip it)")
    p.add_argument("--delta-sizes", type=_ints, default=None,
                   help=_listed("delta sizes in rows", memory.DELTA_SIZES))
    p.add_argument("--topk-buffers", type=_ints, default=None,
                   help="buffer sizes (the unbounded buffer is always added)")
    p.set_defaults(func=_run_memory)

    p = bsub.add_parser("all", help="every paper suite, then regenerate docs/benchmarks.md")
    p.add_argument("--suites", type=_names, default=None,
                   help=_listed("suites", ("tpch", "micro", "breakeven", "mixed",
                                           "strategies", "memory")))
    p.add_argument("--results", default="bench-results", help="folder of the JSON reports")
    p.add_argument("--doc", default="docs/benchmarks.md", help="the document to regenerate")
    p.add_argument("--img", default="docs/img", help="folder of the plots")
    p.add_argument("--docs-only", action="store_true",
                   help="only regenerate the document from the existing reports")
    p.add_argument("--sf", type=float, default=1.0, help="TPC-H scale factor")
    p.add_argument("--rows", type=int, default=1_000_000, help="rows per synthetic table")
    p.add_argument("--mixed-rows", type=int, default=10_000_000,
                   help="rows per table of the mixed suite")
    p.add_argument("--operations", type=int, default=1000,
                   help="operations of each mixed workload")
    p.add_argument("--updates", type=int, default=1000, help="updates of the strategies suite")
    p.add_argument("--strategies-rows", type=int, default=None,
                   help="rows per table of the strategies suite (default --rows)")
    p.add_argument("--repeats", type=int, default=3, help="timed runs of each measurement")
    p.add_argument("--data-root", default=".imp",
                   help="data cache (<root>/data) and bench Delta stores (<root>/bench)")
    p.add_argument("--max-load", type=float, default=None,
                   help="wait (up to 30 min) while the 1-minute load is above this")
    p.add_argument("--json", action="store_true", help="print the summary as JSON")
    p.add_argument("--quiet", action="store_true", help="no progress on stderr")
    p.set_defaults(func=_all)


def _scale_model(args: argparse.Namespace) -> int:
    from benchmarks.scale_model import load_reports, markdown, scale_model

    try:
        model = scale_model(load_reports(args.reports), args.node_memory_gib)
    except ValueError as exc:
        print(f"imp bench scale-model: {exc}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(model, indent=2, default=str), file=json_out())
    else:
        print(markdown(model))
    return 0


def _run_memory(args: argparse.Namespace) -> int:
    from benchmarks.memory import run_memory_bench

    kwargs: dict[str, Any] = {}
    if args.rows is not None:
        kwargs["rows"] = args.rows
    if args.sf is not None:
        kwargs["sf"] = args.sf
    if args.delta_sizes is not None:
        kwargs["delta_sizes"] = args.delta_sizes
    if args.topk_buffers is not None:
        kwargs["topk_buffers"] = [*args.topk_buffers, None]
    report = run_memory_bench(seed=args.seed, data_root=args.data_root,
                              max_load=args.max_load, progress=not args.quiet, out=args.out,
                              **kwargs)
    return _emit(report, args)


def _all(args: argparse.Namespace) -> int:
    from benchmarks.all import run_all

    params = {"sf": args.sf, "rows": args.rows, "mixed_rows": args.mixed_rows,
              "operations": args.operations, "updates": args.updates,
              "strategies_rows": args.strategies_rows or args.rows, "repeats": args.repeats,
              "data_root": args.data_root, "max_load": args.max_load}
    out = run_all(args.suites, args.results, args.doc, args.img, args.docs_only,
                  progress=not args.quiet, **params)
    if args.json:
        print(json.dumps(out, indent=2), file=json_out())
    else:
        print(f"ran: {out['ran']}; failed: {out['failed'] or 'none'}; "
              f"{out['doc']} regenerated from {out['documented']}")
    return 1 if out["failed"] else 0
