"""The change reader's choice of path: Spark only for commits whose change files, as the
direct read would read them, are large."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa

from imp_core.storage import ChangeReader, DeltaStore
from imp_core.storage.changes import commit_change_files


class _NoSpark:
    """A Spark source that must not be read from in these tests."""

    def changes(self, *args, **kwargs):  # pragma: no cover - reached only on a bug
        raise AssertionError("read through Spark")


def test_a_small_delete_from_large_files_is_read_directly(tmp_path: Path) -> None:
    n = 50_000
    rows = pa.table({"k": pa.array(range(n), pa.int64()),
                     "v": pa.array([i % 977 for i in range(n)], pa.int64())})
    store = DeltaStore(tmp_path / "s")
    store.create_table("t", rows, key=("k",))
    store.apply("t", deletes=rows.slice(100, 3))  # rewrites the data file
    location = store.entry("t").location
    files = commit_change_files(location, 1)
    assert {f.kind for f in files} == {"cdc"} and all(f.size > 0 for f in files)
    threshold = 2 * sum(f.size for f in files)
    data_bytes = sum(f.size for f in commit_change_files(location, 0))
    assert data_bytes > threshold  # the rewritten files alone would pass it
    reader = ChangeReader(store, _NoSpark(), spark_min_bytes=threshold)
    assert not reader.uses_spark("t", 0, 1)
    delta = reader.changes("t", 0, 1)
    assert sorted(delta.rows.column("k").to_pylist()) == [100, 101, 102]
    assert list(delta.weights) == [-1, -1, -1]
    # a commit adding more than the threshold goes to Spark
    more = pa.table({"k": pa.array(range(n, 2 * n), pa.int64()),
                     "v": pa.array([i % 977 for i in range(n)], pa.int64())})
    store.apply("t", inserts=more)
    assert sum(f.size for f in commit_change_files(location, 2)) > threshold
    assert reader.uses_spark("t", 1, 2)
