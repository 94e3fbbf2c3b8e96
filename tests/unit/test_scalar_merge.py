"""Scalar subqueries of one SELECT list over one table, merged into one aggregation
(``imp_core.sql.scalar_merge``).

The maintained result must equal DuckDB's and the sketch the recapture after every
random batch, with either table partitioned (the merged row's provenance is the union
of the members' input rows); the plan must hold one aggregation for the merged members
and leave alone those the merge must not touch (a DISTINCT aggregate, a predicate that
may raise under ANSI mode, another alias of the table, another table).
"""

from __future__ import annotations

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_sql_subqueries import maintain_and_compare

from imp_core.plan.nodes import Aggregate, OuterJoin
from imp_core.sql.planner import plan_sql

QUERIES = [
    # TPC-DS q9's shape: a COUNT picks which of two averages of the same bucket is shown
    ("buckets", "SELECT a, CASE WHEN (SELECT count(*) FROM s WHERE d BETWEEN 0 AND 1) > 1 "
                "THEN (SELECT avg(e) FROM s WHERE d BETWEEN 0 AND 1) "
                "ELSE (SELECT sum(e) FROM s WHERE d BETWEEN 0 AND 1) END AS b1, "
                "CASE WHEN (SELECT count(*) FROM s WHERE d BETWEEN 2 AND 4) > 0 "
                "THEN (SELECT min(e) FROM s WHERE d BETWEEN 2 AND 4) "
                "ELSE (SELECT max(c) FROM s WHERE d BETWEEN 2 AND 4) END AS b2 "
                "FROM r WHERE b IS NOT NULL"),
    # values over several aggregates and over no rows, a member without WHERE, IN, OR
    ("values", "SELECT a, (SELECT count(e) * 2 + coalesce(max(e), 1) FROM s WHERE d = 2) AS x, "
               "(SELECT count(*) FROM s) AS n, "
               "(SELECT avg(e) FROM s WHERE d IN (1, 3) OR e IS NULL) AS m FROM r"),
    # members of two tables: each table's members merged on their own
    ("two_tables", "SELECT a, (SELECT max(e) FROM s WHERE d > 1) AS x, "
                   "(SELECT min(e) FROM s WHERE d <= 1) AS y, "
                   "(SELECT count(*) FROM r WHERE c > 2) AS z, "
                   "(SELECT sum(b) FROM r WHERE c <= 2) AS w FROM r"),
]


@pytest.mark.parametrize("name,sql", QUERIES, ids=[n for n, _ in QUERIES])
@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_maintained_result_equals_duckdb(name, sql, data):
    attributes = data.draw(st.sampled_from([("r.a",), ("s.c",), ("r.a", "s.c")]))
    maintain_and_compare(sql, data, attributes)


SCHEMAS = {"r": pa.schema([("a", pa.int64()), ("b", pa.int64()), ("c", pa.int64())]),
           "s": pa.schema([("c", pa.int64()), ("d", pa.int64()), ("e", pa.int64()),
                           ("t", pa.string())])}


def _one_rows(sql: str) -> int:
    """The one-row relations LEFT joined to the outer rows."""
    root = plan_sql(sql, SCHEMAS).root
    return sum(1 for n in root.walk() if isinstance(n, OuterJoin) and n.condition is None)


def test_members_over_one_table_are_one_aggregation():
    root = plan_sql(QUERIES[0][1], SCHEMAS).root
    aggregates = [n for n in root.walk() if isinstance(n, Aggregate)]
    assert len(aggregates) == 1 and len(aggregates[0].aggregates) == 6
    assert _one_rows(QUERIES[0][1]) == 1
    assert _one_rows(QUERIES[2][1]) == 2


@pytest.mark.parametrize("second", [
    "(SELECT count(DISTINCT e) FROM s WHERE d > 1)",  # DISTINCT beside other aggregates
    "(SELECT max(e) FROM s WHERE d + 1 > 2)",  # arithmetic: may overflow under ANSI mode
    "(SELECT max(e) FROM s WHERE t > 2)",  # a string compared with a number: a cast
    "(SELECT max(x.e) FROM s x WHERE x.d > 1)",  # another name for the table
    "(SELECT max(e) FROM s WHERE e > (SELECT min(d) FROM s))",  # not a plain selection
])
def test_members_the_merge_leaves_alone(second):
    sql = f"SELECT a, (SELECT min(e) FROM s WHERE d < 3) AS x, {second} AS y FROM r"
    assert _one_rows(sql) == 2
