"""Vectorized evaluation of scalar expressions over Arrow tables (SQL semantics).

Invariants: evaluation is a pure function of (expression, table); NULL follows SQL
three-valued logic; decimal arithmetic is exact and its result type follows Spark's
rules (precision capped at 38, scale kept at >= 6 when it must shrink); ``/`` always
yields double. ``infer_type`` is evaluation on an empty table, so types cannot drift
from values.
"""

from __future__ import annotations

import decimal
from contextlib import contextmanager
from typing import Iterator, Mapping

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from imp_core.errors import UnknownColumnError
from imp_core.plan import ansi, division, rounding
from imp_core.plan import coercion as co
from imp_core.plan.aggregates import registry
from imp_core.plan.coercion import literal_type
from imp_core.plan.expr import (
    BinaryOp,
    Case,
    Cast,
    ColumnRef,
    Expr,
    FuncCall,
    InList,
    Like,
    Literal,
    Strict,
    UnaryOp,
)

MAX_PRECISION = division.MAX_PRECISION

def aggregate_type(func: str, dtype: pa.DataType | None) -> pa.DataType:
    """Result type of an aggregate (Spark's rules, declared by each function in
    ``imp_core.plan.aggregates``)."""
    return registry.get(func).result_type(dtype)


class _Evaluator:
    def __init__(self, table: pa.Table, scalars: Mapping[str, pa.Scalar] | None = None,
                 strict: bool = False):
        self.table = table
        self.n = table.num_rows
        # each column combined once per evaluation; ``scalars``: columns of one value
        self._columns: dict[str, pa.Array | pa.Scalar] = dict(scalars or {})
        # results of compound subexpressions: the expressions of one projection often
        # share them (TPC-H q01's price * (1 - discount) feeds two sums)
        self._memo: dict[Expr, pa.Array | pa.Scalar] = {}
        # ANSI mode (``Strict`` nodes present): the rows Spark evaluates a subexpression
        # on (None: all), narrowed by AND, OR, CASE and COALESCE, and the rows that raise
        self.strict = strict
        self.live: np.ndarray | None = None
        self.errors = ansi.RowErrors(self.n)

    @contextmanager
    def _only(self, mask: np.ndarray) -> Iterator[None]:
        saved = self.live
        self.live = mask if saved is None else saved & mask
        try:
            yield
        finally:
            self.live = saved

    def _mask(self, v: pa.Array | pa.Scalar, null_as: bool) -> np.ndarray:
        """``v`` (booleans) as a numpy mask, NULL taken as ``null_as``."""
        v = pc.fill_null(self._broadcast(v), null_as)
        return np.asarray(v.to_numpy(zero_copy_only=False), dtype=bool)

    def eval(self, expr: Expr) -> pa.Array | pa.Scalar:
        if isinstance(expr, (ColumnRef, Literal)):
            return getattr(self, "_" + type(expr).__name__)(expr)
        if self.strict:  # errors depend on the live rows: no memo
            return getattr(self, "_" + type(expr).__name__)(expr)
        try:
            found = self._memo.get(expr)
        except TypeError:  # an unhashable literal value: evaluate without the memo
            return getattr(self, "_" + type(expr).__name__)(expr)
        if found is None:
            found = self._memo[expr] = getattr(self, "_" + type(expr).__name__)(expr)
        return found

    # -- leaves -------------------------------------------------------------------------
    def _ColumnRef(self, e: ColumnRef) -> pa.Array | pa.Scalar:
        found = self._columns.get(e.name)
        if found is not None:
            return found
        try:
            col = self.table.column(e.name)
        except KeyError:
            raise UnknownColumnError(f"unknown column {e.name!r}; input has "
                                     f"{', '.join(self.table.column_names)}") from None
        col = col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col
        self._columns[e.name] = col
        return col

    def _Literal(self, e: Literal) -> pa.Scalar:
        return e.scalar()

    # -- operators ------------------------------------------------------------------------
    def _BinaryOp(self, e: BinaryOp) -> pa.Array | pa.Scalar:
        if e.op in ("and", "or"):
            left = self._bool(e.left)
            if self.strict:  # Spark skips the right side where the left decides
                with self._only(self._mask(left, True) if e.op == "and"
                                else ~self._mask(left, False)):
                    right = self._bool(e.right)
            else:
                right = self._bool(e.right)
            return (pc.and_kleene if e.op == "and" else pc.or_kleene)(left, right)
        left, right = self.eval(e.left), self.eval(e.right)
        if e.op in co.CMP:
            narrowed = co.compare_at_column_scale(left, right, e.op)
            if narrowed is not None:
                return narrowed
        left, right = co.coerce_pair(left, right, e.op)
        return _binary(e.op, left, right)

    def _UnaryOp(self, e: UnaryOp) -> pa.Array | pa.Scalar:
        v = self.eval(e.operand)
        if e.op == "not":
            return pc.invert(v)
        if e.op == "neg":
            return pc.negate(v)  # wraps, as Spark with ANSI off
        if e.op == "is_null":
            return pc.is_null(v)
        return pc.is_valid(v)

    def _Strict(self, e: Strict) -> pa.Array | pa.Scalar:
        inner = e.inner
        if isinstance(inner, BinaryOp):
            operands = list(co.coerce_pair(self.eval(inner.left), self.eval(inner.right),
                                         inner.op))
            value = _binary(inner.op, *operands)
        elif isinstance(inner, UnaryOp):
            operands = [self.eval(inner.operand)]
            value = pc.negate(operands[0])
        elif isinstance(inner, FuncCall):
            operands = [self.eval(a) for a in inner.args]
            if inner.name in ("pmod", "div"):
                operands = list(co.coerce_pair(operands[0], operands[1], "%"))
            value = self._function(inner.name, operands)
        else:
            assert isinstance(inner, Cast), inner
            operands = [self.eval(inner.operand)]
            value, overflow = co.cast_overflowing(operands[0], inner.to)
            if overflow is not None:  # a number out of the type's range
                if overflow.any():
                    rows = np.broadcast_to(overflow, (self.n,)).copy()
                    rows &= ansi.valid_rows(operands[0], self.n)
                    self.errors.add(ansi.NUMERIC_VALUE_OUT_OF_RANGE
                                    if pa.types.is_decimal(inner.to) else ansi.CAST_OVERFLOW,
                                    rows if self.live is None else rows & self.live, inner)
                return value
        found = ansi.strict_errors(e, operands, value, self.n)
        if found is not None:
            cls, rows = found
            self.errors.add(cls, rows if self.live is None else rows & self.live, inner)
        return value

    def _Case(self, e: Case) -> pa.Array:
        if self.strict:  # a branch is evaluated only where it is taken
            conds, values, undecided = [], [], np.ones(self.n, dtype=bool)
            for c, v in e.whens:
                with self._only(undecided):
                    cond = self._bool(c)
                taken = self._mask(cond, False)
                with self._only(undecided & taken):
                    values.append(self.eval(v))
                conds.append(cond)
                undecided &= ~taken
            with self._only(undecided):
                default = self.eval(e.default) if e.default is not None \
                    else pa.scalar(None)
        else:
            conds = [self._bool(c) for c, _ in e.whens]
            values = [self.eval(v) for _, v in e.whens]
            default = self.eval(e.default) if e.default is not None else pa.scalar(None)
        out_type = co.common_type([v.type for v in values] + [default.type])
        values = [co.cast(v, out_type) for v in values]
        default = co.cast(default, out_type)
        result = self._broadcast(default)
        # apply WHEN branches last-to-first so the first true branch wins
        for cond, value in reversed(list(zip(conds, values))):
            cond = pc.fill_null(self._broadcast(cond), False)
            result = pc.if_else(cond, self._broadcast(value), result)
        return result

    def _InList(self, e: InList) -> pa.Array:
        v = self._broadcast(self.eval(e.operand))
        vals = [x.value for x in e.values if x.value is not None]
        target = v.type
        value_set = pa.array(vals, type=co.common_type([literal_type(x) for x in vals] or [target]))
        if value_set.type != target:
            common = co.common_type([target, value_set.type])
            v, value_set = co.cast(v, common), co.cast(value_set, common)
        out = pc.is_in(v, value_set=value_set)
        unknown = pa.scalar(None, pa.bool_())
        out = pc.if_else(pc.is_null(v), unknown, out)
        if len(vals) < len(e.values):
            # a NULL in the list: a value matching no other is compared with NULL, so the
            # IN is UNKNOWN rather than FALSE (and NOT IN never TRUE), as in Spark
            out = pc.if_else(out, True, unknown)
        return pc.invert(out) if e.negated else out

    def _Like(self, e: Like) -> pa.Array:
        v = self.eval(e.operand)
        if pa.types.is_string_view(v.type) or pa.types.is_large_string(v.type):
            v = co.cast(v, pa.string())
        out = pc.match_like(self._broadcast(v), e.pattern)
        return pc.invert(out) if e.negated else out

    def _FuncCall(self, e: FuncCall) -> pa.Array | pa.Scalar:
        if e.name == "try":
            return self._try(e.args[0])
        if e.name == "one_row":  # a scalar subquery's value; several rows raise (Spark)
            value, rows = self.eval(e.args[0]), self.eval(e.args[1])
            several = self._mask(pc.greater(rows, 1), False)
            self.errors.add(ansi.SCALAR_SUBQUERY_TOO_MANY_ROWS,
                            several if self.live is None else several & self.live, e)
            return value
        if e.name == "coalesce" and self.strict:  # an argument is evaluated while NULL
            args, undecided = [], np.ones(self.n, dtype=bool)
            for a in e.args:
                with self._only(undecided):
                    args.append(self.eval(a))
                undecided &= ~self._mask(pc.is_valid(self._broadcast(args[-1])), False)
        else:
            args = [self.eval(a) for a in e.args]
        if e.name in ("pmod", "div"):
            args = list(co.coerce_pair(args[0], args[1], "%"))
        return self._function(e.name, args)

    def _try(self, inner: Expr) -> pa.Array | pa.Scalar:
        """Spark's try_divide, try_add, ..., try_cast: ``inner`` evaluated as under ANSI
        mode, NULL on the rows where it would raise."""
        sub = _Evaluator(self.table, strict=True)
        sub._columns = self._columns
        value = sub.eval(ansi.strict_expr(inner))
        if not sub.errors:
            return value
        raising = np.zeros(self.n, dtype=bool)
        for mask in sub.errors.masks.values():
            raising |= mask
        return pc.if_else(pa.array(raising), pa.scalar(None, value.type),
                          self._broadcast(value))

    def _function(self, name: str, args: list) -> pa.Array | pa.Scalar:
        if name in ("upper", "lower", "substring") and (
                pa.types.is_string_view(args[0].type) or pa.types.is_large_string(args[0].type)):
            args[0] = co.cast(args[0], pa.string())  # the utf8 kernels take plain strings
        if name in ("year", "month", "day"):
            return pc.cast(pc.call_function(name, [args[0]]), pa.int32())
        if name in ("pmod", "div"):
            return (division.pmod if name == "pmod" else division.integral_divide)(*args)
        if name == "abs":
            return pc.abs(args[0])  # abs of the least integer is itself, as in Spark
        if name == "round":
            return rounding.round_half_up(args[0], args[1].as_py() if len(args) > 1 else 0)
        if name == "concat":  # NULL if any argument is NULL, as Spark's || and concat
            strings = [co.cast(self._broadcast(a), pa.string()) for a in args]
            return pc.binary_join_element_wise(*strings, "")
        if name == "upper":
            return pc.utf8_upper(args[0])
        if name == "lower":
            return pc.utf8_lower(args[0])
        if name == "coalesce":
            out_type = co.common_type([a.type for a in args])
            return pc.coalesce(*[co.cast(a, out_type) for a in args])
        if name == "substring":
            start = args[1].as_py() - 1
            stop = None if len(args) < 3 else start + args[2].as_py()
            return pc.utf8_slice_codeunits(args[0], start, stop)
        raise AssertionError(name)

    def _Cast(self, e: Cast) -> pa.Array | pa.Scalar:
        return co.cast_value(self.eval(e.operand), e.to)

    # -- helpers --------------------------------------------------------------------------
    def _bool(self, e: Expr) -> pa.Array | pa.Scalar:
        v = self.eval(e)
        if not pa.types.is_boolean(v.type) and not pa.types.is_null(v.type):
            raise TypeError(f"{e} is not a boolean expression")
        return v

    def _broadcast(self, v: pa.Array | pa.Scalar) -> pa.Array:
        if isinstance(v, pa.Scalar):
            return pa.repeat(v, self.n) if v.type != pa.null() else pa.nulls(self.n)
        return v


def _binary(op: str, left, right) -> pa.Array | pa.Scalar:
    """Arithmetic or comparison of two operands of a common kind, Spark's rules with ANSI
    off: integers wrap, a decimal beyond 38 digits or a zero divisor is NULL."""
    if op in co.CMP:
        return pc.call_function(co.CMP[op], [left, right])
    if op == "/":  # ``imp_core.plan.division``
        return division.divide(left, right)
    if op == "%":
        return division.remainder(left, right)
    if pa.types.is_date(left.type) or pa.types.is_date(right.type):
        return _date_plus_days(op, left, right)
    if co.is_decimal(left.type) and co.is_decimal(right.type):
        try:
            return co.decimal_arith(op, left, right)
        except pa.ArrowInvalid:  # some row overflows its type: NULL there
            return _decimal_arith_rows(op, left, right)
    return pc.call_function({"+": "add", "-": "subtract", "*": "multiply"}[op],
                            [left, right])


def _date_plus_days(op: str, left, right) -> pa.Array | pa.Scalar:
    """``date + n``, ``n + date`` and ``date - n``: the date n days later (earlier)."""
    if pa.types.is_date(right.type):
        left, right = right, left
    days = pc.cast(left, pa.int32())
    n = pc.cast(right, pa.int32())
    moved = pc.call_function("add" if op == "+" else "subtract", [days, n])
    return pc.cast(moved, pa.date32())


def _decimal_arith_rows(op: str, left, right) -> pa.Array | pa.Scalar:
    """``co.decimal_arith`` one row at a time, NULL where the value does not fit its type."""
    out_type = co.decimal_arith(op, _empty(left), _empty(right)).type
    n = _length(left, right)
    a = _values_of(left, n)
    b = _values_of(right, n)
    fn = {"+": lambda x, y: x + y, "-": lambda x, y: x - y, "*": lambda x, y: x * y}[op]
    step = decimal.Decimal(1).scaleb(-out_type.scale)
    out = []
    for x, y in zip(a, b):
        if x is None or y is None:
            out.append(None)
            continue
        v = fn(x, y).quantize(step, rounding=decimal.ROUND_HALF_UP, context=co.EXACT)
        out.append(v if abs(v.scaleb(out_type.scale)) < 10 ** out_type.precision else None)
    arr = pa.array(out, out_type)
    return arr[0] if n is None else arr


def _empty(v: pa.Array | pa.Scalar) -> pa.Array:
    return pa.array([], v.type)


def _length(*vs) -> int | None:
    for v in vs:
        if not isinstance(v, pa.Scalar):
            return len(v)
    return None


def _values_of(v: pa.Array | pa.Scalar, n: int | None) -> list:
    if isinstance(v, pa.Scalar):
        return [v.as_py()] * (1 if n is None else n)
    return v.to_pylist()


def _strict(*exprs: Expr) -> bool:
    return any(e.has_strict() for e in exprs)


def _report(ev: _Evaluator, errors: ansi.RowErrors | None) -> None:
    """Hand the rows that raise to ``errors``; with none given, raise the first."""
    if not ev.errors:
        return
    if errors is None:
        ev.errors.raise_first()
    for cls, mask in ev.errors.masks.items():
        errors.add(cls, mask, ev.errors.where[cls])


def evaluate(expr: Expr, table: pa.Table,
             scalars: Mapping[str, pa.Scalar] | None = None,
             errors: ansi.RowErrors | None = None) -> pa.Array:
    """Evaluate ``expr`` on every row of ``table``; always returns an array of len(table).
    ``scalars``: columns holding one value on every row, given once (a scalar
    subquery's value) rather than repeated as a column. ``errors``: where rows that
    raise under ANSI mode (``Strict`` nodes) are reported; without it they raise
    ``SqlRuntimeError``."""
    ev = _Evaluator(table, scalars, _strict(expr))
    out = _finish(ev, expr)
    _report(ev, errors)
    return out


def evaluate_all(exprs: list[Expr], table: pa.Table,
                 errors: ansi.RowErrors | None = None) -> list[pa.Array | pa.ChunkedArray]:
    """``evaluate`` of each of ``exprs`` over one ``table``, sharing the columns read and
    the subexpressions computed; a bare column comes back as it is stored (possibly
    chunked, not copied)."""
    ev = _Evaluator(table, strict=_strict(*exprs))
    out = []
    for e in exprs:
        col = table.column(e.name) if isinstance(e, ColumnRef) and e.name in \
            table.column_names else None
        if col is not None and not (pa.types.is_string_view(col.type)
                                    or pa.types.is_large_string(col.type)):
            out.append(col)
        else:
            out.append(_finish(ev, e))
    _report(ev, errors)
    return out


def _finish(ev: _Evaluator, expr: Expr) -> pa.Array:
    out = ev.eval(expr)
    if isinstance(out, pa.ChunkedArray):
        out = out.combine_chunks()
    if isinstance(out, pa.Scalar):
        out = ev._broadcast(out)
    if pa.types.is_string_view(out.type) or pa.types.is_large_string(out.type):
        out = pc.cast(out, pa.string())
    return out


def evaluate_predicate(expr: Expr, table: pa.Table,
                       scalars: Mapping[str, pa.Scalar] | None = None,
                       errors: ansi.RowErrors | None = None) -> np.ndarray:
    """Boolean mask of rows where ``expr`` is TRUE (NULL counts as false); ``scalars`` and
    ``errors`` as for ``evaluate``."""
    out = evaluate(expr, table, scalars, errors)
    if out.null_count:
        out = pc.fill_null(out, False)
    return out.to_numpy(zero_copy_only=False).astype(bool, copy=False)


def infer_type(expr: Expr, schema: pa.Schema) -> pa.DataType:
    """The result type of ``expr`` over rows of ``schema``."""
    return evaluate(expr, schema.empty_table()).type
