"""The plan rule of Spark's ANSI mode: every expression that can raise wrapped in a
``Strict`` node, every SUM made ``ansi_sum`` (``imp_core.plan.ansi`` says which rows
raise and how the pipeline counts them).

Invariant: the rule changes no value (a ``Strict`` node's value is its inner
expression's, ``ansi_sum``'s is SUM's where it does not raise); it only adds errors.
"""

from __future__ import annotations

import dataclasses

from imp_core.errors import UnsupportedSqlError
from imp_core.plan.ansi import can_raise, strict_expr
from imp_core.plan.expr import Expr, Strict
from imp_core.plan.nodes import (
    AggCall,
    Join,
    NamedExpr,
    PlanNode,
    WindowCall,
    scalar_filter_parts,
)


def strict_node(node):
    """A plan (sub)tree under ANSI mode: every expression through ``strict_expr``, every
    SUM raising on overflow (``ansi_sum``).

    Rows that raise are counted where a selection, a projection or an inner join's
    condition evaluates them. An expression that can raise in a condition of a
    semi-, anti- or outer join, or in a comparison with a scalar subquery, is refused
    (``UnsupportedSqlError``): those operators re-evaluate conditions over their state,
    so their rows that raise have no count to keep."""
    guarded = scalar_filter_parts(node)
    if guarded is not None:
        _refuse_raising(guarded[2], "a comparison with a scalar subquery")
    changes = {}
    for f in dataclasses.fields(node):
        value = getattr(node, f.name)
        if isinstance(value, PlanNode):
            changes[f.name] = strict_node(value)
        elif isinstance(value, Expr):
            if not isinstance(node, Join) and f.name == "condition":
                _refuse_raising(value, f"the condition of a {type(node).__name__}")
                continue
            changes[f.name] = strict_expr(value)
        elif isinstance(value, tuple) and value and isinstance(value[0], NamedExpr):
            changes[f.name] = tuple(NamedExpr(v.name, strict_expr(v.expr)) for v in value)
        elif isinstance(value, tuple) and value and isinstance(value[0], WindowCall):
            if any(c.func == "sum" for c in value):  # its overflow has no count to keep
                raise UnsupportedSqlError(
                    "SUM(...) OVER (...) under ANSI mode", detail="a window's sum that "
                    "overflows cannot be counted incrementally; run the query with "
                    "spark.sql.ansi.enabled=false")
        elif isinstance(value, tuple) and value and isinstance(value[0], AggCall):
            changes[f.name] = tuple(dataclasses.replace(a, func="ansi_sum")
                                    if a.func == "sum" else a for a in value)
    return dataclasses.replace(node, **changes) if changes else node


def _refuse_raising(expr: Expr, where: str) -> None:
    for e in expr.walk():
        if can_raise(e):
            raise UnsupportedSqlError(
                f"{e} in {where} under ANSI mode", detail="the expression may raise there "
                "and its rows that raise cannot be counted incrementally; run the query "
                "with spark.sql.ansi.enabled=false or use try_divide / try_cast")


def is_strict(node) -> bool:
    """Whether a plan (sub)tree was made for ANSI mode (holds a ``Strict`` or ansi_sum)."""
    for f in dataclasses.fields(node):
        value = getattr(node, f.name)
        if isinstance(value, PlanNode) and is_strict(value):
            return True
        if isinstance(value, Expr) and any(isinstance(e, Strict) for e in value.walk()):
            return True
        if isinstance(value, tuple):
            for v in value:
                if isinstance(v, NamedExpr) and any(isinstance(e, Strict)
                                                    for e in v.expr.walk()):
                    return True
                if isinstance(v, AggCall) and v.func == "ansi_sum":
                    return True
    return False
