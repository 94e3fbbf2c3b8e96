"""Table versions and their changes, pulled once and shared by every query that needs them.

``VersionProbe`` learns of new table versions, whoever committed them: for a table in a
local folder it checks whether the next commit file of the Delta log exists (a ``stat``,
microseconds), otherwise it asks the table.
``DeltaFeed`` serves the change feed of any version range ``(a, b]`` of a table as one
weighted batch of full rows, or of the columns asked (read narrow). It caches the
changes per version range it pulled (split per version when the source says which
version each row belongs to), so a range is read from storage once however many queries
need it, and queries at different versions reuse each other's pulls. Where a range is
read from (change files in-process, or Spark for large ones) is the one policy of
``imp_core.storage.ChangeReader``.
Invariant: ``changes(t, a, b, columns)`` equals the table's change feed of ``(a, b]``
exactly (rows with weight +1 per insertion and -1 per deletion), cut to ``columns`` when
given, whatever is cached.
"""

from __future__ import annotations

import math
import os
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, Callable, Collection

import numpy as np
import pyarrow as pa

from imp_core.engine.operators.base import TableDelta
from imp_core.errors import DomainViolationError, SchemaMismatchError
from imp_core.storage.batches import check_domains
from imp_core.storage.change_reader import ChangeReader, concat_deltas


class VersionProbe:
    """Latest committed version of each table, cheaply.

    ``latest(t, max_age)`` may answer from what it found at most ``max_age`` seconds ago
    instead of looking at the log again: a sketch request that comes thousands of times a
    second then costs no file system call each (a ``stat`` releases the interpreter lock,
    and under many concurrent calls every release is a costly thread switch). Versions the
    service commits itself (``note``) are known at once, whatever ``max_age``."""

    def __init__(self, store: Any):
        self.store = store
        self._known: dict[str, int] = {}
        self._checked: dict[str, float] = {}  # when the log was last looked at
        self._logs: dict[str, str | None] = {}
        self._lock = threading.Lock()

    def _log_dir(self, table: str) -> str | None:
        if table not in self._logs:
            location = self.store.entry(table).location
            local = "://" not in location or location.startswith("file://")
            path = location[len("file://"):] if location.startswith("file://") else location
            self._logs[table] = os.path.join(path, "_delta_log") if local else None
        return self._logs[table]

    def latest(self, table: str, max_age: float = 0.0) -> int:
        if max_age > 0:  # dict reads are atomic: the frequent answer takes no lock
            known = self._known.get(table)
            if known is not None and \
                    time.monotonic() - self._checked.get(table, -math.inf) < max_age:
                return known
        with self._lock:
            known = self._known.get(table)
            self._checked[table] = time.monotonic()
            log_dir = self._log_dir(table)
            if known is None or log_dir is None:
                v = self.store.version(table)
            else:
                v = known
                while os.path.exists(os.path.join(log_dir, f"{v + 1:020d}.json")):
                    v += 1
            self._known[table] = v
            return v

    def committed_at(self, table: str, version: int) -> float | None:
        """Unix time at which ``version`` of ``table`` was committed: the time its log
        entry was written (None for tables in an object store, or if the entry is gone)."""
        with self._lock:
            log_dir = self._log_dir(table)
        if log_dir is None:
            return None
        try:
            return os.stat(os.path.join(log_dir, f"{version:020d}.json")).st_mtime
        except OSError:
            return None

    def note(self, table: str, version: int) -> None:
        """A version this process committed itself."""
        with self._lock:
            if version > self._known.get(table, -1):
                self._known[table] = version

    def forget(self, table: str) -> None:
        with self._lock:
            self._known.pop(table, None)
            self._logs.pop(table, None)


@dataclass
class _Entry:
    start: int  # changes of versions (start, end]
    end: int
    delta: TableDelta
    nbytes: int
    used: float
    columns: frozenset[str] | None = None  # the columns its rows hold (None: all)

    def covers(self, want: frozenset[str] | None) -> bool:
        return self.columns is None or (want is not None and want <= self.columns)


@dataclass
class FeedStats:
    pulls: int = 0  # reads from storage
    pulled_rows: int = 0
    hits: int = 0  # ranges served (partly) from the cache
    spark_pulls: int = 0
    pull_seconds: float = 0.0


class DeltaFeed:
    def __init__(self, store: Any, spark_source: Callable[[], Any] | None = None,
                 spark_min_bytes: int = 16 << 20, cache_bytes: int = 256 << 20,
                 path: str = "auto"):
        self.store = store
        # the Spark source is made on first use: starting Spark costs seconds
        self.reader = ChangeReader(store, spark_source, spark_min_bytes, path)
        self.cache_bytes = cache_bytes
        self._entries: dict[str, dict[int, _Entry]] = {}
        self._lru: OrderedDict[tuple[str, int], None] = OrderedDict()
        self._bytes = 0
        self._locks: dict[str, threading.Lock] = {}
        self._asked: dict[str, frozenset[str]] = {}  # table -> the columns asked of it
        self._guard = threading.Lock()
        self.stats = FeedStats()

    def _lock(self, table: str) -> threading.Lock:
        with self._guard:
            return self._locks.setdefault(table, threading.Lock())

    def changes(self, table: str, start: int, end: int,
                columns: Collection[str] | None = None) -> TableDelta:
        """The change feed of versions ``(start, end]`` of ``table``: whole rows, or only
        ``columns`` of them (in the table's order). A cached range that holds fewer
        columns than asked is read again, with the columns asked."""
        want = None if columns is None else frozenset(columns)
        schema = self.reader.columns_schema(table, want)  # refuses an unknown column
        if end <= start:
            return TableDelta.inserts(schema.empty_table())
        with self._lock(table):
            # a read takes every column asked of this table so far: queries asking for
            # different columns then share one read instead of replacing each other's
            read = None
            if want is not None:
                read = self._asked[table] = want | self._asked.get(table, frozenset())
            parts: list[TableDelta] = []
            cur = start
            hit = False
            while cur < end:
                entry = self._entries.get(table, {}).get(cur)
                if entry is not None and entry.end <= end and entry.covers(want):
                    entry.used = time.monotonic()
                    self._lru.move_to_end((table, cur))
                    parts.append(entry.delta)
                    cur = entry.end
                    hit = True
                    continue
                nxt = min((s for s in self._entries.get(table, {}) if cur < s < end),
                          default=end)
                parts.extend(self._pull(table, cur, nxt, read))
                cur = nxt
            if hit:
                self.stats.hits += 1
        # parts may hold more columns than asked (a range cached whole): the same columns
        # each before they are put together
        return concat_deltas([_project(p, want) for p in parts])

    def count(self, table: str, start: int, end: int) -> int:
        """The rows changed in versions ``(start, end]`` of ``table`` (an update counts
        twice), read with the columns the queries read: then it is their read, shared."""
        return count_changes(self.changes(table, start, end, self._asked.get(table)))

    def _pull(self, table: str, start: int, end: int,
              columns: frozenset[str] | None = None) -> list[TableDelta]:
        """Read ``(start, end]`` from storage (``columns``; all with None), check the
        declared domains of the columns read, cache it, return it (in version order).
        A column no query reads is not read for its domain: no sketch depends on its
        values, and a query that comes to read it has it read (and checked) from then
        on (its bootstrap reads the table as it is)."""
        t0 = time.perf_counter()
        out: list[TableDelta] = []
        domains = self._domains(table)
        for a, b, delta in self.reader.pieces(table, start, end, columns):
            self._check_domains(table, a, b, delta, domains)
            self._put(table, a, b, delta, columns)
            out.append(delta)
        if self.reader.last_path == "spark":
            self.stats.spark_pulls += 1
        self.stats.pulls += 1
        self.stats.pull_seconds += time.perf_counter() - t0
        return out

    def _check_domains(self, table: str, start: int, end: int, delta: TableDelta,
                       domains: dict) -> None:
        """Rows another writer inserted must lie in the table's declared domains (the
        service's own commits are checked before they are made): a sketch that a domain
        made safe is never maintained over a value outside it."""
        if not domains or len(delta) == 0:
            return
        inserted = delta.rows.filter(pa.array(delta.weights > 0))
        try:
            check_domains(inserted, domains, table, f"versions {start + 1}..{end}")
        except SchemaMismatchError as exc:
            raise DomainViolationError(
                f"{exc}, written by another writer past the domain's CHECK constraint: "
                f"queries reading {table} are not maintained over it; delete or fix the "
                "rows, then drop and register the queries again") from None

    def _domains(self, table: str) -> dict:
        entry = getattr(self.store, "entry", None)
        return dict(entry(table).domains or {}) if entry is not None else {}

    @property
    def last_path(self) -> str:
        return self.reader.last_path

    @property
    def path(self) -> str:
        """Where ranges are read from: "auto" (by size), "direct" or "spark"."""
        return self.reader.path

    @path.setter
    def path(self, value: str) -> None:
        self.reader.path = value  # type: ignore[assignment]

    def schema(self, table: str) -> pa.Schema:
        """The table's user schema (cached: a table's schema never changes)."""
        return self.reader.schema(table)

    def record(self, table: str, version: int, delta: TableDelta) -> None:
        """The changes of ``version``, known to the caller who committed them (saves the
        read); must equal what the change feed of that version holds."""
        with self._lock(table):
            self._put(table, version - 1, version, delta)

    def _put(self, table: str, start: int, end: int, delta: TableDelta,
             columns: frozenset[str] | None = None) -> None:
        nbytes = delta.rows.nbytes + delta.weights.nbytes
        self.stats.pulled_rows += len(delta)
        entries = self._entries.setdefault(table, {})
        old = entries.get(start)
        if old is not None:
            self._bytes -= old.nbytes
        entries[start] = _Entry(start, end, delta, nbytes, time.monotonic(), columns)
        self._lru[(table, start)] = None
        self._lru.move_to_end((table, start))
        self._bytes += nbytes
        while self._bytes > self.cache_bytes and len(self._lru) > 1:
            (t, s), _ = self._lru.popitem(last=False)
            gone = self._entries.get(t, {}).pop(s, None)
            if gone is not None:
                self._bytes -= gone.nbytes

    def prune(self, table: str, below: int) -> None:
        """Forget cached changes of versions no query needs any more (all at ``below``+)."""
        with self._lock(table):
            entries = self._entries.get(table, {})
            for s in [s for s, e in entries.items() if e.end <= below]:
                self._bytes -= entries.pop(s).nbytes
                self._lru.pop((table, s), None)

    def forget(self, table: str) -> None:
        """Drop the cached changes of ``table`` (the next request reads them from the
        change files again); its schema stays cached, as a table's schema never changes."""
        with self._lock(table):
            for s, e in self._entries.pop(table, {}).items():
                self._bytes -= e.nbytes
                self._lru.pop((table, s), None)

    def cached_bytes(self) -> int:
        return self._bytes


def count_changes(delta: TableDelta) -> int:
    return int(np.abs(np.asarray(delta.weights)).sum()) if len(delta) else 0


def _project(delta: TableDelta, want: frozenset[str] | None) -> TableDelta:
    """``delta`` with only the columns in ``want`` (all with None), in its order."""
    if want is None or len(want) == delta.rows.num_columns:
        return delta
    return TableDelta(delta.rows.select([n for n in delta.rows.column_names if n in want]),
                      delta.weights)
