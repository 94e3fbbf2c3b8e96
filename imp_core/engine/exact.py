"""Exact numeric state for sums and averages, and the functions that turn it into values.

Sums never drift: integers are kept as integers, decimals as unscaled integers at the
input scale, and doubles as integers scaled by 2**FLOAT_SHIFT (every finite double is
an integer multiple of 2**-1074, so the scaled value is exact). ``finalize_*`` map
exact state to output values deterministically, so the incremental operators and the
reference evaluator agree bit for bit.
"""

from __future__ import annotations

import decimal
from fractions import Fraction
from typing import Sequence

import numpy as np
import pyarrow as pa

from imp_core.plan.decimal64 import from_unscaled, unscaled_int64
from imp_core.plan.evaluate import aggregate_type

FLOAT_SHIFT = 1100
INT64_SAFE = 2**62
_EXACT_FLOAT = 2**53


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


def _correct_div(s: int, c: int) -> float:
    """Correctly rounded s / c."""
    if -_EXACT_FLOAT < s < _EXACT_FLOAT:
        return float(s) / float(c)
    return s / c  # Python int true division rounds correctly


def _half_up_div(num: int, den: int) -> int:
    q, r = divmod(abs(num), den)
    if 2 * r >= den:
        q += 1
    return q if num >= 0 else -q


def finalize_sum(sums: Sequence[int], nonnull: Sequence[int], dtype: pa.DataType) -> pa.Array:
    """Output array of SUM over ``dtype`` given exact sums and non-NULL counts."""
    out_type = aggregate_type("sum", dtype)
    k = kind_of(dtype)
    if k == "decimal" and isinstance(sums, np.ndarray) and sums.dtype != object \
            and pa.types.is_decimal128(out_type) and out_type.scale == dtype.scale:
        s = sums.astype(np.int64, copy=False)
        if len(s) == 0 or max(abs(int(s.min())), abs(int(s.max()))) < 10 ** min(
                out_type.precision, 18):
            n = np.asarray(nonnull)
            return from_unscaled(np.where(n > 0, s, 0), n > 0, out_type)
    vals: list[object] = []
    for s, n in zip(sums, nonnull):
        if n == 0:
            vals.append(None)
        elif k == "int":
            vals.append(int(s))
        elif k == "decimal":
            vals.append(decimal.Decimal(int(s)).scaleb(-dtype.scale))
        else:
            vals.append(int(s) / 2**FLOAT_SHIFT)
    return pa.array(vals, type=out_type)


def finalize_avg(sums: Sequence[int], nonnull: Sequence[int], dtype: pa.DataType) -> pa.Array:
    """Output array of AVG: correctly rounded double, or half-up decimal at scale+4."""
    out_type = aggregate_type("avg", dtype)
    k = kind_of(dtype)
    if k == "int" and isinstance(sums, np.ndarray) and sums.dtype != object:
        s = np.asarray(sums)
        n = np.asarray(nonnull)
        if len(s) == 0 or np.abs(s).max() < _EXACT_FLOAT:
            with np.errstate(invalid="ignore", divide="ignore"):
                res = s.astype(np.float64) / n.astype(np.float64)
            return pa.array(res, type=pa.float64(), mask=(n == 0))
    vals: list[object] = []
    for s, n in zip(sums, nonnull):
        s, n = int(s), int(n)
        if n == 0:
            vals.append(None)
        elif k == "int":
            vals.append(_correct_div(s, n))
        elif k == "decimal":
            grow = out_type.scale - dtype.scale
            vals.append(decimal.Decimal(_half_up_div(s * 10**grow, n)).scaleb(-out_type.scale))
        else:
            vals.append(s / (n << FLOAT_SHIFT))
    return pa.array(vals, type=out_type)
