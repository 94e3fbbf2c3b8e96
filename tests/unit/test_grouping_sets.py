"""GROUP BY ROLLUP / CUBE / GROUPING SETS and grouping() / grouping_id() end to end.

The GROUP BY clause's sets as Spark reads them; refusals; queries registered through the
embedded ``Engine`` and maintained over random insert / delete sequences (hypothesis),
including batches that empty groups, whole grouping sets (a HAVING that drops every
group of a set) and the whole input: after every batch the maintained sketch and result
equal the reference recapture, and the result equals DuckDB's (DuckDB, as the SQL
standard, returns the grand total row over an empty input; Spark, whose semantics the
engine follows, returns no row: ``tests/integration/test_spark_grouping_sets.py``).
The safety rule of ``imp_core.safety.expand`` with its counterexample.
"""

from __future__ import annotations

import re
from collections import Counter

import duck
import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sqlglot import parse_one
from strategies import SEEDS

from imp_core.embedded.api import Engine
from imp_core.engine.operators.base import TableDelta
from imp_core.engine.pipeline import IncrementalQuery
from imp_core.errors import UnsafeSketchError, UnsupportedSqlError
from imp_core.estimate.memory import ColumnStats, TableStats, estimate_plan
from imp_core.oracle.reference import reference_capture, reference_evaluate, restrict_to_sketch
from imp_core.oracle.results import same_rows
from imp_core.plan.expand import Expand
from imp_core.plan.lineage import trace_column
from imp_core.sql.grouping_sets import read_group
from imp_core.sql.planner import plan_sql
from imp_core.sql.text import SqlText

SCHEMA = pa.schema([("a", pa.int64()), ("g", pa.int64()), ("h", pa.string()),
                    ("x", pa.int64())])

QUERIES = {
    "rollup": "SELECT g, h, sum(x) AS s, count(*) AS n, min(x) AS mn, avg(x) AS av, "
              "grouping(g) AS gg, grouping(h) AS gh, grouping_id() AS gi "
              "FROM r GROUP BY ROLLUP(g, h)",
    "cube_having": "SELECT g, h, count(x) AS c, sum(x) AS s FROM r GROUP BY CUBE(g, h) "
                   "HAVING count(*) > 1",
    "sets_expr": "SELECT g + 1 AS g1, h, max(x) AS m, grouping_id(g + 1, h) AS gi "
                 "FROM r GROUP BY GROUPING SETS ((g + 1, h), (g + 1), (h), ())",
    "mixed_topk": "SELECT g, h, sum(x) AS s, grouping(h) AS gh FROM r "
                  "GROUP BY g, ROLLUP(h) ORDER BY gh DESC, g NULLS FIRST, h NULLS FIRST LIMIT 3",
    # a HAVING on grouping(): every group of the grand-total set appears and goes
    "having_grouping": "SELECT g, sum(x) AS s FROM r GROUP BY ROLLUP(g) "
                       "HAVING grouping(g) = 1 OR sum(x) > 0",
    "duplicate_sets": "SELECT g, count(*) AS n FROM r GROUP BY GROUPING SETS ((g), (g), ())",
    # TPC-DS q27's shape: a fact joined to a dimension, rolled up over both
    "join_rollup": "SELECT d.cat, r.h, avg(r.x) AS ax, sum(r.x) AS s, grouping(d.cat) AS gc "
                   "FROM r JOIN d ON r.g = d.g GROUP BY ROLLUP(d.cat, r.h)",
}
DIM = pa.table({"g": pa.array([0, 1, 2], pa.int64()), "cat": ["A", "B", "A"]})
# the same queries in DuckDB's dialect where it differs (Spark's WITH ROLLUP form)
WITH_ROLLUP = "SELECT g, h, sum(x) AS s FROM r GROUP BY g, h WITH ROLLUP"
DUCK = {"with_rollup": "SELECT g, h, sum(x) AS s FROM r GROUP BY ROLLUP(g, h)"}
# the rows a query groups, where they are not r's: a join that matches no row leaves
# no input (and no group) though r holds rows
INPUT = {"join_rollup": "SELECT * FROM r JOIN d ON r.g = d.g"}
QUERIES["with_rollup"] = WITH_ROLLUP


def _rows(rng: np.random.Generator, n: int, start: int) -> pa.Table:
    hs = ["p", "q", None]
    return pa.table({
        "a": pa.array(range(start, start + n), pa.int64()),
        "g": pa.array([None if rng.random() < 0.1 else int(v)
                       for v in rng.integers(0, 3, size=n)], pa.int64()),
        "h": pa.array([hs[int(i)] for i in rng.integers(0, 3, size=n)], pa.string()),
        "x": pa.array([None if rng.random() < 0.1 else int(v)
                       for v in rng.integers(-5, 10, size=n)], pa.int64())}, schema=SCHEMA)


def _duckdb(sql: str, table: pa.Table) -> pa.Table:
    con = duck.connection()
    con.register("r", table)
    con.register("d", DIM)
    return con.sql(sql).to_arrow_table()


def _check(eng: Engine, q, name: str) -> None:
    ref = reference_capture(q.plan, eng.tables(), q.partitions)
    assert q.sketch == ref.sketch, name
    assert q.pipeline.result().to_counter() == ref.bag.items, name
    got = q.result()
    if _duckdb(INPUT.get(name, "SELECT * FROM r"), eng.table("r")).num_rows == 0:
        assert got.num_rows == 0, name  # Spark: no group over no rows, not even ()
        return
    want = _duckdb(DUCK.get(name, QUERIES[name]), eng.table("r"))
    assert same_rows(got, want.cast(got.schema)), \
        f"{name}: engine {got.to_pylist()} duckdb {want.to_pylist()}"


# 20 examples per query (each 0.04-0.16 s here, 0.06 s typical: about 10 s for the 8
# queries); no health check suppressed: the draws are a seed and two choices
@pytest.mark.parametrize("name", list(QUERIES))
@settings(max_examples=20, deadline=None)
@given(seed=SEEDS, fragments=st.sampled_from([1, 3, 8]),
       attribute=st.sampled_from(["r.a", "r.x"]))
def test_maintained_grouping_sets_match_recapture_and_duckdb(name, seed, fragments, attribute):
    rng = np.random.default_rng(seed)
    eng = Engine()
    eng.create_table("r", _rows(rng, 10, 0), key="a")
    eng.create_table("d", DIM, key="g")
    q = eng.register(QUERIES[name], {attribute: fragments}, force=True)
    _check(eng, q, name)
    start = 1000
    for step in range(6):
        data = eng.table("r")
        if step == 3:  # empty the input: every group of every set goes
            dels, ins = data, _rows(rng, 0, start)
        else:
            n_del = min(int(rng.integers(0, 8)), data.num_rows)
            dels = data.take(pa.array(rng.choice(data.num_rows, size=n_del, replace=False),
                                      type=pa.int64()))
            ins = _rows(rng, int(rng.integers(0, 8)), start)
        start += 1000
        eng.apply("r", inserts=ins, deletes=dels)
        _check(eng, q, name)


def test_restored_state_keeps_maintaining_every_set():
    """The groups of all sets live in the one aggregation's state: a pipeline restored
    from a snapshot maintains them on, as the original does."""
    rng = np.random.default_rng(3)
    eng = Engine()
    eng.create_table("r", _rows(rng, 30, 0), key="a")
    q = eng.register(QUERIES["cube_having"], {"r.a": 4}, force=True)
    twin = IncrementalQuery(q.plan, q.partitions, eng.options)
    twin.restore(q.pipeline.snapshot())
    gone = eng.table("r").slice(0, 12)
    fresh = _rows(rng, 6, 1000)
    eng.apply("r", inserts=fresh, deletes=gone)
    delta = TableDelta(pa.concat_tables([gone, fresh]),
                       np.array([-1] * gone.num_rows + [1] * fresh.num_rows))
    twin.apply({"r": delta})
    assert twin.result().to_counter() == q.pipeline.result().to_counter()
    assert twin.sketch() == q.sketch


# -- the GROUP BY clause as Spark reads it ------------------------------------------------------


def _sets(group_by: str) -> list[list[str]]:
    text = SqlText(f"SELECT 1 FROM t GROUP BY {group_by}")
    _, sets = read_group(parse_one(text.sql, read="spark").args["group"], text)
    return sorted(sorted(n.sql() for n in s) for s in sets)


@pytest.mark.parametrize("group_by, sets", [
    ("ROLLUP(a, b)", [[], ["a"], ["a", "b"]]),
    ("a, b WITH ROLLUP", [[], ["a"], ["a", "b"]]),
    ("CUBE(a, b)", [[], ["a"], ["a", "b"], ["b"]]),
    ("a, b WITH CUBE", [[], ["a"], ["a", "b"], ["b"]]),
    ("GROUPING SETS ((a, b), (a), ())", [[], ["a"], ["a", "b"]]),
    ("GROUPING SETS (a, (b))", [["a"], ["b"]]),
    ("a, ROLLUP(b, c)", [["a"], ["a", "b"], ["a", "b", "c"]]),
    ("ROLLUP((a, b), c)", [[], ["a", "b"], ["a", "b", "c"]]),
    ("ROLLUP(a), CUBE(b)", [[], ["a"], ["a", "b"], ["b"]]),
])
def test_grouping_sets_as_spark_reads_them(group_by, sets):
    assert _sets(group_by) == sets


def test_plan_is_an_aggregation_over_expand():
    plan = plan_sql(QUERIES["rollup"], {"r": SCHEMA})
    expands = [n for n in plan.root.walk() if isinstance(n, Expand)]
    assert len(expands) == 1 and len(expands[0].sets) == 3
    types = {f.name: f.dtype for f in plan.schema}
    assert types["gg"] == pa.int8() and types["gi"] == pa.int64()  # Spark: TINYINT, BIGINT


@pytest.mark.parametrize("sql, construct", [
    ("SELECT g, grouping(g) FROM r GROUP BY g", "grouping() without GROUP BY ROLLUP"),
    ("SELECT g, count(DISTINCT x) FROM r GROUP BY ROLLUP(g)", "DISTINCT and grouping sets"),
    ("SELECT g, grouping(x) FROM r GROUP BY ROLLUP(g)", "not a grouping key"),
    ("SELECT g, grouping_id(h, g) FROM r GROUP BY ROLLUP(g, h)", "in their order"),
    ("SELECT g FROM r GROUP BY GROUPING SETS ((g, ROLLUP(h)))", "ROLLUP"),
])
def test_refusals_name_the_construct(sql, construct):
    with pytest.raises(UnsupportedSqlError, match=re.escape(construct)):
        plan_sql(sql, {"r": SCHEMA})


# -- safety (imp_core.safety.expand) ------------------------------------------------------------


def _tables(rows: list[tuple]) -> dict[str, pa.Table]:
    cols = list(zip(*rows))
    return {"r": pa.table({n: pa.array(c, SCHEMA.field(n).type)
                           for n, c in zip(SCHEMA.names, cols)}, schema=SCHEMA)}


def _over_sketch_equals(sql: str, attribute: str, tables: dict[str, pa.Table],
                        fragments) -> bool:
    eng = Engine()
    eng.create_table("r", tables["r"], key="a")
    q = eng.register(sql, {attribute: fragments}, force=True)
    full = reference_evaluate(q.plan.root, tables, q.partitions)
    sub = reference_evaluate(q.plan.root, restrict_to_sketch(tables, q.sketch), q.partitions)
    return _rows_of(full) == _rows_of(sub)


def _rows_of(bag) -> Counter:
    out: Counter = Counter()
    for (row, _), m in bag.items.items():
        out[row] += m
    return +out


ROLLUP_HAVING = "SELECT g, sum(x) AS s FROM r GROUP BY ROLLUP(g) HAVING sum(x) < 5"


def test_a_key_missing_from_some_set_does_not_determine_the_group():
    """The counterexample: the grand total (the set without g) spans every fragment of g,
    so over the sketch it is partial and passes a HAVING the complete one fails."""
    with pytest.raises(UnsafeSketchError, match="not monotone"):
        _register(ROLLUP_HAVING, "r.g")
    tables = _tables([(1, 1, "p", 1), (2, 2, "p", 10)])
    # forced anyway, the result over the sketch has a row the full result lacks
    assert not _over_sketch_equals(ROLLUP_HAVING, "r.g", tables, [2])


def _register(sql: str, attribute: str):
    eng = Engine()
    eng.create_table("r", _tables([(1, 1, "p", 1)])["r"], key="a")
    return eng.register(sql, {attribute: 2})


def test_a_key_in_every_set_determines_the_group():
    sql = "SELECT g, h, sum(x) AS s FROM r GROUP BY g, ROLLUP(h) HAVING sum(x) < 5"
    q = _register(sql, "r.g")  # safe: g is in both sets
    assert "determines the group key" in q.verdicts[0].reason
    rng = np.random.default_rng(11)
    for _ in range(20):
        tables = {"r": _rows(rng, 12, 0)}
        assert _over_sketch_equals(sql, "r.g", tables, [1, 2])


def test_rollup_without_filter_is_safe_on_any_attribute():
    sql = "SELECT g, h, sum(x) AS s, count(*) AS n FROM r GROUP BY ROLLUP(g, h)"
    _register(sql, "r.x")
    rng = np.random.default_rng(5)
    for _ in range(20):
        assert _over_sketch_equals(sql, "r.x", {"r": _rows(rng, 12, 0)}, [0, 4])


# a top-k on the rolled-up key (TPC-DS q5, q27, q80): ties between a group whose key is
# NULL and the subtotal of the set without the key fall to the SUM
ROLLUP_TOPK = "SELECT g, sum(x) AS s FROM r GROUP BY ROLLUP(g) ORDER BY g NULLS FIRST LIMIT 1"


def test_a_nullable_rolled_up_key_ties_subtotals_with_groups():
    """The counterexample: the NULL group of g (a = 1) ties the grand total on g and wins
    on its smaller sum; over the sketch ({a = 1, a = 2}) the partial grand total is
    smaller still and takes its place."""
    with pytest.raises(UnsafeSketchError, match="ties on its order keys"):
        _register(ROLLUP_TOPK, "r.a")
    tables = _tables([(1, None, "p", 0), (2, 1, "p", -3), (10, 2, "p", 10)])
    assert not _over_sketch_equals(ROLLUP_TOPK, "r.a", tables, [5])


def _not_null_g(table: pa.Table) -> pa.Table:
    schema = pa.schema([f.with_nullable(f.name != "g") for f in SCHEMA])
    return table.cast(schema)


def test_a_key_declared_not_null_tells_subtotals_from_groups():
    """With g NOT NULL, a NULL g is the subtotal's: (g) alone is the group key, the top-k's
    order keys cover it and the tie-break never reaches the SUM."""
    eng = Engine()
    eng.create_table("r", _not_null_g(_tables([(1, 1, "p", 1)])["r"]), key="a")
    q = eng.register(ROLLUP_TOPK + "0", {"r.a": 2})  # LIMIT 10, safe: not forced
    assert q.verdicts[0].safe
    rng = np.random.default_rng(3)
    for _ in range(30):
        rows = _rows(rng, 12, 0)
        rows = rows.set_column(1, "g", pa.array([v if v is not None else 0
                                                 for v in rows.column("g").to_pylist()],
                                                pa.int64()))
        tables = {"r": _not_null_g(rows)}
        for cut in ([3], [1, 6], [0, 4, 8]):
            eng2 = Engine()
            eng2.create_table("r", tables["r"], key="a")
            q2 = eng2.register(ROLLUP_TOPK.replace("LIMIT 1", "LIMIT 2"), {"r.a": cut})
            full = reference_evaluate(q2.plan.root, tables, q2.partitions)
            sub = reference_evaluate(q2.plan.root, restrict_to_sketch(tables, q2.sketch),
                                     q2.partitions)
            assert _rows_of(full) == _rows_of(sub)


# -- lineage and the memory estimate of Expand ----------------------------------------------------


def _expand_of(sql: str) -> Expand:
    return next(n for n in plan_sql(sql, {"r": SCHEMA}).root.walk() if isinstance(n, Expand))


def test_an_expanded_key_is_a_table_column_only_where_every_set_holds_it():
    node = _expand_of("SELECT g, h, count(*) FROM r GROUP BY g, ROLLUP(h)")
    g, h = node.names
    assert trace_column(node, g)[1] == "g"  # in both sets: a plain copy
    assert trace_column(node, h) is None  # NULL in the copies for the set ()
    assert trace_column(node, h, through_padding=True)[1] == "h"
    assert trace_column(node, node.set_column) is None


def test_the_estimate_counts_one_copy_per_set_and_the_groups_of_every_set():
    sql = "SELECT g, h, sum(x) FROM r GROUP BY CUBE(g, h)"
    plan = plan_sql(sql, {"r": SCHEMA})
    stats = {"r": TableStats(1000, {"g": ColumnStats(distinct=3), "h": ColumnStats(distinct=2)})}
    est = estimate_plan(plan.root, stats, fragments=8)
    by_kind = {type(o.node).__name__: o for o in est.operators}
    assert by_kind["Expand"].rows == 4000 and by_kind["Expand"].state_bytes == 0
    # (3 + 1) * (2 + 1) values of the expanded keys, 4 sets: an upper bound of the 12
    # groups there are ((g, h): 6, (g): 3, (h): 2, (): 1)
    assert 12 <= by_kind["Aggregate"].rows <= 4 * 4 * 3
