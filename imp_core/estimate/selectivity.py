"""Selectivity rules of the memory estimate (``imp_core.estimate.memory``): the fraction of a
relation's rows a predicate keeps, from the per-column estimates the estimator carries.

The rules (textbook defaults, never below ``MIN_RANGE_SEL`` for an interpolated range):
``col = literal`` 1/distinct(col), else ``EQ_SEL``; ``<>`` the complement; ranges over a
column with a known min/max interpolate (all range conjuncts on one column together),
else ``RANGE_SEL`` each; ``IN`` n·(equality); ``LIKE`` ``LIKE_SEL``; ``IS NULL``
``NULL_SEL``; ``col = col`` 1/max(distinct), else ``EQ_SEL``; AND multiplies, OR adds
(s1 + s2 - s1·s2), NOT complements; anything else ``RANGE_SEL``.

Invariants: a selectivity is within [0, 1]; nothing here reads data.
"""

from __future__ import annotations

import datetime as dt
import math
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from imp_core.plan.expr import (
    BinaryOp,
    Cast,
    ColumnRef,
    Expr,
    InList,
    Like,
    Literal,
    UnaryOp,
    conjuncts,
)

__all__ = ["ColumnEstimate", "RelationEstimate", "number", "selectivity"]

EQ_SEL = 0.1
RANGE_SEL = 1 / 3
LIKE_SEL = 0.1
NULL_SEL = 0.05
MIN_RANGE_SEL = 0.01


@dataclass
class ColumnEstimate:
    """A column's estimated distinct values (None: unknown), the distinct values of its
    domain (known, or guessed: the rows of the relation it came from) and bounds."""

    distinct: float | None = None
    domain: float = math.inf
    low: Any = None
    high: Any = None

    def bounded(self, rows: float) -> ColumnEstimate:
        return ColumnEstimate(None if self.distinct is None else min(self.distinct, rows),
                              self.domain, self.low, self.high)

    def guess(self, rows: float, domain: float) -> float:
        """The distinct values; when unknown, all of ``domain`` (at most ``rows``)."""
        return min(self.distinct if self.distinct is not None else domain, rows)


@dataclass
class RelationEstimate:
    """A node's estimated output: rows, per-column statistics, fragment ids per row."""

    rows: float
    cols: dict[str, ColumnEstimate]
    ids: int  # fragment ids per row's annotation


def number(value: Any) -> float | None:
    """A comparable number for interpolation (dates as day numbers), or None."""
    if isinstance(value, bool):
        return float(value)
    if isinstance(value, (int, float, Decimal)):
        return float(value)
    if isinstance(value, dt.datetime):
        return value.timestamp() / 86400.0
    if isinstance(value, dt.date):
        return float(value.toordinal())
    return None


def selectivity(predicate: Expr | None, rel: RelationEstimate) -> float:
    """The estimated fraction of ``rel``'s rows that satisfy ``predicate`` (see the
    module's rules); 1.0 for None."""
    if predicate is None:
        return 1.0
    return min(1.0, max(0.0, _sel(predicate, rel)))


_FLIP = {"<": ">", "<=": ">=", ">": "<", ">=": "<=", "=": "=", "<>": "<>"}


def _sel(e: Expr, rel: RelationEstimate) -> float:
    if isinstance(e, BinaryOp) and e.op == "and":
        return _and(conjuncts(e), rel)
    if isinstance(e, BinaryOp) and e.op == "or":
        a, b = _sel(e.left, rel), _sel(e.right, rel)
        return a + b - a * b
    if isinstance(e, UnaryOp):
        if e.op == "not":
            return 1.0 - _sel(e.operand, rel)
        if e.op == "is_null":
            return NULL_SEL
        if e.op == "is_not_null":
            return 1.0 - NULL_SEL
        return RANGE_SEL
    if isinstance(e, Literal):
        return 1.0 if e.value is True else 0.0 if e.value in (False, None) else RANGE_SEL
    if isinstance(e, InList):
        s = min(1.0, len(e.values) * _eq_sel(_column(e.operand), rel))
        return 1.0 - s if e.negated else s
    if isinstance(e, Like):
        return 1.0 - LIKE_SEL if e.negated else LIKE_SEL
    if isinstance(e, BinaryOp) and e.op in _FLIP:
        left, right = _column(e.left), _column(e.right)
        if left is not None and right is not None:
            if e.op == "=":
                return _eq_cols(left, right, rel)
            return 1.0 - _eq_cols(left, right, rel) if e.op == "<>" else RANGE_SEL
        col = left if left is not None else right
        if e.op == "=":
            return _eq_sel(col, rel)
        if e.op == "<>":
            return 1.0 - _eq_sel(col, rel)
        bound = _range_bound(e)
        if bound is not None:
            return _range_sel(rel, bound[0], [bound])
        return RANGE_SEL
    return RANGE_SEL


def _and(parts: list[Expr], rel: RelationEstimate) -> float:
    """Conjuncts multiply, except that range bounds on one column combine into one
    interval first."""
    ranges: dict[str, list[tuple[str, str, Any]]] = {}
    s = 1.0
    for part in parts:
        bound = _range_bound(part)
        if bound is not None:
            ranges.setdefault(bound[0], []).append(bound)
        else:
            s *= _sel(part, rel)
    for name, bounds in ranges.items():
        s *= _range_sel(rel, name, bounds)
    return s


def _column(e: Expr) -> str | None:
    while isinstance(e, Cast):
        e = e.operand
    return e.name if isinstance(e, ColumnRef) else None


def _literal(e: Expr) -> Any:
    while isinstance(e, Cast):
        e = e.operand
    return e.value if isinstance(e, Literal) else None


def _range_bound(e: Expr) -> tuple[str, str, Any] | None:
    """``(column, op, value)`` of ``column op literal`` (or ``literal op column``, the
    operator flipped) for a range comparison, else None."""
    if not (isinstance(e, BinaryOp) and e.op in ("<", "<=", ">", ">=")):
        return None
    col, value = _column(e.left), _literal(e.right)
    if col is not None and value is not None:
        return col, e.op, value
    col, value = _column(e.right), _literal(e.left)
    if col is not None and value is not None:
        return col, _FLIP[e.op], value
    return None


def _range_sel(rel: RelationEstimate, name: str, bounds: list[tuple[str, str, Any]]) -> float:
    c = rel.cols.get(name)
    lo = number(c.low) if c else None
    hi = number(c.high) if c else None
    values = [number(v) for _, _, v in bounds]
    if lo is None or hi is None or hi <= lo or any(v is None for v in values):
        return RANGE_SEL ** len(bounds)
    a, b = lo, hi
    for (_, op, _), v in zip(bounds, values):
        assert v is not None
        if op in (">", ">="):
            a = max(a, v)
        else:
            b = min(b, v)
    return max(MIN_RANGE_SEL, min(1.0, (b - a) / (hi - lo)))


def _eq_sel(name: str | None, rel: RelationEstimate) -> float:
    c = rel.cols.get(name) if name is not None else None
    if c is not None and c.distinct is not None and c.distinct >= 1:
        return 1.0 / c.distinct
    return EQ_SEL


def _eq_cols(a: str, b: str, rel: RelationEstimate) -> float:
    ca, cb = rel.cols.get(a), rel.cols.get(b)
    known = [c.distinct for c in (ca, cb) if c is not None and c.distinct is not None]
    return 1.0 / max(known) if known and max(known) >= 1 else EQ_SEL
