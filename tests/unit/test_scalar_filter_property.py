"""Property tests of the comparison with an uncorrelated scalar subquery (``ScalarFilterOp``).

The plans are the planner's shape for ``... WHERE x > (SELECT agg ...)``: a cross product
with a one-row aggregate, a selection comparing them and a projection back onto the outer
columns. After every random batch (including batches that empty the subquery's input,
making its value NULL, and ones that move its value across many outer rows) the
maintained result and sketch must equal the reference evaluator's over the current
tables (``World.run`` asserts both), and the pipeline must use the fused operator.
"""

from __future__ import annotations

from diff_harness import HypChooser, World, col, lit, op, operators_of, qplan, scan
from hypothesis import given, settings
from hypothesis import strategies as st
from test_operators_property import SCALE, parts_r, parts_rs

from imp_core.engine.operators.scalar_filter import ScalarFilterOp
from imp_core.plan.nodes import (
    AggCall,
    Aggregate,
    Join,
    NamedExpr,
    Project,
    Select,
    SortKey,
    TopK,
    scalar_filter_parts,
)

SETTINGS = settings(max_examples=int(80 * SCALE), deadline=None)

R = ("a", "b", "c")
S = ("c", "d", "e")


def _compare(outer, subquery, predicate):
    """π_outer σ_predicate (outer × subquery), as ``imp_core.sql.subqueries`` plans it."""
    names = outer.column_names
    return Project(Select(Join(outer, subquery, None), predicate),
                   tuple(NamedExpr(n, col(n)) for n in names))


def _scalar(input_node, func: str, arg: str, name: str = "__sq0._v"):
    agg = Aggregate(input_node, (), (AggCall(func, arg, "_agg0"),))
    return Project(agg, (NamedExpr(name, col("_agg0")),))


def run_fused(data, root, fused: type, partitions_fn=parts_rs, tables=("r", "s"),
              steps=8) -> World:
    """Random batches through ``root`` (checked after each) by a pipeline that must
    maintain the comparison as the one operator ``fused``."""
    ch = HypChooser(data)
    world = World(qplan(root), partitions_fn(ch), tables)
    world.run(ch, steps=steps)
    for q in world.pipelines:
        assert operators_of(q, fused), "the plan was not maintained as one operator"
    return world


def _run(data, root, partitions_fn=parts_rs, tables=("r", "s")) -> World:
    return run_fused(data, root, ScalarFilterOp, partitions_fn, tables)


@SETTINGS
@given(st.data())
def test_rows_above_another_tables_average(data):
    # TPC-H q22's shape: outer rows compared with an aggregate over another table
    root = _compare(scan("r", R), _scalar(scan("s", S), "avg", "s.e"),
                    op(">", col("r.c"), col("__sq0._v")))
    _run(data, root)


@SETTINGS
@given(st.data())
def test_groups_above_a_fraction_of_the_total_of_the_same_table(data):
    # TPC-H q11's shape: groups of a partitioned table against that table's total
    groups = Aggregate(scan("r", R, alias="r1"), ("r1.b",), (AggCall("sum", "r1.c", "g"),))
    total = _scalar(scan("r", R, alias="r2"), "sum", "r2.c")
    root = _compare(groups, total, op(">", op("*", col("g"), lit(3)), col("__sq0._v")))
    _run(data, root, parts_r, ("r",))


@SETTINGS
@given(st.data())
def test_aggregated_and_ranked_above_the_comparison(data):
    # the comparison's output feeds an aggregation (q22) and a top-k (q11's ORDER BY)
    inner = Select(scan("r", R, alias="r2"), op(">", col("r2.a"), lit(1)))
    passed = _compare(scan("r", R, alias="r1"), _scalar(inner, "max", "r2.b"),
                      op("<=", col("r1.b"), col("__sq0._v")))
    counted = Aggregate(passed, ("r1.c",), (AggCall("count_star", None, "n"),))
    _run(data, TopK(counted, (SortKey("n", True), SortKey("r1.c")), 2), parts_r, ("r",))


def test_only_the_planner_shape_is_fused():
    groups = Aggregate(scan("r", R), ("r.b",), (AggCall("sum", "r.c", "g"),))
    total = _scalar(scan("s", S), "sum", "s.c")
    pred = op(">", col("g"), col("__sq0._v"))
    assert scalar_filter_parts(_compare(groups, total, pred)) is not None
    # a grouped subquery may return several rows: a plain join
    grouped = Aggregate(scan("s", S), ("s.d",), (AggCall("sum", "s.c", "__sq0._v"),))
    assert scalar_filter_parts(_compare(groups, grouped, pred)) is None
    # the projection keeps the subquery's value: every row changes with it
    keeps = Project(Select(Join(groups, total, None), pred),
                    (NamedExpr("g", col("g")), NamedExpr("v", col("__sq0._v"))))
    assert scalar_filter_parts(keeps) is None
    # a join with a condition is not a comparison with a scalar
    joined = Project(Select(Join(groups, total, op("=", col("g"), col("__sq0._v"))), pred),
                     (NamedExpr("g", col("g")),))
    assert scalar_filter_parts(joined) is None
