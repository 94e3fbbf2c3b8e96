"""Join-side state: the current annotated contents of one join input, indexed on its keys.

``SideIndex`` is the in-memory provider of the opposite side for ΔL ⋈ R; another
provider (e.g. a lookup in the database holding the table) implements ``JoinSide``.
Invariants: ``contents()`` equals the integral of all deltas applied so far (as a
Z-set: rows may repeat, and deletions are kept as negative rows until compaction);
a probe finds exactly the rows of ``contents()`` with the probe's keys (the main part
through its sorted index, the rows applied since through theirs). A side's state is one Arrow
table in its provider's own layout (``SideIndex``: the annotated rows, ``state_schema``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Protocol

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from imp_core.engine.bloom import BloomFilter
from imp_core.engine.column_hash import number_hashes, string_hashes
from imp_core.engine.zset import DeltaBatch, batch_from_arrow, batch_to_arrow

_FNV = np.uint64(0x100000001B3)
# a side's main part with its shared ids is held while it has at most this many ids
_FULL_IDS = 1 << 20
# the fewest probe keys for which the Bloom filter is asked first: below, testing a key
# costs more than searching the sorted index for it (100 keys: 0.3 ms against 0.02)
_BLOOM_FROM = 1024


def _int_like(t: pa.DataType) -> bool:
    return (pa.types.is_integer(t) or pa.types.is_date(t) or pa.types.is_timestamp(t)
            or pa.types.is_boolean(t))


def key_valid(data: pa.Table, columns: tuple[str, ...]) -> np.ndarray:
    """Mask of the rows of ``data`` whose join columns are all non-NULL (``key_hashes``'s
    valid mask, without the hashing)."""
    valid = np.ones(data.num_rows, dtype=bool)
    for c in columns:
        col = data.column(c)
        if col.null_count:
            valid &= col.is_valid().to_numpy(zero_copy_only=False)
    return valid


# the last few key hashes computed for small tables (deltas), with those tables (held,
# so that no other table can take their identity): a join hashes each delta twice on
# the same columns, once to probe the other side and once when applying it to its own;
# a large table (a side's main part, hashed once per merge) is not held past its use
_RECENT_KEYS: list[tuple[pa.Table, tuple[str, ...], tuple[np.ndarray, np.ndarray, bool]]] = []
_RECENT_KEPT = 4
_RECENT_ROWS = 1 << 16


def key_hashes(data: pa.Table, columns: tuple[str, ...]) -> tuple[np.ndarray, np.ndarray, bool]:
    """(int64 key per row, valid mask, exact) for the join columns of ``data``; the
    arrays may be shared with other callers and must not be written to.

    A single integer-like column is its own key (exact: equal keys mean equal values);
    otherwise the key is a hash and matches must be verified on the values.
    """
    recent = list(_RECENT_KEYS)  # a copy: other threads may replace entries meanwhile
    for table, cols, found in recent:
        if table is data and cols == columns:
            return found
    found = _key_hashes(data, columns)
    if data.num_rows <= _RECENT_ROWS:
        for array in found[:2]:
            array.flags.writeable = False
        _RECENT_KEYS[:] = [(data, columns, found), *recent[:_RECENT_KEPT - 1]]
    return found


def _key_hashes(data: pa.Table, columns: tuple[str, ...]
                ) -> tuple[np.ndarray, np.ndarray, bool]:
    n = data.num_rows
    valid = key_valid(data, columns)
    cols = [_one_chunk(data.column(c)) for c in columns]
    if len(cols) == 1 and _int_like(cols[0].type):
        # an int64 column without NULLs is its own key array: a view, no copy (a side's
        # index of a table in key order is then its key column itself)
        return _int64s(cols[0]), valid, True
    h = np.zeros(n, dtype=np.uint64)
    for c in cols:
        t = c.type
        if pa.types.is_decimal(t) or pa.types.is_floating(t):
            hc = number_hashes(_numbers(c, pa.float64()))
        elif _int_like(t):
            hc = number_hashes(_int64s(c))
        elif pa.types.is_string(t) or pa.types.is_large_string(t):
            hc = string_hashes(c)
        else:  # other kinds compare on their text (``keys_equal``), so hash that
            hc = string_hashes(c.cast(pa.string()))
        with np.errstate(over="ignore"):
            h = (h * _FNV) ^ hc
    return h.view(np.int64), valid, False


def _numbers(column: pa.Array, kind: pa.DataType) -> np.ndarray:
    """``column`` as a numpy array of ``kind`` (int64 or float64), NULLs as zeros."""
    if column.type != kind:
        column = column.cast(kind)
    if column.null_count:
        column = column.fill_null(0)
    return column.to_numpy()


def _int64s(column: pa.Array) -> np.ndarray:
    """An integer-like column (integers, dates, timestamps, booleans) as int64 numbers,
    NULLs as zeros (a date as its day number)."""
    if pa.types.is_date32(column.type):
        column = column.cast(pa.int32())
    return _numbers(column, pa.int64())


def keys_equal(left: pa.Table, keys: tuple[str, ...], right: pa.Table,
               right_keys: tuple[str, ...]) -> np.ndarray:
    """Row by row, whether ``left``'s ``keys`` equal ``right``'s ``right_keys`` (NULL
    equals nothing): the check of pairs found by equal key hashes."""
    ok = np.ones(left.num_rows, dtype=bool)
    for a, b in zip(keys, right_keys):
        lc, rc = left.column(a), right.column(b)
        if lc.type != rc.type:
            # keys were hashed on a common representation; compare on one too
            common = pa.string() if pa.types.is_string(lc.type) or \
                pa.types.is_string(rc.type) else pa.float64()
            lc, rc = lc.cast(common), rc.cast(common)
        ok &= pc.fill_null(pc.equal(lc, rc), False).to_numpy(zero_copy_only=False)
    return ok


def _repeats(data: pa.Table) -> bool:
    """Whether ``data`` may hold a tenth of its rows or more as repeats: its rows' hashes
    say so (equal rows hash alike, so distinct hashes rule repeats out), computed in
    numpy at a fraction of the cost of the group-by that would find them. Rows distinct
    on some of their columns are distinct, so the numbers are hashed first and the text
    only where the numbers repeat (text hashing was most of a first state's merges)."""
    names = data.column_names
    n = data.num_rows
    if n < 2 or len(set(names)) < len(names):
        return n >= 2
    numbers = tuple(c for c in names if _int_like(t := data.schema.field(c).type)
                    or pa.types.is_floating(t) or pa.types.is_decimal(t))
    tries = [numbers, tuple(names)] if 0 < len(numbers) < len(names) else [tuple(names)]
    for columns in tries:
        hashes, _, _ = key_hashes(data, columns)
        if pc.count_distinct(pa.array(hashes)).as_py() >= 0.9 * n:
            return False
    return True


def _one_chunk(column: pa.ChunkedArray) -> pa.Array:
    """The column as one array: its only chunk as it is (``combine_chunks`` copies even
    one chunk)."""
    return column.chunk(0) if column.num_chunks == 1 else column.combine_chunks()


def _held_bytes(array: np.ndarray | None, rows: DeltaBatch) -> int:
    """Bytes ``array`` holds beyond ``rows``: none when it is a view of one of their
    columns (``key_hashes`` of an int64 key column)."""
    if array is None:
        return 0
    if not array.flags.owndata:
        start = array.__array_interface__["data"][0]
        for column in rows.data.columns:
            for chunk in column.chunks:
                for buf in chunk.buffers():
                    if buf is not None and buf.address <= start < buf.address + buf.size:
                        return 0
    return array.nbytes


@dataclass(frozen=True)
class PairFilter:
    """A test of the pairs a probe finds, before their stored rows are taken whole:
    ``test(probe rows, stored columns, stored weights)`` gets, for each pair, its row of
    the probing delta, the stored row's ``columns`` (positions in the side's schema) and
    its weight, and returns a mask of the pairs kept."""

    columns: list[int]
    test: Callable[[np.ndarray, list[pa.ChunkedArray], np.ndarray], np.ndarray]


class JoinSide(Protocol):
    def apply(self, delta: DeltaBatch) -> None: ...

    def probe(self, delta: DeltaBatch, keys: tuple[str, ...]) -> tuple[np.ndarray, DeltaBatch]:
        """Pairs (row of ``delta``, matching stored row) as (delta indices, matched rows)."""
        ...

    def contents(self) -> DeltaBatch: ...

    def snapshot(self) -> pa.Table: ...

    def restore(self, table: pa.Table) -> None: ...

    def nbytes(self) -> int: ...


class SideIndex:
    """In-memory join side: rows + a sorted index on the key hash + a Bloom filter.

    The rows are a large *main* part, indexed once, and a small *pending* part of the
    deltas applied since (indexed on its own, cheaply): a probe searches both, so a step
    costs about its delta's size, not the side's. The pending part is merged into the
    main one when it outgrows ``1/8`` of it (``MERGE_FRACTION``) or ``MAX_PENDING`` rows,
    which keeps the merges' cost amortized over the steps, and before a read once it
    holds as many rows as the main part (``_merge_if_due``). With ``merge_equal`` equal
    (row, annotation) pairs merged in are held as one row of summed weight.
    """

    MERGE_FRACTION = 8
    MIN_PENDING = 4096  # rows pending before a merge is worth its copy
    # the pending part is indexed anew after each apply, so it stays small even beside
    # a large main part (a merge re-indexes the main part: rare at this size)
    MAX_PENDING = 32768

    def __init__(self, schema: pa.Schema, key_columns: tuple[str, ...], use_bloom: bool = True,
                 merge_equal: bool = False):
        self.schema = schema
        self.key_columns = key_columns
        self.use_bloom = use_bloom and bool(key_columns)
        # hold equal (row, annotation) pairs as one row of summed weight: for a side that
        # only decides membership (a semi-join's right input, often one key column with
        # many rows a key) this keeps one row per key and fragment
        self.merge_equal = merge_equal
        self._main = DeltaBatch.empty(schema)
        # ids every main-part row holds besides the ids of its own annotation (rows that
        # passed a scalar subquery's filter all carry its sketch: q22's ~1,000 ids a row)
        self._shared = np.zeros(0, dtype=np.int32)
        self._full: DeltaBatch | None = None  # the main part with its shared ids, if small
        self._main_bytes: int | None = None  # the main part's bytes, once asked for
        self._pending: list[DeltaBatch] = []
        # each pending part's (key hashes, valid), computed once when applied: the pending
        # index is rebuilt after every apply, and hashing strings costs most of it
        self._pending_keys: list[tuple[np.ndarray, np.ndarray]] = []
        self._pending_bytes = 0  # bytes of the pending parts (nbytes is asked per batch)
        self._pending_rows = 0
        self._sorted: np.ndarray | None = None  # the main part's index
        self._perm: np.ndarray | None = None  # None: the rows are in key order
        self._recent: tuple[np.ndarray, np.ndarray | None, DeltaBatch] | None = None
        # built when a probe first has enough keys to use it (``_filter``); the keys
        # applied since are added then
        self.bloom: BloomFilter | None = None
        self._unfiltered: list[np.ndarray] = []
        self.probes_skipped = 0

    # -- updates --------------------------------------------------------------------------
    def apply(self, delta: DeltaBatch) -> None:
        if len(delta) == 0:
            return
        keys, valid, _ = key_hashes(delta.data, self.key_columns)
        self._pending.append(delta)
        self._pending_keys.append((keys, valid))
        self._pending_bytes += _batch_bytes(delta) + keys.nbytes + valid.nbytes
        self._pending_rows += len(delta)
        self._recent = None
        limit = min(len(self._main) // self.MERGE_FRACTION, self.MAX_PENDING)
        if self._pending_rows >= max(self.MIN_PENDING, limit):
            self._merge()
        if self.bloom is not None:
            self._unfiltered.append(keys[valid & (delta.weights > 0)])

    def reset(self, rows: DeltaBatch) -> None:
        """Hold exactly ``rows`` (consolidated) from now on, as the main part: what
        ``apply`` of the difference would leave, without merging it in (a one-row side
        that changes on every step, a scalar subquery's value with ~1,000 ids, costs
        0.1 ms so instead of 0.7)."""
        self._main, self._shared = rows, np.zeros(0, dtype=np.int32)
        self._pending, self._pending_keys = [], []
        self._reindexed()

    def _reindexed(self) -> None:
        """After the rows were replaced wholesale (all in the main part): the indexes and
        the Bloom filter are built anew when next needed."""
        self._pending_bytes = self._pending_rows = 0
        self._sorted = self._perm = None
        self._recent = self._full = self._main_bytes = None
        self.bloom, self._unfiltered = None, []

    def _filter(self) -> BloomFilter:
        """The Bloom filter of the keys held (every key of a row of positive weight tests
        positive): built from the rows when first asked for or once saturated, the keys
        applied since the last ask added now."""
        if self.bloom is not None and self._unfiltered:
            self.bloom.add(np.concatenate(self._unfiltered))
            self._unfiltered = []
        if self.bloom is None or self.bloom.saturated():
            keys = [self._index()[0][self._positive(self._main)]] if len(self._main) else []
            if len(self._pending_keys) == len(self._pending):
                for part, (hashes, valid) in zip(self._pending, self._pending_keys):
                    keys.append(hashes[valid & (part.weights > 0)])
            elif self._pending:
                rows = DeltaBatch.concat(self._pending, self.schema)
                hashes, valid, _ = key_hashes(rows.data, self.key_columns)
                keys.append(hashes[valid & (rows.weights > 0)])
            held = np.concatenate(keys) if keys else np.zeros(0, dtype=np.int64)
            self.bloom = BloomFilter.for_keys(len(held))
            self.bloom.add(held)
            self._unfiltered = []
        return self.bloom

    def _positive(self, rows: DeltaBatch) -> np.ndarray:
        """Mask over the main part's sorted index of the entries of positive weight."""
        _, perm, _ = self._index()
        weights = rows.weights if perm is None else rows.weights[perm]
        return weights > 0

    def _merge(self) -> None:
        """Fold the pending part into the main one (its index is rebuilt when needed)."""
        if not self._pending:
            return
        main, incoming = self._main, DeltaBatch.concat(self._pending, self.schema)
        if self.merge_equal and _repeats(incoming.data):
            merged_rows = incoming.consolidate()
            # rows all distinct already keep their uniform weights (held as one value)
            if len(merged_rows) < 0.9 * len(incoming):
                incoming = merged_rows
        if not len(main):
            common = incoming.annotation.common_ids()
        elif len(self._shared) == 0:
            common = self._shared  # the main rows share no ids: the result has none
        else:
            common = np.intersect1d(self._shared, incoming.annotation.common_ids()
                                    ).astype(np.int32)
            dropped = np.setdiff1d(self._shared, common)
            if len(dropped):  # ids no longer shared by all go back into the rows
                main = DeltaBatch(main.data, main.weights,
                                  main.annotation.with_shared(dropped))
        incoming = DeltaBatch(incoming.data, incoming.weights,
                              incoming.annotation.without(common))
        self._shared = common
        merged = DeltaBatch.concat([main, incoming], self.schema)
        neg = int((merged.weights < 0).sum())
        if neg and 4 * neg >= len(merged):
            merged = merged.consolidate()
        if any(c.num_chunks > 1 for c in merged.data.columns):
            # one chunk per column: a probe's take() over many chunks costs about as
            # much as copying the side, on every probe
            merged = merged.with_data(merged.data.combine_chunks())
        self._main, self._pending, self._pending_keys = merged.compact(), [], []
        self._pending_bytes = self._pending_rows = 0
        self._sorted = self._perm = None
        self._recent = self._full = self._main_bytes = None

    def _merge_if_due(self) -> None:
        """Merge before a read when the pending rows are as many as the main part's: the
        copy costs no more than those rows, and a small side fed by a grouping, each
        change a retraction and a new row, would otherwise be read with every version of
        a key since the last merge. Merged when read, not when applied: a side never
        read (its other input never changes) is never copied. (A large side is merged
        by ``apply`` long before its pending rows are as many.)"""
        if self._pending and self._pending_rows >= len(self._main):
            self._merge()

    def contents(self) -> DeltaBatch:
        self._merge_if_due()
        if not self._pending:
            return self.main_part()
        return DeltaBatch.concat([self.main_part(), *self._pending], self.schema)

    def main_part(self) -> DeltaBatch:
        """The main part of the contents (the same object until the next merge); with
        ``pending_parts`` all of them, without merging. Rows that share ids get them back
        in a copy, held until the next merge only while small (``_FULL_IDS``): holding a
        large one would undo the saving."""
        if self._full is not None:
            return self._full
        full = self._with_shared(self._main)
        if full is not self._main and len(full.annotation.values) <= _FULL_IDS:
            self._full = full
        return full

    def _with_shared(self, rows: DeltaBatch) -> DeltaBatch:
        """Main-part ``rows`` with their whole annotations."""
        if len(self._shared) == 0 or len(rows) == 0:
            return rows
        return DeltaBatch(rows.data, rows.weights, rows.annotation.with_shared(self._shared))

    def pending_parts(self) -> list[DeltaBatch]:
        """The deltas applied since the last merge, in order."""
        return list(self._pending)

    def __len__(self) -> int:
        return len(self._main) + self._pending_rows

    # -- lookups ------------------------------------------------------------------------
    def _index(self) -> tuple[np.ndarray, np.ndarray | None, DeltaBatch]:
        """The main part's index: (sorted key hashes, their rows, the rows)."""
        if self._sorted is None:
            self._sorted, self._perm = _sorted_index(self._main, self.key_columns)
        return self._sorted, self._perm, self._main

    def _pending_index(self) -> tuple[np.ndarray, np.ndarray | None, DeltaBatch]:
        if self._recent is None:
            rows = DeltaBatch.concat(self._pending, self.schema)
            if len(self._pending_keys) == len(self._pending):
                keys = np.concatenate([k for k, _ in self._pending_keys])
                valid = np.concatenate([v for _, v in self._pending_keys])
                self._recent = (*_key_order(keys, valid), rows)
            else:
                self._recent = (*_sorted_index(rows, self.key_columns), rows)
        return self._recent

    def bloom_filter(self, delta: DeltaBatch, keys: np.ndarray) -> np.ndarray:
        """Mask of delta rows that may have a partner here."""
        if not self.use_bloom:
            return np.ones(len(delta), dtype=bool)
        return self._filter().might_contain(keys)

    def probe(self, delta: DeltaBatch, keys: tuple[str, ...], keep: PairFilter | None = None
              ) -> tuple[np.ndarray, DeltaBatch]:
        """Pairs (row of ``delta``, matching stored row); with ``keep``, only the pairs it
        keeps (see ``PairFilter``), the others' rows never taken whole."""
        self._merge_if_due()
        return self.probe_parts(delta, keys, keep=keep)

    def probe_parts(self, delta: DeltaBatch, keys: tuple[str, ...], main: bool = True,
                    pending: bool = True, keep: PairFilter | None = None
                    ) -> tuple[np.ndarray, DeltaBatch]:
        """``probe`` over the main part, the pending part or both (an index of its own
        over the main part may answer some probes there: ``KeyedFilterOp``'s ranges)."""
        if len(delta) == 0 or len(self) == 0:
            return np.zeros(0, dtype=np.int64), DeltaBatch.empty(self.schema)
        pkeys, valid, exact = key_hashes(delta.data, keys)
        candidates = np.flatnonzero(valid)
        if self.use_bloom and len(candidates) >= _BLOOM_FROM:
            hit = self._filter().might_contain(pkeys[candidates])
            self.probes_skipped += int(len(candidates) - hit.sum())
            candidates = candidates[hit]
        parts = [self._index()] if main and len(self._main) else []
        if pending and self._pending:
            parts.append(self._pending_index())
        if len(candidates) == 0 or not parts:
            return np.zeros(0, dtype=np.int64), DeltaBatch.empty(self.schema)
        found = [_search(pkeys, candidates, *part) for part in parts]  # (probe, row, part)
        if not exact or keep is not None:
            found = self._checked(delta, keys, found, exact, keep)
        probe_idx = np.concatenate([f[0] for f in found])
        matched = [data.take(rows) for _, rows, data in found]
        if main and len(self._main):  # the main part's rows get their shared ids back
            matched[0] = self._with_shared(matched[0])
        return probe_idx, DeltaBatch.concat(matched, self.schema)

    def _checked(self, delta: DeltaBatch, keys: tuple[str, ...],
                 found: list[tuple[np.ndarray, np.ndarray, DeltaBatch]], exact: bool,
                 keep: PairFilter | None) -> list[tuple[np.ndarray, np.ndarray, DeltaBatch]]:
        """The pairs ``found`` whose keys are equal (hashes may collide) and that ``keep``
        keeps, judged on the columns they read only: a residual join (a row paired with
        the 36 months of its partition, one kept) takes every column of kept pairs only."""
        probe_idx = np.concatenate([f[0] for f in found])
        if len(probe_idx) == 0:
            return found
        names = self.schema.names
        wanted = [] if exact else [names.index(c) for c in self.key_columns]
        if keep is not None:
            wanted += keep.columns
        wanted = list(dict.fromkeys(wanted))
        narrow = pa.concat_tables([data.data.select(wanted).take(rows)
                                   for _, rows, data in found]) if wanted else None
        ok = np.ones(len(probe_idx), dtype=bool)
        if not exact:
            # only the key columns: the probe's other columns are taken by the caller
            ok = keys_equal(delta.data.select(list(dict.fromkeys(keys))).take(probe_idx), keys,
                            narrow, self.key_columns)
        if keep is not None:
            at = np.flatnonzero(ok)
            weights = np.concatenate([data.weights[rows] for _, rows, data in found])[at]
            columns = [narrow.column(wanted.index(c)).take(at) for c in keep.columns
                       ] if narrow is not None else []
            ok[at] = keep.test(probe_idx[at], columns, weights)
        bounds = np.cumsum([0] + [len(f[0]) for f in found])
        return [(p[ok[a:b]], rows[ok[a:b]], data)
                for (p, rows, data), a, b in zip(found, bounds[:-1], bounds[1:])]

    # -- state ------------------------------------------------------------------------
    def state_schema(self) -> pa.Schema:
        return batch_to_arrow(DeltaBatch.empty(self.schema)).schema

    @staticmethod
    def state_from_rows(rows: DeltaBatch) -> pa.Table:
        """The state of a side holding ``rows`` (its annotated contents)."""
        return batch_to_arrow(rows)

    def snapshot(self) -> pa.Table:
        return self.state_from_rows(self.contents())

    def restore(self, table: pa.Table) -> None:
        self._main, self._shared = DeltaBatch.empty(self.schema), np.zeros(0, dtype=np.int32)
        rows = batch_from_arrow(table)
        self._pending = [rows] if len(rows) else []
        self._pending_keys = []  # not hashed: the merge below indexes them as the main part
        self._merge()  # the restored rows become the main part, shared ids factored out
        self._reindexed()

    def nbytes(self) -> int:
        # the stored parts' sizes: merging them here would copy the whole side on every
        # call (callers ask after each batch); the indexes and the Bloom filter once built
        indexes = _held_bytes(self._sorted, self._main) + _held_bytes(self._perm, self._main)
        if self._recent is not None:
            recent_keys, recent_perm, recent_rows = self._recent
            indexes += _held_bytes(recent_keys, recent_rows) + _held_bytes(recent_perm,
                                                                           recent_rows)
        bloom = self.bloom.array.nbytes if self.bloom is not None else 0
        full = self._full.annotation.nbytes() if self._full is not None else 0
        if self._main_bytes is None:  # Arrow sums a table's buffers anew on each ask
            self._main_bytes = _batch_bytes(self._main)
        return self._main_bytes + self._shared.nbytes + self._pending_bytes + \
            indexes + bloom + full


def _sorted_index(rows: DeltaBatch, key_columns: tuple[str, ...]
                  ) -> tuple[np.ndarray, np.ndarray | None]:
    """(key hashes in ascending order, the row of each) over the rows with non-NULL keys;
    rows already in key order (a side read from a table clustered on its key) need no
    second array (None: entry i is row i), and fewer than 2**31 rows take int32."""
    keys, valid, _ = key_hashes(rows.data, key_columns)
    return _key_order(keys, valid)


def _key_order(keys: np.ndarray, valid: np.ndarray) -> tuple[np.ndarray, np.ndarray | None]:
    """``_sorted_index`` of rows with these key hashes and valid (non-NULL) keys."""
    if valid.all() and (len(keys) < 2 or bool(np.all(keys[1:] >= keys[:-1]))):
        return keys, None
    order_rows = np.flatnonzero(valid)
    perm = order_rows[np.argsort(keys[order_rows], kind="stable")]
    if len(keys) < (1 << 31):
        perm = perm.astype(np.int32)
    return keys[perm], perm


def _search(pkeys: np.ndarray, candidates: np.ndarray, sorted_keys: np.ndarray,
            perm: np.ndarray | None, data: DeltaBatch
            ) -> tuple[np.ndarray, np.ndarray, DeltaBatch]:
    """The (probe row, stored row) pairs of equal key hashes in one indexed part, with
    that part."""
    k = pkeys[candidates]
    lo = np.searchsorted(sorted_keys, k, side="left")
    hi = np.searchsorted(sorted_keys, k, side="right")
    counts = hi - lo
    total = int(counts.sum())
    probe_idx = np.repeat(candidates, counts)
    starts = np.repeat(lo - (np.cumsum(counts) - counts), counts)
    entries = starts + np.arange(total, dtype=np.int64)
    side_rows = entries if perm is None else perm[entries]
    return probe_idx, np.asarray(side_rows, dtype=np.int64), data


def _batch_bytes(b: DeltaBatch) -> int:
    return b.nbytes()
