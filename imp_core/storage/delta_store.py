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
  holding a deleted row and puts the kept and the inserted rows in no particular order
  (inserted batches are sorted, but delta-rs mixes them in), so clustering decays;
  ``optimize`` restores it with a version that changes no data.
- Data files are read with pyarrow directly: ``DeltaTable.to_pyarrow_dataset`` (also
  behind ``to_pyarrow_table``) goes through delta-rs' Python filesystem handler, and
  processes that used it abort at exit now and then ("terminate called without an
  active exception") with deltalake 1.6.6 and pyarrow 26.
"""

from __future__ import annotations

import shutil
import sys
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
import pyarrow.parquet as pq
from deltalake import DeltaTable, WriterProperties, write_deltalake
from deltalake.exceptions import DeltaError, TableNotFoundError

from imp_core.errors import (
    SchemaMismatchError,
    TableExistsError,
    UnknownColumnError,
    UnknownTableError,
    UnsupportedTableError,
    VersionError,
)
from imp_core.storage.batches import (
    OP,
    RESERVED,
    ROW_ID,
    check_domains,
    conform,
    plain_schema,
    plain_strings,
)
from imp_core.storage.catalog import TableCatalog, TableEntry, is_uri, normalize_name
from imp_core.storage.changes import (
    ChangeFile,
    commit_change_files,
    empty_changes,
    normalize_changes,
)
from imp_core.storage.matching import assign_row_ids, read_candidates, row_tuples

TABLE_CONFIGURATION = {"delta.enableChangeDataFeed": "true"}
_SOURCE, _TARGET = "src", "tgt"


@dataclass(frozen=True)
class WriteOptions:
    """How data files are laid out. Smaller files make a ``MERGE`` cheaper (it rewrites
    each file holding a deleted row); smaller row groups make statistics finer, and with
    data pages of at most ``page_rows`` rows the page index lets Spark's Parquet reader
    skip pages inside a row group (what makes a sketch's ranges read few rows)."""

    max_row_group_size: int = 65_536
    target_file_size: int = 32 * 1024 * 1024  # bytes
    page_rows: int | None = 2048

    def writer_properties(self) -> WriterProperties:
        if self.page_rows is None:
            return WriterProperties(max_row_group_size=self.max_row_group_size)
        return WriterProperties(max_row_group_size=self.max_row_group_size,
                                data_page_row_count_limit=self.page_rows)


def _quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _sort(data: pa.Table, columns: Sequence[str]) -> pa.Table:
    if not columns or data.num_rows < 2:
        return data
    return data.sort_by([(c, "ascending") for c in columns])


def _batches_with_progress(data: pa.Table, desc: str, chunk: int) -> pa.RecordBatchReader:
    """``data`` as a reader whose consumption drives a tqdm bar (rows) on stderr."""
    from tqdm import tqdm

    def gen() -> Iterator[pa.RecordBatch]:
        with tqdm(total=data.num_rows, unit="rows", unit_scale=True, desc=desc,
                  file=sys.stderr) as bar:
            for batch in data.to_batches(max_chunksize=chunk):
                yield batch
                bar.update(batch.num_rows)

    return pa.RecordBatchReader.from_batches(data.schema, gen())


def _parquet_files(path: Path) -> list[Path]:
    if path.is_dir():
        files = sorted(path.glob("*.parquet"))
        if not files:
            raise FileNotFoundError(f"no *.parquet files in {path}")
        return files
    if not path.is_file():
        raise FileNotFoundError(f"{path} does not exist")
    return [path]


class DeltaStore:
    """Named, versioned tables under ``root`` (catalog at ``root/catalog.json``).

    >>> store = DeltaStore(tmp)                                          # doctest: +SKIP
    >>> store.create_table("t", pa.table({"id": [1, 2]}), key=("id",))   # doctest: +SKIP
    0
    >>> store.apply("t", inserts=pa.table({"id": [3]}),
    ...             deletes=pa.table({"id": [1]}))                       # doctest: +SKIP
    1
    """

    def __init__(self, root: str | Path, options: WriteOptions = WriteOptions()):
        self.root = Path(root).resolve()
        self.root.mkdir(parents=True, exist_ok=True)
        self.catalog = TableCatalog(self.root)
        self.options = options

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
        """Write ``data`` as a new table (version 0, which this returns).

        ``key``: columns unique in the table, or None for a keyless (bag) table that
        gets the hidden ``__rid``. ``cluster_by``: columns to sort rows on (recorded as
        the entry's ``sketch_columns``). ``location``: where the Delta table goes (a
        path or URI; default ``<root>/tables/<name>``).
        """
        name = normalize_name(name)
        if not isinstance(data, pa.Table):
            raise SchemaMismatchError(f"table {name}: data must be a pyarrow.Table")
        data = plain_strings(data)
        schema = plain_schema(data.schema)
        data = data.cast(schema)  # also drops field metadata (e.g. PARQUET:field_id)
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
        self._check_new_table(entry, data)
        self.catalog.check(entry)
        if not is_uri(entry.location) and DeltaTable.is_deltatable(entry.location):
            raise TableExistsError(f"{entry.location} already holds a Delta table")

        if entry.key is None:
            data = data.append_column(
                pa.field(ROW_ID, pa.int64(), nullable=False),
                pa.array(np.arange(data.num_rows, dtype=np.int64)),
            )
        data = _sort(data, entry.sketch_columns)
        source: pa.Table | pa.RecordBatchReader = data
        if progress:
            source = _batches_with_progress(
                data, f"writing {name}", self.options.max_row_group_size
            )
        if not is_uri(entry.location):
            Path(entry.location).mkdir(parents=True, exist_ok=True)
        write_deltalake(
            entry.location,
            source,
            mode="error",
            configuration=TABLE_CONFIGURATION,
            writer_properties=self.options.writer_properties(),
            target_file_size=self.options.target_file_size,
        )
        self.catalog.add(entry)
        return 0

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
        files = _parquet_files(Path(path_or_dir))
        readers = [pq.ParquetFile(f) for f in files]
        total = sum(r.metadata.num_rows for r in readers)
        bar = None
        if progress:
            from tqdm import tqdm

            bar = tqdm(total=total, unit="rows", unit_scale=True, desc=f"reading {name}",
                       file=sys.stderr)
        batches: list[pa.RecordBatch] = []
        try:
            for reader in readers:
                for i in range(reader.num_row_groups):
                    group = plain_strings(reader.read_row_group(i))
                    batches.extend(group.to_batches())
                    if bar is not None:
                        bar.update(group.num_rows)
        finally:
            if bar is not None:
                bar.close()
        schema = plain_schema(readers[0].schema_arrow)
        data = pa.Table.from_batches(batches, schema=schema) if batches else schema.empty_table()
        return self.create_table(name, data, key, domains, cluster_by, location, progress)

    def _check_new_table(self, entry: TableEntry, data: pa.Table) -> None:
        names = data.schema.names
        problems: list[str] = []
        reserved = [n for n in names if n in RESERVED]
        if reserved:
            problems.append(f"columns {reserved} are reserved")
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            problems.append(f"duplicate columns {dupes}")
        for what, cols in (
            ("key", entry.key or ()),
            ("cluster", entry.sketch_columns),
            ("domain", tuple(entry.domains)),
        ):
            unknown = [c for c in cols if c not in names]
            if unknown:
                problems.append(f"{what} columns {unknown} are not columns")
        if problems:
            raise SchemaMismatchError(f"table {entry.name}: " + "; ".join(problems))
        check_domains(data, entry.domains, entry.name, "data")
        if entry.key is not None:
            self._check_keys(entry, data, "data")

    def drop_table(self, name: str, delete_files: bool = True) -> None:
        """Forget the table; also delete its files if it is a local directory."""
        entry = self.catalog.remove(name)
        if delete_files and not is_uri(entry.location):
            shutil.rmtree(entry.location, ignore_errors=True)

    # --- reading -----------------------------------------------------------------------

    def _delta(self, entry: TableEntry, version: int | None = None) -> DeltaTable:
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

    @staticmethod
    def _stored_schema(table: DeltaTable) -> pa.Schema:
        """Schema of the data files' rows as read (hidden ``__rid`` included)."""
        return plain_schema(pa.schema(table.schema().to_arrow()))

    @staticmethod
    def _user_schema(stored: pa.Schema) -> pa.Schema:
        if ROW_ID in stored.names:
            return stored.remove(stored.get_field_index(ROW_ID))
        return stored

    def version(self, name: str) -> int:
        return self._delta(self.catalog.get(name)).version()

    def schema(self, name: str, version: int | None = None) -> pa.Schema:
        """The table's columns (without ``__rid``), strings as ``string``."""
        entry = self.catalog.get(name)
        return self._user_schema(self._stored_schema(self._delta(entry, version)))

    def file_uris(self, name: str, version: int | None = None) -> list[str]:
        """The Parquet files of the snapshot at ``version`` (latest if None). Files of a
        keyless table also hold ``__rid``; readers must drop it."""
        return self._delta(self.catalog.get(name), version).file_uris()

    def snapshot_files(self, name: str, version: int | None = None) -> tuple[str, list[str]]:
        """``(table id, file URIs)`` of the snapshot at ``version``. The id is the Delta
        table's metadata id: it changes only when the table is created anew, so readers
        may key what they learn of its files' layout by it."""
        table = self._delta(self.catalog.get(name), version)
        return table.metadata().id, table.file_uris()

    def column_bytes(self, name: str, version: int | None,
                     columns: Sequence[str] | None = None, stop_above: int | None = None
                     ) -> int:
        """Uncompressed bytes of ``columns`` (all if None) in the snapshot at ``version``,
        from the data files' Parquet footers; counting stops once above ``stop_above``."""
        files = self._delta(self.catalog.get(name), version).file_uris()
        wanted = None if columns is None else set(columns)
        size = 0
        for fragment in ds.dataset(files, format="parquet").get_fragments() if files else ():
            meta = fragment.metadata
            for i in range(meta.num_row_groups):
                rg = meta.row_group(i)
                size += sum(rg.column(j).total_uncompressed_size for j in range(rg.num_columns)
                            if wanted is None or rg.column(j).path_in_schema in wanted)
            if stop_above is not None and size > stop_above:
                break
        return size

    def file_stats(self, name: str, version: int | None, column: str
                   ) -> tuple[str, list[tuple[str, Any, Any, int | None]]]:
        """``(table id, [(uri, min, max, null count) of ``column`` per data file])`` of the
        snapshot at ``version``, from the Delta log's file statistics; None where the log
        holds none for a file."""
        table = self._delta(self.catalog.get(name), version)
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
        return table.metadata().id, out

    def read(
        self,
        name: str,
        version: int | None = None,
        columns: Sequence[str] | None = None,
        with_row_ids: bool = False,
    ) -> pa.Table:
        """The snapshot at ``version`` (latest if None), in no particular row order.

        ``columns`` selects columns (naming ``__rid`` explicitly is allowed on a keyless
        table); ``with_row_ids`` appends ``__rid`` to the default columns.
        """
        entry = self.catalog.get(name)
        table = self._delta(entry, version)
        stored = self._stored_schema(table)
        if columns is None:
            columns = self._user_schema(stored).names
            if with_row_ids and ROW_ID in stored.names:
                columns = [*columns, ROW_ID]
        unknown = [c for c in columns if c not in stored.names]
        if unknown:
            raise UnknownColumnError(f"table {entry.name} has no columns {unknown}")
        files = table.file_uris()
        if not files:
            return pa.schema([stored.field(c) for c in columns]).empty_table()
        return ds.dataset(files, schema=stored, format="parquet").to_table(columns=list(columns))

    # --- changing ----------------------------------------------------------------------

    def apply(
        self,
        name: str,
        inserts: pa.Table | None = None,
        deletes: pa.Table | None = None,
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
        """
        entry = self.catalog.get(name)
        table = self._delta(entry)
        stored = self._stored_schema(table)
        schema = self._user_schema(stored)
        ins = schema.empty_table() if inserts is None else \
            conform(inserts, schema, entry.name, "insert batch")
        dels = schema.empty_table() if deletes is None else \
            conform(deletes, schema, entry.name, "delete batch")
        if ins.num_rows == 0 and dels.num_rows == 0:
            return table.version()
        check_domains(ins, entry.domains, entry.name, "insert batch")
        files = table.file_uris()
        if entry.key is None:
            dels, ins = self._bag_source(entry, table, stored, dels, ins)
            match_on: tuple[str, ...] = (ROW_ID,)
        else:
            self._check_keyed_change(entry, files, stored, dels, ins)
            match_on = entry.key
        ins = _sort(ins, entry.sketch_columns)
        source = pa.concat_tables([
            dels.append_column(OP, pa.array(["d"] * dels.num_rows, pa.string())),
            ins.append_column(OP, pa.array(["i"] * ins.num_rows, pa.string())),
        ])
        on = " AND ".join(
            f"{_TARGET}.{_quote(c)} = {_SOURCE}.{_quote(c)}" for c in match_on
        )
        metrics = (
            table.merge(
                source,
                predicate=f"{on} AND {_SOURCE}.{_quote(OP)} = 'd'",
                source_alias=_SOURCE,
                target_alias=_TARGET,
                streamed_exec=False,  # lets delta-rs prune target files by source stats
                writer_properties=self.options.writer_properties(),
            )
            .when_matched_delete()
            .when_not_matched_insert(
                updates={c: f"{_SOURCE}.{_quote(c)}" for c in stored.names},
                predicate=f"{_SOURCE}.{_quote(OP)} = 'i'",
            )
            .execute()
        )
        deleted = metrics.get("num_target_rows_deleted")
        inserted = metrics.get("num_target_rows_inserted")
        if (deleted, inserted) != (dels.num_rows, ins.num_rows):
            raise RuntimeError(  # only a concurrent writer could cause this
                f"table {entry.name}: MERGE deleted {deleted} (expected {dels.num_rows}) "
                f"and inserted {inserted} (expected {ins.num_rows}) rows"
            )
        return table.version()

    def update(self, name: str, old_rows: pa.Table, new_rows: pa.Table) -> int:
        """Replace ``old_rows`` by ``new_rows`` in one version (``apply``'s rules)."""
        return self.apply(name, inserts=new_rows, deletes=old_rows)

    def _check_keys(self, entry: TableEntry, batch: pa.Table, what: str) -> None:
        """No null key and no key twice within ``batch``."""
        assert entry.key is not None
        for col in entry.key:
            if batch.column(col).null_count:
                raise SchemaMismatchError(
                    f"{what} for table {entry.name}: key column {col!r} holds nulls"
                )
        groups = batch.select(list(entry.key)).group_by(list(entry.key)).aggregate([])
        if groups.num_rows != batch.num_rows:
            dup = _first_duplicate(row_tuples(batch, entry.key))
            raise SchemaMismatchError(
                f"{what} for table {entry.name}: key {entry.key} = {dup} occurs more than once"
            )

    def _check_keyed_change(
        self, entry: TableEntry, files: list[str], stored: pa.Schema,
        dels: pa.Table, ins: pa.Table,
    ) -> None:
        assert entry.key is not None
        key = entry.key
        self._check_keys(entry, dels, "delete batch")
        self._check_keys(entry, ins, "insert batch")
        probe = pa.concat_tables([dels.select(list(key)), ins.select(list(key))])
        found = read_candidates(files, stored, probe, key)
        current = dict(zip(row_tuples(found, key), row_tuples(found, stored.names)))
        deleted = set()
        for k, row in zip(row_tuples(dels, key), row_tuples(dels, stored.names)):
            have = current.get(k)
            if have is None:
                raise SchemaMismatchError(
                    f"delete batch for table {entry.name}: no row with key {key} = {k}"
                )
            if have != row:
                raise SchemaMismatchError(
                    f"delete batch for table {entry.name}: the row with key {key} = {k} "
                    f"is stored as {have}, not {row}"
                )
            deleted.add(k)
        for k in row_tuples(ins, key):
            if k in current and k not in deleted:
                raise SchemaMismatchError(
                    f"insert batch for table {entry.name}: key {key} = {k} already exists"
                )

    def _bag_source(
        self, entry: TableEntry, table: DeltaTable, stored: pa.Schema,
        dels: pa.Table, ins: pa.Table,
    ) -> tuple[pa.Table, pa.Table]:
        """Deletions and insertions of a keyless table with their ``__rid``."""
        cols = [c for c in stored.names if c != ROW_ID]
        files = table.file_uris()
        rid_field = pa.field(ROW_ID, pa.int64(), nullable=False)
        if dels.num_rows:
            found = read_candidates(files, stored, dels, cols)
            ids, missing = assign_row_ids(
                row_tuples(dels, cols), row_tuples(found, cols),
                found.column(ROW_ID).to_pylist(),
            )
            if missing:
                rows = row_tuples(dels, cols)
                shown = [rows[i] for i in missing[:3]]
                raise SchemaMismatchError(
                    f"delete batch for table {entry.name}: {len(missing)} row(s) not stored "
                    f"(or deleted more often than stored), e.g. {shown}"
                )
            dels = dels.append_column(rid_field, pa.array(ids, pa.int64()))
        else:
            dels = dels.append_column(rid_field, pa.array([], pa.int64()))
        start = self._max_row_id(table, files, stored) + 1
        ins = ins.append_column(
            rid_field, pa.array(np.arange(start, start + ins.num_rows, dtype=np.int64))
        )
        return dels.select(stored.names), ins.select(stored.names)

    @staticmethod
    def _max_row_id(table: DeltaTable, files: list[str], stored: pa.Schema) -> int:
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
        schema = self._user_schema(self._stored_schema(table))
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

    def optimize(self, name: str) -> int:
        """Rewrite small files, sorted (Z-ordered) on the cluster columns; a new version
        that changes no data (empty change feed). Returns the version after it."""
        entry = self.catalog.get(name)
        table = self._delta(entry)
        props = self.options.writer_properties()
        if entry.sketch_columns:
            table.optimize.z_order(list(entry.sketch_columns), writer_properties=props,
                                   target_size=self.options.target_file_size)
        else:
            table.optimize.compact(writer_properties=props,
                                   target_size=self.options.target_file_size)
        return self._delta(entry).version()


def _first_duplicate(rows: list[tuple]) -> tuple | None:
    seen: set[tuple] = set()
    for row in rows:
        if row in seen:
            return row
        seen.add(row)
    return None
