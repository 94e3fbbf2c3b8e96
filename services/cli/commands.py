"""The service subcommands of ``imp``: ``serve`` and the client commands (``register``,
``sketch``, ``watch``, ``update``, ``query``, ``ls``, ``drop``, ``evict``, ``restore``,
``scale``, ``maintain``, ``checkpoint``, ``stats``).

Every client command talks to ``--target`` (env ``IMP_TARGET``, default
127.0.0.1:50051), prints readable text by default and one JSON document with ``--json``
(``watch --json`` prints one JSON object per line); exit codes are those of
``services.cli.output``. Each command is a function ``(client, args) -> exit status`` run
by ``_run``, which opens the connection and maps errors to exit codes.

Nothing here imports gRPC until a command runs, so ``imp --help`` stays quick.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from pathlib import Path
from typing import Any, Callable

from imp_core.process.stdout import json_out
from services.cli.catalog_commands import workload_sql
from services.cli.output import (
    EXIT_REFUSED,
    SPARK_NOTE,
    describe_explanation,
    describe_info,
    describe_layout,
    describe_sketch,
    describe_stats,
    describe_table,
    exit_code,
    print_json,
    read_table_file,
    show,
    table_json,
    to_json,
    write_rows,
)
from services.errors import BadRequestError

# -- arguments ---------------------------------------------------------------------------------


def _connection_parent() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(add_help=False)
    g = p.add_argument_group("connection")
    g.add_argument("--target", default=os.environ.get("IMP_TARGET", "127.0.0.1:50051"),
                   help="server host:port (env IMP_TARGET, default 127.0.0.1:50051)")
    g.add_argument("--token", default=os.environ.get("IMP_TOKEN"),
                   help="bearer token (env IMP_TOKEN)")
    g.add_argument("--token-file", default=os.environ.get("IMP_TOKEN_FILE"),
                   help="file holding the bearer token (env IMP_TOKEN_FILE)")
    g.add_argument("--tls", action="store_true",
                   help="connect with TLS (implied by --tls-ca / --tls-cert)")
    g.add_argument("--tls-ca", help="PEM CA of the server certificate (default: system roots)")
    g.add_argument("--tls-cert", help="PEM client certificate (mutual TLS)")
    g.add_argument("--tls-key", help="PEM client key (mutual TLS)")
    g.add_argument("--tls-server-name", help="name to check in the server certificate")
    g.add_argument("--timeout", type=float, default=300.0, help="seconds per call")
    p.add_argument("--json", action="store_true", help="print JSON on stdout")
    return p


def _partition(text: str) -> tuple[str, str]:
    if text.strip().lower() == "auto":
        return "auto", ""
    attr, sep, value = text.partition("=")
    if not sep or "." not in attr or not value:
        raise argparse.ArgumentTypeError(f"expected table.column=VALUE, got {text!r}")
    return attr.strip(), value.strip()


def _at_least_one(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected an integer >= 1, got {text!r}")
    return value


def _finite_seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not math.isfinite(value) or value < 0:
        raise argparse.ArgumentTypeError(f"expected seconds >= 0, got {text!r}")
    return value


def token_from_file(text: str, where: str) -> str:
    """The token in a token file: its first line that is neither blank nor a ``#``
    comment (the server's token files take the same comments)."""
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            return line
    raise ValueError(f"{where}: no token in the file (only blank or '#' comment lines)")


def add_client_commands(sub: argparse._SubParsersAction) -> None:
    """Adds ``serve`` and the client subcommands to ``imp``'s subparsers."""
    from services.server_config import ServerConfig

    conn = _connection_parent()

    serve = sub.add_parser("serve", help="run the gRPC service (SketchService)",
                           description="Run the service until SIGINT/SIGTERM. Every flag "
                           "mirrors an IMP_* environment variable; a flag wins.")
    ServerConfig.add_arguments(serve)
    serve.add_argument("--log-level", default=os.environ.get("IMP_LOG_LEVEL", "INFO"),
                       choices=["DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"],
                       type=str.upper, metavar="LEVEL",
                       help="(env IMP_LOG_LEVEL) server log level: DEBUG, INFO (default), "
                       "WARNING, ERROR or CRITICAL; logs go to stderr")
    serve.set_defaults(func=_serve)

    def cmd(name: str, help: str, func: Callable) -> argparse.ArgumentParser:
        p = sub.add_parser(name, help=help, parents=[conn])
        p.set_defaults(func=lambda args: _run(func, args))
        return p

    p = cmd("register", "register a SELECT query and capture its sketch", _register)
    p.add_argument("name")
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--sql", help="the query text")
    src.add_argument("--file", help="a file holding the query")
    src.add_argument("--workload", help="a shipped workload query by name (e.g. q_having_2)")
    p.add_argument("--partition", action="append", type=_partition, default=[],
                   metavar="TABLE.COLUMN=N|auto",
                   help="partition by N equi-depth fragments; 'auto' (the default without "
                   "a -- sketch: header) lets the service choose the attributes whose "
                   "sketch makes the query read least (see: imp explain)")
    p.add_argument("--bounds", action="append", type=_partition, default=[],
                   metavar="TABLE.COLUMN=V1,V2,...", help="partition by split points")
    p.add_argument("--fragments", type=int, help="fragments for the SQL's -- sketch: header")
    strat = p.add_mutually_exclusive_group()
    strat.add_argument("--eager", action="store_true", help="maintain as updates arrive")
    strat.add_argument("--lazy", action="store_true", help="maintain on request (default)")
    p.add_argument("--batch-tuples", type=int, default=1000, help="eager: tuples per batch")
    p.add_argument("--max-delay", type=_finite_seconds, default=1.0,
                   help="eager: seconds a change may wait (0: no time limit)")
    p.add_argument("--force", action="store_true", help="register even if unsafe")
    p.add_argument("--shards", type=int, default=1, help="actors holding the state")
    auto = p.add_argument_group(
        "autoscaling", "the shard count follows the maintenance load (docs/runtime.md); "
        "--max-shards turns it on")
    auto.add_argument("--max-shards", type=_at_least_one, help="most shards")
    auto.add_argument("--min-shards", type=_at_least_one, help="fewest shards (default 1)")
    auto.add_argument("--target-load", type=float,
                      help="busy fraction per shard to aim at, in (0, 1] (default 0.5)")
    auto.add_argument("--upscale-delay", type=_finite_seconds,
                      help="seconds the load must ask for more shards first (default 30)")
    auto.add_argument("--downscale-delay", type=_finite_seconds,
                      help="seconds the load must ask for fewer shards first (default 300)")
    auto.add_argument("--load-window", type=_finite_seconds,
                      help="seconds the load is averaged over (default 30)")

    p = cmd("explain", "why a query is sketched on its attributes: the candidates, what "
            "each would read, the choice", _explain)
    p.add_argument("name")
    p.add_argument("--latest", action="store_true",
                   help="of the latest maintained sketch (no maintenance)")

    p = cmd("layout", "rewrite a table in the order that makes its sketches skip most "
            "(a commit that changes no data); names every registered query the order makes "
            "read more, or lose its sketch", _layout)
    p.add_argument("table")
    p.add_argument("--by", type=lambda s: [c for c in s.split(",") if c.strip()],
                   default=[], metavar="COL[,COL...]",
                   help="range order of one column, Z-order of several (default: the "
                   "order recommended for the registered queries' sketches)")
    p.add_argument("--rows-per-group", type=_at_least_one,
                   help="rows per Parquet row group (default: sized for skipping)")
    p.add_argument("--dry-run", action="store_true",
                   help="show the recommendation and what each order (with --by, that "
                   "one too) would read and whom it makes read more; write nothing")

    p = cmd("sketch", "print a query's sketch (several names: all in one call)", _sketch)
    p.add_argument("name", nargs="+", help="one or more registered queries")
    p.add_argument("--latest", action="store_true",
                   help="the latest maintained version (no maintenance)")
    p.add_argument("--seq", type=int, help="a kept past version")
    p.add_argument("--partitions", action="store_true", help="include the split points")

    p = cmd("watch", "print every new sketch version of a query as it is made", _watch)
    p.add_argument("name")
    p.add_argument("--after-seq", type=int,
                   help="start after this version (default: with the latest maintained one)")
    p.add_argument("--count", type=_at_least_one, help="stop after this many versions (>= 1)")
    p.add_argument("--for", dest="seconds", type=float, help="stop after this many seconds")

    p = cmd("update", "apply inserts/deletes/updates from files as one table version",
            _update)
    p.add_argument("table")
    for flag in ("--insert", "--delete", "--update-old", "--update-new"):
        p.add_argument(flag, help="Parquet, CSV or JSON-lines file (by extension)")

    p = cmd("query", "run a SELECT on Spark, with or without a sketch", _query)
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--sql", help="the SELECT query text to run")
    src.add_argument("--file", help="a file holding the SELECT query to run")
    src.add_argument("--query", dest="registered", metavar="NAME",
                     help="a registered query (its SQL and its sketch)")
    p.add_argument("--with", dest="with_query", metavar="NAME",
                   help="filter with the sketch of this registered query; refused unless "
                        "that is proven to give the plain query's rows (docs/api.md)")
    p.add_argument("--no-sketch", action="store_true", help="run without a sketch")
    p.add_argument("--show", type=int, default=20, help="rows to print (readable output)")
    p.add_argument("--out", help="write all rows to a .parquet, .csv or .json file")

    cmd("ls", "list registered queries and tables", _ls)
    for name, help_, func in (("drop", "drop a registered query", _drop),
                              ("evict", "checkpoint a query and stop its actors", _evict),
                              ("restore", "bring an evicted query back", _restore),
                              ("checkpoint", "checkpoint a query now", _checkpoint)):
        cmd(name, help_, func).add_argument("name")
    p = cmd("scale", "split a query's state over K actors", _scale)
    p.add_argument("name")
    p.add_argument("shards", type=int)
    p = cmd("maintain", "maintain now (named queries, queries of tables, or all)", _maintain)
    p.add_argument("--query", dest="queries", action="append", default=[], metavar="NAME",
                   help="maintain this registered query (repeatable)")
    p.add_argument("--table", dest="tables", action="append", default=[], metavar="TABLE",
                   help="maintain the queries that read this table (repeatable)")
    cmd("stats", "counters of the coordinator and the service", _stats)


# -- running -----------------------------------------------------------------------------------


def _serve(args: argparse.Namespace) -> int:
    import logging

    from imp_core.errors import StoreBusyError
    from imp_core.estimate.memory import memory_budget
    from imp_core.spark.sql_text import spark_max_terms
    from imp_core.sql.nesting import max_expression_depth
    from services.server import preflight, serve
    from services.server_config import ServerConfig

    logging.basicConfig(level=args.log_level.upper(),
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        config = ServerConfig.from_args(args)
        config.runtime_config()  # the runtime's IMP_* settings are refused here, not later
        memory_budget()  # IMP_REGISTRATION_MEMORY_BYTES too (imp_core.estimate.memory)
        max_expression_depth()  # IMP_MAX_EXPRESSION_DEPTH (imp_core.sql.nesting)
        spark_max_terms()  # IMP_SPARK_MAX_TERMS (imp_core.spark.sql_text)
        preflight(config)  # token and TLS files, the address: before Ray or Spark start
        if supervised(config):
            from services.server import SHUTDOWN_SECONDS
            from services.supervisor import supervise

            return supervise(args.argv, config.grace_seconds + SHUTDOWN_SECONDS + 5,
                             journal_dir=config.runtime_config().journal_dir)
        return serve(config)
    except (ValueError, OSError, StoreBusyError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_REFUSED


def supervised(config: Any) -> bool:
    """``imp serve`` runs under a supervisor (``services.supervisor``) unless told not to
    (``--supervise off``: a pod's restart policy does it) or a supervisor runs it
    already: a server whose local Ray is lost cannot start it again in-process, and one
    that dies (a crash in native code, ``kill -9``) is started again at once."""
    from services.supervisor import SUPERVISED_ENV

    return config.supervise and not os.environ.get(SUPERVISED_ENV)


def _client(args: argparse.Namespace) -> Any:
    from services.client import SketchClient, TlsOptions

    token = args.token
    if args.token_file:
        token = token_from_file(Path(args.token_file).read_text(), args.token_file)
    tls = None
    if args.tls or args.tls_ca or args.tls_cert:
        tls = TlsOptions.from_files(args.tls_ca, args.tls_cert, args.tls_key,
                                    args.tls_server_name)
    return SketchClient(args.target, token=token, tls=tls, timeout=args.timeout)


def _run(func: Callable, args: argparse.Namespace) -> int:
    from services.client import RemoteError

    try:
        client = _client(args)
    except (OSError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_REFUSED
    try:
        return func(client, args) or 0
    except RemoteError as exc:
        hint = ""
        if exc.code == "UNAVAILABLE" and exc.kind is None:  # no server answered at all
            hint = f" (is `imp serve` running at {args.target}?)"
        print(f"error: {exc}{hint}", file=sys.stderr)
        return exit_code(exc.code)
    except BrokenPipeError:  # the reader went away (``imp ls | head``): main ends quietly
        raise
    except (OSError, ValueError) as exc:  # local files and values
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_REFUSED
    finally:
        client.close()


# -- commands ----------------------------------------------------------------------------------


def _register(client: Any, args: argparse.Namespace) -> int:
    from imp_actors.runtime_config import Eager, Lazy

    if args.sql:
        sql = args.sql
    elif args.file:
        sql = Path(args.file).read_text()
    else:
        sql = workload_sql(args.workload)  # unknown: a ValueError naming `imp workloads`
    partitions: dict[str, Any] | str = {}
    auto = [a for a, _ in args.partition if a == "auto"]
    if auto and (len(args.partition) > 1 or args.bounds):
        raise ValueError("--partition auto chooses every attribute: give no other "
                         "--partition or --bounds")
    for attr, value in args.partition if not auto else ():
        try:
            partitions[attr] = int(value)
        except ValueError:
            raise ValueError(f"--partition {attr}={value}: expected a fragment count (use "
                             "--bounds for split points)") from None
    for attr, value in args.bounds:
        partitions[attr] = _typed_bounds(client, attr, value.split(","))
    if auto:
        partitions = "auto"
    strategy = Lazy()
    if args.eager:
        strategy = Eager(args.batch_tuples, args.max_delay if args.max_delay > 0 else None)
    info, explained = client.register_explained(
        args.name, sql, partitions=partitions or None, fragments=args.fragments,
        strategy=strategy, force=args.force, shards=args.shards,
        autoscaling=_autoscaling(args))
    if args.json:
        doc = to_json(info)
        doc["explanation"] = explained
        print_json(doc)
    else:
        print(f"registered {describe_info(info)}")
        print("\n".join(describe_explanation(explained, brief=True)))
    return 0


def _layout(client: Any, args: argparse.Namespace) -> int:
    done = client.layout(args.table, args.by, args.rows_per_group or 0, args.dry_run)
    if args.json:
        print_json(done)
    else:
        print("\n".join(describe_layout(done)))
    return 0


def _explain(client: Any, args: argparse.Namespace) -> int:
    explained = client.explain(args.name, fresh=not args.latest)
    if args.json:
        print_json(explained)
    else:
        print("\n".join(describe_explanation(explained)))
    return 0


_AUTOSCALING_FLAGS = {"min_shards": "min_shards", "target_load": "target_load",
                      "upscale_delay": "upscale_delay_s",
                      "downscale_delay": "downscale_delay_s", "load_window": "window_s"}


def _autoscaling(args: argparse.Namespace) -> Any:
    """The ``Autoscaling`` the register flags give (None without ``--max-shards``)."""
    from imp_actors.runtime_config import Autoscaling

    given = {field: getattr(args, flag) for flag, field in _AUTOSCALING_FLAGS.items()
             if getattr(args, flag) is not None}
    if args.max_shards is None:
        if given:
            raise ValueError("autoscaling needs --max-shards (the other autoscaling flags "
                             "only refine it)")
        return None
    return Autoscaling(max_shards=args.max_shards, **given)  # ValueError: exit 2


def _typed_bounds(client: Any, attr: str, texts: list[str]) -> list[Any]:
    """Split points given as text, converted to the column's type (from the server)."""
    import pyarrow as pa

    table, _, column = attr.lower().partition(".")
    schema = client.schema(table)
    if column not in schema.names:
        raise ValueError(f"--bounds {attr}: {table} has no column {column!r}")
    dtype = schema.field(column).type
    try:
        return pa.array([t.strip() for t in texts]).cast(dtype).to_pylist()
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
        raise ValueError(f"--bounds {attr}: not values of type {dtype}: {exc}") from None


def _sketch(client: Any, args: argparse.Namespace) -> int:
    if len(args.name) == 1:
        s = client.sketch(args.name[0], fresh=not args.latest, seq=args.seq,
                          include_partitions=args.partitions)
        if args.json:
            print_json(s)
        else:
            print("\n".join(describe_sketch(s)))
        return 0
    if args.seq is not None:
        raise BadRequestError("--seq names a version of one query; give one name with it")
    got, errors = client.sketches(args.name, fresh=not args.latest,
                                  include_partitions=args.partitions)
    if args.json:
        print_json({"sketches": [got[n] for n in args.name if n in got],
                    "errors": {n: {"code": e.code, "message": e.message}
                               for n, e in errors.items()}})
    else:
        for n in args.name:
            if n in got:
                print("\n".join(describe_sketch(got[n])))
    for n, e in errors.items():
        print(f"imp: {n}: {e.code}: {e.message}", file=sys.stderr)
    return exit_code(next(iter(errors.values())).code) if errors else 0


def _watch(client: Any, args: argparse.Namespace) -> int:
    from imp_actors.runtime_config import Lazy

    if isinstance(client.info(args.name).strategy, Lazy):  # else it may look stuck
        print(f"{args.name} is lazy: a new version is made only when its sketch is read "
              f"(imp sketch {args.name}) or it is maintained (imp maintain --query "
              f"{args.name}); waiting ...", file=sys.stderr, flush=True)
    after = args.after_seq
    if after is None:
        after = max(client.sketch(args.name, fresh=False).seq - 1, 0)
    shown = 0
    try:
        for s in client.watch(args.name, after_seq=after, timeout=args.seconds):
            if args.json:
                print_json(s, indent=None)
            else:
                print("\n".join(describe_sketch(s)), flush=True)
            shown += 1
            if args.count is not None and shown >= args.count:
                break
    except KeyboardInterrupt:
        pass
    return 0


def _update(client: Any, args: argparse.Namespace) -> int:
    if not (args.insert or args.delete or args.update_old or args.update_new):
        raise ValueError("give at least one of --insert, --delete, --update-old/--update-new")
    if bool(args.update_old) != bool(args.update_new):
        raise ValueError("--update-old and --update-new go together")
    schema = client.schema(args.table)

    def load(path: str | None) -> Any:
        return read_table_file(path, schema) if path else None

    updates = (load(args.update_old), load(args.update_new)) if args.update_old else None
    result = client.apply_update(args.table, inserts=load(args.insert),
                                 deletes=load(args.delete), updates=updates)
    if args.json:
        print_json(result)
    else:
        eager = f"; maintained {', '.join(result.maintained)}" if result.maintained else ""
        print(f"{result.table}: version {result.version} (+{result.inserted} "
              f"-{result.deleted} rows){eager}")
    return 0


def _query(client: Any, args: argparse.Namespace) -> int:
    sql = args.sql or (Path(args.file).read_text() if args.file else None)
    query = args.registered or args.with_query
    if not args.json:  # else the first call of a server looks stuck while Spark starts
        print(SPARK_NOTE, file=sys.stderr, flush=True)
    result = client.run_query(sql=sql, query=query, use_sketch=not args.no_sketch)
    if args.out:
        write_rows(result.rows, args.out)
    if args.json:
        out = to_json(result)
        out["rows_read_share"] = result.rows_read_share()
        if args.out:
            out["rows"] = f"written to {args.out}"
        print(json.dumps(out, indent=2, default=str), file=json_out())
        return 0
    if result.sketch is None:
        how = "without a sketch"
    elif result.access == "sketch":
        how = f"with the sketch of {result.sketch.query} (seq {result.sketch.seq})"
    else:
        how = f"without the sketch of {result.sketch.query} (seq {result.sketch.seq})"
    print(f"{result.rows.num_rows} rows in {result.seconds:.3f} s {how}")
    if result.reuse and result.reuse != "same-plan":
        print(f"  reuse: {result.reuse} ({result.reuse_reason})")
    if result.access_reason:
        print(f"  access: {result.access} ({result.access_reason})")
    actual = result.rows_read_share()
    for t in sorted(result.rows_read):
        of = f" of {result.table_rows[t]:,} ({100 * actual[t]:.1f}%" if t in actual else ""
        if of and t in result.read_share:
            of += f", estimated {100 * result.read_share[t]:.1f}%"
        of += ")" if of else ""
        print(f"  {t}: Spark read {result.rows_read[t]:,} rows{of}, "
              f"{result.files_read.get(t, 0)} files, {result.files_skipped.get(t, 0)} "
              "skipped")
    if result.bytes_estimate:
        est, total = sum(result.bytes_estimate.values()), sum(
            n * result.table_scans.get(t, 1) for t, n in result.table_bytes.items())
        print(f"  pages read: about {est / 2**20:,.1f} MiB of {total / 2**20:,.1f} MiB "
              "(compressed; estimated from the pages the scans' filters meet)")
    if args.show and result.rows.num_rows:
        print(result.rows.slice(0, args.show).to_pandas().to_string(index=False))
        if result.rows.num_rows > args.show:
            print(f"... {result.rows.num_rows - args.show} more rows")
    return 0


def _ls(client: Any, args: argparse.Namespace) -> int:
    queries, tables = client.queries(), client.tables()
    if args.json:
        print_json({"queries": queries, "tables": [table_json(t) for t in tables]})
        return 0
    print(f"queries ({len(queries)}):")
    for q in queries:
        print(f"  {describe_info(q)}")
    print(f"tables ({len(tables)}):")
    for t in tables:
        print("\n".join(describe_table(t)))
    return 0


def _drop(client: Any, args: argparse.Namespace) -> int:
    client.drop(args.name)
    show(args, {"dropped": args.name}, f"dropped {args.name}")
    return 0


def _evict(client: Any, args: argparse.Namespace) -> int:
    client.evict(args.name)
    show(args, {"evicted": args.name}, f"evicted {args.name} (checkpointed, actors stopped)")
    return 0


def _restore(client: Any, args: argparse.Namespace) -> int:
    info = client.restore(args.name)
    show(args, info, f"restored {describe_info(info)}")
    return 0


def _scale(client: Any, args: argparse.Namespace) -> int:
    info = client.scale(args.name, args.shards)
    show(args, info, f"scaled {describe_info(info)}")
    return 0


def _checkpoint(client: Any, args: argparse.Namespace) -> int:
    points = client.checkpoint(args.name)
    show(args, points, "\n".join(f"{c.query} shard {c.shard}: {c.uri} ({c.bytes:,} bytes, "
                                 f"sha256 {c.sha256[:12]}...)" for c in points))
    return 0


def _maintain(client: Any, args: argparse.Namespace) -> int:
    done = client.maintain(queries=args.queries, tables=args.tables)
    show(args, done, "\n".join(line for s in done.values() for line in describe_sketch(s))
         or "nothing to maintain")
    return 0


def _stats(client: Any, args: argparse.Namespace) -> int:
    stats = client.stats()
    if args.json:
        print_json(stats)  # full precision; the text rounds (``describe_stats``)
    else:
        print("\n".join(describe_stats(stats)))
    return 0
