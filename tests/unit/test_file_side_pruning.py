"""Key lookups in table files: row groups pruned by their statistics, how clustered a
table is on a column, and the placement of a busy side whose lookups read little."""

from __future__ import annotations

import random
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from test_keyed_join_layers import _dims, _eq, _facts

from imp_core.plan.nodes import Join, PlanNode
from imp_core.plan.paths import parse_paths
from imp_core.query.data_layer import (
    HOT_SIDE_FACTOR,
    HOT_SIDE_MIN_SHARE,
    clustered_lookup,
    lookup_cost,
    place_join_sides,
)
from imp_core.storage import DeltaStore, WriteOptions
from imp_core.storage.file_side import TableFiles, filter_columns
from imp_core.storage.index_catalog import catalog_for
from imp_core.storage.indexed_files import INDEX_ROWS_PER_KEY, IndexedTableFiles

SMALL = WriteOptions(max_row_group_size=500, target_file_size=16 * 1024)


def _table(n: int, seed: int, ordered: bool) -> pa.Table:
    rng = random.Random(seed)
    keys = list(range(n))
    if not ordered:
        rng.shuffle(keys)
    return pa.table({"k": pa.array(keys, pa.int64()),
                     "v": pa.array([rng.randrange(50) for _ in range(n)], pa.int64()),
                     "s": pa.array([f"x{rng.randrange(9)}" for _ in range(n)])})


@pytest.mark.parametrize("ordered", [True, False])
def test_a_pruned_key_read_equals_the_filtered_table(tmp_path: Path, ordered: bool) -> None:
    """Whatever the layout and the keys (none, absent, repeated, NULL, out of range), a
    read by keys returns exactly the rows a filter over the whole table keeps."""
    store = DeltaStore(tmp_path / "s", SMALL)
    store.create_table("t", _table(6000, 1, ordered), key=("k",))
    store.apply("t", inserts=pa.table({"k": pa.array([7000, 9000], pa.int64()),
                                       "v": pa.array([1, 2], pa.int64()),
                                       "s": pa.array(["a", "b"])}))
    version = store.version("t")
    files = TableFiles(store)
    whole = store.read("t")
    rng = random.Random(2)
    cases = [[], [-5, 10**9], [3, 3, 3], [None, 42], [9000, 0, 5999, 7000]]
    cases += [[rng.randrange(-100, 9100) for _ in range(rng.randrange(1, 80))]
              for _ in range(15)]
    for keys in cases:
        values = pa.array(keys, pa.int64())
        for where in (None, pc.field("v") < 25):
            got = files.read("t", version, ["k", "v", "s"], where, keys={"k": values})
            want = whole.filter(pc.is_in(whole.column("k"), value_set=values))
            if where is not None:
                want = want.filter(pc.less(want.column("v"), 25))
            assert got.sort_by("k").equals(want.select(["k", "v", "s"]).sort_by("k")), keys
        # keys on a column without integer statistics only filter
        strings = files.read("t", version, ["k", "s"], keys={"s": pa.array(["x1"])})
        assert strings.num_rows == pc.sum(pc.equal(whole.column("s"), "x1")).as_py()


def test_clustered_follows_the_layout(tmp_path: Path) -> None:
    store = DeltaStore(tmp_path / "s", SMALL)
    store.create_table("sorted", _table(6000, 3, True), key=("k",))
    store.create_table("shuffled", _table(6000, 3, False), key=("k",))
    files = TableFiles(store)
    assert files.clustered("sorted", 0, "k")
    assert not files.clustered("shuffled", 0, "k")
    assert not files.clustered("sorted", 0, "v")  # values in arrival order
    assert not files.clustered("sorted", 0, "s")  # not an integer column
    # a few small appended files of keys from anywhere leave it clustered
    rng = np.random.default_rng(4)
    for i in range(3):
        keys = rng.choice(np.arange(6000, 12000), 20, replace=False)
        keys[0] = -1 - i  # each file spans the whole range
        store.apply("sorted", inserts=pa.table({
            "k": pa.array(keys, pa.int64()), "v": pa.array([0] * 20, pa.int64()),
            "s": pa.array(["y"] * 20)}))
    assert files.clustered("sorted", store.version("sorted"), "k")


BUSY_BUDGET = 9


def test_a_busy_side_is_probed_only_when_its_lookups_read_little() -> None:
    """The side of the busiest table is kept in memory, unless its lookups read one
    table clustered on the key; cold sides still go first."""
    root = Join(_facts(), _dims(), _eq("facts.k", "dims.dk"))
    sizes = {"facts": 1000, "dims": 100}

    def size(node: PlanNode) -> int:
        return sum(sizes[t] for t in node.tables())

    rates = {"facts": 1000.0, "dims": 10.0}
    # the budget the cold side's 1000 pass; what it leaves (100) passes HOT_SIDE_FACTOR
    # times it
    assert HOT_SIDE_FACTOR * BUSY_BUDGET < 100
    # dims' side is asked on every facts change: not cold; facts' side is cold
    assert place_join_sides(root, size, BUSY_BUDGET, rates) == parse_paths(["0:left"])
    assert place_join_sides(root, size, BUSY_BUDGET, rates, lambda t, c: False) == \
        parse_paths(["0:left"])
    assert place_join_sides(root, size, BUSY_BUDGET, rates, lambda t, c: (t, c) == ("dims", "dk")) \
        == parse_paths(["0:left", "0:right"])
    # what the cold side leaves (100) is within HOT_SIDE_FACTOR times the budget: the
    # busy side stays, as it does when the cold side brings the state under the budget
    assert HOT_SIDE_FACTOR * 50 >= 100
    assert place_join_sides(root, size, 50, rates, lambda t, c: True) == \
        parse_paths(["0:left"])
    assert place_join_sides(root, size, 150, rates, lambda t, c: True) == \
        parse_paths(["0:left"])
    assert clustered_lookup(_dims(), ("dims.dk",), lambda t, c: c == "dk")
    assert not clustered_lookup(_dims(), ("dims.dk",), lambda t, c: c == "w")
    # a side of two tables: the key filters one, the join passes it to the other
    assert clustered_lookup(root, ("facts.k",), lambda t, c: True)
    assert clustered_lookup(root, ("facts.k",), lambda t, c: c in ("k", "dk"))
    assert not clustered_lookup(root, ("facts.k",), lambda t, c: c == "k")
    assert filter_columns(root, ("facts.k",)) == {"facts": {"k"}, "dims": {"dk"}}
    assert filter_columns(root, ("dims.w",)) == {"dims": {"w"}, "facts": {"k"}}


def test_a_busy_side_a_shared_index_serves_is_probed() -> None:
    """A side whose table is clustered on nothing is still cheap to look up when a shared
    index serves its keyed reads (``lookup_cost``): it goes after the cold side."""
    root = Join(_facts(), _dims(), _eq("facts.k", "dims.dk"))
    sizes = {"facts": 1000, "dims": 100}

    def size(node: PlanNode) -> int:
        return sum(sizes[t] for t in node.tables())

    rates = {"facts": 1000.0, "dims": 10.0}
    nowhere = lambda t, c: False  # noqa: E731
    assert place_join_sides(root, size, BUSY_BUDGET, rates, nowhere) == parse_paths(["0:left"])
    assert place_join_sides(root, size, BUSY_BUDGET, rates, nowhere, None,
                            lambda t, c: (t, c) == ("dims", "dk")) == \
        parse_paths(["0:left", "0:right"])
    # an index of another column does not serve a read by the key
    assert place_join_sides(root, size, BUSY_BUDGET, rates, nowhere, None,
                            lambda t, c: (t, c) == ("dims", "w")) == parse_paths(["0:left"])
    cost = lookup_cost(nowhere, lambda t, c: c == "dk")
    assert cost("dims", "dk") and not cost("dims", "w")
    assert lookup_cost(nowhere, None) is nowhere


def test_declared_not_null_and_index_served_columns(tmp_path: Path) -> None:
    """A column is never NULL when it is a key or declared NOT NULL in the table's Delta
    schema (which every Delta writer enforces). Keyed reads are cheap through a store's
    shared indexes only by a column whose values each hold few rows: not by a flag, nor
    by a column whose footers do not tell (strings)."""
    n = 3 * INDEX_ROWS_PER_KEY
    schema = pa.schema([pa.field("id", pa.int64(), nullable=False),
                        pa.field("k", pa.int64(), nullable=False),
                        pa.field("flag", pa.int64(), nullable=False),
                        pa.field("s", pa.string()), pa.field("v", pa.int64())])
    store = DeltaStore(tmp_path / "store")
    store.create_table("t", pa.table({
        "id": np.arange(n), "k": np.arange(n) // 3, "flag": np.arange(n) % 2,
        "s": [f"x{i}" for i in range(n)], "v": [None] * (n - 1) + [1]}, schema=schema),
        key=["id"])
    files = TableFiles(store)
    assert files.not_null("t", "id") and files.not_null("t", "k")
    assert not files.not_null("t", "v") and not files.not_null("t", "nope")
    assert not files.indexed("t", "k")
    shared = IndexedTableFiles(store, catalog_for(store))
    assert shared.indexed("t", "id") and shared.indexed("t", "k")
    assert not shared.indexed("t", "flag")  # 1,500 rows a value
    assert not shared.indexed("t", "s") and not shared.indexed("t", "nope")
    with pytest.raises(Exception, match="(?i)failed validation|null"):
        store.apply("t", inserts=pa.table({"id": [n], "k": pa.array([None], pa.int64()),
                                           "flag": [0], "s": ["y"], "v": [1]}))
    assert store.read("t").num_rows == n
    # a table of at most INDEX_ROWS_PER_KEY rows is cheap to read by any column
    store.create_table("small", pa.table({"name": ["a", "b"], "flag": [0, 0]}))
    assert shared.indexed("small", "name") and shared.indexed("small", "flag")


def test_a_small_busy_side_stays_in_memory() -> None:
    """Busy sides go to the data layer largest first, but never one smaller than
    ``HOT_SIDE_MIN_SHARE`` of the budget: a date dimension beside the sales saves little
    and would cost every sales batch a lookup."""
    a, b, dims = _facts("a"), _facts("b"), _dims()
    pair = Join(a, b, _eq("a.id", "b.id"))  # a self-join: read whole, never cold
    root = Join(pair, dims, _eq("a.k", "dims.dk"))
    rates = {"facts": 1000.0, "dims": 10.0}
    clustered = lambda t, c: c in ("id", "dk")  # noqa: E731
    for dims_bytes, dims_probed in ((4, False), (100, True)):
        sizes = {id(a): 1000, id(b): 1000, id(pair): 1000, id(dims): dims_bytes}
        placed = place_join_sides(root, lambda n, sizes=sizes: sizes[id(n)], 20, rates,
                                  clustered)
        assert parse_paths(["0.0:left", "0.0:right"]) <= placed
        assert (parse_paths(["0:right"]) <= placed) is dims_probed
        assert not parse_paths(["0:left"]) <= placed  # the self-join: no filtered lookup
    assert 4 < 20 * HOT_SIDE_MIN_SHARE <= 100


def test_a_multi_table_side_reads_its_most_selective_table_first(tmp_path: Path) -> None:
    """A side over cust ⋈ ords ⋈ items probed by (cust.nk, items.sk): nk has 5 values in
    4,000 rows, sk 1,000 in 16,000. The items are read first (by sk), their orders next,
    and the customers by the orders' customer keys, so the customers read are a few,
    not a fifth of the table; the lookup equals the subtree over the whole tables."""
    from imp_core.engine.probed_side import VersionContext
    from imp_core.engine.subtree import evaluate_subtree
    from imp_core.plan.nodes import Field, Scan
    from imp_core.sketch.partition import PartitionSet
    from imp_core.storage.file_side import FileJoinSide

    rng = np.random.default_rng(5)
    store = DeltaStore(tmp_path / "s", SMALL)
    tables = {
        "cust": pa.table({"ck": np.arange(4000), "nk": rng.integers(0, 5, 4000)}),
        "ords": pa.table({"ok": np.arange(8000), "ock": rng.integers(0, 4000, 8000)}),
        "items": pa.table({"iok": rng.integers(0, 8000, 16000),
                           "sk": rng.integers(0, 1000, 16000)}),
    }
    for name, data in tables.items():
        store.create_table(name, data, key=(data.column_names[0],) if name != "items"
                           else None)

    def scan(table: str) -> Scan:
        names = tables[table].column_names
        return Scan(table, tuple(names),
                    tuple(Field(f"{table}.{c}", pa.int64()) for c in names))

    node = Join(Join(scan("cust"), scan("ords"), _eq("cust.ck", "ords.ock")),
                scan("items"), _eq("ords.ok", "items.iok"))
    files = TableFiles(store)
    assert files.rows_per_value("cust", 0, "nk") == pytest.approx(800.0)
    assert files.rows_per_value("cust", 0, "ck") == pytest.approx(1.0)
    sizes: dict[str, int] = {}
    plain_read = files.read

    def read(table, version, columns, where=None, keys=None, reader=None):
        out = plain_read(table, version, columns, where, keys, reader)
        sizes[table] = out.num_rows
        return out

    files.read = read  # type: ignore[method-assign]
    context = VersionContext()
    side = FileJoinSide(node, ("cust.nk", "items.sk"), PartitionSet(()), files, context)
    side.versions = {"cust": 0, "ords": 0, "items": 0}
    probe = pa.table({"__imp_k0": pa.array([1, 3], pa.int64()),
                      "__imp_k1": pa.array([7, 7], pa.int64())})
    got = side.lookup(probe).data
    whole = evaluate_subtree(node, PartitionSet(()), {t: store.read(t) for t in tables}).data

    def matching(rows: pa.Table) -> list[tuple]:
        keep = pc.and_(pc.is_in(rows.column("cust.nk"), value_set=pa.array([1, 3])),
                       pc.equal(rows.column("items.sk"), 7))
        return sorted(rows.filter(keep).select(["cust.ck", "ords.ok", "items.sk"])
                      .to_pylist(), key=lambda r: tuple(r.values()))

    assert matching(got) and matching(got) == matching(whole)
    assert sizes["items"] == pc.sum(pc.equal(tables["items"].column("sk"), 7)).as_py()
    assert sizes["cust"] <= sizes["ords"] < 40  # not the ~1,600 customers of nations 1, 3
