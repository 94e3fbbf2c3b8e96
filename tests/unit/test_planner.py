"""Tests of the SQL front end (``imp_core.sql``): plan shapes, naming conventions, refusals."""

from __future__ import annotations

import datetime as dt
import decimal
import doctest
import random

import pyarrow as pa
import pytest
from catalogs import tpch_catalog, workload_catalog, workload_queries

import imp_core.sql.planner
from imp_core.errors import (
    ImpError,
    NestingLimitError,
    SqlSyntaxError,
    UnknownColumnError,
    UnknownTableError,
    UnsupportedSqlError,
)
from imp_core.plan.expr import BinaryOp, Case, ColumnRef, FuncCall, InList, Like, Literal, UnaryOp
from imp_core.plan.nodes import (
    Aggregate,
    Distinct,
    Join,
    PlanNode,
    Project,
    QueryPlan,
    Scan,
    Select,
    SortKey,
    TopK,
)
from imp_core.sql import parse_sketch_header, plan_sql

CATALOG = workload_catalog()
QUERIES = workload_queries()


def plan(sql: str) -> QueryPlan:
    return plan_sql(sql, CATALOG)


def workload(name: str) -> QueryPlan:
    return plan(QUERIES[name])


def nodes(p: QueryPlan | PlanNode, kind: type) -> list:
    root = p.root if isinstance(p, QueryPlan) else p
    return [n for n in root.walk() if isinstance(n, kind)]


def only(p: QueryPlan | PlanNode, kind: type):
    found = nodes(p, kind)
    assert len(found) == 1, found
    return found[0]


def assert_well_formed(root: PlanNode) -> None:
    """Unique names everywhere; every expression refers only to its input's fields."""
    for node in root.walk():
        names = node.column_names
        assert len(set(names)) == len(names), (node, names)
        inputs = {n for child in node.children() for n in child.column_names}
        used: set[str] = set()
        if isinstance(node, Select):
            used = set(node.predicate.columns())
        elif isinstance(node, Project):
            used = {c for e in node.exprs for c in e.expr.columns()}
        elif isinstance(node, Join) and node.condition is not None:
            used = set(node.condition.columns())
        elif isinstance(node, Aggregate):
            used = set(node.group_by) | {a.arg for a in node.aggregates if a.arg}
        elif isinstance(node, TopK):
            used = {k.column for k in node.order}
        elif isinstance(node, Scan):
            assert node.source_columns and len(node.fields) == len(node.source_columns)
        assert used <= inputs, (node, used - inputs)


# -- the workload queries ------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(QUERIES))
def test_workload_query_plans_type_checks_and_is_deterministic(name):
    sql = QUERIES[name]
    first, second = plan_sql(sql, workload_catalog()), plan_sql(sql, workload_catalog())
    assert first == second and first.fingerprint() == second.fingerprint()
    assert_well_formed(first.root)
    assert first.schema and all(f.dtype is not None for f in first.schema)
    assert first.root.explain().count("\n") >= 1
    # the sketch table is read (its column need not be: the engine annotates whole rows)
    assert {t for t, _ in parse_sketch_header(sql)} <= first.root.tables()
    # tpchgen-cli writes string_view columns; the plans must type-check with them too
    assert plan_sql(sql, workload_catalog(pa.string_view())).schema


def test_q_having_2_groups_on_one_scan_with_having_above_the_aggregate():
    p = workload("synthetic/q_having_2")
    scan = only(p, Scan)
    assert scan.table == "t5000g" and scan.source_columns == ("a", "b", "c")
    agg = only(p, Aggregate)
    assert agg.group_by == ("t5000g.a",)
    assert [(a.func, a.arg) for a in agg.aggregates] == [("avg", "t5000g.b"), ("avg", "t5000g.c")]
    having = only(p, Select)
    assert having.input is agg
    assert having.predicate == BinaryOp("<", ColumnRef("_agg1"), Literal(1000, pa.int32()))
    assert isinstance(p.root, Project) and p.root.input is having
    assert p.root.column_names == ("a", "ab") and p.order_by == ()


def test_q_join_has_equi_keys_between_the_subquery_and_the_table():
    p = workload("synthetic/q_join")
    join = only(p, Join)
    assert join.equi_keys() == (("tt.a",), ("tjoinhelp.ttid",), None)
    rename = join.left
    assert isinstance(rename, Project) and rename.is_rename_only()
    assert rename.column_names == ("tt.a", "tt.b", "tt.c")
    assert only(p, Aggregate).group_by == ("tt.a",)


def test_q_joinsel_pushes_the_where_below_the_join():
    join = only(workload("synthetic/q_joinsel"), Join)
    assert isinstance(join.left, Select) and isinstance(join.left.input, Scan)
    assert join.left.predicate.columns() == {"t5000g.b"}
    assert isinstance(join.right, Scan) and join.right.source_columns == ("ttid",)


def test_q03_is_a_top_10_on_revenue_desc():
    p = workload("tpch/q03")
    topk = only(p, TopK)
    assert p.root is topk and topk.k == 10
    assert topk.order == (SortKey("revenue", True, None), SortKey("o_orderdate", False, None))
    assert topk.input.column_names == ("l_orderkey", "revenue", "o_orderdate", "o_shippriority")
    assert [j.equi_keys()[:2] for j in nodes(p, Join)] == [
        (("o.o_orderkey",), ("l.l_orderkey",)), (("c.c_custkey",), ("o.o_custkey",))]


def test_q04_has_a_distinct_subquery_and_presentation_order():
    p = workload("tpch/q04")
    distinct = only(p, Distinct)
    assert distinct.input.column_names == ("o_orderkey", "o_orderpriority")
    assert p.order_by == (SortKey("o_orderpriority"),)
    assert only(p, Aggregate).aggregates[0].func == "count_star"


def test_q06_selection_sits_directly_above_the_scan_with_decimal_literals():
    p = workload("tpch/q06")
    select = only(p, Select)
    assert isinstance(select.input, Scan)
    assert select.input.source_columns == ("l_quantity", "l_extendedprice", "l_discount",
                                           "l_shipdate")
    literals = [e for e in select.predicate.walk() if isinstance(e, Literal)]
    assert Literal(decimal.Decimal("0.05"), pa.decimal128(2, 2)) in literals
    assert Literal(dt.date(1994, 1, 1), pa.date32()) in literals
    agg = only(p, Aggregate)
    assert agg.group_by == () and isinstance(agg.input, Project)


def test_q05_splits_on_and_where_conjuncts_to_their_lowest_point():
    p = workload("tpch/q05")
    joins = nodes(p, Join)
    nation_join = next(j for j in joins if "nation.n_nationkey" in j.right.column_names)
    left, right, rest = nation_join.equi_keys()
    assert set(zip(left, right)) == {("supplier.s_nationkey", "nation.n_nationkey"),
                                     ("customer.c_nationkey", "nation.n_nationkey")}
    assert rest is None
    filtered = {s.input.table for s in nodes(p, Select) if isinstance(s.input, Scan)}
    assert filtered == {"region", "orders"}
    assert p.order_by == (SortKey("revenue", True),)


def test_q07_cross_table_disjunction_is_a_join_residual():
    p = workload("tpch/q07")
    n2_join = next(j for j in nodes(p, Join) if "n2.n_name" in j.right.column_names)
    _, _, residual = n2_join.equi_keys()
    assert residual is not None and residual.columns() == {"n1.n_name", "n2.n_name"}
    assert {s.table for s in nodes(p, Scan)} == {"supplier", "lineitem", "orders", "customer",
                                                 "nation"}


def test_q01_computes_each_aggregate_once_and_counts_rows():
    agg = only(workload("tpch/q01"), Aggregate)
    funcs = [(a.func, a.arg) for a in agg.aggregates]
    assert len(funcs) == len(set(funcs)) == 8
    assert ("count_star", None) in funcs
    assert agg.input.column_names[:2] == ("lineitem.l_returnflag", "lineitem.l_linestatus")
    assert "_a0" in agg.input.column_names


def test_q14_expression_over_aggregates_is_in_the_final_project():
    p = workload("tpch/q14")
    (named,) = p.root.exprs
    assert named.name == "promo_revenue"
    assert Literal(decimal.Decimal("100.00"), pa.decimal128(5, 2)) in list(named.expr.walk())
    assert named.expr.columns() == {"_agg0", "_agg1"}


def test_q10_top_20_and_q_topk_top_10():
    assert only(workload("tpch/q10"), TopK).k == 20
    topk = only(workload("synthetic/q_topk"), TopK)
    assert topk.k == 10 and topk.order == (SortKey("a"),)


# -- conventions -----------------------------------------------------------------------------


def test_scan_fields_use_the_alias_and_only_used_columns():
    p = plan("SELECT x.a FROM t5000g x JOIN t50g y ON x.a = y.b")
    left, right = (n for n in nodes(p, Scan))
    assert (left.source_columns, left.column_names) == (("a",), ("x.a",))
    assert (right.source_columns, right.column_names) == (("b",), ("y.b",))


def test_count_star_alone_reads_one_column():
    p = plan("SELECT count(*) AS n FROM lineitem")
    assert only(p, Scan).source_columns == ("l_orderkey",)
    assert p.root.column_names == ("n",)
    assert [f.dtype for f in p.schema] == [pa.int64()]


def test_subquery_outputs_are_renamed_and_pruned():
    p = plan("SELECT s.x FROM (SELECT a AS x, b, sum(c) AS total FROM t5000g GROUP BY a, b) s")
    rename = p.root.input
    assert isinstance(rename, Project) and rename.is_rename_only()
    assert rename.column_names == ("s.x",)
    agg = only(p, Aggregate)
    assert agg.group_by == ("t5000g.a", "t5000g.b") and agg.aggregates == ()


def test_output_names_alias_column_or_position():
    p = plan("SELECT t.a, b AS bee, a + 1, count(*) FROM t5000g t GROUP BY t.a, b")
    assert p.root.column_names == ("a", "bee", "_c2", "_c3")
    assert p.root.exprs[2].expr == BinaryOp("+", ColumnRef("t.a"), Literal(1, pa.int32()))


def test_select_star_expands_in_from_order():
    p = plan("SELECT * FROM region r, nation")
    assert p.root.column_names == ("r_regionkey", "r_name", "r_comment", "n_nationkey",
                                   "n_name", "n_regionkey", "n_comment")
    join = only(p, Join)
    assert join.condition is None


def test_group_expressions_and_identical_aggregates():
    p = plan("SELECT a + 1 AS k, sum(b) AS s, sum(b) * 2 AS s2 FROM t5000g "
             "GROUP BY a + 1 HAVING a + 1 > 3 AND sum(b) > 0")
    agg = only(p, Aggregate)
    assert agg.group_by == ("_g0",)
    assert [(a.func, a.arg, a.name) for a in agg.aggregates] == [("sum", "t5000g.b", "_agg0")]
    assert agg.input.exprs[0].expr == BinaryOp("+", ColumnRef("t5000g.a"), Literal(1, pa.int32()))
    having = only(p, Select)
    assert having.predicate.columns() == {"_g0", "_agg0"}
    assert [e.expr for e in p.root.exprs][2] == BinaryOp("*", ColumnRef("_agg0"),
                                                         Literal(2, pa.int32()))


def test_group_by_position_and_alias():
    by_position = plan("SELECT a AS key, sum(b) AS s FROM t5000g GROUP BY 1")
    by_alias = plan("SELECT a AS key, sum(b) AS s FROM t5000g GROUP BY key")
    assert only(by_position, Aggregate).group_by == ("t5000g.a",)
    assert by_position.root == by_alias.root


def test_having_and_order_by_may_use_select_aliases():
    p = plan("SELECT a, sum(b) AS s FROM t5000g GROUP BY a HAVING s > 10 ORDER BY s DESC LIMIT 3")
    assert only(p, Select).predicate == BinaryOp(">", ColumnRef("_agg0"), Literal(10, pa.int32()))
    assert only(p, TopK).order == (SortKey("s", True),)


def test_order_by_expression_gets_a_hidden_column_dropped_after_topk():
    p = plan("SELECT a, b FROM t5000g ORDER BY c + 1 DESC NULLS FIRST, 2 LIMIT 5")
    assert isinstance(p.root, Project) and p.root.is_rename_only()
    assert p.root.column_names == ("a", "b")
    topk = p.root.input
    assert isinstance(topk, TopK)
    assert topk.order == (SortKey("_o0", True, True), SortKey("b", False, None))
    assert topk.input.column_names == ("a", "b", "_o0")


def test_order_by_aggregate_not_in_select_list():
    p = plan("SELECT a FROM t5000g GROUP BY a ORDER BY max(c) NULLS LAST LIMIT 3")
    assert only(p, TopK).order == (SortKey("_o0", False, False),)
    assert [a.func for a in only(p, Aggregate).aggregates] == ["max"]


def test_order_by_without_limit_is_presentation_only():
    p = plan("SELECT a, b AS x FROM t5000g ORDER BY x DESC, 1")
    assert not nodes(p, TopK)
    assert p.order_by == (SortKey("x", True), SortKey("a"))


def test_select_distinct_is_above_the_final_project():
    p = plan("SELECT DISTINCT a, b FROM t5000g ORDER BY a LIMIT 4")
    assert isinstance(p.root, TopK) and isinstance(p.root.input, Distinct)
    assert isinstance(p.root.input.input, Project)


def test_where_conjuncts_go_to_scan_join_or_top():
    p = plan("SELECT t5000g.a FROM t5000g, t50g, tjoinhelp WHERE t5000g.a = t50g.a "
             "AND t50g.b > 3 AND ttid = t5000g.a AND t50g.c + aa > 1 AND 1 = 1")
    top = p.root.input
    assert isinstance(top, Select) and top.predicate.columns() == frozenset()
    outer = top.input
    assert isinstance(outer, Join)
    assert outer.equi_keys() == (("t5000g.a",), ("tjoinhelp.ttid",),
                                 BinaryOp(">", BinaryOp("+", ColumnRef("t50g.c"),
                                                        ColumnRef("tjoinhelp.aa")),
                                          Literal(1, pa.int32())))
    # join inputs carry only the columns read above them (t50g.b only filters t50g)
    assert isinstance(outer.left, Project)
    inner = outer.left.input
    assert inner.equi_keys() == (("t5000g.a",), ("t50g.a",), None)
    assert isinstance(inner.right, Project) and inner.right.column_names == ("t50g.a", "t50g.c")
    assert isinstance(inner.right.input, Select) and isinstance(inner.right.input.input, Scan)


def test_expressions():
    p = plan("""SELECT CASE a WHEN 1 THEN 'x' ELSE 'y' END AS c1,
                       CASE WHEN a > 1 THEN 1 END AS c2,
                       CAST(a AS DECIMAL(10, 2)) AS c3, CAST(f AS INT) AS c4,
                       CAST(a AS STRING) AS c5, CAST(b AS DOUBLE) AS c6, CAST(b AS BIGINT) c7,
                       -a AS c8, a % 3 AS c9, abs(b) AS c10, coalesce(c, 0) AS c11,
                       -1.5 AS c12, NULL AS c13, TRUE AS c14, 1e3 AS c15, a / 2 AS c16
                FROM t5000g
                WHERE a BETWEEN 1 AND 5 AND b NOT IN (1, -2) AND c IS NOT NULL
                  AND NOT (d IS NULL) AND (e <> 1 OR e != 2) AND NOT f >= 3""")
    exprs = {e.name: e.expr for e in p.root.exprs}
    a = ColumnRef("t5000g.a")
    assert exprs["c1"] == Case(((BinaryOp("=", a, Literal(1, pa.int32())),
                                 Literal("x", pa.string())),), Literal("y", pa.string()))
    assert exprs["c2"].default is None
    assert exprs["c3"].to == pa.decimal128(10, 2) and exprs["c4"].to == pa.int32()
    assert exprs["c8"] == UnaryOp("neg", a)
    assert exprs["c11"] == FuncCall("coalesce", (ColumnRef("t5000g.c"), Literal(0, pa.int32())))
    assert exprs["c12"] == Literal(decimal.Decimal("-1.5"), pa.decimal128(2, 1))
    assert exprs["c13"] == Literal(None, pa.null()) and exprs["c14"] == Literal(True, pa.bool_())
    assert exprs["c15"] == Literal(1000.0, pa.float64())
    types = {f.name: f.dtype for f in p.schema}
    assert types["c3"] == pa.decimal128(10, 2) and types["c5"] == pa.string()
    assert types["c6"] == pa.float64() and types["c16"] == pa.float64()
    parts = only(p, Select).predicate
    walked = list(parts.walk())
    assert BinaryOp(">=", a, Literal(1, pa.int32())) in walked  # BETWEEN
    assert InList(ColumnRef("t5000g.b"), (Literal(1, pa.int32()), Literal(-2, pa.int32())),
                  negated=True) in walked
    assert walked.count(UnaryOp("is_not_null", ColumnRef("t5000g.c"))) == 1
    assert UnaryOp("is_not_null", ColumnRef("t5000g.d")) in walked
    assert UnaryOp("not", BinaryOp(">=", ColumnRef("t5000g.f"), Literal(3, pa.int32()))) in walked


def test_dates_strings_and_functions():
    p = plan("""SELECT year(l_shipdate) AS y, month(l_shipdate) AS m, day(l_shipdate) AS d,
                       EXTRACT(YEAR FROM l_shipdate) AS y2, upper(l_comment) AS u,
                       lower(l_comment) AS lo, substring(l_comment, 1, 3) AS s
                FROM lineitem
                WHERE l_comment LIKE 'a%' AND l_comment NOT LIKE '%b'
                  AND l_shipdate >= DATE '1995-01-01'
                  AND CAST('1996-01-01' AS DATE) > l_shipdate""")
    exprs = {e.name: e.expr for e in p.root.exprs}
    shipdate = ColumnRef("lineitem.l_shipdate")
    assert exprs["y"] == exprs["y2"] == FuncCall("year", (shipdate,))
    assert exprs["s"] == FuncCall("substring", (ColumnRef("lineitem.l_comment"),
                                                Literal(1, pa.int32()), Literal(3, pa.int32())))
    walked = list(only(p, Select).predicate.walk())
    assert Like(ColumnRef("lineitem.l_comment"), "a%") in walked
    assert Like(ColumnRef("lineitem.l_comment"), "%b", negated=True) in walked
    assert Literal(dt.date(1996, 1, 1), pa.date32()) in walked
    assert [f.dtype for f in p.schema][:4] == [pa.int32()] * 4


def test_identifiers_are_case_insensitive():
    p = plan("SELECT T.A AS x FROM T5000G t WHERE t.B > 1")
    assert only(p, Scan).column_names == ("t.a", "t.b")


def test_count_of_a_constant_counts_rows():
    agg = only(plan("SELECT count(1) AS n FROM t5000g WHERE b > 2"), Aggregate)
    assert agg.aggregates[0].func == "count_star"


def test_explain_shows_every_node():
    text = workload("tpch/q03").root.explain()
    for word in ("TopK 10", "Aggregate", "Join ON", "Scan lineitem", "Select"):
        assert word in text


def test_planner_doctests():
    assert doctest.testmod(imp_core.sql.planner).failed == 0


# -- sketch header ---------------------------------------------------------------------------


def test_parse_sketch_header():
    assert parse_sketch_header(QUERIES["tpch/q01"]) == [("lineitem", "l_orderkey")]
    sql = "-- a comment\n--sketch: Orders.O_ORDERKEY ,lineitem.l_orderkey\nSELECT 1"
    assert parse_sketch_header(sql) == [("orders", "o_orderkey"), ("lineitem", "l_orderkey")]
    assert parse_sketch_header("SELECT a FROM t\n-- sketch: t.a") == []
    with pytest.raises(SqlSyntaxError) as info:
        parse_sketch_header("\n-- sketch: lineitem")
    assert info.value.line == 2 and info.value.column is not None


# -- refusals --------------------------------------------------------------------------------

UNSUPPORTED = [
    ("SELECT a FROM t5000g LEFT SEMI JOIN tjoinhelp ON a = ttid", "LEFT SEMI JOIN", (1, 22)),
    ("SELECT a FROM t5000g NATURAL JOIN tjoinhelp", "NATURAL JOIN", (1, 22)),
    ("SELECT t5000g.a FROM t5000g JOIN t50g USING (a)", "JOIN ... USING", None),
    ("SELECT a, lag(b) OVER (PARTITION BY a ORDER BY b) AS s FROM t5000g",
     "window function lag", (1, 11)),
    ("SELECT a FROM t5000g WHERE rank() OVER (ORDER BY b) < 2", "window function", (1, 28)),
    ("SELECT a FROM t5000g WINDOW w AS (PARTITION BY a)", "WINDOW clause", (1, 22)),
    ("SELECT a FROM t5000g\nUNION SELECT a FROM t50g ORDER BY a + 1 LIMIT 1",
     "ORDER BY expression of a UNION (only output columns by name or position)", (2, 35)),
    ("SELECT a FROM t5000g INTERSECT SELECT a FROM t50g LIMIT 3", "LIMIT without ORDER BY",
     (1, 51)),
    ("SELECT a FROM t5000g WHERE a IN (SELECT a FROM t50g EXCEPT SELECT a FROM t5000g)",
     "EXCEPT in a WHERE or HAVING subquery", (1, 53)),
    ("SELECT a FROM (SELECT a FROM t5000g UNION ALL SELECT a FROM t50g ORDER BY a LIMIT 2 "
     "OFFSET 1) u", "OFFSET on a UNION ALL", (1, 85)),
    ("SELECT a FROM t5000g UNION SELECT l_comment FROM lineitem",
     "UNION of incompatible column types", (1, 35)),
    ("SELECT a FROM t5000g t WHERE a NOT IN (SELECT ttid FROM tjoinhelp h WHERE h.bb = t.b)",
     "correlated NOT IN subquery", None),
    ("SELECT a FROM t5000g t WHERE b > (SELECT bb FROM tjoinhelp h WHERE h.ttid = t.a)",
     "correlated scalar subquery that may return several rows", None),
    ("SELECT a FROM t5000g WHERE b > (SELECT max(bb) FROM tjoinhelp WHERE ttid < a)",
     "correlated scalar subquery with a correlation that is not an equality", None),
    ("SELECT a FROM t5000g WHERE b > (SELECT count(*) + 1 FROM tjoinhelp WHERE bb > 3)",
     "scalar subquery whose value over no rows is not NULL", None),
    ("SELECT a FROM t5000g WHERE (SELECT max(bb) FROM tjoinhelp) IS NULL",
     "subquery in WHERE outside a comparison", None),
    ("SELECT a FROM t5000g t WHERE EXISTS (SELECT max(bb) FROM tjoinhelp h "
     "WHERE h.ttid = t.a)", "correlated EXISTS over an aggregating subquery", None),
    ("SELECT (SELECT max(ttid) FROM tjoinhelp h WHERE h.bb = t.b) AS m FROM t5000g t",
     "correlated subquery in the SELECT list", None),
    ("SELECT c, count(DISTINCT a), sum(b) FROM t5000g GROUP BY c",
     "aggregates with DISTINCT next to other aggregates", None),
    ("SELECT c, count(DISTINCT a), count(DISTINCT b) FROM t5000g GROUP BY c",
     "aggregates with DISTINCT next to other aggregates", None),
    ("INSERT INTO t5000g VALUES (1)", "INSERT statement", (1, 1)),
    ("UPDATE t5000g SET a = 1", "UPDATE statement", (1, 1)),
    ("DELETE FROM t5000g WHERE a = 1", "DELETE statement", (1, 1)),
    ("  DROP TABLE t5000g", "DROP statement", (1, 3)),
    ("CREATE TABLE x (a INT)", "CREATE statement", (1, 1)),
    ("WITH RECURSIVE x AS (SELECT a FROM t5000g) SELECT a FROM x", "recursive WITH", (1, 1)),
    ("SELECT a FROM t5000g WHERE a < b + INTERVAL '3' DAY", "INTERVAL literal", (1, 36)),
    ("SELECT foo(a) FROM t5000g", "unknown function foo", (1, 8)),
    ("SELECT initcap(l_comment) FROM lineitem", "unsupported function initcap", None),
    ("SELECT median(a) FROM t5000g", "aggregate function median", (1, 8)),
    ("SELECT a FROM t5000g\nLIMIT 5", "LIMIT without ORDER BY", (2, 1)),
    ("SELECT a FROM t5000g ORDER BY a LIMIT 5 OFFSET 2", "OFFSET", (1, 41)),
    ("SELECT a FROM t5000g WHERE sum(b) > 3", "aggregate function in WHERE", (1, 28)),
    ("SELECT sum(avg(b)) FROM t5000g", "nested aggregate function", (1, 12)),
    ("SELECT v.a FROM (SELECT a, a FROM t5000g) v", "duplicate output column name", (1, 28)),
    ("SELECT 1", "SELECT without FROM", (1, 1)),
    ("SELECT a FROM t5000g WHERE a IN (b, c)", "IN with non-literal values", (1, 34)),
    ("SELECT a FROM t5000g WHERE a LIKE 'x' ESCAPE '!'", "LIKE ... ESCAPE", None),
    ("SELECT a FROM t5000g WHERE l_comment ILIKE 'x'", "ILIKE", None),
    ("SELECT a FROM t5000g QUALIFY a > 1", "QUALIFY clause", (1, 22)),
    ("SELECT a FROM t5000g LATERAL VIEW explode(b) x AS y", "LATERAL VIEW", (1, 22)),
    ("SELECT a FROM t5000g TABLESAMPLE (10 PERCENT)", "TABLESAMPLE", (1, 22)),
    ("SELECT a FROM t5000g SORT BY a", "SORT BY", (1, 22)),
    ("SELECT DISTINCT a FROM t5000g ORDER BY b LIMIT 2",
     "ORDER BY expression not in the SELECT DISTINCT list", (1, 40)),
    ("SELECT a FROM t5000g ORDER BY b", "ORDER BY expression not in the SELECT list", (1, 31)),
    ("SELECT CAST(a AS ARRAY<INT>) FROM t5000g", "CAST to ARRAY<INT>", (1, 8)),
    ("SELECT a FROM range(10)", "table-valued function", (1, 15)),
    ("SELECT a FROM (VALUES (1)) v(a)", "VALUES list in FROM", (1, 16)),
    ("SELECT a FROM t5000g JOIN t5000g ON a = a", "duplicate table alias", (1, 27)),
    ("SELECT a FROM t5000g WHERE DATE 'soon' IS NULL", "invalid date32[day] literal", (1, 33)),
    ("SELECT a FROM t5000g; SELECT b FROM t5000g", "multiple statements", (1, 30)),
    ("SELECT a FROM t5000g WHERE a", "condition that is not boolean", (1, 28)),
    ("SELECT a + 'x' AS y FROM t5000g", "operation on these types", (1, 8)),
    ("SELECT avg(l_comment) FROM lineitem", "aggregate over this type", (1, 8)),
]


@pytest.mark.parametrize("sql,construct,position", UNSUPPORTED,
                         ids=[c for _, c, _ in UNSUPPORTED])
def test_unsupported_constructs_are_named_and_located(sql, construct, position):
    with pytest.raises(UnsupportedSqlError) as info:
        plan(sql)
    error = info.value
    assert construct in str(error) and construct in error.construct
    assert error.line is not None and error.column is not None
    if position is not None:
        assert (error.line, error.column) == position, str(error)


@pytest.mark.parametrize("sql,position", [
    ("SELECT a FROM", (1, 10)),  # the start of the token the parser stopped on
    ("SELECT a\nFROM t5000g WHERE (a > 1", (2, 24)),
    ("SELECT a FROM t5000g\nWHERE a = 'abc", (2, 11)),
    ("SELEC a FROM t5000g", (1, 9)),
    ("", (1, 1)),
])
def test_malformed_sql_is_a_syntax_error_with_a_position(sql, position):
    with pytest.raises(SqlSyntaxError) as info:
        plan(sql)
    assert (info.value.line, info.value.column) == position, str(info.value)
    assert "malformed SQL" in str(info.value)


def test_unknown_table_names_it_and_the_known_tables():
    with pytest.raises(UnknownTableError, match=r"'nope' at line 1, column 15.*lineitem"):
        plan("SELECT a FROM nope")


@pytest.mark.parametrize("sql,pattern", [
    ("SELECT zz FROM t5000g", r"unknown column 'zz' at line 1, column 8"),
    ("SELECT x.a FROM t5000g", r"unknown table or alias 'x'"),
    ("SELECT t.zz FROM t5000g t", r"unknown column t\.zz"),
    ("SELECT a FROM t5000g, t50g", r"ambiguous column 'a'.*t5000g, t50g"),
    ("SELECT a FROM t5000g JOIN tjoinhelp ON t50g.a = ttid JOIN t50g ON 1 = 1",
     r"unknown table or alias 't50g'"),
    ("SELECT a, b FROM t5000g GROUP BY a", r"'t5000g\.b' at line 1, column 11 must appear in "
                                           "GROUP BY"),
    ("SELECT a FROM t5000g ORDER BY 3 LIMIT 1", r"ORDER BY position 3"),
    ("SELECT q.c FROM (SELECT a, b FROM t5000g) q", r"unknown column q\.c"),
])
def test_unknown_or_ambiguous_columns(sql, pattern):
    with pytest.raises(UnknownColumnError, match=pattern):
        plan(sql)


def test_mangled_workload_queries_raise_only_domain_errors():
    """Random edits of the workload SQL: never a raw exception (sqlglot's or ours)."""
    rng = random.Random(7)
    words = ["SELECT", "FROM", "(", ")", ",", "JOIN", "ON", "GROUP BY", "*", "'", "sum(",
             "AND", "=", "1", "0.5", "DATE", "CASE", "END", "AS", "IN", "-", "/", ";", "UNION"]
    sqls = list(QUERIES.values())
    catalog = tpch_catalog() | CATALOG
    for _ in range(300):
        tokens = rng.choice(sqls).split(" ")
        index = rng.randrange(len(tokens))
        if rng.random() < 0.5:
            del tokens[index]
        else:
            tokens.insert(index, rng.choice(words))
        try:
            plan_sql(" ".join(tokens), catalog)
        except ImpError:
            pass


# -- selection push-down into subqueries -----------------------------------------------------


def test_outer_where_reaches_the_scan_inside_a_subquery():
    p = plan("SELECT s.x, y FROM (SELECT a + 1 AS x, b AS y FROM t5000g WHERE c > 1) s "
             "WHERE s.x > 2 AND y < 3")
    select = only(p, Select)
    assert isinstance(select.input, Scan)
    a_plus_1 = BinaryOp("+", ColumnRef("t5000g.a"), Literal(1, pa.int32()))
    assert select.predicate.columns() == {"t5000g.a", "t5000g.b", "t5000g.c"}
    assert BinaryOp(">", a_plus_1, Literal(2, pa.int32())) in list(select.predicate.walk())


def test_push_down_goes_below_group_keys_and_joins_but_not_aggregates_or_topk():
    p = plan("SELECT x.a FROM (SELECT t5000g.a, ttid, sum(c) AS s FROM t5000g "
             "JOIN tjoinhelp ON t5000g.a = ttid GROUP BY t5000g.a, ttid) x "
             "WHERE x.s > 5 AND x.a = 3 AND x.ttid < 9 AND x.a + x.ttid > 1")
    having = next(s for s in nodes(p, Select) if isinstance(s.input, Aggregate))
    assert having.predicate.columns() == {"_agg0"}
    join = only(p, Join)
    assert join.equi_keys()[2] is not None  # the two-sided conjunct joined the condition
    assert isinstance(join.left, Select) and isinstance(join.left.input, Scan)
    assert isinstance(join.right, Select) and isinstance(join.right.input, Scan)
    topk = plan("SELECT s.a FROM (SELECT a FROM t5000g ORDER BY a LIMIT 3) s WHERE s.a > 1")
    assert isinstance(only(topk, Select).input, TopK)


@pytest.mark.parametrize("sql", [
    "SELECT a FROM t5000g WHERE " + "(" * 3000 + "a = 1" + ")" * 3000,
    "SELECT a FROM t5000g WHERE a IN (" * 200 + "SELECT a FROM t5000g" + ")" * 200,
    "SELECT a FROM " + "(SELECT a FROM " * 300 + "t5000g" + ") x" * 300,
    "SELECT " + " + ".join(["a"] * 5000) + " AS x FROM t5000g",
])
def test_hostile_depth_is_refused_with_a_clear_error(sql):
    """SQL nested beyond what the parser and planner recurse through (issue 13: every
    request bounded) is refused as malformed, or as beyond the depth limit (issue 50),
    never a crash."""
    with pytest.raises((SqlSyntaxError, NestingLimitError), match="nested"):
        plan_sql(sql, workload_catalog())
