"""Per-row fragment sets in compressed sparse row (CSR) form.

A row's sketch annotation is a set of global fragment ids. Rows from a table access
hold exactly one id; joins concatenate the sets of both sides; aggregation emits the
union over a group. CSR keeps all of these vectorized.

Invariants: ``offsets`` is int64, non-decreasing, ``offsets[0] == 0`` and
``offsets[-1] == len(values)``; ``values`` is int32; within a row ids are distinct.
One id per row (a table's rows) is held without offsets (``stored_offsets`` None: the
offsets are ``0..n``, made only when asked for), which spares 8 bytes a row of join
sides holding millions of table rows.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Iterable, Sequence

import numpy as np
from pyroaring import BitMap


def set_key(ids: Iterable[int]) -> bytes:
    """A fragment set as a key for operators holding rows in Python: its distinct ids,
    ascending, as big-endian int32 bytes. Keys hash and compare equal as the sets do,
    and, ids being non-negative, order bytewise as the sets' sorted tuples (a shorter
    prefix first), which top-k's total order needs (``imp_core.engine.ordering``)."""
    ordered = sorted(set(ids))
    return struct.pack(f">{len(ordered)}i", *ordered)


def key_ids(key: bytes) -> tuple[int, ...]:
    """The ids of a ``set_key``, ascending."""
    return struct.unpack(f">{len(key) // 4}i", key)


# the most (row, id) marks ``deduplicated`` sets in a dense array (bytes) before it sorts
_DENSE_MARKS = 1 << 25
_SPARSE_MARKS = 32


@dataclass(frozen=True, eq=False)
class Annotation:
    stored_offsets: np.ndarray | None  # int64, len n + 1; None: one id per row
    values: np.ndarray  # int32

    @property
    def offsets(self) -> np.ndarray:
        if self.stored_offsets is None:
            return np.arange(len(self.values) + 1, dtype=np.int64)
        return self.stored_offsets

    # -- construction -------------------------------------------------------------------
    @staticmethod
    def empty(n: int = 0) -> Annotation:
        return Annotation(np.zeros(n + 1, dtype=np.int64), np.zeros(0, dtype=np.int32))

    @staticmethod
    def singletons(ids: np.ndarray) -> Annotation:
        """One fragment per row (the result of ``annotate`` on a base table)."""
        return Annotation(None, np.asarray(ids, dtype=np.int32))

    def compact(self) -> Annotation:
        """The same sets in less memory: one id per row without offsets; all rows empty
        with offsets as a read-only view of one zero."""
        if self.stored_offsets is None or self.stored_offsets.strides == (0,):
            return self
        n = len(self)
        if n and len(self.values) == 0:
            return Annotation(np.broadcast_to(np.int64(0), n + 1), self.values)
        if n and self.is_singleton():
            return Annotation(None, self.values)
        return self

    def nbytes(self) -> int:
        """Bytes held (offsets that are implicit or a view of one value hold none)."""
        o = self.stored_offsets
        held = 0 if o is None or o.strides == (0,) else o.nbytes
        return held + self.values.nbytes

    @staticmethod
    def from_sets(sets: Sequence[Iterable[int]]) -> Annotation:
        lists = [sorted(set(s)) for s in sets]
        lengths = np.fromiter((len(x) for x in lists), dtype=np.int64, count=len(lists))
        offsets = np.zeros(len(lists) + 1, dtype=np.int64)
        np.cumsum(lengths, out=offsets[1:])
        flat = [v for x in lists for v in x]
        return Annotation(offsets, np.asarray(flat, dtype=np.int32))

    @staticmethod
    def from_bitmaps(maps: Sequence[BitMap]) -> Annotation:
        lengths = np.fromiter((len(m) for m in maps), dtype=np.int64, count=len(maps))
        offsets = np.zeros(len(maps) + 1, dtype=np.int64)
        np.cumsum(lengths, out=offsets[1:])
        if offsets[-1] == 0:
            return Annotation(offsets, np.zeros(0, dtype=np.int32))
        values = np.concatenate([np.asarray(m.to_array(), dtype=np.int32) for m in maps])
        return Annotation(offsets, values)

    @staticmethod
    def from_keys(keys: Sequence[bytes]) -> Annotation:
        """The rows' sets from their ``set_key``s (``row_keys``' inverse)."""
        lengths = np.fromiter((len(k) // 4 for k in keys), dtype=np.int64, count=len(keys))
        offsets = np.zeros(len(keys) + 1, dtype=np.int64)
        np.cumsum(lengths, out=offsets[1:])
        values = np.frombuffer(b"".join(keys), dtype=">i4")
        return Annotation(offsets, values.astype(np.int32))

    @staticmethod
    def concat(parts: Sequence[Annotation]) -> Annotation:
        if not parts:
            return Annotation.empty()
        if len(parts) == 1:
            return parts[0]
        if all(p.stored_offsets is None for p in parts):
            return Annotation(None, np.concatenate([p.values for p in parts]))
        offsets = [np.zeros(1, dtype=np.int64)]
        base = 0
        for p in parts:
            offsets.append(p.offsets[1:] + base)
            base += len(p.values)
        return Annotation(np.concatenate(offsets),
                          np.concatenate([p.values for p in parts]).astype(np.int32, copy=False))

    # -- queries -----------------------------------------------------------------------
    def __len__(self) -> int:
        if self.stored_offsets is None:
            return len(self.values)
        return len(self.stored_offsets) - 1

    @property
    def lengths(self) -> np.ndarray:
        if self.stored_offsets is None:
            return np.ones(len(self.values), dtype=np.int64)
        return np.diff(self.stored_offsets)

    def is_singleton(self) -> bool:
        if self.stored_offsets is None:
            return True
        return len(self.values) == len(self) and bool(np.all(self.lengths == 1))

    def row(self, i: int) -> np.ndarray:
        if self.stored_offsets is None:
            return self.values[i:i + 1]
        return self.values[self.stored_offsets[i]:self.stored_offsets[i + 1]]

    def row_sets(self) -> list[tuple[int, ...]]:
        """Each row's ids as a sorted tuple (hashable; for consolidation and oracles)."""
        vals = self.values.tolist()
        offs = self.offsets.tolist()
        return [tuple(sorted(vals[offs[i]:offs[i + 1]])) for i in range(len(self))]

    def row_keys(self) -> list[bytes]:
        """Each row's ``set_key``: what operators holding rows in Python use instead of
        ``row_sets``, whose tuples cost a Python int per id (a group's row of a thousand
        fragments, a thousand)."""
        if self.is_singleton():
            raw = self.values.astype(">i4").tobytes()
            return [raw[i:i + 4] for i in range(0, len(raw), 4)]
        return self.keys().tolist()

    def row_ids(self) -> np.ndarray:
        """For each value, the row it belongs to."""
        if self.stored_offsets is None:
            return np.arange(len(self.values), dtype=np.int64)
        return np.repeat(np.arange(len(self), dtype=np.int64), self.lengths)

    def fragment_counts(self, weights: np.ndarray, size: int) -> np.ndarray:
        """Sum of row weights per fragment id (the paper's per-range counts)."""
        if len(self.values) == 0:
            return np.zeros(size, dtype=np.int64)
        w = weights if self.is_singleton() else weights[self.row_ids()]
        return np.bincount(self.values, weights=w, minlength=size).astype(np.int64)

    # -- transformations ------------------------------------------------------------------
    def take(self, idx: np.ndarray) -> Annotation:
        idx = np.asarray(idx, dtype=np.int64)
        if self.stored_offsets is None:
            return Annotation(None, self.values[idx])
        # only the taken rows' lengths: a few rows taken from a large side stay cheap
        starts = self.offsets[idx]
        lengths = self.offsets[idx + 1] - starts
        offsets = np.zeros(len(idx) + 1, dtype=np.int64)
        np.cumsum(lengths, out=offsets[1:])
        total = int(offsets[-1])
        if total == len(idx) and total == 0:
            return Annotation(offsets, np.zeros(0, dtype=np.int32))
        pos = np.repeat(starts - offsets[:-1], lengths) + np.arange(total, dtype=np.int64)
        return Annotation(offsets, self.values[pos])

    def filter(self, mask: np.ndarray) -> Annotation:
        return self.take(np.flatnonzero(mask))

    def union_rows(self, other: Annotation, dedupe: bool = False) -> Annotation:
        """Row-wise union: row i gets self.row(i) ∪ other.row(i) (equal lengths)."""
        if dedupe:
            marked = _marked((self, other), len(self))
            if marked is not None:  # no concatenation to deduplicate afterwards
                return marked
        la, lb = self.lengths, other.lengths
        lengths = la + lb
        offsets = np.zeros(len(lengths) + 1, dtype=np.int64)
        np.cumsum(lengths, out=offsets[1:])
        out = np.empty(int(offsets[-1]), dtype=np.int32)
        pos_a = np.repeat(offsets[:-1] - self.offsets[:-1], la) + np.arange(len(self.values))
        out[pos_a] = self.values
        pos_b = (np.repeat(offsets[:-1] + la - other.offsets[:-1], lb)
                 + np.arange(len(other.values)))
        out[pos_b] = other.values
        result = Annotation(offsets, out)
        return result.deduplicated() if dedupe else result

    def with_shared(self, shared: np.ndarray) -> Annotation:
        """Every row's ids ∪ ``shared`` (distinct ids), without sorting the rows: the
        shared ids first, then the row's own ids that are not among them."""
        shared = np.unique(np.asarray(shared, dtype=np.int32))
        m, n = len(shared), len(self)
        if m == 0:
            return self
        own = ~_member(self.values, shared)
        rows = self.row_ids()[own]
        extra = np.bincount(rows, minlength=n)
        if n and np.all(extra == extra[0]):
            # every row keeps as many own ids (one each: a table's rows): a row is a
            # fixed-width line of the output, filled by two broadcasts instead of one
            # index per id (rows of ~1,000 shared ids over 10^5 rows)
            k = int(extra[0])
            out = np.empty((n, m + k), dtype=np.int32)
            out[:, :m] = shared
            out[:, m:] = self.values[own].reshape(n, k)
            return Annotation(np.arange(0, n * (m + k) + 1, m + k, dtype=np.int64),
                              out.reshape(-1))
        offsets = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(extra + m, out=offsets[1:])
        out = np.empty(int(offsets[-1]), dtype=np.int32)
        starts = offsets[:-1]
        out[(starts[:, None] + np.arange(m)[None, :]).ravel()] = np.tile(shared, n)
        first = np.cumsum(extra) - extra  # each row's first position among the own ids
        rank = np.arange(len(rows)) - first[rows]
        out[starts[rows] + m + rank] = self.values[own]
        return Annotation(offsets, out)

    def common_ids(self) -> np.ndarray:
        """The ids every row holds (sorted; empty for no rows)."""
        n = len(self)
        if n == 0 or len(self.values) < n:
            return np.zeros(0, dtype=np.int32)
        lines = self._lines()
        if lines is not None and n > 1:
            # rows of one width (as ``with_shared`` lays them out): an id in the same
            # place in every row is common; one elsewhere is common iff it is in every
            # row, counted among the other places only (ids are distinct in a row)
            same = np.all(lines == lines[0], axis=0)
            rest = lines[:, ~same].reshape(-1)
            counts = np.bincount(rest) if len(rest) else np.zeros(0, dtype=np.int64)
            return np.union1d(lines[0, same], np.flatnonzero(counts == n)).astype(np.int32)
        counts = np.bincount(self.values)
        return np.flatnonzero(counts == n).astype(np.int32)  # ids are distinct in a row

    def _lines(self) -> np.ndarray | None:
        """The ids as an (n, width) view when every row holds ``width`` of them."""
        n = len(self)
        if self.stored_offsets is None:
            return self.values.reshape(n, 1)
        if n == 0 or len(self.values) % n:
            return None
        width = len(self.values) // n
        if width == 0 or not np.array_equal(
                self.stored_offsets, np.arange(0, n * width + 1, width, dtype=np.int64)):
            return None
        return self.values.reshape(n, width)

    def without(self, ids: np.ndarray) -> Annotation:
        """Every row's ids minus ``ids``."""
        if len(ids) == 0 or len(self.values) == 0:
            return self
        stripped = self._without_leading(np.unique(np.asarray(ids, dtype=np.int32)))
        if stripped is not None:
            return stripped
        keep = ~_member(self.values, ids)
        # each row's kept ids, from the running count of kept ids at the row bounds
        kept = np.zeros(len(keep) + 1, dtype=np.int32 if len(keep) < 2**31 else np.int64)
        np.cumsum(keep, out=kept[1:])
        return Annotation(kept[self.offsets].astype(np.int64), self.values[keep])

    def _without_leading(self, ids: np.ndarray) -> Annotation | None:
        """``without(ids)`` for rows laid out as ``with_shared`` makes them: all of one
        width, each starting with ``ids`` (ascending) and holding none of them after;
        one comparison per id instead of a set lookup. None for any other layout."""
        n, m = len(self), len(ids)
        lines = self._lines() if self.stored_offsets is not None else None
        if lines is None or lines.shape[1] < m:
            return None
        width = lines.shape[1]
        if not np.array_equal(lines[:, :m], np.broadcast_to(ids, (n, m))):
            return None
        rest = lines[:, m:]
        if rest.size and _member(rest.reshape(-1), ids).any():
            return None
        left = width - m
        offsets = (np.arange(0, n * left + 1, left, dtype=np.int64) if left
                   else np.zeros(n + 1, dtype=np.int64))
        return Annotation(offsets, np.ascontiguousarray(rest).reshape(-1))

    def deduplicated(self) -> Annotation:
        """Drop repeated ids within a row (only self-joins of a partitioned table need it);
        each row's ids come out ascending."""
        if len(self.values) == 0:
            return self
        marked = _marked((self,), len(self))
        if marked is not None:
            return marked
        n = len(self)
        flat = np.unique((self.row_ids() << 32) | self.values.astype(np.int64))
        r, v = flat >> 32, flat & 0xFFFFFFFF
        lengths = np.bincount(r, minlength=n)
        offsets = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(lengths, out=offsets[1:])
        return Annotation(offsets, v.astype(np.int32))

    def _rows_ascending(self) -> bool:
        """Whether every row lists its ids in ascending order (as ``deduplicated`` and
        aggregation leave them)."""
        vals = self.values
        if len(vals) < 2:
            return True
        rising = vals[1:] > vals[:-1]
        starts = self.offsets[1:-1]  # a row's first id need not exceed the last row's
        starts = starts[(starts > 0) & (starts < len(vals))]
        rising[starts - 1] = True
        return bool(rising.all())

    def to_bitmaps(self) -> list[BitMap]:
        vals = self.values
        offs = self.offsets
        return [BitMap(vals[offs[i]:offs[i + 1]]) for i in range(len(self))]

    def keys(self) -> np.ndarray:
        """A hashable key per row, for grouping rows by set: its ``set_key``, or with one
        id per row the ids themselves (int64)."""
        if self.is_singleton():
            return self.values.astype(np.int64)
        out = np.empty(len(self), dtype=object)
        if self._rows_ascending():  # already each row's set_key: one slice of bytes a row
            data = self.values.astype(">i4").tobytes()
            bounds = (self.offsets * 4).tolist()
            out[:] = [data[bounds[i]:bounds[i + 1]] for i in range(len(self))]
            return out
        if len(self.values) >= 64 * len(self):  # long rows: numpy sorts each one quickly
            out[:] = [np.sort(self.row(i)).astype(">i4").tobytes() for i in range(len(self))]
            return out
        # short rows: all sorted at once, (row << 32 | id) keeping each row's ids together
        # (ids are non-negative int32), then one slice of their bytes per row
        packed = np.sort((self.row_ids() << 32) | self.values.astype(np.int64), kind="stable")
        data = (packed & 0xFFFFFFFF).astype(">i4").tobytes()
        bounds = (self.offsets * 4).tolist()
        out[:] = [data[bounds[i]:bounds[i + 1]] for i in range(len(self))]
        return out


_LOOKUP_IDS = 1 << 24  # ids below this are looked up in a table of flags, not sorted


def _member(values: np.ndarray, ids: np.ndarray) -> np.ndarray:
    """``np.isin(values, ids)`` for non-negative fragment ids: one table of flags, read
    once per value, where a sort of ``values`` (hundreds of millions of ids) would cost
    seconds."""
    if len(ids) == 0 or len(values) == 0:
        return np.zeros(len(values), dtype=bool)
    top = max(int(values.max()), int(np.max(ids)))
    if top >= _LOOKUP_IDS or int(np.min(ids)) < 0 or int(values.min()) < 0:
        return np.isin(values, ids)
    flags = np.zeros(top + 1, dtype=bool)
    flags[ids] = True
    return flags[values]


def _marked(parts: tuple[Annotation, ...], n: int) -> Annotation | None:
    """Row-wise union of ``parts`` (each of ``n`` rows), each row's ids distinct and
    ascending, from one mark per (row, id) when the marks fit in ``_DENSE_MARKS``: no
    sort, and rows of thousands of ids (a group's fragments joined with a group of its
    own table) stay linear. None when they do not fit or would be sparse."""
    if n == 0:
        return None
    width = 1 + max((int(p.values.max()) for p in parts if len(p.values)), default=0)
    ids = sum(len(p.values) for p in parts)
    # sparse marks (a few ids a row among thousands of fragments) cost more to scan than
    # the ids cost to sort: past _SPARSE_MARKS marks an id, the caller sorts instead
    if n * width > _DENSE_MARKS or n * width > _SPARSE_MARKS * ids:
        return None
    marks = np.zeros((n, width), dtype=bool)
    flat = marks.reshape(-1)  # a view: one index a mark is cheaper than a pair
    for p in parts:
        flat[p.row_ids() * width + p.values] = True
    lengths = np.count_nonzero(marks, axis=1)
    offsets = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    return Annotation(offsets, np.nonzero(marks)[1].astype(np.int32))
