"""EXISTS and IN (subquery) inside OR (TPC-DS q10, q35, q45): each subquery becomes a LEFT
join with the DISTINCT of its correlation keys and a mark, so no outer row is repeated.
Maintained over random updates of both tables, the result equals DuckDB's and the sketch
the recapture; a subquery under NOT inside the OR stays refused."""

from __future__ import annotations

import random

import pyarrow as pa
import pytest
from small_tables import duckdb_rows as _duck
from small_tables import inner_rows as _i
from small_tables import outer_rows as _o

from imp_core.embedded.api import Engine
from imp_core.errors import UnsupportedSqlError

QUERIES = [
    "SELECT k, z FROM o WHERE z > 6 OR EXISTS (SELECT * FROM i WHERE i.g = o.g)",
    "SELECT k FROM o WHERE z = 0 AND (g IN (SELECT g FROM i WHERE x > 5) OR k = 1)",
    "SELECT k FROM o WHERE z > 6 OR EXISTS (SELECT * FROM i WHERE i.x > 5)",
    "SELECT k FROM o WHERE EXISTS (SELECT * FROM i WHERE i.g = o.g) AND "
    "(EXISTS (SELECT * FROM i WHERE i.x = o.z) OR "
    "EXISTS (SELECT * FROM i WHERE i.g = o.g AND i.x IS NULL))",
    "SELECT g, count(*) AS n FROM o WHERE g IN (SELECT g FROM i) OR z IN "
    "(SELECT x FROM i WHERE i.g = o.g) GROUP BY g",
]








@pytest.mark.parametrize("sql", QUERIES)
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_maintained_like_duckdb_over_random_updates(sql, seed):
    rng = random.Random(seed)
    eng = Engine()
    eng.create_table("o", _o(rng, range(12)), key="k")
    eng.create_table("i", _i(rng, range(6)), key="j")
    q = eng.register(sql, {"o.k": 3})
    for step in range(8):
        table = rng.choice(["o", "i"])
        current = eng.table(table)
        picks = rng.sample(range(current.num_rows), min(current.num_rows, rng.randint(0, 3)))
        if step == 5:  # empty the subquery's table: every mark goes
            table, picks = "i", list(range(eng.table("i").num_rows))
            current = eng.table("i")
        fresh = range(100 + 10 * step, 100 + 10 * step + rng.randint(0, 3))
        inserts = _o(rng, fresh) if table == "o" else _i(rng, fresh)
        eng.apply(table, inserts=inserts,
                  deletes=current.take(pa.array(picks, pa.int64())) if picks else None)
        ours = sorted((tuple(r.values()) for r in q.result().to_pylist()), key=repr)
        assert ours == _duck(sql, eng.tables()), (step, sql)
        assert q.pipeline.sketch() == q.reference().sketch


@pytest.mark.parametrize("sql", [
    "SELECT k FROM o WHERE z > 6 OR NOT EXISTS (SELECT * FROM i WHERE i.g = o.g)",
    "SELECT k FROM o WHERE z > 6 OR EXISTS (SELECT * FROM i WHERE i.g < o.g)",
])
def test_what_stays_refused(sql):
    eng = Engine()
    rng = random.Random(0)
    eng.create_table("o", _o(rng, range(4)), key="k")
    eng.create_table("i", _i(rng, range(4)), key="j")
    with pytest.raises(UnsupportedSqlError):
        eng.register(sql, {"o.k": 2})
