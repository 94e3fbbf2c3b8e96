"""Decimal ``+ - *`` on 64-bit unscaled integers when the values allow it.

Arrow's decimal128 kernels (and the decimal256 detour a wide product takes) run at a
small fraction of integer speed; TPC-H's money columns are DECIMAL(15,2) whose values
need far fewer than 63 bits, so a product such as ``price * (1 - discount) * (1 + tax)``
can be computed exactly on int64.

Invariant: ``arith`` returns either ``None`` (the caller takes Arrow's exact path) or an
array equal, value for value and type for type, to what that path yields: the operands'
unscaled values are read as int64 only when every one fits, and the result is built only
when the bound of its magnitude, computed from the operands' maxima in Python integers,
stays below both 2**63 and 10**precision of the result type.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

INT64_LIMIT = 1 << 63


def _unscaled(v, scale: int) -> tuple[np.ndarray | int, np.ndarray | None] | None:
    """(unscaled values at the value's own scale, validity or None); None if any value
    does not fit int64 or ``v`` is a NULL scalar."""
    if isinstance(v, pa.Scalar):
        if not v.is_valid:
            return None
        x = int(v.as_py().scaleb(scale))
        return (x, None) if -INT64_LIMIT < x < INT64_LIMIT else None
    if not isinstance(v, pa.Array):
        return None
    return unscaled_int64(v)


def unscaled_int64(v: pa.Array) -> tuple[np.ndarray, np.ndarray | None] | None:
    """(the unscaled value of each row of a decimal128 array as int64, NULL rows 0;
    validity or None when there are no NULLs); None if a value does not fit int64."""
    if not pa.types.is_decimal128(v.type):
        return None
    n = len(v)
    words = np.frombuffer(v.buffers()[1], dtype=np.int64, count=2 * (v.offset + n))
    words = words.reshape(-1, 2)[v.offset:]
    low, high = words[:, 0], words[:, 1]
    valid = None
    if v.null_count:
        valid = v.is_valid().to_numpy(zero_copy_only=False)
        low = np.where(valid, low, 0)
        high = np.where(valid, high, 0)
    if not np.array_equal(high, low >> 63):
        return None
    return low, valid


def _max_abs(x: np.ndarray | int) -> int:
    if isinstance(x, int):
        return abs(x)
    if len(x) == 0:
        return 0
    return max(abs(int(x.min())), abs(int(x.max())))


def _round_half_up(x: np.ndarray, digits: int) -> np.ndarray:
    """``x / 10**digits`` rounded with ties away from zero (Spark's HALF_UP, which is
    Arrow's HALF_TOWARDS_INFINITY; Arrow's HALF_UP goes toward +infinity).

    >>> _round_half_up(np.array([25, -25, 24, -26]), 1).tolist()
    [3, -3, 2, -3]
    """
    unit = 10 ** digits
    return np.sign(x) * ((np.abs(x) + unit // 2) // unit)


def arith(op: str, left, right, out_type: pa.Decimal128Type, scale: int) -> pa.Array | None:
    """``left op right`` (decimals, at least one an array) as ``out_type``; ``scale`` is
    the exact result's scale before any narrowing to ``out_type.scale``."""
    if isinstance(left, pa.Scalar) and isinstance(right, pa.Scalar):
        return None
    s1, s2 = left.type.scale, right.type.scale
    a, b = _unscaled(left, s1), _unscaled(right, s2)
    if a is None or b is None:
        return None
    (x, vx), (y, vy) = a, b
    if op == "*":
        fa, fb = 1, 1
        bound = _max_abs(x) * _max_abs(y)
    else:
        fa, fb = 10 ** (scale - s1), 10 ** (scale - s2)
        bound = _max_abs(x) * fa + _max_abs(y) * fb
    # after narrowing by `shrink` digits the result must still fit out_type's precision
    shrink = 10 ** (scale - out_type.scale)
    if bound >= INT64_LIMIT - shrink or bound >= (10 ** out_type.precision - 1) * shrink:
        return None
    if op == "*":
        z = np.multiply(x, y, dtype=np.int64)
    elif op == "+":
        z = np.add(np.multiply(x, fa, dtype=np.int64), np.multiply(y, fb, dtype=np.int64))
    else:
        z = np.subtract(np.multiply(x, fa, dtype=np.int64), np.multiply(y, fb, dtype=np.int64))
    if out_type.scale < scale:
        z = _round_half_up(z, scale - out_type.scale)
    valid = vx if vy is None else vy if vx is None else vx & vy
    return from_unscaled(z, valid, out_type)


def from_unscaled(z: np.ndarray, valid: np.ndarray | None,
                  out_type: pa.Decimal128Type) -> pa.Array:
    """The decimal128 array of unscaled int64 values ``z`` (NULL where ``valid`` is
    False); the caller has checked that every value fits ``out_type``'s precision."""
    n = len(z)
    words = np.empty((n, 2), dtype=np.int64)
    words[:, 0] = z
    words[:, 1] = z >> 63
    validity = None
    null_count = 0
    if valid is not None:
        null_count = int(n - valid.sum())
        validity = pa.py_buffer(np.packbits(valid, bitorder="little"))
    return pa.Array.from_buffers(out_type, n, [validity, pa.py_buffer(words)],
                                 null_count=null_count)


_WORD = (1 << 64) - 1


def unscaled_ints(v: pa.Array) -> list[int | None]:
    """The unscaled value of each row of a decimal128 array as a Python int (None for
    NULL), read from its two 64-bit words: no ``Decimal`` objects are made."""
    found = unscaled_int64(v)
    if found is not None:
        low, valid = found
        values = low.tolist()
    else:
        words = np.frombuffer(v.buffers()[1], dtype=np.int64, count=2 * (v.offset + len(v)))
        words = words.reshape(-1, 2)[v.offset:]
        # two's complement over 128 bits: the high word signed, the low one unsigned
        values = [(h << 64) | lo for h, lo in zip(words[:, 1].tolist(),
                                                  words[:, 0].view(np.uint64).tolist())]
        valid = v.is_valid().to_numpy(zero_copy_only=False) if v.null_count else None
    if valid is None:
        return values
    return [x if ok else None for x, ok in zip(values, valid.tolist())]


def from_unscaled_ints(values: list[int | None], out_type: pa.Decimal128Type) -> pa.Array:
    """The decimal128 array of unscaled Python ints (None: NULL); the caller has checked
    that every value fits ``out_type``'s precision (so 128 bits)."""
    n = len(values)
    valid = np.fromiter((x is not None for x in values), dtype=bool, count=n)
    ints = [0 if x is None else x for x in values]
    words = np.empty((n, 2), dtype=np.int64)
    words[:, 0] = np.fromiter((x & _WORD for x in ints), dtype=np.uint64, count=n
                              ).view(np.int64)
    words[:, 1] = np.fromiter((x >> 64 for x in ints), dtype=np.int64, count=n)
    validity, null_count = None, int(n - valid.sum())
    if null_count:
        validity = pa.py_buffer(np.packbits(valid, bitorder="little"))
    return pa.Array.from_buffers(out_type, n, [validity, pa.py_buffer(words)],
                                 null_count=null_count)
