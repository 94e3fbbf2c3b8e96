"""File skipping for sketch-filtered queries (imp_core/spark/skipping.py).

Logic: a file is left out only when its logged [min, max] meets none of the ranges the
sketch's filter keeps (checked against brute force over random statistics and sketches).
Spark: the service's run_query over a table of many clustered files reads fewer files with
a sketch, returns the plain query's rows, and every skipped file holds no row the filter
keeps (checked against the files' actual values).
"""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pyroaring import BitMap
from runtime_support import make_config

from imp_core.sketch.partition import PartitionSet, RangePartition
from imp_core.sketch.sketch import Sketch
from imp_core.spark.compile import predicate_ranges
from imp_core.spark.skipping import STRING_PREFIX_TRUSTED, prunable, sketch_files


def _in_ranges(ranges, value) -> bool:
    if value is None:
        return bool(ranges) and ranges[0].includes_null
    return any((r.lo is None or value >= r.lo) and (r.hi is None or value < r.hi)
               for r in ranges)


def _sketch(part: RangePartition, frags) -> Sketch:
    return Sketch(PartitionSet((part,)), BitMap(frags))


@pytest.mark.parametrize("seed", range(40))
def test_kept_files_are_exactly_those_meeting_the_filter(seed):
    rng = np.random.default_rng(seed)
    bounds = sorted(rng.choice(np.arange(-500, 500), size=int(rng.integers(1, 60)),
                               replace=False).tolist())
    part = RangePartition.from_bounds("t", "a", pa.int64(), bounds)
    frags = rng.choice(part.size, size=int(rng.integers(0, part.size + 1)), replace=False)
    sketch = _sketch(part, frags.tolist())
    ranges = predicate_ranges(sketch, "t")
    stats = []
    for i in range(200):
        lo = int(rng.integers(-600, 600))
        hi = lo + int(rng.integers(0, 80))
        nulls = int(rng.integers(0, 3)) if rng.random() < 0.3 else 0
        stats.append((f"f{i}", lo, hi, nulls))
    stats.append(("nostats", None, None, None))
    stats.append(("allnull", None, None, 7))
    kept = set(sketch_files(sketch, "t", stats))
    assert {"nostats", "allnull"} <= kept
    for uri, lo, hi, nulls in stats[:-2]:
        # brute force: some integer in [lo, hi] (or a NULL) passes the filter
        meets = any(_in_ranges(ranges, v) for v in range(lo, hi + 1)) or \
            (nulls > 0 and _in_ranges(ranges, None))
        assert (uri in kept) == meets, (uri, lo, hi, nulls, ranges)


def test_types_whose_statistics_cannot_skip_keep_every_file():
    assert prunable(pa.int32()) and prunable(pa.date32()) and prunable(pa.decimal128(10, 2))
    assert prunable(pa.string()) and prunable(pa.string_view())
    assert not prunable(pa.float64())
    part = RangePartition.from_bounds("t", "f", pa.float64(), [1.5, 3.5])
    stats = [("x", 0.0, 1.0, 0), ("y", 4.0, 5.0, 0)]
    assert sketch_files(_sketch(part, [1]), "t", stats) == ["x", "y"]
    other = RangePartition.from_bounds("u", "a", pa.int64(), [10])
    assert sketch_files(_sketch(other, [1]), "t", stats) == ["x", "y"]  # t not sketched


def test_strings_skip_on_short_maxima_and_read_long_ones_as_unbounded():
    part = RangePartition.from_bounds("t", "s", pa.string(), ["g", "p"])
    sketch = _sketch(part, [1])  # ['g', 'p')
    long_max = "b" * STRING_PREFIX_TRUSTED  # may be a truncation of any "b..." string
    stats = [("below", "a", "b", 0), ("inside", "h", "k", 0), ("above", "q", "z", 0),
             ("long_below", "a", long_max, 0), ("long_above", "q", "q" * 40, 0),
             ("nulls", None, None, 3)]
    assert sketch_files(sketch, "t", stats) == ["inside", "long_below", "nulls"]


STRINGS = st.lists(st.text(alphabet="abz\u00e9\u4e2d", min_size=0, max_size=90), min_size=1,
                   max_size=12)


@settings(max_examples=25, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(files=st.lists(STRINGS, min_size=1, max_size=3),
       bounds=st.lists(st.text(alphabet="abz\u00e9", max_size=70), min_size=1, max_size=4,
                       unique=True),
       data=st.data())
def test_string_files_written_by_delta_rs_are_kept_when_they_hold_a_kept_row(
        tmp_path_factory, files, bounds, data):
    """delta-rs truncates long string statistics (min to a prefix, max raised); a file
    holding a value the sketch's ranges keep is never skipped."""
    from deltalake import DeltaTable, write_deltalake

    root = tmp_path_factory.mktemp("strings")
    for values in files:
        write_deltalake(str(root), pa.table({"s": pa.array(values, pa.string())}),
                        mode="append")
    part = RangePartition.from_bounds("t", "s", pa.string(), sorted(bounds))
    frags = data.draw(st.lists(st.integers(0, part.size - 1), unique=True))
    sketch = _sketch(part, frags)
    ranges = predicate_ranges(sketch, "t")
    table = DeltaTable(str(root))
    actions = pa.table(table.get_add_actions(flatten=True)).to_pydict()
    stats = [(uri, lo, hi, n) for uri, lo, hi, n in zip(
        actions["path"], actions["min.s"], actions["max.s"], actions["null_count.s"])]
    kept = set(sketch_files(sketch, "t", stats))
    for uri in actions["path"]:
        values = pq.read_table(str(root / uri)).column("s").to_pylist()
        if any(_in_ranges(ranges, v) for v in values):
            assert uri in kept, (uri, values, ranges)


@pytest.mark.parametrize("dtype,conv", [
    (pa.date32(), lambda v: dt.date(2020, 1, 1) + dt.timedelta(days=v)),
    (pa.decimal128(12, 2), lambda v: Decimal(v) / 4),
])
def test_dates_and_decimals(dtype, conv):
    part = RangePartition.from_bounds("t", "a", dtype, [conv(10), conv(20), conv(30)])
    sketch = _sketch(part, [2])  # [20, 30)
    stats = [("below", conv(0), conv(19), 0), ("edge", conv(15), conv(20), 0),
             ("inside", conv(21), conv(22), 0), ("at_hi", conv(30), conv(40), 0)]
    assert sketch_files(sketch, "t", stats) == ["edge", "inside"]


# -- through Spark and the service ----------------------------------------------------------
def _clustered_service(tmp_path, data: pa.Table, column: str):
    """A store of small files clustered on ``column`` and a started Coordinator over it."""
    from imp_actors.coordinator import Coordinator
    from imp_core.storage import DeltaStore
    from imp_core.storage.delta_store import WriteOptions

    store = DeltaStore(tmp_path / "tables", WriteOptions(max_row_group_size=512,
                                                         target_file_size=8 * 1024))
    store.create_table("t", data, key=["id"], cluster_by=[column])
    return store, Coordinator(make_config(tmp_path / "svc", tables_root=str(store.root)),
                              store=store).start()


def _skipped_files_hold_no_kept_row(store, sketch: Sketch, column: str) -> set[str]:
    """The files the sketch's filter keeps, after checking that no other file holds a
    row the filter keeps (read from the files themselves)."""
    ranges = predicate_ranges(sketch, "t")
    _, stats = store.file_stats("t", None, column)
    kept = set(sketch_files(sketch, "t", stats))
    for uri, *_ in stats:
        if uri not in kept:
            path = uri[len("file://"):] if uri.startswith("file://") else uri
            values = pq.read_table(path, columns=[column]).column(column).to_pylist()
            assert not any(_in_ranges(ranges, v) for v in values), uri
    return kept


@pytest.mark.spark
@pytest.mark.integration
def test_service_query_reads_fewer_files_and_the_same_rows(spark, tmp_path):
    from imp_actors.types import QuerySpec

    rng = np.random.default_rng(3)
    n = 40_000
    data = pa.table({"id": pa.array(np.arange(n), pa.int64()),
                     "a": pa.array(rng.integers(0, 400, n), pa.int64()),
                     "c": pa.array(rng.integers(0, 1000, n), pa.int64())})
    # small files, clustered on a: each file spans a narrow range of a
    store, c = _clustered_service(tmp_path, data, "a")
    try:
        sql = "SELECT a, avg(c) AS ac FROM t GROUP BY a HAVING avg(c) > 560"
        c.register(QuerySpec(name="q", sql=sql, partitions={"t.a": 100}))
        extra = pa.table({"id": pa.array([n, n + 1], pa.int64()),
                          "a": pa.array([5, 390], pa.int64()),
                          "c": pa.array([999, 0], pa.int64())})
        c.apply_update("t", inserts=extra, deletes=data.slice(0, 3))
        used = c.run_query(query="q", use_sketch=True)
        plain = c.run_query(sql=sql, use_sketch=False)
        assert used.rows.sort_by("a").equals(plain.rows.sort_by("a"))
        assert used.rows.num_rows > 0
        total = len(store.file_uris("t"))
        assert total > 10
        assert used.files_skipped["t"] > 0
        assert used.files_read["t"] + used.files_skipped["t"] == total
        assert len(_skipped_files_hold_no_kept_row(store, used.sketch.sketch, "a")) < total
    finally:
        c.close(checkpoint=False)


@pytest.mark.spark
@pytest.mark.integration
def test_service_query_on_a_string_attribute_skips_files_and_keeps_the_rows(spark, tmp_path):
    """A sketch on a string column: files whose logged [min, max] miss the filter's ranges
    are skipped (short values: exact statistics), files of long values (truncated
    statistics) are read when they may hold a kept row, and the rows equal the plain
    query's."""
    from imp_actors.types import QuerySpec

    rng = np.random.default_rng(5)
    n = 20_000
    ids = rng.integers(0, 300, n)
    # a tenth of the names are long, sharing a 70-character prefix (truncated statistics)
    names = [f"n{v:03d}" if i % 10 else f"{'z' * 70}{v:03d}" for i, v in enumerate(ids)]
    data = pa.table({"id": pa.array(np.arange(n), pa.int64()),
                     "s": pa.array(names, pa.string()),
                     "c": pa.array(rng.integers(0, 1000, n), pa.int64())})
    store, c = _clustered_service(tmp_path, data, "s")
    try:
        sql = "SELECT s, avg(c) AS ac FROM t GROUP BY s HAVING avg(c) > 600"
        c.register(QuerySpec(name="q", sql=sql, partitions={"t.s": 60}))
        used = c.run_query(query="q", use_sketch=True)
        plain = c.run_query(sql=sql, use_sketch=False)
        assert used.rows.sort_by("s").equals(plain.rows.sort_by("s"))
        assert used.rows.num_rows > 0
        assert used.files_skipped["t"] > 0
        _skipped_files_hold_no_kept_row(store, used.sketch.sketch, "s")
    finally:
        c.close(checkpoint=False)
