"""Join keys computed from one side: ``a.x = b.y + 1`` as an equi-join key.

An inner join's operator hashes the column pairs of its condition's ``left = right``
conjuncts (``split_equi_keys``); any other conjunct is a residual checked on every pair
of rows. A conjunct equating an expression over one side's columns with one over the
other side's (TPC-DS q47 / q57 ``v1.rn = v1_lag.rn + 1``, q2 ``d_week_seq1 =
d_week_seq2 - 53``) would then pair every row with every row of the other side (of its
other keys) and drop most pairs. ``key_expressions`` computes each such expression as
a column below the join (a ``Project`` of the side's columns plus the key), equates the
columns, and projects the helper columns away above the join, as Spark's planner
extracts equi-join keys from expressions.

Invariant: the rewritten plan has the same output schema and, for every input, the same
rows with the same provenance (a projection keeps annotations; a pair passes the new
key exactly when it passed the conjunct, NULL keys matching nothing in both). Only
expressions that cannot raise (no ANSI ``Strict`` node: they are now evaluated on every
row of their side, not only on pairs) and whose two sides' types hash alike (both
integers, or equal types) are moved.
"""

from __future__ import annotations

from dataclasses import fields, replace
from itertools import count

import pyarrow as pa

from imp_core.plan.evaluate import infer_type
from imp_core.plan.expr import BinaryOp, ColumnRef, Expr, conjoin, conjuncts
from imp_core.plan.nodes import Join, NamedExpr, PlanNode, Project, arrow_schema

_PREFIX = "__jk"


def key_expressions(root: PlanNode) -> PlanNode:
    """``root`` with expression keys of inner joins computed below them (module doc)."""
    names = count()
    return _rewrite(root, names)


def _rewrite(node: PlanNode, names: count) -> PlanNode:
    changes = {}
    for f in fields(node):  # type: ignore[arg-type]
        child = getattr(node, f.name)
        if isinstance(child, PlanNode):
            new = _rewrite(child, names)
            if new is not child:
                changes[f.name] = new
    if changes:
        node = replace(node, **changes)  # type: ignore[type-var]
    return _keyed(node, names) if isinstance(node, Join) else node


def _keyed(join: Join, names: count) -> PlanNode:
    if join.condition is None:
        return join
    left_cols, right_cols = set(join.left.column_names), set(join.right.column_names)
    left_schema, right_schema = arrow_schema(join.left.schema), arrow_schema(join.right.schema)
    left_keys: list[NamedExpr] = []
    right_keys: list[NamedExpr] = []
    parts: list[Expr] = []
    for part in conjuncts(join.condition):
        pair = _sides(part, left_cols, right_cols)
        if pair is None:
            parts.append(part)
            continue
        lexpr, rexpr = pair
        ltype, rtype = infer_type(lexpr, left_schema), infer_type(rexpr, right_schema)
        if not _hash_alike(ltype, rtype):
            parts.append(part)
            continue
        refs = []
        for expr, keys in ((lexpr, left_keys), (rexpr, right_keys)):
            if isinstance(expr, ColumnRef):
                refs.append(expr)
            else:
                name = f"{_PREFIX}{next(names)}"
                keys.append(NamedExpr(name, expr))
                refs.append(ColumnRef(name))
        parts.append(BinaryOp("=", refs[0], refs[1]))
    if not left_keys and not right_keys:
        return join
    keyed = Join(_with_keys(join.left, left_keys), _with_keys(join.right, right_keys),
                 conjoin(parts))
    return Project(keyed, tuple(NamedExpr(c, ColumnRef(c)) for c in join.column_names))


def _sides(part: Expr, left_cols: set[str], right_cols: set[str]
           ) -> tuple[Expr, Expr] | None:
    """(the left side's expression, the right side's) of a conjunct ``e1 = e2`` that is
    not column = column, each over one side's columns only and unable to raise."""
    if not (isinstance(part, BinaryOp) and part.op == "="):
        return None
    a, b = part.left, part.right
    if isinstance(a, ColumnRef) and isinstance(b, ColumnRef):
        return None  # already a key pair
    ca, cb = a.columns(), b.columns()
    if not ca or not cb or a.has_strict() or b.has_strict():
        return None
    if ca <= left_cols and cb <= right_cols and not ca & right_cols and not cb & left_cols:
        return a, b
    if cb <= left_cols and ca <= right_cols and not cb & right_cols and not ca & left_cols:
        return b, a
    return None


def _hash_alike(a: pa.DataType, b: pa.DataType) -> bool:
    """Whether equal values of types ``a`` and ``b`` get equal join-key hashes and
    compare equal (``imp_core.engine.join_index``): integers of any width, or one type."""
    if pa.types.is_integer(a) and pa.types.is_integer(b):
        return True
    return a == b and (pa.types.is_integer(a) or pa.types.is_string(a)
                       or pa.types.is_large_string(a) or pa.types.is_date(a)
                       or pa.types.is_decimal(a))


def _with_keys(node: PlanNode, keys: list[NamedExpr]) -> PlanNode:
    if not keys:
        return node
    passthrough = tuple(NamedExpr(c, ColumnRef(c)) for c in node.column_names)
    return Project(node, passthrough + tuple(keys))
