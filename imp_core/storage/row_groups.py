"""A table's physical layout as a sketch-filtered scan meets it: its pages' bounds.

Spark's Parquet reader skips a row group whose min/max statistics of a filtered column
exclude every range of the filter, and inside the row groups it reads, the pages whose
page-index bounds do (the store writes pages of at most ``WriteOptions.page_rows``
rows, with the page index). ``Blocks`` holds, for one column of one table version, each
such page's bounds (as sortable keys, ``imp_core.sketch.partition``), rows and share of
the compressed bytes of its row group, and tells what a filter on that column reads
(``read``). The bounds are computed from the column's values in file order, cut at the
row groups of the footers and into pages of ``page_rows`` rows: the page index itself
is not readable from Python.

Invariants: a block holding NULLs where the filter admits NULL is counted as read; the
counts are those of the files of the version given, in file order; ``fit_to_blocks``
only ever adds fragments to a sketch (a superset of a safe sketch is safe).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.dataset as ds
from pyroaring import BitMap

from imp_core.sketch.partition import RangePartition, _sortable
from imp_core.sketch.sketch import Sketch

DEFAULT_PAGE_ROWS = 2048


@dataclass(frozen=True)
class Blocks:
    """Per block (a page of a row group): ``lo``/``hi`` keys of its non-NULL values
    (lo > hi when it holds none), whether it holds NULLs, its rows and compressed bytes;
    ``groups`` is the number of row groups they were cut from."""

    lo: np.ndarray
    hi: np.ndarray
    nulls: np.ndarray
    rows: np.ndarray
    bytes: np.ndarray
    groups: int = 0

    @property
    def total_rows(self) -> int:
        return int(self.rows.sum())

    @property
    def total_bytes(self) -> int:
        return int(self.bytes.sum())

    def __len__(self) -> int:
        return len(self.rows)

    def hit(self, part: RangePartition, fragments: Sequence[int]) -> np.ndarray:
        """Which blocks a filter keeping ``fragments`` (local, sorted) of ``part``
        reads: those whose [lo, hi] meets one of their ranges, and with NULLs where
        fragment 0 (which holds NULL) is kept."""
        out = np.zeros(len(self.rows), dtype=bool)
        if not len(fragments):
            return out
        starts, ends = _runs(part, fragments)
        # the first range ending above a block's minimum; later ones start even higher
        # (string prefix codes tie where the strings do not: an end equal to the
        # minimum's code may still lie above it)
        i = np.searchsorted(ends, self.lo, side="left" if _is_text(part.dtype) else "right")
        inside = i < len(ends)
        j = np.minimum(i, len(ends) - 1)
        out = inside & (starts[j] <= self.hi) & (self.lo <= self.hi)
        if fragments[0] == 0:
            out |= self.nulls
        return out

    def read(self, part: RangePartition, fragments: Sequence[int]) -> tuple[int, int, int]:
        """``(rows, bytes, blocks)`` a filter keeping ``fragments`` of ``part`` reads."""
        hit = self.hit(part, fragments)
        return int(self.rows[hit].sum()), int(self.bytes[hit].sum()), int(hit.sum())

    def rows_inside(self, lo: Any, hi: Any) -> int:
        """Rows of the blocks whose every value lies in keys [lo, hi) (None: open),
        without NULLs (strings: by their prefix codes, ``text_codes``)."""
        if isinstance(lo, str):
            lo = int(text_codes(pa.array([lo]))[0])
        if isinstance(hi, str):
            hi = int(text_codes(pa.array([hi]))[0])
        inside = (self.lo <= self.hi) & ~self.nulls
        if lo is not None:
            inside &= self.lo >= lo
        if hi is not None:
            inside &= self.hi < hi
        return int(self.rows[inside].sum())


def _extremes(keys: np.ndarray) -> tuple[Any, Any]:
    """Keys above and below every key of ``keys``' kind (int64 ones for integers)."""
    if keys.dtype.kind == "f":
        return np.inf, -np.inf
    if keys.dtype.kind in "iu":
        info = np.iinfo(np.int64)
        return np.int64(info.max), np.int64(info.min)
    raise TypeError("block bounds need numeric keys")


def _is_text(dtype: pa.DataType) -> bool:
    return pa.types.is_string(dtype) or pa.types.is_large_string(dtype) \
        or pa.types.is_string_view(dtype)


TEXT_CODE_BYTES = 7  # a code is a non-negative int64


def text_codes(values: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """Strings as int64 codes in their order: the first ``TEXT_CODE_BYTES`` bytes of
    their UTF-8 text, zero-padded, big-endian (UTF-8 bytes order as code points do).
    Order-preserving but not one-to-one: s <= t implies code(s) <= code(t). NULLs get 0."""
    if isinstance(values, pa.ChunkedArray):
        values = values.combine_chunks()
    encoded = values.cast(pa.string()).dictionary_encode()
    codes = np.array([int.from_bytes(s.encode()[:TEXT_CODE_BYTES].ljust(TEXT_CODE_BYTES,
                                                                          b"\0"), "big")
                      for s in encoded.dictionary.to_pylist()] or [0], dtype=np.int64)
    return codes[encoded.indices.fill_null(0).to_numpy(zero_copy_only=False)]


def _runs(part: RangePartition, fragments: Sequence[int]) -> tuple[np.ndarray, np.ndarray]:
    """Start and end keys of the runs of consecutive ``fragments``, open ends as the
    key type's extremes (the end of a run is exclusive)."""
    keys = part._sorted_bounds
    if _is_text(part.dtype):
        keys = text_codes(pa.array(list(keys), pa.string()))
    top, bottom = _extremes(keys if len(keys) else np.zeros(0, np.int64))
    starts, ends = [], []
    prev = None
    for f in fragments:
        if prev is not None and f == prev + 1:
            prev = f
            continue
        if prev is not None:
            ends.append(keys[prev] if prev < part.size - 1 else top)
        starts.append(keys[f - 1] if f > 0 else bottom)
        prev = f
    ends.append(keys[prev] if prev < part.size - 1 else top)
    # int64 (or float64) whatever the keys' width: date32 keys are int32, the extremes not
    dtype = np.float64 if keys.dtype.kind == "f" else np.int64
    return np.array(starts, dtype=dtype), np.array(ends, dtype=dtype)


def blocks(files: Sequence[str], column: str, dtype: pa.DataType,
           page_rows: int = DEFAULT_PAGE_ROWS) -> Blocks | None:
    """The pages of ``files`` (Parquet URIs or paths) with their bounds of ``column``
    (of type ``dtype``; strings by their prefix codes, ``text_codes``); None where its
    values have no numeric order (big decimals)."""
    parts = []
    for fragment in ds.dataset(list(files), format="parquet").get_fragments() if files else ():
        found = file_blocks(fragment, column, dtype, page_rows)
        if found is None:
            return None
        parts.append(found)
    return concat_blocks(parts)


def file_blocks(fragment: ds.ParquetFileFragment, column: str, dtype: pa.DataType,
                page_rows: int) -> Blocks | None:
    """The pages of one Parquet file (``blocks``)."""
    meta = fragment.metadata
    groups = [(meta.row_group(g).num_rows,
               sum(meta.row_group(g).column(c).total_compressed_size
                   for c in range(meta.row_group(g).num_columns)))
              for g in range(meta.num_row_groups)]
    return cut_blocks(fragment.to_table(columns=[column]).column(0), dtype, groups, page_rows)


def cut_blocks(values: pa.Array | pa.ChunkedArray, dtype: pa.DataType,
               groups: Sequence[tuple[int, int]], page_rows: int) -> Blocks | None:
    """``values`` in file order cut into the row groups ``groups`` (rows, compressed
    bytes; their rows add up to the values') and those into pages of ``page_rows``
    rows; None where the values have no numeric order."""
    if isinstance(values, pa.ChunkedArray):
        values = values.combine_chunks()
    try:
        keys = text_codes(values) if _is_text(dtype) else _sortable(values, dtype)
    except Exception:  # noqa: BLE001 - no order the filter's statistics follow
        return None
    if keys.dtype.kind not in "iuf":
        return None
    missing = values.is_null().to_numpy(zero_copy_only=False) if values.null_count \
        else np.zeros(len(values), dtype=bool)
    top, bottom = _extremes(keys)
    low = np.where(missing, top, keys)
    high = np.where(missing, bottom, keys)
    lo, hi, nulls, rows, sizes = [], [], [], [], []
    start = 0
    for n, size in groups:
        if n:
            cuts = np.arange(0, n, page_rows)
            lo.append(np.minimum.reduceat(low[start:start + n], cuts))
            hi.append(np.maximum.reduceat(high[start:start + n], cuts))
            nulls.append(np.logical_or.reduceat(missing[start:start + n], cuts))
            counts = np.diff(np.append(cuts, n))
            rows.append(counts)
            sizes.append(np.round(size * counts / n).astype(np.int64))
        start += n
    if not rows:
        return concat_blocks([])
    return Blocks(np.concatenate(lo), np.concatenate(hi), np.concatenate(nulls),
                  np.concatenate(rows).astype(np.int64), np.concatenate(sizes),
                  len(groups))


def concat_blocks(parts: Sequence[Blocks]) -> Blocks:
    """The blocks of several files, in order."""
    if not parts:
        empty = np.zeros(0, np.int64)
        return Blocks(empty, empty, np.zeros(0, bool), empty, empty, 0)
    return Blocks(np.concatenate([p.lo for p in parts]), np.concatenate([p.hi for p in parts]),
                  np.concatenate([p.nulls for p in parts]),
                  np.concatenate([p.rows for p in parts]),
                  np.concatenate([p.bytes for p in parts]), sum(p.groups for p in parts))


class StoreLayout:
    """``(table, version, column) -> Blocks`` of a table store's snapshot (None: the
    snapshot has no files, or the column no numeric order). Data files never change, so
    each file's pages are kept (the last ``keep_files``): a new version, which mostly
    lists the files of the one before, reads only its new files. Thread-safe."""

    def __init__(self, store: Any, keep_files: int = 4096):
        self.store = store
        self.keep_files = keep_files
        self._lock = threading.Lock()
        self._files: OrderedDict[tuple[str, str], Blocks | None] = OrderedDict()

    def __call__(self, table: str, version: int, column: str) -> Blocks | None:
        files = self.store.file_uris(table, version)
        if not files:
            return None
        dtype = self.store.schema(table).field(column).type
        page_rows = getattr(getattr(self.store, "options", None), "page_rows", None) \
            or DEFAULT_PAGE_ROWS
        parts = []
        fragments = None
        for i, uri in enumerate(files):
            key = (uri, column)
            with self._lock:
                known = key in self._files
                found = self._files.get(key)
                if known:
                    self._files.move_to_end(key)
            if not known:
                if fragments is None:
                    fragments = list(ds.dataset(list(files), format="parquet")
                                     .get_fragments())
                found = file_blocks(fragments[i], column, dtype, page_rows)
                with self._lock:
                    self._files[key] = found
                    while len(self._files) > self.keep_files:
                        self._files.popitem(last=False)
            if found is None:
                return None
            parts.append(found)
        return concat_blocks(parts)

    def rows(self, table: str, version: int) -> int:
        """The rows of the snapshot (from its footers)."""
        return self._footers(table, version)[0]

    def bytes(self, table: str, version: int) -> int:
        """The compressed bytes of the snapshot's row groups (from its footers)."""
        return self._footers(table, version)[1]

    def _footers(self, table: str, version: int) -> tuple[int, int]:
        files = self.store.file_uris(table, version)
        rows = size = 0
        for f in ds.dataset(list(files), format="parquet").get_fragments() if files else ():
            meta = f.metadata
            rows += meta.num_rows
            size += sum(meta.row_group(g).column(c).total_compressed_size
                        for g in range(meta.num_row_groups)
                        for c in range(meta.row_group(g).num_columns))
        return rows, size


def fit_to_blocks(sketch: Sketch, table: str, found: Blocks | None,
                  max_ranges: int) -> Sketch:
    """A superset of ``sketch`` whose filter on ``table`` has at most ``max_ranges``
    ranges and reads as few rows of ``found`` as such a filter can.

    Filling the gap between two ranges of the sketch adds exactly the blocks lying
    wholly inside the gap (a block meeting either range is read anyway), so gaps holding
    no whole block are filled for free; beyond that the gaps holding the fewest such
    rows are filled until ``max_ranges`` remain. Without blocks (no files), the smallest
    gaps in fragments are filled (``Sketch.coarsened``).
    """
    located = sketch.partitions.for_table(table)
    if located is None:
        return sketch
    part, off = located
    if found is None or not len(found):
        coarse = sketch.coarsened(max_ranges)
        out = BitMap(sketch.fragments)
        out.update(g for g in coarse.fragments if off <= g < off + part.size)
        return Sketch(sketch.partitions, out)
    runs: list[list[int]] = []  # [first, last] local fragments of each range
    for f in sketch.table_fragments(table):
        if runs and f == runs[-1][1] + 1:
            runs[-1][1] = f
        else:
            runs.append([f, f])
    if len(runs) < 2:
        return sketch
    keys = part._sorted_bounds
    # the gap after run i spans fragments runs[i][1]+1 .. runs[i+1][0]-1: keys
    # [bound of its first fragment, bound after its last)
    costs = [found.rows_inside(keys[a[1]], keys[b[0] - 1]) for a, b in zip(runs, runs[1:])]
    order = sorted(range(len(costs)), key=lambda i: (costs[i], i))
    fill = {i for i in order if costs[i] == 0}
    for i in order:
        if len(runs) - len(fill) <= max_ranges:
            break
        fill.add(i)
    out = BitMap(sketch.fragments)
    for i in fill:
        out.update(range(off + runs[i][1] + 1, off + runs[i + 1][0]))
    return Sketch(sketch.partitions, out)


@dataclass(frozen=True)
class LayoutFit:
    """A sketch fitted to its tables' blocks (``fit_to_layout``) and, per sketched table
    with files, the share of its rows (``shares``) and bytes (``byte_shares``) the
    fitted filter reads."""

    sketch: Sketch
    shares: dict[str, float]
    byte_shares: dict[str, float]


def fit_to_layout(sketch: Sketch, versions: Mapping[str, int], layout: Any,
                  max_ranges: int) -> LayoutFit:
    """``fit_to_blocks`` on every sketched table at its version in ``versions``
    (``layout(table, version, column)`` gives its blocks), with what the fitted filter
    reads of each."""
    shares: dict[str, float] = {}
    byte_shares: dict[str, float] = {}
    for part in sketch.partitions.partitions:
        t = part.table
        found = layout(t, versions[t], part.column) if t in versions else None
        sketch = fit_to_blocks(sketch, t, found, max_ranges)
        if found is not None and found.total_rows:
            rows, size, _ = found.read(part, sketch.table_fragments(t))
            shares[t] = rows / found.total_rows
            if found.total_bytes:
                byte_shares[t] = size / found.total_bytes
    return LayoutFit(sketch, shares, byte_shares)
