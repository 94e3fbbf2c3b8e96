"""A bounded run of the SQL fuzzer (``benchmarks/fuzz_sql.py``; longer runs: ``imp bench
fuzz``): random queries of the supported grammar over random small tables and random
update streams; the maintained sketch equals the recapture and the maintained result
equals DuckDB's after every batch (queries dividing a decimal excepted: DuckDB's quotient
is a DOUBLE, Spark's exact; ``tests/integration/test_fuzz_sql_spark.py`` compares those with
Spark). ``IMP_FUZZ_SEED`` picks another seed, ``IMP_FUZZ_CASES`` more cases."""

from __future__ import annotations

import json
import os
import re

from benchmarks.fuzz_sql import QueryGen, run_sql_fuzz

SEED = int(os.environ.get("IMP_FUZZ_SEED", "0"))
CASES = int(os.environ.get("IMP_FUZZ_CASES", "60"))


def test_random_queries_and_update_streams_match_recapture_and_duckdb():
    report = run_sql_fuzz(seed=SEED, queries=CASES, batches=4)
    assert report.findings == [], json.dumps(report.findings, indent=1)
    assert report.queries == CASES
    # the grammar is the supported one: most cases register and are maintained
    assert report.registered >= 0.8 * CASES, report.to_json()
    assert report.batches >= 3 * report.registered
    # most cases are still compared with DuckDB (those dividing a decimal are not)
    assert report.duckdb_skipped <= 0.4 * report.registered, report.to_json()


def test_the_generator_covers_the_grammar():
    import random

    sqls = [QueryGen(random.Random(i)).query()[0] for i in range(400)]
    for construct in ("JOIN", "LEFT JOIN", "FULL OUTER JOIN", "GROUP BY", "HAVING",
                      "LIMIT", "EXISTS", "NOT EXISTS", " IN (SELECT", "NOT IN (SELECT",
                      "count(DISTINCT", "BETWEEN", "IS NULL", " OR ", "(SELECT avg(e)",
                      # Spark's semantics (issue 31): NULLs in IN lists, remainders and
                      # quotients of negative values and decimals, grouped and compared
                      " NOT IN (", ", NULL", "NULL,", " % ", "pmod(", " DIV ", "r.m / ",
                      "s.n / ", "GROUP BY r.m /", "/ count(*)", "-0.25", "-3)", "% -3",
                      # set operations (issue 32), nested and ordered
                      " UNION ALL ", " UNION SELECT", " INTERSECT ", " INTERSECT ALL ",
                      " EXCEPT ", " EXCEPT ALL ", ") UNION", "NULLS LAST LIMIT"):
        assert any(construct in sql for sql in sqls), construct
    assert any(re.search(r"/ \S+ (=|<>|<|<=|>|>=) ", sql) for sql in sqls)  # quotients compared


def test_duckdb_spells_spark_remainders_and_leaves_decimal_quotients_to_spark():
    import random

    gen = QueryGen(random.Random(0))
    gen._duck = {"pmod(r.b, -3)": "P", "r.b / r.c": "Q", "r.b DIV 2": "D"}
    assert gen.duckdb_sql("SELECT pmod(r.b, -3), r.b / r.c, r.b DIV 2 FROM r") == \
        "SELECT P, Q, D FROM r"
    gen.decimal_quotient = True
    assert gen.duckdb_sql("SELECT r.m / 2 FROM r") is None
