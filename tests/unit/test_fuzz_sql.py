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
    # the safe ones also over the sketch instance (no finding: it gave the full result)
    assert report.sketch_instance_checks >= report.registered, report.to_json()


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


WINDOW_SHAPES = ("window_topk", "window_aggregate", "window_over_group")


def test_windows_and_grouping_sets_match_recapture_and_duckdb():
    """Only the window and grouping-set cases of the first draws (about a quarter of them):
    partitioned top-k, aggregates over windows (whole partition, running RANGE and ROWS
    frames), windows over groups (``sum(sum(x)) OVER``), ROLLUP / CUBE / GROUPING SETS
    with grouping() and grouping_id()."""
    report = run_sql_fuzz(seed=SEED, queries=4 * CASES, batches=3,
                          shapes=("window", "grouping_sets"))
    assert report.findings == [], json.dumps(report.findings, indent=1)
    shapes = report.shapes_json()
    assert set(shapes) == {*WINDOW_SHAPES, "grouping_sets"}, shapes
    for shape, counts in shapes.items():  # each shape drawn, and most of it maintained
        assert counts["drawn"] >= 5 and counts["registered"] >= 0.75 * counts["drawn"], \
            (shape, report.to_json())
    assert report.batches >= 2 * report.registered
    assert report.duckdb_skipped <= 0.3 * report.registered, report.to_json()
    assert report.sketch_instance_checks >= report.registered, report.to_json()


def test_window_and_grouping_set_constructs_are_drawn():
    import random

    gens = [QueryGen(random.Random(i)) for i in range(1500)]
    sqls = [(g.query()[0], g) for g in gens]
    drawn = [sql for sql, g in sqls if g.shape.startswith(("window", "grouping_sets"))]
    for construct in ("rank() OVER (PARTITION BY", "dense_rank() OVER", "row_number() OVER",
                      ") t WHERE rk <= ", ") t WHERE rk = 1", "GROUP BY x0", "count(*) OVER",
                      "ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW",
                      "RANGE BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW",
                      "ROWS BETWEEN UNBOUNDED PRECEDING AND UNBOUNDED FOLLOWING",
                      "OVER (ORDER BY", " NULLS FIRST)", " DESC)", "avg(",
                      "GROUP BY ROLLUP(", "GROUP BY CUBE(", "GROUPING SETS ((", ", ())",
                      " WITH ROLLUP", " WITH CUBE", ", ROLLUP(", ", CUBE(", "grouping_id()",
                      "PARTITION BY grouping_id()", "CASE WHEN grouping(", " HAVING x",
                      "HAVING count(*)", "NULLS LAST LIMIT"):
        assert any(construct in sql for sql in drawn), construct
    # a window over a grouped aggregation, as TPC-DS writes sum(sum(x)) OVER (...)
    assert any(re.search(r"(sum|avg|min|max|count)\((sum|count|min|max)\([^()]*\)\) OVER",
                         sql) for sql in drawn)


def test_duckdb_spelling_of_windows_and_grouping_sets_has_sparks_meaning():
    """NULL placement named where Spark's default applies (first ascending, last
    descending; DuckDB's is last), grouping_id() as grouping() of every key, no WITH
    ROLLUP / CUBE; over empty tables the grouping-set queries yield no rows (Spark's
    answer: no grand total without input rows), the window queries run."""
    import random

    import duckdb
    import pyarrow as pa

    from benchmarks.fuzz_sql import DECIMAL_TYPE

    empty = {"r": pa.table({"a": pa.array([], pa.int64()), "b": pa.array([], pa.int64()),
                            "c": pa.array([], pa.int64()), "m": pa.array([], DECIMAL_TYPE)}),
             "s": pa.table({"c": pa.array([], pa.int64()), "d": pa.array([], pa.int64()),
                            "e": pa.array([], pa.int64()), "n": pa.array([], DECIMAL_TYPE)})}
    con = duckdb.connect()
    for name, table in empty.items():
        con.register(name, table)
    checked = 0
    for i in range(600):
        gen = QueryGen(random.Random(i))
        sql = gen.query()[0]
        duck = gen.duckdb_sql(sql)
        if duck is None or not gen.shape.startswith(("window", "grouping_sets")):
            continue
        for body in _over_clauses(duck):
            if "ORDER BY " in body:
                order = body.split("ORDER BY ", 1)[1].split(" ROWS ")[0].split(" RANGE ")[0]
                for key in order.split(", "):
                    assert key.endswith(("NULLS FIRST", "NULLS LAST")), (key, duck)
        assert "grouping_id(" not in duck and " WITH " not in duck, duck
        rows = con.sql(duck).fetchall()
        if gen.shape == "grouping_sets":
            assert "count(*) > 0" in duck and rows == [], duck
        checked += 1
    assert checked >= 100


def _over_clauses(sql: str) -> list[str]:
    """The text inside each ``OVER (...)`` of ``sql``."""
    bodies = []
    for match in re.finditer(r"OVER \(", sql):
        depth, i = 1, match.end()
        while depth:
            depth += {"(": 1, ")": -1}.get(sql[i], 0)
            i += 1
        bodies.append(sql[match.end():i - 1])
    return bodies
