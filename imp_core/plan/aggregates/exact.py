"""Exact numeric state for sums, averages and the statistics aggregates.

Sums never drift: integers are kept as integers, decimals as unscaled integers at the
input scale, and doubles as integers scaled by 2**FLOAT_SHIFT (every finite double is
an integer multiple of 2**-1074, so the scaled value is exact). Each function's
``finalize`` (in its module of ``imp_core.plan.aggregates``) maps exact state to output values
deterministically, so the incremental operators and the reference evaluator agree bit
for bit.
"""

from __future__ import annotations

import decimal
from fractions import Fraction

import numpy as np
import pyarrow as pa

from imp_core.plan.decimal64 import unscaled_int64

FLOAT_SHIFT = 1100
INT64_SAFE = 2**62
EXACT_FLOAT = 2**53


def kind_of(dtype: pa.DataType) -> str:
    """How a sum over ``dtype`` is kept: 'int', 'decimal' or 'float'."""
    if pa.types.is_decimal(dtype):
        return "decimal"
    if pa.types.is_floating(dtype):
        return "float"
    if pa.types.is_integer(dtype) or pa.types.is_boolean(dtype):
        return "int"
    raise TypeError(f"cannot sum or average values of type {dtype}")


def exact_values(arr: pa.Array) -> np.ndarray:
    """The exact integer representation of each value (NULL -> 0): int64 or object."""
    t = arr.type
    if pa.types.is_decimal(t):
        fits = unscaled_int64(arr)
        if fits is not None:
            return np.array(fits[0], dtype=np.int64)  # a copy, not a view of the array
        scale = t.scale
        return np.array([0 if v is None else int(v.scaleb(scale)) for v in arr.to_pylist()],
                        dtype=object)
    if pa.types.is_floating(t):
        vals = arr.fill_null(0.0).to_numpy(zero_copy_only=False).astype(np.float64)
        if not np.all(np.isfinite(vals)):
            raise ValueError("cannot sum NaN or infinite values exactly")
        mant, exp = np.frexp(vals)
        m = (mant * 2.0**53).astype(np.int64)
        shift = (exp - 53 + FLOAT_SHIFT).astype(np.int64)
        # subnormals give a negative shift; the right shift is still exact because every
        # double is a multiple of 2**-1074 and FLOAT_SHIFT >= 1074
        return np.array([int(a) << int(s) if s >= 0 else int(a) >> -int(s)
                         for a, s in zip(m.tolist(), shift.tolist())], dtype=object)
    return arr.fill_null(0).to_numpy(zero_copy_only=False).astype(np.int64)


def python_exact(value: object, dtype: pa.DataType) -> int:
    """Exact integer of one Python value (used by the reference evaluator)."""
    k = kind_of(dtype)
    if k == "decimal":
        return int(decimal.Decimal(value).scaleb(dtype.scale))
    if k == "float":
        return int(Fraction(value) * 2**FLOAT_SHIFT)
    return int(value)


def fits_int64(values: np.ndarray) -> bool:
    if values.dtype != object:
        return True
    return all(-INT64_SAFE < int(v) < INT64_SAFE for v in values)


def correct_div(s: int, c: int) -> float:
    """Correctly rounded s / c."""
    if -EXACT_FLOAT < s < EXACT_FLOAT:
        return float(s) / float(c)
    return s / c  # Python int true division rounds correctly


def half_up_div(num: int, den: int) -> int:
    q, r = divmod(abs(num), den)
    if 2 * r >= den:
        q += 1
    return q if num >= 0 else -q


def unit(dtype: pa.DataType) -> int:
    """The exact integer that stands for the value 1 of ``dtype`` (10**scale for decimals,
    2**FLOAT_SHIFT for doubles, 1 for integers): value = exact / unit."""
    k = kind_of(dtype)
    if k == "decimal":
        return 10**dtype.scale
    return 1 << FLOAT_SHIFT if k == "float" else 1
