"""Creating a table from Parquet parts by streaming (imp_core.storage.parquet_load).

The oracle is the in-memory path (``DeltaStore.create_table`` on the same rows): both
must give the same table. Errors must match it too and leave nothing behind.
"""

from __future__ import annotations

import random
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from imp_core.errors import SchemaMismatchError, UnknownTableError
from imp_core.storage import DeltaStore, WriteOptions

SMALL = WriteOptions(max_row_group_size=64, target_file_size=8192)


def _rows(n: int, seed: int, ordered: bool) -> pa.Table:
    rng = random.Random(seed)
    k = list(range(1, n + 1))
    if not ordered:
        rng.shuffle(k)
    return pa.table({
        "k": pa.array(k, pa.int64()),
        "c": pa.array(sorted(rng.randrange(50) for _ in range(n)) if ordered
                      else [rng.randrange(50) for _ in range(n)], pa.int32()),
        "s": pa.array([f"v{rng.randrange(9)}" for _ in range(n)], pa.large_string()),
    })


def _parts(table: pa.Table, folder: Path, parts: int, group: int) -> Path:
    folder.mkdir(parents=True)
    step = -(-table.num_rows // parts)
    for i in range(parts):
        pq.write_table(table.slice(i * step, step), folder / f"part-{i}.parquet",
                       row_group_size=group)
    return folder


@pytest.mark.parametrize("ordered", [True, False])
@pytest.mark.parametrize("keyed", [True, False])
def test_streamed_table_equals_the_in_memory_load(tmp_path: Path, ordered: bool,
                                                  keyed: bool) -> None:
    data = _rows(700, seed=3, ordered=ordered)
    folder = _parts(data, tmp_path / "in", parts=3, group=50)
    key = ("k",) if keyed else None
    domains = {"c": (0, 49)}
    streamed = DeltaStore(tmp_path / "a", SMALL)
    memory = DeltaStore(tmp_path / "b", SMALL)
    assert streamed.create_table_from_parquet("t", folder, key=key, domains=domains,
                                              cluster_by=("c",), progress=False) == 1
    memory.create_table("t", data, key=key, domains=domains, cluster_by=("c",))
    got = streamed.read("t", with_row_ids=not keyed)
    want = memory.read("t", with_row_ids=not keyed)
    assert got.schema == want.schema
    # rows in cluster order, hence the same files' statistics; a keyless table's __rid
    # numbers the rows 0..n-1 in that order in both paths
    order = [("c", "ascending"), ("k", "ascending")]
    assert got.sort_by(order).equals(want.sort_by(order))
    # clustered as the in-memory path clusters: row groups' ranges of c do not overlap
    for store in (streamed, memory):
        ranges = sorted((g.statistics.min, g.statistics.max) for f in store.file_uris("t")
                        for md in [pq.ParquetFile(f.removeprefix("file://")).metadata]
                        for g in (md.row_group(i).column(1) for i in range(md.num_row_groups)))
        assert all(hi <= lo for (_, hi), (lo, _) in zip(ranges, ranges[1:])), ranges
    assert streamed.entry("t").sketch_columns == ("c",)


@pytest.mark.parametrize("bad", ["duplicate key", "outside domain", "null key"])
def test_a_refused_stream_writes_nothing(tmp_path: Path, bad: str) -> None:
    data = _rows(300, seed=5, ordered=True)
    k = data.column("k").to_pylist()
    c = data.column("c").to_pylist()
    if bad == "duplicate key":
        k[250] = k[10]  # in another row group and another part file
    elif bad == "outside domain":
        c[-1] = 99
    else:
        k[120] = None
    data = data.set_column(0, "k", pa.array(k, pa.int64()))
    data = data.set_column(1, "c", pa.array(c, pa.int32()))
    folder = _parts(data, tmp_path / "in", parts=2, group=40)
    store = DeltaStore(tmp_path / "s", SMALL)
    with pytest.raises(SchemaMismatchError):
        store.create_table_from_parquet("t", folder, key=("k",), domains={"c": (0, 49)},
                                        cluster_by=("c",), progress=False)
    assert store.tables() == []
    with pytest.raises(UnknownTableError):
        store.entry("t")
    assert not (tmp_path / "s" / "tables" / "t").exists()
    # the same input without the fault loads
    fixed = folder.parent / "fixed"
    _parts(_rows(300, seed=5, ordered=True), fixed, parts=2, group=40)
    assert store.create_table_from_parquet("t", fixed, key=("k",), domains={"c": (0, 49)},
                                           cluster_by=("c",), progress=False) == 1
    assert store.read("t").num_rows == 300


def test_parts_with_different_columns_are_refused(tmp_path: Path) -> None:
    folder = tmp_path / "in"
    folder.mkdir()
    pq.write_table(pa.table({"k": [1, 2]}), folder / "a.parquet")
    pq.write_table(pa.table({"k": [3], "x": [1]}), folder / "b.parquet")
    store = DeltaStore(tmp_path / "s", SMALL)
    with pytest.raises(SchemaMismatchError, match="b.parquet"):
        store.create_table_from_parquet("t", folder, key=("k",), progress=False)
    assert store.tables() == []


def _groups(store: DeltaStore, column: str) -> list[tuple[int, int, int]]:
    """(min, max, rows) of ``column`` in every row group of the table's files."""
    out = []
    for f in store.file_uris("t"):
        md = pq.ParquetFile(f.removeprefix("file://")).metadata
        i = md.schema.to_arrow_schema().get_field_index(column)
        for g in range(md.num_row_groups):
            s = md.row_group(g).column(i).statistics
            out.append((s.min, s.max, md.row_group(g).num_rows))
    return out


def test_rows_keep_their_order_in_files_and_row_groups(tmp_path: Path) -> None:
    """delta-rs's writer hands small batches to several tasks and loses their order;
    every row group of a new table must hold consecutive rows of the sorted input."""
    n = 300_000
    data = pa.table({"k": pa.array(range(n), pa.int64()),
                     "s": pa.array([f"row {i % 977}" for i in range(n)])})
    folder = tmp_path / "in"
    folder.mkdir()
    pq.write_table(data, folder / "part.parquet", row_group_size=3000)
    options = WriteOptions(max_row_group_size=8192, target_file_size=256 * 1024)
    streamed = DeltaStore(tmp_path / "a", options)
    streamed.create_table_from_parquet("t", folder, key=("k",), cluster_by=("k",),
                                       progress=False)
    memory = DeltaStore(tmp_path / "b", options)
    memory.create_table("t", data.take(pa.array(random.Random(1).sample(range(n), n))),
                        key=("k",), cluster_by=("k",))
    for store in (streamed, memory):
        groups = _groups(store, "k")
        assert len(store.file_uris("t")) > 2
        assert sum(rows for _, _, rows in groups) == n
        assert all(hi - lo + 1 == rows for lo, hi, rows in groups), groups
        assert sum(rows < 8192 for _, _, rows in groups) <= 1  # only the last is short
        assert store.read("t").sort_by("k").equals(data)


def test_file_statistics_bound_every_row(tmp_path: Path) -> None:
    import datetime as dt
    import json
    from decimal import Decimal

    rng = random.Random(4)
    n = 5000
    data = pa.table({
        "k": pa.array(range(n), pa.int64()),
        "d": pa.array([None if i % 7 == 0 else Decimal(rng.randrange(-10**6, 10**6)) / 100
                       for i in range(n)], pa.decimal128(15, 2)),
        "t": pa.array([dt.date(1992, 1, 1) + dt.timedelta(days=rng.randrange(2500))
                       for _ in range(n)]),
        "s": pa.array([rng.choice(["a", "m", "z" * 40]) for _ in range(n)]),
        "f": pa.array([rng.random() for _ in range(n)]),
    })
    store = DeltaStore(tmp_path / "s", WriteOptions(max_row_group_size=512,
                                                    target_file_size=16 * 1024))
    store.create_table("t", data, key=("k",), cluster_by=("k",))
    log = tmp_path / "s" / "tables" / "t" / "_delta_log" / "00000000000000000000.json"
    adds = [json.loads(line)["add"] for line in log.read_text().splitlines()
            if '"add"' in line]
    stats = [json.loads(a["stats"]) for a in adds]
    assert len(stats) > 3
    assert sum(s["numRecords"] for s in stats) == n
    for path, st in zip([a["path"] for a in adds], stats):
        rows = pq.read_table(tmp_path / "s" / "tables" / "t" / path)
        assert st["numRecords"] == rows.num_rows
        for col in ("k", "d", "t", "f"):
            values = [v for v in rows.column(col).to_pylist() if v is not None]
            assert st["nullCount"][col] == rows.num_rows - len(values)
            lo, hi = st["minValues"][col], st["maxValues"][col]
            if col == "t":
                lo, hi = dt.date.fromisoformat(lo), dt.date.fromisoformat(hi)
            elif col == "d":
                lo, hi = Decimal(repr(lo)), Decimal(repr(hi))
            assert (lo, hi) == (min(values), max(values))
        # strings: exact bounds, or none where one would be longer than 32 characters
        strings = rows.column("s").to_pylist()
        if len(max(strings)) <= 32:
            assert (st["minValues"]["s"], st["maxValues"]["s"]) == (min(strings), max(strings))
        else:
            assert "s" not in st["maxValues"] and "s" not in st["minValues"]
    # the store's own reader of these statistics sees the same bounds
    _, files = store.file_stats("t", None, "k")
    assert sorted((lo, hi) for _, lo, hi, _ in files) == \
        sorted((s["minValues"]["k"], s["maxValues"]["k"]) for s in stats)


def test_an_empty_table_and_a_failed_write(tmp_path: Path) -> None:
    store = DeltaStore(tmp_path / "s", SMALL)
    empty = pa.table({"k": pa.array([], pa.int64())})
    assert store.create_table("e", empty, key=("k",)) == 0
    assert store.read("e").num_rows == 0 and store.schema("e") == empty.schema

    from imp_core.storage.ordered_write import write_ordered_table

    schema = pa.schema([pa.field("k", pa.int64())])

    def failing():
        for i in range(10):
            yield pa.record_batch([pa.array(range(i * 100, i * 100 + 100), pa.int64())],
                                  schema=schema)
        raise OSError("disk full")

    location = tmp_path / "f"
    with pytest.raises(OSError, match="disk full"):
        write_ordered_table(str(location), schema, failing(), SMALL, {})
    assert not location.exists()


def test_optimize_restores_consecutive_row_groups_and_keeps_row_ids(tmp_path: Path) -> None:
    """After MERGEs scatter rows, ``optimize`` writes them back in cluster order: every
    row group holds a run of the cluster column, a keyless table's rows keep their ids,
    and the version changes no data."""
    rng = random.Random(8)
    n = 20_000
    data = pa.table({"c": pa.array(range(n), pa.int64()),
                     "v": pa.array([rng.randrange(100) for _ in range(n)], pa.int64())})
    options = WriteOptions(max_row_group_size=1024, target_file_size=64 * 1024)
    store = DeltaStore(tmp_path / "s", options)
    store.create_table("t", data, key=None, cluster_by=("c",))
    for _ in range(3):
        gone = store.read("t").take(pa.array(rng.sample(range(store.read("t").num_rows), 50)))
        store.apply("t", deletes=gone, inserts=gone.slice(0, 20))
    before = store.read("t", with_row_ids=True).sort_by("__rid")
    v = store.optimize("t")
    assert store.changes("t", v - 1, v).num_rows == 0
    after = store.read("t", with_row_ids=True).sort_by("__rid")
    assert after.equals(before)
    groups = _groups(store, "c")
    live = sorted(after.column("c").to_pylist())
    for lo, hi, rows in groups:  # each group: consecutive values of the live rows
        i = live.index(lo)
        assert live[i + rows - 1] == hi
    assert sum(rows < 1024 for _, _, rows in groups) <= 1


def test_optimize_orders_a_table_without_cluster_columns_on_its_key(tmp_path: Path) -> None:
    """A keyed table without cluster columns is written back in key order, so a probe by
    key reads few row groups; its rows and the change feed are as before."""
    rng = random.Random(9)
    n = 10_000
    data = pa.table({"k": pa.array(range(n), pa.int64()),
                     "v": pa.array([rng.randrange(100) for _ in range(n)], pa.int64())})
    store = DeltaStore(tmp_path / "s", WriteOptions(max_row_group_size=1024,
                                                    target_file_size=64 * 1024))
    store.create_table("t", data, key=("k",))
    for _ in range(3):
        gone = store.read("t").take(pa.array(rng.sample(range(store.read("t").num_rows), 40)))
        store.apply("t", deletes=gone, inserts=gone.slice(0, 25))
    before = store.read("t").sort_by("k")
    v = store.optimize("t")
    assert store.changes("t", v - 1, v).num_rows == 0
    assert store.read("t").sort_by("k").equals(before)
    groups = sorted(_groups(store, "k"))
    assert all(a[1] < b[0] for a, b in zip(groups, groups[1:]))  # disjoint key ranges
    assert sum(rows < 1024 for _, _, rows in groups) <= 1
