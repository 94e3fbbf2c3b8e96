"""The normalizing SQL front end (``imp_core.sql.normalize``, ``imp_core.sql.folding``):
constant folding, lenient date literals, WITH and view inlining, OR factoring, and the
22 standard TPC-H queries as written (suite ``tpch22``)."""

from __future__ import annotations

import datetime as dt
from collections import Counter
from decimal import Decimal

import duck
import pyarrow as pa
import pytest
import sqlglot
from sqlglot import exp

from imp_core.errors import (
    NotReadOnlyError,
    SqlSyntaxError,
    UnknownColumnError,
    UnknownTableError,
    UnsupportedSqlError,
)
from imp_core.oracle.reference import reference_evaluate
from imp_core.plan.expr import InList, Literal
from imp_core.plan.nodes import Join, Project, QueryPlan, Select
from imp_core.sketch.partition import PartitionSet
from imp_core.sql import parse_sketch_header, plan_sql
from imp_core.sql.normalize import normalize_statements
from imp_core.sql.planner import _parse_statements
from imp_core.sql.readonly import check_read_only_select
from imp_core.sql.text import SqlText
from imp_core.workloads import schemas
from imp_core.workloads.queries import DEFAULT_SUITES, SUITES, list_queries, load_query

T = pa.schema([("a", pa.int64()), ("b", pa.int64()), ("d", pa.date32()),
               ("x", pa.decimal128(15, 2))])
U = pa.schema([("k", pa.int64()), ("v", pa.int64())])
CATALOG = {"t": T, "u": U}


def plan(sql: str) -> QueryPlan:
    return plan_sql(sql, CATALOG)


def same_plan(sql: str, expected: str) -> None:
    got, want = plan(sql), plan(expected)
    assert got.root == want.root, f"\n{got.root.explain()}\n!=\n{want.root.explain()}"
    assert got.order_by == want.order_by


def normalized(sql: str) -> exp.Expression:
    text = SqlText(sql)
    return normalize_statements(_parse_statements(text), text)


def normalized_sql(sql: str) -> str:
    return normalized(sql).sql(dialect="spark")


def spark_sql(sql: str) -> str:
    """``sql`` as sqlglot prints it, for comparisons that ignore spacing and case."""
    return sqlglot.parse_one(sql, read="spark").sql(dialect="spark")


def folded(expression: str) -> object:
    """The value ``expression`` folds to (as the planner's literal)."""
    root = plan(f"SELECT {expression} AS v FROM t").root
    assert isinstance(root, Project)
    value = root.exprs[0].expr
    assert isinstance(value, Literal), root.explain()
    return value.value


def position(error: Exception) -> tuple[int | None, int | None]:
    return error.line, error.column  # type: ignore[attr-defined]


# -- 1. constant folding ----------------------------------------------------------------------

DATES = [
    ("date '1998-12-01' - interval '90' day", dt.date(1998, 9, 2)),
    ("date '1998-12-01' - interval '68 days'", dt.date(1998, 9, 24)),
    ("date '1994-01-01' + interval '1' year", dt.date(1995, 1, 1)),
    ("date '1993-10-01' + interval '3' month", dt.date(1994, 1, 1)),
    ("date '1995-01-01' + interval '2' weeks", dt.date(1995, 1, 15)),
    ("interval '3' month + date '1993-10-01'", dt.date(1994, 1, 1)),
    # month-end clamping, leap years
    ("date '2000-01-31' + interval '1' month", dt.date(2000, 2, 29)),
    ("date '1900-01-31' + interval '1' month", dt.date(1900, 2, 28)),
    ("date '2001-01-31' + interval '1' month", dt.date(2001, 2, 28)),
    ("date '2000-02-29' + interval '1' year", dt.date(2001, 2, 28)),
    ("date '2000-02-29' + interval '4' year", dt.date(2004, 2, 29)),
    ("date '2000-03-31' - interval '1' month", dt.date(2000, 2, 29)),
    ("date '2000-02-29' + interval '1' month", dt.date(2000, 3, 29)),
    # negative intervals
    ("date '2000-03-31' + interval '-1' month", dt.date(2000, 2, 29)),
    ("date '2000-03-01' - interval '-1' day", dt.date(2000, 3, 2)),
    ("date '2000-03-01' + interval -1 day", dt.date(2000, 2, 29)),
    # chains and functions
    ("date '1994-01-01' + interval '1' year - interval '1' day", dt.date(1994, 12, 31)),
    ("date_add(date '2000-02-28', 2)", dt.date(2000, 3, 1)),
    ("date_sub(date '2000-03-01', 1)", dt.date(2000, 2, 29)),
    ("date_add('1995-01-31', 1)", dt.date(1995, 2, 1)),
    ("add_months(date '2000-01-31', 1)", dt.date(2000, 2, 29)),
    ("add_months(date '2000-03-31', -13)", dt.date(1999, 2, 28)),
    # lenient date literals
    ("date '1995-9-1'", dt.date(1995, 9, 1)),
    ("date '1995-9-1' + interval '1' day", dt.date(1995, 9, 2)),
    ("date '1995'", dt.date(1995, 1, 1)),
    ("date '1996-2'", dt.date(1996, 2, 1)),
    ("cast('2000-1-2' as date)", dt.date(2000, 1, 2)),
]


@pytest.mark.parametrize("expression,value", DATES, ids=[d for d, _ in DATES])
def test_date_arithmetic_folds_to_a_date_literal(expression, value):
    assert folded(expression) == value


NUMBERS = [
    ("2000 + 1", 2001),
    ("8 + 10", 18),
    ("0.06 - 0.01", Decimal("0.05")),
    ("0.06 + 0.01", Decimal("0.07")),
    ("0.1 * 3", Decimal("0.3")),
    ("(1 + 2) * -3", -9),
    ("100.00 * 2", Decimal("200.00")),
]


@pytest.mark.parametrize("expression,value", NUMBERS, ids=[n for n, _ in NUMBERS])
def test_literal_arithmetic_folds_exactly(expression, value):
    got = folded(expression)
    assert got == value and type(got) is type(value)


def test_folding_inside_in_lists_and_comparisons():
    select = plan("SELECT a FROM t WHERE a IN (2000 + 1, 3) AND x BETWEEN 0.06 - 0.01 "
                  "AND 0.06 + 0.01").root.input
    assert isinstance(select, Select)
    shown = select.explain()
    assert "IN (2001, 3)" in shown and "Decimal('0.05')" in shown
    assert "Decimal('0.07')" in shown and "0.049" not in shown
    in_list = [e for e in _exprs(select.predicate) if isinstance(e, InList)]
    assert [v.value for v in in_list[0].values] == [2001, 3]


def _exprs(expr):
    yield expr
    for name in ("left", "right", "operand"):
        child = getattr(expr, name, None)
        if child is not None:
            yield from _exprs(child)


@pytest.mark.parametrize("sql", [
    "SELECT a FROM t WHERE a = 7 / 2",  # Spark's integer division semantics stay the binder's
    "SELECT a + 1 AS y FROM t",  # a column: nothing to fold
    "SELECT a FROM t WHERE d = date '1995-01-01'",  # a literal alone: nothing to compute
])
def test_what_is_not_folded_is_planned_as_written(sql):
    assert normalized_sql(sql) == spark_sql(sql)


def _dates_table() -> pa.Table:
    days = [dt.date(2000, 1, 31), dt.date(2000, 2, 28), dt.date(2000, 2, 29),
            dt.date(2000, 3, 1), dt.date(2000, 3, 31), dt.date(1998, 9, 2),
            dt.date(1998, 9, 3), dt.date(1994, 12, 31), dt.date(1995, 1, 1), None]
    n = len(days)
    return pa.table({
        "a": pa.array(range(n), pa.int64()),
        "b": pa.array([i % 3 if i != 4 else None for i in range(n)], pa.int64()),
        "d": pa.array(days, pa.date32()),
        "x": pa.array([Decimal(f"0.0{i}") for i in range(n)], pa.decimal128(15, 2)),
    })


def _parts_tables() -> dict[str, pa.Table]:
    return {"t": _dates_table(),
            "u": pa.table({"k": pa.array([0, 1, 2, 3, 3, None, 5], pa.int64()),
                           "v": pa.array([1, 2, None, 1, 2, 2, 3], pa.int64())})}


def _rows_by_us(sql: str, tables: dict[str, pa.Table]) -> Counter:
    bag = reference_evaluate(plan(sql).root, tables, PartitionSet(()))
    out: Counter = Counter()
    for (row, _), mult in bag.items.items():
        out[row] += mult
    return +out


def _rows_by_duckdb(sql: str, tables: dict[str, pa.Table]) -> Counter:
    con = duck.connection()
    for name, table in tables.items():
        con.register(name, table)
    return Counter(con.execute(sql).fetchall())


AGAINST_DUCKDB = [
    "SELECT a FROM t WHERE d <= date '2000-03-31' - interval '1' month",
    "SELECT a FROM t WHERE d < date '2000-01-31' + interval '1' month",
    "SELECT a FROM t WHERE d <= date '2000-03-31' + interval '-1' month",
    "SELECT a FROM t WHERE d >= date '1998-12-01' - interval '90' day",
    "SELECT a FROM t WHERE d >= date '1998-12-01' - interval '90 days'",
    "SELECT a FROM t WHERE d < date '1994-01-01' + interval '1' year "
    "AND x BETWEEN 0.06 - 0.01 AND 0.06 + 0.01",
    "SELECT a FROM t WHERE a IN (2000 - 1999, 3 * 2) OR b = 1 + 1",
    # Q19's shape: a join key repeated in every branch, NULLs in both tables
    "SELECT t.a, u.v FROM t, u WHERE (t.b = u.k AND u.v = 1 AND t.a < 4) "
    "OR (u.k = t.b AND u.v = 2) OR (t.b = u.k AND t.a + 0 > 7 AND u.v >= 1)",
    "SELECT t.a FROM t, u WHERE (t.b = u.k AND u.v = 1) OR (t.a = u.k AND u.v = 2)",
    "WITH r (k2, w) AS (SELECT k, v FROM u WHERE v > 1) "
    "SELECT r1.k2, r2.w FROM r AS r1 JOIN r AS r2 ON r1.k2 = r2.k2",
]


@pytest.mark.parametrize("sql", AGAINST_DUCKDB)
def test_results_equal_duckdbs(sql):
    tables = _parts_tables()
    assert _rows_by_us(sql, tables) == _rows_by_duckdb(sql, tables)


@pytest.mark.parametrize("sql,where", [
    ("SELECT a FROM t WHERE d < d + interval '3' month", (1, 31)),
    ("SELECT a\nFROM t\nWHERE d > d - interval 3 day", (3, 15)),
    ("SELECT a FROM t\nWHERE d < date '1995-01-01' + interval '1' hour", (2, 31)),
    ("SELECT interval '3' month AS i FROM t", (1, 8)),
    ("SELECT a FROM t WHERE d < date '1995-01-01' + interval '1' day\n"
     "  AND d > a + interval '2' day", (2, 15)),
    ("WITH r AS (SELECT d + interval '1' day AS e FROM t) SELECT e FROM r", (1, 23)),
])
def test_an_interval_that_cannot_be_folded_is_refused_at_its_keyword(sql, where):
    with pytest.raises(UnsupportedSqlError) as info:
        plan(sql)
    assert info.value.construct == "INTERVAL literal"
    assert position(info.value) == where, str(info.value)


@pytest.mark.parametrize("sql,where,reason", [
    ("SELECT a FROM t\nWHERE d < date '1995-13-01'", (2, 16), "month must be in 1..12"),
    ("SELECT a FROM t WHERE d = date '1995-02-30'", (1, 32), "day is out of range"),
    ("SELECT a FROM t WHERE d = date '1995-2-29' + interval '1' day", (1, 32),
     "day is out of range"),
])
def test_an_impossible_date_is_a_syntax_error_at_the_literal(sql, where, reason):
    with pytest.raises(SqlSyntaxError) as info:
        plan(sql)
    assert position(info.value) == where and reason in str(info.value)


# -- 3. WITH -----------------------------------------------------------------------------------


@pytest.mark.parametrize("sql,expected", [
    ("WITH r AS (SELECT a, b FROM t WHERE b > 1) SELECT a FROM r",
     "SELECT a FROM (SELECT a, b FROM t WHERE b > 1) AS r"),
    ("WITH r (k2, w) AS (SELECT a, b FROM t) SELECT k2, w FROM r WHERE w = 2",
     "SELECT k2, w FROM (SELECT a, b FROM t) AS r (k2, w) WHERE w = 2"),
    ("WITH r AS (SELECT a FROM t) SELECT x.a FROM r AS x",
     "SELECT x.a FROM (SELECT a FROM t) AS x"),
    ("WITH r (p, q) AS (SELECT a, b FROM t) SELECT y.m FROM r AS y (m, n)",
     "SELECT y.m FROM (SELECT a, b FROM t) AS y (m, n)"),
    # nested: a CTE reading an earlier one
    ("WITH r AS (SELECT a FROM t), s AS (SELECT a FROM r WHERE a > 1) SELECT a FROM s",
     "SELECT a FROM (SELECT a FROM (SELECT a FROM t) AS r WHERE a > 1) AS s"),
    # the inner WITH shadows the outer one
    ("WITH r AS (SELECT a FROM t) "
     "SELECT a FROM (WITH r AS (SELECT k AS a FROM u) SELECT a FROM r) AS q",
     "SELECT a FROM (SELECT a FROM (SELECT k AS a FROM u) AS r) AS q"),
    # a CTE does not see itself: "t" in its body is the table
    ("WITH t AS (SELECT a FROM t WHERE a > 1) SELECT a FROM t",
     "SELECT a FROM (SELECT a FROM t WHERE a > 1) AS t"),
    # referenced twice: each reference its own copy
    ("WITH r AS (SELECT a, b FROM t) SELECT r1.a FROM r AS r1 JOIN r AS r2 ON r1.a = r2.b",
     "SELECT r1.a FROM (SELECT a, b FROM t) AS r1 JOIN (SELECT a, b FROM t) AS r2 "
     "ON r1.a = r2.b"),
    # unused CTEs vanish; folding happens inside CTE bodies
    ("WITH r AS (SELECT a FROM t WHERE d < date '2000-01-31' + interval '1' month), "
     "unused AS (SELECT k FROM u) SELECT a FROM r",
     "SELECT a FROM (SELECT a FROM t WHERE d < DATE '2000-02-29') AS r"),
    ("(WITH r AS (SELECT a FROM t) SELECT a FROM r);", "SELECT a FROM (SELECT a FROM t) AS r"),
])
def test_with_is_inlined_as_derived_tables(sql, expected):
    same_plan(sql, expected)


def test_a_cte_referenced_inside_subqueries_is_copied_into_each():
    sql = ("WITH r AS (SELECT k, v FROM u WHERE v > 1) "
           "SELECT a FROM t, r WHERE a = r.k AND b IN (SELECT v FROM r) "
           "AND EXISTS (SELECT 1 FROM r AS r3 WHERE r3.k = t.a) "
           "AND b > (SELECT max(v) FROM r)")
    root = normalized(sql)
    expected = spark_sql(
        "SELECT a FROM t, (SELECT k, v FROM u WHERE v > 1) AS r WHERE a = r.k "
        "AND b IN (SELECT v FROM (SELECT k, v FROM u WHERE v > 1) AS r) "
        "AND EXISTS (SELECT 1 FROM (SELECT k, v FROM u WHERE v > 1) AS r3 WHERE r3.k = t.a) "
        "AND b > (SELECT MAX(v) FROM (SELECT k, v FROM u WHERE v > 1) AS r)")
    assert root.sql(dialect="spark") == expected
    copies = [s for s in root.find_all(exp.Subquery) if s.alias in ("r", "r3")]
    assert len(copies) == 4 and len({id(c.this) for c in copies}) == 4
    assert not list(root.find_all(exp.With))


def test_with_inside_a_where_subquery_is_inlined_there():
    sql = "SELECT a FROM t WHERE b IN (WITH r AS (SELECT v FROM u) SELECT v FROM r)"
    assert normalized_sql(sql) == spark_sql(
        "SELECT a FROM t WHERE b IN (SELECT v FROM (SELECT v FROM u) AS r)")


@pytest.mark.parametrize("sql,error,construct,where", [
    ("WITH RECURSIVE r AS (SELECT a FROM t) SELECT a FROM r", UnsupportedSqlError,
     "recursive WITH", (1, 1)),
    ("SELECT a FROM t WHERE b IN (\n  WITH RECURSIVE r AS (SELECT a FROM t) SELECT a FROM r)",
     UnsupportedSqlError, "recursive WITH", (2, 3)),
    ("WITH r AS (SELECT a FROM t), r AS (SELECT b FROM t) SELECT a FROM r",
     UnsupportedSqlError, "duplicate WITH name", (1, 30)),
    ("WITH r (p) AS (SELECT a, b FROM t) SELECT p FROM r", UnsupportedSqlError,
     "column alias list of the wrong length", None),
])
def test_with_refusals(sql, error, construct, where):
    with pytest.raises(error) as info:
        plan(sql)
    assert construct in str(info.value)
    if where is not None:
        assert position(info.value) == where, str(info.value)


def test_errors_inside_a_cte_point_at_its_text():
    with pytest.raises(UnknownColumnError, match=r"'zz' at line 1, column 19"):
        plan("WITH r AS (SELECT zz FROM t) SELECT zz FROM r")
    # a CTE sees only the CTEs before it
    with pytest.raises(UnknownTableError, match=r"unknown table 'r'"):
        plan("WITH s AS (SELECT a FROM r), r AS (SELECT a FROM t) SELECT a FROM s")


# -- 4. view scripts ---------------------------------------------------------------------------

SCRIPT = """create view v (k2, total) as
  select a, sum(b) from t group by a;

select k2, total from v where total > 3 order by k2;

drop view v;"""


def test_a_view_script_plans_as_its_query_with_the_view_inlined():
    same_plan(SCRIPT, "select k2, total from (select a, sum(b) from t group by a) as v "
                      "(k2, total) where total > 3 order by k2")


@pytest.mark.parametrize("sql,expected", [
    ("CREATE OR REPLACE TEMPORARY VIEW v AS SELECT a FROM t; SELECT a FROM v",
     "SELECT a FROM (SELECT a FROM t) AS v"),
    ("create temp view v as select a, b from t;\n"
     "create view w (c) as select a from v where b > 1;\n"
     "select c from w; drop view w; drop view if exists v;",
     "SELECT c FROM (SELECT a FROM (SELECT a, b FROM t) AS v WHERE b > 1) AS w (c)"),
    ("create view v as select a from t; create or replace view v as select b as a from t; "
     "select a from v", "SELECT a FROM (SELECT b AS a FROM t) AS v"),
    ("create view v as select a from t where d < date '1996-01-01' + interval '3' month;\n"
     "(select a from v);", "SELECT a FROM (SELECT a FROM t WHERE d < DATE '1996-04-01') AS v"),
])
def test_view_script_variants(sql, expected):
    same_plan(sql, expected)


def test_a_view_inside_a_subquery_is_inlined_there_too():
    script = ("create view v (k2, total) as select a, sum(b) from t group by a; "
              "select a from t, v where a = k2 and total = (select max(total) from v); "
              "drop view v")
    assert normalized_sql(script) == spark_sql(
        "select a from t, (select a, sum(b) from t group by a) as v (k2, total) "
        "where a = k2 and total = (select max(total) from "
        "(select a, sum(b) from t group by a) as v (k2, total))")


# the position is the second statement's (its first positioned token), as before
@pytest.mark.parametrize("sql,construct,where", [
    ("SELECT a FROM t; SELECT b FROM t", "multiple statements", (1, 25)),
    ("create view v as select a from t; select a from v; drop view w",
     "multiple statements", (1, 42)),
    ("create view v as select a from t; drop table t; select a from v",
     "multiple statements", (1, 46)),
    ("create view v as select a from t; select a from v; select a from v",
     "multiple statements", (1, 42)),
    ("select a from t; drop view v", "multiple statements", (1, 28)),
    ("create view v as select a from t; create view w as select a from v",
     "multiple statements", (1, 47)),
    ("create view v as select a from t", "CREATE statement", (1, 1)),
    ("create global temporary view v as select a from t; select a from global_temp.v",
     "CREATE GLOBAL TEMPORARY VIEW", (1, 1)),
    ("create view v as select a from t; create view v as select b from t; select a from v",
     "CREATE VIEW of a view the script already created", None),
])
def test_other_scripts_are_still_refused(sql, construct, where):
    with pytest.raises(UnsupportedSqlError) as info:
        plan(sql)
    assert construct in str(info.value)
    if where is not None:
        assert position(info.value) == where, str(info.value)


def test_the_read_only_check_accepts_the_view_script_and_checks_its_views():
    assert check_read_only_select(SCRIPT).key == "select"
    with pytest.raises(NotReadOnlyError, match="more than one statement"):
        check_read_only_select("create view v as select a from t; select a from v; "
                               "drop table t")
    with pytest.raises(NotReadOnlyError, match=r"the function reflect\(\)"):
        check_read_only_select("create view v as select reflect('java.lang.Runtime', "
                               "'getRuntime') as r from t; select r from v")


# -- 5. OR factoring ---------------------------------------------------------------------------


def test_a_join_key_common_to_all_or_branches_becomes_the_join_condition():
    sql = ("SELECT t.a FROM t, u WHERE (t.a = u.k AND t.b = 1 AND u.v > 2) "
           "OR (u.k = t.a AND t.b = 2) OR (t.a = u.k AND (t.b = 3))")
    same_plan(sql, "SELECT t.a FROM t, u WHERE t.a = u.k AND "
                   "((t.b = 1 AND u.v > 2) OR t.b = 2 OR t.b = 3)")
    joins = [n for n in plan(sql).root.walk() if isinstance(n, Join)]
    assert len(joins) == 1 and "(`t.a` = `u.k`)" in str(joins[0].condition)


@pytest.mark.parametrize("sql,expected", [
    # no conjunct in every branch: unchanged
    ("SELECT a FROM t, u WHERE (a = k AND b = 1) OR (a = v AND b = 2)",
     "SELECT a FROM t, u WHERE (a = k AND b = 1) OR (a = v AND b = 2)"),
    ("SELECT a FROM t WHERE (a = 1 AND b = 2) OR a = 3",
     "SELECT a FROM t WHERE (a = 1 AND b = 2) OR a = 3"),
    # a branch that is only the common part: the OR is that part (absorption)
    ("SELECT a FROM t WHERE b = 1 OR (b = 1 AND a = 2)", "SELECT a FROM t WHERE b = 1"),
    # two common conjuncts, in the first branch's order; duplicates within a branch
    ("SELECT a FROM t WHERE (b = 1 AND a > 0 AND d IS NULL) OR (a > 0 AND b = 1 AND b = 1)",
     "SELECT a FROM t WHERE b = 1 AND a > 0"),
    # inside a subquery, HAVING and a CASE condition
    ("SELECT a FROM t WHERE b IN (SELECT v FROM u WHERE (k = 1 AND v = 2) OR (k = 1 AND v = 3))",
     "SELECT a FROM t WHERE b IN (SELECT v FROM u WHERE k = 1 AND (v = 2 OR v = 3))"),
    ("SELECT a FROM t GROUP BY a HAVING (a > 1 AND sum(b) > 2) OR (a > 1 AND sum(b) < 0)",
     "SELECT a FROM t GROUP BY a HAVING a > 1 AND (SUM(b) > 2 OR SUM(b) < 0)"),
    ("SELECT CASE WHEN (a = 1 AND b = 2) OR (b = 2 AND a = 3) THEN 1 END AS c FROM t",
     "SELECT CASE WHEN (b = 2 AND (a = 1 OR a = 3)) THEN 1 END AS c FROM t"),
])
def test_or_factoring(sql, expected):
    assert normalized_sql(sql) == spark_sql(expected)


# -- 6/7. what stays as it was -----------------------------------------------------------------


@pytest.mark.parametrize("sql", [
    "SELECT a FROM t WHERE EXISTS (SELECT 1 FROM u WHERE u.k = t.a)",
    "SELECT a FROM t WHERE b NOT IN (SELECT v FROM u) AND a > (SELECT max(k) FROM u)",
    "SELECT t.a FROM t JOIN u ON t.a = u.k WHERE u.v > 1",
])
def test_subqueries_and_joins_are_left_as_written(sql):
    assert normalized_sql(sql) == spark_sql(sql)


@pytest.mark.parametrize("sql", ["(SELECT a FROM t);", "((SELECT a FROM t))", "SELECT a FROM t;"])
def test_parenthesized_selects_and_semicolons(sql):
    same_plan(sql, "SELECT a FROM t")


# -- the tpch22 suite --------------------------------------------------------------------------

TPCH22 = {q.name: q for q in list_queries("tpch22")}
PLANNABLE = ["h01", "h03", "h05", "h06", "h07", "h08", "h09", "h10", "h12", "h14", "h19"]
SKETCHES = {"h02": ("partsupp", "ps_partkey"), "h11": ("partsupp", "ps_partkey"),
            "h13": ("customer", "c_custkey"), "h15": ("lineitem", "l_suppkey"),
            "h16": ("partsupp", "ps_partkey"), "h17": ("lineitem", "l_partkey"),
            "h20": ("lineitem", "l_partkey"), "h22": ("customer", "c_custkey")}


def test_the_tpch22_suite_is_listed_by_name_only():
    assert sorted(TPCH22) == [f"h{i:02d}" for i in range(1, 23)]
    assert "tpch22" in SUITES and "tpch22" not in DEFAULT_SUITES
    assert not [q for q in list_queries() if q.suite == "tpch22"]
    names = [q.name for suite in SUITES for q in list_queries(suite)]
    assert len(names) == len(set(names)), "names must be unique across suites"
    for name, query in TPCH22.items():
        assert load_query(name) == query == load_query(f"tpch22/{name}")
        assert query.sketch == (SKETCHES.get(name, ("lineitem", "l_orderkey")),)
        table, column = query.sketch[0]
        assert column in schemas.TABLES[table].schema.names


@pytest.mark.parametrize("name", sorted(TPCH22))
def test_every_tpch22_query_parses_and_normalizes(name):
    sql = TPCH22[name].sql
    root = normalized(sql)
    assert isinstance(root, exp.Select)
    assert not list(root.find_all(exp.With, exp.Interval, exp.Create, exp.Drop))
    tables = {t.name for t in root.find_all(exp.Table)}
    assert tables <= set(schemas.TPCH_TABLES), tables
    # the text as written: a header the planner reads, the license comment kept
    assert parse_sketch_header(f"-- sketch: {TPCH22[name].sketch[0][0]}.x\n{sql}")


@pytest.mark.parametrize("name", PLANNABLE)
def test_tpch22_queries_without_subqueries_plan(name):
    catalog = schemas.catalog()
    first, second = plan_sql(TPCH22[name].sql, catalog), plan_sql(TPCH22[name].sql, catalog)
    assert first == second and first.fingerprint() == second.fingerprint()
    assert TPCH22[name].sketch[0][0] in first.root.tables()


def test_tpch22_folds_and_factors_as_expected():
    catalog = schemas.catalog()
    assert "datetime.date(1998, 9, 24)" in plan_sql(TPCH22["h01"].sql, catalog).root.explain()
    h06 = plan_sql(TPCH22["h06"].sql, catalog).root.explain()
    assert "datetime.date(1995, 1, 1)" in h06 and "Decimal('0.03')" in h06
    joins = [n for n in plan_sql(TPCH22["h19"].sql, catalog).root.walk()
             if isinstance(n, Join)]
    assert len(joins) == 1
    assert "(`part.p_partkey` = `lineitem.l_partkey`)" in str(joins[0].condition)
    h15 = normalized(TPCH22["h15"].sql)
    assert [s.alias for s in h15.find_all(exp.Subquery) if s.alias] == ["revenue0", "revenue0"]
