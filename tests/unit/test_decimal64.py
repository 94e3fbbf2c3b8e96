"""The int64 decimal path equals Arrow's exact decimal kernels, value and type.

Random decimal columns (negatives, NULLs, ties for rounding, sliced arrays, literals)
go through ``+ - *`` chains whose exact precision overflows 38 digits (Spark's
narrowing of the scale) as well as ones that stay within it; every result is compared
with the decimal128/decimal256 path, which the fast path must reproduce exactly.
"""

from __future__ import annotations

import decimal

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from imp_core.plan import coercion as ev
from imp_core.plan import decimal64


def _slow(op, left, right):
    real = decimal64.arith
    decimal64.arith = lambda *a, **k: None
    try:
        return ev.decimal_arith(op, left, right)
    finally:
        decimal64.arith = real


def _column(draw, precision, scale, allow_null):
    limit = 10 ** precision - 1
    values = draw(st.lists(st.one_of(st.integers(-limit, limit),
                                     st.none() if allow_null else st.integers(0, 0)),
                           min_size=1, max_size=30))
    arr = pa.array([None if v is None else decimal.Decimal(v).scaleb(-scale) for v in values],
                   pa.decimal128(precision, scale))
    start = draw(st.integers(0, len(arr) - 1))
    return arr.slice(start)


def _outcome(compute):
    try:
        return compute()
    except pa.ArrowInvalid as exc:
        return str(exc)


@st.composite
def _operands(draw):
    p1, p2 = draw(st.integers(1, 18)), draw(st.integers(1, 18))
    s1, s2 = draw(st.integers(0, min(p1, 6))), draw(st.integers(0, min(p2, 6)))
    left = _column(draw, p1, s1, draw(st.booleans()))
    if draw(st.booleans()):
        v = decimal.Decimal(draw(st.integers(-(10 ** p2 - 1), 10 ** p2 - 1))).scaleb(-s2)
        right = pa.scalar(v, pa.decimal128(p2, s2))
    else:
        right = _column(draw, p2, s2, draw(st.booleans()))
        n = min(len(left), len(right))
        left, right = left.slice(0, n), right.slice(0, n)
    if draw(st.booleans()):
        left, right = right, left
    return left, right


@settings(max_examples=300, deadline=None)
@given(_operands(), st.sampled_from(["+", "-", "*"]), st.booleans())
def test_fast_path_equals_arrow(operands, op, chain):
    left, right = operands
    fast = ev.decimal_arith(op, left, right)
    slow = _slow(op, left, right)
    if chain and isinstance(fast, pa.Array):
        # a second product widens past 38 digits: Spark narrows the scale (rounding),
        # or overflows them: then both paths refuse it
        fast, slow = _outcome(lambda: ev.decimal_arith("*", fast, fast)), \
            _outcome(lambda: _slow("*", slow, slow))
        if isinstance(slow, str):
            assert fast == slow
            return
    assert fast.type == slow.type
    assert fast.to_pylist() == slow.to_pylist()


def test_tpch_charge_takes_the_fast_path_and_rounds_like_arrow():
    price = pa.array([decimal.Decimal("104949.50"), decimal.Decimal("-0.05"),
                      decimal.Decimal("0.01"), None], pa.decimal128(15, 2))
    disc = pa.array([decimal.Decimal("0.10"), decimal.Decimal("0.05"),
                     decimal.Decimal("0.00"), decimal.Decimal("0.02")], pa.decimal128(15, 2))
    one = pa.scalar(decimal.Decimal(1), pa.decimal128(1, 0))
    calls = []
    real = decimal64.arith

    def spy(*a, **k):
        out = real(*a, **k)
        calls.append(out is not None)
        return out

    decimal64.arith = spy
    try:
        net = ev.decimal_arith("*", price, ev.decimal_arith("-", one, disc))
        charge = ev.decimal_arith("*", net, ev.decimal_arith("+", one, disc))
    finally:
        decimal64.arith = real
    assert calls == [True, True, True, True]
    slow_net = _slow("*", price, _slow("-", one, disc))
    expected = _slow("*", slow_net, _slow("+", one, disc))
    assert charge.type == expected.type
    assert charge.to_pylist() == expected.to_pylist()


def test_values_beyond_int64_fall_back():
    big = pa.array([decimal.Decimal(10) ** 30], pa.decimal128(38, 0))
    assert decimal64.arith("+", big, big, pa.decimal128(38, 0), 0) is None
    wide = pa.array([decimal.Decimal(3) * 10 ** 17], pa.decimal128(18, 0))
    assert decimal64.arith("*", wide, wide, pa.decimal128(37, 0), 0) is None
    assert ev.decimal_arith("*", wide, wide).to_pylist() == [decimal.Decimal(9) * 10 ** 34]


@pytest.mark.parametrize("op", ["+", "-", "*"])
def test_null_scalar_falls_back(op):
    col = pa.array([decimal.Decimal("1.5")], pa.decimal128(5, 1))
    null = pa.scalar(None, pa.decimal128(5, 1))
    assert decimal64.arith(op, col, null, pa.decimal128(12, 2), 2) is None


@st.composite
def _finer_comparisons(draw):
    """A decimal column and a decimal value of a finer scale, either side of one
    comparison; values near the column's values (ties after rounding) and beyond its
    range."""
    p = draw(st.integers(1, 18))
    s = draw(st.integers(0, min(p, 6)))
    column = _column(draw, p, s, draw(st.booleans()))
    vs = draw(st.integers(s + 1, min(s + 8, 38)))
    vp = draw(st.integers(max(vs, 1), 38))
    with decimal.localcontext(decimal.Context(prec=80)):  # 38 digits and more
        base = draw(st.sampled_from([v for v in column.to_pylist() if v is not None] or
                                    [decimal.Decimal(0)]))
        shift = draw(st.integers(-(10 ** min(vs, 9)), 10 ** min(vs, 9)))
        value = (decimal.Decimal(base) + decimal.Decimal(shift).scaleb(-vs))
        if draw(st.booleans()):  # far beyond the column's range
            value = decimal.Decimal(10 ** min(vp - vs, 20)) - decimal.Decimal(1).scaleb(-vs)
        limit = decimal.Decimal(10) ** (vp - vs)
        if abs(value) >= limit:
            value = (limit - decimal.Decimal(1).scaleb(-vs)).copy_sign(value)
        value = value.quantize(decimal.Decimal(1).scaleb(-vs))
    scalar = pa.scalar(str(value)).cast(pa.decimal128(vp, vs))
    op = draw(st.sampled_from(["=", "<>", "<", "<=", ">", ">="]))
    return column, scalar, op, draw(st.booleans())


@given(_finer_comparisons())
@settings(max_examples=400, deadline=None)
def test_comparison_at_the_column_scale_equals_the_cast_comparison(case):
    """A decimal column compared with a value of a finer scale (rounded to the column's
    scale, the column not cast) gives what casting both to the common type gives."""
    column, scalar, op, scalar_left = case
    left, right = (scalar, column) if scalar_left else (column, scalar)
    narrowed = ev.compare_at_column_scale(left, right, op)
    a, b = ev.coerce_pair(left, right, op)
    want = pa.compute.call_function(ev.CMP[op], [a, b])
    if narrowed is not None:
        assert narrowed.to_pylist() == want.to_pylist()
    else:  # only an inexact equality or a value beyond the column's type is left out
        rounded = scalar.as_py().quantize(decimal.Decimal(1).scaleb(-column.type.scale),
                                          rounding=decimal.ROUND_FLOOR)
        assert (op in ("=", "<>") and rounded != scalar.as_py()) or \
            abs(scalar.as_py()) >= 10 ** (column.type.precision - column.type.scale) - 1
