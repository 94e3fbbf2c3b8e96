"""Spark's ANSI mode: which rows make a query raise, and the plan rule that asks for it.

With ANSI mode off (Spark's classic session, the default here) a zero divisor, a decimal
overflow or a string that is no number give NULL and a BIGINT overflow wraps. With it
on, Spark raises instead. ``imp_core.plan.strict`` wraps every expression that can raise
in a ``Strict`` node; evaluating one (``imp_core.plan.evaluate``) gives the ANSI-off value and
reports, per Spark error class, the rows that raise. The incremental pipeline counts
them with their weights (``ErrorTally``): the query raises at a version exactly when the
count of some class is positive there, and is well again once those rows are gone.

Invariants: a ``Strict`` node's value is its inner expression's; a row raises only where
Spark evaluates the expression (``imp_core.plan.evaluate`` narrows AND, OR, CASE and
COALESCE to the rows their earlier parts leave undecided); ``ErrorTally`` counts are the
weighted number of current rows raising at each expression, never negative.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from imp_core.errors import SqlRuntimeError
from imp_core.plan import string_casts
from imp_core.plan.expr import ARITHMETIC, BinaryOp, Cast, Expr, FuncCall, Strict, UnaryOp

DIVIDE_BY_ZERO = "DIVIDE_BY_ZERO"
REMAINDER_BY_ZERO = "REMAINDER_BY_ZERO"
ARITHMETIC_OVERFLOW = "ARITHMETIC_OVERFLOW"
NUMERIC_VALUE_OUT_OF_RANGE = "NUMERIC_VALUE_OUT_OF_RANGE"
CAST_INVALID_INPUT = "CAST_INVALID_INPUT"
CAST_OVERFLOW = "CAST_OVERFLOW"
SCALAR_SUBQUERY_TOO_MANY_ROWS = "SCALAR_SUBQUERY_TOO_MANY_ROWS"  # in either mode

_HINTS = {
    DIVIDE_BY_ZERO: "Division by zero. Use `try_divide` to tolerate divisor being 0 and "
                    "return NULL instead.",
    REMAINDER_BY_ZERO: "Remainder by zero. Use `try_mod` to tolerate divisor being 0 and "
                       "return NULL instead.",
    ARITHMETIC_OVERFLOW: "Overflow. Use 'try_' functions to tolerate overflow and return "
                         "NULL instead.",
    NUMERIC_VALUE_OUT_OF_RANGE: "The value cannot be represented as its decimal type.",
    SCALAR_SUBQUERY_TOO_MANY_ROWS: "More than one row returned by a subquery used as an "
                                   "expression.",
    CAST_OVERFLOW: "The value cannot be cast to its type due to an overflow. Use `try_cast` "
                   "to tolerate overflow and return NULL instead.",
    CAST_INVALID_INPUT: "A string cannot be cast to its type because it is malformed. "
                        "Use `try_cast` to tolerate malformed input and return NULL "
                        "instead.",
}


# -- the expressions that may raise ------------------------------------------------------

_FUNCTIONS_THAT_RAISE = frozenset({"abs", "pmod", "div"})


def strict_expr(expr: Expr) -> Expr:
    """``expr`` with every subexpression that raises under ANSI mode wrapped in ``Strict``."""
    if isinstance(expr, Strict) or (isinstance(expr, FuncCall) and expr.name == "try"):
        return expr  # try_...: never raises (``evaluate`` nulls what would)
    rebuilt = _map_children(expr, strict_expr)
    if can_raise(rebuilt):
        return Strict(rebuilt)
    return rebuilt


def can_raise(e: Expr) -> bool:
    """Whether ``e`` itself (not its children) may raise under ANSI mode."""
    if isinstance(e, BinaryOp):
        return e.op in ARITHMETIC
    if isinstance(e, UnaryOp):
        return e.op == "neg"
    if isinstance(e, FuncCall):
        return e.name in _FUNCTIONS_THAT_RAISE
    return isinstance(e, Cast)


def _map_children(e: Expr, fn) -> Expr:
    if not dataclasses.is_dataclass(e) or not e.children():
        return e
    changes = {}
    for f in dataclasses.fields(e):
        value = getattr(e, f.name)
        if isinstance(value, Expr):
            changes[f.name] = fn(value)
        elif isinstance(value, tuple) and value and all(isinstance(v, Expr) for v in value):
            changes[f.name] = tuple(fn(v) for v in value)
        elif isinstance(value, tuple) and value and all(isinstance(v, tuple) for v in value):
            changes[f.name] = tuple(tuple(fn(x) if isinstance(x, Expr) else x for x in v)
                                    for v in value)
    return dataclasses.replace(e, **changes) if changes else e


# -- which rows raise ------------------------------------------------------------------------


@dataclass
class RowErrors:
    """The rows of one evaluation that raise, per error class: a boolean mask and the
    first expression (its text) that raised each class."""

    n: int
    masks: dict[str, np.ndarray] = field(default_factory=dict)
    where: dict[str, str] = field(default_factory=dict)

    def add(self, error_class: str, mask: np.ndarray, expr: Expr) -> None:
        if not mask.any():
            return
        if error_class in self.masks:
            self.masks[error_class] = self.masks[error_class] | mask
        else:
            self.masks[error_class] = mask
            self.where[error_class] = str(expr)

    def __bool__(self) -> bool:
        return bool(self.masks)

    def raise_first(self, counts: np.ndarray | None = None) -> None:
        """Raise the first class some row (of positive multiplicity ``counts``) raises."""
        for cls, mask in self.masks.items():
            rows = int(mask.sum()) if counts is None else int(counts[mask].sum())
            if rows > 0:
                raise SqlRuntimeError(cls, f"{_HINTS[cls]} (in {self.where[cls]})", rows)


def valid_rows(v: pa.Array | pa.Scalar, n: int) -> np.ndarray:
    """Rows where ``v`` (an array of ``n`` values, or a scalar) is not NULL."""
    return _valid(v, n)


def _valid(v: pa.Array | pa.Scalar, n: int) -> np.ndarray:
    if isinstance(v, pa.Scalar):
        return np.full(n, v.is_valid)
    if isinstance(v, pa.ChunkedArray):
        v = v.combine_chunks()
    return np.asarray(v.is_valid().to_numpy(zero_copy_only=False), dtype=bool)


def _is_zero(v: pa.Array | pa.Scalar, n: int) -> np.ndarray:
    if isinstance(v, pa.Scalar):
        return np.full(n, v.is_valid and v.as_py() == 0)
    zero = pc.equal(v, pa.scalar(0, pa.int8()).cast(v.type))
    return np.asarray(pc.fill_null(zero, False).to_numpy(zero_copy_only=False), dtype=bool)


def _broadcast(v: pa.Array | pa.Scalar, n: int) -> pa.Array:
    if isinstance(v, pa.Scalar):
        return pa.repeat(v, n) if v.type != pa.null() else pa.nulls(n)
    return v.combine_chunks() if isinstance(v, pa.ChunkedArray) else v


def integer_overflow(op: str, left, right, value, n: int) -> np.ndarray:
    """Rows where the wrapping integer ``left op right`` (``value``) overflowed."""
    def ints(v) -> np.ndarray:  # NULLs as 0: a row with a NULL operand never overflows
        arr = _broadcast(v, n)
        return pc.fill_null(arr, 0).to_numpy(zero_copy_only=False) if arr.null_count \
            else arr.to_numpy(zero_copy_only=False)

    r = ints(value)
    a, b = ints(left).astype(r.dtype), ints(right).astype(r.dtype)
    if op == "+":
        return ((a ^ r) & (b ^ r)) < 0
    if op == "-":
        return ((a ^ b) & (a ^ r)) < 0
    lo, hi = np.iinfo(r.dtype).min, np.iinfo(r.dtype).max
    exact = a.astype(object) * b.astype(object)
    return np.fromiter(((x < lo or x > hi) for x in exact), dtype=bool, count=n)


def strict_errors(e: Strict, operands: list, value, n: int) -> tuple[str, np.ndarray] | None:
    """The error class a ``Strict`` node raises and on which rows (before the live mask),
    given its inner expression's (coerced) operands and ANSI-off ``value``; None when no
    row raises."""
    inner = e.inner
    valid = np.ones(n, dtype=bool)
    for v in operands:
        valid &= _valid(v, n)
    if not valid.any():
        return None
    is_null = ~_valid(value, n)
    divides = (isinstance(inner, BinaryOp) and inner.op in ("/", "%")) or (
        isinstance(inner, FuncCall) and inner.name in ("pmod", "div"))
    if divides:
        zero = valid & _is_zero(operands[1], n)
        if zero.any():
            remainder = (isinstance(inner, BinaryOp) and inner.op == "%") or (
                isinstance(inner, FuncCall) and inner.name == "pmod")
            return (REMAINDER_BY_ZERO if remainder else DIVIDE_BY_ZERO), zero
        return NUMERIC_VALUE_OUT_OF_RANGE, valid & is_null
    if isinstance(inner, Cast):
        rejected = is_null
        if string_casts.handles(operands[0].type, inner.to):
            rejected = rejected | string_casts.ansi_rejects(operands[0], inner.to, n)
        return CAST_INVALID_INPUT, valid & rejected
    out_type = value.type
    if pa.types.is_decimal(out_type):
        return NUMERIC_VALUE_OUT_OF_RANGE, valid & is_null
    if not pa.types.is_integer(out_type):
        return None  # doubles neither overflow nor divide by zero into an error here
    if isinstance(inner, BinaryOp):
        return ARITHMETIC_OVERFLOW, valid & integer_overflow(
            inner.op, operands[0], operands[1], value, n)
    # neg / abs of the type's least value is itself again
    least = pa.scalar(np.iinfo(out_type.to_pandas_dtype()).min, out_type)
    same = pc.equal(_broadcast(operands[0], n), least)
    return ARITHMETIC_OVERFLOW, valid & np.asarray(
        pc.fill_null(same, False).to_numpy(zero_copy_only=False), dtype=bool)


# -- the pipeline's count of rows that raise -------------------------------------------------


class ErrorTally:
    """Weighted counts of current rows raising, per (operator, error class): an operator
    adds the weights of the delta rows that raise, so a count is the number of rows of
    the current input raising there. ``check`` raises the first positive count's error.

    Snapshot: a JSON object {"op|class": [count, expression]}; counts of zero are dropped.
    """

    def __init__(self) -> None:
        self.counts: dict[tuple[str, str], int] = {}
        self.where: dict[tuple[str, str], str] = {}

    def add(self, op_id: str, errors: RowErrors, weights: np.ndarray) -> None:
        for cls, mask in errors.masks.items():
            delta = int(np.asarray(weights, dtype=np.int64)[mask].sum())
            self.add_count(op_id, cls, delta, errors.where[cls])

    def add_count(self, op_id: str, error_class: str, delta: int, where: str) -> None:
        if not delta:
            return
        key = (op_id, error_class)
        total = self.counts.get(key, 0) + delta
        if total:
            self.counts[key] = total
            self.where.setdefault(key, where)
        else:
            self.counts.pop(key, None)
            self.where.pop(key, None)

    def check(self) -> None:
        for key, count in sorted(self.counts.items()):
            if count > 0:
                raise SqlRuntimeError(key[1], f"{_HINTS[key[1]]} (in {self.where[key]}; "
                                      f"{count} current row(s) raise it)", count)

    def snapshot(self) -> str:
        return json.dumps({f"{op}|{cls}": [n, self.where[(op, cls)]]
                           for (op, cls), n in sorted(self.counts.items())})

    @staticmethod
    def restore(text: str) -> ErrorTally:
        out = ErrorTally()
        for key, (count, where) in json.loads(text or "{}").items():
            op, cls = key.rsplit("|", 1)
            if cls not in _HINTS or not isinstance(count, int):
                raise ValueError(f"bad error count {key!r}")
            out.counts[(op, cls)] = count
            out.where[(op, cls)] = str(where)
        return out

