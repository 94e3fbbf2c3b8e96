"""Spark's ``round(x, d)``: half up (away from zero at .5), with Spark's result types.

- DECIMAL(p, s): for d >= 0 the result is DECIMAL(min(p - s + 1 + min(s, d), 38),
  min(s, d)); for d < 0, DECIMAL(min(max(p - s + 1, 1 - d), 38), 0) (one more integer
  digit: 9.9 rounds to 10);
- a double is rounded as its shortest decimal text (Spark goes through
  ``BigDecimal(double)``), so round(0.15, 1) is 0.2 although the double is below 0.15;
  NaN and infinities stay as they are;
- an integer keeps its type; d < 0 rounds to a multiple of 10^-d.

>>> round_half_up(pa.array([0.15, 2.5, -2.5, None]), 1).to_pylist()
[0.2, 2.5, -2.5, None]
>>> round_half_up(pa.array([2.5, -2.5]), 0).to_pylist()
[3.0, -3.0]
>>> round_half_up(pa.array([1234, -15], pa.int64()), -1).to_pylist()
[1230, -20]
>>> r = round_half_up(pa.array([decimal.Decimal("9.95")], pa.decimal128(3, 2)), 1)
>>> r.type, r.to_pylist()
(Decimal128Type(decimal128(3, 1)), [Decimal('10.0')])
"""

from __future__ import annotations

import decimal
import math

import pyarrow as pa
import pyarrow.compute as pc

MAX_PRECISION = 38
_EXACT = decimal.Context(prec=200)


def result_type(dtype: pa.DataType, d: int) -> pa.DataType:
    """The type of ``round(x, d)`` for ``x`` of ``dtype``."""
    if pa.types.is_decimal(dtype):
        p, s = dtype.precision, dtype.scale
        if d < 0:
            return pa.decimal128(min(max(p - s + 1, 1 - d), MAX_PRECISION), 0)
        scale = min(s, d)
        return pa.decimal128(min(p - s + 1 + scale, MAX_PRECISION), scale)
    return dtype


def _half_up(x: decimal.Decimal, d: int) -> decimal.Decimal:
    return x.quantize(decimal.Decimal(1).scaleb(-d), rounding=decimal.ROUND_HALF_UP,
                      context=_EXACT)


def _one(x, dtype: pa.DataType, d: int):
    if x is None:
        return None
    if pa.types.is_floating(dtype):
        if not math.isfinite(x):
            return x
        return float(_half_up(decimal.Decimal(repr(x)), d))
    if pa.types.is_integer(dtype):
        return x if d >= 0 else int(_half_up(decimal.Decimal(x), d))
    return _half_up(x, d)


def round_half_up(v: pa.Array | pa.Scalar, d: int) -> pa.Array | pa.Scalar:
    """``round(v, d)`` as Spark computes it (see the module docstring)."""
    dtype = v.type
    if not (pa.types.is_decimal(dtype) or pa.types.is_floating(dtype)
            or pa.types.is_integer(dtype)):
        raise TypeError(f"round is not defined for {dtype}")
    out_type = result_type(dtype, d)
    if isinstance(v, pa.Scalar):
        return pa.scalar(_one(v.as_py(), dtype, d), out_type)
    if isinstance(v, pa.ChunkedArray):
        v = v.combine_chunks()
    if pa.types.is_integer(dtype) and d >= 0:
        return v
    if pa.types.is_decimal(dtype) and d >= 0:
        # exact in Arrow: half up at d places, then the (exact) change of scale
        wide = pc.cast(v, pa.decimal128(min(dtype.precision + 1, MAX_PRECISION), dtype.scale))
        return pc.cast(pc.round(wide, ndigits=d, round_mode="half_towards_infinity"), out_type)
    return pa.array([_one(x, dtype, d) for x in v.to_pylist()], out_type)
