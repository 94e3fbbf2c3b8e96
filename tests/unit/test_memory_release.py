"""Freed memory goes back to the operating system (``imp_core.process.memory_release``)."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pyarrow as pa
import pytest

from imp_core.process.memory_release import _malloc_trim, release_free_memory

# Run in a process of its own: what the other tests of this process allocate and free
# cannot move its figures. Memory is counted as the process's resident plus swapped
# pages, so pages the kernel swaps out meanwhile still count as held.
_FREE_PAGES_BETWEEN_LIVE_ONES = textwrap.dedent("""
    import gc, json
    from imp_core.process.memory_release import release_free_memory

    def held():
        sizes = {}
        with open("/proc/self/status") as status:
            for line in status:
                key, _, value = line.partition(":")
                if key in ("VmRSS", "VmSwap"):
                    sizes[key] = int(value.split()[0]) * 1024
        return sizes.get("VmRSS", 0) + sizes.get("VmSwap", 0)

    base = held()
    # 200 MiB in 1 KiB chunks (above pymalloc's limit: glibc's heap), one chunk in 64
    # kept: the free pages sit between live ones, where malloc never trims on its own
    chunks = [bytearray(1024) for _ in range(200_000)]
    kept = chunks[::64]
    allocated = held()
    del chunks
    gc.collect()
    freed = held()
    release_free_memory()
    trimmed = held()
    intact = all(len(k) == 1024 and not any(k[:8]) for k in kept)
    print(json.dumps({"base": base, "allocated": allocated, "freed": freed,
                      "trimmed": trimmed, "intact": intact}))
""")


@pytest.mark.skipif(_malloc_trim() is None,
                    reason="the C library has no malloc_trim (not glibc): nothing to trim")
def test_free_pages_between_live_objects_are_returned():
    run = subprocess.run([sys.executable, "-c", _FREE_PAGES_BETWEEN_LIVE_ONES],
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    m = json.loads(run.stdout)
    mib = {k: round(v / 2**20, 1) for k, v in m.items() if k != "intact"}
    took = m["allocated"] - m["base"]
    assert took >= 150 * 2**20, mib  # the allocation really took its memory
    # release_free_memory itself gives most of it back (86% here: the kept chunks pin a
    # page in sixteen); without it nothing is (malloc keeps pages between live ones)
    assert m["freed"] - m["trimmed"] >= 0.6 * took, mib
    assert m["intact"], "a kept chunk changed"


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
