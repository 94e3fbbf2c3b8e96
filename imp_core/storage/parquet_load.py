"""Creating a store table from Parquet parts without holding the table in memory.

A TPC-H lineitem at SF 10 is about 11 GB as Arrow columns; reading it whole, checking it
and sorting it would need twice that. ``tpchgen-cli`` and most exports already write rows
in the order of the table's cluster column, so the load streams instead:

1. a check pass reads only the key, cluster and domain columns, one row group at a time:
   domains per row group, cluster order across the whole input, and the key columns kept
   (only they) for the uniqueness check at the end;
2. a write pass streams every column, row group by row group, into one Delta commit.

Invariants:
- Nothing is written unless the check pass accepts every row, with the same errors
  ``check_new_table`` gives for the in-memory path.
- The table written holds exactly the input rows, in input order (which the check pass
  has shown to be cluster order), plus ``__rid`` numbered 0..n-1 for a keyless table, as
  ``write_new_table`` would write them.
- Input whose rows are not in cluster order (or clustered on several columns, whose order
  this pass does not check) is loaded by the in-memory path, which sorts it.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from imp_core.errors import SchemaMismatchError
from imp_core.storage.batches import ROW_ID, check_domains, plain_schema, plain_strings
from imp_core.storage.catalog import TableEntry
from imp_core.storage.writes import (
    WriteOptions,
    check_keys,
    check_names,
    with_progress,
    write_source,
)

__all__ = ["parquet_files", "read_parquet_parts", "stream_new_table"]


def parquet_files(path: Path) -> list[Path]:
    """The Parquet file ``path`` or the ``*.parquet`` parts of the directory ``path``."""
    if path.is_dir():
        files = sorted(path.glob("*.parquet"))
        if not files:
            raise FileNotFoundError(f"no *.parquet files in {path}")
        return files
    if not path.is_file():
        raise FileNotFoundError(f"{path} does not exist")
    return [path]


def _row_groups(files: list[Path], columns: list[str] | None) -> Iterator[pa.Table]:
    for f in files:
        reader = pq.ParquetFile(f)
        for i in range(reader.num_row_groups):
            yield plain_strings(reader.read_row_group(i, columns=columns))


def read_parquet_parts(name: str, path_or_dir: str | Path, progress: bool) -> pa.Table:
    """The rows of a Parquet file or a directory of ``*.parquet`` parts, strings as
    ``string``; ``progress``: a tqdm bar (rows read) on stderr."""
    files = parquet_files(Path(path_or_dir))
    schema = plain_schema(pq.read_schema(files[0]))
    groups: Iterable[pa.Table] = _row_groups(files, None)
    if progress:
        total = sum(pq.ParquetFile(f).metadata.num_rows for f in files)
        groups = with_progress(groups, total, f"reading {name}")
    batches = [batch for group in groups for batch in group.to_batches()]
    return pa.Table.from_batches(batches, schema=schema) if batches else schema.empty_table()


def _orderable(values: pa.ChunkedArray) -> np.ndarray | None:
    """The column as numbers whose order is its order (None: not such a type or nulls)."""
    t = values.type
    if values.null_count:
        return None
    if pa.types.is_integer(t) or pa.types.is_floating(t):
        return values.to_numpy()
    if pa.types.is_date32(t):
        return values.cast(pa.int32()).to_numpy()
    if pa.types.is_date64(t) or pa.types.is_timestamp(t):
        return values.cast(pa.int64()).to_numpy()
    return None


def _checked_in_order(entry: TableEntry, files: list[Path], schema: pa.Schema) -> bool:
    """The check pass: raise ``SchemaMismatchError`` as ``check_new_table`` would; True
    when the rows already lie in cluster order (always, without cluster columns)."""
    names = schema.names
    check_names(entry, names)
    key = list(entry.key or ())
    cluster = list(entry.sketch_columns)
    wanted = list(dict.fromkeys(key + cluster + [c for c in entry.domains if c in names]))
    in_order = len(cluster) <= 1
    last = None
    keys: list[pa.Table] = []
    for group in _row_groups(files, wanted):
        check_domains(group, entry.domains, entry.name, "data")
        if key:
            keys.append(group.select(key))
        if in_order and cluster and group.num_rows:
            values = _orderable(group.column(cluster[0]))
            in_order = values is not None and bool(np.all(values[1:] >= values[:-1])) \
                and (last is None or values[0] >= last)
            last = values[-1] if in_order else None
    if key:
        table = pa.concat_tables(keys) if keys else schema.empty_table().select(key)
        check_keys(entry, table, "data")
    return in_order


def stream_new_table(entry: TableEntry, files: list[Path], options: WriteOptions,
                     progress: bool) -> int | None:
    """Write the Parquet ``files`` as the first version of ``entry``'s table by the two
    passes of the module docstring; its version, or None when the rows are not in cluster
    order (nothing written: the caller loads them in memory and sorts them)."""
    schema = plain_schema(pq.read_schema(files[0]))
    for f in files[1:]:
        other = plain_schema(pq.read_schema(f))
        if not other.equals(schema):
            raise SchemaMismatchError(
                f"table {entry.name}: {f} has columns {other} unlike {files[0]}: {schema}")
    if not _checked_in_order(entry, files, schema):
        return None
    total = sum(pq.ParquetFile(f).metadata.num_rows for f in files)
    out_schema = schema if entry.key is not None else \
        schema.append(pa.field(ROW_ID, pa.int64(), nullable=False))

    def batches() -> Iterator[pa.RecordBatch]:
        start = 0
        for group in _row_groups(files, None):
            group = group.cast(schema)
            if entry.key is None:
                group = group.append_column(out_schema.field(ROW_ID), pa.array(
                    np.arange(start, start + group.num_rows, dtype=np.int64)))
            start += group.num_rows
            yield from group.to_batches()

    source: Iterable[pa.RecordBatch] = batches()
    if progress:
        source = with_progress(source, total, f"writing {entry.name}")
    return write_source(entry, out_schema, source, options)
