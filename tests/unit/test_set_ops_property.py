"""Property tests of the set operations (UNION [ALL], INTERSECT [ALL], EXCEPT [ALL]).

Each test builds a plan by hand over the small tables of ``diff_harness`` (nullable
columns with few values, so rows repeat, NULLs among them, and inputs gain and lose
equal rows) and checks after every random batch of inserts and deletes that the
maintained result and sketch equal the reference evaluator's over the current tables
(``World.run`` asserts both).
"""

from __future__ import annotations

import numpy as np
import pytest
from diff_harness import HypChooser, RandChooser, World, col, lit, op, qplan, scan
from hypothesis import given, settings
from hypothesis import strategies as st
from test_operators_property import SCALE, parts_r, parts_rs

from imp_core.engine.operators.set_ops import SetOpOp, UnionAllOp, multiplicities
from imp_core.plan.nodes import (
    SET_KINDS,
    AggCall,
    Aggregate,
    NamedExpr,
    Project,
    Select,
    SetOp,
    SortKey,
    TopK,
    set_multiplicity,
)

SETTINGS = settings(max_examples=int(40 * SCALE), deadline=None)
KINDS = [(k, d) for k in SET_KINDS for d in (False, True)]
IDS = [f"{k}-{'distinct' if d else 'all'}" for k, d in KINDS]

R = ("a", "b", "c")
S = ("c", "d", "e")


def _r_side(alias: str = "r") -> Project:
    return Project(scan("r", R, alias=alias), (NamedExpr("x", col(f"{alias}.b")),
                                               NamedExpr("y", col(f"{alias}.c"))))


def _s_side() -> Project:
    # other names than the left's: the output takes the left's
    return Project(scan("s", S), (NamedExpr("sx", col("s.d")), NamedExpr("sy", col("s.e"))))


def _run(data, root, partitions_fn=parts_rs, tables=("r", "s"), steps=7) -> World:
    ch = HypChooser(data)
    world = World(qplan(root), partitions_fn(ch), tables)
    world.run(ch, steps=steps)
    return world


def test_multiplicity_rule():
    for kind, distinct in KINDS:
        ls, rs = np.repeat(np.arange(4), 4), np.tile(np.arange(4), 4)
        want = [set_multiplicity(kind, distinct, a, b) for a, b in zip(ls, rs)]
        assert multiplicities(kind, distinct, ls, rs).tolist() == want
    assert set_multiplicity("except", False, 1, 3) == 0
    assert set_multiplicity("except", True, 2, 0) == 1
    assert set_multiplicity("intersect", False, 2, 5) == 2


@pytest.mark.parametrize(("kind", "distinct"), KINDS, ids=IDS)
@SETTINGS
@given(data=st.data())
def test_set_operation_of_two_tables(kind, distinct, data):
    _run(data, SetOp(_r_side(), _s_side(), kind, distinct))


@pytest.mark.parametrize(("kind", "distinct"), KINDS, ids=IDS)
@SETTINGS
@given(data=st.data())
def test_set_operation_of_one_table_with_itself(kind, distinct, data):
    # both inputs read the partitioned table: a right row in the same fragment as the
    # left ones, or in another
    right = Select(_r_side("r2"), op(">", col("y"), lit(1)))
    _run(data, SetOp(_r_side("r1"), right, kind, distinct), parts_r, ("r",))


@pytest.mark.parametrize(("kind", "distinct"), KINDS, ids=IDS)
@SETTINGS
@given(data=st.data())
def test_set_operation_under_aggregation_and_topk(kind, distinct, data):
    setop = SetOp(_r_side(), _s_side(), kind, distinct)
    counted = Aggregate(setop, ("x",), (AggCall("count_star", None, "n"),
                                        AggCall("max", "y", "hi")))
    if data.draw(st.booleans()):
        root = TopK(counted, (SortKey("n", True), SortKey("x")), 2)
    else:
        root = TopK(setop, (SortKey("x", True, False), SortKey("y")), 3)
    _run(data, root)


@SETTINGS
@given(data=st.data())
def test_nested_set_operations(data):
    # (r UNION ALL s) EXCEPT ALL (r INTERSECT s) over one partitioned table each
    kinds = data.draw(st.lists(st.sampled_from(KINDS), min_size=3, max_size=3))
    a = SetOp(_r_side(), _s_side(), *kinds[0])
    b = SetOp(_r_side("r2"), _s_side(), *kinds[1])
    _run(data, SetOp(a, b, *kinds[2]))


@pytest.mark.parametrize(("kind", "distinct"), KINDS, ids=IDS)
def test_set_operations_seeded(kind, distinct):
    for seed in range(4):
        ch = RandChooser(seed)
        world = World(qplan(SetOp(_r_side(), _s_side(), kind, distinct)), parts_rs(ch, True),
                      ("r", "s"))
        world.run(ch, steps=10)
        (q,) = world.pipelines
        ops = [o for o in q.operators if isinstance(o, (SetOpOp, UnionAllOp))]
        linear = (kind, distinct) == ("union", False)
        assert len(ops) == 1 and isinstance(ops[0], UnionAllOp if linear else SetOpOp)


def test_membership_flips_and_provenance():
    """Hand-made batches that flip INTERSECT / EXCEPT membership of one row, with its
    equal rows in several fragments: the annotation is the union of the contributing
    rows' fragments (of the left input only for EXCEPT)."""
    for kind, distinct in KINDS:
        ch = RandChooser(0)
        world = World(qplan(SetOp(_r_side(), _s_side(), kind, distinct)), parts_rs(ch, True),
                      ("r", "s"))
        r1, r2 = (1, 2, 3, None, None), (7, 2, 3, 0.5, None)  # equal (x, y), two fragments
        s1, s2 = (4, 2, 3), (5, None, None)
        world.apply({"r": ([r1, r2], [1, 1]), "s": ([s2], [1])})
        world.apply({"s": ([s1], [1])})  # INTERSECT gains (2, 3), EXCEPT loses it
        world.apply({"r": ([(2, None, None, None, None)], [1])})  # NULLs equal s2's
        world.apply({"s": ([s1], [1])})  # a second copy on the right: EXCEPT ALL 2 - 2
        world.apply({"s": ([s1, s1], [-1, -1]), "r": ([r1], [-1])})
        world.apply({"r": ([r2], [-1])})
