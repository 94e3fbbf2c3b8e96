"""A bounded run of the SQL fuzzer (``benchmarks/fuzz_sql.py``; longer runs: ``imp bench
fuzz``): random queries of the supported grammar over random small tables and random
update streams; the maintained sketch equals the recapture and the maintained result
equals DuckDB's after every batch. ``IMP_FUZZ_SEED`` picks another seed, ``IMP_FUZZ_CASES``
more cases."""

from __future__ import annotations

import json
import os

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


def test_the_generator_covers_the_grammar():
    import random

    sqls = [QueryGen(random.Random(i)).query()[0] for i in range(400)]
    for construct in ("JOIN", "LEFT JOIN", "FULL OUTER JOIN", "GROUP BY", "HAVING",
                      "LIMIT", "EXISTS", "NOT EXISTS", " IN (SELECT", "NOT IN (SELECT",
                      "count(DISTINCT", "BETWEEN", "IS NULL", " OR ", "(SELECT avg(e)"):
        assert any(construct in sql for sql in sqls), construct
