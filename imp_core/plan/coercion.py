"""Types and coercions of scalar expressions as Spark has them: the type of a literal,
explicit CASTs (strings parsed as Spark parses them, numbers overflowing as Spark's do),
the common type two operands are coerced to (decimals widened to hold both, capped at
38 digits), and exact decimal arithmetic at Spark's result types.

Invariants: a coercion never loses a value the common type can hold; a decimal compared
with a value of a finer scale compares as if both were exact.
"""

from __future__ import annotations

import datetime as dt
import decimal

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from imp_core.plan import decimal64, division, numeric_casts, string_casts

MAX_PRECISION = division.MAX_PRECISION

CMP = {"=": "equal", "<>": "not_equal", "<": "less", "<=": "less_equal",
        ">": "greater", ">=": "greater_equal"}


def literal_type(value: object) -> pa.DataType:
    """The Arrow type of a Python literal as SQL would type it."""
    if value is None:
        return pa.null()
    if isinstance(value, bool):
        return pa.bool_()
    if isinstance(value, int):
        return pa.int32() if -(2**31) <= value < 2**31 else pa.int64()
    if isinstance(value, float):
        return pa.float64()
    if isinstance(value, decimal.Decimal):
        sign, digits, exp = value.as_tuple()
        scale = max(0, -int(exp))
        precision = max(len(digits), scale, 1)
        return pa.decimal128(precision, scale)
    if isinstance(value, dt.datetime):
        return pa.timestamp("us")
    if isinstance(value, dt.date):
        return pa.date32()
    if isinstance(value, str):
        return pa.string()
    raise TypeError(f"unsupported literal {value!r}")


def is_decimal(t: pa.DataType) -> bool:
    return pa.types.is_decimal(t)


def int_as_decimal(t: pa.DataType) -> pa.DataType:
    digits = {8: 3, 16: 5, 32: 10, 64: 20}[t.bit_width]
    return pa.decimal128(min(digits, MAX_PRECISION), 0)


def literal_decimal(value: object) -> pa.DataType:
    return literal_type(decimal.Decimal(int(value)))


adjust = division.adjust  # Spark's precision-loss rule, one definition


def cast_value(v: pa.Array | pa.Scalar, to: pa.DataType) -> pa.Array | pa.Scalar:
    """An explicit CAST: strings parse as Spark does (NULL for what does not parse),
    numbers overflow as Spark's do with ANSI off (``numeric_casts``); implicit
    coercions of strings into numbers stay refused."""
    return cast_overflowing(v, to)[0]


def cast_overflowing(v: pa.Array | pa.Scalar, to: pa.DataType
                     ) -> tuple[pa.Array | pa.Scalar, np.ndarray | None]:
    """``cast_value`` and the mask of numbers that overflowed (None: none can)."""
    if string_casts.handles(v.type, to):
        return string_casts.cast_strings(v, to), None
    if not numeric_casts.handles(v.type, to):
        return cast(v, to), None
    try:
        exact = pc.cast(v, to)  # Arrow's safe cast: no rounding, no overflow
        return exact, np.zeros(1 if isinstance(exact, pa.Scalar) else len(exact), bool)
    except pa.ArrowInvalid:
        pass
    if isinstance(v, pa.Scalar):
        out, overflow = numeric_casts.cast_numbers(pa.array([v.as_py()], v.type), to)
        return out[0], overflow
    if isinstance(v, pa.ChunkedArray):
        v = v.combine_chunks()
    return numeric_casts.cast_numbers(v, to)


def cast(v: pa.Array | pa.Scalar, to: pa.DataType) -> pa.Array | pa.Scalar:
    if v.type == to:
        return v
    if pa.types.is_null(v.type):
        return pa.scalar(None, to) if isinstance(v, pa.Scalar) else pa.nulls(len(v), to)
    if pa.types.is_decimal(v.type) and pa.types.is_floating(to):
        return cast(division.to_double(v), to)  # correctly rounded, unlike Arrow's cast
    return pc.cast(v, to)


def common_type(types: list[pa.DataType]) -> pa.DataType:
    types = [t for t in types if not pa.types.is_null(t)]
    if not types:
        return pa.null()
    out = types[0]
    for t in types[1:]:
        out = unify(out, t)
    return out


def unify(a: pa.DataType, b: pa.DataType) -> pa.DataType:
    if a == b:
        return a
    if pa.types.is_string(a) or pa.types.is_string_view(a) or pa.types.is_large_string(a):
        return pa.string()
    if pa.types.is_floating(a) or pa.types.is_floating(b):
        return pa.float64()
    if is_decimal(a) or is_decimal(b):
        da = a if is_decimal(a) else int_as_decimal(a)
        db = b if is_decimal(b) else int_as_decimal(b)
        scale = max(da.scale, db.scale)
        digits = max(da.precision - da.scale, db.precision - db.scale)
        return pa.decimal128(min(MAX_PRECISION, digits + scale), scale)
    if pa.types.is_integer(a) and pa.types.is_integer(b):
        return pa.int64()
    return a


FLIPPED = {"=": "=", "<>": "<>", "<": ">", "<=": ">=", ">": "<", ">=": "<="}
# the rounding that keeps ``column op value`` when ``value`` is rounded to the column's
# scale: the column only holds multiples of its last digit
ROUNDING = {">": decimal.ROUND_FLOOR, "<=": decimal.ROUND_FLOOR,
             "<": decimal.ROUND_CEILING, ">=": decimal.ROUND_CEILING}
WIDE = decimal.Context(prec=2 * MAX_PRECISION)
EXACT = decimal.Context(prec=4 * MAX_PRECISION)  # a product of two 38-digit decimals


def compare_at_column_scale(left, right, op: str) -> pa.Array | None:
    """``left op right`` for a decimal column and a decimal value of a finer scale (a
    column against a scalar subquery's average), with the value rounded to the column's
    type instead of every row cast to the finer one; None when that does not apply (the
    value does not round exactly for ``=``/``<>``, or does not fit the column's type)."""
    if isinstance(left, pa.Scalar) and isinstance(right, pa.Array):
        left, right, op = right, left, FLIPPED[op]
    if not (isinstance(left, pa.Array) and isinstance(right, pa.Scalar)
            and is_decimal(left.type) and is_decimal(right.type)
            and right.is_valid and right.type.scale > left.type.scale):
        return None
    value = right.as_py()
    step = decimal.Decimal(1).scaleb(-left.type.scale)
    rounded = value.quantize(step, rounding=ROUNDING.get(op, decimal.ROUND_FLOOR),
                             context=WIDE)
    if op not in ROUNDING and rounded != value:
        return None
    if abs(rounded) >= decimal.Decimal(10) ** (left.type.precision - left.type.scale):
        return None
    return pc.call_function(CMP[op], [left, pa.scalar(rounded, left.type)])


def coerce_pair(left, right, op: str):
    lt, rt = left.type, right.type
    if lt == rt:
        return left, right
    if pa.types.is_null(lt):
        return cast(left, rt), right
    if pa.types.is_null(rt):
        return left, cast(right, lt)
    for side in ("left", "right"):
        this, other = (left, right) if side == "left" else (right, left)
        if pa.types.is_string_view(this.type) or pa.types.is_large_string(this.type):
            this = cast(this, pa.string())
        if side == "left":
            left = this
        else:
            right = this
    lt, rt = left.type, right.type
    if lt == rt:
        return left, right
    if is_decimal(lt) or is_decimal(rt):
        if pa.types.is_floating(lt) or pa.types.is_floating(rt):
            return cast(left, pa.float64()), cast(right, pa.float64())

        def as_dec(v):
            if is_decimal(v.type):
                return v
            if isinstance(v, pa.Scalar) and v.is_valid:
                lit = decimal.Decimal(int(v.as_py()))
                return pa.scalar(lit, literal_decimal(lit))
            return cast(v, int_as_decimal(v.type))

        left, right = as_dec(left), as_dec(right)
        if op in CMP:
            common = unify(left.type, right.type)
            return cast(left, common), cast(right, common)
        return left, right
    # a string next to a date is read as a date the way Spark parses it ('1999-5-01')
    if pa.types.is_date(lt) and pa.types.is_string(rt):
        return left, string_casts.cast_strings(right, lt)
    if pa.types.is_date(rt) and pa.types.is_string(lt):
        return string_casts.cast_strings(left, rt), right
    if op in ("+", "-") and (pa.types.is_date(lt) and pa.types.is_integer(rt)
                             or pa.types.is_integer(lt) and pa.types.is_date(rt) and op == "+"):
        return left, right  # date ± days (Spark's date_add / date_sub), in ``_binary``
    common = unify(lt, rt)
    return cast(left, common), cast(right, common)


def decimal_arith(op: str, left, right):
    p1, s1, p2, s2 = left.type.precision, left.type.scale, right.type.precision, right.type.scale
    if op == "*":
        precision, scale = p1 + p2 + 1, s1 + s2
    else:
        scale = max(s1, s2)
        precision = max(p1 - s1, p2 - s2) + scale + 1
    fn = {"+": "add_checked", "-": "subtract_checked", "*": "multiply_checked"}[op]
    target_p, target_s = adjust(precision, scale)
    fast = decimal64.arith(op, left, right, pa.decimal128(target_p, target_s), scale)
    if fast is not None:
        return fast
    if precision <= MAX_PRECISION:
        return pc.call_function(fn, [left, right])
    wide = pc.call_function(fn, [cast(left, pa.decimal256(p1, s1)),
                                 cast(right, pa.decimal256(p2, s2))])
    if target_s < scale:
        wide = pc.round(wide, ndigits=target_s, round_mode="half_towards_infinity")
    return pc.cast(wide, pa.decimal128(target_p, target_s))
