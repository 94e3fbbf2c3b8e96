"""An in-memory table whose deletions cost about the rows deleted, with or without a key.

Rows live in ``chunks`` (Arrow tables, appended on insert) plus a liveness bitmap over
global row positions. A keyed table finds the rows a change names by a hash join of their
keys with the live rows (in Arrow, O(table) in C++ per change) for its first
``JOIN_LOOKUPS`` changes, and then builds a row index (O(table) in Python once, O(rows
changed) per change after): a ski rental, so a table changed a few times (a test, a
short session) never pays for the index, and a long stream pays for it once. A table
without a key, or a key of a type the join cannot match by value, uses the index from
the first change. Once built, the index is kept up to date by every change.

Invariants:
- Global position ``p`` lies in chunk ``i`` iff ``starts[i] <= p < starts[i + 1]``;
  ``live`` has one entry per stored position and ``live[p]`` says whether row ``p`` is
  still in the table. ``data`` is the live rows in position order.
- When built, the index maps the identity of each live row (its key columns for a keyed
  table, all columns otherwise, as a tuple of Python values) to the positions of the live
  rows with that identity, and holds no dead position; on a keyed table each identity
  has exactly one position.
- ``prepare`` never changes the table; ``commit`` applies a prepared change entirely.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa

from imp_core.errors import SchemaMismatchError

MAX_CHUNKS = 64  # more chunks than this are concatenated (positions stay the same)
MIN_PURGE = 1024  # dead rows are dropped once they exceed this and the live row count
# changes looked up by a join before the index is built: a join costs about 1/30 of the
# index's build (Arrow's hash join against a loop of Python tuples)
JOIN_LOOKUPS = 16


@dataclass(frozen=True)
class Change:
    """A checked deletion plus insertion: what ``commit`` applies and the delta it implies."""

    positions: np.ndarray  # int64 positions of the deleted rows, in the order given
    removed: pa.Table  # the stored rows at ``positions`` (keyed deletes match by key only)
    inserts: pa.Table
    used: Counter  # identity -> how many of its indexed positions are deleted


class MemTable:
    """One in-memory table (see the module docstring for its invariants)."""

    def __init__(self, name: str, data: pa.Table, key: tuple[str, ...] | None,
                 domains: dict[str, tuple[Any, Any]] | None = None):
        self.name = name
        self.key = key
        self.domains = dict(domains or {})  # declared value ranges, for the safety check
        self.schema = data.schema
        data = data.combine_chunks()
        self.chunks: list[pa.Table] = [data] if data.num_rows else []
        self.starts = [0]
        if data.num_rows:
            self.starts.append(data.num_rows)
        self.live = np.ones(data.num_rows, dtype=bool)
        self._index: dict[tuple, list[int]] | None = None
        self._data: pa.Table | None = data
        self.indexed_rows = 0  # rows ever hashed into the index (a cost measure for tests)
        self.joined_lookups = 0  # changes found by a join (at most JOIN_LOOKUPS)

    # -- reading ------------------------------------------------------------------------
    @property
    def num_rows(self) -> int:
        return int(self.live.sum())

    @property
    def data(self) -> pa.Table:
        """The live rows in position order (one chunk; cached until the next change)."""
        if self._data is None:
            if not self.chunks:
                self._data = self.schema.empty_table()
            else:
                whole = pa.concat_tables(self.chunks)
                if not self.live.all():
                    whole = whole.filter(pa.array(self.live))
                self._data = whole.combine_chunks()
        return self._data

    def _identity_columns(self) -> list[str]:
        return list(self.key) if self.key else list(self.schema.names)

    def _identities(self, rows: pa.Table) -> list[tuple]:
        cols = [rows.column(c).to_pylist() for c in self._identity_columns()]
        return list(zip(*cols)) if cols else [() for _ in range(rows.num_rows)]

    def _ensure_index(self) -> dict[tuple, list[int]]:
        if self._index is None:
            index: dict[tuple, list[int]] = {}
            for chunk, start in zip(self.chunks, self.starts):
                alive = np.flatnonzero(self.live[start:start + chunk.num_rows])
                rows = chunk if len(alive) == chunk.num_rows else chunk.take(alive)
                positions = (alive + start).tolist()
                idents = self._identities(rows)
                if self.key:  # one live row per key: no list to extend
                    index.update(zip(idents, ([p] for p in positions)))
                else:
                    for ident, p in zip(idents, positions):
                        index.setdefault(ident, []).append(p)
                self.indexed_rows += chunk.num_rows
            self._index = index
        return self._index

    def _joinable(self, inserts: pa.Table, deletes: pa.Table) -> bool:
        """Whether this change's rows can be found by a join on the key: a keyed table
        not yet indexed and under its join budget, and keys whose equality is Arrow's
        (no NULL, which a join never matches, and no floating point: NaN, -0.0)."""
        if self.key is None or self.joined_lookups >= JOIN_LOOKUPS:
            return False
        for c in self.key:
            t = self.schema.field(c).type
            if not (pa.types.is_integer(t) or pa.types.is_string(t)
                    or pa.types.is_large_string(t) or pa.types.is_date(t)
                    or pa.types.is_timestamp(t) or pa.types.is_decimal128(t)
                    or pa.types.is_boolean(t)):
                return False
            if deletes.column(c).null_count or inserts.column(c).null_count:
                return False
        return True

    def _join_keys(self, deletes: pa.Table, inserts: pa.Table) -> np.ndarray:
        """Positions of the stored rows ``deletes`` name (by key, in their order); raises
        as ``prepare`` does for a key not stored (or named twice) and a duplicate key."""
        key = list(self.key or ())
        live = np.flatnonzero(self.live)
        stored = self.data.select(key).append_column("__j", pa.array(np.arange(len(live))))
        positions = np.zeros(deletes.num_rows, dtype=np.int64)
        if deletes.num_rows:
            named = deletes.select(key).append_column(
                "__i", pa.array(np.arange(deletes.num_rows)))
            hit = named.join(stored, key, join_type="inner", use_threads=False)
            i, j = hit.column("__i").to_numpy(), hit.column("__j").to_numpy()
            found = np.zeros(deletes.num_rows, dtype=bool)
            found[i] = True
            # keys are unique among the stored rows, so a row matched twice was named twice
            twice = len(np.unique(j)) < len(j)
            if not found.all() or twice:
                bad = int(np.flatnonzero(~found)[0]) if not found.all() else \
                    int(self._first_repeat(deletes))
                ident = dict(zip(key, self._identities(deletes.slice(bad, 1))[0]))
                raise SchemaMismatchError(f"cannot delete from {self.name}: no row {ident}")
            positions[i] = live[j]
        if inserts.num_rows:
            fresh = inserts.select(key).append_column(
                "__i", pa.array(np.arange(inserts.num_rows)))
            clash = fresh.join(stored, key, join_type="inner", use_threads=False)
            gone = set(positions.tolist())
            kept = [int(r) for r, j in zip(clash.column("__i").to_numpy(),
                                           clash.column("__j").to_numpy())
                    if int(live[j]) not in gone]
            bad = kept[0] if kept else self._first_repeat(inserts)
            if bad is not None:
                ident = dict(zip(key, self._identities(inserts.slice(bad, 1))[0]))
                raise SchemaMismatchError(f"duplicate key in {self.name}: {ident}")
        return positions

    def _first_repeat(self, rows: pa.Table) -> int | None:
        """Index of the first row whose key an earlier row of ``rows`` already has."""
        key = list(self.key or ())
        counts = rows.select(key).group_by(key, use_threads=False).aggregate([([], "count_all")])
        if counts.num_rows == rows.num_rows:
            return None
        seen: set[tuple] = set()
        for i, ident in enumerate(self._identities(rows)):
            if ident in seen:
                return i
            seen.add(ident)
        return None

    def _take(self, positions: np.ndarray) -> pa.Table:
        """The stored rows at ``positions`` (in that order), touching only their chunks."""
        if len(positions) == 0:
            return self.schema.empty_table()
        chunk_of = np.searchsorted(np.asarray(self.starts), positions, side="right") - 1
        order = np.argsort(chunk_of, kind="stable")
        parts = []
        for c in np.unique(chunk_of):
            local = positions[order][chunk_of[order] == c] - self.starts[c]
            parts.append(self.chunks[c].take(pa.array(local, type=pa.int64())))
        gathered = pa.concat_tables(parts)
        inverse = np.empty_like(order)
        inverse[order] = np.arange(len(order))
        return gathered.take(pa.array(inverse, type=pa.int64())).combine_chunks()

    # -- changing -----------------------------------------------------------------------
    def prepare(self, inserts: pa.Table, deletes: pa.Table) -> Change:
        """Check a deletion (one stored occurrence per row) and insertion; change nothing.

        Both batches already have this table's schema. Raises ``SchemaMismatchError`` for
        a deleted row that is not stored or an inserted key that would occur twice.
        """
        cols = self._identity_columns()
        need_index = deletes.num_rows > 0 or (self.key is not None and inserts.num_rows > 0)
        if need_index and self._index is None and self._joinable(inserts, deletes):
            self.joined_lookups += 1
            positions = self._join_keys(deletes, inserts)
            return Change(positions, self._take(positions), inserts, Counter())
        index = self._ensure_index() if need_index else {}
        used: Counter = Counter()
        positions = np.zeros(deletes.num_rows, dtype=np.int64)
        for i, ident in enumerate(self._identities(deletes) if deletes.num_rows else ()):
            hits = index.get(ident, ())
            if used[ident] >= len(hits):
                raise SchemaMismatchError(
                    f"cannot delete from {self.name}: no row {dict(zip(cols, ident))}")
            used[ident] += 1
            positions[i] = hits[-used[ident]]
        if self.key is not None and inserts.num_rows:
            seen: set[tuple] = set()
            for ident in self._identities(inserts):
                if ident in seen or len(index.get(ident, ())) > used[ident]:
                    raise SchemaMismatchError(
                        f"duplicate key in {self.name}: {dict(zip(cols, ident))}")
                seen.add(ident)
        return Change(positions, self._take(positions), inserts, used)

    def commit(self, change: Change) -> None:
        """Apply a change from ``prepare`` (no other change may come in between)."""
        self.live[change.positions] = False
        if self._index is not None:
            for ident, n in change.used.items():
                hits = self._index[ident]
                del hits[len(hits) - n:]
                if not hits:
                    del self._index[ident]
        ins = change.inserts
        if ins.num_rows:
            start = self.starts[-1]
            self.chunks.append(ins.combine_chunks())
            self.starts.append(start + ins.num_rows)
            self.live = np.concatenate([self.live, np.ones(ins.num_rows, dtype=bool)])
            if self._index is not None:
                for i, ident in enumerate(self._identities(ins)):
                    self._index.setdefault(ident, []).append(start + i)
                self.indexed_rows += ins.num_rows
        if len(change.positions) or ins.num_rows:
            self._data = None
        self._compact()

    def _compact(self) -> None:
        dead = len(self.live) - self.num_rows
        if dead > max(MIN_PURGE, len(self.live) - dead):
            # positions change: drop the index, the next call that needs it rebuilds it
            # (at most once per this many deletions, so O(1) per deleted row amortized)
            data = self.data
            self.chunks = [data] if data.num_rows else []
            self.starts = [0, data.num_rows] if data.num_rows else [0]
            self.live = np.ones(data.num_rows, dtype=bool)
            self._index = None
        elif len(self.chunks) > MAX_CHUNKS:
            whole = pa.concat_tables(self.chunks).combine_chunks()
            self.chunks = [whole]
            self.starts = [0, whole.num_rows]
