"""Property tests of the comparison with a correlated scalar subquery (``KeyedFilterOp``).

The plans are the planner's shape for ``... WHERE x > (SELECT agg ... WHERE k = outer.a)``:
an equi-join with the subquery's aggregate grouped by its correlation key, a selection
comparing them and a projection back onto the outer columns. After every random batch
(including batches that empty a key's group, so its row leaves the subquery, move a
key's value across many outer rows, or change a group's provenance) the maintained
result and sketch must equal the reference evaluator's over the current tables
(``World.run`` asserts both), and the pipeline must use the fused operator.

The side of outer rows merges its pending deltas after a few rows here
(``SideIndex.MIN_PENDING``), so that moved values are searched by range in its main part
(``KeyedFilterOp._in_ranges``) as well as in its pending part.
"""

from __future__ import annotations

import pytest
from diff_harness import HypChooser, col, lit, op, operators_of, qplan, scan, setting
from hypothesis import given
from hypothesis import strategies as st
from test_keyed_join_probed_property import ProbedWorld
from test_operators_property import parts_r, parts_rs
from test_scalar_filter_property import SETTINGS, R, S, run_fused

from imp_core.engine.join_index import SideIndex
from imp_core.engine.operators.keyed_filter import KeyedFilterOp
from imp_core.engine.probed_side import is_probed
from imp_core.plan.expr import Strict
from imp_core.plan.nodes import AggCall, Aggregate, Join, NamedExpr, Project, Select, SortKey, TopK
from imp_core.plan.shapes import keyed_filter_parts

R5 = ("a", "b", "c", "f", "m")  # with r's double and decimal columns


@pytest.fixture(autouse=True, scope="module")
def _merging_early():
    with setting(SideIndex, "MIN_PENDING", 3):
        yield


def _compare(outer, subquery, keys, predicate, residual=None):
    """π_outer σ_predicate (outer ⋈_keys subquery), as ``imp_core.sql.subqueries`` plans a
    correlated scalar subquery."""
    cond = None
    for a, b in keys:
        eq = op("=", col(a), col(b))
        cond = eq if cond is None else op("and", cond, eq)
    if residual is not None:
        cond = residual if cond is None else op("and", cond, residual)
    return Project(Select(Join(outer, subquery, cond), predicate),
                   tuple(NamedExpr(n, col(n)) for n in outer.column_names))


def _per_key(input_node, key: str, func: str, arg: str):
    """The subquery's value per correlation key: ``__sq0._k0``, ``__sq0._v``."""
    agg = Aggregate(input_node, (key,), (AggCall(func, arg, "_agg0"),))
    return Project(agg, (NamedExpr("__sq0._k0", col(key)),
                         NamedExpr("__sq0._v", op("*", col("_agg0"), lit(2)))))


def _run(data, root, *args):
    return run_fused(data, root, KeyedFilterOp, *args)


@SETTINGS
@given(st.data())
def test_rows_above_their_keys_average_in_another_table(data):
    # TPC-DS q6 / q32's shape: an outer row against the average of its key's group
    root = _compare(scan("r", R), _per_key(scan("s", S), "s.d", "avg", "s.e"),
                    [("r.b", "__sq0._k0")], op(">", col("r.c"), col("__sq0._v")))
    _run(data, root)


@SETTINGS
@given(st.data())
def test_groups_against_the_average_of_their_key_in_the_same_table(data):
    # TPC-DS q1 / q30 / q81's shape: a customer's total against its store's average of
    # such totals, both computed from the same partitioned table
    def totals(alias):
        return Aggregate(scan("r", R, alias=alias), (f"{alias}.a", f"{alias}.b"),
                         (AggCall("sum", f"{alias}.c", f"{alias}_t"),))
    avg = _per_key(totals("r2"), "r2.b", "avg", "r2_t")
    root = _compare(totals("r1"), avg, [("r1.b", "__sq0._k0")],
                    op(">", op("*", col("r1_t"), lit(3)), col("__sq0._v")))
    _run(data, root, parts_r, ("r",))


@SETTINGS
@given(st.data())
def test_a_residual_condition_and_a_top_k_above(data):
    # the join's own residual is conjoined with the comparison; a top-k ranks the rows
    inner = Select(scan("s", S), op(">", col("s.c"), lit(0)))
    passed = _compare(scan("r", R), _per_key(inner, "s.d", "max", "s.e"),
                      [("r.b", "__sq0._k0")], op("<=", col("r.a"), col("__sq0._v")),
                      residual=op("<>", col("r.c"), col("__sq0._k0")))
    _run(data, TopK(passed, (SortKey("r.a", True), SortKey("r.c")), 3))


@SETTINGS
@given(st.data())
def test_a_decimal_column_against_a_moving_average(data):
    # a decimal compared with a double: the range search runs on floats, the comparison
    # on the values themselves
    root = _compare(scan("r", R5), _per_key(scan("s", S), "s.d", "avg", "s.e"),
                    [("r.b", "__sq0._k0")], op(">=", col("r.m"), col("__sq0._v")))
    _run(data, root)


@SETTINGS
@given(st.data())
def test_a_double_column_with_another_condition_on_the_outer_row(data):
    root = _compare(scan("r", R5), _per_key(scan("s", S), "s.d", "min", "s.e"),
                    [("r.b", "__sq0._k0")],
                    op("and", op(">", col("__sq0._v"), col("r.f")),
                       op("<>", col("r.c"), lit(1))))
    _run(data, root)


class _LeftProbed(ProbedWorld):
    PROBED = ("left",)  # the outer rows from the data layer, the subquery in memory


@SETTINGS
@given(st.data())
def test_outer_rows_probed_from_the_data_layer(data):
    # only the old contents of a probed side are asked for, and without a range search
    root = _compare(scan("r", R), _per_key(scan("s", S), "s.d", "avg", "s.e"),
                    [("r.b", "__sq0._k0")], op(">", col("r.c"), col("__sq0._v")))
    ch = HypChooser(data)
    world = _LeftProbed(qplan(root), parts_rs(ch), ("r", "s"))
    world.run(ch, steps=7)
    fused = operators_of(world.pipelines[0], KeyedFilterOp)
    assert fused and is_probed(fused[0].left) and not is_probed(fused[0].right)


def test_only_the_planner_shape_is_fused():
    outer = scan("r", R)
    per_key = _per_key(scan("s", S), "s.d", "sum", "s.c")
    pred = op(">", col("r.c"), col("__sq0._v"))
    found = keyed_filter_parts(_compare(outer, per_key, [("r.b", "__sq0._k0")], pred))
    assert found is not None and found.left_keys == ("r.b",)
    assert found.right_keys == ("__sq0._k0",)
    assert found.ranged is not None and found.ranged[0] == "r.c"
    # another condition reading the subquery's value: no range to search
    both = op("and", pred, op("<", col("r.a"), col("__sq0._v")))
    found = keyed_filter_parts(_compare(outer, per_key, [("r.b", "__sq0._k0")], both))
    assert found is not None and found.ranged is None
    # grouped by more than the join keys: several rows per key, a plain join
    wider = Project(Aggregate(scan("s", S), ("s.d", "s.e"), (AggCall("sum", "s.c", "_agg0"),)),
                    (NamedExpr("__sq0._k0", col("s.d")), NamedExpr("__sq0._v", col("_agg0"))))
    assert keyed_filter_parts(_compare(outer, wider, [("r.b", "__sq0._k0")], pred)) is None
    # a key computed by the projection is not traced to the grouping
    computed = Project(Aggregate(scan("s", S), ("s.d",), (AggCall("sum", "s.c", "_agg0"),)),
                       (NamedExpr("__sq0._k0", op("+", col("s.d"), lit(1))),
                        NamedExpr("__sq0._v", col("_agg0"))))
    assert keyed_filter_parts(_compare(outer, computed, [("r.b", "__sq0._k0")], pred)) is None
    # the projection keeps the subquery's value: every row changes with it
    keeps = Project(Select(Join(outer, per_key, op("=", col("r.b"), col("__sq0._k0"))), pred),
                    (NamedExpr("r.a", col("r.a")), NamedExpr("v", col("__sq0._v"))))
    assert keyed_filter_parts(keeps) is None
    # without equi keys: a theta join, not a keyed comparison
    theta = _compare(outer, per_key, [], pred, residual=op("<", col("r.b"), col("__sq0._k0")))
    assert keyed_filter_parts(theta) is None
    # a comparison that may raise under ANSI mode keeps its counting operators
    strict = op(">", Strict(op("*", col("r.c"), lit(2))), col("__sq0._v"))
    assert keyed_filter_parts(_compare(outer, per_key, [("r.b", "__sq0._k0")], strict)) is None


@SETTINGS
@given(st.lists(st.tuples(st.sampled_from([None, 1, 2, 3]),
                          st.sampled_from([None, "x", "y", ""])), max_size=70))
def test_key_groups_group_small_tables_as_arrow_does(rows):
    """A changed subquery key's rows are grouped in Python up to ``_SMALL_GROUPING`` rows
    and by Arrow past it: the same groups (NULLs one group), each row once."""
    import pyarrow as pa

    from imp_core.engine.operators import keyed_filter

    keys = pa.table({"k": [r[0] for r in rows], "s": [r[1] for r in rows]},
                    schema=pa.schema([("k", pa.int64()), ("s", pa.string())]))

    def groups(threshold: int) -> set[frozenset[int]]:
        before = keyed_filter._SMALL_GROUPING
        keyed_filter._SMALL_GROUPING = threshold
        try:
            members, sizes = keyed_filter._key_groups(keys)
        finally:
            keyed_filter._SMALL_GROUPING = before
        assert sorted(members.tolist()) == list(range(len(rows)))
        bounds = [0, *sizes.cumsum().tolist()]
        return {frozenset(members[a:b].tolist()) for a, b in zip(bounds, bounds[1:])}

    assert groups(1 << 30) == groups(-1)
    assert len(groups(1 << 30)) == len(set(rows))
