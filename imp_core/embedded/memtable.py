"""An in-memory table whose deletions cost about the rows deleted, with or without a key.

Rows live in ``chunks`` (Arrow tables, appended on insert) plus a liveness bitmap over
global row positions; a row index is built once, on the first call that needs it, and
then kept up to date by every change instead of being rebuilt.

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
                alive = self.live[start:start + chunk.num_rows]
                for i, ident in enumerate(self._identities(chunk)):
                    if alive[i]:
                        index.setdefault(ident, []).append(start + i)
                self.indexed_rows += chunk.num_rows
            self._index = index
        return self._index

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
