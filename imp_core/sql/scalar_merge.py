"""Uncorrelated scalar subqueries of one SELECT list over one table, as one aggregation.

TPC-DS q9 reads fifteen one-row aggregates of ``store_sales``, each under its own range
of ``ss_quantity``. Planned one by one, every batch of ``store_sales`` steps fifteen
aggregations and fifteen LEFT joins, each re-emitting the row all the others feed. Like
Spark's ``MergeScalarSubqueries``, the members that read the same table under the same
names become one aggregation over the rows any of them reads, each aggregate reading its
argument only where its own predicate holds.

A member (``SelectPlanner.select_joins``) has the shape

    Project [alias._v := _v] ← Project [_v := f(_agg…)] ← Aggregate BY [] calls
        ← (Project of columns)* ← [Select p] ← Scan t

with no DISTINCT aggregate (several in one SELECT are not maintained) and a predicate
that cannot raise (``_cannot_raise``: comparisons of like-typed columns and literals,
AND / OR / NOT, IS NULL, IN lists), so that ANSI mode sees the same errors. Members of
one table read under the same names become

    Project [alias_i._v := f_i(_m{i}_{k}) …] ← Aggregate BY [] (g(_c{i}_{k}) AS _m{i}_{k})
        ← Project [_c{i}_{k} := CASE WHEN p_i THEN arg END] ← Select (p_1 OR … OR p_n)
        ← Scan t [every column a member reads]

Exact: an aggregate skips NULL arguments (COUNT(*) becomes COUNT over 1 where p_i
holds), so g over the rows of p_1 OR … OR p_n reading ``CASE WHEN p_i THEN arg END``
is g over the rows of p_i. Where no row satisfies p_i but another member's predicate
holds somewhere, the member had no row (its value NULL, a COUNT read as 0 above) and
the merged row holds each aggregate over no rows: COUNT 0, the others NULL, so f_i
takes the same value. Where no row satisfies any p_i, neither has a row.
Provenance: the one row every outer row is joined with was annotated with the union of
the members' input rows; the merged row with the rows of p_1 OR … OR p_n: the same.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import pyarrow as pa

from imp_core.plan.aggregates.count import COUNT
from imp_core.plan.aggregates.distinct import is_distinct
from imp_core.plan.evaluate import infer_type
from imp_core.plan.expr import (
    COMPARISON,
    BinaryOp,
    Case,
    ColumnRef,
    Expr,
    InList,
    Literal,
    UnaryOp,
    disjoin,
    rename_columns,
)
from imp_core.plan.nodes import (
    AggCall,
    Aggregate,
    Field,
    NamedExpr,
    PlanNode,
    Project,
    Scan,
    Select,
    arrow_schema,
)


@dataclass(frozen=True)
class _Member:
    """One scalar subquery in the shape the module docstring gives."""

    node: PlanNode  # as planned
    output: str  # alias._v
    value: Expr  # f over the aggregate's outputs
    calls: tuple[AggCall, ...]
    predicate: Expr | None
    scan: Scan


def merge_scalar_subqueries(one_rows: Sequence[PlanNode]) -> list[PlanNode]:
    """``one_rows`` (one-row derived tables, each with one column ``alias._v``) with the
    members over the same table merged (module docstring); the others as they were."""
    groups: dict[tuple, list[_Member]] = {}
    out: list[PlanNode] = []
    for node in one_rows:
        member = _member(node)
        if member is None:
            out.append(node)
            continue
        groups.setdefault((member.scan.table,), []).append(member)
    for members in groups.values():
        while members:
            first = members[0]
            same = [m for m in members if _same_names(first.scan, m.scan)]
            members = [m for m in members if m not in same]
            out.append(same[0].node if len(same) == 1 else _merge(same))
    return out


def _member(node: PlanNode) -> _Member | None:
    if not (isinstance(node, Project) and len(node.exprs) == 1):
        return None
    outer = node.exprs[0]
    inner = node.input
    if not (isinstance(inner, Project) and isinstance(inner.input, Aggregate)):
        return None
    agg = inner.input
    if agg.group_by or any(is_distinct(c.func) for c in agg.aggregates):
        return None
    value = rename_columns(outer.expr, {e.name: e.expr for e in inner.exprs})
    below = agg.input
    while isinstance(below, Project) and all(
            isinstance(e.expr, ColumnRef) and e.expr.name == e.name for e in below.exprs):
        below = below.input
    predicate = None
    if isinstance(below, Select):
        predicate, below = below.predicate, below.input
    if not isinstance(below, Scan):
        return None
    schema = arrow_schema(below.fields)
    if predicate is not None and not _cannot_raise(predicate, schema):
        return None
    return _Member(node, outer.name, value, agg.aggregates, predicate, below)


def _same_names(a: Scan, b: Scan) -> bool:
    """Whether the scans read their common columns under the same output names."""
    names = dict(zip(a.source_columns, (f.name for f in a.fields)))
    return a.table == b.table and all(
        names.get(c, f.name) == f.name for c, f in zip(b.source_columns, b.fields))


def _kind(dtype: pa.DataType) -> str:
    if pa.types.is_integer(dtype) or pa.types.is_decimal(dtype) or \
            pa.types.is_floating(dtype):
        return "number"
    return str(dtype)


def _cannot_raise(expr: Expr, schema: pa.Schema) -> bool:
    """Whether ``expr`` is made of columns, literals, comparisons of operands of one kind
    (numbers, or one other type: no cast that may fail), AND / OR / NOT, IS NULL and IN
    lists: nothing ANSI mode makes raise."""
    if isinstance(expr, (ColumnRef, Literal)):
        return True
    if isinstance(expr, UnaryOp):
        return expr.op != "neg" and _cannot_raise(expr.operand, schema)
    if isinstance(expr, BinaryOp):
        if expr.op in ("and", "or"):
            return _cannot_raise(expr.left, schema) and _cannot_raise(expr.right, schema)
        if expr.op not in COMPARISON or not all(
                isinstance(s, (ColumnRef, Literal)) for s in (expr.left, expr.right)):
            return False
        return _kind(infer_type(expr.left, schema)) == _kind(infer_type(expr.right, schema))
    if isinstance(expr, InList):
        if not isinstance(expr.operand, ColumnRef):
            return False
        kind = _kind(infer_type(expr.operand, schema))
        return all(_kind(v.dtype) == kind for v in expr.values)
    return False


def _merge(members: list[_Member]) -> PlanNode:
    columns: dict[str, Field] = {}
    for m in members:
        for c, f in zip(m.scan.source_columns, m.scan.fields):
            columns.setdefault(c, f)
    scan = Scan(members[0].scan.table, tuple(columns), tuple(columns.values()))
    node: PlanNode = scan
    predicates = [m.predicate for m in members]
    if all(p is not None for p in predicates):
        distinct = list(dict.fromkeys(predicates))  # CASE buckets repeat theirs
        node = Select(node, disjoin(distinct))
    arguments: list[NamedExpr] = []
    calls: list[AggCall] = []
    outputs: list[NamedExpr] = []
    for i, m in enumerate(members):
        renamed: dict[str, Expr] = {}
        for k, call in enumerate(m.calls):
            star = not call.function.takes_argument  # COUNT(*): COUNT over 1 where p_i
            arg: Expr = Literal(1, pa.int64()) if star else ColumnRef(call.arg)
            if m.predicate is not None:
                arg = Case(((m.predicate, arg),), None)
            if star and m.predicate is None:
                calls.append(AggCall(call.func, None, f"_m{i}_{k}"))
            else:
                arguments.append(NamedExpr(f"_c{i}_{k}", arg))
                calls.append(AggCall(COUNT.name if star else call.func, f"_c{i}_{k}",
                                     f"_m{i}_{k}"))
            renamed[call.name] = ColumnRef(f"_m{i}_{k}")
        outputs.append(NamedExpr(m.output, rename_columns(m.value, renamed)))
    if arguments:
        node = Project(node, tuple(arguments))
    else:  # COUNT(*)s only, no predicate: the aggregation reads no column
        node = Project(node, (NamedExpr("_c", Literal(1, pa.int64())),))
    return Project(Aggregate(node, (), tuple(calls)), tuple(outputs))


__all__ = ["merge_scalar_subqueries"]
