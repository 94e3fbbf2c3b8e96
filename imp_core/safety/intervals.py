"""Interval analysis: the values an expression can take, from declared column domains.

An ``Interval`` is closed and contains every non-NULL value the expression can take
(``lo > hi``: only NULL). It serves only to prove summed expressions non-negative (rule 5
of the package docstring). Whatever is not understood is unbounded, so the analysis may
fail to prove a sign but never proves a wrong one.
"""

from __future__ import annotations

import decimal
import math
from dataclasses import dataclass
from typing import Any, Mapping

from imp_core.plan.expr import (
    BinaryOp,
    Case,
    Cast,
    ColumnRef,
    Expr,
    FuncCall,
    Literal,
    Strict,
    UnaryOp,
)

# table -> column -> declared ``(low, high)`` (``None`` for an open side)
Domains = Mapping[str, Mapping[str, Any]]

INF = math.inf


@dataclass(frozen=True)
class Interval:
    """Closed interval of the non-NULL values an expression can take; lo > hi: only NULL."""

    lo: float = -INF
    hi: float = INF

    @property
    def empty(self) -> bool:
        return self.lo > self.hi

    @property
    def nonneg(self) -> bool:
        return self.empty or self.lo >= 0

    def union(self, other: Interval) -> Interval:
        return Interval(min(self.lo, other.lo), max(self.hi, other.hi))

    def __str__(self) -> str:
        if self.empty:
            return "[NULL]"
        return f"[{self.lo:g}, {self.hi:g}]"


UNKNOWN = Interval()
NULL = Interval(INF, -INF)
NONNEG = Interval(0.0, INF)


def _number(v: Any) -> float | None:
    if isinstance(v, bool):
        return None
    if isinstance(v, (int, float, decimal.Decimal)):
        return float(v)
    return None


def domain_interval(d: Any) -> Interval:
    """A declared domain: a ``(low, high)`` pair or an object with ``lo``/``hi``."""
    if d is None:
        return UNKNOWN
    if hasattr(d, "lo") and hasattr(d, "hi"):
        lo, hi = d.lo, d.hi
    else:
        try:
            lo, hi = d
        except (TypeError, ValueError):
            return UNKNOWN
    lo_n, hi_n = _number(lo), _number(hi)
    if (lo is not None and lo_n is None) or (hi is not None and hi_n is None):
        return UNKNOWN  # dates, strings: not numbers
    return Interval(-INF if lo_n is None else lo_n, INF if hi_n is None else hi_n)


def _mul(a: float, b: float) -> float:
    if a == 0 or b == 0:  # the actual values are finite, so 0 * unbounded is 0
        return 0.0
    return a * b


def interval_of(expr: Expr, cols: Mapping[str, Interval]) -> Interval:
    if isinstance(expr, ColumnRef):
        return cols.get(expr.name, UNKNOWN)
    if isinstance(expr, Literal):
        if expr.value is None:
            return NULL
        n = _number(expr.value)
        return UNKNOWN if n is None else Interval(n, n)
    if isinstance(expr, Cast):
        return interval_of(expr.operand, cols)
    if isinstance(expr, Strict):  # the same value where it does not raise
        return interval_of(expr.inner, cols)
    if isinstance(expr, UnaryOp) and expr.op == "neg":
        x = interval_of(expr.operand, cols)
        return x if x.empty else Interval(-x.hi, -x.lo)
    if isinstance(expr, BinaryOp) and expr.op in ("+", "-", "*", "/"):
        a, b = interval_of(expr.left, cols), interval_of(expr.right, cols)
        if a.empty or b.empty:
            return NULL
        if expr.op == "+":
            return Interval(a.lo + b.lo, a.hi + b.hi)
        if expr.op == "-":
            return Interval(a.lo - b.hi, a.hi - b.lo)
        if expr.op == "*":
            ends = [_mul(x, y) for x in (a.lo, a.hi) for y in (b.lo, b.hi)]
            return Interval(min(ends), max(ends))
        # division: only the sign is tracked (x / 0 is NULL)
        if (a.lo >= 0 and b.lo >= 0) or (a.hi <= 0 and b.hi <= 0):
            return NONNEG
        if (a.lo >= 0 and b.hi <= 0) or (a.hi <= 0 and b.lo >= 0):
            return Interval(-INF, 0.0)
        return UNKNOWN
    if isinstance(expr, Case):
        out = NULL if expr.default is None else interval_of(expr.default, cols)
        for _, value in expr.whens:
            out = out.union(interval_of(value, cols))
        return out
    if isinstance(expr, FuncCall):
        if expr.name == "coalesce":
            out = NULL
            for arg in expr.args:
                out = out.union(interval_of(arg, cols))
            return out
        if expr.name == "abs":
            x = interval_of(expr.args[0], cols)
            if x.empty:
                return x
            lo = 0.0 if x.lo <= 0 <= x.hi else min(abs(x.lo), abs(x.hi))
            return Interval(lo, max(abs(x.lo), abs(x.hi)))
        if expr.name == "month":
            return Interval(1.0, 12.0)
        if expr.name == "day":
            return Interval(1.0, 31.0)
    return UNKNOWN

