"""Reading memory-mapped files in parallel: tell the kernel every page a read will touch
before touching any.

A probe of a disk index touches a few scattered pages per asked key (the key's hashes,
then its rows in each column). Touched one after another, pages that are not in the page
cache are read one at a time, each a full disk round trip: 100 keys took 100-350 ms at
SF 10. ``madvise(MADV_WILLNEED)`` over all of them first queues the reads together, so
they overlap; the touches then find the pages in memory or in flight. Where the platform
has no ``madvise`` the advice is skipped (reads stay correct, only serial).

Invariant: advice never changes what is read, only when the pages arrive.
"""

from __future__ import annotations

import mmap
from pathlib import Path

import numpy as np
import pyarrow as pa

PAGE = mmap.PAGESIZE
_WILLNEED = getattr(mmap, "MADV_WILLNEED", None)


def mapped(path: Path) -> mmap.mmap:
    """``path`` mapped read-only (the file must not be empty)."""
    with open(path, "rb") as handle:
        return mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ)


def advise(target: mmap.mmap, starts: np.ndarray, ends: np.ndarray) -> None:
    """Ask for the bytes ``[starts[i], ends[i])`` of ``target``: ranges rounded out to
    whole pages, merged where they touch, one call per merged range."""
    if _WILLNEED is None or len(starts) == 0:
        return
    size = len(target)
    lo = (np.clip(np.asarray(starts, dtype=np.int64), 0, size) // PAGE) * PAGE
    hi = np.clip(np.asarray(ends, dtype=np.int64), 0, size)
    keep = hi > lo
    lo, hi = lo[keep], hi[keep]
    if len(lo) == 0:
        return
    order = np.argsort(lo, kind="stable")
    lo, hi = lo[order], np.maximum.accumulate(hi[order])
    # a range starts a new run when it begins past every earlier range's end
    new = np.ones(len(lo), dtype=bool)
    new[1:] = lo[1:] > hi[:-1]
    run_lo = lo[new]
    run_hi = np.maximum.reduceat(hi, np.flatnonzero(new))
    for a, b in zip(run_lo.tolist(), run_hi.tolist()):
        try:
            target.madvise(_WILLNEED, a, b - a)
        except OSError:  # advice is optional: a refused one leaves the read serial
            return


def _is_wide_text(kind: pa.DataType) -> bool:
    return pa.types.is_large_string(kind) or pa.types.is_large_binary(kind)


def _is_text(kind: pa.DataType) -> bool:
    return pa.types.is_string(kind) or pa.types.is_binary(kind) or _is_wide_text(kind)


def column_ranges(array: pa.Array, base: int, runs_lo: np.ndarray, runs_hi: np.ndarray,
                  text: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """The file byte ranges holding rows ``[runs_lo[i], runs_hi[i])`` of ``array`` (whose
    buffers live in a mapping starting at address ``base``): its validity bits, values
    and string offsets; with ``text``, a string column's characters instead, which are
    found by reading its offsets (advise those first). Types of other layouts give no
    ranges (their pages are not advised)."""
    kind = array.type
    buffers = array.buffers()
    lo = runs_lo + array.offset
    hi = runs_hi + array.offset
    starts: list[np.ndarray] = []
    ends: list[np.ndarray] = []

    def add(buffer: pa.Buffer | None, first: np.ndarray, last: np.ndarray) -> None:
        if buffer is not None and buffer.size:
            at = buffer.address - base
            starts.append(at + first)
            ends.append(at + np.minimum(last, buffer.size))

    if text:
        if _is_text(kind):
            offsets = np.frombuffer(buffers[1],
                                    dtype=np.int64 if _is_wide_text(kind) else np.int32)
            add(buffers[2], offsets[lo].astype(np.int64), offsets[hi].astype(np.int64))
    else:
        add(buffers[0], lo // 8, hi // 8 + 1)
        if pa.types.is_boolean(kind):
            add(buffers[1], lo // 8, hi // 8 + 1)
        elif _is_text(kind):
            width = 8 if _is_wide_text(kind) else 4
            add(buffers[1], lo * width, (hi + 1) * width)
        elif len(buffers) == 2 and _byte_width(kind):
            add(buffers[1], lo * _byte_width(kind), hi * _byte_width(kind))
    if not starts:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    return np.concatenate(starts), np.concatenate(ends)


def _byte_width(kind: pa.DataType) -> int:
    """Bytes a value of a fixed-width type takes (0: not fixed width, or bits)."""
    try:
        bits = kind.bit_width
    except ValueError:
        return 0
    return bits // 8 if bits % 8 == 0 else 0


def runs(positions: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Sorted ``positions`` as runs of consecutive values: (firsts, one past lasts)."""
    if len(positions) == 0:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    cut = np.flatnonzero(np.diff(positions) != 1) + 1
    firsts = positions[np.concatenate(([0], cut))]
    lasts = positions[np.concatenate((cut - 1, [len(positions) - 1]))]
    return firsts.astype(np.int64), lasts.astype(np.int64) + 1
