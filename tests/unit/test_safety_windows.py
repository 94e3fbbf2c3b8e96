"""Safety of sketch attributes for windowed queries (rules 11 and 12 of
``imp_core.safety``, ``imp_core/safety/window.py``).

Every refusal comes with a small instance on which the refused sketch really changes the
result (the accurate sketch from ``reference_capture``, the tables cut to it with
``restrict_to_sketch``, the query evaluated again). Every accepted query is checked on
random small tables and random range partitions: the result over the sketch instance
equals the full result.
"""

from __future__ import annotations

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from imp_core.embedded.api import Engine
from imp_core.oracle.reference import reference_capture, restrict_to_sketch
from imp_core.safety import check_attribute
from imp_core.sketch.partition import PartitionSet, RangePartition

TOPK = ("SELECT a, b FROM (SELECT a, b, {f}() OVER (PARTITION BY b ORDER BY c DESC) AS rk "
        "FROM r) x WHERE rk <= 1")
SAFE = [
    # rule 12: a partitioned top-k, every row of it reaching the result
    ("rank_topk", TOPK.format(f="rank"), "a"),
    ("dense_rank_topk", TOPK.format(f="dense_rank"), "a"),
    ("row_number_topk", TOPK.format(f="row_number"), "a"),
    ("rank_topk_then_aggregate", "SELECT b, count(*) AS n FROM (SELECT b, rank() OVER "
                                 "(PARTITION BY b ORDER BY c) AS rk FROM r) x WHERE rk < 3 "
                                 "GROUP BY b", "c"),
    # rule 11: the attribute determines the partition, so a filter on its values is safe
    ("partition_by_attribute", "SELECT b, c FROM (SELECT b, c, sum(c) OVER (PARTITION BY b) "
                               "AS s FROM r) x WHERE s > 5", "b"),
    # rule 11 + rule 3: window values that never decide whether a row reaches the result
    ("projected_only", "SELECT a, sum(c) OVER (PARTITION BY b) AS s, rank() OVER "
                       "(PARTITION BY b ORDER BY c) AS rk FROM r", "a"),
    # q70's inner shape on the group key: the ranked sums are exact
    ("q70_on_group_key", "SELECT b FROM (SELECT b, rank() OVER (ORDER BY sum(c) DESC) AS rk "
                         "FROM r GROUP BY b) x WHERE rk <= 1", "b"),
    # q70's inner shape on another attribute: PARTITION BY the group key, one row each
    ("one_row_partitions", "SELECT b FROM (SELECT b, rank() OVER (PARTITION BY b ORDER BY "
                           "sum(c) DESC) AS rk FROM r GROUP BY b) x WHERE rk <= 1", "a"),
    # rule 13 (q36, q86): the ROLLUP's grand total sorts first, so it reaches the result
    # and the sketch holds every input row: the ranked sums are exact
    ("grand_total_first", "SELECT b, sum(c) AS s, grouping(b) AS g, rank() OVER (PARTITION "
                          "BY grouping(b) ORDER BY sum(c) DESC) AS rk FROM r GROUP BY "
                          "ROLLUP(b) ORDER BY g DESC, rk LIMIT 2", "a"),
    ("grand_total_by_grouping_id", "SELECT b, c, rank() OVER (ORDER BY count(*), b, c) AS "
                                   "rk FROM r WHERE c > 0 GROUP BY CUBE(b, c) ORDER BY "
                                   "grouping_id(b, c) DESC, rk LIMIT 3", "b"),
    ("grand_total_unordered", "SELECT b, max(c) AS m, rank() OVER (ORDER BY max(c)) AS rk "
                              "FROM r GROUP BY ROLLUP(b)", "a"),
]

# (name, SQL, attribute, rows of r as (a, b, c), split points on the attribute)
UNSAFE = [
    # a sum over part of a partition can pass where the whole one fails: b=1 sums to 0
    # (fails), b=2 to 6 (passes, keeping fragment [0, 3) that holds a=1 of b=1 too)
    ("partition_sum_filtered", "SELECT b, c FROM (SELECT b, c, sum(c) OVER (PARTITION BY b) "
     "AS s FROM r) x WHERE s > 5", "a", [(1, 1, 10), (3, 1, -10), (2, 2, 6)], [3]),
    # a filter beside the rank drops the first row of b=1, so its fragment is not kept and
    # the second row ranks first in the sketch instance
    ("rank_filter_with_other_condition", "SELECT a FROM (SELECT a, c, rank() OVER "
     "(PARTITION BY b ORDER BY a) AS rk FROM r) x WHERE rk <= 1 AND c > 0", "a",
     [(1, 1, -1), (2, 1, 5), (3, 2, 5)], [2]),
    # ranking partial sums (q70 on another attribute): b=2 loses its negative row
    ("rank_over_partial_sums", "SELECT b FROM (SELECT b, rank() OVER (ORDER BY sum(c) DESC) "
     "AS rk FROM r GROUP BY b) x WHERE rk <= 1", "a",
     [(0, 1, 5), (3, 1, 5), (1, 2, 12), (6, 2, -5)], [3, 6]),
    # the grand total sorts last, so it need not reach the result: the ranks are of
    # partial sums (b=2 loses its negative row)
    ("grand_total_last", "SELECT b, grouping(b) AS g, rank() OVER (PARTITION BY grouping(b) "
     "ORDER BY sum(c) DESC) AS rk FROM r GROUP BY ROLLUP(b) ORDER BY g, rk LIMIT 1", "a",
     [(0, 1, 5), (3, 1, 5), (1, 2, 12), (6, 2, -5)], [3, 6]),
    # a selection drops the grand total, so nothing proves the sketch holds every row
    ("grand_total_filtered", "SELECT b, rk FROM (SELECT b, rank() OVER (PARTITION BY "
     "grouping(b) ORDER BY sum(c) DESC) AS rk FROM r GROUP BY ROLLUP(b)) x WHERE b IS NOT "
     "NULL ORDER BY rk LIMIT 1", "a", [(0, 1, 5), (3, 1, 5), (1, 2, 12), (6, 2, -5)], [3, 6]),
    # a join above the top-k drops its first row, and the second moves up
    ("topk_under_join", "SELECT x.a FROM (SELECT a, b, rank() OVER (PARTITION BY b ORDER BY "
     "a) AS rk FROM r) x JOIN r y ON x.a = y.c WHERE x.rk <= 1", "a",
     [(1, 1, 9), (2, 1, 5), (5, 2, 2)], [2]),
]


def _engine(rows) -> Engine:
    eng = Engine()
    eng.create_table("r", pa.table({
        "a": pa.array([x for x, _, _ in rows], pa.int64()),
        "b": pa.array([y for _, y, _ in rows], pa.int64()),
        "c": pa.array([z for _, _, z in rows], pa.int64())}))
    return eng


def _full_and_sketched(eng: Engine, sql: str, attribute: str, bounds):
    q = eng.register(sql, {f"r.{attribute}": bounds}, force=True)
    tables = eng.tables()
    full = reference_capture(q.plan, tables, q.partitions)
    cut = reference_capture(q.plan, restrict_to_sketch(tables, full.sketch), q.partitions)
    return q, full.rows(), cut.rows()


@pytest.mark.parametrize("name,sql,attribute", SAFE, ids=[s[0] for s in SAFE])
def test_safe_windows_are_accepted(name, sql, attribute):
    q = _engine([(1, 1, 1)]).register(sql, {f"r.{attribute}": 2}, force=True)
    verdict = check_attribute(q.plan, "r", attribute, table_columns=COLUMNS)
    assert verdict.safe, verdict.reason


@pytest.mark.parametrize("name,sql,attribute,rows,bounds", UNSAFE, ids=[u[0] for u in UNSAFE])
def test_refused_windows_have_a_counterexample(name, sql, attribute, rows, bounds):
    eng = _engine(rows)
    q, full, cut = _full_and_sketched(eng, sql, attribute, bounds)
    verdict = check_attribute(q.plan, "r", attribute, table_columns=COLUMNS)
    assert not verdict.safe, name
    assert full != cut, f"{name}: the instance shows no difference ({full})"


COLUMNS = {"r": ["a", "b", "c"]}
ROWS = st.lists(st.tuples(st.integers(0, 9), st.integers(0, 2), st.integers(-3, 5)),
                max_size=8)


@pytest.mark.parametrize("name,sql,attribute", SAFE, ids=[s[0] for s in SAFE])
@settings(max_examples=40, deadline=None)
@given(rows=ROWS, bounds=st.lists(st.integers(-3, 9), max_size=3, unique=True))
def test_accepted_windows_give_the_full_result_over_the_sketch(name, sql, attribute, rows,
                                                               bounds):
    eng = _engine(rows)
    q, full, cut = _full_and_sketched(eng, sql, attribute, sorted(bounds))
    assert full == cut


def test_partitions_built_for_tests_are_ranges():
    part = RangePartition.from_bounds("r", "a", pa.int64(), [3])
    assert PartitionSet((part,)).size == 2
