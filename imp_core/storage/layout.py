"""Table layouts that make sketches skip: rows in range order of one column, or in
Z-order of several, cut into row groups small enough for their statistics to skip.

A sketch-filtered scan reads the pages and row groups whose bounds of the sketched
column meet the sketch's ranges (``imp_core.storage.row_groups``); rows in arrival
order spread every range over every row group, rows in order of the column keep each
range in a few. ``ordered`` gives the order; ``DeltaStore.layout`` rewrites a table in
it as one commit that changes no data (its change feed is empty, so no sketch moves and
no query has anything to maintain).

Invariants: ``ordered`` returns a permutation of its input's rows (same multiset);
Z-order on one column is range order on it; NULLs sort first.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from imp_core.errors import UnknownColumnError

ORDERS = ("range", "z-order")
BITS = 63  # bits of a Z-order code, shared out among the columns
MIN_ROW_GROUP_ROWS = 8192
ROW_GROUPS_PER_TABLE = 256  # a table cut into about this many row groups


def order_kind(columns: Sequence[str]) -> str:
    return "range" if len(columns) == 1 else "z-order"


def check_columns(schema: pa.Schema, columns: Sequence[str], table: str) -> tuple[str, ...]:
    """``columns`` lower-cased, each once and a column of ``schema`` with an order;
    raises ``UnknownColumnError`` / ``ValueError`` otherwise."""
    out = tuple(dict.fromkeys(c.strip().lower() for c in columns if c.strip()))
    if not out:
        raise ValueError(f"a layout of {table} needs at least one column")
    for c in out:
        if c not in schema.names:
            raise UnknownColumnError(f"{table} has no column {c!r}; its columns: "
                                     f"{', '.join(n for n in schema.names if n != '__rid')}")
        t = schema.field(c).type
        if pa.types.is_nested(t) or pa.types.is_binary(t) or pa.types.is_boolean(t):
            raise ValueError(f"{table}.{c} of type {t} has no order to lay rows out by")
    return out


def _ranks(values: pa.ChunkedArray | pa.Array) -> np.ndarray:
    """Dense ranks from 0 in SQL order, NULLs first."""
    ranks = pc.rank(values, sort_keys=[("", "ascending", "at_start")], tiebreaker="dense")
    return ranks.to_numpy().astype(np.uint64) - np.uint64(1)


def zorder_indices(data: pa.Table, columns: Sequence[str]) -> np.ndarray:
    """The row order of ``data`` by the Z-order (Morton) code of the dense ranks of
    ``columns``, each scaled to the same ``BITS // n`` bits (so a column of few distinct
    values weighs as much as one of many): bit b of column j lands at bit b * n + j."""
    n = len(columns)
    bits = max(1, BITS // n)
    code = np.zeros(data.num_rows, dtype=np.uint64)
    for j, name in enumerate(columns):
        ranks = _ranks(data.column(name))
        top = int(ranks.max()) if len(ranks) else 0
        if top:  # integer scaling: a float's rounding could carry past the top bit
            ranks = ranks * np.uint64((2 ** bits - 1) // top)
        for b in range(bits):
            bit = (ranks >> np.uint64(b)) & np.uint64(1)
            code |= bit << np.uint64(b * n + j)
    return np.argsort(code, kind="stable")


def ordered(data: pa.Table, columns: Sequence[str]) -> pa.Table:
    """``data`` in range order of one column, or Z-order of several."""
    if data.num_rows < 2:
        return data
    if len(columns) == 1:
        idx = pc.sort_indices(data, sort_keys=[(columns[0], "ascending", "at_start")])
        return data.take(idx)
    return data.take(pa.array(zorder_indices(data, columns), type=pa.int64()))


def row_group_rows(rows: int, most: int) -> int:
    """Rows per row group for a table of ``rows`` laid out for skipping: about
    ``ROW_GROUPS_PER_TABLE`` groups, at least ``MIN_ROW_GROUP_ROWS`` rows (their
    metadata stays small), at most ``most``."""
    return int(min(most, max(MIN_ROW_GROUP_ROWS, -(-rows // ROW_GROUPS_PER_TABLE))))


@dataclass(frozen=True)
class LayoutResult:
    """A rewrite: the table, the version it wrote (the one before when nothing was
    written), the columns and order, rows and row groups of the new files, seconds."""

    table: str
    version: int
    columns: tuple[str, ...]
    order: str
    rows: int
    row_groups: int
    row_group_rows: int
    seconds: float
