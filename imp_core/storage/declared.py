"""What a table declares beyond its columns: its key and its columns' value domains.

A table's key and domains live in its catalog entry (``TableEntry.key``/``domains``);
the safety rules prove sketches safe from the domains (a sum over a column declared
``>= 0`` only grows). This module reads declarations from where users write them and
shows them:

- ``parse_key`` / ``parse_domain``: the ``imp data load --key COL[,COL]`` and
  ``--domain COL=LO..HI`` flags, checked against the input's Arrow schema;
- ``constraint_domains``: the simple bounds among a Delta table's CHECK constraints
  (``delta.constraints.*`` properties such as ``x >= 0 AND x <= 100``,
  ``x BETWEEN a AND b`` or ``x IS NULL OR x >= 0``);
- ``with_declared`` / ``declared_of``: key and domains carried in an Arrow schema's
  metadata, so a schema sent over the wire (ListTables) tells the client too;
- ``describe_key`` / ``describe_domains``: one-line text for ``imp data ls`` / ``imp ls``.

Invariants: every bound returned has the column's Python type (``int`` for integer
columns, ``float``, ``Decimal``, ``date``, ``datetime``), as ``TableEntry.domains``
requires, and ``low <= high`` when both are given; a malformed declaration raises
``ValueError`` naming the flag text and what is wrong, before anything is written.
A domain read from constraints is implied by them (never narrower), so it is true of
every row the Delta table accepts.
"""

from __future__ import annotations

import datetime as dt
import decimal
import json
from collections.abc import Mapping, Sequence
from typing import Any

import pyarrow as pa

from imp_core.storage.catalog import decode_bound, encode_bound

Bound = Any  # None | int | float | Decimal | date | datetime
Domain = tuple[Bound, Bound]
CONSTRAINT_PREFIX = "delta.constraints."
KEY_METADATA, DOMAINS_METADATA = b"imp.key", b"imp.domains"

__all__ = ["CONSTRAINT_PREFIX", "constraint_domains", "declared_of", "describe_domains",
           "describe_key", "parse_domain", "parse_domains", "parse_key", "with_declared"]


# -- columns and values ------------------------------------------------------------------


def _column(schema: pa.Schema, name: str, what: str) -> str:
    """The schema's spelling of ``name`` (exact, else the one case-insensitive match)."""
    if name in schema.names:
        return name
    same = [n for n in schema.names if n.lower() == name.lower()]
    if len(same) == 1:
        return same[0]
    raise ValueError(f"{what}: no column {name!r} (columns: {', '.join(schema.names)})")


def _supports_domain(dtype: pa.DataType) -> bool:
    return (pa.types.is_integer(dtype) or pa.types.is_floating(dtype)
            or pa.types.is_decimal(dtype) or pa.types.is_date(dtype)
            or pa.types.is_timestamp(dtype))


def _typed(value: Any, dtype: pa.DataType, what: str) -> Bound:
    """``value`` (text or a Python value) as a bound of a column of type ``dtype``."""
    text = value.strip() if isinstance(value, str) else value
    try:
        if pa.types.is_integer(dtype):
            if isinstance(text, float) and not text.is_integer():
                raise ValueError
            return int(text) if not isinstance(text, str) else int(text, 10)
        if pa.types.is_floating(dtype):
            return float(text)
        if pa.types.is_decimal(dtype):
            return decimal.Decimal(str(text))
        if pa.types.is_date(dtype):
            if isinstance(text, dt.datetime):
                return text.date()
            return text if isinstance(text, dt.date) else dt.date.fromisoformat(text)
        if pa.types.is_timestamp(dtype):
            if isinstance(text, dt.datetime):
                return text
            if isinstance(text, dt.date):
                return dt.datetime(text.year, text.month, text.day)
            return dt.datetime.fromisoformat(text)
    except (ValueError, TypeError, decimal.InvalidOperation):
        kind = "a date (YYYY-MM-DD)" if pa.types.is_date(dtype) else \
            "a timestamp (YYYY-MM-DD[ HH:MM:SS])" if pa.types.is_timestamp(dtype) else \
            "an integer" if pa.types.is_integer(dtype) else "a number"
        raise ValueError(f"{what}: {value!r} is not {kind} (the column is {dtype})") from None
    raise ValueError(f"{what}: the column is {dtype}; domains are declared for numbers, "
                     "dates and timestamps")


# -- flags ---------------------------------------------------------------------------------


def parse_key(columns: Sequence[str], schema: pa.Schema) -> tuple[str, ...]:
    """``--key COL[,COL]`` (already split at commas) as the schema's column names."""
    names = [c.strip() for c in columns]
    if not names or not all(names):
        raise ValueError(f"--key {','.join(columns)}: expected COL[,COL...]")
    key = tuple(_column(schema, n, f"--key {','.join(columns)}") for n in names)
    if len(set(key)) != len(key):
        raise ValueError(f"--key {','.join(columns)}: a column is named twice")
    return key


def parse_domain(spec: str, schema: pa.Schema) -> tuple[str, Domain]:
    """``--domain COL=LO..HI`` as (column, (low, high)); an empty side is unbounded.

    >>> parse_domain("x=0..100", pa.schema([("x", pa.int64())]))
    ('x', (0, 100))
    """
    what = f"--domain {spec}"
    name, eq, bounds = spec.partition("=")
    low_text, dots, high_text = bounds.partition("..")
    if not eq or not name.strip() or not dots:
        raise ValueError(f"{what}: expected COL=LO..HI (e.g. price=0..1000 or "
                         "day=1992-01-01..1998-12-31; leave a side empty for no bound)")
    if not low_text.strip() and not high_text.strip():
        raise ValueError(f"{what}: give a low bound, a high bound or both")
    column = _column(schema, name.strip(), what)
    dtype = schema.field(column).type
    low = _typed(low_text, dtype, what) if low_text.strip() else None
    high = _typed(high_text, dtype, what) if high_text.strip() else None
    if isinstance(low, float) and low != low or isinstance(high, float) and high != high:
        raise ValueError(f"{what}: a bound is NaN")
    if low is not None and high is not None and low > high:
        raise ValueError(f"{what}: the low bound {low} is above the high bound {high}")
    return column, (low, high)


def parse_domains(specs: Sequence[str], schema: pa.Schema) -> dict[str, Domain]:
    """Every ``--domain`` flag; a column may be given once."""
    out: dict[str, Domain] = {}
    for spec in specs:
        column, domain = parse_domain(spec, schema)
        if column in out:
            raise ValueError(f"--domain {spec}: the domain of {column!r} is given twice")
        out[column] = domain
    return out


# -- Delta CHECK constraints -----------------------------------------------------------------

# comparison -> (side the constant bounds when the column is on the left, strict)
_COMPARISONS = {"GTE": ("low", False), "GT": ("low", True), "LTE": ("high", False),
                "LT": ("high", True), "EQ": ("both", False)}
_MIRROR = {"low": "high", "high": "low", "both": "both"}


def constraint_domains(configuration: Mapping[str, str], schema: pa.Schema
                       ) -> dict[str, Domain]:
    """The domains the CHECK constraints among a Delta table's ``configuration``
    (``delta.constraints.<name>`` -> SQL) imply through simple bounds: conjuncts
    ``col OP constant`` (OP one of ``>= > <= < =``, either side) and ``col BETWEEN a AND
    b`` on numeric, date or timestamp columns, also under ``col IS NULL OR (...)``.
    Anything else (other ORs, functions, other columns, NOT ...) is ignored: each
    conjunct of a constraint holds on its own, so the simple ones alone still bound
    every row. A strict bound on an integer or date column
    becomes the next value; on other types it is kept as is (a bound that is a little
    wider is still true)."""
    # sqlglot only here: a store that reads no constraints does not load the parser
    import sqlglot
    from sqlglot.errors import SqlglotError

    bounds: dict[str, list[Bound]] = {}
    for prop, sql in sorted(configuration.items()):
        if not prop.startswith(CONSTRAINT_PREFIX):
            continue
        try:
            tree = sqlglot.parse_one(sql, read="spark")
        except SqlglotError:
            continue  # not SQL we read: it bounds nothing we could use
        for column, side, value in _conjunct_bounds(tree, schema):
            low_high = bounds.setdefault(column, [None, None])
            if side in ("low", "both") and (low_high[0] is None or value > low_high[0]):
                low_high[0] = value
            if side in ("high", "both") and (low_high[1] is None or value < low_high[1]):
                low_high[1] = value
    return {c: (lo, hi) for c, (lo, hi) in bounds.items()
            if lo is None or hi is None or lo <= hi}


def _conjunct_bounds(tree: Any, schema: pa.Schema) -> list[tuple[str, str, Bound]]:
    """The simple bounds of every conjunct of ``tree``. A conjunct ``col IS NULL OR
    (...)`` (what IMP writes for a nullable column's domain) bounds ``col`` by the simple
    bounds on ``col`` among the conjuncts of its other side: a domain bounds values, and
    NULL is none."""
    from sqlglot import exp

    out: list[tuple[str, str, Bound]] = []
    for conjunct in tree.flatten() if isinstance(tree, exp.And) else [tree]:
        conjunct = conjunct.unnest() if isinstance(conjunct, exp.Paren) else conjunct
        if isinstance(conjunct, exp.Or):
            for null_side, other in ((conjunct.this, conjunct.expression),
                                     (conjunct.expression, conjunct.this)):
                column = _null_test_of(null_side, schema)
                if column is not None:
                    other = other.unnest() if isinstance(other, exp.Paren) else other
                    out += [b for b in _conjunct_bounds(other, schema) if b[0] == column]
                    break
            continue
        out += _simple_bounds(conjunct, schema)
    return out


def _null_test_of(node: Any, schema: pa.Schema) -> str | None:
    """The column of ``node`` if it is ``col IS NULL``, else None."""
    from sqlglot import exp

    node = node.unnest() if isinstance(node, exp.Paren) else node
    if isinstance(node, exp.Is) and isinstance(node.expression, exp.Null):
        return _column_of(node.this, schema)
    return None


def _simple_bounds(node: Any, schema: pa.Schema) -> list[tuple[str, str, Bound]]:
    """(column, 'low'|'high'|'both', bound) of one conjunct (a sqlglot expression); []
    if it is not simple."""
    from sqlglot import exp

    node = node.unnest() if isinstance(node, exp.Paren) else node
    if isinstance(node, exp.Between):
        column = _column_of(node.this, schema)
        low = _constant(node.args.get("low"), column, schema)
        high = _constant(node.args.get("high"), column, schema)
        if column is None or low is None or high is None:
            return []
        return [(column, "low", low), (column, "high", high)]
    rule = _COMPARISONS.get(type(node).__name__) if isinstance(node, exp.Binary) else None
    if rule is None:
        return []
    side, strict = rule
    column = _column_of(node.this, schema)
    other = node.expression
    if column is None:  # constant OP column: the mirrored comparison
        column, other, side = _column_of(node.expression, schema), node.this, _MIRROR[side]
    value = _constant(other, column, schema)
    if column is None or value is None:
        return []
    if strict:
        value = _next(value, side)
    return [(column, side, value)]


def _column_of(node: Any, schema: pa.Schema) -> str | None:
    from sqlglot import exp

    if not isinstance(node, exp.Column) or node.table:
        return None
    try:
        column = _column(schema, node.name, "constraint")
    except ValueError:
        return None
    return column if _supports_domain(schema.field(column).type) else None


def _constant(node: Any, column: str | None, schema: pa.Schema) -> Bound:
    """The constant ``node`` as a bound of ``column`` (None: not a constant of its type)."""
    from sqlglot import exp

    if node is None or column is None:
        return None
    negative = False
    while isinstance(node, (exp.Neg, exp.Paren, exp.Cast)):
        if isinstance(node, exp.Neg):
            negative = not negative
        node = node.this
    if not isinstance(node, exp.Literal):
        return None
    raw: Any = node.this
    if not node.is_string:
        raw = f"-{raw}" if negative else raw
        dtype = schema.field(column).type
        if pa.types.is_integer(dtype) and not raw.lstrip("-").isdigit():
            return None  # a fractional bound of an integer column: not simple
    elif negative:
        return None
    try:
        return _typed(raw, schema.field(column).type, "constraint")
    except ValueError:
        return None


def _next(value: Bound, side: str) -> Bound:
    """The first value past a strict bound, where the type has one."""
    step = 1 if side == "low" else -1
    if isinstance(value, int):
        return value + step
    if isinstance(value, dt.date) and not isinstance(value, dt.datetime):
        return value + dt.timedelta(days=step)
    return value


# -- schema metadata and text -----------------------------------------------------------------


def with_declared(schema: pa.Schema, key: Sequence[str] | None,
                  domains: Mapping[str, Domain]) -> pa.Schema:
    """``schema`` with the key and domains in its metadata (``declared_of`` reads them)."""
    metadata = dict(schema.metadata or {})
    metadata[KEY_METADATA] = json.dumps(None if key is None else list(key)).encode()
    metadata[DOMAINS_METADATA] = json.dumps(
        {c: [encode_bound(lo), encode_bound(hi)] for c, (lo, hi) in domains.items()}).encode()
    return schema.with_metadata(metadata)


def declared_of(schema: pa.Schema) -> tuple[tuple[str, ...] | None, dict[str, Domain]] | None:
    """(key, domains) from ``schema``'s metadata; None when it carries none (a server
    that does not send them)."""
    metadata = schema.metadata or {}
    if KEY_METADATA not in metadata:
        return None
    key = json.loads(metadata[KEY_METADATA])
    raw = json.loads(metadata.get(DOMAINS_METADATA, b"{}"))
    domains = {c: (decode_bound(lo), decode_bound(hi)) for c, (lo, hi) in raw.items()}
    return (None if key is None else tuple(key)), domains


def describe_key(key: Sequence[str] | None) -> str:
    """``(a, b)``, or ``none (row ids)`` for a keyless table."""
    return f"({', '.join(key)})" if key else "none (row ids)"


def describe_domains(domains: Mapping[str, Domain]) -> str:
    """``col [lo, hi]`` per column, ``-`` for none.

    >>> describe_domains({"x": (0, None), "d": (dt.date(1992, 1, 1), dt.date(1998, 12, 31))})
    'd [1992-01-01, 1998-12-31], x [0, +inf)'
    """
    parts = []
    for column, (low, high) in sorted(domains.items()):
        left = "(-inf" if low is None else f"[{low}"
        right = "+inf)" if high is None else f"{high}]"
        parts.append(f"{column} {left}, {right}")
    return ", ".join(parts) or "-"
