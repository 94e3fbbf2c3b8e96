"""CAST of strings to numbers, booleans and dates as Spark does it with ANSI mode off.

A value is trimmed of surrounding whitespace first; one that does not parse, or does not
fit the target type, becomes NULL (never an error):

- integers: an optional sign and digits, optionally followed by a fraction that is
  dropped (``'7.9'`` is 7, ``'-7.9'`` is -7); beyond the type's range: NULL;
- doubles: what Java's ``Double.parseDouble`` reads (Spark calls it): a decimal or
  exponent number with an optional type suffix (``'1.5d'``, ``'2e3F'``), a hexadecimal
  number with a binary exponent (``'0x1.8p1'`` is 3.0), and ``NaN``, ``Infinity`` /
  ``inf`` (any case, signed);
- decimals: any number text, rounded half up to the type's scale; more integer digits
  than the type holds: NULL;
- booleans: ``t``, ``true``, ``y``, ``yes``, ``1`` and ``f``, ``false``, ``n``, ``no``,
  ``0`` (any case);
- dates: ``yyyy``, ``yyyy-[m]m`` or ``yyyy-[m]m-[d]d``, optionally followed by a space or
  ``T`` and a time, which is ignored; a day the month does not have: NULL.

>>> cast_strings(pa.array([" 12 ", "7.9", "x", None, "99999999999"]), pa.int32()).to_pylist()
[12, 7, None, None, None]
>>> cast_strings(pa.array(["2020-1-5", "2020-02-30", "2021", "2020-03-04T10:00"]),
...              pa.date32()).to_pylist()
[datetime.date(2020, 1, 5), None, datetime.date(2021, 1, 1), datetime.date(2020, 3, 4)]
"""

from __future__ import annotations

import datetime as dt
import decimal
import math
import re

import numpy as np
import pyarrow as pa

_INT = re.compile(r"[+-]?\d+(\.\d*)?")
_NUMBER = re.compile(r"[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?")
_JAVA_DOUBLE = re.compile(r"([+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?)[dDfF]?")
_HEX_DOUBLE = re.compile(r"[+-]?0[xX]([0-9a-fA-F]+\.?[0-9a-fA-F]*|\.[0-9a-fA-F]+)"
                         r"[pP][+-]?\d+[dDfF]?")
_DATE = re.compile(r"(\d{4})(?:-(\d{1,2})(?:-(\d{1,2}))?)?(?:[ T].*)?")
_TRUE = {"t", "true", "y", "yes", "1"}
_FALSE = {"f", "false", "n", "no", "0"}
_SPECIAL = {"nan": math.nan, "infinity": math.inf, "inf": math.inf}


def is_string(t: pa.DataType) -> bool:
    return pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_string_view(t)


def handles(source: pa.DataType, target: pa.DataType) -> bool:
    """Whether a cast from ``source`` to ``target`` is one of this module's."""
    return is_string(source) and (
        pa.types.is_integer(target) or pa.types.is_floating(target)
        or pa.types.is_decimal(target) or pa.types.is_boolean(target)
        or pa.types.is_date32(target))


def _integer(text: str, t: pa.DataType) -> int | None:
    if not _INT.fullmatch(text):
        return None
    value = int(text.split(".")[0])
    bits = t.bit_width
    lo, hi = (0, 2**bits - 1) if pa.types.is_unsigned_integer(t) else \
        (-(2 ** (bits - 1)), 2 ** (bits - 1) - 1)
    return value if lo <= value <= hi else None


def _double(text: str) -> float | None:
    low = text.lower()
    sign = -1.0 if low.startswith("-") else 1.0
    special = _SPECIAL.get(low.lstrip("+-"))
    if special is not None:
        return math.nan if math.isnan(special) else sign * special
    m = _JAVA_DOUBLE.fullmatch(text)
    if m is not None:
        return float(m.group(1))  # the regex admits only what float() reads alike
    if _HEX_DOUBLE.fullmatch(text):
        return float.fromhex(text.rstrip("dDfF"))
    return None


def _decimal(text: str, t: pa.Decimal128Type) -> decimal.Decimal | None:
    if not _NUMBER.fullmatch(text):  # Java's BigDecimal: no underscores, no NaN
        return None
    try:
        value = decimal.Decimal(text)
    except decimal.InvalidOperation:
        return None
    if not value.is_finite():
        return None
    step = decimal.Decimal(1).scaleb(-t.scale)
    rounded = value.quantize(step, rounding=decimal.ROUND_HALF_UP,
                             context=decimal.Context(prec=80))
    return rounded if abs(rounded) < decimal.Decimal(10) ** (t.precision - t.scale) else None


def _date(text: str) -> dt.date | None:
    m = _DATE.fullmatch(text)
    if m is None:
        return None
    year, month, day = int(m.group(1)), int(m.group(2) or 1), int(m.group(3) or 1)
    try:
        return dt.date(year, month, day)
    except ValueError:
        return None


def _boolean(text: str) -> bool | None:
    low = text.lower()
    return True if low in _TRUE else False if low in _FALSE else None


def _parse(text: str, to: pa.DataType):
    text = text.strip()
    if pa.types.is_integer(to):
        return _integer(text, to)
    if pa.types.is_floating(to):
        return _double(text)
    if pa.types.is_decimal(to):
        return _decimal(text, to)
    if pa.types.is_boolean(to):
        return _boolean(text)
    return _date(text)


def ansi_rejects(v: pa.Array | pa.Scalar, to: pa.DataType, n: int) -> np.ndarray:
    """The strings ANSI mode refuses although the cast above reads them: a fraction in
    an integer (``'7.9'`` as INT is 7 with ANSI off, CAST_INVALID_INPUT with it on).

    >>> ansi_rejects(pa.array(["7.9", " 7 ", None]), pa.int32(), 3).tolist()
    [True, False, False]
    """
    if not pa.types.is_integer(to):
        return np.zeros(n, dtype=bool)
    texts = [v.as_py()] * n if isinstance(v, pa.Scalar) else v.to_pylist()
    return np.array([t is not None and "." in t.strip() and _INT.fullmatch(t.strip())
                     is not None for t in texts], dtype=bool)


def cast_strings(v: pa.Array | pa.Scalar, to: pa.DataType) -> pa.Array | pa.Scalar:
    """``v`` (strings) cast to ``to`` (see the module docstring)."""
    if isinstance(v, pa.Scalar):
        text = v.as_py()
        return pa.scalar(None if text is None else _parse(text, to), to)
    return pa.array([None if s is None else _parse(s, to) for s in v.to_pylist()], to)
