"""Opening a store table's Delta log at a version, and reading what its snapshot holds.

Invariants:
- ``open_delta`` returns a table whose loaded version is the one asked for (the latest if
  None) and that allows no deletion vectors, so the snapshot is exactly the Parquet files
  ``DeltaTable.file_uris`` lists; it raises ``UnknownTableError``,
  ``UnsupportedTableError`` or ``VersionError`` otherwise, never returns another version.
- Schemas come back with ``string`` for every string encoding and without metadata;
  ``stored_schema`` includes the hidden ``__rid`` of keyless tables, ``user_schema`` never.
- Data files are read with pyarrow directly: ``DeltaTable.to_pyarrow_dataset`` (also
  behind ``to_pyarrow_table``) goes through delta-rs' Python filesystem handler, and
  processes that used it abort at exit now and then ("terminate called without an
  active exception") with deltalake 1.6.6 and pyarrow 26.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any
from urllib.parse import unquote

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
from deltalake import DeltaTable
from deltalake.exceptions import DeltaError, TableNotFoundError

from imp_core.errors import (
    UnknownColumnError,
    UnknownTableError,
    UnsupportedTableError,
    VersionError,
)
from imp_core.storage.batches import ROW_ID, plain_schema
from imp_core.storage.catalog import TableEntry

log = logging.getLogger(__name__)

FileStats = tuple[str, Any, Any, int | None]  # (uri, min, max, null count) of one file


def open_delta(entry: TableEntry, version: int | None = None) -> DeltaTable:
    """The Delta table of ``entry`` loaded at ``version`` (latest if None)."""
    try:
        table = DeltaTable(entry.location)
    except TableNotFoundError as exc:
        raise UnknownTableError(
            f"table {entry.name} is in the catalog, but {entry.location} holds no Delta "
            "table"
        ) from exc
    features = table.protocol().reader_features or []
    if "deletionVectors" in features:
        raise UnsupportedTableError(
            f"table {entry.name} at {entry.location} allows deletion vectors; its "
            "data files alone no longer describe a snapshot"
        )
    if version is not None:
        latest = table.version()
        if not 0 <= version <= latest:
            raise VersionError(
                f"table {entry.name} has versions 0..{latest}, not {version}"
            )
        if version != latest:
            try:
                table.load_as_version(version)
            except DeltaError as exc:  # e.g. log files cleaned up
                raise VersionError(f"table {entry.name}: version {version}: {exc}") \
                    from exc
    return table


def stored_schema(table: DeltaTable) -> pa.Schema:
    """Schema of the data files' rows as read (hidden ``__rid`` included)."""
    return plain_schema(pa.schema(table.schema().to_arrow()))


def user_schema(stored: pa.Schema) -> pa.Schema:
    """``stored`` without the hidden ``__rid``."""
    if ROW_ID in stored.names:
        return stored.remove(stored.get_field_index(ROW_ID))
    return stored


def read_snapshot(entry: TableEntry, table: DeltaTable, columns: Sequence[str] | None,
                  with_row_ids: bool, row_filter: pc.Expression | None = None) -> pa.Table:
    """The rows of ``table``'s loaded snapshot (see ``DeltaStore.read``)."""
    stored = stored_schema(table)
    if columns is None:
        columns = user_schema(stored).names
        if with_row_ids and ROW_ID in stored.names:
            columns = [*columns, ROW_ID]
    unknown = [c for c in columns if c not in stored.names]
    if unknown:
        raise UnknownColumnError(f"table {entry.name} has no columns {unknown}")
    files = table.file_uris()
    if not files:
        return pa.schema([stored.field(c) for c in columns]).empty_table()
    dataset = ds.dataset(files, schema=stored, format="parquet")
    if row_filter is not None:
        try:
            return dataset.to_table(columns=list(columns), filter=row_filter)
        except (pa.ArrowNotImplementedError, pa.ArrowTypeError) as exc:
            # the filter only spares work (callers apply their predicate): read all
            log.info("table %s: row filter not applicable in the scan (%s)", entry.name, exc)
    return dataset.to_table(columns=list(columns))


def column_bytes(files: Sequence[str], columns: Sequence[str] | None,
                 stop_above: int | None) -> int:
    """Uncompressed bytes of ``columns`` (all if None) in ``files``, from their Parquet
    footers; counting stops once above ``stop_above``."""
    wanted = None if columns is None else set(columns)
    size = 0
    for fragment in ds.dataset(list(files), format="parquet").get_fragments() if files else ():
        meta = fragment.metadata
        for i in range(meta.num_row_groups):
            rg = meta.row_group(i)
            size += sum(rg.column(j).total_uncompressed_size for j in range(rg.num_columns)
                        if wanted is None or rg.column(j).path_in_schema in wanted)
        if stop_above is not None and size > stop_above:
            break
    return size


def file_stats(table: DeltaTable, column: str) -> list[FileStats]:
    """``(uri, min, max, null count)`` of ``column`` per data file of the loaded snapshot,
    from the Delta log's file statistics; None where the log holds none for a file."""
    uris = table.file_uris()
    actions = pa.table(table.get_add_actions(flatten=True))
    n = actions.num_rows

    def col(key: str) -> list[Any]:
        return actions.column(key).to_pylist() if key in actions.column_names else [None] * n

    stats = dict(zip((unquote(p) for p in col("path")),
                     zip(col(f"min.{column}"), col(f"max.{column}"),
                         col(f"null_count.{column}"))))
    root = unquote(table.table_uri).rstrip("/") + "/"
    out = []
    for uri in uris:
        plain = unquote(uri)
        rel = plain[len(root):] if plain.startswith(root) else plain.rsplit("/", 1)[-1]
        lo, hi, nulls = stats.get(rel, (None, None, None))
        out.append((uri, lo, hi, nulls))
    return out


def max_row_id(table: DeltaTable, files: list[str], stored: pa.Schema) -> int:
    """Largest ``__rid`` among live rows (-1 if none): from the log's file statistics,
    or by reading the column when a file has none."""
    if not files:
        return -1
    actions = pa.table(table.get_add_actions(flatten=True))
    name = f"max.{ROW_ID}"
    if name in actions.column_names and actions.column(name).null_count == 0:
        return int(pc.max(actions.column(name)).as_py())
    data = ds.dataset(files, schema=stored, format="parquet").to_table(columns=[ROW_ID])
    top = pc.max(data.column(ROW_ID)).as_py()
    return -1 if top is None else int(top)
