"""No width of an expression makes a tree deep, and depth has a clear limit (issue 50).

- ``balance`` / ``conjoin`` / ``disjoin``: depth ``ceil(log2 n)``, parts in order, and the
  value of the left-deep chain in three-valued logic (a row-wise fold is the reference),
  also where a part raises under ANSI mode (it is evaluated on the same rows).
- ``rebalance`` (sqlglot, right after parsing): AND / OR chains, with parentheses,
  select the rows DuckDB selects for the text as written.
- ``scan_filter``: an IN / NOT IN list is one set lookup with SQL's NULL semantics under
  any number of NOTs; a 15,000-value list through a dataset scan (it was an OR chain
  15,000 deep, and pyarrow crashed the process on it with signal 11).
- the depth limit: ``NestingLimitError`` (RESOURCE_EXHAUSTED) naming the depth, where,
  the limit and ``IMP_MAX_EXPRESSION_DEPTH``; and a query at the default limit passes
  every pass with 300 frames already in use (the margin the limit's comment promises).
- wide shapes plan, maintain and match DuckDB: IN lists, OR and AND chains, CASE.
"""

from __future__ import annotations

import math
import pickle
import sys
import time

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
import pytest
import sqlglot
from duck import connection
from hypothesis import given, settings
from hypothesis import strategies as st

from imp_core.embedded.api import Engine
from imp_core.errors import (
    NestingLimitError,
    RequestLimitError,
    SqlRuntimeError,
    SqlSyntaxError,
)
from imp_core.oracle.reference import reference_evaluate
from imp_core.plan.arrow_filter import MAX_FILTER_TERMS, scan_filter
from imp_core.plan.canonical import canonical
from imp_core.plan.evaluate import evaluate, evaluate_predicate
from imp_core.plan.expr import (
    BinaryOp,
    ColumnRef,
    Expr,
    InList,
    Literal,
    Strict,
    UnaryOp,
    balance,
    conjoin,
    conjuncts,
    disjoin,
    disjuncts,
)
from imp_core.plan.nodes import Select
from imp_core.sketch.partition import PartitionSet
from imp_core.spark.compile import plain_sql
from imp_core.spark.sql_text import SPARK_MAX_TERMS_ENV, write_expr
from imp_core.sql.nesting import (
    DEFAULT_MAX_EXPRESSION_DEPTH,
    MAX_EXPRESSION_DEPTH_ENV,
    max_expression_depth,
    nesting_depth,
    rebalance,
)
from imp_core.sql.planner import plan_sql


def _depth(e: Expr) -> int:
    return 1 + max((_depth(c) for c in e.children()), default=0)


def _kleene(op: str, a: bool | None, b: bool | None) -> bool | None:
    if op == "and":
        return False if a is False or b is False else (None if a is None or b is None else True)
    return True if a is True or b is True else (None if a is None or b is None else False)


# -- balanced construction ---------------------------------------------------------------


@given(st.integers(1, 3000))
def test_balance_keeps_order_at_log_depth(n):
    tree = balance(list(range(n)), lambda a, b: (a, b))

    def leaves(t):
        out, stack = [], [t]
        while stack:
            x = stack.pop()
            if isinstance(x, tuple):
                stack += [x[1], x[0]]
            else:
                out.append(x)
        return out

    def depth(t):
        return 0 if not isinstance(t, tuple) else 1 + max(depth(t[0]), depth(t[1]))

    assert leaves(tree) == list(range(n))
    assert depth(tree) == math.ceil(math.log2(n))


_BOOL = st.sampled_from([True, False, None])


@settings(max_examples=150, deadline=None)
@given(st.sampled_from(["and", "or"]), st.integers(1, 40), st.data())
def test_balanced_chains_have_the_left_folds_value(op, n, data):
    rows = data.draw(st.integers(1, 12))
    cols = {f"c{i}": data.draw(st.lists(_BOOL, min_size=rows, max_size=rows))
            for i in range(n)}
    table = pa.table({k: pa.array(v, pa.bool_()) for k, v in cols.items()})
    parts: list[Expr] = [ColumnRef(f"c{i}") for i in range(n)]
    chain = (conjoin if op == "and" else disjoin)(parts)
    assert chain is not None and _depth(chain) == math.ceil(math.log2(n)) + 1
    assert (conjuncts if op == "and" else disjuncts)(chain) == parts
    expected = []
    for r in range(rows):
        value = cols["c0"][r]
        for i in range(1, n):
            value = _kleene(op, value, cols[f"c{i}"][r])
        expected.append(value)
    assert evaluate(chain, table).to_pylist() == expected


def test_balanced_and_evaluates_a_raising_part_on_the_rows_a_chain_would():
    """Under ANSI mode, a part is evaluated where no earlier part is FALSE however the
    chain is grouped: ``b <> 0 AND ... AND 10 / b > 1`` raises on no row."""
    table = pa.table({"b": pa.array([0, 2, 5, None], pa.int64())})
    guard = BinaryOp("<>", ColumnRef("b"), Literal(0, pa.int64()))
    fillers = [BinaryOp(">", ColumnRef("b"), Literal(-i, pa.int64())) for i in range(1, 6)]
    divide = BinaryOp(">", Strict(BinaryOp("/", Literal(10, pa.int64()), ColumnRef("b"))),
                      Literal(1, pa.int64()))
    chain = conjoin([guard, *fillers, divide])
    assert evaluate_predicate(chain, table).tolist() == [False, True, True, False]
    with pytest.raises(SqlRuntimeError, match="DIVIDE_BY_ZERO"):
        evaluate_predicate(conjoin([*fillers, divide, guard]), table)


# -- rebalancing at the SQL edge -----------------------------------------------------------


@st.composite
def _chain_sql(draw, depth=0):
    """A boolean expression of AND / OR chains (some parenthesized) over a, b."""
    n = draw(st.integers(2, 30 if depth == 0 else 6))
    op = draw(st.sampled_from(["AND", "OR"]))
    terms = []
    for _ in range(n):
        kind = draw(st.integers(0, 9))
        if kind == 0 and depth < 2:
            terms.append("(" + draw(_chain_sql(depth + 1)) + ")")
        elif kind == 1:
            values = draw(st.lists(st.integers(0, 9), min_size=1, max_size=4))
            terms.append(f"a IN ({', '.join(map(str, values))})")
        elif kind == 2:
            terms.append(f"b IS {'NOT ' if draw(st.booleans()) else ''}NULL")
        else:
            col = draw(st.sampled_from(["a", "b"]))
            cmp = draw(st.sampled_from(["=", "<>", "<", ">="]))
            terms.append(f"{col} {cmp} {draw(st.integers(0, 9))}")
    return f" {op} ".join(terms)


_T = pa.table({"k": pa.array(range(30), pa.int64()),
               "a": pa.array([i % 10 for i in range(30)], pa.int64()),
               "b": pa.array([None if i % 7 == 0 else (i * 3) % 10 for i in range(30)],
                             pa.int64())})


def _duck(sql: str, **tables: pa.Table) -> list[tuple]:
    con = connection()
    for name, data in tables.items():
        con.register(name, data)
    con.execute("SET max_expression_depth TO 1000000")
    return sorted(con.execute(sql).fetchall(), key=repr)


@settings(max_examples=60, deadline=None)
@given(_chain_sql())
def test_rebalanced_chains_select_what_duckdb_selects(condition):
    sql = f"SELECT k FROM t WHERE {condition}"
    plan = plan_sql(sql, {"t": _T.schema})
    got = reference_evaluate(plan.root, {"t": _T}, PartitionSet(())).data.to_pylist()
    assert sorted((tuple(r.values()) for r in got), key=repr) == _duck(sql, t=_T)


@pytest.mark.parametrize("n", [4, 100, 15_000])
def test_a_long_chain_is_balanced_right_after_parsing(n):
    tree = rebalance(sqlglot.parse_one(
        "SELECT k FROM t WHERE " + " OR ".join(f"a = {i}" for i in range(n)), read="spark"))
    where = tree.args["where"].this
    # Or nodes, then EQ, then Column, then Identifier
    assert nesting_depth(where)[0] == math.ceil(math.log2(n)) + 3
    assert [str(c.expression) for c in where.find_all(sqlglot.exp.EQ, bfs=False)] == \
        [str(i) for i in range(n)]


# -- Arrow scan filters: IN lists are set lookups ------------------------------------------


_NULLS = pa.table({"x": pa.array([1, 2, None, 4, 5, None], pa.int64()),
                   "s": pa.array(["a", None, "b", "c", "a", "d"], pa.string())})


@pytest.mark.parametrize("negated", [False, True])
@pytest.mark.parametrize("nots", [0, 1, 2, 3])
def test_in_list_filter_keeps_sql_null_semantics_under_not(negated, nots):
    e: Expr = InList(ColumnRef("x"), (Literal(1, pa.int64()), Literal(4, pa.int64())), negated)
    text = f"x {'NOT ' if negated else ''}IN (1, 4)"
    for _ in range(nots):
        e, text = UnaryOp("not", e), f"NOT ({text})"
    f = scan_filter(e, _NULLS.schema)
    assert f is not None and "is_in" in str(f)
    kept = ds.dataset(_NULLS).to_table(filter=f).column("x").to_pylist()
    assert kept == _NULLS.filter(pa.array(evaluate_predicate(e, _NULLS))).column("x").to_pylist()
    assert sorted(kept, key=repr) == [r[0] for r in _duck(f"SELECT x FROM t WHERE {text}",
                                                          t=_NULLS)]


@settings(max_examples=100, deadline=None)
@given(st.lists(st.sampled_from(["a", "b", "c", "z"]), min_size=1, max_size=5),
       st.booleans(), st.integers(0, 2))
def test_string_in_lists_filter_as_evaluate_does(values, negated, nots):
    e: Expr = InList(ColumnRef("s"), tuple(Literal(v, pa.string()) for v in values), negated)
    for _ in range(nots):
        e = UnaryOp("not", e)
    f = scan_filter(e, _NULLS.schema)
    mask = np.asarray(evaluate_predicate(e, _NULLS))
    assert _NULLS.filter(f).column("s").to_pylist() == \
        _NULLS.filter(pa.array(mask)).column("s").to_pylist()


def test_the_issues_list_of_15000_values_scans_without_crashing():
    """The list of the issue, through ``pyarrow.dataset`` (signal 11 before), as an IN
    list and as the ORed equalities it stands for."""
    table = pa.table({"l_orderkey": pa.array(range(40_000), pa.int64())})
    values = tuple(Literal(i, pa.int64()) for i in range(1, 15_000))
    ors = disjoin([BinaryOp("=", ColumnRef("l_orderkey"), v) for v in values])
    for e in (InList(ColumnRef("l_orderkey"), values), ors, UnaryOp("not", ors),
              InList(ColumnRef("l_orderkey"), values, negated=True)):
        f = scan_filter(e, table.schema)
        assert f is not None and "is_in" in str(f)
        assert ds.dataset(table).to_table(filter=f).num_rows == \
            int(evaluate_predicate(e, table).sum())


def test_a_wide_filter_keeps_to_its_term_budget():
    """Arrow recurses down every AND / OR chain, balanced or not (15,000 terms crash the
    process): conjuncts beyond ``MAX_FILTER_TERMS`` are left out, a wider OR is not
    pushed, and a NOT over a conjunction cut short is not pushed either."""
    table = pa.table({"k": pa.array(range(40_000), pa.int64()),
                      "j": pa.array([i % 3 for i in range(40_000)], pa.int64())})
    many = conjoin([BinaryOp("<>", ColumnRef("k"), Literal(i, pa.int64()))
                    for i in range(15_000)])
    f = scan_filter(many, table.schema)
    assert ds.dataset(table).to_table(filter=f).num_rows == 40_000 - MAX_FILTER_TERMS
    wide = disjoin([BinaryOp("=", ColumnRef("k" if i % 2 else "j"), Literal(i, pa.int64()))
                    for i in range(15_000)])
    assert scan_filter(wide, table.schema) is None
    cut = UnaryOp("not", BinaryOp("and", BinaryOp("=", ColumnRef("j"), Literal(1, pa.int64())),
                                  wide))
    assert scan_filter(cut, table.schema) is None  # NOT (j = 1) would drop rows it keeps


# -- the depth limit ---------------------------------------------------------------------------


_CAT = {"t": _T.schema}


def test_a_chain_deeper_than_the_limit_is_refused_with_where_and_the_setting():
    sql = "SELECT k,\n  b" + " + 1" * 3000 + " AS x FROM t"
    with pytest.raises(NestingLimitError) as info:
        plan_sql(sql, _CAT)
    error = info.value
    assert error.code == "RESOURCE_EXHAUSTED"
    assert error.depth > error.limit == DEFAULT_MAX_EXPRESSION_DEPTH
    assert (error.line, error.column) == (2, 3)  # the b the chain begins with
    assert "3,004 levels deep" in str(error) and MAX_EXPRESSION_DEPTH_ENV in str(error)
    assert f"limit of {DEFAULT_MAX_EXPRESSION_DEPTH}" in str(error)


def test_the_limit_follows_its_environment_variable(monkeypatch):
    sql = "SELECT b" + " + 1" * 50 + " AS x FROM t"
    plan_sql(sql, _CAT)
    monkeypatch.setenv(MAX_EXPRESSION_DEPTH_ENV, "40")
    with pytest.raises(NestingLimitError, match="limit of 40"):
        plan_sql(sql, _CAT)
    monkeypatch.setenv(MAX_EXPRESSION_DEPTH_ENV, "many")
    with pytest.raises(ValueError, match=MAX_EXPRESSION_DEPTH_ENV):
        max_expression_depth()
    assert max_expression_depth({MAX_EXPRESSION_DEPTH_ENV: " 300 "}) == 300


def _with_chain(n: int) -> str:
    step = "SELECT k, b + 1 AS b FROM "
    return "WITH v0 AS (SELECT k, b FROM t), " + ", ".join(
        f"v{i} AS ({step}v{i - 1})" for i in range(1, n)) + f" SELECT k, b FROM v{n - 1}"


def test_chained_with_bodies_plan_in_linear_time_and_are_measured_inlined():
    """Each body of a WITH chain is inlined into the next: 40 plan (in well under a
    second: each derived table was planned twice per enclosing plan, 2^n in all, 30 s
    for 16), 60 nest past the limit once inlined although the text is flat."""
    started = time.perf_counter()
    plan_sql(_with_chain(40), _CAT)
    assert time.perf_counter() - started < 5
    assert nesting_depth(sqlglot.parse_one(_with_chain(60), read="spark"))[0] < 40
    with pytest.raises(NestingLimitError):
        plan_sql(_with_chain(60), _CAT)


def test_nested_subqueries_plan_in_linear_time():
    started = time.perf_counter()
    plan_sql("SELECT a FROM t WHERE a IN (" * 20 + "SELECT a FROM t" + ")" * 20, _CAT)
    plan_sql("SELECT a, count(*) AS c FROM " + "(SELECT a, b FROM " * 20 + "t"
             + ") x" * 20 + " GROUP BY a", _CAT)
    assert time.perf_counter() - started < 5


def test_too_deep_to_parse_is_malformed_and_says_where():
    sql = "SELECT " + "(" * 500 + "a" + ")" * 500 + " AS x FROM t"
    with pytest.raises(SqlSyntaxError, match="parentheses 500 deep") as info:
        plan_sql(sql, _CAT)
    assert (info.value.line, info.value.column) == (1, 507)


def _burn(frames: int, fn):
    return fn() if frames <= 0 else _burn(frames - 1, fn)


@pytest.mark.parametrize("shape", ["sum", "where", "concat"])
def test_every_pass_handles_the_limit_with_room_to_spare(shape):
    """A query exactly at the default limit, with 300 frames already on the stack: plan,
    canonical form, fingerprint, Spark SQL, pickling, the engine's registration (safety,
    partitions, bootstrap), maintenance and the reference."""
    n = {"sum": 0, "where": 0, "concat": 0}[shape]
    make = {
        "sum": lambda n: "SELECT a, sum(b" + " + 1" * n + ") AS x FROM t GROUP BY a",
        "where": lambda n: "SELECT a, count(*) AS c FROM t WHERE b" + " + 1" * n
                           + " > 5 GROUP BY a",
        "concat": lambda n: "SELECT a, count(*) AS c FROM t WHERE CAST(b AS STRING)"
                            + " || 'x'" * n + " <> 'q' GROUP BY a",
    }[shape]
    while nesting_depth(sqlglot.parse_one(make(n + 1), read="spark"))[0] \
            <= DEFAULT_MAX_EXPRESSION_DEPTH:
        n += 1
    sql = make(n)
    assert nesting_depth(sqlglot.parse_one(sql, read="spark"))[0] == DEFAULT_MAX_EXPRESSION_DEPTH

    def passes():
        plan = plan_sql(sql, _CAT)
        canonical(plan.root)
        plan.fingerprint()
        plain_sql(plan)
        pickle.loads(pickle.dumps(plan))
        eng = Engine()
        eng.create_table("t", _T)
        q = eng.register(sql, partitions={"t.a": 4})
        eng.insert("t", _T.slice(0, 5))
        reference = q.reference()
        assert q.result_rows() == reference.rows() and q.sketch == reference.sketch

    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(1000)  # Python's default, whatever the test runner set
    try:
        _burn(300, passes)
    finally:
        sys.setrecursionlimit(limit)
    with pytest.raises(NestingLimitError):
        plan_sql(make(n + 1), _CAT)


# -- wide shapes plan, maintain and agree with DuckDB ----------------------------------------


_WIDE = pa.table({"k": pa.array(range(2000), pa.int64()),
                  "a": pa.array([i % 500 for i in range(2000)], pa.int64()),
                  "b": pa.array([None if i % 11 == 0 else i % 97 for i in range(2000)],
                                pa.int64())})


@pytest.mark.parametrize("where", [
    "a IN ({in15000})",
    "a NOT IN ({in15000})",
    "NOT (a IN ({in300}))",
    "{or3000}",
    "{and3000}",
    "b IN ({in300}) OR a IN ({in300})",
])
def test_wide_predicates_maintain_as_duckdb_computes(where):
    text = where.format(in15000=", ".join(map(str, range(1, 15_000))),
                        in300=", ".join(map(str, range(0, 600, 2))),
                        or3000=" OR ".join(f"a = {i}" for i in range(0, 9000, 3)),
                        and3000=" AND ".join(f"a <> {i}" for i in range(0, 6000, 2)))
    sql = f"SELECT a, sum(b) AS q, count(*) AS c FROM t WHERE {text} GROUP BY a"
    eng = Engine()
    eng.create_table("t", _WIDE.slice(0, 1500))
    q = eng.register(sql, partitions={"t.a": 8})
    eng.insert("t", _WIDE.slice(1500))

    def rows(table: pa.Table) -> list[tuple]:
        return sorted((tuple(r.values()) for r in table.to_pylist()), key=repr)

    got = rows(q.result())
    assert got == [tuple(int(v) if v is not None else None for v in r)
                   for r in _duck(sql, t=_WIDE)]
    assert q.sketch == q.reference().sketch


def test_a_case_of_3000_branches_maintains_as_duckdb_computes():
    case = "CASE " + " ".join(f"WHEN a = {i} THEN {i % 7}" for i in range(3000)) + " ELSE -1 END"
    sql = f"SELECT {case} AS g, count(*) AS c FROM t GROUP BY {case}"
    eng = Engine()
    eng.create_table("t", _WIDE.slice(0, 1000))
    q = eng.register(sql, partitions={"t.a": 4})
    eng.insert("t", _WIDE.slice(1000))
    got = sorted(tuple(r.values()) for r in q.result().to_pylist())
    assert got == _duck(sql, t=_WIDE)


def test_conjuncts_stopping_above_an_aggregate_form_one_select():
    """Pushing 2,000 conjuncts into a subquery makes one Select above its aggregation
    (one per conjunct nested the plan 2,000 deep), in O(n log n)."""
    sql = ("SELECT x.a FROM (SELECT a, sum(b) AS s FROM t GROUP BY a) x WHERE "
           + " AND ".join(f"x.s <> {i}" for i in range(2000)))
    plan = plan_sql(sql, _CAT)
    depth, stack = 0, [(plan.root, 1)]
    while stack:
        node, d = stack.pop()
        depth = max(depth, d)
        stack += [(c, d + 1) for c in node.children()]
    assert depth < 10
    [select] = [n for n in plan.root.walk() if isinstance(n, Select)]
    assert len(conjuncts(select.predicate)) == 2000
    assert _depth(select.predicate) <= math.ceil(math.log2(2000)) + 3


def test_arrow_set_lookup_is_false_on_null_which_is_why_the_filter_adds_an_equality():
    """The premise of ``arrow_filter._is_in``: pyarrow's ``is_in`` says FALSE for NULL."""
    values = pa.array([1, None], pa.int64())
    assert pc.is_in(values, value_set=pa.array([1], pa.int64())).to_pylist() == [True, False]


# -- Spark SQL text: what Spark's optimizer survives ---------------------------------------


_SCHEMA = pa.schema([("a", pa.int64()), ("b", pa.int64()), ("f", pa.float64())])


def _cmp(op: str, column: str, value: int) -> Expr:
    return BinaryOp(op, ColumnRef(column), Literal(value, pa.int64()))


def test_spark_text_of_wide_chains_is_in_lists_or_an_array():
    """Spark re-associates an AND / OR into a left-deep chain and recurses down it
    (1,000 terms overflowed its stack): equalities become IN lists, a long rest becomes
    ``exists`` / ``forall`` over an array, and beyond the limit the call is refused."""
    ors = disjoin([_cmp("=", "a" if i % 3 else "b", i) for i in range(3000)])
    text = write_expr(ors, _SCHEMA)
    assert text.count(" IN (") == 2 and " OR " in text and "exists" not in text
    assert text.index("`b` IN") < text.index("`a` IN")  # where its first comparison was
    ands = conjoin([_cmp("<>", "a", i) for i in range(3000)] + [
        InList(ColumnRef("a"), (Literal(-1, pa.int64()),), negated=True)])
    assert write_expr(ands, _SCHEMA).count("NOT IN (") == 1
    assert write_expr(disjoin([_cmp("=", "a", 1)]), _SCHEMA) == "(`a` = 1L)"
    mixed = disjoin([_cmp(">", "a", i) for i in range(100)])
    assert write_expr(mixed, _SCHEMA).startswith("exists(array((`a` > ")
    assert write_expr(conjoin([_cmp(">", "a", i) for i in range(100)]), _SCHEMA) \
        .startswith("forall(array(")
    short = conjoin([_cmp(">", "a", i) for i in range(8)])
    assert write_expr(short, _SCHEMA).count("(") == 8 + 7  # balanced text, as before
    floats = disjoin([BinaryOp("=", ColumnRef("f"), Literal(float(i), pa.float64()))
                      for i in range(100)])
    assert "IN (" not in write_expr(floats, _SCHEMA)  # NaN: = and IN disagree
    with pytest.raises(RequestLimitError, match=SPARK_MAX_TERMS_ENV):
        write_expr(disjoin([_cmp(">", "a", i) for i in range(5000)]), _SCHEMA)
    raising = disjoin([BinaryOp(">", BinaryOp("+", ColumnRef("a"), Literal(i, pa.int64())),
                                ColumnRef("b")) for i in range(100)])
    with pytest.raises(RequestLimitError, match="may raise"):
        write_expr(raising, _SCHEMA)
    # a comparison is not merged ahead of a part that may raise
    text = write_expr(disjoin([_cmp("=", "a", 1), raising.left.left, _cmp("=", "a", 2)]),
                      _SCHEMA)
    assert "IN (" not in text
