"""The service's query actors use the same data layer as the embedded path: join sides
beyond the per-actor state budget are probed from the table store's files or shared
indexes (no rows in the actor), so are aggregations' groups an index finds, and bounded
min/max and top-k buffers emptied by deletions are refilled from the tables. Through the
coordinator with Ray actors; every fresh sketch is checked against a recapture by Spark
at the same table versions."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from runtime_support import assert_spark_exact, fill_store, make_config, random_batch, workload_spec

from imp_actors.coordinator import Coordinator
from imp_actors.types import QuerySpec
from imp_core.engine.pipeline import EngineOptions

pytestmark = [pytest.mark.ray, pytest.mark.spark, pytest.mark.integration]

BUDGET = 12_000  # bytes of join inputs an actor may hold: the test lineitem is more
OPTIONS = EngineOptions(minmax_buffer=2, topk_buffer=25)
MINMAX_SQL = ("-- sketch: t5000g.a\n"
              "SELECT a, min(b) AS mn, max(c) AS mx FROM t5000g GROUP BY a HAVING min(b) < 300")


@pytest.fixture(scope="module")
def coordinator(tmp_path_factory):
    from imp_core.spark import SparkConfig, get_spark

    get_spark(SparkConfig(master="local[2]", driver_memory="2g"))
    root = tmp_path_factory.mktemp("data-layer")
    fill_store(root, ("synthetic", "tpch"))
    config = make_config(root, backend="ray", join_state_budget_bytes=BUDGET)
    c = Coordinator(config, options=OPTIONS).start()
    yield c
    c.close()


def _join_state_bytes(c: Coordinator, name: str) -> int:
    return sum(op["state_bytes"] for shard in c.diagnostics.operator_stats(name) for op in shard
               if op["kind"] == "join")


def test_join_sides_beyond_the_budget_are_probed_and_stay_exact(coordinator):
    c = coordinator
    for q in ("q03", "q10", "q_joinsel"):
        c.register(workload_spec(q, q))
    probed = {q: c.info(q).probed_join_sides for q in ("q03", "q10", "q_joinsel")}
    assert probed["q03"] and probed["q10"], probed  # lineitem's side exceeds the budget
    # the actor answers those probes from the table files (through shared indexes) and
    # keeps no rows: the joins' state fits the budget
    kinds = [k for shard in c.diagnostics.operator_stats("q03") for op in shard
             for k in op.get("sides", ())]
    sides = [p for p in probed["q03"] if not p.endswith(":groups")]
    assert kinds.count("files") == len(sides) and "memory" in kinds, kinds
    assert _join_state_bytes(c, "q03") < BUDGET
    # q03's groups (by l_orderkey) are looked up in the data layer (lineitem's shared
    # index on that column serves the reads): the actor holds no group
    assert any(p.endswith(":groups") for p in probed["q03"]), probed
    assert sum(op["state_bytes"] for shard in c.diagnostics.operator_stats("q03")
               for op in shard if op["kind"] == "aggregate") == 0
    rng = np.random.default_rng(11)
    tables = ["lineitem", "orders", "customer", "t5000g", "tjoinhelp", "lineitem"]
    for step, t in enumerate(tables):
        ins, dels = random_batch(c.ctx.store, t, rng, int(rng.integers(5, 25)),
                                 4 * 10**7 + 1000 * step)
        c.apply_update(t, inserts=ins, deletes=dels)
        for q in probed:
            assert_spark_exact(c, q)
    # restored from its checkpoint, the query is wired the same way and stays exact
    c.evict("q03")
    ins, dels = random_batch(c.ctx.store, "lineitem", rng, 15, 5 * 10**7)
    c.apply_update("lineitem", inserts=ins, deletes=dels)
    assert_spark_exact(c, "q03")
    assert c.info("q03").probed_join_sides == probed["q03"]


# the tables each query's open-sides scenario changes, the last one while it is evicted
CHANGED = {"q09": ("lineitem", "part", "partsupp", "orders", "lineitem", "supplier"),
           "q03": ("lineitem", "orders", "customer", "lineitem", "orders")}


def _open_sides_stay_exact(c: Coordinator, name: str, template: str = "q09") -> None:
    """Q9 joins lineitem unfiltered, Q3 filters lineitem and orders: their probed sides
    keep no Bloom filter (every key is looked up in the shared indexes, and a filtered
    side's selection applied to the rows found), and the sketch stays exact through
    changes (new keys among them), an eviction and a restore."""
    c.register(workload_spec(name, template))

    def open_sides() -> int:
        return sum(op.get("open_sides", 0)
                   for shard in c.diagnostics.operator_stats(name) for op in shard)

    assert c.info(name).probed_join_sides and open_sides() >= 1
    assert_spark_exact(c, name)
    rng = np.random.default_rng(19)
    *tables, last = CHANGED[template]
    for step, t in enumerate(tables):
        ins, dels = random_batch(c.ctx.store, t, rng, int(rng.integers(5, 25)),
                                 6 * 10**7 + 1000 * step)
        c.apply_update(t, inserts=ins, deletes=dels)
        assert_spark_exact(c, name)
    opened = open_sides()
    c.evict(name)
    ins, dels = random_batch(c.ctx.store, last, rng, 10, 7 * 10**7)
    c.apply_update(last, inserts=ins, deletes=dels)
    assert_spark_exact(c, name)
    assert open_sides() == opened  # the restored state says which sides are open


def test_sides_of_whole_tables_are_open_and_stay_exact(coordinator):
    _open_sides_stay_exact(coordinator, "q09open")


def test_sides_of_filtered_tables_are_open_and_stay_exact(coordinator):
    _open_sides_stay_exact(coordinator, "q03open", "q03")


def test_open_sides_bootstrapped_on_spark(tmp_path):
    """The same with the first state computed on Spark, whose sides are Spark's: the
    state it ships marks the sides open for the workers, which read shared indexes;
    no Spark query computes an open side's keys."""
    from imp_core.spark import bootstrap

    fill_store(tmp_path, ("tpch",))
    config = replace(make_config(tmp_path, join_state_budget_bytes=BUDGET),
                     bootstrap="spark")
    c = Coordinator(config, options=OPTIONS).start()
    asked: list[str] = []
    collect = bootstrap._Bootstrap._collect

    def recorded(self, sql: str, what: str):
        asked.append(what)
        return collect(self, sql, what)

    try:
        bootstrap._Bootstrap._collect = recorded
        for name, template in (("q09spark", "q09"), ("q03spark", "q03")):
            _open_sides_stay_exact(c, name, template)
    finally:
        bootstrap._Bootstrap._collect = collect
        c.close()
    assert asked and not [w for w in asked if w.startswith(("Bloom keys", "key superset"))]


def _delete_where(c: Coordinator, table: str, mask_of) -> int:
    data = c.ctx.store.read(table)
    rows = data.filter(mask_of(data))
    if rows.num_rows:
        c.apply_update(table, deletes=rows)
    return rows.num_rows


def test_bounded_minmax_buffers_are_refilled_after_deletes_empty_them(coordinator):
    c = coordinator
    c.register(QuerySpec("mm", MINMAX_SQL, partitions={"t5000g.a": 16}))
    assert_spark_exact(c, "mm")
    groups = pa.array([1, 2, 3, 77, 4000], pa.int64())
    for _ in range(4):  # each round deletes more than the 2 kept values of each group
        data = c.ctx.store.read("t5000g")
        mine = data.filter(pc.is_in(data.column("a"), groups))
        lows = set()
        for g in groups.to_pylist():
            b = mine.filter(pc.equal(mine.column("a"), g)).column("b").to_pylist()
            lows |= {(g, v) for v in sorted(b)[:3]}
        _delete_where(c, "t5000g", lambda d, lows=lows: pa.array(
            [(a, b) in lows for a, b in zip(d.column("a").to_pylist(),
                                            d.column("b").to_pylist())]))
        assert_spark_exact(c, "mm")


def test_bounded_topk_buffer_is_refilled_after_deletes_empty_it(coordinator):
    c = coordinator
    c.register(workload_spec("topk", "q_topk"))
    assert_spark_exact(c, "topk")
    for _ in range(3):  # each round deletes the 26 smallest groups: more than the buffer
        data = c.ctx.store.read("t5000g")
        smallest = pc.unique(data.column("a")).sort()[:26]
        assert _delete_where(c, "t5000g", lambda d, keep=smallest: pc.is_in(d.column("a"), keep))
        assert_spark_exact(c, "topk")
