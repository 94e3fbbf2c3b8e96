"""The ``imp`` command line.

Subcommands: ``data`` (load tables into a service's table store) and ``workloads`` (the
shipped queries; both ``services.cli.catalog_commands``), ``demo`` (the whole
service, or ``--engine`` the in-process engine), ``serve`` and the client commands
(``register``, ``sketch``, ``watch``, ``update``, ``query``, ``ls``, ``drop``, ``evict``,
``restore``, ``scale``, ``maintain``, ``checkpoint``, ``stats``; ``services.cli.commands``),
and ``bench`` with the benchmark suites when the ``benchmarks`` package is installed.
Output is readable by default; ``--json`` prints machine-readable JSON on stdout
(progress goes to stderr). An ``ImpError`` ends the command with exit status 2; a reader
that goes away early (``imp ls | head -1``) ends it quietly with status 141, as SIGPIPE
would.
"""

from __future__ import annotations

import argparse
import importlib
import io
import os
import sys

from imp_core.errors import ImpError
from imp_core.process.stdout import json_only_stdout
from services.cli.catalog_commands import add_catalog_commands
from services.cli.cluster_commands import add_cluster_commands
from services.cli.commands import add_client_commands

# The benchmark suites sit above the service (they drive the coordinator and the gRPC
# server) and are not part of the service's image, so the front end finds their commands
# by name at run time instead of importing them: the layers stay one-way and ``imp``
# works without them.
BENCH_COMMANDS = "benchmarks.cli"


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

    add_catalog_commands(sub)
    add_cluster_commands(sub)

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
    demo.add_argument("--seed", type=int, default=7, help="random seed of the data and "
                      "the updates")
    demo.set_defaults(func=_demo)

    _add_bench_commands(sub)
    add_client_commands(sub)
    return p


# the exit status of a process killed by SIGPIPE (128 + 13), what ``yes | head`` gives
EXIT_BROKEN_PIPE = 141


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    args.argv = list(sys.argv[1:] if argv is None else argv)  # as given: a supervisor's child
    try:
        if getattr(args, "json", False):
            with json_only_stdout():  # the JSON document and nothing else on stdout
                status = args.func(args)
        else:
            status = args.func(args)
        sys.stdout.flush()  # a closed pipe fails here, inside the handler, not at exit
        return status
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
        return EXIT_BROKEN_PIPE


if __name__ == "__main__":
    sys.exit(main())
