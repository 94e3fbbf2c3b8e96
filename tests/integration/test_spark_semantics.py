"""Spark as the third oracle: the user's own SQL text, run unchanged by Spark (ANSI off, a
default session's semantics), gives the rows the engine maintains and the project's own
compiled Spark SQL returns: NULLs in IN lists, ``%`` and ``pmod`` of negative values,
``div``, exact decimal division (Spark's result types), grouping and comparing on
computed decimals, zero divisors, BIGINT sums that overflow, NULLs in ORDER BY, casts of
strings that do not parse and of Java's rarer number forms."""

from __future__ import annotations

from decimal import Decimal

import pyarrow as pa
import pytest

from imp_core.embedded.api import Engine
from imp_core.oracle.results import same_rows

pytestmark = [pytest.mark.spark, pytest.mark.integration]

D = Decimal
R = pa.table({
    "k": pa.array([1, 2, 3, 4, 5, 6], pa.int64()),
    "name": ["ASIA", "EUROPE", "AFRICA", None, "ASIA", "EUROPE"],
    "x": [-7.5, 7.5, -7.0, 1.0, None, 0.1],
    "i": pa.array([-7, 7, -7, 0, 9, None], pa.int64()),
    "d": pa.array([D("24710.35"), D("10.00"), D("3.33"), D("1.00"), D("-4.20"), D("9.99")],
                  pa.decimal128(15, 2)),
    "q": pa.array([D("17.00"), D("3.00"), D("0.00"), D("-3.00"), D("17.00"), None],
                  pa.decimal128(15, 2)),
    "big": pa.array([2**62, 2**62, 1, -2**62, 2**62, 2**62], pa.int64()),
    "t": [" 12 ", "7.9", "x", "2020-1-5", "2020-02-30", None],
    "u": ["1.5d", "0x1.8p1", " 2e3F ", "1_000", "-0X.8P-1d", "-Infinity"],
})
CASES = {
    "not_in_with_null": "SELECT k FROM r WHERE name NOT IN ('ASIA', NULL)",
    "in_with_null": "SELECT k FROM r WHERE name IN ('ASIA', NULL)",
    "not_in": "SELECT k FROM r WHERE name NOT IN ('ASIA', 'AFRICA')",
    "remainders": "SELECT k, x % 2 AS m, pmod(x, 2) AS p, i % 3 AS c, pmod(i, -3) AS pi, "
                  "i DIV 2 AS dv, d % q AS dm, i % 0 AS z, x % 0 AS zx FROM r",
    "decimal_division": "SELECT k, d / q AS r, i / 2 AS h, d / 2 AS d2, d / i AS di, "
                        "x / d AS xd FROM r",
    "group_on_quotient": "SELECT d / q AS p, count(*) AS c FROM r GROUP BY d / q",
    "compare_quotient": "SELECT k FROM r WHERE d / q = 1453.55",
    "string_casts": "SELECT k, CAST(t AS INT) AS i, CAST(t AS BIGINT) AS b, "
                    "CAST(t AS DOUBLE) AS f, CAST(t AS DECIMAL(5,1)) AS m, "
                    "CAST(t AS DATE) AS d FROM r",
    "rounding": "SELECT k, CAST(-0.0000005 AS DECIMAL(38,10)) * CAST(k AS DECIMAL(38,10)) "
                "AS p, round(d, 1) AS r, round(-d, 1) AS nr, round(x, 0) AS rx, "
                "round(x * 0.01, 2) AS rs, round(i, -1) AS ri, round(d) AS r0 FROM r",
    "try_functions": "SELECT k, try_divide(i, i - 7) AS q, try_add(big, big) AS a, "
                     "try_multiply(big, 4) AS m, try_cast(t AS INT) AS c, "
                     "try_subtract(-big, big) AS s FROM r",
    "concatenation": "SELECT k, name || '-' || t AS c, concat(name, t, 'z') AS z FROM r",
    "numeric_casts": "SELECT k, CAST(big AS INT) AS bi, CAST(x AS INT) AS xi, "
                     "CAST(d AS DECIMAL(4,1)) AS dd, CAST(x AS DECIMAL(2,1)) AS xd, "
                     "CAST(d AS INT) AS di, CAST(i AS DECIMAL(2,0)) AS id FROM r",
    "java_number_forms": "SELECT k, CAST(u AS DOUBLE) AS f, CAST(u AS DECIMAL(10,2)) AS m, "
                         "CAST(u AS INT) AS i FROM r",
    "sum_overflow": "SELECT name, sum(big) AS s FROM r GROUP BY name",
    "null_order": "SELECT k, x FROM r ORDER BY x LIMIT 3",
    "null_order_desc": "SELECT k, i FROM r ORDER BY i DESC, k LIMIT 4",
    "having_on_quotient": "SELECT name, sum(d) / sum(q) AS avgp FROM r GROUP BY name "
                          "HAVING sum(d) / sum(q) > 1",
}


@pytest.fixture(scope="module")
def spark():
    from imp_core.spark import get_spark
    from imp_core.spark.tables import arrow_to_dataframe

    session = get_spark()
    arrow_to_dataframe(session, R).createOrReplaceTempView("r")
    return session


def _spark_rows(spark, sql: str) -> pa.Table:
    """``sql`` as the user wrote it, run by Spark with ANSI mode off."""
    before = spark.conf.get("spark.sql.ansi.enabled")
    spark.conf.set("spark.sql.ansi.enabled", "false")
    try:
        return spark.sql(sql).toArrow()
    finally:
        spark.conf.set("spark.sql.ansi.enabled", before)


@pytest.mark.parametrize("name", list(CASES))
def test_the_maintained_result_is_what_spark_returns_for_the_text(spark, name):
    from imp_core.spark import plain_sql

    sql = CASES[name]
    eng = Engine()
    eng.create_table("r", R, key="k")
    q = eng.register(sql, {"r.k": 3}, force=True)
    want = _spark_rows(spark, sql)
    got = q.result()
    assert [f.type for f in got.schema] == [f.type for f in want.schema], name
    assert same_rows(got, want), f"{name}: engine {got.to_pylist()} spark {want.to_pylist()}"
    # the project's own Spark SQL for the plan (the no-sketch baseline)
    compiled = _spark_rows(spark, plain_sql(q.plan))
    assert same_rows(compiled.rename_columns(got.column_names), got), name
    # and the reference evaluator (the non-incremental oracle) agrees
    assert q.reference().bag.items == q.pipeline.result().to_counter(), name
