"""Group-key dictionary and per-group fragment counts F_g shared by aggregation operators.

Invariants: ``GroupKeys`` assigns each distinct key tuple a dense id that never changes
(ids of groups that become empty stay reserved, so snapshots can be diffed); in
``FragmentCounts`` the count of (g, ρ) is the weighted number of input tuples of group g
whose annotation contains ρ, and ``sketch(g)`` is exactly {ρ | F_g[ρ] > 0}.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyroaring import BitMap, FrozenBitMap

from imp_core.engine.annotation import Annotation
from imp_core.engine.operators.key_codes import KeyCodes

_EMPTY = FrozenBitMap()  # the sketch before of a group that had no fragment


class GroupKeys:
    """Dense ids of distinct group keys.

    Keys of one non-NULL-able-in-practice integer column (the common case: a grouping on
    an id) are held in numpy arrays, not in Python tuples: a sorted main part searched by
    bisection, plus a dictionary of the keys added since it was last merged (merged once
    it holds an eighth of the main part), and the key of every id: about 24 bytes a
    group instead of about 200. Keys of two such columns (a grouping on a composite id,
    as partsupp's) are held the same way, packed into one integer while both values fit
    32 bits and neither is NULL; the first key that does not fit turns them into
    coded keys, ids unchanged. Other keys (strings, dates, more columns) are coded: each
    column's values get dense codes, packed into one integer per key (``KeyCodes``) held
    in the same arrays; only when the codes outgrow 62 bits do keys become dictionary
    keys (a Python tuple a key). A NULL key of one integer column has an id of its
    own."""

    BULK_ADD = 4096  # new integer keys in one batch beyond which ids are made at once

    def __init__(self, key_types: list[pa.DataType]):
        self.key_types = key_types
        # integers that fit int64 exactly (not uint64, whose top half would wrap)
        exact = [pa.types.is_signed_integer(t) or (
            pa.types.is_unsigned_integer(t) and t.bit_width <= 32) for t in key_types]
        self._int = len(key_types) == 1 and exact[0]
        self._packed = len(key_types) == 2 and all(exact)
        # general keys
        self.ids: dict[tuple, int] = {}
        self.columns: list[list[Any]] = [[] for _ in key_types]
        # integer keys
        self._n = 0
        self._key_of = np.zeros(0, dtype=np.int64)  # key of each id (NULL's slot: 0)
        self._main_keys = np.zeros(0, dtype=np.int64)  # sorted
        self._main_gids = np.zeros(0, dtype=np.int64)
        self._pending: dict[int, int] = {}
        self._null_gid: int | None = None
        self._codes: KeyCodes | None = None if self._int or self._packed or not key_types \
            else KeyCodes(key_types)

    @property
    def _arrays(self) -> bool:
        """Whether keys are integers in the arrays (one column, packed pair or codes)."""
        return self._int or self._packed or self._codes is not None

    def __len__(self) -> int:
        return self._n if self._arrays else len(self.ids)

    def lookup(self, data: pa.Table, names: tuple[str, ...]) -> tuple[np.ndarray, np.ndarray]:
        """(distinct group ids in the batch, per-row index into them); adds new keys."""
        n = data.num_rows
        if not names:
            gid = self.add(())
            return np.array([gid], dtype=np.int64), np.zeros(n, dtype=np.int64)
        cols = [data.column(c).combine_chunks() for c in names]
        if self._int and cols[0].null_count == 0:
            return self._lookup_int(cols[0].to_numpy())
        if self._packed:
            packed = _pack(cols)
            if packed is not None:
                return self._lookup_int(packed)
            self._packed_to_coded()
        if self._codes is not None:
            packed = self._coded(self._codes.encode(cols))
            if packed is not None:
                return self._lookup_int(packed)
        # each row's key as one integer: the columns' dictionary codes in mixed radix,
        # compacted by sorting only when the radix product could overflow
        inverse = np.zeros(n, dtype=np.int64)
        radix = 1
        for col in cols:
            enc = pc.dictionary_encode(col, null_encoding="encode")
            codes = enc.indices.to_numpy(zero_copy_only=False).astype(np.int64)
            size = len(enc.dictionary) + 1
            if radix * size >= 1 << 62:
                _, inverse = np.unique(inverse, return_inverse=True)
                radix = int(inverse.max()) + 1 if n else 1
            inverse = inverse * size + codes
            radix *= size
        if radix <= max(4 * n, 1 << 20):
            # few possible codes (e.g. two flag columns): dense in O(n), no sort
            seen = np.zeros(radix, dtype=bool)
            seen[inverse] = True
            uniq = np.flatnonzero(seen)
            rank = np.cumsum(seen) - 1
            row_of = np.empty(radix, dtype=np.int64)
            row_of[inverse] = np.arange(n, dtype=np.int64)  # some row holding each code
            first, inverse = row_of[uniq], rank[inverse]
        else:
            uniq, first, inverse = np.unique(inverse, return_index=True,
                                             return_inverse=True)
        keys = zip(*[c.take(pa.array(first)).to_pylist() for c in cols])
        gids = np.fromiter((self.add(k) for k in keys), dtype=np.int64, count=len(first))
        return gids, inverse

    def _lookup_int(self, values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        uniq, inverse = np.unique(values.astype(np.int64, copy=False), return_inverse=True)
        gids = np.full(len(uniq), -1, dtype=np.int64)
        if len(self._main_keys):
            pos = np.searchsorted(self._main_keys, uniq)
            pos = np.minimum(pos, len(self._main_keys) - 1)
            hit = self._main_keys[pos] == uniq
            gids[hit] = self._main_gids[pos[hit]]
        missing = np.flatnonzero(gids < 0)
        if len(missing) > self.BULK_ADD:
            self._add_many(uniq, gids, missing)
        elif len(missing):
            pending = self._pending
            for i, k in zip(missing.tolist(), uniq[missing].tolist()):
                g = pending.get(k)
                gids[i] = self._new_int(k) if g is None else g
            self._maybe_merge()
        return gids, inverse

    def _new_int(self, key: int | None) -> int:
        """A new id for ``key`` (None: the NULL key, which the index does not hold)."""
        gid = self._n
        self._n += 1
        self._grow_key_of()
        if key is not None:
            self._key_of[gid] = key
            self._pending[key] = gid
        return gid

    def _grow_key_of(self) -> None:
        """Room in ``_key_of`` for every id (doubling: amortized O(1) an id)."""
        if len(self._key_of) < self._n:
            grown = np.zeros(max(self._n, 2 * len(self._key_of), 1024), dtype=np.int64)
            grown[:len(self._key_of)] = self._key_of
            self._key_of = grown

    def _add_many(self, uniq: np.ndarray, gids: np.ndarray, missing: np.ndarray) -> None:
        """Ids for the keys ``uniq[missing]`` (sorted, not in the main part), written
        into ``gids``: those pending keep theirs, the rest get new ids in one go and go
        straight into the main part (a first state adds millions: no per-key work)."""
        self._maybe_merge(force=True)
        keys = uniq[missing]
        if len(self._main_keys):
            pos = np.minimum(np.searchsorted(self._main_keys, keys), len(self._main_keys) - 1)
            hit = self._main_keys[pos] == keys
            gids[missing[hit]] = self._main_gids[pos[hit]]
            missing, keys = missing[~hit], keys[~hit]
        m = len(keys)
        new = np.arange(self._n, self._n + m, dtype=np.int64)
        self._n += m
        self._grow_key_of()
        self._key_of[new] = keys
        gids[missing] = new
        at = np.searchsorted(self._main_keys, keys)
        self._main_keys = np.insert(self._main_keys, at, keys)
        self._main_gids = np.insert(self._main_gids, at, new)

    def _maybe_merge(self, force: bool = False) -> None:
        if not self._pending or (not force and len(self._pending)
                                 <= max(4096, len(self._main_keys) // 8)):
            return
        keys = np.fromiter(self._pending.keys(), dtype=np.int64, count=len(self._pending))
        gids = np.fromiter(self._pending.values(), dtype=np.int64, count=len(self._pending))
        keys = np.concatenate([self._main_keys, keys])
        gids = np.concatenate([self._main_gids, gids])
        order = np.argsort(keys, kind="stable")
        self._main_keys, self._main_gids = keys[order], gids[order]
        self._pending = {}

    def add(self, key: tuple) -> int:
        """The id of group ``key``, a new dense id if the key is new (ids never change)."""
        if self._packed:
            packed = _pack_key(key)
            if packed is not None:
                return self._find_or_new_int(packed)
            self._packed_to_coded()
        if self._codes is not None:
            one = self._coded(self._codes.encode_one(key))
            if one is not None:
                return self._find_or_new_int(int(one))
        if self._int:
            (value,) = key
            if value is None:
                if self._null_gid is None:
                    self._null_gid = self._new_int(None)
                return self._null_gid
            return self._find_or_new_int(int(value))
        gid = self.ids.get(key)
        if gid is None:
            gid = len(self.ids)
            self.ids[key] = gid
            for col, v in zip(self.columns, key):
                col.append(v)
        return gid

    def gid_of(self, key: tuple) -> int | None:
        """The id of ``key`` (None if it was never seen); adds nothing."""
        if self._int:
            (value,) = key
            return self._null_gid if value is None else self._find_int(int(value))
        if self._packed:
            packed = _pack_key(key)
            return None if packed is None else self._find_int(packed)
        if self._codes is not None:
            found = self._codes.encode_one(key, add=False)
            return None if found is None else self._find_int(found[0])
        return self.ids.get(key)

    def _coded(self, found: tuple[Any, list[int]] | None) -> Any:
        """The packed key(s) of an encoding (``KeyCodes.encode`` / ``encode_one``), the
        keys repacked first when a column widened; None when the codes no longer fit,
        after turning the keys into dictionary keys."""
        if found is None:
            self._coded_to_general()
            return None
        self._set_bits(found[1])
        return found[0]

    def _set_bits(self, bits: list[int]) -> None:
        """Repack every coded key with ``bits`` when a column outgrew its width (the
        keys' order is kept, so the main part stays sorted)."""
        codes = self._codes
        assert codes is not None
        if bits == codes.bits:
            return
        self._key_of[:self._n] = codes.repacked(self._key_of[:self._n], bits)
        self._main_keys = codes.repacked(self._main_keys, bits)
        pending = np.fromiter(self._pending.keys(), dtype=np.int64, count=len(self._pending))
        self._pending = dict(zip(codes.repacked(pending, bits).tolist(),
                                 self._pending.values()))
        codes.bits = list(bits)

    def _coded_to_general(self) -> None:
        """Turn coded keys into dictionary keys, every id kept."""
        codes = self._codes
        assert codes is not None
        cols = [a.to_pylist() for a in codes.arrays(self._key_of[:self._n])]
        self._codes = None
        self._general(zip(*cols))

    def _general(self, keys: Any) -> None:
        """Dictionary keys from ``keys`` (a key tuple per id, in id order)."""
        for gid, key in enumerate(keys):
            self.ids[key] = gid
            for col, v in zip(self.columns, key):
                col.append(v)
        self._packed = False
        self._n = 0
        self._key_of = self._main_keys = self._main_gids = np.zeros(0, dtype=np.int64)
        self._pending = {}

    def _packed_to_coded(self) -> None:
        """Turn packed keys into coded keys (dictionary keys where codes do not fit),
        every id kept."""
        values = self._key_of[:self._n]
        high, low = _unpack(values)
        codes = KeyCodes(self.key_types)
        found = codes.encode([pa.array(high), pa.array(low)])
        if found is not None:
            self._packed = False
            self._codes = codes
            codes.bits = found[1]
            self._key_of[:self._n] = found[0]
            order = np.argsort(found[0], kind="stable")
            self._main_keys, self._main_gids = found[0][order], order.astype(np.int64)
            self._pending = {}
            return
        self._general(zip(high.tolist(), low.tolist()))

    def _find_or_new_int(self, key: int) -> int:
        found = self._find_int(key)
        if found is not None:
            return found
        gid = self._new_int(key)
        self._maybe_merge()
        return gid

    def _find_int(self, key: int) -> int | None:
        g = self._pending.get(key)
        if g is not None:
            return g
        if len(self._main_keys):
            i = int(np.searchsorted(self._main_keys, key))
            if i < len(self._main_keys) and self._main_keys[i] == key:
                return int(self._main_gids[i])
        return None

    def nbytes(self) -> int:
        """About the memory the keys take: arrays as they are, a dictionary entry (with
        its tuple and values) about 200 bytes, a recent integer key about 100, and the
        codes' dictionaries."""
        if self._arrays:
            arrays = self._key_of.nbytes + self._main_keys.nbytes + self._main_gids.nbytes
            codes = 0 if self._codes is None else self._codes.nbytes()
            return arrays + 100 * len(self._pending) + codes
        return 200 * len(self.ids)

    def key_arrays(self, gids: np.ndarray) -> list[pa.Array]:
        if self._int:
            gids = np.asarray(gids, dtype=np.int64)
            values = self._key_of[gids]
            mask = gids == self._null_gid if self._null_gid is not None else None
            return [pa.array(values, mask=mask).cast(self.key_types[0])]
        if self._packed:
            high, low = _unpack(self._key_of[np.asarray(gids, dtype=np.int64)])
            return [pa.array(high).cast(self.key_types[0]),
                    pa.array(low).cast(self.key_types[1])]
        if self._codes is not None:
            return self._codes.arrays(self._key_of[np.asarray(gids, dtype=np.int64)])
        idx = gids.tolist()
        return [pa.array([col[i] for i in idx], type=t)
                for col, t in zip(self.columns, self.key_types)]

    def key_of(self, gid: int) -> tuple:
        if self._int:
            return (None,) if gid == self._null_gid else (int(self._key_of[gid]),)
        if self._packed:
            high, low = _unpack(self._key_of[gid:gid + 1])
            return int(high[0]), int(low[0])
        if self._codes is not None:
            return self._codes.key(int(self._key_of[gid]))
        return tuple(col[gid] for col in self.columns)


_LOW = np.int64(0xFFFFFFFF)
_SIGN = np.int64(0x80000000)
_INT32 = range(-(1 << 31), 1 << 31)  # what each packed value must fit


def _pack(cols: list[pa.Array]) -> np.ndarray | None:
    """Two integer columns as one int64 per row (high word the first, low the second),
    or None when a value is NULL or does not fit 32 bits signed."""
    if any(c.null_count for c in cols):
        return None
    high, low = (c.to_numpy().astype(np.int64, copy=False) for c in cols)
    for v in (high, low):
        if len(v) and (int(v.min()) not in _INT32 or int(v.max()) not in _INT32):
            return None
    return (high << 32) | (low & _LOW)


def _pack_key(key: tuple) -> int | None:
    high, low = key
    if high is None or low is None:
        return None
    high, low = int(high), int(low)
    if high not in _INT32 or low not in _INT32:
        return None
    return (high << 32) | (low & 0xFFFFFFFF)


def _unpack(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    low = ((values & _LOW) ^ _SIGN) - _SIGN
    return values >> 32, low


class FragmentCounts:
    """F_g for all groups: sorted (g·P + ρ) keys with counts, plus each group's sketch.

    A group's sketch is held as its size and, for a single fragment (the common case of a
    group inside one range), that fragment (``size``, ``single``: 8 bytes a group); only
    groups with two or more fragments keep a bitmap (``multi``), so a million groups in
    one fragment each cost no million bitmap objects."""

    # crossings in one batch beyond which groups gaining their first fragment are set at
    # once (a first state) rather than one bitmap each
    BULK_CROSSINGS = 1024

    def __init__(self, nfrag: int):
        self.P = max(nfrag, 1)
        self.keys = np.zeros(0, dtype=np.int64)
        self.counts = np.zeros(0, dtype=np.int64)
        self.multi: dict[int, BitMap] = {}  # groups whose sketch has >= 2 fragments
        self.size = np.zeros(0, dtype=np.int32)  # |sketch(g)|
        self.single = np.zeros(0, dtype=np.int32)  # the fragment when |sketch(g)| == 1
        self.ngroups = 0

    def ensure(self, ngroups: int) -> None:
        self.ngroups = max(self.ngroups, ngroups)
        if len(self.size) < ngroups:
            grow = max(ngroups, 2 * len(self.size))
            self.size = np.concatenate([self.size, np.zeros(grow - len(self.size), np.int32)])
            self.single = np.concatenate([self.single,
                                          np.full(grow - len(self.single), -1, np.int32)])

    def nbytes(self) -> int:
        """About the memory F_g takes: its arrays, and each multi-fragment group's bitmap
        (the object, about 100 bytes, a container header and 2 bytes an id: a sketch's
        ids are few and close, so its containers are arrays). Asked after every batch,
        so counted from the bitmaps' sizes, not their serializations."""
        arrays = self.keys.nbytes + self.counts.nbytes + self.size.nbytes + self.single.nbytes
        if len(self.multi) > 10_000:  # an estimate, not a walk over every bitmap
            return arrays + len(self.multi) * (100 + 16)
        return arrays + 116 * len(self.multi) + 2 * sum(map(len, self.multi.values()))

    def sketch(self, g: int) -> BitMap:
        """The sketch of group ``g`` (a fresh bitmap unless it has two or more fragments:
        do not change it)."""
        bm = self.multi.get(g)
        if bm is not None:
            return bm
        return BitMap([int(self.single[g])]) if self.size[g] == 1 else BitMap()

    def _set(self, g: int, bm: BitMap) -> None:
        n = len(bm)
        self.size[g] = n
        self.single[g] = bm.min() if n == 1 else -1
        if n >= 2:
            self.multi[g] = bm
        else:
            self.multi.pop(g, None)

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
        ukeys, dw = _net_weights(pair, w)
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
        ckeys, cin = ukeys[crossing], new[crossing] > 0
        before: dict[int, BitMap] = {}
        if len(ckeys) > self.BULK_CROSSINGS:
            ckeys, cin = self._first_fragments(ckeys, cin, before)
        now: dict[int, BitMap] = {}
        for key, now_in in zip(ckeys.tolist(), cin.tolist()):
            g, frag = divmod(key, self.P)
            bm = now.get(g)
            if bm is None:
                before[g] = self.sketch(g)
                bm = now[g] = BitMap(before[g])
            if now_in:
                bm.add(frag)
            else:
                bm.discard(frag)
        for g, bm in now.items():
            self._set(g, bm)
        if len(self.keys) > 1024 and (self.counts == 0).mean() > 0.5:
            keep = self.counts != 0
            self.keys, self.counts = self.keys[keep], self.counts[keep]
        return before

    def _first_fragments(self, ckeys: np.ndarray, cin: np.ndarray,
                         before: dict[int, BitMap]) -> tuple[np.ndarray, np.ndarray]:
        """Apply, without a bitmap each, the crossings of groups whose sketch was empty
        and gains exactly one fragment (a first state: millions of such groups); their
        sketch before goes into ``before`` (one shared empty bitmap). Returns the other
        crossings, still in key order."""
        g, frag = np.divmod(ckeys, self.P)
        starts = np.flatnonzero(np.concatenate([[True], g[1:] != g[:-1]]))
        counts = np.diff(np.append(starts, len(g)))
        ug = g[starts]
        simple = (counts == 1) & cin[starts] & (self.size[ug] == 0)
        sg = ug[simple]
        self.size[sg] = 1
        self.single[sg] = frag[starts[simple]]
        before.update(dict.fromkeys(sg.tolist(), _EMPTY))
        rest = ~np.repeat(simple, counts)
        return ckeys[rest], cin[rest]

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
        return Annotation.from_bitmaps([before[g] if g in before else self.sketch(g)
                                        for g in gids.tolist()])

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
        self.multi = {}
        self.size = np.zeros(0, dtype=np.int32)
        self.single = np.zeros(0, dtype=np.int32)
        self.ngroups = 0
        self.ensure(ngroups)
        live = self.keys[self.counts > 0]  # sorted: by group, then fragment
        g, frag = np.divmod(live, self.P)
        sizes = np.bincount(g, minlength=len(self.size)).astype(np.int32)
        self.size[:len(sizes)] = sizes[:len(self.size)]
        one = sizes[g] == 1
        self.single[g[one]] = frag[one].astype(np.int32)
        many = ~one
        if many.any():
            groups, starts = np.unique(g[many], return_index=True)
            frags = frag[many]
            ends = list(starts[1:]) + [len(frags)]
            for grp, a, b in zip(groups.tolist(), starts.tolist(), ends):
                self.multi[grp] = BitMap(frags[a:b].tolist())


def _net_weights(pair: np.ndarray, w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(distinct non-negative keys in ascending order, the net weight of each), keys of
    net weight 0 left out. Counted densely when the keys' range is at most a few times
    the batch (a bootstrap's millions of rows over few groups): no sort."""
    top = int(pair.max()) + 1
    if top <= max(4 * len(pair), 1 << 16):
        dw = np.bincount(pair, weights=w, minlength=top).round().astype(np.int64)
        ukeys = np.flatnonzero(dw)
        return ukeys, dw[ukeys]
    ukeys, inv = np.unique(pair, return_inverse=True)
    dw = np.bincount(inv, weights=w, minlength=len(ukeys)).round().astype(np.int64)
    nz = dw != 0
    return ukeys[nz], dw[nz]
