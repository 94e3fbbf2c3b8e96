"""Join inputs carry only the columns read above them, and pruning changes no result.

For each of the 22 TPC-H queries, planned with and without ``prune_join_inputs``, the
reference evaluator (annotated bag semantics) gives the same rows, multiplicities and
fragment sets on SF 0.01 data partitioned on orders and lineitem; the pruned plans are
checked to have dropped what the issue named (q13's ``o_comment`` below its outer join).
"""

from __future__ import annotations

import numpy as np
import pytest
from workload_data import tpch_tables

import imp_core.sql.planner as planner
from imp_core.oracle.reference import reference_evaluate
from imp_core.plan.nodes import OuterJoin
from imp_core.sketch.partition import PartitionSet, RangePartition
from imp_core.sql import plan_sql
from imp_core.workloads.queries import list_queries

QUERIES = list_queries("tpch22")


@pytest.fixture(scope="module")
def data():
    tables = tpch_tables()
    catalog = {name: t.schema for name, t in tables.items()}
    parts = PartitionSet((
        RangePartition.equi_depth("orders", "o_orderkey", tables["orders"]["o_orderkey"], 8),
        RangePartition.equi_depth("lineitem", "l_orderkey",
                                  tables["lineitem"]["l_orderkey"], 8)))
    return tables, catalog, parts


@pytest.mark.parametrize("query", QUERIES, ids=[q.name for q in QUERIES])
def test_pruned_plan_evaluates_like_the_unpruned(query, data, monkeypatch):
    tables, catalog, parts = data
    pruned = plan_sql(query.sql, catalog)
    monkeypatch.setattr(planner, "prune_join_inputs", lambda root: root)
    whole = plan_sql(query.sql, catalog)
    assert pruned.root.schema == whole.root.schema
    assert pruned.root.tables() == whole.root.tables()
    a = reference_evaluate(pruned.root, tables, parts)
    b = reference_evaluate(whole.root, tables, parts)
    assert a.data.equals(b.data) and np.array_equal(a.mult, b.mult)
    assert a.ann.to_pylist() == b.ann.to_pylist()


def test_outer_join_input_drops_the_column_only_its_filter_reads(data):
    _, catalog, _ = data
    (h13,) = [q for q in QUERIES if q.name == "h13"]
    root = plan_sql(h13.sql, catalog).root
    (join,) = [n for n in root.walk() if isinstance(n, OuterJoin)]
    assert "orders.o_comment" not in join.right.column_names
    assert set(join.right.column_names) == {"orders.o_orderkey", "orders.o_custkey"}
