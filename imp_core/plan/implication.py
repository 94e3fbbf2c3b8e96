"""Whether one selection predicate implies another, proven conjunct by conjunct.

``implies(p2, p1, schema)`` is True only when every row of ``schema`` on which ``p2`` is
TRUE makes ``p1`` TRUE (a row on which a predicate is NULL is dropped by a selection, as
one on which it is FALSE). It answers False whenever it cannot prove it: the rules are
sound, not complete.

Each conjunct of ``p1`` must be implied by one conjunct of ``p2``: the same conjunct, or a
comparison of the same expression with a constant of the same type that allows a subset
of its values: ``e > c2`` implies ``e > c1`` for ``c2 >= c1``; ``e = c`` or
``e IN (c, ...)`` implies any range holding every value and any ``IN`` list holding them
all (``BETWEEN`` is planned as ``>=`` and ``<=``). A NULL operand makes both sides NULL,
so only non-NULL values need comparing.

Why the constants must share a type: Spark compares after coercing both sides to a
common type, and the coercion of a constant (a decimal to a double, say) may round.
Rounding is monotone, so ``c2 >= c1`` still gives ``cast(c2) >= cast(c1)`` and a bound
implies any weaker bound of the same strictness; but a bound implies a *strict* bound
from a non-strict one or an equality (``e >= 11`` implies ``e > 10``) only if the two
constants cannot round to the same value: when nothing is cast at all (the constants
have the expression's type, or are integers compared with an integer or decimal
expression, which Spark widens exactly, or strings with strings).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import date, datetime
from decimal import Decimal
from typing import Any

import pyarrow as pa

from imp_core.plan.evaluate import infer_type
from imp_core.plan.expr import BinaryOp, Expr, InList, Literal, conjuncts
from imp_core.plan.nodes import Schema, arrow_schema

_FLIP = {"<": ">", "<=": ">=", ">": "<", ">=": "<=", "=": "="}


@dataclass(frozen=True)
class _Values:
    """``expr`` lies in an interval (``points`` None) or in the finite set ``points``;
    the constants are of type ``dtype``. A bound None is open-ended."""

    expr: Expr
    dtype: pa.DataType
    lo: Any = None
    lo_strict: bool = False
    hi: Any = None
    hi_strict: bool = False
    points: frozenset | None = None


def implies(stronger: Expr | None, weaker: Expr | None, schema: Schema) -> bool:
    """Every row of ``schema`` that passes a selection on ``stronger`` passes one on
    ``weaker`` (None: no condition). Proven conjunct by conjunct (module docstring)."""
    strong = conjuncts(stronger)
    return all(any(conjunct_implies(s, w, schema) for s in strong)
               for w in conjuncts(weaker))


def conjunct_implies(a: Expr, b: Expr, schema: Schema) -> bool:
    """``a`` TRUE implies ``b`` TRUE on every row of ``schema`` (sound, not complete)."""
    if a == b:
        return True
    va, vb = _values(a), _values(b)
    if va is None or vb is None or va.expr != vb.expr or va.dtype != vb.dtype:
        return False
    exact = _exact(va.dtype, va.expr, schema)
    if vb.points is not None:
        return va.points is not None and va.points <= vb.points
    if va.points is not None:
        return all(_above(p, False, vb.lo, vb.lo_strict, exact)
                   and _below(p, False, vb.hi, vb.hi_strict, exact) for p in va.points)
    return (_above(va.lo, va.lo_strict, vb.lo, vb.lo_strict, exact)
            and _below(va.hi, va.hi_strict, vb.hi, vb.hi_strict, exact))


def _above(lo: Any, strict: bool, bound: Any, bound_strict: bool, exact: bool) -> bool:
    """Values above ``lo`` (strictly if ``strict``; None: unbounded) are all above
    ``bound`` (strictly if ``bound_strict``)."""
    if bound is None:
        return True
    if lo is None:
        return False
    if bound_strict and not strict:
        return exact and lo > bound
    return lo >= bound


def _below(hi: Any, strict: bool, bound: Any, bound_strict: bool, exact: bool) -> bool:
    if bound is None:
        return True
    if hi is None:
        return False
    if bound_strict and not strict:
        return exact and hi < bound
    return hi <= bound


def _values(conjunct: Expr) -> _Values | None:
    """The values a comparison or IN list of one expression with constants allows."""
    if isinstance(conjunct, InList) and not conjunct.negated and conjunct.values:
        types = {v.dtype for v in conjunct.values}
        if len(types) != 1 or not all(_comparable(v) for v in conjunct.values):
            return None
        return _Values(conjunct.operand, types.pop(),
                       points=frozenset(v.value for v in conjunct.values))
    if not isinstance(conjunct, BinaryOp) or conjunct.op not in _FLIP:
        return None
    expr, const, op = conjunct.left, conjunct.right, conjunct.op
    if isinstance(expr, Literal):
        expr, const, op = const, expr, _FLIP[op]
    if not isinstance(const, Literal) or isinstance(expr, Literal) or not _comparable(const):
        return None
    v = const.value
    if op == "=":
        return _Values(expr, const.dtype, points=frozenset([v]))
    if op in (">", ">="):
        return _Values(expr, const.dtype, lo=v, lo_strict=op == ">")
    return _Values(expr, const.dtype, hi=v, hi_strict=op == "<")


def _comparable(lit: Literal) -> bool:
    """A constant Python orders as Spark does: a number (not NaN, not a boolean), a date,
    a timestamp or a string (Spark compares strings by UTF-8 bytes, Python by code
    points: the same order)."""
    v = lit.value
    if isinstance(v, bool) or v is None:
        return False
    if isinstance(v, float):
        return not math.isnan(v)
    return isinstance(v, (int, Decimal, date, datetime, str))


def _exact(dtype: pa.DataType, expr: Expr, schema: Schema) -> bool:
    """Spark compares ``expr`` with constants of ``dtype`` without rounding either."""
    try:
        target = infer_type(expr, arrow_schema(schema))
    except Exception:  # an expression this schema cannot type: prove nothing with it
        return False
    if target == dtype:
        return True
    if pa.types.is_integer(dtype):
        return pa.types.is_integer(target) or pa.types.is_decimal(target)
    strings = (pa.types.is_string, pa.types.is_large_string, pa.types.is_string_view)
    return any(f(dtype) for f in strings) and any(f(target) for f in strings)
