"""The workload queries shipped in ``imp/workloads/queries/<suite>/<name>.sql``.

Each file is one Spark SQL query whose first line names the sketch attribute(s):
``-- sketch: table.column`` (several are separated by commas). A ``WorkloadQuery``
always has a non-empty ``sketch``; its ``sql`` is the file without that header line.
Query names are unique across suites.

Suites: ``tpch`` (the IMP paper's TPC-H queries, rewritten into the supported subset),
``synthetic`` and ``crimes`` (the paper's other workloads), and ``tpch22``: the 22
standard TPC-H queries as written (DataFusion's copies, Apache-2.0, ``h01`` .. ``h22``;
``h15`` is the view script); ``tpcds99``: the 99 TPC-DS queries as written in Spark's
dialect (apache/datafusion-benchmarks' copies, ``ds01`` .. ``ds99``, the four files
holding two statements split into ``ds14a``/``ds14b``, ``ds23a``/``ds23b``,
``ds24a``/``ds24b``, ``ds39a``/``ds39b``: 103 queries; their tables are
``tpcds_schemas.TPCDS``).
``list_queries()`` lists the ``DEFAULT_SUITES``, those of the paper's experiments, which
the tests and benchmarks of the paper iterate over; ``list_queries("tpch22")`` and
``load_query("h01")`` reach the 22, which have their own tests and ``imp bench tpch
--queries all22``; ``load_query("ds01")`` a TPC-DS query.

>>> load_query("q06").sketch
(('lineitem', 'l_orderkey'),)
>>> [q.name for q in list_queries("crimes")]
['cq1', 'cq2']
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    from collections.abc import Mapping

    from imp_core.workloads.schemas import TableInfo

Suite = Literal["tpch", "synthetic", "crimes", "tpch22", "tpcds99"]
SUITES: tuple[Suite, ...] = ("tpch", "synthetic", "crimes", "tpch22", "tpcds99")
# the suites list_queries() lists when no suite is named (see the module docstring)
DEFAULT_SUITES: tuple[Suite, ...] = ("tpch", "synthetic", "crimes")
# what each suite is, in one line (``imp workloads``), in the order to show them
SUITE_DESCRIPTIONS: dict[Suite, str] = {
    "tpch22": "the 22 TPC-H queries as written (h15 is its view script)",
    "tpcds99": "the 99 TPC-DS queries as written (ds14, ds23, ds24, ds39 as a and b: 103)",
    "tpch": "the IMP paper's TPC-H queries, rewritten into the paper's SQL subset",
    "synthetic": "the IMP paper's synthetic queries over tNg and tjoinhelp",
    "crimes": "the IMP paper's queries over the crimes table",
}

_HEADER = re.compile(r"^\s*--\s*sketch\s*:\s*(?P<attrs>.+?)\s*$", re.IGNORECASE)
_ATTR = re.compile(r"^(?P<table>[A-Za-z_][A-Za-z0-9_]*)\.(?P<column>[A-Za-z_][A-Za-z0-9_]*)$")


@dataclass(frozen=True)
class WorkloadQuery:
    """One workload query: ``suite``/``name`` identify it, ``sketch`` lists (table, column)."""

    suite: Suite
    name: str
    sql: str
    sketch: tuple[tuple[str, str], ...]

    @property
    def qualified_name(self) -> str:
        """``suite/name``, e.g. ``tpch/q01``."""
        return f"{self.suite}/{self.name}"


def parse_query_file(suite: Suite, name: str, text: str) -> WorkloadQuery:
    """Split a query file into its sketch header and SQL body.

    >>> parse_query_file("synthetic", "x", "-- sketch: t50g.a\\nSELECT a FROM t50g\\n").sketch
    (('t50g', 'a'),)
    """
    first, _, body = text.partition("\n")
    match = _HEADER.match(first)
    if match is None:
        raise ValueError(
            f"workload query {suite}/{name}: first line must be '-- sketch: table.column', "
            f"found {first!r}"
        )
    attrs: list[tuple[str, str]] = []
    for part in match.group("attrs").split(","):
        attr = _ATTR.match(part.strip())
        if attr is None:
            raise ValueError(f"workload query {suite}/{name}: bad sketch attribute {part!r}")
        attrs.append((attr.group("table"), attr.group("column")))
    sql = body.strip()
    if not sql:
        raise ValueError(f"workload query {suite}/{name}: no SQL after the sketch header")
    return WorkloadQuery(suite=suite, name=name, sql=sql, sketch=tuple(attrs))


@cache
def _all_queries() -> tuple[WorkloadQuery, ...]:
    root = resources.files("imp_core.workloads").joinpath("queries")
    out: list[WorkloadQuery] = []
    for suite in SUITES:
        folder = root.joinpath(suite)
        files = sorted(
            (entry for entry in folder.iterdir() if entry.name.endswith(".sql")),
            key=lambda entry: _natural_key(entry.name),
        )
        for entry in files:
            name = entry.name[: -len(".sql")]
            out.append(parse_query_file(suite, name, entry.read_text(encoding="utf-8")))
    return tuple(out)


def _natural_key(name: str) -> tuple[object, ...]:
    """Sort ``q_having_2`` before ``q_having_10``."""
    return tuple(int(tok) if tok.isdigit() else tok for tok in re.split(r"(\d+)", name))


def list_queries(suite: str | None = None) -> list[WorkloadQuery]:
    """The queries of one suite (one of ``SUITES``), or of all ``DEFAULT_SUITES``."""
    if suite is not None and suite not in SUITES:
        raise ValueError(f"unknown workload suite {suite!r}; expected one of {SUITES}")
    wanted = DEFAULT_SUITES if suite is None else (suite,)
    return [q for q in _all_queries() if q.suite in wanted]


def suite_tables(suite: str) -> Mapping[str, TableInfo]:
    """The tables a suite's queries read, by name: ``tpcds_schemas.TPCDS`` for
    ``tpcds99``, ``schemas.TABLES`` (TPC-H, synthetic, crimes) for the others."""
    from imp_core.workloads.schemas import TABLES
    from imp_core.workloads.tpcds_schemas import TPCDS

    if suite not in SUITES:
        raise ValueError(f"unknown workload suite {suite!r}; expected one of {SUITES}")
    return TPCDS if suite == "tpcds99" else TABLES


def load_query(name: str) -> WorkloadQuery:
    """The query called ``name`` (e.g. ``q01``, ``q_having_2``, ``cq1``, ``h15`` or
    ``tpch/q01``), of any suite."""
    for query in _all_queries():
        if name in (query.name, query.qualified_name):
            return query
    known = ", ".join(q.name for q in _all_queries())
    raise KeyError(f"unknown workload query {name!r}; known: {known}")
