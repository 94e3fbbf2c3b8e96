"""Group-key dictionary and per-group fragment counts F_g shared by aggregation operators.

Invariants: ``GroupKeys`` assigns each distinct key tuple a dense id that never changes
(ids of groups that become empty stay reserved, so snapshots can be diffed); in
``FragmentCounts`` the count of (g, ρ) is the weighted number of input tuples of group g
whose annotation contains ρ, and ``sketch(g)`` is exactly {ρ | F_g[ρ] > 0}.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
from pyroaring import BitMap

from imp_core.engine.annotation import Annotation


class GroupKeys:
    def __init__(self, key_types: list[pa.DataType]):
        self.key_types = key_types
        self.ids: dict[tuple, int] = {}
        self.columns: list[list[Any]] = [[] for _ in key_types]
        self._index: pd.Index | None = None  # fast path: one non-null integer key
        self._index_gids = np.zeros(0, dtype=np.int64)  # group id of each index entry
        self._indexed = 0  # len(self.ids) when the index was built

    def __len__(self) -> int:
        return len(self.ids)

    def _single_int(self) -> bool:
        return len(self.key_types) == 1 and pa.types.is_integer(self.key_types[0])

    def lookup(self, data: pa.Table, names: tuple[str, ...]) -> tuple[np.ndarray, np.ndarray]:
        """(distinct group ids in the batch, per-row index into them); adds new keys."""
        n = data.num_rows
        if not names:
            gid = self._add(())
            return np.array([gid], dtype=np.int64), np.zeros(n, dtype=np.int64)
        cols = [data.column(c).combine_chunks() for c in names]
        if self._single_int() and cols[0].null_count == 0:
            return self._lookup_int(cols[0].to_numpy())
        inverse = np.zeros(n, dtype=np.int64)
        for col in cols:
            enc = pc.dictionary_encode(col, null_encoding="encode")
            codes = enc.indices.to_numpy(zero_copy_only=False).astype(np.int64)
            inverse = inverse * (len(enc.dictionary) + 1) + codes
            _, inverse = np.unique(inverse, return_inverse=True)
        uniq, first = np.unique(inverse, return_index=True)
        keys = zip(*[c.take(pa.array(first)).to_pylist() for c in cols])
        gids = np.fromiter((self._add(k) for k in keys), dtype=np.int64, count=len(first))
        return gids, inverse

    def _lookup_int(self, values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        uniq, inverse = np.unique(values, return_inverse=True)
        if len(uniq) <= 4096 and 8 * len(uniq) < len(self.ids):
            # a small batch among many groups: dictionary lookups cost O(batch), while
            # rebuilding the index after a new group costs O(groups) (300 ms at 500K)
            ids = self.ids
            gids = np.fromiter((ids.get((k,), -1) for k in uniq.tolist()), dtype=np.int64,
                               count=len(uniq))
            for i in np.flatnonzero(gids < 0):
                gids[i] = self._add((int(uniq[i]),))
            return gids, inverse
        if self._index is None or self._indexed != len(self.ids):
            # a NULL key (registered by the general path) has no place in an int index
            items = [(k[0], g) for k, g in self.ids.items() if k[0] is not None]
            self._index = pd.Index(np.asarray([k for k, _ in items], dtype=np.int64))
            self._index_gids = np.asarray([g for _, g in items], dtype=np.int64)
            self._indexed = len(self.ids)
        pos = self._index.get_indexer(uniq)
        known = pos >= 0
        gids = np.full(len(uniq), -1, dtype=np.int64)
        gids[known] = self._index_gids[pos[known]]
        for i in np.flatnonzero(~known):
            gids[i] = self._add((int(uniq[i]),))
        return gids, inverse

    def _add(self, key: tuple) -> int:
        gid = self.ids.get(key)
        if gid is None:
            gid = len(self.ids)
            self.ids[key] = gid
            for col, v in zip(self.columns, key):
                col.append(v)
        return gid

    def key_arrays(self, gids: np.ndarray) -> list[pa.Array]:
        idx = gids.tolist()
        return [pa.array([col[i] for i in idx], type=t)
                for col, t in zip(self.columns, self.key_types)]

    def key_of(self, gid: int) -> tuple:
        return tuple(col[gid] for col in self.columns)


class FragmentCounts:
    """F_g for all groups: sorted (g·P + ρ) keys with counts, plus each group's sketch."""

    def __init__(self, nfrag: int):
        self.P = max(nfrag, 1)
        self.keys = np.zeros(0, dtype=np.int64)
        self.counts = np.zeros(0, dtype=np.int64)
        self.sketches: list[BitMap] = []
        self.size = np.zeros(0, dtype=np.int32)  # |sketch(g)|
        self.single = np.zeros(0, dtype=np.int32)  # the fragment when |sketch(g)| == 1

    def ensure(self, ngroups: int) -> None:
        while len(self.sketches) < ngroups:
            self.sketches.append(BitMap())
        if len(self.size) < ngroups:
            grow = max(ngroups, 2 * len(self.size))
            self.size = np.concatenate([self.size, np.zeros(grow - len(self.size), np.int32)])
            self.single = np.concatenate([self.single,
                                          np.full(grow - len(self.single), -1, np.int32)])

    def update(self, row_gid: np.ndarray, weights: np.ndarray,
               ann: Annotation) -> dict[int, BitMap]:
        """Apply one batch; returns {g: sketch before} for groups whose sketch changed."""
        if len(ann.values) == 0:
            return {}
        if ann.is_singleton():
            pair = row_gid * self.P + ann.values
            w = weights
        else:
            rows = ann.row_ids()
            pair = row_gid[rows] * self.P + ann.values
            w = weights[rows]
        ukeys, inv = np.unique(pair, return_inverse=True)
        dw = np.bincount(inv, weights=w, minlength=len(ukeys)).round().astype(np.int64)
        nz = dw != 0
        ukeys, dw = ukeys[nz], dw[nz]
        pos = np.searchsorted(self.keys, ukeys)
        exists = pos < len(self.keys)
        exists[exists] = self.keys[pos[exists]] == ukeys[exists]
        old = np.zeros(len(ukeys), dtype=np.int64)
        old[exists] = self.counts[pos[exists]]
        new = old + dw
        self.counts[pos[exists]] = new[exists]
        if (~exists).any():
            self.keys = np.insert(self.keys, pos[~exists], ukeys[~exists])
            self.counts = np.insert(self.counts, pos[~exists], dw[~exists])
        crossing = (old > 0) != (new > 0)
        before: dict[int, BitMap] = {}
        for key, now_in in zip(ukeys[crossing].tolist(), (new[crossing] > 0).tolist()):
            g, frag = divmod(key, self.P)
            bm = self.sketches[g]
            if g not in before:
                before[g] = BitMap(bm)
            if now_in:
                bm.add(frag)
            else:
                bm.discard(frag)
        for g in before:
            bm = self.sketches[g]
            self.size[g] = len(bm)
            self.single[g] = bm.min() if len(bm) == 1 else -1
        if len(self.keys) > 1024 and (self.counts == 0).mean() > 0.5:
            keep = self.counts != 0
            self.keys, self.counts = self.keys[keep], self.counts[keep]
        return before

    def annotation(self, gids: np.ndarray, before: dict[int, BitMap] | None = None,
                   size: np.ndarray | None = None, single: np.ndarray | None = None
                   ) -> Annotation:
        """Sketches of ``gids`` as an annotation (``before``/arrays give earlier versions)."""
        size = self.size[gids] if size is None else size
        single = self.single[gids] if single is None else single
        if len(gids) == 0:
            return Annotation.empty()
        if (size == 1).all():
            return Annotation.singletons(single)
        if (size == 0).all():
            return Annotation.empty(len(gids))
        before = before or {}
        return Annotation.from_bitmaps([before.get(g, self.sketches[g]) for g in gids.tolist()])

    def table_from_pairs(self, gids: np.ndarray, frags: np.ndarray,
                         counts: np.ndarray) -> pa.Table:
        """The ``snapshot`` layout of F_g given as (group, fragment, count) triples; counts
        of repeated pairs add up."""
        pair = np.asarray(gids, dtype=np.int64) * self.P + np.asarray(frags, dtype=np.int64)
        keys, inverse = np.unique(pair, return_inverse=True)
        total = np.bincount(inverse, weights=counts, minlength=len(keys)).round().astype(np.int64)
        keep = total != 0
        return pa.table({"key": pa.array(keys[keep], pa.int64()),
                         "count": pa.array(total[keep], pa.int64())})

    def snapshot(self) -> pa.Table:
        keep = self.counts != 0
        return pa.table({"key": self.keys[keep], "count": self.counts[keep]})

    def restore(self, table: pa.Table, ngroups: int) -> None:
        self.keys = table.column("key").to_numpy().astype(np.int64)
        self.counts = table.column("count").to_numpy().astype(np.int64)
        self.sketches = []
        self.size = np.zeros(0, dtype=np.int32)
        self.single = np.zeros(0, dtype=np.int32)
        self.ensure(ngroups)
        for key in self.keys[self.counts > 0].tolist():
            g, frag = divmod(key, self.P)
            self.sketches[g].add(frag)
        for g, bm in enumerate(self.sketches):
            self.size[g] = len(bm)
            self.single[g] = bm.min() if len(bm) == 1 else -1
