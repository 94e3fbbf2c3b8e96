"""A table's first version written in the order of its rows.

``write_deltalake`` hands record batches to several writer tasks at once, so a stream of
sorted batches lands in files and row groups in no particular order (with 4,096-row
batches most 65,536-row groups of a sorted column span the whole table). Clustering is
what lets Parquet statistics skip data, so a new table's files are written here, one
after another, with pyarrow, and committed as the table's first version with their
Delta statistics.

Invariants:
- Files hold the rows in the order the source yields them; each file holds consecutive
  rows, in row groups of at most ``WriteOptions.max_row_group_size`` rows and pages of at
  most ``page_rows`` rows, with a page index; a file is closed once it passes
  ``target_file_size`` bytes.
- Each file's Delta statistics (``numRecords``, ``nullCount``, ``minValues``,
  ``maxValues``) are read from its Parquet footer. A bound is recorded only where JSON
  carries it exactly (integers, finite floats, dates, strings of at most 32 characters,
  decimals whose shortest float repr is the same number); a reader treats a missing
  bound as unknown, which never skips a file wrongly.
- Nothing is committed unless every file was written; files of a failed write are
  removed.
"""

from __future__ import annotations

import datetime as dt
import decimal
import json
import math
import shutil
import time
import uuid
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from deltalake import DeltaTable, Schema
from deltalake.transaction import AddAction, RemoveAction, create_table_with_add_actions

__all__ = ["file_statistics", "rewrite_ordered", "write_ordered_table"]

MAX_STRING_BOUND = 32  # characters; longer strings get no bound (as Spark truncates)


def _json_bound(value: Any) -> Any:
    """``value`` as a JSON statistics bound, or None where JSON would not carry it
    exactly."""
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, decimal.Decimal):
        as_float = float(value)
        return as_float if math.isfinite(as_float) and \
            decimal.Decimal(repr(as_float)) == value else None
    if isinstance(value, dt.datetime):
        return None  # time zones and units: left to the readers' own checks
    if isinstance(value, dt.date):
        return value.isoformat()
    if isinstance(value, str):
        return value if len(value) <= MAX_STRING_BOUND else None
    return None


def file_statistics(metadata: pq.FileMetaData) -> dict[str, Any]:
    """The Delta ``stats`` of a Parquet file of flat columns, from its footer."""
    low: dict[str, Any] = {}
    high: dict[str, Any] = {}
    nulls: dict[str, int] = {}
    for c in range(metadata.num_columns):
        name = metadata.schema.column(c).path
        groups = [metadata.row_group(g).column(c).statistics
                  for g in range(metadata.num_row_groups)]
        if any(s is None or not s.has_null_count for s in groups):
            continue
        nulls[name] = sum(s.null_count for s in groups)
        bounded = [s for s in groups if s.has_min_max]
        if not bounded or len(bounded) + sum(
                s.null_count == metadata.row_group(g).num_rows
                for g, s in enumerate(groups) if not s.has_min_max) < len(groups):
            continue  # a row group with values but no bounds: the file has none
        lo = _json_bound(min(s.min for s in bounded))
        hi = _json_bound(max(s.max for s in bounded))
        if lo is not None and hi is not None:
            low[name], high[name] = lo, hi
    return {"numRecords": metadata.num_rows, "minValues": low, "maxValues": high,
            "nullCount": nulls}


def _delta_type(t: pa.DataType) -> pa.DataType:
    if pa.types.is_timestamp(t) and t.unit != "us":
        return pa.timestamp("us", t.tz)  # Delta's timestamps are microseconds
    return t


def delta_arrow_schema(schema: pa.Schema) -> pa.Schema:
    """``schema`` with the types Delta stores (microsecond timestamps)."""
    return pa.schema([f.with_type(_delta_type(f.type)) for f in schema])


class _FileRoller:
    """Parquet files under ``location``, written one after another."""

    def __init__(self, location: Path, schema: pa.Schema, options: Any,
                 data_change: bool = True) -> None:
        self.location, self.schema, self.options = location, schema, options
        self.data_change = data_change
        self.adds: list[AddAction] = []
        self.paths: list[Path] = []
        self._sink: pa.NativeFile | None = None
        self._writer: pq.ParquetWriter | None = None

    def write(self, batch: pa.RecordBatch) -> None:
        if not batch.num_rows:
            return
        if self._writer is None:
            path = self.location / f"part-{len(self.paths):05d}-{uuid.uuid4()}-c000.parquet"
            self.paths.append(path)
            self._sink = pa.OSFile(str(path), "wb")
            self._writer = pq.ParquetWriter(
                self._sink, self.schema, compression="snappy", write_page_index=True,
                max_rows_per_page=self.options.page_rows, store_schema=False)
        self._writer.write_batch(batch, row_group_size=self.options.max_row_group_size)
        assert self._sink is not None
        if self._sink.tell() >= self.options.target_file_size:
            self.close()

    def close(self) -> None:
        if self._writer is None:
            return
        self._writer.close()
        assert self._sink is not None
        self._sink.close()
        self._writer = self._sink = None
        path = self.paths[-1]
        self.adds.append(AddAction(
            path=path.name, size=path.stat().st_size, partition_values={},
            modification_time=int(time.time() * 1000), data_change=self.data_change,
            stats=json.dumps(file_statistics(pq.read_metadata(path)))))


def _write_files(roller: _FileRoller, batches: Iterable[pa.RecordBatch]) -> None:
    """Write ``batches`` through ``roller`` in row groups of exactly
    ``max_row_group_size`` rows (the last may be shorter): pyarrow starts a row group at
    every writer call."""
    size = roller.options.max_row_group_size
    pending: list[pa.RecordBatch] = []
    rows = 0
    for batch in batches:
        pending.append(batch)
        rows += batch.num_rows
        if rows < size:
            continue
        whole = pa.Table.from_batches(pending, roller.schema).combine_chunks()
        cut = rows - rows % size
        for group in whole.slice(0, cut).to_batches(max_chunksize=size):
            roller.write(group)
        pending, rows = whole.slice(cut).to_batches(), rows - cut
    if rows:
        roller.write(pa.Table.from_batches(pending, roller.schema).combine_chunks()
                     .to_batches()[0])
    roller.close()


def _discard(roller: _FileRoller) -> None:
    """Remove every file ``roller`` started (the write failed)."""
    try:
        roller.close()
    except Exception:  # noqa: BLE001 - the write's own error is the one to raise
        pass
    for path in roller.paths:
        path.unlink(missing_ok=True)


def write_ordered_table(location: str, schema: pa.Schema, batches: Iterable[pa.RecordBatch],
                        options: Any, configuration: dict[str, str]) -> None:
    """Write ``batches`` (rows of ``schema``, in their final order) as the first version
    of a new Delta table at the local path ``location`` (module docstring).
    ``options``: a ``WriteOptions``."""
    root = Path(location)
    root.mkdir(parents=True, exist_ok=True)
    target = delta_arrow_schema(schema)
    if not target.equals(schema):
        batches = (b.cast(target) for b in batches)
        schema = target
    roller = _FileRoller(root, schema, options)
    try:
        _write_files(roller, batches)
        create_table_with_add_actions(str(root), Schema.from_arrow(schema), roller.adds,
                                      mode="error", configuration=configuration)
    except BaseException:
        _discard(roller)
        if not any(root.iterdir()):
            shutil.rmtree(root, ignore_errors=True)
        raise


def rewrite_ordered(table: DeltaTable, data: pa.Table, options: Any) -> None:
    """Replace every file of the local ``table`` by files of ``data`` (the same rows, in
    their new order) in one commit whose actions carry no data change: the change feed
    of that version is empty."""
    root = Path(table.table_uri.removeprefix("file://"))
    old = table.get_add_actions(flatten=True)
    roller = _FileRoller(root, data.schema, options, data_change=False)
    now = int(time.time() * 1000)
    try:
        _write_files(roller, data.to_batches(max_chunksize=options.max_row_group_size))
        removes = [RemoveAction(path=path, data_change=False, deletion_timestamp=now,
                                size=size)
                   for path, size in zip(old.column("path").to_pylist(),
                                         old.column("size_bytes").to_pylist())]
        table.create_write_transaction([*roller.adds, *removes], mode="append",
                                       schema=data.schema)
    except BaseException:
        _discard(roller)
        raise
