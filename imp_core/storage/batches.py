"""Checking and normalizing Arrow batches against a stored table's schema.

Invariants of what these functions return:
- String columns are ``string``: never ``string_view`` (what Parquet files with an Arrow
  schema hint and the delta-rs change feed produce) nor ``large_string``.
- Fields and schemas carry no metadata (``tpchgen-cli`` writes ``PARQUET:field_id``).
- ``conform`` returns exactly the table's columns, in the table's order and types, or
  raises ``SchemaMismatchError`` naming every offending column; the only conversions it
  makes are lossless: integer widening, ``float32`` -> ``float64`` and other string
  encodings -> ``string``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from imp_core.errors import SchemaMismatchError

ROW_ID = "__rid"  # hidden row id of keyless tables: int64, unique among live rows
OP = "__op"  # merge source column: 'd' delete, 'i' insert
RESERVED = (ROW_ID, OP)

_STRINGS = (pa.string(), pa.large_string(), pa.string_view())


def plain_type(dtype: pa.DataType) -> pa.DataType:
    return pa.string() if dtype in _STRINGS else dtype


def plain_schema(schema: pa.Schema) -> pa.Schema:
    """``schema`` with ``string`` for every string encoding, without metadata."""
    return pa.schema(
        [pa.field(f.name, plain_type(f.type), nullable=f.nullable) for f in schema]
    )


def plain_strings(table: pa.Table) -> pa.Table:
    """``table`` cast to ``plain_schema(table.schema)``."""
    target = plain_schema(table.schema)
    return table if table.schema.equals(target, check_metadata=True) else table.cast(target)


def _int_widens(src: pa.DataType, dst: pa.DataType) -> bool:
    if not (pa.types.is_integer(src) and pa.types.is_integer(dst)):
        return False
    if pa.types.is_signed_integer(dst):
        if pa.types.is_signed_integer(src):
            return src.bit_width <= dst.bit_width
        return src.bit_width < dst.bit_width
    return pa.types.is_unsigned_integer(src) and src.bit_width <= dst.bit_width


def compatible(src: pa.DataType, dst: pa.DataType) -> bool:
    """Whether a ``src`` column converts to ``dst`` without loss (see module docstring)."""
    if src == dst:
        return True
    if dst == pa.string():
        return src in _STRINGS
    if pa.types.is_floating(dst) and pa.types.is_floating(src):
        return src.bit_width <= dst.bit_width
    return _int_widens(src, dst)


def conform(batch: pa.Table, schema: pa.Schema, table: str, what: str) -> pa.Table:
    """``batch`` as a table of ``schema`` (see module docstring); ``what`` names it."""
    if isinstance(batch, pa.RecordBatch):
        batch = pa.Table.from_batches([batch])
    if not isinstance(batch, pa.Table):
        raise SchemaMismatchError(
            f"{what} for table {table}: expected a pyarrow.Table, got {type(batch).__name__}"
        )
    names = batch.schema.names
    problems: list[str] = []
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        problems.append(f"duplicate columns {dupes}")
    missing = [n for n in schema.names if n not in names]
    if missing:
        problems.append(f"missing columns {missing}")
    extra = [n for n in names if n not in schema.names]
    if extra:
        problems.append(f"unknown columns {extra}")
    for field in schema:
        if field.name not in names or field.name in dupes:
            continue
        col = batch.column(field.name)
        if col.type == pa.null() and (batch.num_rows == 0 or field.nullable):
            pass  # an all-null column (e.g. from an empty Python list) fits any type
        elif not compatible(col.type, field.type):
            problems.append(f"column {field.name!r} has type {col.type}, table has {field.type}")
            continue
        if not field.nullable and col.null_count:
            problems.append(f"column {field.name!r} holds {col.null_count} nulls (NOT NULL)")
    if problems:
        raise SchemaMismatchError(
            f"{what} does not match table {table} ({schema_text(schema)}): "
            + "; ".join(problems)
        )
    return batch.select(schema.names).cast(schema)


def schema_text(schema: pa.Schema) -> str:
    return ", ".join(f"{f.name} {f.type}" for f in schema)


def check_domains(
    batch: pa.Table, domains: Mapping[str, tuple[Any, Any]], table: str, what: str
) -> None:
    """Raise SchemaMismatchError if a value of ``batch`` lies outside its declared domain."""
    if batch.num_rows == 0:
        return
    present = set(batch.column_names)
    for col, (low, high) in domains.items():
        if col not in present:
            continue
        lo_hi = pc.min_max(batch.column(col)).as_py()
        least, most = lo_hi["min"], lo_hi["max"]
        if least is None:
            continue
        try:
            bad = (low is not None and least < low) or (high is not None and most > high)
        except TypeError as exc:
            raise SchemaMismatchError(
                f"{what} for table {table}: column {col!r} values cannot be compared with "
                f"its declared domain [{low}, {high}]: {exc}"
            ) from exc
        if bad:
            raise SchemaMismatchError(
                f"{what} for table {table}: column {col!r} ranges over [{least}, {most}], "
                f"outside its declared domain [{low}, {high}]"
            )
