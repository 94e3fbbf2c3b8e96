"""Versioned Delta tables (imp_core.storage): snapshots, change feeds, catalog, errors.

The oracle is a Python model of each table (a Counter of row tuples) updated alongside
the store: after every version the snapshot must equal the model and the version's
change feed, as weighted rows, must equal the model's difference.
"""

from __future__ import annotations

import datetime as dt
import json
import math
import random
from collections import Counter
from decimal import Decimal

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable, write_deltalake

from imp_core.errors import SchemaMismatchError, UnknownColumnError, UnknownTableError
from imp_core.storage import (
    DeltaStore,
    TableEntry,
    TableExistsError,
    UnsupportedTableError,
    VersionError,
    WriteOptions,
    read_change_files,
    to_weighted,
)
from imp_core.workloads.schemas import TABLES

# Tiny files and row groups, so that a few thousand rows span several of each (delta-rs
# starts a new file only between its internal write batches of 1024 rows).
SMALL = WriteOptions(max_row_group_size=40, target_file_size=4096)

KEYED = pa.schema([
    pa.field("id", pa.int64(), nullable=False),
    pa.field("grp", pa.int32(), nullable=False),
    pa.field("name", pa.string()),
    pa.field("amount", pa.decimal128(10, 2), nullable=False),
    pa.field("day", pa.date32(), nullable=False),
])
BAG = pa.schema([
    pa.field("a", pa.int64(), nullable=False),
    pa.field("b", pa.string(), nullable=False),
    pa.field("f", pa.float64()),
])
DAY0 = dt.date(2020, 1, 1)


# ------------------------------------------------------------------------- helpers


NAN = float("nan")  # one object, so model rows holding it compare equal


def canon_row(row: tuple) -> tuple:
    """``row`` with every NaN replaced by the string "NaN" (NaN != NaN)."""
    return tuple("NaN" if isinstance(v, float) and math.isnan(v) else v for v in row)


def canon(rows) -> Counter:
    return Counter(canon_row(row) for row in rows)


def table_rows(table: pa.Table) -> list[tuple]:
    return list(zip(*(table.column(c).to_pylist() for c in table.column_names)))


def bag(table: pa.Table) -> Counter:
    return canon(table_rows(table))


def weighted_bag(changes: pa.Table) -> dict:
    rows, weights = to_weighted(changes)
    assert weights.dtype.name == "int64"
    acc: Counter = Counter()
    for row, w in zip(table_rows(rows), weights.tolist()):
        acc[canon_row(row)] += w
    return {r: c for r, c in acc.items() if c}


def difference(new: Counter, old: Counter) -> dict:
    out = {r: new[r] - old[r] for r in set(new) | set(old)}
    return {r: c for r, c in out.items() if c}


def tagged_bag(changes: pa.Table) -> Counter:
    """Changes as a multiset of (row, change type, version), order ignored."""
    return bag(changes)


def rows_table(rows: list[tuple], schema: pa.Schema) -> pa.Table:
    cols = list(zip(*rows)) if rows else [[] for _ in schema]
    return pa.Table.from_arrays([pa.array(list(c), f.type) for c, f in zip(cols, schema)],
                                schema=schema)


def keyed_row(rng: random.Random, key: int) -> tuple:
    name = None if rng.random() < 0.15 else rng.choice(["ann", "bob", "", "zoë"])
    amount = Decimal(rng.randrange(-10_000, 10_000)) / 100
    return (key, rng.randrange(5), name, amount, DAY0 + dt.timedelta(days=rng.randrange(400)))


def bag_row(rng: random.Random) -> tuple:
    f = rng.choice([0.5, -1.25, None, NAN])
    return (rng.randrange(4), rng.choice(["x", "y"]), f)


def row_group_ranges(files: list[str], column: str) -> list[tuple]:
    out = []
    for path in files:
        meta = pq.ParquetFile(path).metadata
        idx = meta.schema.to_arrow_schema().get_field_index(column)
        for g in range(meta.num_row_groups):
            st = meta.row_group(g).column(idx).statistics
            if meta.row_group(g).num_rows:
                out.append((st.min, st.max))
    return sorted(out)


def assert_clustered(files: list[str], column: str) -> int:
    """Row groups' [min, max] on ``column`` are disjoint (touching at most); their count."""
    ranges = row_group_ranges(files, column)
    for (_, hi), (lo, _) in zip(ranges, ranges[1:]):
        assert hi <= lo, ranges
    return len(ranges)


# ---------------------------------------------------------------- random sequences


def random_keyed_step(rng: random.Random, model: dict[int, tuple], next_key: list[int]):
    keys = sorted(model)
    kind = rng.choice(["insert", "delete", "mixed", "update", "reinsert"])
    dels: list[tuple] = []
    ins: list[tuple] = []
    if kind in ("delete", "mixed") and keys:
        dels = [model[k] for k in rng.sample(keys, min(len(keys), rng.randrange(1, 8)))]
    if kind in ("insert", "mixed"):
        for _ in range(rng.randrange(1, 10)):
            ins.append(keyed_row(rng, next_key[0]))
            next_key[0] += 1
    if kind in ("update", "reinsert") and keys:
        old = [model[k] for k in rng.sample(keys, min(len(keys), rng.randrange(1, 6)))]
        dels = old
        ins = old if kind == "reinsert" else [keyed_row(rng, r[0]) for r in old]
    return dels, ins


def random_bag_step(rng: random.Random, model: Counter):
    elements = sorted(model.elements(), key=repr)
    dels = rng.sample(elements, min(len(elements), rng.randrange(0, 6)))
    ins = [bag_row(rng) for _ in range(rng.randrange(0 if dels else 1, 6))]
    if ins and rng.random() < 0.3 and elements:
        ins.append(rng.choice(elements))  # another copy of a stored row
    return dels, ins


@pytest.mark.parametrize("keyed", [True, False], ids=["keyed", "keyless"])
def test_random_changes_match_the_model(tmp_path, keyed):
    rng = random.Random(7 if keyed else 11)
    store = DeltaStore(tmp_path, SMALL)
    schema = KEYED if keyed else BAG
    if keyed:
        state: dict[int, tuple] = {k: keyed_row(rng, k) for k in range(1, 1501)}
        initial = list(state.values())
        rng.shuffle(initial)
        next_key = [5000]
    else:
        initial = [bag_row(rng) for _ in range(1500)]
        state_bag = Counter(initial)
    assert store.create_table(
        "t", rows_table(initial, schema), key=("id",) if keyed else None,
        cluster_by=("day",) if keyed else ("a",),
    ) == 0
    models = [canon(initial)]
    assert len(store.file_uris("t")) > 1
    assert bag(store.read("t", 0)) == models[0]
    assert weighted_bag(store.changes("t", -1, 0)) == dict(models[0])

    for step in range(1, 14):
        if keyed:
            dels, ins = random_keyed_step(rng, state, next_key)
            for row in dels:
                del state[row[0]]
            for row in ins:
                state[row[0]] = row
            model = canon(state.values())
        else:
            dels, ins = random_bag_step(rng, state_bag)
            state_bag = state_bag - Counter(dels) + Counter(ins)
            model = canon(state_bag.elements())
        version = store.apply(
            "t",
            inserts=rows_table(ins, schema) if ins or rng.random() < 0.5 else None,
            deletes=rows_table(dels, schema) if dels or rng.random() < 0.5 else None,
        )
        assert version == step == store.version("t")
        models.append(model)
        snapshot = store.read("t")
        assert snapshot.schema == schema
        assert bag(snapshot) == model
        changes = store.changes("t", step - 1, step)
        assert set(changes.column("_commit_version").to_pylist()) <= {step}
        assert weighted_bag(changes) == difference(model, models[-2])
        assert changes.num_rows == len(dels) + len(ins)  # one commit holds both

    last = len(models) - 1
    for v, model in enumerate(models):  # old versions stay readable
        assert bag(store.read("t", v)) == model
    assert weighted_bag(store.changes("t", 0, last)) == difference(models[-1], models[0])
    assert weighted_bag(store.changes("t", 3, 9)) == difference(models[9], models[3])
    feed = store.changes("t", -1)
    files = store.change_files("t", -1)
    assert {f.kind for f in files} == {"add", "cdc"}
    assert tagged_bag(read_change_files(files, schema)) == tagged_bag(feed)
    if not keyed:
        rids = store.read("t", with_row_ids=True).column("__rid").to_pylist()
        assert len(set(rids)) == len(rids)
        assert "__rid" not in store.read("t").column_names
        assert "__rid" not in feed.column_names


def test_keyless_delete_removes_one_of_equal_rows(tmp_path):
    store = DeltaStore(tmp_path)
    rows = [(1, "x", None)] * 3 + [(2, "y", NAN)] * 2
    store.create_table("b", rows_table(rows, BAG))
    v = store.apply("b", deletes=rows_table([(1, "x", None), (2, "y", float("nan"))], BAG))
    assert bag(store.read("b")) == Counter({(1, "x", None): 2, (2, "y", "NaN"): 1})
    assert weighted_bag(store.changes("b", 0, v)) == {(1, "x", None): -1, (2, "y", "NaN"): -1}
    with pytest.raises(SchemaMismatchError, match="not stored"):
        store.apply("b", deletes=rows_table([(1, "x", None)] * 3, BAG))
    assert store.version("b") == v
    before = store.read("b", with_row_ids=True).column("__rid").to_pylist()
    store.apply("b", inserts=rows_table([(1, "x", None)], BAG))
    after = store.read("b", with_row_ids=True).column("__rid").to_pylist()
    assert len(after) == len(set(after)) == len(before) + 1
    assert max(after) > max(before)


# ------------------------------------------------------------------------ TPC-H


@pytest.mark.tpch
def test_tpch_parquet_load_cluster_and_refresh(tmp_path):
    from imp_core.workloads.tpch import generate_tpch, load_tpch_tables

    paths = generate_tpch(0.01, tmp_path / "tpch", progress=False,
                          tables=["lineitem", "orders"])
    expected = load_tpch_tables(paths)
    store = DeltaStore(tmp_path / "store",
                       WriteOptions(max_row_group_size=4096, target_file_size=256 * 1024))
    cluster = {"lineitem": ("l_shipdate",), "orders": ("o_orderkey",)}
    for name in ("lineitem", "orders"):
        info = TABLES[name]
        assert store.create_table_from_parquet(
            name, paths[name], key=info.key, domains=info.domains,
            cluster_by=cluster[name], progress=False,
        ) == 1  # the rows, then the declared domains as CHECK constraints
        assert store.schema(name) == info.schema
        got = store.read(name)
        assert got.schema == info.schema
        order = [(c, "ascending") for c in info.key]
        assert got.sort_by(order).equals(expected[name].sort_by(order))
        groups = assert_clustered(store.file_uris(name), cluster[name][0])
        assert groups >= got.num_rows // 4096
        assert len(store.file_uris(name)) > 1
        assert store.entry(name).sketch_columns == cluster[name]

    # A refresh: drop 5 orders with their line items, re-insert them changed. The raw
    # Parquet batches (string_view columns) are accepted as they are.
    # (string_view has no filter/take kernels; tpchgen-cli writes lineitem in key order)
    raw = pq.read_table(paths["lineitem"])
    in_orders = pa.compute.less_equal(raw.column("l_orderkey"), 5)
    old = raw.slice(0, pa.compute.sum(in_orders).as_py())
    assert set(old.column("l_orderkey").to_pylist()) == {1, 2, 3, 4, 5}
    assert old.schema.field("l_comment").type == pa.string_view()
    new = old.set_column(
        old.schema.get_field_index("l_comment"), "l_comment",
        pa.array(["refreshed"] * old.num_rows),
    )
    v = store.update("lineitem", old, new)
    assert v == 2  # after the rows (0) and the domain constraints (1)
    changes = store.changes("lineitem", 1, 2)
    assert changes.num_rows == 2 * old.num_rows
    assert weighted_bag(changes) == difference(
        bag(new.cast(TABLES["lineitem"].schema)), bag(old.cast(TABLES["lineitem"].schema)))
    assert store.read("lineitem").num_rows == expected["lineitem"].num_rows
    assert bag(read_change_files(store.change_files("lineitem", 1, 2),
                                 store.schema("lineitem"))) == bag(changes)


# ------------------------------------------------------------ errors, atomicity


def keyed_store(tmp_path) -> tuple[DeltaStore, list[tuple]]:
    rng = random.Random(3)
    rows = [keyed_row(rng, k) for k in range(1, 21)]
    store = DeltaStore(tmp_path)
    store.create_table("k", rows_table(rows, KEYED), key=("id",),
                       domains={"id": (1, 1000), "day": (DAY0, None)}, cluster_by=("id",))
    return store, rows


def test_rejected_batches_write_nothing(tmp_path):
    store, rows = keyed_store(tmp_path)
    created = store.version("k")
    good = rows_table([(100, 1, "n", Decimal("1.00"), DAY0)], KEYED)
    stored = rows_table(rows[:1], KEYED)
    cases = {
        "missing columns": dict(inserts=good.drop_columns(["name"])),
        "unknown columns": dict(inserts=good.append_column("zz", pa.array([1]))),
        "has type string": dict(inserts=good.set_column(1, "grp", pa.array(["1"]))),
        "has type int64, table has int32": dict(
            inserts=good.set_column(1, "grp", pa.array([1], pa.int64()))),
        "has type double": dict(inserts=good.set_column(0, "id", pa.array([100.0]))),
        "NOT NULL": dict(inserts=good.set_column(0, "id", pa.array([None], pa.int64()))),
        "outside its declared domain": dict(
            inserts=good.set_column(0, "id", pa.array([5000], pa.int64()))),
        "no row with key": dict(deletes=good),
        "is stored as": dict(
            deletes=stored.set_column(1, "grp", pa.array([stored["grp"][0].as_py() + 1],
                                                         pa.int32()))),
        "already exists": dict(inserts=stored),
        "occurs more than once": dict(inserts=pa.concat_tables([good, good])),
        "occurs more than": dict(deletes=pa.concat_tables([stored, stored])),
    }
    for message, batch in cases.items():
        with pytest.raises(SchemaMismatchError, match=message):
            store.apply("k", **batch)
        assert store.version("k") == created, message
    # a valid deletion with an invalid insertion: neither happens
    with pytest.raises(SchemaMismatchError, match="already exists"):
        store.apply("k", deletes=stored, inserts=rows_table(rows[1:2], KEYED))
    assert store.version("k") == created
    assert bag(store.read("k")) == Counter(rows)

    with pytest.raises(UnknownTableError, match="nope"):
        store.apply("nope", inserts=good)
    for call in (store.version, store.read, store.schema, store.file_uris):
        with pytest.raises(UnknownTableError):
            call("nope")
    with pytest.raises(UnknownColumnError):
        store.read("k", columns=["id", "nope"])
    with pytest.raises(VersionError):
        store.read("k", version=created + 1)
    with pytest.raises(VersionError):
        store.changes("k", 0, created + 1)
    with pytest.raises(VersionError):
        store.changes("k", -2, 0)
    with pytest.raises(TableExistsError):
        store.create_table("K", good, key=("id",))
    with pytest.raises(SchemaMismatchError, match="not columns"):
        store.create_table("k2", good, key=("nope",))
    with pytest.raises(SchemaMismatchError, match="more than once"):
        store.create_table("k2", pa.concat_tables([good, good]), key=("id",))
    assert store.tables() == ["k"]

    # lossless conversions are accepted: int32 -> int64 key, string_view -> string
    widened = good.set_column(0, "id", pa.array([100], pa.int32()))
    widened = widened.set_column(2, "name", pa.array(["n"], pa.string_view()))
    assert store.apply("k", inserts=widened) == created + 1
    # column order does not matter; nothing to do makes no version
    assert store.apply("k", deletes=good.select(["day", "name", "amount", "grp", "id"])) \
        == created + 2
    assert store.apply("k", inserts=KEYED.empty_table(), deletes=None) == created + 2
    assert store.apply("k") == created + 2


def test_delta_layout_has_cdf_and_no_deletion_vectors(tmp_path):
    store, rows = keyed_store(tmp_path)
    store.apply("k", deletes=rows_table(rows[:3], KEYED))
    table = DeltaTable(store.entry("k").location)
    protocol = table.protocol()
    assert "deletionVectors" not in (protocol.reader_features or [])
    assert "deletionVectors" not in (protocol.writer_features or [])
    config = table.metadata().configuration
    assert config.get("delta.enableChangeDataFeed") == "true"
    assert config.get("delta.enableDeletionVectors", "false") == "false"
    assert list(table.deletion_vectors()) == []
    # each snapshot is exactly its files: plain Parquet reads give the same rows
    for v in (0, 1):
        files = store.file_uris("k", v)
        assert bag(pq.read_table(files).cast(KEYED)) == bag(store.read("k", v))
    # a table that allows deletion vectors is refused rather than misread
    table.alter.set_table_properties({"delta.enableDeletionVectors": "true"})
    with pytest.raises(UnsupportedTableError, match="deletion vectors"):
        store.read("k")


# ---------------------------------------------------------------- other writers


def test_changes_by_other_writers_are_seen(tmp_path):
    store, rows = keyed_store(tmp_path)
    location = store.entry("k").location
    extra = rows_table([(500, 1, "ext", Decimal("2.50"), DAY0)], KEYED)
    created = store.version("k")
    write_deltalake(location, extra, mode="append")  # created + 1
    DeltaTable(location).delete("id = 3")  # created + 2
    DeltaTable(location).update(updates={"name": "'upd'"}, predicate="id = 4")  # + 3
    assert store.version("k") == created + 3
    r3, r4 = rows[2], rows[3]
    upd = (r4[0], r4[1], "upd", r4[3], r4[4])
    assert weighted_bag(store.changes("k", 0)) == {
        table_rows(extra)[0]: 1, r3: -1, r4: -1, upd: 1}
    c = created
    kinds = store.changes("k", c + 2, c + 3).column("_change_type").to_pylist()
    assert sorted(kinds) == ["delete", "insert"]  # update pre/postimage mapped
    # store changes continue on top of theirs
    assert store.apply("k", deletes=rows_table([upd], KEYED)) == c + 4
    # an overwrite replaces whole files: its commit has remove/add actions, no cdc
    write_deltalake(location, rows_table(rows[:2], KEYED), mode="overwrite")  # c + 5
    assert {f.kind for f in store.change_files("k", c + 4, c + 5)} == {"remove", "add"}
    assert bag(store.read("k")) == Counter(rows[:2])
    feed = store.changes("k", -1)
    assert tagged_bag(read_change_files(store.change_files("k", -1), KEYED)) == \
        tagged_bag(feed)
    assert weighted_bag(store.changes("k", c + 4, c + 5)) == difference(
        Counter(rows[:2]), bag(store.read("k", c + 4)))


def test_optimize_reclusters_without_changes(tmp_path):
    rng = random.Random(5)
    store = DeltaStore(tmp_path, SMALL)
    rows = [keyed_row(rng, k) for k in range(1, 301)]
    store.create_table("k", rows_table(rows, KEYED), key=("id",), cluster_by=("id",))
    for i in range(3):
        store.apply("k", inserts=rows_table([keyed_row(rng, k)
                                             for k in range(1000 + 10 * i, 1005 + 10 * i)],
                                            KEYED),
                    deletes=rows_table(rows[50 * i:50 * i + 5], KEYED))
    before = bag(store.read("k"))
    v = store.optimize("k")
    assert v == 4
    assert store.changes("k", 3, 4).num_rows == 0
    assert store.change_files("k", 3, 4) == []
    assert bag(store.read("k")) == before
    assert_clustered(store.file_uris("k"), "id")


# ---------------------------------------------------------------------- catalog


def test_catalog_persists_across_instances(tmp_path):
    domains = {"id": (1, None), "amount": (Decimal("-100.00"), Decimal("100.00")),
               "day": (DAY0, dt.date(2021, 12, 31))}
    store = DeltaStore(tmp_path)
    other = DeltaStore(tmp_path)  # opened before the tables exist
    rows = [(1, 1, "a", Decimal("1.50"), DAY0), (2, 2, None, Decimal("-2.00"), DAY0)]
    store.create_table("Keyed", rows_table(rows, KEYED), key=("id",), domains=domains,
                       cluster_by=("day", "id"))
    store.create_table("bag", rows_table([(1, "x", None)], BAG))
    store.apply("keyed", deletes=rows_table(rows[:1], KEYED))

    assert other.tables() == ["bag", "keyed"]
    again = DeltaStore(tmp_path)
    entry = again.entry("KEYED")
    assert entry == TableEntry("keyed", str(tmp_path / "tables" / "keyed"), ("id",),
                               domains, ("day", "id"))
    assert again.entry("bag").key is None and again.entry("bag").has_row_ids
    assert again.version("keyed") == 2  # rows, domain constraints, the deletion
    assert bag(again.read("keyed", 0)) == Counter(rows)
    doc = json.loads((tmp_path / "catalog.json").read_text())
    assert doc["tables"]["keyed"]["location"] == "tables/keyed"  # relative to the root
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []

    again.drop_table("bag")
    assert not (tmp_path / "tables" / "bag").exists()
    assert DeltaStore(tmp_path).tables() == ["keyed"] == store.tables()
    with pytest.raises(UnknownTableError):
        store.read("bag")


def test_table_outside_the_root(tmp_path):
    store = DeltaStore(tmp_path / "root")
    elsewhere = tmp_path / "elsewhere" / "t"
    store.create_table("t", rows_table([(1, "x", 0.5)], BAG), location=str(elsewhere))
    assert DeltaTable.is_deltatable(str(elsewhere))
    assert DeltaStore(tmp_path / "root").entry("t").location == str(elsewhere)
    store.drop_table("t")
    assert not elsewhere.exists()
    foreign = tmp_path / "foreign"
    write_deltalake(str(foreign), rows_table([(1, "x", 0.5)], BAG))
    with pytest.raises(TableExistsError, match="already holds a Delta table"):
        store.create_table("u", rows_table([(1, "x", 0.5)], BAG), location=str(foreign))
    assert store.tables() == []


def test_snapshot_files_kept_forward_equal_a_fresh_open(tmp_path):
    """``file_uris`` at a version comes from a Delta table kept and moved forward; it
    equals what a fresh open of the log at that version lists, going forward, back, to a
    version not yet written (an error, and nothing kept of it), and after a drop and a
    new table under the same name."""
    from imp_core.errors import VersionError
    from imp_core.storage.snapshots import open_delta

    store = DeltaStore(tmp_path / "s")
    rows = pa.table({"k": pa.array(range(100), pa.int64()), "v": pa.array([1] * 100)})
    store.create_table("t", rows, key=("k",))
    for i in range(4):
        store.apply("t", deletes=rows.slice(i * 10, 5))

    def fresh(version):
        return sorted(open_delta(store.entry("t"), version).file_uris())

    for v in (0, 1, 2, 4, 3, 1, 4):
        assert sorted(store.file_uris("t", v)) == fresh(v)
    with pytest.raises(VersionError):
        store.file_uris("t", 5)
    store.apply("t", deletes=rows.slice(60, 5))
    assert sorted(store.file_uris("t", 5)) == fresh(5)
    table_id = store.snapshot_files("t", 5)[0]
    store.drop_table("t")
    store.create_table("t", rows.slice(0, 7), key=("k",))
    assert store.snapshot_files("t", 0)[0] != table_id
    assert sorted(store.file_uris("t", 0)) == fresh(0)
    assert store.read("t").num_rows == 7


def test_snapshot_files_read_forward_from_each_commit(tmp_path):
    """Going forward one version at a time, a snapshot's files come from the one before
    and the commit's adds and removes (not from loading the log), for commits of every
    writer: the store's MERGE, delta-rs appends, deletes, updates and overwrites, an
    OPTIMIZE; each equals a fresh open of the log at that version. A commit that changes
    the table's metadata (an overwrite with a new schema) is loaded from the log."""
    from imp_core.storage.snapshots import SnapshotFiles, open_delta

    store = DeltaStore(tmp_path / "s", SMALL)
    rng = random.Random(11)
    rows = [keyed_row(rng, k) for k in range(1, 201)]
    store.create_table("k", rows_table(rows, KEYED), key=("id",), cluster_by=("id",))
    entry = store.entry("k")
    location = entry.location
    store.apply("k", deletes=rows_table(rows[:5], KEYED))
    write_deltalake(location, rows_table([keyed_row(rng, 900)], KEYED), mode="append")
    DeltaTable(location).delete("id = 30")
    DeltaTable(location).update(updates={"name": "'upd'"}, predicate="id = 40")
    store.apply("k", inserts=rows_table([keyed_row(rng, 901)], KEYED),
                deletes=rows_table(rows[50:52], KEYED))
    store.optimize("k")
    write_deltalake(location, rows_table(rows[100:120], KEYED), mode="overwrite")
    evolved = rows_table(rows[:3], KEYED).append_column("extra", pa.array([1, 2, 3]))
    write_deltalake(location, evolved, mode="overwrite", schema_mode="overwrite")
    latest = store.version("k")

    snapshots = SnapshotFiles()
    loads: list[int] = []
    load = snapshots._load

    def counted(e, version):
        loads.append(version)
        return load(e, version)

    snapshots._load = counted
    for version in range(latest + 1):
        table_id, files = snapshots.files(entry, version)
        fresh = open_delta(entry, version)
        assert sorted(files) == sorted(fresh.file_uris()), version
        assert table_id == fresh.metadata().id
    # the first version and the schema change are loaded; every other one read forward
    assert loads == [0, latest]
