"""Explicit CASTs between numbers as Spark does them with ANSI mode off, and which values
overflow (where ANSI mode raises CAST_OVERFLOW or NUMERIC_VALUE_OUT_OF_RANGE).

- to DECIMAL(p, s): rounded half up to s places (a double by its shortest decimal
  text); a value with more than p - s integer digits, NaN or an infinity is NULL;
- a wider integer to a narrower one keeps the low bits (Java's narrowing: 2^31 as INT is
  -2^31);
- a double to an integer truncates toward zero and saturates at the type's bounds, NaN
  is 0 (Java's ``(int)`` / ``(long)``);
- a decimal to an integer truncates toward zero and keeps the low bits.

>>> cast_numbers(pa.array([2**31, -1], pa.int64()), pa.int32())[0].to_pylist()
[-2147483648, -1]
>>> cast_numbers(pa.array([1e20, -2.7, float("nan")]), pa.int64())[0].to_pylist()
[9223372036854775807, -2, 0]
>>> cast_numbers(pa.array([1234.5, 9.99, 0.15]), pa.decimal128(4, 1))[0].to_pylist()
[None, Decimal('10.0'), Decimal('0.2')]
"""

from __future__ import annotations

import decimal
import math

import numpy as np
import pyarrow as pa

_EXACT = decimal.Context(prec=200)


def handles(source: pa.DataType, target: pa.DataType) -> bool:
    """Whether a cast from ``source`` to ``target`` may overflow (one of this module's)."""
    numeric = (pa.types.is_integer(source) or pa.types.is_floating(source)
               or pa.types.is_decimal(source))
    return numeric and source != target and (
        pa.types.is_decimal(target)
        or (pa.types.is_integer(target) and not _widens(source, target)))


def _widens(source: pa.DataType, target: pa.DataType) -> bool:
    return pa.types.is_integer(source) and source.bit_width <= target.bit_width and (
        pa.types.is_signed_integer(source) == pa.types.is_signed_integer(target))


def cast_numbers(v: pa.Array, to: pa.DataType) -> tuple[pa.Array, np.ndarray]:
    """``v`` cast to ``to`` (see the module docstring) and the mask of values that
    overflowed (NULL, wrapped or saturated)."""
    values = v.to_pylist()
    out: list[object] = []
    overflow = np.zeros(len(values), dtype=bool)
    for i, x in enumerate(values):
        if x is None:
            out.append(None)
            continue
        y, over = _one(x, to)
        out.append(y)
        overflow[i] = over
    return pa.array(out, to), overflow


def _one(x, to: pa.DataType) -> tuple[object, bool]:
    if pa.types.is_decimal(to):
        if isinstance(x, float) and not math.isfinite(x):
            return None, True
        # a double by its shortest decimal text, as Scala's BigDecimal(double) takes it
        d = x if isinstance(x, decimal.Decimal) else decimal.Decimal(repr(x))
        step = decimal.Decimal(1).scaleb(-to.scale)
        r = d.quantize(step, rounding=decimal.ROUND_HALF_UP, context=_EXACT)
        if abs(r) >= decimal.Decimal(10) ** (to.precision - to.scale):
            return None, True
        return r, False
    bits = to.bit_width
    signed = pa.types.is_signed_integer(to)
    lo, hi = (-(2 ** (bits - 1)), 2 ** (bits - 1) - 1) if signed else (0, 2**bits - 1)
    if isinstance(x, float):
        if math.isnan(x):
            return 0, True
        wide = 64 if bits == 64 else 32  # Java narrows a double through int or long
        wlo, whi = -(2 ** (wide - 1)), 2 ** (wide - 1) - 1
        n = wlo if x <= wlo else whi if x >= whi else int(x)
        over = not lo <= int(x) <= hi if math.isfinite(x) else True
        return _wrap(n, bits, signed), over
    n = int(x)  # a decimal truncates toward zero
    return _wrap(n, bits, signed), not lo <= n <= hi


def _wrap(n: int, bits: int, signed: bool) -> int:
    n &= (1 << bits) - 1
    if signed and n >= 1 << (bits - 1):
        n -= 1 << bits
    return n
