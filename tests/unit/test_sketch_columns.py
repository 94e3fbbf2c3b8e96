"""Preparing queries on a store's sketch column: what reading the column at a version gave
(its statistics, its equi-depth partitions) is taken from the process's memo by the next
query on the same column and version, and read again at a new version, for another
fragment count, or for a table created anew."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from imp_core.query.prepare import StoreTables, prepare_query
from imp_core.query.sketch_columns import LEARNED, SketchColumns
from imp_core.storage import DeltaStore

SQL = "SELECT g, count(*) AS n FROM t GROUP BY g HAVING count(*) > 3"


class CountingTables(StoreTables):
    """``StoreTables`` counting the column reads."""

    reads = 0

    def column(self, table: str, column: str) -> pa.ChunkedArray:
        CountingTables.reads += 1
        return super().column(table, column)


def _table(n: int, seed: int) -> pa.Table:
    rng = np.random.default_rng(seed)
    return pa.table({"k": pa.array(np.arange(n), pa.int64()),
                     "g": pa.array(rng.integers(0, 50, n), pa.int64())})


@pytest.fixture
def store(tmp_path):
    LEARNED.clear()
    s = DeltaStore(tmp_path)
    s.create_table("t", _table(5000, 1), key=("k",))
    yield s
    LEARNED.clear()


def _prepare(store: DeltaStore, fragments: int = 16):
    before = CountingTables.reads
    prepared = prepare_query(SQL, CountingTables(store), {"t.k": fragments})
    return prepared, CountingTables.reads - before


def test_a_second_query_on_the_same_column_and_version_reads_nothing(store):
    first, reads = _prepare(store)
    assert reads == 1
    second, reads = _prepare(store)
    assert reads == 0 and second.partitions == first.partitions
    assert second.estimate == first.estimate  # the same statistics


def test_a_new_version_another_count_or_a_new_table_reads_again(store):
    first, _ = _prepare(store)
    _, reads = _prepare(store, fragments=8)
    assert reads == 1  # another fragment count: the values are read for its split points
    store.apply("t", inserts=_table(3000, 2).set_column(
        0, "k", pa.array(np.arange(10_000, 13_000), pa.int64())))
    moved, reads = _prepare(store)
    assert reads == 1 and moved.partitions != first.partitions
    store.drop_table("t")
    store.create_table("t", _table(5000, 3), key=("k",))  # version 0 again, a new table
    fresh, reads = _prepare(store)
    assert reads == 1 and fresh.versions == first.versions


def test_the_memo_drops_the_least_recently_used():
    from imp_core.estimate.memory import ColumnStats

    memo = SketchColumns(capacity=2)
    for key in ("a", "b"):
        memo.keep_stats(key, ColumnStats(None, 0, 1))
    assert memo.stats("a") is not None  # "a" used last: "b" goes first
    memo.keep_stats("c", ColumnStats(None, 0, 1))
    assert memo.stats("b") is None and memo.stats("a") is not None
    assert memo.stats(None) is None and memo.partition(None, 4) is None
