"""Division, remainder and decimal-to-double conversion as Spark computes them.

Spark's semantics with ANSI mode off (the engine's, the reference evaluator's and, through
``try_divide`` / ``try_mod``, the compiled Spark SQL's), on operands already brought to
a common kind (``imp_core.plan.evaluate``'s coercion: an integer next to a decimal is a
decimal of its digits, anything next to a double is a double):

- ``/``: integers and doubles divide as doubles; two decimals divide exactly into
  DECIMAL(p, s) with s = max(6, s1 + p2 + 1), p = p1 - s1 + s2 + s, capped at 38 digits
  by Spark's precision-loss rule, rounded half up; a quotient beyond the type is NULL;
- ``%``: the truncated remainder (its sign is the dividend's, as Java's and C's ``%``):
  integers stay integers, doubles by IEEE ``fmod`` (exact), decimals exactly into
  DECIMAL(min(p1 - s1, p2 - s2) + max(s1, s2), max(s1, s2));
- ``pmod(a, n)``: ``a % n``, plus ``n`` (then ``% n`` again) when negative;
- ``div``: integral division truncated toward zero, a BIGINT;
- a zero divisor gives NULL for all of them;
- a decimal becomes a double by one correctly rounded division (unscaled / 10^scale),
  never by Arrow's cast, which can be one unit in the last place off
  (24710.35 -> 24710.350000000002).

>>> import decimal as d
>>> a = pa.array([d.Decimal("24710.35")], pa.decimal128(15, 2))
>>> to_double(a).to_pylist()
[24710.35]
>>> q = divide(a, pa.array([d.Decimal("17.00")], pa.decimal128(15, 2)))
>>> q.type, q.to_pylist()
(Decimal128Type(decimal128(33, 18)), [Decimal('1453.550000000000000000')])
>>> remainder(pa.array([-7.5]), pa.array([2.0])).to_pylist()
[-1.5]
>>> pmod(pa.array([-7, 7]), pa.array([3, -3])).to_pylist()
[2, 1]
>>> pmod(pa.array([d.Decimal("-7.50")], pa.decimal128(5, 2)),
...      pa.array([d.Decimal("2.00")], pa.decimal128(5, 2))).to_pylist()
[Decimal('0.50')]
"""

from __future__ import annotations

import decimal

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from imp_core.plan import decimal64

MAX_PRECISION = 38
MIN_ADJUSTED_SCALE = 6
_EXACT_INT = 2**53  # integers a double holds exactly
_EXACT_POW10 = 22  # 10**22 is the largest power of ten a double holds exactly
_EXACT = decimal.Context(prec=200)  # digits enough for any decimal128 operation exactly


def adjust(precision: int, scale: int) -> tuple[int, int]:
    """Spark's precision-loss rule: cap precision at 38, shrinking the scale but keeping
    at least 6 digits of it (fewer only when it had fewer)."""
    if precision <= MAX_PRECISION:
        return precision, scale
    int_digits = precision - scale
    min_scale = min(scale, MIN_ADJUSTED_SCALE)
    return MAX_PRECISION, max(MAX_PRECISION - int_digits, min_scale)


def divide_type(left: pa.Decimal128Type, right: pa.Decimal128Type) -> pa.Decimal128Type:
    p1, s1, p2, s2 = left.precision, left.scale, right.precision, right.scale
    scale = max(MIN_ADJUSTED_SCALE, s1 + p2 + 1)
    p, s = adjust(p1 - s1 + s2 + scale, scale)
    return pa.decimal128(p, s)


def remainder_type(left: pa.Decimal128Type, right: pa.Decimal128Type) -> pa.Decimal128Type:
    p1, s1, p2, s2 = left.precision, left.scale, right.precision, right.scale
    scale = max(s1, s2)
    p, s = adjust(min(p1 - s1, p2 - s2) + scale, scale)
    return pa.decimal128(p, s)


# -- values ---------------------------------------------------------------------------------
def _values(v: pa.Array | pa.Scalar, n: int) -> list:
    if isinstance(v, pa.Scalar):
        return [v.as_py()] * n
    return v.to_pylist()


def _length(*vs: pa.Array | pa.Scalar) -> int | None:
    for v in vs:
        if not isinstance(v, pa.Scalar):
            return len(v)
    return None


def _finish(out: list, dtype: pa.DataType, scalar: bool) -> pa.Array | pa.Scalar:
    arr = pa.array(out, type=dtype)
    return arr[0] if scalar else arr


def _per_pair(left, right, fn, out_type: pa.DataType) -> pa.Array | pa.Scalar:
    """``fn(a, b)`` of each pair of values, NULL where either is NULL or ``b`` is zero."""
    n = _length(left, right)
    out = [None if a is None or b is None or b == 0 else fn(a, b)
           for a, b in zip(_values(left, n or 1), _values(right, n or 1))]
    return _finish(out, out_type, n is None)


def _unscaled_values(v: pa.Array | pa.ChunkedArray | pa.Scalar, n: int) -> list[int | None]:
    """A decimal operand's unscaled values, n of them (a scalar repeated)."""
    if isinstance(v, pa.Scalar):
        return [None if not v.is_valid else _unscaled(v.as_py(), v.type.scale)] * n
    if isinstance(v, pa.ChunkedArray):
        return [x for chunk in v.chunks for x in decimal64.unscaled_ints(chunk)]
    return decimal64.unscaled_ints(v)


def _unscaled(value: decimal.Decimal, scale: int) -> int:
    # exactly: the default context would round a 38-digit value to 28 digits
    return int(value.scaleb(scale, _EXACT))


def to_double(v: pa.Array | pa.Scalar) -> pa.Array | pa.Scalar:
    """A decimal array (or scalar) as correctly rounded doubles; other types by a cast."""
    if not pa.types.is_decimal(v.type):
        # integers beyond 2^53 round to the nearest double, as Java's (double) does
        return pc.cast(v, pa.float64(), safe=not pa.types.is_integer(v.type))
    scale = v.type.scale
    if isinstance(v, pa.Scalar):
        x = v.as_py()
        return pa.scalar(None if x is None else _decimal_to_float(x, scale), pa.float64())
    found = decimal64.unscaled_int64(v) if scale <= _EXACT_POW10 else None
    if found is not None:
        # unscaled values below 2**53 and 10**scale are exact doubles, so one IEEE division
        # is correctly rounded; larger ones go through Python's exact int / int
        unscaled = found[0]
        out = unscaled.astype(np.float64) / (10.0 ** scale)
        big = np.abs(unscaled) >= _EXACT_INT
        if big.any():
            for i in np.flatnonzero(big):
                out[i] = int(unscaled[i]) / 10**scale
        return pa.array(out, pa.float64(), mask=np.asarray(v.is_null()))
    return pa.array([None if x is None else _decimal_to_float(x, scale)
                     for x in v.to_pylist()], pa.float64())


def _decimal_to_float(x: decimal.Decimal, scale: int) -> float:
    return _unscaled(x, scale) / 10**scale  # int / int: correctly rounded


def divide(left: pa.Array | pa.Scalar, right: pa.Array | pa.Scalar) -> pa.Array | pa.Scalar:
    """``left / right`` (see the module docstring); operands of one kind."""
    if pa.types.is_decimal(left.type) and pa.types.is_decimal(right.type):
        return _decimal_divide(left, right)
    lf, rf = to_double(left), to_double(right)
    safe = pc.if_else(pc.equal(rf, 0.0), pa.scalar(None, pa.float64()), rf)
    return pc.divide(lf, safe)


def _decimal_divide(left, right) -> pa.Array | pa.Scalar:
    out_type = divide_type(left.type, right.type)
    s1, s2, s = left.type.scale, right.type.scale, out_type.scale
    limit = 10**out_type.precision
    n = _length(left, right)
    # a/10^s1 / (b/10^s2) at scale s is a·10^(s2 + s) / (b·10^s1) on the unscaled ints,
    # read from the arrays' words (a Decimal per value costs ~10 µs a row: q57 divides
    # each changed row by its average, q2 seven times a row)
    num, den = 10 ** (s2 + s), 10**s1
    out: list[int | None] = []
    for a, b in zip(_unscaled_values(left, n or 1), _unscaled_values(right, n or 1)):
        if a is None or not b:
            out.append(None)
            continue
        # rounded half away from zero (Spark's HALF_UP), exactly; inline, since a call
        # per row costs a third of the loop
        x, y = a * num, b * den
        q, r = divmod(-x if x < 0 else x, -y if y < 0 else y)
        if 2 * r >= (-y if y < 0 else y):
            q += 1
        if q >= limit:
            out.append(None)
        else:
            out.append(q if (x < 0) == (y < 0) else -q)
    quotients = decimal64.from_unscaled_ints(out, out_type)
    return quotients if n is not None else quotients[0]


def remainder(left: pa.Array | pa.Scalar, right: pa.Array | pa.Scalar
              ) -> pa.Array | pa.Scalar:
    """``left % right`` (see the module docstring); operands of one kind."""
    n = _length(left, right)
    lt = left.type
    if pa.types.is_decimal(lt) and pa.types.is_decimal(right.type):
        out_type = remainder_type(lt, right.type)
        step = decimal.Decimal(1).scaleb(-out_type.scale)
        # Python's Decimal % truncates (the dividend's sign), exactly
        return _per_pair(left, right,
                         lambda a, b: _EXACT.remainder(a, b).quantize(step, context=_EXACT),
                         out_type)
    if pa.types.is_integer(lt) and pa.types.is_integer(right.type):
        return _per_pair(left, right, _trunc_rem, lt)
    m = n or 1
    a, a_ok = _doubles(to_double(left), m)
    b, b_ok = _doubles(to_double(right), m)
    valid = a_ok & b_ok & (b != 0)
    res = np.fmod(a, np.where(valid, b, 1.0))  # IEEE fmod: exact, the dividend's sign
    out = pa.array(res, pa.float64(), mask=~valid)
    return out[0] if n is None else out


def _doubles(v: pa.Array | pa.Scalar, n: int) -> tuple[np.ndarray, np.ndarray]:
    """``v`` (doubles, or one double for every row) as n values and their validity."""
    if isinstance(v, pa.Scalar):
        x = v.as_py()
        return np.full(n, 0.0 if x is None else x), np.full(n, x is not None)
    return (pc.fill_null(v, 0.0).to_numpy(zero_copy_only=False),
            v.is_valid().to_numpy(zero_copy_only=False))


def _trunc_rem(a: int, b: int) -> int:
    q = abs(a) // abs(b)
    return a - b * (q if (a < 0) == (b < 0) else -q)


def pmod(left: pa.Array | pa.Scalar, right: pa.Array | pa.Scalar) -> pa.Array | pa.Scalar:
    """Spark's ``pmod(a, n)``: ``r = a % n``; ``(r + n) % n`` where ``r < 0``."""
    r = remainder(left, right)
    shifted = remainder(_plus(r, right), right)
    zero = decimal.Decimal(0) if pa.types.is_decimal(r.type) else 0
    negative = pc.less(r, pa.scalar(zero, r.type))
    if isinstance(r, pa.Scalar):
        return shifted if negative.as_py() else r
    return pc.if_else(negative, pc.cast(shifted, r.type), r)


def _plus(r, n):
    """``r + n`` exactly (``r`` a remainder of ``n``, so the sum never overflows)."""
    if pa.types.is_decimal(r.type):
        return _per_pair(r, n, lambda a, b: a + b, pa.decimal128(
            min(MAX_PRECISION, max(r.type.precision, n.type.precision) + 1),
            max(r.type.scale, n.type.scale)))
    return pc.add(r, n)


def integral_divide(left: pa.Array | pa.Scalar, right: pa.Array | pa.Scalar
                    ) -> pa.Array | pa.Scalar:
    """Spark's ``a div b``: the quotient truncated toward zero, a BIGINT; NULL for 0."""
    def quotient(a, b) -> int:
        q = int(abs(decimal.Decimal(a)) // abs(decimal.Decimal(b)))
        return q if (a < 0) == (b < 0) else -q

    return _per_pair(left, right, quotient, pa.int64())
