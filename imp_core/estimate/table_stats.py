"""What registration knows of a table's contents: its row count and, per column, the
number of distinct values and the smallest and largest (each None when unknown), from
Delta or Parquet statistics, declared domains, or a column at hand (``column_stats``).
``imp_core.estimate.memory`` sizes plans with them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc


@dataclass(frozen=True)
class ColumnStats:
    """What is known of one column: distinct values, smallest and largest (None:
    unknown). ``low``/``high`` are Python values of the column's type."""

    distinct: int | None = None
    low: Any = None
    high: Any = None


@dataclass(frozen=True)
class TableStats:
    """A table's row count and what is known of its columns (by source column name)."""

    rows: int
    columns: Mapping[str, ColumnStats] = field(default_factory=dict)

    def with_domains(self, domains: Mapping[str, tuple[Any, Any]]) -> TableStats:
        """These statistics, with declared value domains filling unknown bounds."""
        cols = dict(self.columns)
        for name, (low, high) in domains.items():
            cur = cols.get(name, ColumnStats())
            cols[name] = ColumnStats(cur.distinct,
                                     cur.low if cur.low is not None else low,
                                     cur.high if cur.high is not None else high)
        return TableStats(self.rows, cols)


# -- statistics of a column at hand ----------------------------------------------------
MAX_DISTINCT_RANGE = 1 << 28  # the widest integer range whose distinct values are counted


def column_stats(values: pa.Array | pa.ChunkedArray) -> ColumnStats:
    """A column's min/max and, for integer-like values whose range is narrow enough
    (at most ``MAX_DISTINCT_RANGE`` wide and 64 times the values, or 65536), its exact
    distinct count (one pass marking a bitmap of the range: linear, no sort, no
    hashing); None for what is not computed."""
    chunks = values.chunks if isinstance(values, pa.ChunkedArray) else [values]
    dtype = values.type
    try:
        bounds = pc.min_max(values)
        low, high = bounds["min"].as_py(), bounds["max"].as_py()
    except (pa.ArrowNotImplementedError, pa.ArrowInvalid, pa.ArrowTypeError):
        return ColumnStats()
    if low is None or not int_like(dtype) or pa.types.is_boolean(dtype):
        return ColumnStats(None, low, high)
    ints = [pc.drop_null(c) for c in chunks]
    if pa.types.is_date(dtype):
        ints = [c.cast(pa.int32() if pa.types.is_date32(dtype) else pa.int64()) for c in ints]
    lo = min((int(pc.min(c).as_py()) for c in ints if len(c)), default=0)
    hi = max((int(pc.max(c).as_py()) for c in ints if len(c)), default=-1)
    rows = sum(len(c) for c in ints)
    if hi < lo or hi - lo >= min(MAX_DISTINCT_RANGE, max(64 * rows, 1 << 16)):
        return ColumnStats(None, low, high)
    seen = np.zeros(hi - lo + 1, dtype=np.bool_)
    block = np.empty(1 << 20, dtype=np.int64)
    for c in ints:
        arr = c.to_numpy(zero_copy_only=False)
        for start in range(0, len(arr), len(block)):  # offsets in small blocks: no copy
            part = arr[start:start + len(block)].astype(np.int64, copy=False)
            np.subtract(part, lo, out=block[:len(part)])
            seen[block[:len(part)]] = True
    return ColumnStats(int(np.count_nonzero(seen)), low, high)


def int_like(dtype: pa.DataType) -> bool:
    """Integers, dates and booleans: values whose distinct count is a range's size."""
    return (pa.types.is_integer(dtype) or pa.types.is_date(dtype)
            or pa.types.is_boolean(dtype))
