"""Property tests of the semi-join, anti-join (also NOT IN) and outer-join operators.

Each test builds a plan by hand over the small tables of ``diff_harness`` (nullable join
keys, duplicates, deletions that empty a key and re-insertions that revive it) and checks
after every random batch that the maintained result and sketch equal the reference
evaluator's over the current tables (``World.run`` asserts both).
"""

from __future__ import annotations

from diff_harness import HypChooser, World, col, lit, op, qplan, scan
from hypothesis import given, settings
from hypothesis import strategies as st
from test_operators_property import SCALE, parts_r, parts_rs

from imp_core.plan.nodes import (
    AggCall,
    Aggregate,
    NamedExpr,
    OuterJoin,
    Project,
    Select,
    SemiJoin,
)

SETTINGS = settings(max_examples=int(80 * SCALE), deadline=None)

R = ("a", "b", "c")
S = ("c", "d", "e")


def _run(data, root, partitions_fn=parts_rs, tables=("r", "s"), steps=7) -> World:
    ch = HypChooser(data)
    world = World(qplan(root), partitions_fn(ch), tables)
    world.run(ch, steps=steps)
    return world


@SETTINGS
@given(st.data())
def test_semi_join_exists(data):
    root = SemiJoin(scan("r", R), scan("s", S), op("=", col("r.b"), col("s.d")))
    _run(data, root)


@SETTINGS
@given(st.data())
def test_semi_join_with_residual(data):
    cond = op("and", op("=", col("r.b"), col("s.d")), op("<>", col("s.e"), col("r.c")))
    _run(data, SemiJoin(scan("r", R), scan("s", S), cond))


@SETTINGS
@given(st.data())
def test_anti_join_not_exists(data):
    cond = op("and", op("=", col("r.b"), col("s.d")), op("<", col("s.c"), col("r.a")))
    _run(data, SemiJoin(scan("r", R), scan("s", S), cond, anti=True))


@SETTINGS
@given(st.data())
def test_not_in_is_null_aware(data):
    # s.e is nullable: a NULL in the subquery makes NOT IN unknown for every left row
    right = Select(scan("s", S), op(">", col("s.c"), lit(2)))
    root = SemiJoin(scan("r", R), right, op("=", col("r.b"), col("s.e")), anti=True,
                    null_aware=True)
    _run(data, root)


@SETTINGS
@given(st.data())
def test_self_semi_and_anti_join(data):
    # TPC-H q21's shape: the same partitioned table on both sides of EXISTS / NOT EXISTS
    r1, r2, r3 = scan("r", R, alias="r1"), scan("r", R, alias="r2"), scan("r", R, alias="r3")
    exists = SemiJoin(r1, r2, op("and", op("=", col("r1.b"), col("r2.b")),
                                  op("<>", col("r2.c"), col("r1.c"))))
    root = SemiJoin(exists, r3, op("and", op("=", col("r1.b"), col("r3.b")),
                                   op(">", col("r3.a"), col("r1.a"))), anti=True)
    _run(data, root, parts_r, ("r",))


@SETTINGS
@given(st.data())
def test_uncorrelated_exists_without_keys(data):
    right = Select(scan("s", S), op(">", col("s.e"), lit(3)))
    _run(data, SemiJoin(scan("r", R), right, None))


@SETTINGS
@given(st.data())
def test_left_outer_join_under_count(data):
    # TPC-H q13's shape: count the partners per left row, zero for NULL-padded rows
    join = OuterJoin(scan("r", R), scan("s", S), op("and", op("=", col("r.b"), col("s.d")),
                                                     op(">", col("s.e"), lit(1))), "left")
    pre = Project(join, (NamedExpr("a", col("r.a")), NamedExpr("sc", col("s.c"))))
    agg = Aggregate(pre, ("a",), (AggCall("count", "sc", "n"),))
    hist = Aggregate(agg, ("n",), (AggCall("count_star", None, "k"),))
    _run(data, hist)


@SETTINGS
@given(st.data())
def test_full_outer_join(data):
    cond = op("=", col("r.c"), col("s.d"))
    _run(data, OuterJoin(scan("r", R), scan("s", S), cond, "full"))
