"""Freed memory goes back to the operating system (``imp_core.process.memory_release``)."""

from __future__ import annotations

import gc

import pyarrow as pa
import pytest

from imp_core.process.memory_release import _malloc_trim, release_free_memory


def _resident_mib() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096 / (1 << 20)


@pytest.mark.skipif(_malloc_trim() is None,
                    reason="the C library has no malloc_trim (not glibc): nothing to trim")
def test_free_pages_between_live_objects_are_returned():
    # 200 MiB in 1 KiB chunks (above pymalloc's limit: glibc's heap), one chunk in 64
    # kept: the free pages sit between live ones, where malloc never trims on its own
    chunks = [bytearray(1024) for _ in range(200_000)]
    kept = chunks[::64]
    del chunks
    gc.collect()
    before = _resident_mib()
    release_free_memory()
    after = _resident_mib()
    assert before - after >= 100, (before, after)
    assert all(len(k) == 1024 and not any(k[:8]) for k in kept)


def test_live_data_is_untouched():
    table = pa.table({"k": pa.array(range(100_000), pa.int64()),
                      "s": pa.array([str(i) for i in range(100_000)])})
    junk = pa.array(range(1_000_000), pa.int64())
    allocated = pa.total_allocated_bytes()
    del junk
    release_free_memory()
    assert pa.total_allocated_bytes() < allocated
    assert table.column("k").to_pylist()[-3:] == [99_997, 99_998, 99_999]
    assert table.column("s")[12_345].as_py() == "12345"
    release_free_memory()  # a second call with nothing to release is harmless
