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
import threading
from collections import OrderedDict
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
from imp_core.storage.changes import commit_actions, data_path

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


# log actions that leave a snapshot's files as its adds and removes make them
_SNAPSHOT_NEUTRAL = {"add", "remove", "cdc", "commitInfo", "txn"}


class SnapshotFiles:
    """The data files of tables' snapshots at given versions. The version after a kept
    one is the kept list with the adds and removes of that commit's log entry applied
    (``_forward``); any other is read through one kept ``DeltaTable`` per table
    location, moved forward commit by commit: on a table with thousands of commits,
    opening the log costs about 50 ms and moving it one commit forward about 8–10, and a
    query probing a table reads each new version's files once.

    Invariants: ``files`` answers exactly what ``open_delta(entry, version)`` would (the
    same errors included: any failure on the kept table is retried by ``open_delta``);
    a snapshot's file list never changes, so answers are kept (the last ``keep``).
    Thread-safe: one lock guards the kept tables, which are mutated by loading."""

    def __init__(self, keep: int = 256):
        self.keep = keep
        self._lock = threading.Lock()
        self._tables: dict[str, DeltaTable] = {}
        self._files: OrderedDict[tuple[str, int], tuple[str, list[str]]] = OrderedDict()

    def files(self, entry: TableEntry, version: int) -> tuple[str, list[str]]:
        """``(table id, file URIs)`` of ``entry``'s snapshot at ``version``."""
        key = (entry.location, version)
        with self._lock:
            found = self._files.get(key)
            if found is not None:
                self._files.move_to_end(key)
                return found
            found = self._forward(entry, version)
            if found is None:
                table = self._load(entry, version)
                found = (table.metadata().id, table.file_uris())
            self._files[key] = found
            while len(self._files) > self.keep:
                self._files.popitem(last=False)
            return found

    def _forward(self, entry: TableEntry, version: int) -> tuple[str, list[str]] | None:
        """The snapshot at ``version`` from the one before it (kept) and the adds and
        removes of commit ``version`` (its log entry only, about a tenth of a
        millisecond, where loading the commit takes milliseconds); None where the
        commit holds anything else that bears on the snapshot (metadata, protocol, a
        deletion vector), a remove of a file not in the snapshot, or where the kept
        URIs are not of the form the log's paths give."""
        before = self._files.get((entry.location, version - 1))
        if before is None:
            return None
        table_id, uris = before
        prefix = entry.location.rstrip("/") + "/"
        if any(not u.startswith(prefix) for u in uris):
            return None
        try:
            actions = commit_actions(entry.location, version)
        except (OSError, ValueError):
            return None  # no such commit (yet), or cleaned up: the log says which
        removed: set[str] = set()
        added: list[str] = []
        for action in actions:
            if not set(action) <= _SNAPSHOT_NEUTRAL:
                return None
            if "remove" in action:
                removed.add(data_path(entry.location, action["remove"]["path"]))
            elif "add" in action:
                if action["add"].get("deletionVector"):
                    return None
                added.append(data_path(entry.location, action["add"]["path"]))
        kept = [u for u in uris if u not in removed]
        if len(kept) != len(uris) - len(removed):
            return None
        present = set(kept)
        return table_id, kept + [u for u in dict.fromkeys(added) if u not in present]

    def _load(self, entry: TableEntry, version: int) -> DeltaTable:
        table = self._tables.get(entry.location)
        if table is not None and table.version() <= version:
            try:
                table.load_as_version(version)  # forward: reads only the new commits
                features = table.protocol().reader_features or []
                if table.version() == version and "deletionVectors" not in features:
                    return table
            except DeltaError:
                pass  # e.g. no such version yet: open_delta says so
        table = open_delta(entry, version)
        self._tables[entry.location] = table
        return table

    def forget(self, location: str) -> None:
        """Drop what is kept of the table at ``location`` (dropped or replaced)."""
        with self._lock:
            self._tables.pop(location, None)
            for key in [k for k in self._files if k[0] == location]:
                del self._files[key]


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
