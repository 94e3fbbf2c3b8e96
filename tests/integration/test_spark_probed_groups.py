"""A Spark bootstrap of aggregations whose groups the data layer holds: their first
output comes straight from Spark's group totals (no group state is built), the pipeline
then holds no group, and its sketch and annotated result equal the recapture, at
registration and after changes read from the change feed."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
from workload_data import workload_stores

from imp_core.engine.operators.probed_aggregate import ProbedAggregateOp
from imp_core.engine.pipeline import EngineOptions
from imp_core.oracle.reference import reference_capture
from imp_core.query.data_layer import DataLayer, groups_to_probe
from imp_core.query.prepare import StoreTables, prepare_query
from imp_core.spark.bootstrap import bootstrap
from imp_core.storage import ChangeReader

pytestmark = pytest.mark.spark

QUERIES = {
    # TPC-H Q18's subquery: large orders
    "in_having": "SELECT o_orderkey, o_totalprice FROM orders WHERE o_orderkey IN "
                 "(SELECT l_orderkey FROM lineitem GROUP BY l_orderkey "
                 "HAVING sum(l_quantity) > 100)",
    "every_aggregate": "SELECT l_orderkey, sum(l_extendedprice) AS s, count(*) AS n, "
                       "min(l_shipdate) AS first, max(l_comment) AS last, "
                       "avg(l_discount) AS d FROM lineitem GROUP BY l_orderkey "
                       "HAVING count(*) > 2",
    "top_k": "SELECT l_orderkey, sum(l_quantity) AS q FROM lineitem GROUP BY l_orderkey "
             "ORDER BY q DESC, l_orderkey LIMIT 5",
}


@pytest.fixture(scope="module")
def spark():
    from imp_core.spark import get_spark

    return get_spark()


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    return workload_stores(tmp_path_factory.mktemp("probed-groups"))["tpch"]


def _check(prepared, pipeline, store, versions) -> None:
    tables = {t: store.read(t, v) for t, v in versions.items()}
    ref = reference_capture(prepared.plan, tables, prepared.partitions)
    assert pipeline.sketch() == ref.sketch
    assert pipeline.result().to_counter() == ref.bag.items


def _change_lineitem(store, rng) -> None:
    """Delete 8 lines and put 5 of them back with their values permuted among them (the
    keys are the table's: groups change, and some lose lines)."""
    data = store.read("lineitem")
    dels = data.take(pa.array(rng.choice(data.num_rows, 8, replace=False)))
    ins = dels.slice(0, 5)
    perm = pa.array(rng.permutation(5))
    for col in ("l_quantity", "l_extendedprice", "l_shipdate", "l_comment", "l_discount"):
        i = ins.schema.get_field_index(col)
        ins = ins.set_column(i, ins.schema.field(i), ins.column(col).take(perm))
    store.apply("lineitem", inserts=ins, deletes=dels)


@pytest.mark.parametrize("name", list(QUERIES))
def test_probed_groups_bootstrapped_by_spark_equal_the_recapture(spark, store, name):
    prepared = prepare_query(QUERIES[name], StoreTables(store), {"lineitem.l_orderkey": 6})
    placement = frozenset(g for g, _ in groups_to_probe(prepared.plan.root))
    assert placement, "the grouping on l_orderkey can be probed"
    wiring = DataLayer(store).wire(prepared.plan, prepared.partitions, EngineOptions(),
                                   placement)
    versions = dict(prepared.versions)
    wiring.context.begin(None, versions)
    run = bootstrap(spark, store, wiring.pipeline, versions)
    probed = [op for op in wiring.pipeline.operators if isinstance(op, ProbedAggregateOp)]
    assert probed and all(run.sources[op.op_id] == "spark" for op in probed)
    assert all(len(op.groups) == 0 for op in probed)
    _check(prepared, wiring.pipeline, store, versions)
    reader = ChangeReader(store)
    rng = np.random.default_rng(len(name))
    for _ in range(2):
        _change_lineitem(store, rng)
        target = {t: store.version(t) for t in versions}
        changes = {t: reader.changes(t, versions[t], v, prepared.scan_specs.get(t))
                   for t, v in target.items() if v > versions[t]}
        wiring.context.begin(versions, target)
        wiring.pipeline.apply(changes)
        versions = target
        _check(prepared, wiring.pipeline, store, versions)
        assert all(op.state_bytes() == 0 for op in probed)
