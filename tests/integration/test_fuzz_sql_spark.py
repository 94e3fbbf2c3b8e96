"""The SQL fuzzer with Spark as the third oracle (``benchmarks/fuzz_sql.py``; longer runs:
``IMP_FUZZ_ORACLE=spark imp bench fuzz``): random queries (NULLs in IN lists, ``%``,
``pmod``, ``DIV`` and ``/`` of negative values and decimals, grouping and comparing on
quotients, besides the base grammar) over random update streams; the maintained result,
types included, equals Spark running the SQL text unchanged with ANSI off after
registering and after the last batch, and DuckDB's after every batch where DuckDB means
the same (decimal quotients excepted). ``IMP_FUZZ_SEED`` / ``IMP_FUZZ_CASES`` as in the
unit test."""

from __future__ import annotations

import json
import os

import pytest

from benchmarks.fuzz_sql import run_sql_fuzz

pytestmark = [pytest.mark.spark, pytest.mark.integration]

SEED = int(os.environ.get("IMP_FUZZ_SEED", "3"))
CASES = int(os.environ.get("IMP_FUZZ_CASES", "50"))


def test_random_queries_give_what_spark_returns_for_their_text(spark):
    report = run_sql_fuzz(seed=SEED, queries=CASES, batches=3, oracle="spark",
                          spark_session=spark)
    assert report.findings == [], json.dumps(report.findings, indent=1)
    assert report.registered >= 0.8 * CASES, report.to_json()
    assert report.spark_checks == 2 * report.registered
    assert report.duckdb_skipped > 0  # decimal quotients were drawn (Spark alone checks them)
