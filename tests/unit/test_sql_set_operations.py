"""Set operations end to end: SQL text through the planner and the embedded Engine.

For each query (UNION [ALL], INTERSECT [ALL], EXCEPT [ALL], nested and parenthesised,
with ORDER BY ... LIMIT, as a derived table, with widened types) hypothesis draws small
tables with NULLs and duplicates and a sequence of update batches, among them batches
that copy rows of one input into the other and delete them again (flipping INTERSECT and
EXCEPT membership); after registering and after every batch the maintained result
equals DuckDB's result of the same SQL, and the maintained sketch equals the
non-incremental recapture. Planner tests check names, types and errors.
"""

from __future__ import annotations

import duck
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_sql_subqueries import ROWS_R, ROWS_S, _check, _tables

from imp_core.embedded.api import Engine
from imp_core.errors import SqlSyntaxError, UnknownColumnError, UnsupportedSqlError
from imp_core.oracle.reference import reference_capture, restrict_to_sketch
from imp_core.plan.nodes import SetOp, TopK
from imp_core.sql.planner import plan_sql

RS = "SELECT b, c FROM r {op} SELECT d, e FROM s"
QUERIES = [
    ("union_all", RS.format(op="UNION ALL")),
    ("union", RS.format(op="UNION")),
    ("intersect", RS.format(op="INTERSECT")),
    ("intersect_all", RS.format(op="INTERSECT ALL")),
    ("except", RS.format(op="EXCEPT")),
    ("except_all", RS.format(op="EXCEPT ALL")),
    ("except_reversed", "SELECT d, e FROM s EXCEPT ALL SELECT b, c FROM r WHERE a > 1"),
    ("self_intersect", "SELECT b FROM r WHERE c > 1 INTERSECT ALL SELECT c FROM r"),
    ("nested", "(SELECT b FROM r UNION ALL SELECT d FROM s) EXCEPT SELECT e FROM s "
               "WHERE c > 101"),
    ("precedence", "SELECT b FROM r UNION SELECT d FROM s INTERSECT SELECT e FROM s"),
    ("three_way", "SELECT b FROM r EXCEPT ALL SELECT d FROM s EXCEPT ALL SELECT e FROM s"),
    ("top_k", "SELECT b, c FROM r UNION ALL SELECT d, e FROM s "
              "ORDER BY b DESC NULLS LAST, c ASC NULLS FIRST LIMIT 3"),
    ("top_k_intersect", "SELECT b, c FROM r INTERSECT ALL SELECT d, e FROM s "
                        "ORDER BY 1 NULLS FIRST, 2 DESC NULLS FIRST LIMIT 2"),
    ("derived", "SELECT x, count(*) AS n FROM (SELECT b AS x FROM r EXCEPT ALL "
                "SELECT d FROM s) u WHERE x IS NOT NULL GROUP BY x"),
    ("widened", "SELECT b, CAST(c AS DECIMAL(25, 2)) AS c FROM r UNION "
                "SELECT CAST(d AS INT), CAST(e AS DECIMAL(30, 4)) FROM s"),
    ("aggregates", "SELECT b, count(*) AS n FROM r GROUP BY b INTERSECT "
                   "SELECT d, count(*) FROM s GROUP BY d"),
]


def _flip_batch(data, eng: Engine, step: int) -> tuple[str, pa.Table | None, pa.Table | None]:
    """A batch copying rows of one table's compared columns into the other, or deleting
    the rows of one table equal to rows of the other."""
    r, s = eng.table("r"), eng.table("s")
    src, dst = data.draw(st.sampled_from([("r", "s"), ("s", "r")]))
    source = r if src == "r" else s
    target = s if dst == "s" else r
    scols = ["b", "c"] if src == "r" else ["d", "e"]
    tcols = ["b", "c"] if dst == "r" else ["d", "e"]
    key = "a" if dst == "r" else "c"
    if data.draw(st.booleans()) or target.num_rows == 0:
        if source.num_rows == 0:
            return dst, None, None
        picks = data.draw(st.lists(st.integers(0, source.num_rows - 1), min_size=1,
                                   max_size=3))
        rows = source.take(pa.array(picks, pa.int64()))
        first = 1000 * (step + 1)
        new = pa.table({key: pa.array(range(first, first + len(picks)), pa.int64()),
                        tcols[0]: rows.column(scols[0]), tcols[1]: rows.column(scols[1])})
        return dst, new.select(target.column_names), None
    values = set(zip(*[source.column(c).to_pylist() for c in scols]))
    hit = [i for i, v in enumerate(zip(*[target.column(c).to_pylist() for c in tcols]))
           if v in values]
    if not hit:
        return dst, None, None
    return dst, None, target.take(pa.array(hit, pa.int64()))


@pytest.mark.parametrize("name,sql", QUERIES, ids=[n for n, _ in QUERIES])
@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_maintained_result_equals_duckdb(name, sql, data):
    eng = Engine()
    r, s = _tables(data.draw(ROWS_R), data.draw(ROWS_S))
    eng.create_table("r", r, key="a")
    eng.create_table("s", s, key="c")
    q = eng.register(sql, {"r.a": data.draw(st.sampled_from([1, 2, 4]))}, force=True)
    _check(eng, q, sql)
    for step in range(data.draw(st.integers(1, 5))):
        if data.draw(st.booleans()):
            table, inserts, deletes = _flip_batch(data, eng, step)
        else:
            table = data.draw(st.sampled_from(["r", "s"]))
            current = eng.table(table)
            dels = data.draw(st.lists(st.integers(0, max(current.num_rows - 1, 0)),
                                      max_size=3, unique=True)) if current.num_rows else []
            new_r, new_s = _tables(data.draw(ROWS_R.map(lambda x: x[:3])),
                                   data.draw(ROWS_S.map(lambda x: x[:3])),
                                   first=100 * (step + 1))
            inserts = new_r if table == "r" else new_s
            deletes = current.take(pa.array(dels, pa.int64())) if dels else None
        eng.apply(table, inserts=inserts, deletes=deletes)
        _check(eng, q, sql)


def test_safe_set_operations_register_without_force():
    eng = Engine()
    r, s = _tables([(1, 2), (None, 3)], [(1, 2)])
    eng.create_table("r", r, key="a")
    eng.create_table("s", s, key="c")
    eng.register(RS.format(op="UNION"), {"r.a": 2})
    eng.register(RS.format(op="EXCEPT ALL"), {"r.a": 2})
    eng.register("SELECT a, b FROM r EXCEPT SELECT a, b FROM r WHERE c > 2", {"r.a": 2})
    with pytest.raises(Exception, match="right of the EXCEPT"):
        eng.register("SELECT d, e FROM s EXCEPT SELECT b, c FROM r", {"r.a": 2})


# three branches each grouped on r.b, summed again over their UNION ALL and ranked on the
# sum (TPC-DS q33, q56): r.b holds the attribute on every row of every branch, so each
# outer group lies in one fragment
NESTED_UNION = ("SELECT b, sum(t) AS total FROM ("
                "SELECT b, sum(c) AS t FROM r WHERE c > 0 GROUP BY b UNION ALL "
                "SELECT b, sum(c) FROM r WHERE c < 2 GROUP BY b UNION ALL "
                "SELECT r.b, sum(s.e) FROM r JOIN s ON r.c = s.d GROUP BY r.b) u "
                "GROUP BY b ORDER BY total DESC NULLS LAST, b LIMIT 2")


@settings(max_examples=40, deadline=None)
@given(rows_r=ROWS_R, rows_s=ROWS_S, bounds=st.lists(st.integers(-2, 5), min_size=1,
                                                        max_size=3, unique=True))
def test_a_union_of_unions_keeps_the_attribute_every_branch_holds(rows_r, rows_s, bounds):
    eng = Engine()
    r, s = _tables(rows_r, rows_s)
    eng.create_table("r", r, key="a")
    eng.create_table("s", s, key="c")
    q = eng.register(NESTED_UNION, {"r.b": sorted(bounds)})  # safe: not forced
    tables = eng.tables()
    full = reference_capture(q.plan, tables, q.partitions)
    cut = reference_capture(q.plan, restrict_to_sketch(tables, full.sketch), q.partitions)
    assert full.rows() == cut.rows()


def test_a_union_branch_without_the_table_loses_the_attribute():
    eng = Engine()
    r, s = _tables([(1, 2)], [(1, 2)])
    eng.create_table("r", r, key="a")
    eng.create_table("s", s, key="c")
    without = NESTED_UNION.replace("SELECT r.b, sum(s.e) FROM r JOIN s ON r.c = s.d "
                                   "GROUP BY r.b", "SELECT d, sum(e) FROM s GROUP BY d")
    with pytest.raises(Exception, match="is unsafe"):
        eng.register(without, {"r.b": 2})


# -- planning -----------------------------------------------------------------------------

CATALOG = {
    "t": pa.schema([("a", pa.int32()), ("m", pa.decimal128(15, 2)), ("s", pa.string()),
                    ("f", pa.float32())]),
    "u": pa.schema([("x", pa.int64()), ("y", pa.decimal128(10, 4)), ("s", pa.string()),
                    ("g", pa.float64())]),
}


def test_names_from_the_left_and_widened_types():
    plan = plan_sql("SELECT a AS k, m, f FROM t UNION ALL SELECT x, y, g FROM u", CATALOG)
    assert isinstance(plan.root, SetOp) and plan.root.linear
    assert [(f.name, f.dtype) for f in plan.schema] == [
        ("k", pa.int64()), ("m", pa.decimal128(17, 4)), ("f", pa.float64())]
    plan = plan_sql("SELECT a, m FROM t INTERSECT SELECT a, f FROM t", CATALOG)
    assert [f.dtype for f in plan.schema] == [pa.int32(), pa.float64()]


def test_order_by_and_limit_apply_to_the_whole_set_operation():
    plan = plan_sql("SELECT a FROM t UNION SELECT x FROM u ORDER BY a DESC LIMIT 2", CATALOG)
    assert isinstance(plan.root, TopK) and isinstance(plan.root.input, SetOp)
    plan = plan_sql("SELECT a FROM t EXCEPT SELECT x FROM u ORDER BY 1", CATALOG)
    assert isinstance(plan.root, SetOp) and [k.column for k in plan.order_by] == ["a"]
    # an ORDER BY without LIMIT inside an operand has no effect
    plan = plan_sql("(SELECT a FROM t ORDER BY a) MINUS (SELECT x FROM u)", CATALOG)
    assert plan.root.kind == "except" and plan.root.distinct and not plan.order_by


def test_kinds_and_precedence():
    plan = plan_sql("SELECT a FROM t UNION SELECT x FROM u INTERSECT ALL SELECT a FROM t",
                    CATALOG)
    root = plan.root
    assert (root.kind, root.distinct) == ("union", True)
    inner = root.right.input if not isinstance(root.right, SetOp) else root.right
    assert (inner.kind, inner.distinct) == ("intersect", False)


@pytest.mark.parametrize("sql,error,pattern", [
    ("SELECT a, m FROM t UNION SELECT x FROM u", SqlSyntaxError,
     r"line 1, column 20\): the operands of UNION have different numbers of columns: "
     r"2 \(a, m\) and 1 \(x\)"),
    ("SELECT a FROM t\nEXCEPT ALL SELECT x, y FROM u", SqlSyntaxError,
     r"line 2, column 1\): the operands of EXCEPT ALL"),
    ("SELECT s FROM t UNION SELECT x FROM u", UnsupportedSqlError,
     r"UNION of incompatible column types .*string on the left and int64"),
    ("SELECT a FROM t UNION SELECT x FROM u ORDER BY a + 1 LIMIT 1", UnsupportedSqlError,
     r"ORDER BY expression of a UNION"),
    ("SELECT a FROM t UNION SELECT x FROM u ORDER BY x", UnknownColumnError,
     r"not an output column of the UNION: a"),
    ("SELECT a FROM t UNION SELECT x FROM u LIMIT 1", UnsupportedSqlError,
     r"LIMIT without ORDER BY"),
    ("SELECT a FROM t WHERE a IN (SELECT x FROM u UNION SELECT a FROM t)",
     UnsupportedSqlError, r"UNION in a WHERE or HAVING subquery"),
])
def test_refusals_and_errors(sql, error, pattern):
    with pytest.raises(error, match=pattern):
        plan_sql(sql, CATALOG)


def test_duckdb_agrees_on_the_planned_types():
    con = duck.connection()
    plan = plan_sql("SELECT a FROM t UNION ALL SELECT x FROM u", CATALOG)
    assert plan.schema[0].dtype == pa.int64()
    assert con.sql("SELECT 1::INT AS a UNION ALL SELECT 2::BIGINT").types[0] == "BIGINT"


def test_set_operations_in_with_clauses_views_and_derived_tables():
    for sql in ("WITH x AS (SELECT a FROM t WHERE a > 1) SELECT a FROM x UNION SELECT x FROM u",
                "WITH x AS (SELECT a FROM t UNION ALL SELECT x FROM u) "
                "SELECT a, count(*) AS n FROM x GROUP BY a",
                "CREATE VIEW v AS SELECT a FROM t INTERSECT SELECT x FROM u; "
                "SELECT * FROM v; DROP VIEW v;",
                "SELECT w.a FROM (SELECT a FROM t EXCEPT ALL SELECT x FROM u) w WHERE w.a > 2"):
        plan = plan_sql(sql, CATALOG)
        assert any(isinstance(n, SetOp) for n in plan.root.walk()), sql
