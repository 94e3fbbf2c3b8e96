"""The base of a shared covering index (``table_index.TableIndex``): its rows as of its
floor version, sorted by key hash, in memory or in a Parquet file on the store's disk.

Both bases hold *counted rows*: the index's columns plus ``COUNT`` (how often the table
holds the row, > 0), sorted by the hash of the key column (``join_index.key_hashes``: an
integer key is its own hash, so such a base is in key order). They answer the same
question, ``rows_for(hashes)``: every row whose key hash is one of ``hashes``.

- ``MemoryBase`` keeps the rows as Arrow columns with their hashes beside them; a probe is
  two binary searches per asked hash.
- ``DiskBase`` keeps them in one Parquet file written in that order, with the hash as a
  column (``HASH``) and small row groups, so the file is clustered by the probe key: a
  probe reads only the row groups whose [min, max] hash range holds an asked hash (the
  ranges come from the footer and stay in memory, a few bytes per group), never the
  whole table. Its files are immutable and named by table id, key, floor version and
  columns, so any process on the store may open one another wrote (``find``) instead of
  building its own; a file is written under a temporary name and renamed into place.

Invariant (both): the rows are exactly the consolidated rows (equal rows summed, counts
> 0) of the table at the floor version, restricted to the index's columns, ordered by
``hashes`` (non-decreasing).
"""

from __future__ import annotations

import hashlib
import os
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

COUNT = "__imp_n"  # a base row's multiplicity, a log row's signed weight
HASH = "__imp_h"  # a disk base's key hash column (what its row groups are clustered by)
# rows per row group of a disk base: a probe of k keys reads at most k groups of this
# many rows (8192 rows of a few numeric columns is ~100 KB; smaller groups make the
# footer, held in memory, and the per-group read overhead grow)
GROUP_ROWS = 8192
_FORMAT = "h1"  # the hash and file layout; a change names new files


@dataclass
class Part:
    """Counted or weighted rows (``COUNT``) with their key hashes, in the same order."""

    rows: pa.Table
    hashes: np.ndarray


def member(hashes: np.ndarray, wanted: np.ndarray) -> np.ndarray:
    """Whether each of ``hashes`` is in ``wanted`` (sorted, unique): a binary search per
    hash, cheaper than ``np.isin`` for the few asked keys of a probe."""
    if len(wanted) == 0:
        return np.zeros(len(hashes), dtype=bool)
    at = np.minimum(np.searchsorted(wanted, hashes), len(wanted) - 1)
    return wanted[at] == hashes


class IndexBase(Protocol):
    kind: str
    num_rows: int

    def rows_for(self, wanted: np.ndarray | None) -> pa.Table: ...
    def part(self) -> Part: ...
    def nbytes(self) -> int: ...
    def disk_bytes(self) -> int: ...


def sorted_part(rows: pa.Table, hashes: np.ndarray) -> Part:
    order = np.argsort(hashes, kind="stable")
    return Part(rows.take(pa.array(order)), hashes[order])


def ranges(lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """The concatenation of ``arange(lo[i], hi[i])`` over i, vectorized."""
    lengths = hi - lo
    keep = lengths > 0
    lo, lengths = lo[keep], lengths[keep]
    total = int(lengths.sum())
    if total == 0:
        return np.zeros(0, dtype=np.int64)
    starts = np.repeat(lo - np.concatenate(([0], np.cumsum(lengths)[:-1])), lengths)
    return starts + np.arange(total, dtype=np.int64)


def consolidate(rows: pa.Table, columns: list[str]) -> pa.Table:
    """Equal rows summed into one with their total count; rows counting 0 or less
    dropped (a reader's version never nets a row below zero)."""
    if rows.num_rows == 0:
        return rows
    summed = rows.group_by(columns, use_threads=False).aggregate([(COUNT, "sum")])
    summed = summed.rename_columns([COUNT if n == f"{COUNT}_sum" else n
                                    for n in summed.column_names]).select([*columns, COUNT])
    return summed.filter(pc.greater(summed.column(COUNT), 0))


def folded(base: Part, log: list[Part], columns: list[str], hash_of) -> Part:
    """``base`` with the weighted rows of ``log`` added, consolidated and sorted: only
    the base's rows whose hash the log touches are regrouped (the rest keep their
    order), so a fold costs the log's size plus one pass over the base."""
    if not log:
        return base
    touched = np.unique(np.concatenate([p.hashes for p in log]))
    lo = np.searchsorted(base.hashes, touched, "left")
    hi = np.searchsorted(base.hashes, touched, "right")
    hit = ranges(lo, hi)
    keep = np.ones(base.rows.num_rows, dtype=bool)
    keep[hit] = False
    changed = consolidate(pa.concat_tables(
        [base.rows.take(pa.array(hit))] + [p.rows for p in log]), columns)
    rows = pa.concat_tables([base.rows.filter(pa.array(keep)), changed])
    hashes = np.concatenate([base.hashes[keep], hash_of(changed)])
    return sorted_part(rows, hashes)


class MemoryBase:
    """A base held in memory (see the module docstring)."""

    kind = "memory"

    def __init__(self, part: Part):
        self._part = part
        self.num_rows = part.rows.num_rows

    def rows_for(self, wanted: np.ndarray | None) -> pa.Table:
        if wanted is None:
            return self._part.rows
        lo = np.searchsorted(self._part.hashes, wanted, "left")
        hi = np.searchsorted(self._part.hashes, wanted, "right")
        return self._part.rows.take(pa.array(ranges(lo, hi)))

    def part(self) -> Part:
        return self._part

    def nbytes(self) -> int:
        return self._part.rows.nbytes + self._part.hashes.nbytes

    def disk_bytes(self) -> int:
        return 0


def index_directory(root: Path, table: str, table_id: str, key: str) -> Path:
    """Where the disk bases of ``table`` (the Delta table ``table_id``: a table dropped
    and created again gets other files) on ``key`` live under the store's ``root``."""
    return root / "_imp_indexes" / f"{table}-{table_id[:12]}" / f"{key}-{_FORMAT}"


def _columns_tag(columns: list[str]) -> str:
    return hashlib.sha1("\0".join(sorted(columns)).encode()).hexdigest()[:10]


class DiskBase:
    """A base in one immutable Parquet file clustered by key hash (module docstring)."""

    kind = "disk"

    def __init__(self, path: Path, columns: list[str]):
        self.path = path
        self.columns = columns
        self._file = pq.ParquetFile(path)
        meta = self._file.metadata
        self.num_rows = meta.num_rows
        at = meta.schema.to_arrow_schema().get_field_index(HASH)
        groups = [meta.row_group(i) for i in range(meta.num_row_groups)]
        stats = [g.column(at).statistics for g in groups]
        # a group without statistics is read by every probe (its range is everything)
        self._lo = np.array([s.min if s is not None and s.has_min_max else -2**63
                             for s in stats], dtype=np.int64)
        self._hi = np.array([s.max if s is not None and s.has_min_max else 2**63 - 1
                             for s in stats], dtype=np.int64)
        self.groups_read = 0

    @classmethod
    def write(cls, directory: Path, floor: int, part: Part, columns: list[str],
              group_rows: int | None = None) -> DiskBase:
        """``part`` (sorted) written as the base at ``floor`` in ``directory``, in row
        groups of ``group_rows`` rows (default ``GROUP_ROWS``)."""
        directory.mkdir(parents=True, exist_ok=True)
        path = directory / f"v{floor:012d}-{_columns_tag(columns)}.parquet"
        tmp = directory / f".{path.name}.{uuid.uuid4().hex}.tmp"
        data = part.rows.append_column(HASH, pa.array(part.hashes, pa.int64()))
        try:
            pq.write_table(data, tmp, row_group_size=max(1, group_rows or GROUP_ROWS),
                           compression="lz4", write_statistics=[HASH])
            os.replace(tmp, path)
        finally:
            tmp.unlink(missing_ok=True)
        return cls(path, columns)

    @classmethod
    def find(cls, directory: Path, columns: list[str], version: int) -> DiskBase | None:
        """The newest base in ``directory`` at a floor <= ``version`` holding at least
        ``columns``, or None. A file that cannot be opened is passed over."""
        if not directory.is_dir():
            return None
        found: list[tuple[int, Path]] = []
        for path in directory.glob("v*.parquet"):
            try:
                floor = int(path.name[1:13])
            except ValueError:
                continue
            if floor <= version:
                found.append((floor, path))
        for _, path in sorted(found, reverse=True):
            try:
                names = pq.read_schema(path).names
                if set(columns) <= set(names) and COUNT in names and HASH in names:
                    return cls(path, [n for n in names if n not in (COUNT, HASH)])
            except (OSError, pa.ArrowException):
                continue
        return None

    @staticmethod
    def floor_of(path: Path) -> int:
        return int(path.name[1:13])

    def _groups(self, wanted: np.ndarray) -> np.ndarray:
        """The row groups whose hash range holds one of ``wanted`` (sorted)."""
        first = np.searchsorted(wanted, self._lo, "left")
        last = np.searchsorted(wanted, self._hi, "right")
        return np.flatnonzero(last > first)

    def rows_for(self, wanted: np.ndarray | None) -> pa.Table:
        names = [*self.columns, COUNT]
        if wanted is None:
            return self._file.read(columns=names, use_threads=False)
        groups = self._groups(wanted)
        if len(groups) == 0:
            return self._file.schema_arrow.empty_table().select(names)
        self.groups_read += len(groups)
        data = self._file.read_row_groups(groups.tolist(), columns=[*names, HASH],
                                          use_threads=False)
        hashes = data.column(HASH).to_numpy()
        return data.filter(pa.array(member(hashes, wanted))).select(names)

    def part(self) -> Part:
        data = self._file.read(columns=[*self.columns, COUNT, HASH], use_threads=False)
        return Part(data.drop_columns([HASH]), data.column(HASH).to_numpy())

    def nbytes(self) -> int:
        return self._lo.nbytes + self._hi.nbytes

    def memory_bytes(self) -> int:
        """About what the base would take in memory (its columns uncompressed)."""
        meta = self._file.metadata
        return sum(meta.row_group(i).total_byte_size for i in range(meta.num_row_groups))

    def disk_bytes(self) -> int:
        try:
            return self.path.stat().st_size
        except OSError:
            return 0

    def group_count(self) -> int:
        return len(self._lo)


def prune(directory: Path, keep: int = 2) -> None:
    """Delete all but the ``keep`` newest bases in ``directory`` (a process that still
    reads a deleted one keeps its open file; a new reader builds or finds another)."""
    paths = sorted(directory.glob("v*.parquet"), reverse=True)
    for path in paths[keep:]:
        path.unlink(missing_ok=True)
