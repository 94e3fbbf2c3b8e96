"""What preparing a query learns by reading a sketch column, kept for the next query
sketched on the same column at the same table version.

Preparing a query with an equi-depth partition of ``table.column`` reads the whole
column: for the memory estimate's exact statistics of it (``column_stats``) and for the
partition's split points (``RangePartition.equi_depth``). At SF 10, lineitem's
``l_orderkey`` (60 M values) took 2 to 3 s of each registration, and most TPC-H queries
are sketched on it. A Delta table version never changes, so what was learned of a column
at a version holds for every later registration at that version: the statistics, and
the partition for each fragment count asked.

Invariant: an entry is keyed by the store, the Delta table id (a table created anew has
another), the version and the column, and holds exactly what reading that column at that
version gives; the least recently used entries are dropped past ``CAPACITY``. Safe to use
from several threads (registrations of different queries run concurrently).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Hashable

from imp_core.estimate.memory import ColumnStats
from imp_core.sketch.partition import RangePartition

CAPACITY = 64  # columns at versions; an entry is a few KB (1,000 split points)


@dataclass
class Learned:
    """A column at a version: its statistics (once read) and equi-depth partitions by
    fragment count."""

    stats: ColumnStats | None = None
    partitions: dict[int, RangePartition] = field(default_factory=dict)


class SketchColumns:
    """The process's memo of ``Learned`` column facts (see the module docstring)."""

    def __init__(self, capacity: int = CAPACITY):
        self.capacity = capacity
        self._entries: OrderedDict[Hashable, Learned] = OrderedDict()
        self._lock = threading.Lock()

    def stats(self, key: Hashable | None) -> ColumnStats | None:
        with self._lock:
            found = self._touch(key)
            return None if found is None else found.stats

    def partition(self, key: Hashable | None, fragments: int) -> RangePartition | None:
        with self._lock:
            found = self._touch(key)
            return None if found is None else found.partitions.get(fragments)

    def keep_stats(self, key: Hashable | None, stats: ColumnStats) -> None:
        if key is not None:
            with self._lock:
                self._entry(key).stats = stats

    def keep_partition(self, key: Hashable | None, fragments: int,
                       part: RangePartition) -> None:
        if key is not None:
            with self._lock:
                self._entry(key).partitions[fragments] = part

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()

    def _touch(self, key: Hashable | None) -> Learned | None:
        if key is None:
            return None
        found = self._entries.get(key)
        if found is not None:
            self._entries.move_to_end(key)
        return found

    def _entry(self, key: Hashable) -> Learned:
        found = self._touch(key)
        if found is None:
            found = self._entries[key] = Learned()
            while len(self._entries) > self.capacity:
                self._entries.popitem(last=False)
        return found


LEARNED = SketchColumns()
