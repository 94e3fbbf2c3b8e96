"""Choosing a query's sketch attributes by what the sketch-filtered query would read.

A sketch saves a query time only where its filter skips data, and that depends on the
attribute: TPC-H Q3's provenance covers a few ranges of ``l_orderkey`` but every range of
``l_shipdate``. ``advise`` enumerates the candidate attributes of every table a query
reads (``candidate_attributes``: group-by and join keys, top-k order columns, filter
columns, the columns the table is clustered on), checks each for safety, captures the
accurate sketch of the safe ones (``capture``, in rounds of one candidate per table: a
``PartitionSet`` holds one partition per table), and estimates what the filter Spark
would run (the sketch fitted to the table's pages in at most ``MAX_PREDICATE_RANGES``
ranges, ``imp_core.storage.row_groups.fit_to_blocks``) reads of the table under its
current layout: the rows and compressed bytes of the pages whose bounds meet the
filter's ranges, or, for tables without files, the rows of the fragments the filter
keeps. Per table the candidate reading least wins (ties: the smaller provenance); a
table is sketched when its winner reads at most ``max_read_share`` of it, so a query may
be sketched on several tables. When none does, the candidate reading least is still
chosen (a query needs a sketch to register) and ``Advice.why`` says why none skips.

Invariants: only safe attributes are ever chosen (the caller's safety check runs again
on the choice); every evaluated candidate's figures come from its accurate sketch on the
same equi-depth partition the registration then uses (``Candidate.partition``); nothing
here writes anything.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Callable, Mapping, Sequence

import numpy as np
import pyarrow as pa

from imp_core.errors import UnsafeSketchError
from imp_core.plan.lineage import trace_column
from imp_core.plan.nodes import (
    Aggregate,
    Distinct,
    Join,
    OuterJoin,
    PlanNode,
    Project,
    QueryPlan,
    Scan,
    Select,
    SemiJoin,
    SetOp,
    TopK,
    Window,
)
from imp_core.sketch.partition import PartitionSet, RangePartition
from imp_core.sketch.sketch import Sketch
from imp_core.spark.skipping import prunable

# roles in the order ties between equally good candidates are broken (the paper's 7.4
# heuristic prefers group-by attributes, then those with an access method)
ROLES = ("group-by", "join key", "order", "filter", "cluster", "read")
MAX_CANDIDATES_PER_TABLE = 6
DEFAULT_MAX_READ_SHARE = 0.5

Capture = Callable[[PartitionSet], Sketch]
# (table, column) -> the table's row groups with their bounds of the column (None: the
# table has no files, e.g. an in-memory table)
Layout = Callable[[str, str], Any]


@dataclass(frozen=True)
class Candidate:
    """One attribute considered: its roles in the query, its safety and, once evaluated,
    its accurate sketch's size and what the sketch-filtered query would read of its
    table (``read_rows`` of ``table_rows``; ``read_bytes`` of ``table_bytes`` where the
    table has files)."""

    table: str
    column: str
    roles: tuple[str, ...]
    safe: bool = False
    reason: str = ""
    fragments: int | None = None  # fragments of the accurate sketch
    size: int | None = None  # fragments of the partition
    provenance_rows: int | None = None  # rows of the table in the sketch's fragments
    read_rows: int | None = None
    read_bytes: int | None = None
    table_rows: int | None = None
    table_bytes: int | None = None
    pages: int | None = None  # pages the filtered scan reads, of ...
    table_pages: int | None = None
    partition: RangePartition | None = field(default=None, compare=False, repr=False)

    @property
    def attribute(self) -> str:
        return f"{self.table}.{self.column}"

    @property
    def evaluated(self) -> bool:
        return self.read_rows is not None

    @property
    def provenance_share(self) -> float | None:
        if self.provenance_rows is None or not self.table_rows:
            return None
        return self.provenance_rows / self.table_rows

    @property
    def read_share(self) -> float | None:
        """The share of the table the filtered query reads: of its bytes where the table
        has files, else of its rows."""
        if self.read_bytes is not None and self.table_bytes:
            return self.read_bytes / self.table_bytes
        if self.read_rows is None or not self.table_rows:
            return None
        return self.read_rows / self.table_rows

    def rank(self) -> tuple[Any, ...]:
        """Better candidates rank lower: less read, then less provenance (what a layout
        on the attribute could skip), then the role and the name."""
        share, prov = self.read_share, self.provenance_share
        first_role = min((ROLES.index(r) for r in self.roles), default=len(ROLES))
        return (1.0 if share is None else round(share, 4),
                1.0 if prov is None else round(prov, 4), first_role, self.column)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"attribute": self.attribute, "roles": list(self.roles),
                               "safe": self.safe, "reason": self.reason}
        for name in ("fragments", "size", "provenance_rows", "read_rows", "read_bytes",
                     "table_rows", "table_bytes", "pages", "table_pages"):
            value = getattr(self, name)
            if value is not None:
                out[name] = int(value)
        for name in ("provenance_share", "read_share"):
            value = getattr(self, name)
            if value is not None:
                out[name] = round(value, 6)
        return out

    @staticmethod
    def from_json(raw: Mapping[str, Any]) -> Candidate:
        table, _, column = str(raw["attribute"]).partition(".")
        ints = {k: raw.get(k) for k in ("fragments", "size", "provenance_rows",
                                        "read_rows", "read_bytes", "table_rows",
                                        "table_bytes", "pages", "table_pages")}
        return Candidate(table, column, tuple(raw.get("roles", ())), bool(raw.get("safe")),
                         str(raw.get("reason", "")), **ints)


@dataclass(frozen=True)
class Advice:
    """The candidates considered for a query, the attributes chosen and why (one line).
    ``mode``: "auto" (chosen here) or "given" (named by the user; only those listed)."""

    candidates: tuple[Candidate, ...]
    chosen: tuple[str, ...]
    why: str
    mode: str = "auto"

    def chosen_candidates(self) -> list[Candidate]:
        by = {c.attribute: c for c in self.candidates}
        return [by[a] for a in self.chosen if a in by]

    def partition_specs(self) -> dict[str, RangePartition]:
        """The chosen attributes as partition specs (the partitions evaluated)."""
        out = {}
        for c in self.chosen_candidates():
            if c.partition is not None:
                out[c.attribute] = c.partition
        return out

    def to_json(self) -> dict[str, Any]:
        return {"format": 1, "mode": self.mode, "chosen": list(self.chosen),
                "why": self.why, "candidates": [c.to_json() for c in self.candidates]}

    @staticmethod
    def from_json(raw: Mapping[str, Any]) -> Advice:
        return Advice(tuple(Candidate.from_json(c) for c in raw.get("candidates", ())),
                      tuple(raw.get("chosen", ())), str(raw.get("why", "")),
                      str(raw.get("mode", "auto")))


# -- candidates -------------------------------------------------------------------------
def candidate_attributes(root: PlanNode, clustered: Mapping[str, Sequence[str]] | None = None
                         ) -> list[tuple[str, str, tuple[str, ...]]]:
    """``(table, column, roles)`` of every table column ``root`` groups, joins, orders or
    filters by (traced through projections and joins to the column it copies), and the
    columns the tables are ``clustered`` on; a table with none of those offers the
    columns the query reads of it ("read"). In table order, each attribute once."""
    roles: dict[tuple[str, str], set[str]] = {}

    def add(node: PlanNode, column: str, role: str) -> None:
        found = trace_column(node, column, through_padding=True)
        if found is not None:
            roles.setdefault((found[0].table, found[1]), set()).add(role)

    for node in root.walk():
        if isinstance(node, Aggregate):
            for g in node.group_by:
                add(node.input, g, "group-by")
        elif isinstance(node, (Join, SemiJoin, OuterJoin)):
            left, right, _ = node.equi_keys()
            for a in left:
                add(node.left, a, "join key")
            for b in right:
                add(node.right, b, "join key")
        elif isinstance(node, SetOp) and not node.linear:  # compares rows on all columns
            for a, b in zip(node.left.column_names, node.right.column_names):
                add(node.left, a, "join key")
                add(node.right, b, "join key")
        elif isinstance(node, TopK):
            for key in node.order:
                add(node.input, key.column, "order")
        elif isinstance(node, Window):  # an attribute of the partition keeps it whole
            for c in node.partition_by:
                add(node.input, c, "group-by")
        elif isinstance(node, Select):
            for c in sorted(node.predicate.columns()):
                add(node.input, c, "filter")
        elif isinstance(node, Scan):
            for c in (clustered or {}).get(node.table, ()):
                roles.setdefault((node.table, c), set()).add("cluster")
    have = {t for t, _ in roles}
    for node in root.walk():
        if isinstance(node, Scan) and node.table not in have:
            for c in node.source_columns:
                roles.setdefault((node.table, c), set()).add("read")
    out = [(t, c, tuple(r for r in ROLES if r in rs)) for (t, c), rs in roles.items()]
    return sorted(out, key=lambda x: (x[0], min(ROLES.index(r) for r in x[2]), x[1]))


# -- evaluation -------------------------------------------------------------------------
def advise(plan: QueryPlan, catalog: Mapping[str, pa.Schema],
           column: Callable[[str, str], Any], fragments: int, capture: Capture,
           layout: Layout | None = None, domains: Mapping[str, Mapping] | None = None,
           clustered: Mapping[str, Sequence[str]] | None = None,
           max_read_share: float = DEFAULT_MAX_READ_SHARE,
           progress: Callable[[str], None] | None = None) -> Advice:
    """The candidates of ``plan`` evaluated and the attributes chosen (module
    docstring); ``column(table, column)`` reads a column's current values (for the
    equi-depth partitions), ``capture(partitions)`` returns the accurate sketch.
    Raises ``UnsafeSketchError`` listing every candidate's reason when none is safe."""
    from imp_core.safety import check_attribute, declared_not_null

    table_columns = {t: s.names for t, s in catalog.items()}
    found = []
    for table, col, roles in candidate_attributes(plan.root, clustered):
        dtype = catalog[table].field(col).type
        if not prunable(dtype):  # floats hold NaN, whose order statistics do not follow
            found.append(Candidate(table, col, roles, False,
                                   f"its type {dtype} has no statistics that skip data"))
            continue
        verdict = check_attribute(plan, table, col, domains, table_columns,
                                  declared_not_null(catalog))
        found.append(Candidate(table, col, roles, verdict.safe, verdict.reason))
    safe = [c for c in found if c.safe]
    if not safe:
        detail = "; ".join(f"{c.attribute}: {c.reason}" for c in found) or \
            "the query groups, joins, orders and filters by no column of its tables"
        raise UnsafeSketchError(f"no safe sketch attribute: {detail}")
    per_table: dict[str, list[Candidate]] = {}
    for c in safe:
        per_table.setdefault(c.table, []).append(c)
    evaluated: dict[str, Candidate] = {}
    for table, cands in per_table.items():
        ranked = sorted(cands, key=lambda c: c.rank())
        per_table[table] = ranked[:MAX_CANDIDATES_PER_TABLE]
        for c in ranked[MAX_CANDIDATES_PER_TABLE:]:
            evaluated[c.attribute] = replace(c, reason=c.reason + " (not evaluated: "
                                             f"{MAX_CANDIDATES_PER_TABLE} per table)")
    rounds = max(len(v) for v in per_table.values())
    for i in range(rounds):
        batch = [v[i] for v in per_table.values() if i < len(v)]
        if progress is not None:
            progress(f"advisor: capture {i + 1}/{rounds} "
                     f"({', '.join(c.attribute for c in batch)})")
        for c in _evaluate_round(batch, column, fragments, capture, layout):
            evaluated[c.attribute] = c
    candidates = tuple(evaluated.get(c.attribute, c) for c in found)
    return choose(plan, candidates, max_read_share)


def _evaluate_round(batch: list[Candidate], column: Callable[[str, str], Any],
                    fragments: int, capture: Capture, layout: Layout | None
                    ) -> list[Candidate]:
    """One candidate per table of ``batch`` captured together, each then measured."""
    parts, counts = [], []
    for c in batch:
        values = column(c.table, c.column)
        part = RangePartition.equi_depth(c.table, c.column, values, fragments)
        parts.append(part)
        counts.append(np.bincount(part.annotate(values), minlength=part.size))
    pset = PartitionSet(tuple(parts))
    sketch = capture(pset)
    return [_measure(c, part, count, sketch, layout)
            for c, part, count in zip(batch, parts, counts)]


def _measure(c: Candidate, part: RangePartition, counts: np.ndarray, sketch: Sketch,
             layout: Layout | None) -> Candidate:
    """``c`` with its accurate sketch's figures and what the filter Spark would run
    (fitted to the table's pages, ``fit_to_blocks``) reads."""
    from imp_core.spark.compile import MAX_PREDICATE_RANGES
    from imp_core.storage.row_groups import fit_to_blocks

    local = sketch.table_fragments(c.table)
    out = replace(c, fragments=len(local), size=part.size,
                  provenance_rows=int(counts[local].sum()) if local else 0,
                  table_rows=int(counts.sum()), partition=part)
    found = layout(c.table, c.column) if layout is not None else None
    if found is not None and not len(found):
        found = None
    kept = fit_to_blocks(sketch, c.table, found, MAX_PREDICATE_RANGES
                         ).table_fragments(c.table)
    if found is None:  # no files: the rows of the fragments the filter keeps
        return replace(out, read_rows=int(counts[kept].sum()) if kept else 0)
    rows, size, hit = found.read(part, kept)
    return replace(out, read_rows=rows, read_bytes=size, table_rows=found.total_rows,
                   table_bytes=found.total_bytes, pages=hit, table_pages=len(found))


def choose(plan: QueryPlan, candidates: Sequence[Candidate],
           max_read_share: float = DEFAULT_MAX_READ_SHARE) -> Advice:
    """Per table the evaluated candidate reading least; the tables whose best reads at
    most ``max_read_share`` are sketched, else the single best candidate."""
    best: dict[str, Candidate] = {}
    for c in candidates:
        if c.safe and c.evaluated and (c.table not in best or c.rank() < best[c.table].rank()):
            best[c.table] = c
    if not best:
        raise UnsafeSketchError("no safe sketch attribute could be evaluated")
    skipping = [c for c in best.values() if (c.read_share or 0.0) <= max_read_share]
    chosen = sorted(skipping or [min(best.values(), key=lambda c: c.rank())],
                    key=lambda c: c.attribute)
    return Advice(tuple(candidates), tuple(c.attribute for c in chosen),
                  why_chosen(plan, chosen, bool(skipping), max_read_share))


# -- explanations -----------------------------------------------------------------------
def _pct(share: float | None) -> str:
    return "?" if share is None else f"{100 * share:.1f}%"


def why_chosen(plan: QueryPlan, chosen: Sequence[Candidate], skips: bool,
               max_read_share: float) -> str:
    """One line: what the chosen attributes read, or why none skips."""
    parts = []
    for c in chosen:
        parts.append(f"{c.attribute} ({', '.join(c.roles)}): {c.fragments}/{c.size} "
                     f"fragments hold the provenance ({_pct(c.provenance_share)} of the "
                     f"rows); the filtered query reads {_pct(c.read_share)} of {c.table}")
    line = "; ".join(parts)
    if skips:
        return line
    c = chosen[0]
    if c.fragments == c.size:
        return f"no attribute skips: {coverage_reason(plan, c.table, c.column)}"
    return (f"no attribute skips: the best, {line}, more than "
            f"{100 * max_read_share:.0f}% under the table's current layout")


def explanation(advice: Advice | None, plan: QueryPlan, sketch: Sketch) -> dict[str, Any]:
    """``advice.to_json()`` with the sketch's size (``sketch_fragments`` of
    ``total_fragments``) and ``coverage`` (``coverage_line``)."""
    out = advice.to_json() if advice is not None else {"mode": "given", "candidates": []}
    out.update(sketch_fragments=len(sketch.fragments), total_fragments=sketch.partitions.size,
               coverage=coverage_line(plan, sketch))
    return out


def coverage_line(plan: QueryPlan, sketch: Sketch) -> str:
    """One line on the tables whose sketch covers every fragment or none (empty when
    every sketched table is covered in part)."""
    lines, empty = [], []
    for part in sketch.partitions.partitions:
        held = len(sketch.table_fragments(part.table))
        if held == part.size and part.size > 1:
            lines.append(coverage_reason(plan, part.table, part.column))
        elif held == 0:
            empty.append(f"{part.table}.{part.column}")
    if empty:
        lines.append(f"the sketch on {', '.join(empty)} holds no fragment: the result "
                     "depends on no row there (it is empty, or decided without those "
                     "rows), so the filtered query reads nothing of "
                     f"{', '.join(a.split('.')[0] for a in empty)}")
    return "; ".join(lines)


def coverage_reason(plan: QueryPlan, table: str, column: str) -> str:
    """Why a provenance spans every range of ``table.column``: what the plan's top
    aggregation keeps."""
    top = _top_aggregate(plan.root)
    attr = f"{table}.{column}"
    if top is not None and not top.group_by:
        aggs = ", ".join(f"{a.func}({a.arg or '*'})" for a in top.aggregates)
        return (f"the provenance spans every range of {attr}: one global aggregate "
                f"({aggs}) over every row that passes the filters")
    if top is not None:
        keys = ", ".join(g.split(".")[-1] for g in top.group_by)
        return (f"the provenance spans every range of {attr}: the result's groups (by "
                f"{keys}) draw rows from every range of {column}")
    return (f"the provenance spans every range of {attr}: the result's rows come from "
            f"every range of {column}")


def _top_aggregate(node: PlanNode) -> Aggregate | None:
    """The first aggregation below the result through row-preserving operators."""
    while True:
        if isinstance(node, Aggregate):
            return node
        if isinstance(node, (Project, Select, TopK, Distinct)):
            node = node.children()[0]
            continue
        return None


def given_advice(verdicts: Sequence[Any], partitions: PartitionSet) -> Advice:
    """The advice of a registration that named its attributes: those, with their
    verdicts (nothing evaluated)."""
    by = {(v.table, v.column): v for v in verdicts}
    cands = []
    for p in partitions.partitions:
        v = by.get((p.table, p.column))
        cands.append(Candidate(p.table, p.column, ("given",), bool(v and v.safe),
                               v.reason if v is not None else "", size=p.size))
    return Advice(tuple(cands), tuple(c.attribute for c in cands), "named by the user",
                  mode="given")
