"""Join keys computed from one side (``imp_core.sql.join_keys``).

The planner turns a conjunct ``e1 = e2`` over one side's columns each into an equi-join
key (computed below the join, projected away above it). End to end through the
embedded Engine against DuckDB and the recapture (tables r and s of
``test_sql_subqueries``: int64 columns with NULLs and duplicates), including the
conjuncts it must leave as residuals; and the plan's shape: which joins got keys, and
the same output schema as without the rewrite.
"""

from __future__ import annotations

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_sql_subqueries import maintain_and_compare

from imp_core.plan.nodes import Join
from imp_core.sql.join_keys import key_expressions
from imp_core.sql.planner import plan_sql

QUERIES = [
    ("shifted", "SELECT r.a, s.c FROM r JOIN s ON r.b = s.d + 1"),
    ("both_sides", "SELECT r.a, s.e FROM r JOIN s ON r.b * 2 = s.d - 1 AND r.c = s.e"),
    ("lag_and_lead", "SELECT x.a, y.a AS ya, z.a AS za FROM r x JOIN r y ON x.b = y.b "
                     "AND x.c = y.c + 1 JOIN r z ON x.b = z.b AND x.c = z.c - 1"),
    ("mixed_sides_stay", "SELECT r.a, s.c FROM r JOIN s ON r.b = s.d + r.c"),
    ("over_aggregates", "SELECT u.b, u.n, v.n AS m FROM (SELECT b, count(*) AS n FROM r "
                        "GROUP BY b) u JOIN (SELECT d, count(*) AS n FROM s GROUP BY d) v "
                        "ON u.b = v.d - 1"),
]


@pytest.mark.parametrize("name,sql", QUERIES, ids=[n for n, _ in QUERIES])
@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_maintained_result_equals_duckdb(name, sql, data):
    maintain_and_compare(sql, data, ("r.a", "s.c") if "JOIN s" in sql else ("r.a",))


CATALOG = {"r": pa.schema([("a", pa.int64()), ("b", pa.int64()), ("c", pa.int32())]),
           "s": pa.schema([("c", pa.int64()), ("d", pa.int64()), ("e", pa.decimal128(9, 2)),
                           ("f", pa.float64()), ("g", pa.string())])}


def _keys(sql: str) -> list[tuple[tuple[str, ...], tuple[str, ...]]]:
    root = plan_sql(sql, CATALOG).root
    return [j.equi_keys()[:2] for j in root.walk() if isinstance(j, Join)]


def test_expression_keys_and_the_conjuncts_left_as_residuals():
    ((left, right),) = _keys("SELECT r.a FROM r JOIN s ON r.b = s.d + 1")
    assert left == ("r.b",) and right[0].startswith("__jk")
    # an int32 expression against an int64 column: integers hash alike
    ((left, right),) = _keys("SELECT r.a FROM r JOIN s ON r.c + 1 = s.c")
    assert left[0].startswith("__jk") and right == ("s.c",)
    # a string key computed from one side
    ((left, right),) = _keys("SELECT r.a FROM r JOIN s ON concat('k', r.b) = s.g")
    assert left[0].startswith("__jk") and right == ("s.g",)
    # left as residuals: both sides' columns in one expression, floats (NaN, -0.0),
    # types that hash apart (an integer against a decimal)
    for sql in ("SELECT r.a FROM r JOIN s ON r.b = s.d + r.a",
                "SELECT r.a FROM r JOIN s ON r.b + 0.5 = s.f",
                "SELECT r.a FROM r JOIN s ON r.b = s.e * 2"):
        ((left, right),) = _keys(sql)
        assert left == () and right == (), sql


def test_the_rewrite_keeps_the_output_schema(monkeypatch):
    sql = "SELECT * FROM r JOIN s ON r.b = s.d - 53 AND r.c = s.c"
    monkeypatch.setattr("imp_core.sql.planner.key_expressions", lambda root: root)
    plain = plan_sql(sql, CATALOG).root  # as planned without the rewrite
    monkeypatch.undo()
    keyed = plan_sql(sql, CATALOG).root
    assert [j.equi_keys()[0] for j in plain.walk() if isinstance(j, Join)] == [("r.c",)]
    assert keyed.schema == plain.schema
    assert key_expressions(plain).schema == plain.schema
    assert not any(c.startswith("__jk") for c in keyed.column_names)
