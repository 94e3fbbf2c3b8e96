"""Semi-, anti- and outer joins with one side served by the data layer and the other held
in memory, bootstrapped on Spark (``imp_core.spark.bootstrap``): Spark evaluates the join
(the served side's rows are never shipped), reading the in-memory side back from a view
of the driver's rows where that side is a join's or an aggregation's output
(``imp_core.spark.driver_views``). The state equals the engine's, built from the same
tables with the same sides placed; the sketch and result equal the reference
evaluator's; maintenance afterwards keeps both."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
from state_canon import canonical_state, first_difference
from workload_data import workload_stores

from imp_core.embedded.maintainer import Maintainer
from imp_core.engine.operators.keyed_join import KeyedJoinOp
from imp_core.engine.probed_side import ProbedSide
from imp_core.oracle.reference import reference_capture
from imp_core.workloads.queries import list_queries
from imp_core.workloads.schemas import TABLES

pytestmark = pytest.mark.spark

QUERIES = {q.name: q for q in list_queries("tpch22")}

# (query, join_memory_rows, views expected): each places at least one semi-, anti- or
# outer join with one side in memory and one served (asserted below)
CASES = [
    ("h04", 300, False),  # EXISTS: orders in memory (one table: Spark reads it), lines served
    ("h13", 1000, False),  # LEFT OUTER JOIN: customer served, orders in memory
    ("h18", 1000, True),  # IN: the aggregation with HAVING in memory, as a view
    ("h21", 300, True),  # EXISTS, NOT EXISTS: the joined lines, then the semi-join's output
    ("h22", 300, True),  # NOT EXISTS: customers past a scalar subquery's filter, a view
]


@pytest.fixture(scope="module")
def spark():
    from imp_core.spark import get_spark

    return get_spark()


def _mixed(q) -> list[KeyedJoinOp]:
    return [op for op in q.pipeline.operators if isinstance(op, KeyedJoinOp)
            and isinstance(op.left, ProbedSide) != isinstance(op.right, ProbedSide)]


def _batch(store, table: str, rng, n: int, salt: int) -> None:
    """``n`` rows deleted and ``n`` copies of others inserted under new keys (lineitem:
    the deleted lines put back with their quantities and dates permuted)."""
    data = store.read(table)
    dels = data.take(pa.array(rng.choice(data.num_rows, size=n, replace=False)))
    if table == "lineitem":
        ins = dels
        perm = pa.array(rng.permutation(n))
        for col in ("l_quantity", "l_receiptdate", "l_suppkey"):
            i = ins.schema.get_field_index(col)
            ins = ins.set_column(i, ins.schema.field(col), dels.column(col).take(perm))
    else:
        ins = data.take(pa.array(rng.integers(0, data.num_rows, size=n), type=pa.int64()))
        key = TABLES[table].key[-1]
        i = ins.schema.get_field_index(key)
        field = ins.schema.field(key)
        ins = ins.set_column(i, field, pa.array(np.arange(salt, salt + n)).cast(field.type))
    store.apply(table, inserts=ins, deletes=dels)


def _same_state(a, b, what: str) -> None:
    ca, cb = canonical_state(a.pipeline), canonical_state(b.pipeline)
    assert ca == cb, f"{what}: {first_difference(ca, cb)}"


def _exact(m: Maintainer, q, store, what: str) -> None:
    ref = reference_capture(q.plan, {t: store.read(t, v) for t, v in q.versions.items()},
                            q.partitions)
    assert q.sketch == ref.sketch, what
    assert q.pipeline.result().to_counter() == ref.bag.items, what


@pytest.mark.parametrize("name,rows,views", CASES, ids=[f"{c[0]}-{c[1]}" for c in CASES])
def test_one_side_served_equals_the_engine(tmp_path, spark, name, rows, views):
    store = workload_stores(tmp_path)["tpch"]
    wq = QUERIES[name]
    parts = {f"{t}.{c}": 8 for t, c in wq.sketch}
    on_spark = Maintainer(store, join_memory_rows=rows, spark=spark)
    in_engine = Maintainer(store, join_memory_rows=rows, spark=spark, bootstrap="engine")
    a = on_spark.register(name, wq.sql, parts)
    b = in_engine.register(name, wq.sql, parts)
    assert (a.bootstrap, b.bootstrap) == ("spark", "engine")
    mixed = _mixed(a)
    assert mixed, f"{name} at {rows} rows: no join with one side served"
    assert all(a.bootstrap_run.sources[op.op_id] == "spark" for op in mixed)
    assert bool(a.bootstrap_run.views) == views, a.bootstrap_run.views
    # no view outlives its bootstrap
    assert not [t for t in spark.catalog.listTables() if t.name.startswith("__imp_drv_")]
    _same_state(a, b, f"{name} bootstrap")
    _exact(on_spark, a, store, f"{name} bootstrap")
    rng = np.random.default_rng(rows + sum(map(ord, name)))
    for step, table in enumerate(("lineitem", "orders", "lineitem")):
        _batch(store, table, rng, 5, 70_000_000 + 100 * step)
        on_spark.maintain(name), in_engine.maintain(name)
        _exact(on_spark, a, store, f"{name} step {step}")
        assert a.sketch == b.sketch, f"{name} step {step}"
