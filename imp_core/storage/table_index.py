"""Covering indexes of Delta tables in memory, versioned, shared by the queries that probe them.

A ``TableIndex`` holds some columns of one table keyed on one of them: what a join side
probed in the data layer (``FileJoinSide``) reads of that table, served from memory
instead of the Parquet files (which a probe by a key the table is not clustered on reads
nearly whole). Every query that reads the table by that key shares the index
(``IndexCatalog``: one index per table and key column, reference-counted by the queries
that use it), and each commit of the table is applied to it once (``advance``: the
table's change feed), whatever number of queries read it.

Each reader reads at its own version: a lagging (lazy) query sees the table as of its
version. The index keeps a *base* (the rows at version ``floor``, as counted rows) and a
*log* of the weighted changes of each later version up to ``current``; a read at ``v``
(``floor <= v``) sums the base and the log's versions ``<= v``. ``compact`` folds the
log into the base up to the oldest version a reader still reads (its *pin*).

The base is in memory while the store's indexes fit ``IMP_INDEX_MEMORY_MIB`` in this
process, else on disk: a Parquet file under the store's root clustered by the key's
hash, of which a probe reads only the row groups that may hold its keys
(``index_bases``). Disk bases are immutable and found by table id, key, floor and
columns, so the processes of one store (the query actors) share them, and a restarted
process reuses them instead of reading the table again.

Invariants:
- ``read(v, keys)`` returns exactly the multiset of the table's rows at version ``v``,
  restricted to the index's columns, whose key column equals one of ``keys`` (NULL keys
  never match), or every row when ``keys`` is None. It holds for every
  ``floor <= v``; a read below ``floor`` raises ``IndexVersionError`` (the caller reads
  the files instead), one above ``current`` advances the index first.
- The base's rows are sorted by their key hash (``key_hashes``), with counts > 0; the
  log's versions increase strictly and lie in ``(floor, current]``.
- ``floor`` never passes a pinned reader's version, so a reader keeps every version from
  its pin on.
"""

from __future__ import annotations

import logging
import threading
from pathlib import Path
from typing import Any, Callable, Iterable

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from imp_core.engine.join_index import key_hashes
from imp_core.errors import ImpError
from imp_core.storage.changes import COMMIT_VERSION, to_weighted
from imp_core.storage.index_bases import (
    COUNT,
    DiskBase,
    IndexBase,
    MemoryBase,
    Part,
    consolidate,
    folded,
    member,
    prune,
    sorted_part,
)

log = logging.getLogger(__name__)

# the log is folded into the base when it holds this share of the base's rows, or
# _FOLD_MAX_ROWS (a read scans the log's hashes and the base is searched: folding too
# rarely makes reads slow and the log large, too often makes commits rewrite the base)
_FOLD_SHARE = 0.125
_FOLD_MIN_ROWS = 4096
_FOLD_MAX_ROWS = 1 << 17


class IndexVersionError(ImpError):
    """A read asked for a version the index no longer holds (below its floor)."""


class IndexUnreadableError(IndexVersionError):
    """The index's disk base could not be written or read (a full disk, a damaged
    file): the caller reads the table's files instead, and the index is dropped."""


def _hashes(rows: pa.Table, key: str) -> np.ndarray:
    found, _, _ = key_hashes(rows, (key,))
    return np.asarray(found, dtype=np.int64)


class TableIndex:
    """Columns ``columns`` of ``table`` (which holds ``key``), keyed on ``key``.

    ``directory``: where disk bases of this table and key live (None: memory only);
    ``memory_bytes``: the most bytes the base may hold in memory, a larger one is kept on
    disk (when ``directory`` is set). A disk base another process left in ``directory``
    at a floor <= ``version`` holding the columns is used instead of building one.
    """

    def __init__(self, store: Any, table: str, key: str, columns: Iterable[str],
                 version: int, directory: Path | None = None,
                 memory_bytes: int | None = None):
        schema = store.schema(table)
        wanted = set(columns) | {key}
        self.store = store
        self.table = table
        self.key = key
        self.columns = [c for c in schema.names if c in wanted]
        self.schema = pa.schema([schema.field(c) for c in self.columns])
        self.directory = directory
        self._lock = threading.RLock()
        self.pins: dict[str, int] = {}
        self.reads = 0
        self.commits_applied = 0
        self._log: list[tuple[int, Part]] = []
        self._log_view: tuple[pa.Table, np.ndarray, np.ndarray] | None = None
        self._failed_fold_rows = 0
        found = DiskBase.find(directory, self.columns, version) \
            if directory is not None else None
        if found is not None:
            # the index holds what the file holds (perhaps more than asked for), in the
            # table's column order, as its log will
            held = set(found.columns)
            self.columns = found.columns = [c for c in schema.names if c in held]
            self.schema = pa.schema([schema.field(c) for c in self.columns])
            # a base small enough for memory is loaded (sorted already: no table read)
            fits = memory_bytes is not None and found.memory_bytes() <= memory_bytes
            self._base: IndexBase = MemoryBase(found.part()) if fits else found
            self.floor = self.current = DiskBase.floor_of(found.path)
            self.reused = True
            self.advance(version)
            return
        self.reused = False
        self.floor = self.current = version
        if self._for_disk(version, memory_bytes):
            self._base = self._built_on_disk(version)
            return
        rows = store.read(table, version, columns=self.columns)
        counted = self._counted(rows, np.ones(rows.num_rows, np.int64))
        part = sorted_part(counted, _hashes(counted, key))
        self._base = self._placed(part, memory_bytes)

    def _for_disk(self, version: int, memory_bytes: int | None) -> bool:
        """Whether the table's columns are known, from its files' footers, to be larger
        than ``memory_bytes``: such a base is built on disk a column at a time."""
        measure = getattr(self.store, "column_bytes", None)
        if self.directory is None or memory_bytes is None or measure is None:
            return False
        return measure(self.table, version, self.columns, stop_above=memory_bytes) \
            > memory_bytes

    def _built_on_disk(self, version: int) -> IndexBase:
        """The base at ``version`` written to disk holding one column in memory at a time
        (with the key's hashes and their order): a lineitem index at SF 10 sorted whole
        took 10 GB, a column of it at most 2."""
        keys = self.store.read(self.table, version, columns=[self.key]).cast(
            pa.schema([self.schema.field(self.key)]))
        hashes = _hashes(keys, self.key)
        del keys
        order = np.argsort(hashes, kind="stable")

        def column(name: str) -> pa.ChunkedArray:
            if name == COUNT:
                return pa.chunked_array([np.ones(len(order), np.int64)])
            read = self.store.read(self.table, version, columns=[name])
            return read.column(0).cast(self.schema.field(name).type)

        schema = self.schema.append(pa.field(COUNT, pa.int64()))
        return self._written(lambda: DiskBase.write_columns(
            self.directory, self.floor, schema, hashes[order], order, column, self.columns))

    def _placed(self, part: Part, memory_bytes: int | None) -> IndexBase:
        if self.directory is None or memory_bytes is None \
                or part.rows.nbytes + part.hashes.nbytes <= memory_bytes:
            return MemoryBase(part)
        return self._written(lambda: DiskBase.write(self.directory, self.floor, part,
                                                    self.columns))

    def _written(self, write: Callable[[], DiskBase]) -> DiskBase:
        """The base ``write`` puts in this index's directory, which supersedes the others
        there; a write the disk refuses raises ``IndexUnreadableError``."""
        try:
            base = write()
        except OSError as exc:
            raise IndexUnreadableError(
                f"index of {self.table} on {self.key}: cannot write its file in "
                f"{self.directory} ({exc}); read the table's files instead") from exc
        prune(self.directory, base.path)
        return base

    # -- building ---------------------------------------------------------------------
    def _counted(self, rows: pa.Table, weights: np.ndarray) -> pa.Table:
        rows = rows.select(self.columns).cast(self.schema)
        return rows.append_column(COUNT, pa.array(weights, pa.int64()))

    def _hash(self, rows: pa.Table) -> np.ndarray:
        return _hashes(rows, self.key)

    # -- keeping up -------------------------------------------------------------------
    def advance(self, version: int | None = None) -> int:
        """Apply the table's commits up to ``version`` (default: the latest); returns
        the index's current version. Each commit is read from the change feed once."""
        with self._lock:
            target = self.store.version(self.table) if version is None else version
            if target <= self.current:
                return self.current
            changes = self.store.changes(self.table, self.current, target)
            if changes.num_rows:
                commits = changes.column(COMMIT_VERSION).to_numpy()
                for v in np.unique(commits):
                    mask = pa.array(commits == v)
                    rows, weights = to_weighted(changes.filter(mask))
                    part = self._counted(rows, weights)
                    self._log.append((int(v), Part(part, self._hash(part))))
                    self.commits_applied += 1
                self._log_view = None
            self.current = target
            self._fold_if_due()
            return self.current

    def pin(self, reader: str, version: int) -> None:
        """``reader`` reads at ``version`` from now on (the index keeps it)."""
        with self._lock:
            if version < self.floor:
                raise IndexVersionError(
                    f"index of {self.table} on {self.key}: version {version} is below the "
                    f"oldest one held ({self.floor})")
            self.pins[reader] = version

    def unpin(self, reader: str) -> None:
        with self._lock:
            self.pins.pop(reader, None)
            self._fold_if_due()

    def _log_rows(self) -> int:
        return sum(p.rows.num_rows for _, p in self._log)

    def _fold_if_due(self) -> None:
        rows = self._log_rows()
        due = min(_FOLD_MAX_ROWS, max(_FOLD_MIN_ROWS, _FOLD_SHARE * self._base.num_rows))
        # after a fold that could not write its file, wait for the log to double
        if rows and rows >= max(due, 2 * self._failed_fold_rows):
            self.compact()

    def compact(self) -> None:
        """Fold the log into the base up to the oldest pinned version (``current``
        when no reader is pinned); a disk base is written anew at that floor."""
        with self._lock:
            upto = min(self.pins.values(), default=self.current)
            done = [p for v, p in self._log if v <= upto]
            if not done:
                return
            part = folded(self._base.part(), done, self.columns, self._hash)
            if isinstance(self._base, DiskBase):
                directory = self._base.path.parent
                try:
                    base: IndexBase = DiskBase.write(directory, upto, part, self.columns)
                except OSError as exc:  # the base and log stay as they were: exact
                    self._failed_fold_rows = self._log_rows()
                    log.warning("index of %s on %s: cannot fold its log into a new file "
                                "(%s); the log is kept", self.table, self.key, exc)
                    return
                prune(directory, base.path)
            else:
                base = MemoryBase(part)
            self._base = base
            self._log = [(v, p) for v, p in self._log if v > upto]
            self._log_view = None
            self.floor = upto
            self._failed_fold_rows = 0

    # -- reading ----------------------------------------------------------------------
    def covers(self, columns: Iterable[str]) -> bool:
        return set(columns) <= set(self.columns)

    def _logged(self) -> tuple[pa.Table, np.ndarray, np.ndarray]:
        """The log as one table with each row's hash and version (built once per
        change of the log: a read filters it with two vector operations)."""
        if self._log_view is None:
            parts = [p for _, p in self._log]
            rows = pa.concat_tables([p.rows for p in parts]).combine_chunks() if parts \
                else self._counted(self.schema.empty_table(), np.zeros(0, np.int64))
            hashes = np.concatenate([p.hashes for p in parts]) if parts \
                else np.zeros(0, np.int64)
            versions = np.concatenate([np.full(p.rows.num_rows, v, np.int64)
                                       for v, p in self._log]) if parts \
                else np.zeros(0, np.int64)
            self._log_view = (rows, hashes, versions)
        return self._log_view

    def read(self, version: int, keys: pa.Array | None = None,
             columns: list[str] | None = None, reader: str | None = None) -> pa.Table:
        """The table's rows at ``version`` whose key is among ``keys`` (all rows when
        None), as ``columns`` (default: all the index holds), each row as often as the
        table holds it. ``reader``: pin that reader at ``version``."""
        with self._lock:
            if version > self.current:
                self.advance(version)
            if version < self.floor:
                raise IndexVersionError(
                    f"index of {self.table} on {self.key}: version {version} is below the "
                    f"oldest one held ({self.floor}); read the table's files instead")
            if reader is not None:
                self.pins[reader] = version
            self.reads += 1
            wanted = None if keys is None else _probe_hashes(keys, self)
            try:
                parts = [self._base.rows_for(wanted)]
            except (OSError, pa.ArrowException) as exc:
                raise IndexUnreadableError(
                    f"index of {self.table} on {self.key}: its file cannot be read "
                    f"({exc}); read the table's files instead") from exc
            if self._log:
                rows, hashes, versions = self._logged()
                mask = versions <= version
                if wanted is not None:
                    mask &= member(hashes, wanted)
                if mask.any():
                    parts.append(rows.filter(pa.array(mask)))
        if keys is not None:
            # NULL keys match no probe, and hashes may collide: compare the values
            probe = keys.cast(self.schema.field(self.key).type).drop_null()
            parts = [p.filter(pc.is_in(p.column(self.key), value_set=probe)) for p in parts]
        found = parts[0]
        if len(parts) > 1 and parts[1].num_rows:
            # deletions in the log cancel rows of the base: only the rows of keys the log
            # holds are summed with it, the others pass as they are
            logged = parts[1]
            touched = pc.is_in(found.column(self.key),
                               value_set=pc.unique(logged.column(self.key)))
            found = pa.concat_tables([
                found.filter(pc.invert(touched)),
                consolidate(pa.concat_tables([found.filter(touched), logged]),
                            self.columns)])
        out = _expand(found)
        return out.select(columns) if columns is not None else out

    # -- accounting -------------------------------------------------------------------
    def nbytes(self) -> int:
        """Bytes held in memory (a disk base counts its footer's ranges only)."""
        with self._lock:
            return self._base.nbytes() + sum(p.rows.nbytes + p.hashes.nbytes
                                              for _, p in self._log)

    def describe(self) -> dict[str, Any]:
        with self._lock:
            base = self._base
            return {"table": self.table, "key": self.key, "columns": list(self.columns),
                    "where": base.kind, "floor": self.floor, "current": self.current,
                    "base_rows": base.num_rows, "log_versions": len(self._log),
                    "log_rows": self._log_rows(), "bytes": self.nbytes(),
                    "disk_bytes": base.disk_bytes(), "reused": self.reused,
                    "readers": sorted(self.pins), "reads": self.reads,
                    "commits_applied": self.commits_applied}


def _probe_hashes(keys: pa.Array, index: TableIndex) -> np.ndarray:
    typed = keys.cast(index.schema.field(index.key).type).drop_null()
    return np.unique(_hashes(pa.table({index.key: typed}), index.key))


def _expand(rows: pa.Table) -> pa.Table:
    """Each row repeated by its count, without the count column."""
    counts = rows.column(COUNT).to_numpy()
    data = rows.drop_columns([COUNT])
    if len(counts) == 0 or np.all(counts == 1):
        return data
    return data.take(pa.array(np.repeat(np.arange(len(counts)), counts)))
