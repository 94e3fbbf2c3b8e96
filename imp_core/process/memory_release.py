"""Giving freed memory back to the operating system.

After a large transient allocation (a query's bootstrap, the state of a query being
evicted or restored) the allocators keep the freed pages: glibc's malloc in its heap and
arenas, Arrow's pool (mimalloc or jemalloc) in its segments. The process's resident set
then stays near its peak, and the memory the Spark JVM beside it, or the next query's
bootstrap, needs is held by pages nothing uses. With all 22 TPC-H queries in one process
at SF 10, handing them back after those steps lowered the peak during maintenance from
21.9 to 14.1 GB (docs/benchmarks.md).

``release_free_memory`` returns them. It costs milliseconds (5-20 ms with 2 GB resident),
so it is called after work that costs far more (registration, restore, eviction), never
per maintenance step.
"""

from __future__ import annotations

import ctypes
import sys
from typing import Callable

import pyarrow as pa

__all__ = ["release_free_memory"]

_TRIM: list[Callable[[int], int] | None] = []  # glibc's malloc_trim, looked up once


def _malloc_trim() -> Callable[[int], int] | None:
    """glibc's ``malloc_trim``, or None where the C library has none (musl, macOS)."""
    if not _TRIM:
        found = None
        if sys.platform.startswith("linux"):
            try:
                found = ctypes.CDLL("libc.so.6").malloc_trim
                found.argtypes, found.restype = [ctypes.c_size_t], ctypes.c_int
            except (OSError, AttributeError):
                found = None
        _TRIM.append(found)
    return _TRIM[0]


def release_free_memory() -> None:
    """Return the free pages of this process's allocators to the operating system: Arrow's
    pool, then the C heap. Live data is untouched; where neither allocator can release,
    nothing happens."""
    pa.default_memory_pool().release_unused()
    trim = _malloc_trim()
    if trim is not None:
        trim(0)
