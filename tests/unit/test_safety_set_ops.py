"""Safety of sketch attributes under set operations (rule 10 of ``imp_core.safety``).

As for the joins (``test_safety_negation``): every refusal comes with a small instance
on which the refused sketch really changes the result, and every accepted plan is
checked on random small tables and random range partitions: the result over the sketch
instance equals the full result.
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from test_safety_negation import (
    BOUNDS,
    R_ROWS,
    SETTINGS,
    T_ROWS,
    agg,
    col,
    full_and_on_sketch,
    keep,
    lit,
    op,
    scan,
    tables,
    verdict,
)

from imp_core.plan.nodes import NamedExpr, PlanNode, Project, Select, SetOp, SortKey, TopK


def cols(inp: PlanNode, **named: str) -> Project:
    """``inp`` projected to ``name = column`` pairs, in order."""
    return Project(inp, tuple(NamedExpr(n, col(c)) for n, c in named.items()))


def r_side(alias: str = "r", where=None, **named: str) -> Project:
    inp = scan("r", alias)
    return cols(inp if where is None else Select(inp, where), **named)


def t_side(**named: str) -> Project:
    return cols(scan("t"), **named)


def _except_other_side(distinct: bool) -> PlanNode:
    """SELECT k FROM t EXCEPT SELECT b FROM r"""
    return SetOp(t_side(x="t.k"), r_side(x="r.b"), "except", distinct)


def _except_untied() -> PlanNode:
    """SELECT b FROM r x EXCEPT SELECT b FROM r y WHERE y.a > 2: the attribute a is not
    a compared column, so equal rows may lie in other fragments."""
    return SetOp(r_side("x", x="x.b"), r_side("y", op(">", col("y.a"), lit(2)), x="y.b"),
                 "except", True)


def _intersect_partial_sum() -> PlanNode:
    """SELECT sum(c) FROM r GROUP BY b INTERSECT SELECT v FROM t"""
    sums = keep(agg(scan("r"), ("r.b",), ("sum", "r.c", "s")), "s")
    return SetOp(sums, t_side(s="t.v"), "intersect", True)


def _grouped_union(right: PlanNode) -> PlanNode:
    """SELECT x, count(*) FROM (SELECT a AS x FROM r UNION ALL <right>) GROUP BY x
    HAVING count(*) < 2: a group of r rows and rows without r."""
    union = SetOp(r_side(x="r.a"), right, "union", False)
    return Select(agg(union, ("x",), ("count_star", None, "n")), op("<", col("n"), lit(2)))


REFUSALS = {
    # name: (plan, attribute, words of the reason, r rows, t rows, partition bounds)
    "except_reads_the_table_on_its_right": (
        _except_other_side(True), "r.a", ["right of the EXCEPT", "no output column"],
        [(1, 1, 0)], [(1, 0, 0), (2, 0, 0)], [5]),
    "except_all_reads_the_table_on_its_right": (
        _except_other_side(False), "r.a", ["right of the EXCEPT ALL"],
        [(1, 1, 0)], [(1, 0, 0), (1, 0, 0)], [5]),
    "except_not_tied_to_the_attribute": (
        _except_untied(), "r.a", ["r is read on the right of the EXCEPT"],
        [(1, 5, 0), (3, 5, 0), (1, 6, 0)], [], [2]),
    "group_of_a_union_with_rows_without_the_table": (
        _grouped_union(t_side(x="t.k")), "r.a", ["count(*) < 2", "not monotone"],
        [(1, 0, 0)], [(1, 0, 0)], [5]),
    "intersect_on_a_partial_sum": (
        _intersect_partial_sum(), "r.a", ["INTERSECT compares whole rows", "sum(r.c)"],
        [(1, 1, 2), (2, 1, 3), (1, 2, 7)], [(0, 7, 0), (0, 2, 0)], [2]),
}


@pytest.mark.parametrize("name", sorted(REFUSALS))
def test_refusal_is_needed(name):
    plan, attr, words, r, t, bounds = REFUSALS[name]
    v = verdict(plan, attr)
    assert not v.safe, v.reason
    for w in words:
        assert w in v.reason, (w, v.reason)
    full, on_sketch = full_and_on_sketch(plan, tables(r, t), attr, bounds)
    assert full != on_sketch


def _tied(kind: str, distinct: bool) -> PlanNode:
    """SELECT a, b FROM r x <op> SELECT a, b FROM r y WHERE y.c > 2"""
    return SetOp(r_side("x", x="x.a", y="x.b"),
                 r_side("y", op(">", col("y.c"), lit(2)), x="y.a", y="y.b"), kind, distinct)


def _mixed(kind: str, distinct: bool) -> PlanNode:
    """SELECT b, c FROM r <op> SELECT k, v FROM t"""
    return SetOp(r_side(x="r.b", y="r.c"), t_side(tk="t.k", tv="t.v"), kind, distinct)


ACCEPTED = {
    # name: (plan, attribute, words of the reason)
    "union_all_of_two_tables": (_mixed("union", False), "r.a", []),
    "union_of_two_tables": (_mixed("union", True), "r.b", []),
    "union_of_the_table_with_itself": (_tied("union", True), "r.c", []),
    "intersect_of_two_tables": (_mixed("intersect", True), "r.a", []),
    "intersect_all_of_the_table_with_itself": (_tied("intersect", False), "r.c", []),
    "except_with_the_table_on_the_left_only": (_mixed("except", True), "r.a", []),
    "except_all_with_the_table_on_the_left_only": (_mixed("except", False), "r.c", []),
    "except_tied_to_the_attribute": (_tied("except", True), "r.a", ["equal rows share"]),
    "except_all_tied_to_the_attribute": (_tied("except", False), "r.a", ["equal rows share"]),
    "except_tied_through_another_column": (_tied("except", True), "r.b", ["equal rows share"]),
    "top_k_over_a_union": (
        TopK(_mixed("union", False), (SortKey("x", True), SortKey("y")), 2), "r.a",
        ["top-k"]),
    "group_of_a_union_whose_rows_all_read_the_table": (
        _grouped_union(r_side("y", x="y.a")), "r.a", ["determines the group key"]),
    "aggregation_over_an_intersect_grouped_on_the_attribute": (
        Select(agg(_tied("intersect", False), ("x",), ("count_star", None, "n")),
               op(">", col("n"), lit(1))), "r.a", ["determines the group key"]),
}


@pytest.mark.parametrize("name", sorted(ACCEPTED))
def test_accepted_plan_is_safe(name):
    plan, attr, words = ACCEPTED[name]
    v = verdict(plan, attr)
    assert v.safe, v.reason
    for w in words:
        assert w in v.reason, (w, v.reason)


@pytest.mark.parametrize("name", sorted(ACCEPTED))
@SETTINGS
@given(r=R_ROWS, t=T_ROWS, bounds=BOUNDS)
def test_accepted_plan_gives_the_same_result_on_its_sketch(name, r, t, bounds):
    plan, attr, _ = ACCEPTED[name]
    full, on_sketch = full_and_on_sketch(plan, tables(r, t), attr, bounds)
    assert on_sketch == full


# -- random plans: whatever is judged safe gives the same result on its sketch -------------

def _operand(draw, table: str, alias: str, width: int) -> PlanNode:
    columns = {"r": ("a", "b", "c"), "t": ("k", "v", "g")}[table]
    picked = [draw(st.sampled_from(columns)) for _ in range(width)]
    node: PlanNode = scan(table, alias)
    if draw(st.booleans()):
        node = Select(node, op(draw(st.sampled_from(("<", ">", "="))),
                               col(f"{alias}.{draw(st.sampled_from(columns))}"),
                               lit(draw(st.integers(0, 4)))))
    if draw(st.integers(0, 3)) == 0:  # a grouped operand: its key and an aggregate
        key = f"{alias}.{picked[0]}"
        func = draw(st.sampled_from(("count_star", "sum", "max")))
        grouped = agg(node, (key,), (func, None if func == "count_star" else
                                     f"{alias}.{picked[-1]}", "z"))
        outputs = [key, "z"] if width == 2 else [draw(st.sampled_from((key, "z")))]
        return Project(grouped, tuple(NamedExpr(f"o{i}", col(n))
                                      for i, n in enumerate(outputs)))
    return Project(node, tuple(NamedExpr(f"o{i}", col(f"{alias}.{c}"))
                               for i, c in enumerate(picked)))


@st.composite
def _set_plans(draw) -> PlanNode:
    width = draw(st.integers(1, 2))
    tables_ = [draw(st.sampled_from(("r", "t"))) for _ in range(3)]
    ops = [(draw(st.sampled_from(("union", "intersect", "except"))), draw(st.booleans()))
           for _ in range(2)]
    node: PlanNode = SetOp(_operand(draw, tables_[0], "x", width),
                           _operand(draw, tables_[1], "y", width), *ops[0])
    if draw(st.booleans()):
        node = SetOp(node, _operand(draw, tables_[2], "w", width), *ops[1])
    top = draw(st.integers(0, 3))
    if top == 1:
        node = Select(agg(node, ("o0",), ("count_star", None, "n")),
                      op(draw(st.sampled_from(("<", ">"))), col("n"), lit(1)))
    elif top == 2:
        node = TopK(node, (SortKey("o0", draw(st.booleans())),), 2)
    elif top == 3:
        node = Select(node, op(">", col("o0"), lit(1)))
    return node


@SETTINGS
@given(plan=_set_plans(), attr=st.sampled_from(("r.a", "r.b", "r.c")), r=R_ROWS, t=T_ROWS,
       bounds=BOUNDS)
def test_random_plans_judged_safe_give_the_same_result_on_their_sketch(plan, attr, r, t,
                                                                       bounds):
    if "r" not in plan.tables():
        return
    if not verdict(plan, attr).safe:
        return
    full, on_sketch = full_and_on_sketch(plan, tables(r, t), attr, bounds)
    assert on_sketch == full, verdict(plan, attr).reason
