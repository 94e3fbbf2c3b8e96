"""Array helpers of the stateful operators: per-group arrays that grow, exact integer
powers, NULL-aware equality.

Invariant: ``power`` and ``largest_abs`` are exact (Python integers once int64 could
overflow, ``INT_LIMIT``)."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

INT_LIMIT = 2**62  # past this, sums and powers switch to Python integers


def grow(arr: np.ndarray, n: int, fill=0) -> np.ndarray:
    """``arr`` with room for at least ``n`` entries (doubling; new entries ``fill``)."""
    if len(arr) >= n:
        return arr
    size = max(n, 2 * len(arr), 16)
    out = np.full(size, fill, dtype=arr.dtype) if arr.dtype != object else \
        np.array([fill] * size, dtype=object)
    out[: len(arr)] = arr
    return out


def largest_abs(a: np.ndarray) -> int:
    """max |x| over a non-empty int64 array, exactly."""
    return max(abs(int(a.min())), abs(int(a.max())))


def power(vals: np.ndarray, k: int) -> np.ndarray:
    """vals**k exactly: Python integers once int64 could overflow."""
    if k == 1:
        return vals
    if vals.dtype != object and len(vals) and float(largest_abs(vals)) ** k < INT_LIMIT:
        return vals**k
    return vals.astype(object) ** k


def equal_or_both_null(a: pa.Array, b: pa.Array) -> np.ndarray:
    """Per position, whether ``a`` and ``b`` are equal or both NULL."""
    t = a.type
    if pa.types.is_floating(t) or pa.types.is_integer(t):
        if a.null_count == 0 and b.null_count == 0:
            return a.to_numpy(zero_copy_only=False) == b.to_numpy(zero_copy_only=False)
        xn = a.is_null().to_numpy(zero_copy_only=False)
        yn = b.is_null().to_numpy(zero_copy_only=False)
        # NULLs filled in place: numpy would turn an integer array with NULLs into
        # doubles, which cannot tell int64 values apart beyond 2**53
        x = a.fill_null(0).to_numpy(zero_copy_only=False)
        y = b.fill_null(0).to_numpy(zero_copy_only=False)
        with np.errstate(invalid="ignore"):
            return ((x == y) & ~xn & ~yn) | (xn & yn)
    eq = pc.fill_null(pc.equal(a, b), False).to_numpy(zero_copy_only=False)
    both = a.is_null().to_numpy(zero_copy_only=False) & b.is_null().to_numpy(zero_copy_only=False)
    return eq | both
