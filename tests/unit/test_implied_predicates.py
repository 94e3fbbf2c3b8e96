"""The ORs a join condition implies for one of its inputs (``implied_by``): each input of
an inner join is also filtered by them, the original condition stays in the join, and
nothing that may raise under ANSI mode is moved below it. The results are checked
against DuckDB in ``test_sql_subqueries`` (``or_across_join``)."""

from __future__ import annotations

import pyarrow as pa

from imp_core.plan.expr import BinaryOp, ColumnRef, Literal
from imp_core.plan.nodes import Join, Scan, Select
from imp_core.sql.planner import plan_sql
from imp_core.sql.pushdown import implied_by

CATALOG = {"r": pa.schema([("a", pa.int64()), ("b", pa.int64()), ("c", pa.int64())]),
           "s": pa.schema([("d", pa.int64()), ("e", pa.int64())])}


def _selects(sql: str) -> dict[str, str]:
    """Table -> the text of the selection directly above its scan."""
    root = plan_sql(sql, CATALOG).root
    return {n.input.table: str(n.predicate) for n in root.walk()
            if isinstance(n, Select) and isinstance(n.input, Scan)}


def _join_conditions(sql: str) -> list[str]:
    return [str(n.condition) for n in plan_sql(sql, CATALOG).root.walk()
            if isinstance(n, Join)]


def test_each_side_gets_the_or_it_implies() -> None:
    sql = ("SELECT r.a FROM r, s WHERE r.b = s.d AND ((r.c = 1 AND s.e = 2) "
           "OR (r.c > 5 AND s.e IS NULL))")
    selects = _selects(sql)
    assert set(selects) == {"r", "s"}
    assert "r.c" in selects["r"] and " or " in selects["r"] and "s.e" not in selects["r"]
    assert "s.e" in selects["s"] and " or " in selects["s"] and "r.c" not in selects["s"]
    # the whole condition still decides which pairs join
    (condition,) = _join_conditions(sql)
    assert "r.c" in condition and "s.e" in condition


def test_no_side_filter_when_a_branch_says_nothing_about_it() -> None:
    # the second branch holds no condition on s alone: any s row may join
    sql = "SELECT r.a FROM r, s WHERE r.b = s.d AND ((r.c = 1 AND s.e = 2) OR r.c > 5)"
    selects = _selects(sql)
    assert "s" not in selects and "r" in selects


def test_nothing_that_may_raise_moves_below_the_join() -> None:
    # under ANSI mode r.b / r.c raises on r.c = 0; such a row without a partner in s
    # must not be evaluated, so only the comparison of r.a is implied for r
    sql = ("SET spark.sql.ansi.enabled = true; SELECT r.a FROM r, s WHERE r.b = s.d AND "
           "((r.b / r.c > 1 AND r.a = 1 AND s.e = 2) OR (r.a = 2 AND s.e = 3))")
    selects = _selects(sql)
    assert "/" not in selects["r"] and "r.a" in selects["r"]


def test_implied_by_follows_nested_ors() -> None:
    def eq(name: str, value: int) -> BinaryOp:
        return BinaryOp("=", ColumnRef(name), Literal(value, pa.int64()))

    both = BinaryOp("or",
                    BinaryOp("and", eq("x", 1), BinaryOp("or", eq("y", 1), eq("y", 2))),
                    BinaryOp("and", eq("x", 2), eq("y", 3)))
    on_y = implied_by(both, frozenset({"y"}))
    assert on_y is not None and on_y.columns() == {"y"}
    assert str(on_y).count(" or ") == 2  # (y = 1 or y = 2) or y = 3
    assert implied_by(eq("y", 1), frozenset({"y"})) is None  # not an OR: nothing to add
