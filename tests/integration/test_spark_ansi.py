"""Spark's ANSI mode as the oracle: the user's SQL text, run unchanged by Spark with
``spark.sql.ansi.enabled = true``, raises the error class the engine's registered query
raises on the same rows (zero divisors, overflows, strings that are no number, SUMs beyond
their type), and returns the rows the engine maintains where it does not raise (the
guards Spark evaluates lazily: CASE, AND, OR, COALESCE)."""

from __future__ import annotations

from decimal import Decimal

import pyarrow as pa
import pytest

from imp_core.embedded.api import Engine
from imp_core.errors import SqlRuntimeError
from imp_core.oracle.results import same_rows
from imp_core.spark.errors import spark_error_class

pytestmark = [pytest.mark.spark, pytest.mark.integration]

D = Decimal
R = pa.table({
    "k": pa.array([1, 2, 3, 4, 5], pa.int64()),
    "a": pa.array([7, -7, 2**62, 2**62, None], pa.int64()),
    "b": pa.array([0, 2, 1, 3, 1], pa.int64()),
    "s": ["1", " 2 ", "x", None, "5"],
    "d": pa.array([D("9" * 36 + ".00"), D("1.50"), D("2.00"), None, D("3.00")],
                  pa.decimal128(38, 2)),
})
RAISES = {
    "zero_divisor": "SELECT k, a / b AS r FROM r",
    "zero_remainder": "SELECT k FROM r WHERE a % b = 1",
    "zero_div": "SELECT k, a DIV b AS q FROM r",
    "zero_pmod": "SELECT k, pmod(a, b) AS q FROM r",
    "bigint_overflow": "SELECT k, a + a AS r FROM r WHERE k = 3",
    "bad_cast": "SELECT k, CAST(s AS INT) AS i FROM r",
    "fraction_cast": "SELECT k, CAST(s || '.5' AS INT) AS i FROM r WHERE k <> 3",
    "decimal_overflow": "SELECT k, d * 10 AS m FROM r",
    "cast_overflow": "SELECT k, CAST(a AS INT) AS i FROM r",
    "subquery_rows": "SELECT k FROM r WHERE b = (SELECT b FROM r WHERE k < 3)",
    "cast_decimal_overflow": "SELECT k, CAST(d AS DECIMAL(5,2)) AS c FROM r",
    "sum_overflow": "SELECT sum(a) AS s FROM r WHERE k >= 3",
}
WELL = {
    "case_guard": "SELECT k, CASE WHEN b = 0 THEN NULL ELSE a / b END AS r FROM r",
    "and_guard": "SELECT k FROM r WHERE b <> 0 AND a / b < 0",
    "or_guard": "SELECT k FROM r WHERE b = 0 OR a / b < 0",
    "coalesce_guard": "SELECT k, coalesce(b, a / b) AS c FROM r",
    "filtered_first": "SELECT k, CAST(s AS INT) AS i FROM r WHERE k <> 3",
    "subquery_one_row": "SELECT k FROM r WHERE b = (SELECT b FROM r WHERE k = 2)",
    "subquery_no_row": "SELECT k FROM r WHERE b > (SELECT DISTINCT b FROM r WHERE k > 9)",
}


@pytest.fixture(scope="module")
def spark():
    from imp_core.spark import get_spark
    from imp_core.spark.tables import arrow_to_dataframe

    session = get_spark()
    arrow_to_dataframe(session, R).createOrReplaceTempView("r")
    return session


def _spark(spark, sql: str) -> pa.Table | str:
    """Spark's rows for ``sql`` with ANSI mode on, or the error class it raises."""
    before = spark.conf.get("spark.sql.ansi.enabled")
    spark.conf.set("spark.sql.ansi.enabled", "true")
    try:
        return spark.sql(sql).toArrow()
    except Exception as error:  # noqa: BLE001 - Spark's exceptions carry the class
        return spark_error_class(error)
    finally:
        spark.conf.set("spark.sql.ansi.enabled", before)


def _engine(sql: str) -> pa.Table | str:
    eng = Engine(ansi=True)
    eng.create_table("r", R, key="k")
    q = eng.register(sql, {"r.k": 4})
    try:
        return q.result()
    except SqlRuntimeError as error:
        return error.error_class


@pytest.mark.parametrize("name", list(RAISES))
def test_the_query_raises_what_spark_raises(spark, name):
    sql = RAISES[name]
    theirs = _spark(spark, sql)
    assert isinstance(theirs, str), f"Spark did not raise for {sql}"
    assert _engine(sql) == theirs.split(".")[0]  # a sub-class: NUMERIC_..._RANGE.WITH_...


@pytest.mark.parametrize("name", list(WELL))
def test_rows_spark_skips_do_not_raise_and_the_rows_are_spark_s(spark, name):
    sql = WELL[name]
    theirs = _spark(spark, sql)
    assert not isinstance(theirs, str), f"Spark raised {theirs} for {sql}"
    ours = _engine(sql)
    assert not isinstance(ours, str), ours
    assert same_rows(ours, theirs.cast(ours.schema))
