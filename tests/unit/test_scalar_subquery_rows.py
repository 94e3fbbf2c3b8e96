"""Uncorrelated scalar subqueries not known to return one row (TPC-DS q6, q44, q58): the
value of their one row, NULL over none, and the query raises (as Spark and DuckDB do)
while the subquery returns several; maintained over random updates that move it between
none, one and several rows."""

from __future__ import annotations

import random

import pyarrow as pa
import pytest
from small_tables import duckdb_rows as _duck
from small_tables import inner_rows as _i
from small_tables import outer_rows as _o

from imp_core.embedded.api import Engine
from imp_core.errors import SqlRuntimeError, UnsupportedSqlError

QUERIES = [
    "SELECT k FROM o WHERE g = (SELECT g FROM i WHERE x = 5)",
    "SELECT k, z FROM o WHERE z > (SELECT DISTINCT x FROM i WHERE g = 2)",
    "SELECT g, count(*) AS n FROM o WHERE z < 2 * (SELECT avg(x) FROM i WHERE g IS NOT NULL "
    "GROUP BY g HAVING count(*) > 1) GROUP BY g",
    # written SELECT * (TPC-DS q23): the one column of its FROM
    "SELECT k FROM o WHERE g = (SELECT * FROM (SELECT g FROM i WHERE x = 5) t)",
]


def test_a_star_over_several_columns_is_refused_as_a_scalar_subquery():
    rng = random.Random(0)
    eng = Engine()
    eng.create_table("o", _o(rng, range(3)), key="k")
    eng.create_table("i", _i(rng, range(3)), key="j")
    with pytest.raises(UnsupportedSqlError, match="scalar subquery of more than one column"):
        eng.register("SELECT k FROM o WHERE g = (SELECT * FROM (SELECT g, x FROM i) t)",
                     {"o.k": 3})
    assert eng.queries() == []








@pytest.mark.parametrize("sql", QUERIES)
@pytest.mark.parametrize("seed", [1, 2, 3, 4])
def test_one_row_none_or_an_error_like_duckdb(sql, seed):
    rng = random.Random(seed)
    eng = Engine()
    eng.create_table("o", _o(rng, range(10)), key="k")
    eng.create_table("i", _i(rng, range(1)), key="j")
    q = eng.register(sql, {"o.k": 3})
    for step in range(8):
        current = eng.table("i")
        picks = rng.sample(range(current.num_rows), min(current.num_rows, rng.randint(0, 2)))
        fresh = range(100 + 10 * step, 100 + 10 * step + rng.randint(0, 2))
        eng.apply("i", inserts=_i(rng, fresh),
                  deletes=current.take(pa.array(picks, pa.int64())) if picks else None)
        theirs = _duck(sql, eng.tables())
        try:
            ours = sorted((tuple(r.values()) for r in q.result().to_pylist()), key=repr)
        except SqlRuntimeError as error:
            assert error.error_class == "SCALAR_SUBQUERY_TOO_MANY_ROWS"
            ours = "raises"
        assert ours == theirs, (step, sql)
        if ours != "raises":
            assert q.pipeline.sketch() == q.reference().sketch


SELECT_LIST = [
    "SELECT k, CASE WHEN (SELECT count(*) FROM i WHERE x > 5) > 1 THEN (SELECT avg(x) FROM i) "
    "ELSE (SELECT max(g) FROM i) END AS b, (SELECT count(*) FROM i WHERE x > 6) AS c FROM o "
    "WHERE k < 4",
    "SELECT k, z + (SELECT sum(x) FROM i WHERE g = 1) AS s FROM o",
    "SELECT k, (SELECT x FROM i WHERE g = 2) AS one FROM o WHERE z > 5",
]


@pytest.mark.parametrize("sql", SELECT_LIST)
@pytest.mark.parametrize("seed", [1, 2])
def test_scalar_subqueries_in_the_select_list_like_duckdb(sql, seed):
    """Uncorrelated scalar subqueries of the SELECT list (TPC-DS q9): a LEFT join with
    their one row, a COUNT read as 0 where the subquery's input is empty."""
    rng = random.Random(seed)
    eng = Engine()
    eng.create_table("o", _o(rng, range(8)), key="k")
    eng.create_table("i", _i(rng, range(3)), key="j")
    q = eng.register(sql, {"o.k": 2})
    for step in range(8):
        table = rng.choice(["o", "i"])
        current = eng.table(table)
        picks = rng.sample(range(current.num_rows), min(current.num_rows, rng.randint(0, 2)))
        if step == 4:
            table, current, picks = "i", eng.table("i"), list(range(eng.table("i").num_rows))
        fresh = range(100 + 10 * step, 100 + 10 * step + rng.randint(0, 2))
        eng.apply(table, inserts=(_o if table == "o" else _i)(rng, fresh),
                  deletes=current.take(pa.array(picks, pa.int64())) if picks else None)
        theirs = _duck(sql, eng.tables())
        try:
            ours = sorted((tuple(r.values()) for r in q.result().to_pylist()), key=repr)
        except SqlRuntimeError:
            ours = "raises"
        assert ours == theirs, (step, sql)
        if ours != "raises":
            assert q.pipeline.sketch() == q.reference().sketch
