"""The data layer without Spark: join sides probed from the Delta tables' files and refills
of bounded buffers, wired by ``DataLayer`` as the query actors wire them. After every
random batch of updates the maintained sketch and result equal the reference evaluator's
recapture at the same table versions; the placement follows the state budget."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from probed_runs import (
    CHAIN_SQL,
    DIMS,
    FACTS,
    JOIN_SQL,
    TOPK_SQL,
    ProbedRun,
    random_change,
    store_of,
    tables_for,
)

from imp_core.engine.pipeline import EngineOptions
from imp_core.engine.probed_side import is_probed
from imp_core.engine.subtree import evaluate_subtree
from imp_core.plan.lineage import trace_column
from imp_core.query.data_layer import DataLayer, join_sides, place_join_sides
from imp_core.query.driver import QueryDriver
from imp_core.query.prepare import StoreTables, prepare_query
from imp_core.sql import plan_sql
from imp_core.storage import DeltaStore
from imp_core.storage.file_side import FileJoinSide, TableFiles


@settings(max_examples=12, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 10**6), steps=st.integers(1, 4),
       query=st.sampled_from(["join", "topk", "chain"]))
def test_probed_sides_and_refills_equal_the_reference(tmp_path_factory, seed, steps, query):
    rng = np.random.default_rng(seed)
    store = store_of(tmp_path_factory.mktemp("dl"), tables_for(rng))
    sql, options = {"join": (JOIN_SQL, EngineOptions(minmax_buffer=1)),
                    "topk": (TOPK_SQL, EngineOptions(topk_buffer=3)),
                    "chain": (CHAIN_SQL, EngineOptions(minmax_buffer=1))}[query]
    run = ProbedRun(store, sql, options)
    sides = [s for op in run.wiring.pipeline.operators if op.kind == "join"
             for s in (op.left, op.right)]
    assert sides and all(isinstance(s, FileJoinSide) for s in sides)
    run.check()
    for step in range(steps):
        random_change(store, rng, 10_000 + 100 * step)
        run.maintain()
        run.check()


def test_a_side_of_several_tables_reads_only_rows_that_can_join(tmp_path):
    rng = np.random.default_rng(9)
    store = store_of(tmp_path, tables_for(rng, 300))
    run = ProbedRun(store, CHAIN_SQL, EngineOptions())
    top = next(op for op in run.wiring.pipeline.operators
               if op.kind == "join" and len(op.node.left.tables()) == 2)
    side = top.left  # facts ⋈ dims, probed by w: dims.w, then facts.k via k = dk
    assert {t for (t, _), _ in side._links} == {"facts", "dims"}
    side._sync()
    keys = pa.table({"__imp_k0": pa.array([1, 2], pa.int64())})
    read = side._read({"dims": {"w": keys.column(0).combine_chunks()}})
    assert set(read["dims"].column("w").to_pylist()) <= {1, 2}
    assert set(read["facts"].column("k").to_pylist()) <= set(read["dims"].column("dk")
                                                             .to_pylist())
    everything = evaluate_subtree(side.node, side.partitions, side._read({}))
    found = side.lookup(keys)
    want = everything.filter(pc.is_in(everything.data.column(side.key_columns[0]),
                                      keys.column(0)).to_numpy(zero_copy_only=False))
    assert found.to_counter() == want.to_counter()
    for step in range(3):
        random_change(store, rng, 20_000 + 100 * step)
        run.maintain()
        run.check()


def test_deletes_that_empty_bounded_buffers_are_refilled_from_the_files(tmp_path):
    rng = np.random.default_rng(5)
    store = store_of(tmp_path, tables_for(rng, 200))
    run = ProbedRun(store, TOPK_SQL, EngineOptions(topk_buffer=3))
    for _ in range(4):  # delete the current top rows: more than the buffer holds
        data = store.read("facts")
        top = data.take(pa.array(np.argsort(-data.column("v").to_numpy())[:4]))
        store.apply("facts", deletes=top)
        run.maintain()
        run.check()


def test_a_probed_side_keeps_no_rows_and_reads_only_matching_keys(tmp_path):
    rng = np.random.default_rng(7)
    store = store_of(tmp_path, tables_for(rng, 500))
    probed = ProbedRun(store, JOIN_SQL, EngineOptions())
    held = ProbedRun(store, JOIN_SQL, EngineOptions(), probe_all=False)
    join = next(op for op in probed.wiring.pipeline.operators if op.kind == "join")
    kept = next(op for op in held.wiring.pipeline.operators if op.kind == "join")
    assert is_probed(join.left) and is_probed(join.right)
    assert not is_probed(kept.left) and join.state_bytes() < kept.state_bytes()
    # the facts side's key k is a plain copy of facts.k: lookups filter the Parquet read
    assert list(join.left._pushdown.values()) == [("facts", "k")]
    # the bootstrap batch (both sides' whole contents from empty state) paired the deltas
    # in memory: no side was read back from the files
    assert join.left.lookups == join.right.lookups == 0
    before = join.left.lookups
    random_change(store, rng, 50_000)
    probed.maintain()
    probed.check()
    assert join.left.lookups + join.right.lookups > before


def test_placement_probes_the_largest_sides_until_the_rest_fits():
    schema = {"facts": FACTS, "dims": DIMS}
    plan = plan_sql(JOIN_SQL, schema)
    sizes = {"facts": 1000, "dims": 10}

    def size(node):
        return sum(sizes[t] for t in node.tables())

    ids = [s for s, *_ in join_sides(plan.root)]
    assert len(ids) == 2
    assert place_join_sides(plan.root, size, None) == frozenset()
    assert place_join_sides(plan.root, size, 10_000) == frozenset()
    big = place_join_sides(plan.root, size, 100)
    assert len(big) == 1 and big <= set(ids)
    assert place_join_sides(plan.root, size, 0) == frozenset(ids)


def test_key_columns_trace_to_their_scans():
    plan = plan_sql("SELECT x, w FROM (SELECT k AS x, v FROM facts WHERE v > 2) f "
                    "JOIN dims ON x = dk", {"facts": FACTS, "dims": DIMS})
    join = next(n for n in plan.root.walk() if n.__class__.__name__ == "Join")
    left_keys, right_keys, _ = join.equi_keys()
    scan, col = trace_column(join.left, left_keys[0])
    assert (scan.table, col) == ("facts", "k")
    scan, col = trace_column(join.right, right_keys[0])
    assert (scan.table, col) == ("dims", "dk")


def test_key_columns_trace_through_joins():
    dims2 = pa.schema([("ek", pa.int64()), ("z", pa.int64())])
    plan = plan_sql("SELECT v, z FROM facts JOIN dims ON k = dk JOIN dims2 ON w = ek",
                    {"facts": FACTS, "dims": DIMS, "dims2": dims2})
    top = next(n for n in plan.root.walk() if n.__class__.__name__ == "Join")
    left_keys, _, _ = top.equi_keys()
    scan, col = trace_column(top.left, left_keys[0])  # w of the join below: dims.w
    assert (scan.table, col) == ("dims", "w")


def test_row_filter_cuts_every_read(tmp_path):
    rng = np.random.default_rng(3)
    store = store_of(tmp_path, tables_for(rng))
    files = TableFiles(store, row_filter=lambda t, rows: rows.slice(0, 2) if t == "facts"
                       else rows)
    assert files.read("facts", store.version("facts"), ["id", "k"]).num_rows == 2
    assert files.read("dims", store.version("dims"), ["dk"]).num_rows == 20


@pytest.mark.parametrize("budget", [None, 0])
def test_store_estimates_place_sides(tmp_path, budget):
    rng = np.random.default_rng(1)
    store = store_of(tmp_path, tables_for(rng))
    prepared = prepare_query(JOIN_SQL, StoreTables(store), {"facts.k": 4})
    placement = DataLayer(store).place(prepared.plan, prepared.partitions,
                                       prepared.versions, budget)
    assert len(placement) == (0 if budget is None else 2)


def test_probed_sides_snapshot_to_their_declared_layout_and_restore(tmp_path):
    rng = np.random.default_rng(13)
    store = store_of(tmp_path, tables_for(rng, 120))
    run = ProbedRun(store, CHAIN_SQL, EngineOptions())
    random_change(store, rng, 30_000)
    run.maintain()
    joins = [op for op in run.wiring.pipeline.operators if op.kind == "join"]
    for op in joins:
        for name, table in op.snapshot().items():
            assert table.schema == op.state_schemas()[name]
    blob = run.driver.snapshot({})
    fresh = QueryDriver.start(run.prepared.plan, run.prepared.partitions, EngineOptions(),
                              DataLayer(store), frozenset(
                                  s for s, *_ in join_sides(run.prepared.plan.root)))
    fresh.restore(blob)
    assert fresh.versions == run.versions
    run.driver = fresh  # continue from the restored state
    for step in range(2):
        random_change(store, rng, 31_000 + 100 * step)
        run.maintain()
        run.check()


def test_filtered_reads_of_files_with_mixed_string_types(tmp_path):
    """Commits by different writers may store a string column as string or string_view;
    a filtered read of the table's files still works and returns the table's types."""
    store = DeltaStore(tmp_path)
    store.create_table("d", pa.table({"k": pa.array([1, 2], pa.int64()), "s": ["a", "b"]}))
    store.apply("d", inserts=pa.table({"k": pa.array([3], pa.int64()),
                                       "s": pa.array(["c"], pa.string_view())}))
    files = TableFiles(store)
    got = files.read("d", store.version("d"), ["k", "s"],
                     pc.field("k").isin(pa.array([1, 3], pa.int64())))
    assert got.schema.field("s").type == pa.string()
    assert sorted(got.column("s").to_pylist()) == ["a", "c"]


def test_a_rebuilt_filter_reads_only_the_key_columns_and_keeps_every_key(tmp_path):
    """A saturated Bloom filter is rebuilt from the side's distinct keys: when the key
    copies one table's column, from that column alone (a superset of the side's keys),
    so that the rebuild never evaluates the subtree over whole tables."""
    rng = np.random.default_rng(11)
    store = store_of(tmp_path, tables_for(rng, 400))
    run = ProbedRun(store, JOIN_SQL, EngineOptions())
    join = next(op for op in run.wiring.pipeline.operators if op.kind == "join")
    side = join.left
    assert list(side._pushdown.values()) == [("facts", "k")]
    reads: list[tuple[str, list[str]]] = []
    real = side.files.read

    def spy(table, version, columns, where=None, keys=None, reader=None):
        reads.append((table, list(columns)))
        return real(table, version, columns, where, keys, reader)

    side.files.read = spy
    keys = side.distinct_keys()
    assert reads == [("facts", ["k"])]
    subtree = evaluate_subtree(side.node, side.partitions, side._read({})).data
    want = set(subtree.column(side.key_columns[0]).to_pylist())
    got = set(keys.column(side.key_columns[0]).to_pylist())
    assert want <= got
    assert got == set(store.read("facts").column("k").to_pylist())
    side.rebuild_bloom()
    hashes = np.asarray(sorted(want - {None}), dtype=np.int64)
    assert side.bloom.might_contain(hashes).all()
    random_change(store, rng, 70_000)
    run.maintain()
    run.check()
