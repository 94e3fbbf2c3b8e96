"""Decimal division on unscaled integers (``imp_core.plan.division.divide``) against
Python's ``decimal`` module computing the same quotient at a precision that makes it
exact: Spark's result type (``divide_type``), HALF_UP rounding at its scale, NULL for a
zero divisor, a NULL operand or a quotient beyond the type. Operands cover values past
64 bits (precision up to 38), NULLs, sliced and chunked arrays and scalars on either
side; the unscaled words are also read and written back unchanged
(``decimal64.unscaled_ints`` / ``from_unscaled_ints``)."""

from __future__ import annotations

import decimal

import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from imp_core.plan import decimal64
from imp_core.plan.division import divide, divide_type

EXACT = decimal.Context(prec=200, rounding=decimal.ROUND_HALF_UP)


@st.composite
def decimal_arrays(draw, n: int):
    precision = draw(st.integers(1, 38))
    scale = draw(st.integers(0, precision))
    bound = 10**precision - 1
    values = draw(st.lists(st.one_of(st.none(), st.just(0), st.integers(-bound, bound)),
                           min_size=n, max_size=n))
    dtype = pa.decimal128(precision, scale)
    wide = pa.array([None if v is None else decimal.Decimal(v).scaleb(-scale, EXACT)
                     for v in values], pa.decimal128(38, scale))
    return wide.cast(dtype)


def _expected(a, b, out_type: pa.Decimal128Type):
    if a is None or b is None or b == 0:
        return None
    step = decimal.Decimal(1).scaleb(-out_type.scale)
    q = EXACT.divide(a, b).quantize(step, context=EXACT)
    return None if abs(q.scaleb(out_type.scale, EXACT)) >= 10**out_type.precision else q


@settings(max_examples=300, deadline=None)
@given(data=st.data(), n=st.integers(1, 12))
def test_divide_equals_exact_decimal_arithmetic(data, n):
    left = data.draw(decimal_arrays(n + 2))
    right = data.draw(decimal_arrays(n + 2))
    # offsets into the buffers, as a filtered or sliced column has
    left, right = left.slice(1, n), right.slice(2, n)
    out_type = divide_type(left.type, right.type)
    expected = [_expected(a, b, out_type) for a, b in zip(left.to_pylist(), right.to_pylist())]
    got = divide(left, right)
    assert got.type == out_type
    assert got.to_pylist() == expected
    assert divide(left[0], right[0]).as_py() == expected[0]  # two scalars
    shape = data.draw(st.sampled_from(["chunked", "left scalar", "right scalar"]))
    if shape == "chunked":
        cut = data.draw(st.integers(0, n))
        chunked = pa.chunked_array([left[:cut], left[cut:]], type=left.type)
        assert divide(chunked, right).to_pylist() == expected
    elif shape == "left scalar":
        assert divide(left[0], right).to_pylist() == \
            [_expected(left[0].as_py(), b, out_type) for b in right.to_pylist()]
    else:
        assert divide(left, right[0]).to_pylist() == \
            [_expected(a, right[0].as_py(), out_type) for a in left.to_pylist()]


@settings(max_examples=200, deadline=None)
@given(values=decimal_arrays(8))
def test_unscaled_words_round_trip(values):
    ints = decimal64.unscaled_ints(values)
    assert ints == [None if v is None else int(v.scaleb(values.type.scale, EXACT))
                    for v in values.to_pylist()]
    assert decimal64.from_unscaled_ints(ints, values.type).equals(values)
