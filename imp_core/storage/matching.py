"""Finding the stored rows a batch refers to: by key, or by whole value with bag semantics.

Invariants:
- Row values compare as Python values, except that a float NaN equals a NaN (so a row
  holding NaN can be deleted); ``None`` equals ``None``.
- ``candidate_filter`` never excludes a stored row equal (on ``columns``) to a batch row:
  it only constrains columns without nulls, floats or strings, by the batch's own
  values; it exists so Parquet min/max statistics skip row groups and files. (Strings
  are left out because files written by a delta-rs MERGE declare them ``string_view``
  and a pyarrow dataset filter then compares ``string`` with ``string_view``, which has
  no kernel.)
- ``assign_row_ids`` gives each batch row a distinct stored row id, the smallest still
  free among equal stored rows, or reports the rows that have none.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Sequence

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds


class _NaN:
    __slots__ = ()

    def __repr__(self) -> str:
        return "nan"


NAN = _NaN()


def _norm(value: object) -> object:
    return NAN if isinstance(value, float) and math.isnan(value) else value


def row_tuples(table: pa.Table, columns: Sequence[str]) -> list[tuple]:
    """Each row of ``table`` as a tuple of its ``columns`` values (NaN normalized)."""
    lists = [[_norm(v) for v in table.column(c).to_pylist()] for c in columns]
    return list(zip(*lists)) if lists else [() for _ in range(table.num_rows)]


def candidate_filter(batch: pa.Table, columns: Sequence[str]) -> ds.Expression | None:
    """A superset filter of the stored rows equal to some ``batch`` row on ``columns``."""
    expr: ds.Expression | None = None
    for name in columns:
        col = batch.column(name)
        if (
            batch.num_rows == 0
            or col.null_count
            or pa.types.is_floating(col.type)
            or pa.types.is_string(col.type)
            or pa.types.is_large_string(col.type)
            or pa.types.is_string_view(col.type)
        ):
            continue
        bounds = pc.min_max(col)
        field = ds.field(name)
        part = (
            (field >= bounds["min"])
            & (field <= bounds["max"])
            & field.isin(pc.unique(col.combine_chunks()))
        )
        expr = part if expr is None else expr & part
    return expr


def read_candidates(
    files: list[str], schema: pa.Schema, batch: pa.Table, match_on: Sequence[str]
) -> pa.Table:
    """Stored rows (all of ``schema``'s columns) that may equal a batch row on ``match_on``."""
    if not files or batch.num_rows == 0:
        return schema.empty_table()
    dataset = ds.dataset(files, schema=schema, format="parquet")
    return dataset.to_table(filter=candidate_filter(batch, match_on))


def assign_row_ids(
    batch_rows: list[tuple], stored_rows: list[tuple], stored_ids: list[int]
) -> tuple[list[int], list[int]]:
    """``(ids, unmatched)``: per batch row a distinct id of an equal stored row.

    ``unmatched`` lists the positions of batch rows left without one (the row is not
    stored, or the batch holds it more often than the table does); their ids are -1.
    """
    free: dict[tuple, list[int]] = defaultdict(list)
    for row, rid in sorted(zip(stored_rows, stored_ids), key=lambda p: p[1], reverse=True):
        free[row].append(rid)  # descending, so pop() yields the smallest
    ids: list[int] = []
    unmatched: list[int] = []
    for pos, row in enumerate(batch_rows):
        pool = free.get(row)
        if pool:
            ids.append(pool.pop())
        else:
            ids.append(-1)
            unmatched.append(pos)
    return ids, unmatched
