"""Versioned tables as Delta Lake tables (delta-rs), one commit per batch of changes.

Invariants of every table a ``DeltaStore`` writes:
- It is registered in the store's ``TableCatalog``; its Delta table has the change data
  feed on (``delta.enableChangeDataFeed``) and no deletion vectors (delta-rs rewrites
  files instead), so a version's snapshot is exactly the Parquet files
  ``file_uris(name, version)`` lists, and Spark may read them as plain Parquet.
- Version 0 is the creation; every ``apply`` that changes something is exactly one
  further version holding all its deletions and insertions (one ``MERGE`` commit), and
  a rejected ``apply`` writes nothing.
- A keyed table never holds two rows with equal key. A keyless table has the hidden
  ``int64`` column ``__rid``, unique among the live rows and larger for rows inserted
  later; it appears in ``read`` only on request and never in ``changes``. (A deleted
  row's id may be given again once no live row has a larger one.)
- Files are written in row groups of at most ``WriteOptions.max_row_group_size`` rows.
  The creation writes the rows sorted on the cluster columns (``sketch_columns``), so
  Parquet min/max statistics on them can skip data. A ``MERGE`` rewrites every file
  holding a deleted row and puts the kept and the inserted rows in no particular order,
  so clustering decays; ``optimize`` restores it with a version that changes no data.

The class is the front; the work is in ``writes`` (options, creation), ``merge`` (one
``MERGE`` per ``apply``), ``snapshots`` (opening a version, reading its files and their
statistics) and ``changes`` (the change feed).
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from deltalake import DeltaTable

from imp_core.errors import SchemaMismatchError, TableExistsError, VersionError
from imp_core.storage.batches import plain_schema, plain_strings
from imp_core.storage.calls import AppliedCall, CallTag, applied_call
from imp_core.storage.catalog import TableCatalog, TableEntry, is_uri, normalize_name
from imp_core.storage.changes import (
    ChangeFile,
    commit_change_files,
    empty_changes,
    normalize_changes,
)
from imp_core.storage.declared import with_declared
from imp_core.storage.layout import (
    LayoutResult,
    check_columns,
    order_kind,
    ordered,
    row_group_rows,
)
from imp_core.storage.merge import complete_deletes, merge_changes
from imp_core.storage.ordered_write import rewrite_ordered
from imp_core.storage.parquet_load import parquet_files, read_parquet_parts, stream_new_table
from imp_core.storage.snapshots import (
    FileStats,
    SnapshotFiles,
    column_bytes,
    file_stats,
    open_delta,
    read_snapshot,
    stored_schema,
    user_schema,
)
from imp_core.storage.writes import (
    DEFAULT_WRITE_OPTIONS,
    TABLE_CONFIGURATION,
    WriteOptions,
    check_new_table,
    sort_rows,
    write_new_table,
)

__all__ = ["TABLE_CONFIGURATION", "DeltaStore", "WriteOptions"]


class DeltaStore:
    """Named, versioned tables under ``root`` (catalog at ``root/catalog.json``).

    >>> store = DeltaStore(tmp)                                          # doctest: +SKIP
    >>> store.create_table("t", pa.table({"id": [1, 2]}), key=("id",))   # doctest: +SKIP
    0
    >>> store.apply("t", inserts=pa.table({"id": [3]}),
    ...             deletes=pa.table({"id": [1]}))                       # doctest: +SKIP
    1
    """

    def __init__(self, root: str | Path, options: WriteOptions = DEFAULT_WRITE_OPTIONS):
        self.root = Path(root).resolve()
        self.root.mkdir(parents=True, exist_ok=True)
        self.catalog = TableCatalog(self.root)
        self.options = options
        self._snapshots = SnapshotFiles()

    # --- catalog ---------------------------------------------------------------------

    def tables(self) -> list[str]:
        return self.catalog.names()

    def entry(self, name: str) -> TableEntry:
        return self.catalog.get(name)

    def default_location(self, name: str) -> str:
        return str(self.root / "tables" / normalize_name(name))

    # --- creating and dropping ---------------------------------------------------------

    def create_table(
        self,
        name: str,
        data: pa.Table,
        key: Sequence[str] | None = None,
        domains: Mapping[str, tuple[Any, Any]] | None = None,
        cluster_by: Sequence[str] = (),
        location: str | None = None,
        progress: bool = False,
    ) -> int:
        """Write ``data`` as a new table; returns its version (0, or 1 when its declared
        domains were added as Delta CHECK constraints, which every Delta writer honours).

        ``key``: columns unique in the table, or None for a keyless (bag) table that
        gets the hidden ``__rid``. ``cluster_by``: columns to sort rows on (recorded as
        the entry's ``sketch_columns``). ``location``: where the Delta table goes (a
        path or URI; default ``<root>/tables/<name>``).
        """
        if not isinstance(data, pa.Table):
            raise SchemaMismatchError(
                f"table {normalize_name(name)}: data must be a pyarrow.Table")
        data = plain_strings(data)
        data = data.cast(plain_schema(data.schema))  # drops field metadata (PARQUET:field_id)
        entry = self._new_entry(name, key, domains, cluster_by, location)
        check_new_table(entry, data)
        version = write_new_table(entry, data, self.options, progress)
        self.catalog.add(entry)
        return version

    def _new_entry(self, name: str, key: Sequence[str] | None,
                   domains: Mapping[str, tuple[Any, Any]] | None, cluster_by: Sequence[str],
                   location: str | None) -> TableEntry:
        """The catalog entry of a table about to be created; raises if the catalog or
        the location already holds it."""
        name = normalize_name(name)
        if location is None:
            location = self.default_location(name)
        elif not is_uri(location):
            location = str(Path(location).resolve())
        entry = TableEntry(
            name=name,
            location=location,
            key=None if key is None else tuple(key),
            domains=dict(domains or {}),
            sketch_columns=tuple(cluster_by),
        )
        self.catalog.check(entry)
        if not is_uri(entry.location) and DeltaTable.is_deltatable(entry.location):
            raise TableExistsError(f"{entry.location} already holds a Delta table")
        return entry

    def create_table_from_parquet(
        self,
        name: str,
        path_or_dir: str | Path,
        key: Sequence[str] | None = None,
        domains: Mapping[str, tuple[Any, Any]] | None = None,
        cluster_by: Sequence[str] = (),
        location: str | None = None,
        progress: bool = True,
    ) -> int:
        """``create_table`` from a Parquet file or a directory of ``*.parquet`` parts
        (``tpchgen-cli`` output); strings become ``string`` as in
        ``imp_core.workloads.tpch.load_tpch_tables``. ``progress``: tqdm bars (rows
        read, then rows written) on stderr."""
        files = parquet_files(Path(path_or_dir))
        entry = self._new_entry(name, key, domains, cluster_by, location)
        version = stream_new_table(entry, files, self.options, progress)
        if version is None:  # not in cluster order: sorted in memory
            data = read_parquet_parts(name, path_or_dir, progress)
            return self.create_table(name, data, key, domains, cluster_by, location,
                                     progress)
        self.catalog.add(entry)
        return version

    def drop_table(self, name: str, delete_files: bool = True) -> None:
        """Forget the table; also delete its files if it is a local directory."""
        entry = self.catalog.remove(name)
        self._snapshots.forget(entry.location)
        if delete_files and not is_uri(entry.location):
            shutil.rmtree(entry.location, ignore_errors=True)
        # the shared indexes' files of the table (``index_bases.index_directory``)
        for folder in (self.root / "_imp_indexes").glob(f"{normalize_name(name)}-*"):
            shutil.rmtree(folder, ignore_errors=True)

    # --- reading -----------------------------------------------------------------------

    def _delta(self, entry: TableEntry, version: int | None = None) -> DeltaTable:
        return open_delta(entry, version)

    def version(self, name: str) -> int:
        return self._delta(self.catalog.get(name)).version()

    def table_id(self, name: str) -> str:
        """The Delta table's id (a table dropped and created again has another)."""
        return self._delta(self.catalog.get(name)).metadata().id

    def schema(self, name: str, version: int | None = None) -> pa.Schema:
        """The table's columns (without ``__rid``), strings as ``string``."""
        entry = self.catalog.get(name)
        return user_schema(stored_schema(self._delta(entry, version)))

    def declared_schema(self, name: str) -> pa.Schema:
        """``schema(name)`` with the table's key and declared domains in its metadata
        (``imp_core.storage.declared``): what ListTables sends, so clients see them."""
        entry = self.catalog.get(name)
        return with_declared(self.schema(name), entry.key, entry.domains)

    def file_uris(self, name: str, version: int | None = None) -> list[str]:
        """The Parquet files of the snapshot at ``version`` (latest if None). Files of a
        keyless table also hold ``__rid``; readers must drop it."""
        return self.snapshot_files(name, version)[1]

    def snapshot_files(self, name: str, version: int | None = None) -> tuple[str, list[str]]:
        """``(table id, file URIs)`` of the snapshot at ``version``. The id is the Delta
        table's metadata id: it changes only when the table is created anew, so readers
        may key what they learn of its files' layout by it."""
        entry = self.catalog.get(name)
        if version is not None:
            return self._snapshots.files(entry, version)
        table = self._delta(entry)
        return table.metadata().id, table.file_uris()

    def column_bytes(self, name: str, version: int | None,
                     columns: Sequence[str] | None = None, stop_above: int | None = None
                     ) -> int:
        """Uncompressed bytes of ``columns`` (all if None) in the snapshot at ``version``,
        from the data files' Parquet footers; counting stops once above ``stop_above``."""
        files = self._delta(self.catalog.get(name), version).file_uris()
        return column_bytes(files, columns, stop_above)

    def file_stats(self, name: str, version: int | None, column: str
                   ) -> tuple[str, list[FileStats]]:
        """``(table id, [(uri, min, max, null count) of ``column`` per data file])`` of the
        snapshot at ``version``, from the Delta log's file statistics; None where the log
        holds none for a file."""
        table = self._delta(self.catalog.get(name), version)
        return table.metadata().id, file_stats(table, column)

    def read(
        self,
        name: str,
        version: int | None = None,
        columns: Sequence[str] | None = None,
        with_row_ids: bool = False,
        row_filter: pc.Expression | None = None,
    ) -> pa.Table:
        """The snapshot at ``version`` (latest if None), in no particular row order.

        ``columns`` selects columns (naming ``__rid`` explicitly is allowed on a keyless
        table); ``with_row_ids`` appends ``__rid`` to the default columns; ``row_filter``
        (over the stored columns, which need not be among ``columns``) lets the scan
        leave out rows where it is not TRUE while the files are decoded; it is a hint
        (a filter the scan cannot apply is ignored), so callers still filter.
        """
        entry = self.catalog.get(name)
        return read_snapshot(entry, self._delta(entry, version), columns, with_row_ids,
                             row_filter)

    # --- changing ----------------------------------------------------------------------

    def apply(
        self,
        name: str,
        inserts: pa.Table | None = None,
        deletes: pa.Table | None = None,
        call: CallTag | None = None,
    ) -> int:
        """Delete ``deletes`` then insert ``inserts`` as ONE new version; return it.

        Both batches have exactly the table's columns (lossless type widening and any
        string encoding allowed). A keyed table matches deletions by key and requires
        the given row to equal the stored one; a keyless table deletes, per given row,
        one stored occurrence of an equal row. Nothing is written when a batch does not
        fit (``SchemaMismatchError``: wrong columns or types, a value outside a declared
        domain, a deleted row that is not stored, a key inserted twice or already
        present and not deleted here) or the table is unknown (``UnknownTableError``).
        With nothing to do, no version is made and the current one is returned.

        ``call``: the idempotency key of the call this change applies; its commit carries
        the key (``imp_core.storage.calls``), and delta-rs refuses it when a concurrent
        commit carried the same key. The caller looks the key up first
        (``applied_call``): this method does not.
        """
        entry = self.catalog.get(name)
        table = self._delta(entry)
        return merge_changes(entry, table, inserts, complete_deletes(entry, table, deletes),
                             self.options, call)

    def applied_call(self, name: str, key: str) -> AppliedCall | None:
        """The call with idempotency key ``key`` as committed to table ``name`` (in its
        latest version's log), or None: no commit of the table carried it within the
        retention window (``imp_core.storage.calls``)."""
        entry = self.catalog.get(name)
        return applied_call(self._delta(entry), entry.name, key)

    def complete_deletes(self, name: str, deletes: pa.Table | None) -> pa.Table | None:
        """``deletes`` as whole stored rows (``merge.complete_deletes``): a keyed table's
        deletions may give only the key columns."""
        entry = self.catalog.get(name)
        if deletes is None or entry.key is None or deletes.num_columns > len(entry.key):
            return deletes  # whole rows (checked by ``apply``): no need to open the table
        return complete_deletes(entry, self._delta(entry), deletes)

    def update(self, name: str, old_rows: pa.Table, new_rows: pa.Table) -> int:
        """Replace ``old_rows`` by ``new_rows`` in one version (``apply``'s rules)."""
        return self.apply(name, inserts=new_rows, deletes=old_rows)

    # --- change feed -------------------------------------------------------------------

    def _range(self, entry: TableEntry, table: DeltaTable, start: int, end: int | None
               ) -> int:
        latest = table.version()
        end = latest if end is None else end
        if not -1 <= start <= end <= latest:
            raise VersionError(
                f"table {entry.name}: change range ({start}, {end}] is not within "
                f"versions 0..{latest} (start may be -1 to include the creation)"
            )
        return end

    def changes(self, name: str, from_version: int, to_version: int | None = None) -> pa.Table:
        """Changes of versions ``(from_version, to_version]`` (``to_version`` default:
        latest; ``from_version`` -1 includes the creation). See ``changes.py`` for the
        columns: user columns, ``_change_type`` ('insert'/'delete'), ``_commit_version``.
        """
        entry = self.catalog.get(name)
        table = self._delta(entry)
        to_version = self._range(entry, table, from_version, to_version)
        schema = user_schema(stored_schema(table))
        if from_version == to_version:
            return empty_changes(schema)
        raw = pa.table(table.load_cdf(starting_version=from_version + 1,
                                      ending_version=to_version))
        return normalize_changes(raw, schema)

    def change_files(
        self, name: str, from_version: int, to_version: int | None = None
    ) -> list[ChangeFile]:
        """The files holding the changes of ``(from_version, to_version]``, read from the
        commit files ``_delta_log/<v>.json`` (see ``ChangeFile``)."""
        entry = self.catalog.get(name)
        table = self._delta(entry)
        to_version = self._range(entry, table, from_version, to_version)
        out: list[ChangeFile] = []
        for v in range(from_version + 1, to_version + 1):
            out.extend(commit_change_files(entry.location, v))
        return out

    # --- maintenance -------------------------------------------------------------------

    def layout(self, name: str, by: Sequence[str], rows_per_group: int | None = None
               ) -> LayoutResult:
        """Rewrite the table in range order of ``by`` (one column) or Z-order (several),
        in row groups of ``rows_per_group`` rows (default: sized for skipping,
        ``imp_core.storage.layout.row_group_rows``), as one commit that changes no data
        (an empty change feed); ``by`` becomes the table's cluster columns, so later
        re-clustering keeps the layout. On an object store delta-rs Z-orders the files."""
        t0 = time.perf_counter()
        entry = self.catalog.get(name)
        table = self._delta(entry)
        columns = check_columns(user_schema(stored_schema(table)), by, entry.name)
        if rows_per_group is not None and rows_per_group < 1:
            raise ValueError("rows per row group must be at least 1")
        updated = replace(entry, sketch_columns=columns, zorder=len(columns) > 1)
        if is_uri(entry.location):
            table.optimize.z_order(list(columns),
                                   writer_properties=self.options.writer_properties(),
                                   target_size=self.options.target_file_size)
            rows, groups, per_group = -1, -1, self.options.max_row_group_size
        else:
            data = read_snapshot(entry, table, None, with_row_ids=True)
            per_group = rows_per_group or row_group_rows(data.num_rows,
                                                         self.options.max_row_group_size)
            options = replace(self.options, max_row_group_size=per_group)
            rows, groups = data.num_rows, -(-data.num_rows // per_group)
            if rows:
                rewrite_ordered(table, ordered(data, columns).cast(stored_schema(table)),
                                options)
        self.catalog.replace(updated)
        return LayoutResult(entry.name, self._delta(entry).version(), columns,
                            order_kind(columns), rows, groups, per_group,
                            time.perf_counter() - t0)

    def optimize(self, name: str) -> int:
        """Rewrite the table's files, its rows sorted on the cluster columns, else on the
        key (a local table is read whole and written in that order, so probes by either
        read few row groups; on an object store delta-rs Z-orders it on the cluster
        columns, or compacts it); a new version that changes no data (empty change
        feed). Returns the version after it."""
        entry = self.catalog.get(name)
        table = self._delta(entry)
        props = self.options.writer_properties()
        order = tuple(entry.sketch_columns) or tuple(entry.key or ())
        if order and not is_uri(entry.location):
            data = read_snapshot(entry, table, None, with_row_ids=True)
            data = ordered(data, order) if entry.zorder else sort_rows(data, order)
            rewrite_ordered(table, data.cast(stored_schema(table)), self.options)
        elif entry.sketch_columns:
            table.optimize.z_order(list(entry.sketch_columns), writer_properties=props,
                                   target_size=self.options.target_file_size)
        else:
            table.optimize.compact(writer_properties=props,
                                   target_size=self.options.target_file_size)
        return self._delta(entry).version()
