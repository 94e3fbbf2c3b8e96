"""``imp bench coverage``: which queries of a folder of ``.sql`` files register, and why
the others are refused, grouped by construct.

Each file (``-- sketch: table.column`` header first, as the workload files) is
registered through the embedded API (``imp_core.embedded.api.Engine``, no Spark, no Ray) over
small TPC-H data (SF ``sf``, 0.01 by default, generated offline by ``tpchgen-cli`` and
cached under ``<data_root>/data/tpch-sf{SF}``), with the sketch attribute(s) of its own
header and ``fragments`` ranges each, never forced. Per file:

- ``status``: ``registered``; ``refused`` (the engine raised one of its domain errors,
  ``imp_core.errors.ImpError``: an unsupported construct, an unsafe sketch attribute,
  an unknown column...); or ``error`` (anything else: a bug, an unreadable file);
- ``error``: the exception's class name (None when registered);
- ``construct``: ``UnsupportedSqlError.construct``; ``"unsafe sketch attribute"`` for an
  ``UnsafeSketchError`` (its ``reason`` beside it); the class name otherwise;
- ``seconds``: the registration's wall time (planning, partitions, safety, first state).

The summary counts the files, the registered ones, and the refused (and failed) ones by
construct. The default folder is the ``tpch22`` suite's (the 22 TPC-H queries as
written); ``suite`` names another workload suite, ``folder`` any folder. Only TPC-H
tables are loaded, so queries over other tables are refused as unknown tables.
"""

from __future__ import annotations

import re
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any, Mapping

import pyarrow as pa

from benchmarks.common import environment

DEFAULT_SUITE = "tpch22"
DEFAULT_SF = 0.01
DEFAULT_FRAGMENTS = 64
UNSAFE = "unsafe sketch attribute"
STATUSES = ("registered", "refused", "error")


def _log(progress: bool, text: str) -> None:
    if progress:
        print(text, file=sys.stderr, flush=True)


def suite_folder(suite: str) -> Path:
    """The folder of the workload suite ``suite`` (``imp_core/workloads/queries/<suite>``)."""
    from importlib import resources

    from imp_core.workloads.queries import SUITES

    if suite not in SUITES:
        raise ValueError(f"unknown workload suite {suite!r}; expected one of {SUITES}")
    return Path(str(resources.files("imp_core.workloads").joinpath("queries", suite)))


def _natural_key(path: Path) -> tuple[Any, ...]:
    return tuple(int(t) if t.isdigit() else t for t in re.split(r"(\d+)", path.name))


def query_files(folder: str | Path) -> list[Path]:
    """The ``.sql`` files directly in ``folder``, in natural order (``h2`` before ``h10``)."""
    folder = Path(folder)
    if not folder.is_dir():
        raise FileNotFoundError(f"no such folder: {folder}")
    return sorted((p for p in folder.iterdir() if p.suffix == ".sql" and p.is_file()),
                  key=_natural_key)


def tpch_tables(sf: float = DEFAULT_SF, data_root: str | Path = ".imp",
                progress: bool = True) -> dict[str, pa.Table]:
    """TPC-H at ``sf`` as Arrow tables, generated once into ``<data_root>/data/tpch-sf{SF}``
    (the cache the other benches share)."""
    from imp_core.workloads.tpch import generate_tpch, load_tpch_tables

    out = Path(data_root) / "data" / f"tpch-sf{sf:g}"
    return load_tpch_tables(generate_tpch(sf, out, progress=progress))


def make_engine(tables: Mapping[str, pa.Table]):
    """An embedded ``Engine`` holding ``tables`` with their workload keys and domains."""
    from imp_core.embedded.api import Engine
    from imp_core.workloads.schemas import TABLES

    engine = Engine()
    for name, data in tables.items():
        info = TABLES.get(name)
        engine.create_table(name, data, key=info.key if info else None,
                            domains=info.domains if info else None)
    return engine


def classify(exc: BaseException) -> dict[str, Any]:
    """``status``, ``error``, ``construct`` (and ``reason`` for an unsafe attribute) of a
    registration that raised ``exc``."""
    from imp_core.errors import ImpError, UnsafeSketchError, UnsupportedSqlError

    out: dict[str, Any] = {"status": "refused" if isinstance(exc, ImpError) else "error",
                           "error": type(exc).__name__, "message": str(exc)}
    if isinstance(exc, UnsafeSketchError):
        out["construct"] = UNSAFE
        text = str(exc)
        out["reason"] = text.partition(" is unsafe: ")[2] or text
    elif isinstance(exc, UnsupportedSqlError) and getattr(exc, "construct", None):
        out["construct"] = exc.construct
    else:
        out["construct"] = type(exc).__name__
    return out


def check_file(engine, path: Path, fragments: int = DEFAULT_FRAGMENTS) -> dict[str, Any]:
    """Register the query in ``path`` on ``engine`` (header's sketch attributes, not
    forced) and drop it again; the file's row of the report."""
    from imp_core.sql import parse_sketch_header

    row: dict[str, Any] = {"name": path.stem, "file": str(path), "sketch": None,
                           "status": "registered", "error": None, "construct": None}
    t0 = time.perf_counter()
    try:
        sql = path.read_text(encoding="utf-8")
        row["sketch"] = [f"{t}.{c}" for t, c in parse_sketch_header(sql)]
        query = engine.register(sql, fragments=fragments, name=path.stem)
        row["sketch_fragments"] = len(query.sketch.fragments)
        engine.drop(query.name)
    except Exception as exc:  # noqa: BLE001 - every failure is what this bench counts
        row.update(classify(exc))
    row["seconds"] = round(time.perf_counter() - t0, 4)
    return row


def summarize(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Totals and the refused (and failed) files counted by construct, most common first."""
    status = Counter(r["status"] for r in rows)

    def by_construct(kind: str) -> dict[str, int]:
        counts = Counter(r["construct"] for r in rows if r["status"] == kind)
        return dict(sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))

    return {"total": len(rows), "registered": status["registered"],
            "refused": status["refused"], "errors": status["error"],
            "refused_by_construct": by_construct("refused"),
            "errors_by_construct": by_construct("error")}


def run_coverage(folder: str | Path | None = None, suite: str | None = None,
                 sf: float = DEFAULT_SF, data_root: str | Path = ".imp",
                 fragments: int = DEFAULT_FRAGMENTS,
                 tables: Mapping[str, pa.Table] | None = None,
                 progress: bool = True) -> dict[str, Any]:
    """The coverage report of ``folder`` (or of workload suite ``suite``; default the
    ``tpch22`` suite): ``parameters``, ``environment``, ``results`` (a row per file) and
    ``summary``. ``tables`` replaces the generated TPC-H data (tests)."""
    if folder is not None and suite is not None:
        raise ValueError("give a folder or a suite, not both")
    where = Path(folder) if folder is not None else suite_folder(suite or DEFAULT_SUITE)
    files = query_files(where)
    t0 = time.perf_counter()
    if tables is None:
        _log(progress, f"TPC-H SF {sf:g} (cached under {Path(data_root) / 'data'})")
        tables = tpch_tables(sf, data_root, progress)
    engine = make_engine(tables)
    setup_s = time.perf_counter() - t0
    rows = []
    for path in files:
        row = check_file(engine, path, fragments)
        rows.append(row)
        _log(progress, f"  {row['name']}: {row['status']}"
             + (f" ({row['construct']})" if row["construct"] else "")
             + f", {row['seconds']:.2f} s")
    return {"benchmark": "coverage", "environment": environment(),
            "parameters": {"folder": str(where), "suite": None if folder else
                           (suite or DEFAULT_SUITE), "sf": sf, "fragments": fragments,
                           "tables": {n: t.num_rows for n, t in tables.items()},
                           "force": False},
            "setup_s": round(setup_s, 2), "results": rows, "summary": summarize(rows)}


def format_table(report: dict[str, Any]) -> str:
    """The report as a short text table plus the counts by construct."""
    rows = report["results"]
    width = max([len(r["name"]) for r in rows] + [5])
    lines = [f"{'query':{width}s}  {'status':10s} {'seconds':>8s}  construct"]
    for r in rows:
        what = r["construct"] or ""
        if r.get("reason"):
            what += f": {r['reason']}"
        if len(what) > 100:
            what = what[:97] + "..."
        line = f"{r['name']:{width}s}  {r['status']:10s} {r['seconds']:8.2f}  {what}"
        lines.append(line.rstrip())
    s = report["summary"]
    lines.append("")
    lines.append(f"{s['registered']} of {s['total']} registered, {s['refused']} refused, "
                 f"{s['errors']} errors")
    for label, counts in (("refused", s["refused_by_construct"]),
                          ("errors", s["errors_by_construct"])):
        for construct, n in counts.items():
            lines.append(f"  {label}: {n:3d}  {construct}")
    return "\n".join(lines)
