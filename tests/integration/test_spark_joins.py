"""Join sides served by Spark: with every equi-join input forced out of memory
(``join_memory_rows=0``) maintained sketches and results equal the in-memory run's and a
recapture after every batch of mixed updates (to both join inputs); the Bloom filter
spares Spark probes that cannot match; the per-join choice follows the row limit."""

from __future__ import annotations

import datetime as dt

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from workload_data import synthetic_tables, tpch_tables

from imp_core.embedded.maintainer import Maintainer
from imp_core.engine.join_index import SideIndex
from imp_core.spark.joins import SparkJoinSide
from imp_core.storage import DeltaStore
from imp_core.workloads.queries import list_queries
from imp_core.workloads.schemas import TABLES

pytestmark = pytest.mark.spark

QUERIES = {q.name: q for q in list_queries()}
TPCH = ("customer", "orders", "lineitem", "nation")
SYNTH = ("t5000g", "tjoinhelp")


def _store(path, tables, names):
    store = DeltaStore(path)
    for name in names:
        info = TABLES[name]
        store.create_table(name, tables[name], key=info.key, domains=info.domains)
    return store


@pytest.fixture(scope="module")
def spark():
    from imp_core.spark import get_spark

    return get_spark()


def _joins(q):
    return [op for op in q.pipeline.operators if op.kind == "join"]


def _spark_sides(q):
    return [s for op in _joins(q) for s in (op.left, op.right) if isinstance(s, SparkJoinSide)]


def _permuted(rows, rng, columns):
    perm = pa.array(rng.permutation(rows.num_rows))
    for col in columns:
        i = rows.schema.get_field_index(col)
        rows = rows.set_column(i, rows.schema.field(col), rows.column(col).take(perm))
    return rows


def _update(store, table, rng, n, columns, fresh_key=None, salt=0):
    """Delete ``n`` random rows; re-insert them with ``columns`` permuted among them, plus
    (with ``fresh_key``) ``n`` copies of other rows under new values of that key."""
    data = store.read(table)
    dels = data.take(pa.array(rng.choice(data.num_rows, size=n, replace=False)))
    ins = [_permuted(dels, rng, columns)]
    if fresh_key is not None:
        new = data.take(pa.array(rng.integers(0, data.num_rows, size=n), type=pa.int64()))
        i = new.schema.get_field_index(fresh_key)
        field = new.schema.field(fresh_key)
        new = new.set_column(i, field, pa.array(np.arange(salt, salt + n)).cast(field.type))
        ins.append(new)
    store.apply(table, inserts=pa.concat_tables(ins), deletes=dels)


def _batch(store, suite, rng, step):
    if suite == "tpch":
        _update(store, "lineitem", rng, 12, ("l_quantity", "l_shipdate", "l_returnflag",
                                                "l_shipmode", "l_receiptdate"))
        _update(store, "orders", rng, 6, ("o_orderdate", "o_custkey", "o_orderpriority"),
                fresh_key="o_orderkey", salt=80_000_000 + 100 * step)
    else:
        _update(store, "t5000g", rng, 15, ("a", "b", "c"), fresh_key="id",
                salt=70_000_000 + 100 * step)
        _update(store, "tjoinhelp", rng, 10, ("ttid",))


@pytest.mark.parametrize("name", ["q03", "q10", "q12", "q_join"])
def test_spark_sides_equal_memory_and_recapture(tmp_path, spark, name):
    suite = "synthetic" if name == "q_join" else "tpch"
    tables, names = (synthetic_tables(), SYNTH) if suite == "synthetic" \
        else (tpch_tables(), TPCH)
    store = _store(tmp_path, tables, names)
    wq = QUERIES[name]
    parts = {f"{t}.{c}": 16 for t, c in wq.sketch}
    far = Maintainer(store, join_memory_rows=0, spark=spark)
    near = Maintainer(store)
    a, b = far.register(name, wq.sql, parts), near.register(name, wq.sql, parts)
    sides = _spark_sides(a)
    assert len(sides) == 2 * len(_joins(a)) > 0
    assert a.sketch == b.sketch == far.reference_sketch(name)
    assert a.pipeline.result().to_counter() == b.pipeline.result().to_counter()
    rng = np.random.default_rng(7)
    for step in range(3):
        _batch(store, suite, rng, step)
        far.maintain(name), near.maintain(name)
        assert a.versions == b.versions == {t: store.version(t) for t in a.versions}
        assert a.sketch == far.reference_sketch(name), f"{name} step {step}"
        assert a.sketch == b.sketch
        assert a.pipeline.result().to_counter() == b.pipeline.result().to_counter()
    assert sum(s.spark_calls for s in sides) > 0
    # state round trip: versions + Bloom filter only
    blob = a.pipeline.snapshot()
    a.pipeline.restore(blob)
    _batch(store, suite, rng, 9)
    far.maintain(name), near.maintain(name)
    assert a.sketch == b.sketch == far.reference_sketch(name)
    assert a.pipeline.result().to_counter() == b.pipeline.result().to_counter()


def test_bloom_filter_skips_spark_when_no_key_can_match(tmp_path, spark):
    store = _store(tmp_path, tpch_tables(), ("orders", "lineitem"))
    wq = QUERIES["q12"]
    m = Maintainer(store, join_memory_rows=0, spark=spark)
    q = m.register("q12", wq.sql, {"lineitem.l_orderkey": 16})
    (join,) = _joins(q)
    orders = join.left
    assert isinstance(orders, SparkJoinSide) and orders.bloom is not None
    # new lines of orders that do not exist: keys the orders side's filter rejects
    candidates = np.arange(90_000_000, 90_000_400, dtype=np.int64)
    fresh = candidates[~orders.bloom.might_contain(candidates)][:10]
    lines = store.read("lineitem")
    passing = (pc.field("l_shipmode").isin(["MAIL", "SHIP"])
               & (pc.field("l_commitdate") < pc.field("l_receiptdate"))
               & (pc.field("l_shipdate") < pc.field("l_commitdate"))
               & (pc.field("l_receiptdate") >= dt.date(1994, 1, 1))
               & (pc.field("l_receiptdate") < dt.date(1995, 1, 1)))
    new = lines.filter(passing)
    fresh = fresh[:new.num_rows]
    new = new.slice(0, len(fresh))
    assert new.num_rows > 0  # rows that reach the join
    i = new.schema.get_field_index("l_orderkey")
    new = new.set_column(i, new.schema.field("l_orderkey"),
                         pa.array(fresh).cast(new.schema.field("l_orderkey").type))
    store.apply("lineitem", inserts=new)
    calls = sum(s.spark_calls for s in _spark_sides(q))
    skipped = orders.probes_skipped
    m.maintain("q12")
    assert sum(s.spark_calls for s in _spark_sides(q)) == calls
    assert orders.probes_skipped > skipped
    assert q.sketch == m.reference_sketch("q12")
    # a delta with a partner does go to Spark (lines that pass q12's selection, of
    # orders that exist)
    calls = orders.spark_calls
    known = passing & (pc.field("l_orderkey") < 90_000_000)  # not the lines added above
    store.apply("lineitem", deletes=store.read("lineitem").filter(known).slice(0, 5))
    m.maintain("q12")
    assert orders.spark_calls > calls
    assert q.sketch == m.reference_sketch("q12")


def test_per_join_choice_follows_the_row_limit(tmp_path, spark):
    store = _store(tmp_path, synthetic_tables(), SYNTH)
    wq = QUERIES["q_join"]
    parts = {"t5000g.a": 8}
    # left: t5000g (3000 rows) filtered to b < 1000: 305 rows; right: tjoinhelp, 500 rows
    m = Maintainer(store, join_memory_rows=400, spark=spark)
    q = m.register("j", wq.sql, parts)
    (join,) = _joins(q)
    assert isinstance(join.left, SideIndex)  # exact count by Spark under the limit
    assert isinstance(join.right, SparkJoinSide)
    assert q.sketch == m.reference_sketch("j")
    m = Maintainer(store, join_memory_rows=500, spark=spark)
    (join,) = _joins(m.register("j", wq.sql, parts))
    assert isinstance(join.left, SideIndex) and isinstance(join.right, SideIndex)
