"""Aggregations whose groups the data layer holds (``ProbedAggregateOp``): no group in
memory, and after every random batch of updates, read from the change feed, the sketch
and the annotated result equal the reference evaluator's recapture; a checkpoint holds no
group and restores to an operator that stays exact; placement chooses them only where a
lookup of the groups reads a clustered key column."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from probed_runs import ProbedRun as _DataLayerRun
from probed_runs import random_change, store_of, tables_for

from imp_core.engine.operators.probed_aggregate import ProbedAggregateOp
from imp_core.engine.pipeline import EngineOptions
from imp_core.errors import ProbedSideError
from imp_core.estimate.memory import estimate_plan
from imp_core.plan.nodes import Aggregate
from imp_core.query.data_layer import (
    groups_lookup,
    groups_to_probe,
    join_sides,
    place_join_sides,
)
from imp_core.query.driver import QueryDriver
from imp_core.query.prepare import table_statistics
from imp_core.sql import plan_sql

QUERIES = {
    "having": "SELECT k, sum(v) AS s, count(*) AS n, min(v) AS mn, max(v) AS mx, "
              "avg(v) AS a FROM facts GROUP BY k HAVING sum(v) > 20",
    "join": "SELECT k, w, sum(v) AS s, count(label) AS c FROM facts JOIN dims ON k = dk "
            "GROUP BY k, w",
    "in": "SELECT id, v FROM facts WHERE k IN "
          "(SELECT k FROM facts GROUP BY k HAVING sum(v) > 30)",
    "topk": "SELECT k, sum(v) AS s FROM facts GROUP BY k ORDER BY s DESC, k LIMIT 3",
}


class _Run(_DataLayerRun):
    """A query maintained through the data layer, every aggregation's groups probed
    (with ``joins``, every join side too)."""

    def __init__(self, store, sql: str, joins: bool = False):
        def place(root):
            return frozenset(g for g, _ in groups_to_probe(root)) | (
                frozenset(s for s, *_ in join_sides(root)) if joins else frozenset())

        super().__init__(store, sql, EngineOptions(), place=place)

    def aggregates(self) -> list:
        return [op for op in self.wiring.pipeline.operators if op.kind == "aggregate"]

    def restart(self) -> None:
        """A new wiring restored from this one's state tables (a checkpoint)."""
        tables, versions = self.wiring.pipeline.state_tables(), self.versions
        self.driver = QueryDriver.start(self.prepared.plan, self.prepared.partitions,
                                        EngineOptions(), self.layer, self.placement)
        self.driver.load_state(tables, versions, batches=1)


@settings(max_examples=16, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 10**6), steps=st.integers(1, 4),
       query=st.sampled_from(sorted(QUERIES)), joins=st.booleans())
def test_probed_groups_equal_the_reference(tmp_path_factory, seed, steps, query, joins):
    rng = np.random.default_rng(seed)
    store = store_of(tmp_path_factory.mktemp("pa"), tables_for(rng))
    run = _Run(store, QUERIES[query], joins)
    aggs = run.aggregates()
    assert aggs and all(isinstance(op, ProbedAggregateOp) for op in aggs)
    run.check()
    for step in range(steps):
        random_change(store, rng, 50_000 + 100 * step)
        run.maintain()
        run.check()
        assert all(op.state_bytes() == 0 and len(op.groups) == 0 for op in run.aggregates())
        assert all(t.num_rows == 0 for op in run.aggregates() for t in op.snapshot().values())
        if step == 0:
            if query == "having":  # the whole output: one row per group of the input
                (op,) = run.aggregates()
                groups = {k for k in store.read("facts").column("k").to_pylist()}
                assert sorted(op.current_output().data.column(0).to_pylist()) == \
                    sorted(groups)
            run.restart()
            run.check()


def test_a_null_group_key_is_refused_not_missed(tmp_path):
    rng = np.random.default_rng(3)
    store = store_of(tmp_path, tables_for(rng))
    run = _Run(store, QUERIES["having"])
    (op,) = run.aggregates()
    schema = pa.schema([(f.name, f.dtype) for f in op.agg.input.schema])
    rows = pa.table({name: pa.array([None if name.endswith("k") else 1], schema.field(name).type)
                     for name in schema.names})
    from imp_core.engine.annotation import Annotation
    from imp_core.engine.zset import DeltaBatch

    batch = DeltaBatch(rows, np.ones(1, np.int64), Annotation.singletons(np.zeros(1, np.int32)))
    with pytest.raises(ProbedSideError, match="NULL group key"):
        op.step([batch])


def test_placement_and_estimate_of_probed_groups():
    """An IN subquery grouped on a clustered key column: the groups go to the data layer
    when the budget asks (largest first, after cold join sides) and the estimate then
    counts no state for them; without a key (NULL possible) or clustering they stay."""
    catalog = {"facts": pa.schema([("id", pa.int64()), ("k", pa.int64()),
                                   ("v", pa.int64())])}
    plan = plan_sql("SELECT id, v FROM facts WHERE k IN "
                    "(SELECT k FROM facts GROUP BY k HAVING sum(v) > 30)", catalog)
    root = plan.root
    ((gid, agg),) = list(groups_to_probe(root))
    assert isinstance(agg, Aggregate) and gid.side == "groups"

    def size(node):
        return 1000 if node is agg else 10

    rates = {"facts": 100.0}
    key = lambda t, c: c in ("id", "k")  # noqa: E731
    assert groups_lookup(agg, lambda t, c: c == "k", key)
    assert not groups_lookup(agg, lambda t, c: False, key)
    assert not groups_lookup(agg, lambda t, c: True, lambda t, c: False)
    placed = place_join_sides(root, size, 100, rates, lambda t, c: True, key)
    assert gid in placed
    assert gid not in place_join_sides(root, size, 100, rates, lambda t, c: True)
    assert gid not in place_join_sides(root, size, 5000, rates, lambda t, c: True, key)
    # above the budget but within HOT_SIDE_FACTOR times it: the groups stay in memory
    assert gid not in place_join_sides(root, size, 900, rates, lambda t, c: True, key)
    # clustered on nothing, but a shared index serves reads of facts by k: probed
    nowhere = lambda t, c: False  # noqa: E731
    assert gid not in place_join_sides(root, size, 100, rates, nowhere, key)
    assert gid in place_join_sides(root, size, 100, rates, nowhere, key,
                                   lambda t, c: (t, c) == ("facts", "k"))
    assert gid not in place_join_sides(root, size, 100, rates, nowhere, key,
                                       lambda t, c: (t, c) == ("facts", "v"))
    rows = pa.table({"id": np.arange(1000), "k": np.arange(1000) % 300,
                     "v": np.arange(1000) % 7})

    class _Source:
        def catalog(self):
            return catalog

        def column(self, table, column):
            return rows.column(column)

        def rows(self, table):
            return rows.num_rows

        def domains(self, table):
            return {}

    stats = table_statistics(_Source(), root)
    plain = {e.op_id: e.state_bytes for e in estimate_plan(root, stats).operators}
    probed = {e.op_id: e.state_bytes for e in estimate_plan(root, stats, probed={gid}).operators}
    op_id = str(gid.operator)
    assert plain[op_id] > 0 and probed[op_id] == 0
