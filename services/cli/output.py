"""What the ``imp`` client commands print: readable text, JSON, exit codes, table files.

JSON output is the records as JSON-ready values (``to_json``: dates ISO, decimals as text,
Arrow types by name). Exit codes: 0 done; 2 the request was refused (bad input, unknown
name, limits...); 3 the server cannot be reached or timed out; 4 authentication failed;
1 anything else (``exit_code`` maps a gRPC status name to one of them).

Nothing here imports gRPC or Arrow at import time, so ``imp --help`` stays quick.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import decimal
import json
import math
from pathlib import Path
from typing import Any

from imp_core.process.stdout import json_out

EXIT_REFUSED, EXIT_UNREACHABLE, EXIT_AUTH, EXIT_OTHER = 2, 3, 4, 1
# on stderr before ``imp query`` (readable output): the first query of a server starts
# Spark's JVM, which takes about half a minute with nothing to show
SPARK_NOTE = "running on Spark (the first query of a server starts Spark, ~30 s) ..."
_REFUSED = {"INVALID_ARGUMENT", "NOT_FOUND", "ALREADY_EXISTS", "FAILED_PRECONDITION",
            "UNIMPLEMENTED", "OUT_OF_RANGE", "RESOURCE_EXHAUSTED", "ABORTED", "CANCELLED"}
_UNREACHABLE = {"UNAVAILABLE", "DEADLINE_EXCEEDED"}
_AUTH = {"UNAUTHENTICATED", "PERMISSION_DENIED"}


def exit_code(status: str) -> int:
    if status in _REFUSED:
        return EXIT_REFUSED
    if status in _UNREACHABLE:
        return EXIT_UNREACHABLE
    if status in _AUTH:
        return EXIT_AUTH
    return EXIT_OTHER


def to_json(obj: Any) -> Any:
    """Records as JSON-ready values (dates ISO, decimals as text, types by name)."""
    import pyarrow as pa

    from imp_actors.runtime_config import Eager, Lazy, strategy_to_json
    from imp_core.sketch.sketch import Range

    if isinstance(obj, (Eager, Lazy)):
        return strategy_to_json(obj)
    if isinstance(obj, Range):
        return {"lo": to_json(obj.lo), "hi": to_json(obj.hi),
                "includes_null": obj.includes_null}
    if isinstance(obj, pa.Table):
        return obj.to_pylist()
    if isinstance(obj, (pa.DataType, pa.Schema)):
        return str(obj)
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {f.name: to_json(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if isinstance(obj, dict):
        return {str(k): to_json(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [to_json(v) for v in obj]
    if isinstance(obj, (dt.date, dt.datetime)):
        return obj.isoformat()
    if isinstance(obj, decimal.Decimal):
        return str(obj)
    return obj


def print_json(obj: Any, indent: int | None = 2) -> None:
    print(json.dumps(to_json(obj), indent=indent, default=str), file=json_out(), flush=True)


def _bound(v: Any) -> str:
    return "-inf" if v is None else str(v)


def describe_sketch(s: Any) -> list[str]:
    versions = ", ".join(f"{t}@{v}" for t, v in sorted(s.versions.items()))
    lines = [f"{s.query}  seq {s.seq}  tables {versions}  "
             f"{len(s.fragments)}/{s.total_fragments} fragments  "
             f"maintained in {1000 * s.maintain_seconds:.1f} ms"]
    for t in s.tables:
        ranges = " ".join(f"[{_bound(r.lo)}, {'+inf' if r.hi is None else r.hi})"
                          for r in t.ranges)
        lines.append(f"  {t.table}.{t.column} ({t.type}): {len(t.fragments)} of "
                     f"{t.fragment_count} fragments, {len(t.ranges)} ranges: {ranges or '-'}")
        if t.bounds is not None:
            lines.append(f"    split points: {', '.join(map(str, t.bounds))}")
    lines.append(f"  WHERE {s.where}")
    return lines


def _share(value: Any) -> str:
    return "-" if value is None else f"{100 * value:.1f}%"


def describe_explanation(e: dict[str, Any], brief: bool = False) -> list[str]:
    """An explanation (``SketchClient.explain``) as text: the choice and its one-line
    why, the sketch's coverage, then (unless ``brief``) every candidate."""
    how = "chosen by the advisor" if e.get("mode") == "auto" else "named at registration"
    lines = [f"{e.get('query', '')}: sketched on {', '.join(e.get('chosen', ())) or '-'} "
             f"({how})"]
    if e.get("why"):
        lines.append(f"  why: {e['why']}")
    if not brief and e.get("total_fragments"):
        lines.append(f"  sketch: {e.get('sketch_fragments', 0)}/{e['total_fragments']} "
                     f"fragments (seq {e.get('sketch_seq', 0)})")
    if e.get("coverage"):
        lines.append(f"  coverage: {e['coverage']}")
    if not brief and e.get("read_share_now"):
        now = ", ".join(f"{t} {100 * v:.1f}%" for t, v in sorted(e["read_share_now"].items()))
        lines.append(f"  the filtered query reads now: {now} of the rows (current layout)")
    cut = e.get("max_read_share") or 0.5
    for t in e.get("sketch_unused", ()):
        share = e.get("read_share_now", {}).get(t)
        reads = f"{100 * share:.1f}%" if share is not None else "more"
        lines.append(f"  warning: the sketch is unused on {t}: its filter would read {reads} "
                     f"of the rows under the current layout, past the {100 * cut:.0f}% "
                     f"cut-off, so the query reads {t} plain (see: imp layout {t} --dry-run)")
    if e.get("probed_join_sides"):
        lines.append(f"  join sides probed in the data layer: "
                     f"{', '.join(e['probed_join_sides'])}")
    if e.get("indexes"):
        from imp_actors.types import IndexUse

        lines.extend(f"  shared index: {describe_index(IndexUse.from_json(i))}"
                     for i in e["indexes"])
    if brief:
        return lines
    lines.append(f"  {'candidate':32s} {'roles':24s} {'safe':5s} {'sketch':>7s} "
                 f"{'provenance':>10s} {'reads':>7s}  reason")
    for c in e.get("candidates", ()):
        frag = f"{c['fragments']}/{c['size']}" if "fragments" in c and c.get("evaluated",
                                                                            True) else "-"
        lines.append(f"  {c['attribute']:32s} {','.join(c['roles']):24s} "
                     f"{'yes' if c['safe'] else 'no':5s} {frag:>7s} "
                     f"{_share(c.get('provenance_share')):>10s} "
                     f"{_share(c.get('read_share')):>7s}  {c.get('reason', '')}")
    return lines


def describe_layout(done: dict[str, Any]) -> list[str]:
    """``imp layout``'s answer (``SketchClient.layout``) as text: the recommendation and
    why, what the queries read now, each order weighed (its filter rows, the rows charged
    with a query past the cut-off reading the whole table, each query's share, the
    queries it makes read more), then the rewrite and a ``warning:`` line per query the
    order written (or asked for, else recommended) makes read more or lose its sketch."""
    from imp_core.advice.layouts import LayoutWarning

    lines: list[str] = []
    advice = done.get("advice") or {}
    table = advice.get("table") or done.get("table", "")
    cut = advice.get("max_read_share") or 0.5

    def shares(items: dict[str, float]) -> str:
        return ", ".join(f"{q} {100 * v:.1f}%" for q, v in sorted(items.items()))

    def line(w: dict[str, Any]) -> str:
        return LayoutWarning(w["query"], w["share_now"], w["share_after"],
                             w["loses_sketch"]).line(table, cut)

    if advice:
        lines.append(f"{table}: {advice['rows']:,} rows; recommended order: "
                     f"{', '.join(advice['recommended']) or '-'} ({advice['why']})")
        if advice.get("shares_now"):
            lines.append(f"  {'now (as stored)':39s} charged {advice['rows_charged_now']:>14,}"
                         f" rows  ({shares(advice['shares_now'])})")
        for o in advice["options"]:
            lines.append(f"  {', '.join(o['columns']):30s} {o['order']:8s} charged "
                         f"{o.get('rows_charged', o['rows_read']):>14,} rows  "
                         f"({shares(o['shares'])}; filters read {o['rows_read']:,})")
            lines.extend(f"    reads more: {line(w)}" for w in o.get("warnings", ()))
    if done.get("applied"):
        lines.append(f"{done['table']}: laid out by {', '.join(done['columns'])} "
                     f"({done['order']}) as version {done['version']}: "
                     f"{done['row_groups']:,} row groups of {done['row_group_rows']:,} rows "
                     f"in {done['seconds']:.1f} s (no data changed: no sketch moves)")
    if advice.get("warnings"):
        what = "laid out by" if done.get("applied") else "in"
        order = ", ".join(advice.get("chosen") or ())
        lines.extend(f"warning: {what} {order}: {line(w)}" for w in advice["warnings"])
    return lines


def rounded(value: Any) -> Any:
    """``value`` with its floats rounded for reading: two decimals from 1 up, three
    significant digits below (``11.080491`` -> ``11.08``, ``0.000123456`` ->
    ``0.000123``); dicts and lists element by element; everything else as is."""
    if isinstance(value, float) and math.isfinite(value):
        return round(value, 2) if abs(value) >= 1 else float(f"{value:.3g}")
    if isinstance(value, dict):
        return {k: rounded(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [rounded(v) for v in value]
    return value


def describe_stats(stats: dict[str, Any]) -> list[str]:
    """``imp stats`` as text: ``part:`` then ``  key: value`` lines, floats rounded."""
    lines = []
    for part in ("coordinator", "service"):
        lines.append(f"{part}:")
        for key, value in stats.get(part, {}).items():
            value = rounded(value)
            text = json.dumps(value, default=str) if isinstance(value, (dict, list)) else value
            lines.append(f"  {key}: {text}")
    return lines


def table_json(t: Any) -> dict[str, Any]:
    """A ``TableRecord`` as JSON: name, version, columns and, when the server sends them
    (in the schema's metadata), key and declared domains."""
    from imp_core.storage.declared import declared_of

    doc: dict[str, Any] = {"name": t.name, "version": t.version,
                           "columns": {f.name: str(f.type) for f in t.schema}}
    declared = declared_of(t.schema)
    if declared is not None:
        key, domains = declared
        doc["key"] = None if key is None else list(key)
        doc["domains"] = {c: [to_json(lo), to_json(hi)] for c, (lo, hi) in domains.items()}
    return doc


def describe_table(t: Any) -> list[str]:
    """A ``TableRecord`` as text: name, version, columns, then key and domains if sent."""
    from imp_core.storage.declared import declared_of, describe_domains, describe_key

    lines = [f"  {t.name:16s} version {t.version:<5d} {', '.join(t.schema.names)}"]
    declared = declared_of(t.schema)
    if declared is not None:
        key, domains = declared
        lines.append(f"  {'':16s} key {describe_key(key)}; domains {describe_domains(domains)}")
    return lines


def describe_info(q: Any) -> str:
    from imp_actors.runtime_config import strategy_to_json

    strategy = strategy_to_json(q.strategy)
    how = strategy["kind"] if strategy["kind"] == "lazy" else \
        f"eager({strategy['batch_tuples']} tuples, {strategy['max_delay_s']} s)"
    attrs = ", ".join(f"{p['table']}.{p['column']}" for p in q.partitions)
    versions = ", ".join(f"{t}@{v}" for t, v in sorted(q.versions.items()))
    auto = q.autoscaling
    shards = f"shards {q.shards}" if auto is None else \
        f"shards {q.shards} (auto {auto.min_shards}-{auto.max_shards}, load {q.load:.2f})"
    line = (f"{q.name:16s} {q.state:8s} {how:22s} {shards}  seq {q.sketch_seq:<4d} "
            f"{q.sketch_fragments}/{q.total_fragments} fragments on {attrs}  [{versions}]")
    indexes = getattr(q, "indexes", ())
    if indexes:
        line += "\n" + " " * 18 + "indexes: " + "; ".join(describe_index(i) for i in indexes)
    return line


def describe_index(i: Any) -> str:
    """``table.key`` with where it is held, its size and how many queries share it."""
    size = i.disk_bytes if i.where == "disk" else i.bytes
    return (f"{i.table}.{i.key} ({i.where} {size / 2**20:.1f} MiB, {len(i.columns)} "
            f"columns, shared by {i.users})")


def read_table_file(path: str, schema: Any) -> Any:
    """A Parquet, CSV or JSON-lines file as an Arrow table with ``schema``'s types."""
    import pyarrow as pa
    import pyarrow.csv as pacsv
    import pyarrow.json as pajson
    import pyarrow.parquet as pq

    suffix = Path(path).suffix.lower()
    if not Path(path).is_file():
        raise ValueError(f"no such file: {path}")
    if suffix == ".parquet":
        data = pq.read_table(path)
    elif suffix == ".csv":
        known = {f.name: f.type for f in schema}
        data = pacsv.read_csv(path, convert_options=pacsv.ConvertOptions(column_types=known))
    elif suffix in (".json", ".jsonl", ".ndjson"):
        data = pajson.read_json(path, parse_options=pajson.ParseOptions(
            explicit_schema=schema, unexpected_field_behavior="infer"))
    else:
        raise ValueError(f"{path}: unknown format {suffix!r} (.parquet, .csv or .json)")
    # the table's own types, when the file's differ only in representation
    fields = [schema.field(n) if n in schema.names else data.schema.field(n)
              for n in data.schema.names]
    try:
        return data.cast(pa.schema(fields))
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        return data  # let the server say what does not match


def write_rows(rows: Any, path: str) -> None:
    import pyarrow.csv as pacsv
    import pyarrow.parquet as pq

    suffix = Path(path).suffix.lower()
    if suffix == ".parquet":
        pq.write_table(rows, path)
    elif suffix == ".csv":
        pacsv.write_csv(rows, path)
    elif suffix in (".json", ".jsonl"):
        Path(path).write_text("".join(json.dumps(to_json(r), default=str) + "\n"
                                      for r in rows.to_pylist()))
    else:
        raise ValueError(f"{path}: unknown format {suffix!r} (.parquet, .csv or .json)")


def show(args: argparse.Namespace, obj: Any, text: str) -> None:
    """``obj`` as JSON with ``--json``, else the readable ``text``."""
    if args.json:
        print_json(obj)
    else:
        print(text)
