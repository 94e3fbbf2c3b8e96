"""Equal subplans share one operator (``IncrementalQuery._wire``).

A CTE read twice, a self-join of a derived table, groups compared with an aggregate of
the same groups: the planner gives each copy its own, equal, subtree. The pipeline wires
one operator for them, steps it once per batch and hands its output to every parent.
The maintained result must equal DuckDB's and the sketch the recapture after every
random batch (``maintain_and_compare``), the pipeline must hold fewer operators than the
plan has nodes, snapshots must round-trip, and the memory estimate counts the shared
state once.
"""

from __future__ import annotations

from collections import Counter

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_sql_subqueries import maintain_and_compare

from imp_core.engine.operators.aggregate import AggregateOp
from imp_core.engine.operators.base import TableDelta
from imp_core.engine.operators.window import WindowOp
from imp_core.engine.pipeline import IncrementalQuery
from imp_core.estimate.memory import estimate_plan
from imp_core.estimate.table_stats import ColumnStats, TableStats
from imp_core.plan.nodes import Aggregate, PlanNode, Window
from imp_core.sketch.partition import PartitionSet, RangePartition
from imp_core.sql.planner import plan_sql

QUERIES = [
    # one CTE joined with itself: both inputs of the join are one operator
    ("cte_self_join", "WITH g AS (SELECT b, sum(c) AS t FROM r GROUP BY b) "
                      "SELECT x.b, x.t, y.t AS u FROM g x JOIN g y ON x.b = y.b + 1"),
    # TPC-DS q47 / q57: a ranked CTE read three times, joined on neighbouring ranks
    ("cte_three_copies", "WITH v AS (SELECT b, sum(c) AS t, rank() OVER (ORDER BY b) AS rn "
                         "FROM r WHERE b IS NOT NULL GROUP BY b) "
                         "SELECT v.b, v.t, p.t AS pt, n.t AS nt FROM v, v p, v n "
                         "WHERE v.rn = p.rn + 1 AND v.rn = n.rn - 1"),
    # TPC-DS q57 in small: the copy read for the main row also takes a partition-wide
    # average, the neighbours' copies only the rank
    ("ranked_copies_one_averaged",
     "WITH v AS (SELECT a % 3 AS k, b, sum(c) AS t, avg(sum(c)) OVER (PARTITION BY a % 3) "
     "AS m, rank() OVER (PARTITION BY a % 3 ORDER BY b) AS rn FROM r WHERE b IS NOT NULL "
     "GROUP BY a % 3, b) SELECT v.k, v.b, v.t, v.m, p.t AS pt, n.t AS nt FROM v, v p, v n "
     "WHERE v.k = p.k AND v.k = n.k AND v.rn = p.rn + 1 AND v.rn = n.rn - 1"),
    # the same groups under two different filters, united
    ("cte_union", "WITH g AS (SELECT b, count(*) AS n FROM r GROUP BY b) "
                  "SELECT b FROM g WHERE n > 1 UNION ALL SELECT b FROM g WHERE n = 1"),
    # TPC-DS q30 / q81: groups against the average of the same groups per key
    ("groups_against_their_average",
     "WITH g AS (SELECT a % 3 AS k, b, sum(c) AS t FROM r GROUP BY a % 3, b) "
     "SELECT x.k, x.b, x.t FROM g x WHERE x.t > (SELECT avg(t) FROM g y WHERE y.k = x.k)"),
    # groups of rows with partners against the average of the same groups
    ("filtered_groups_against_their_average",
     "WITH g AS (SELECT b, sum(c) AS t FROM r WHERE EXISTS (SELECT * FROM s WHERE s.d = r.b) "
     "GROUP BY b) SELECT b, t FROM g WHERE t >= (SELECT avg(t) FROM g)"),
    # groups above the average of all groups (one uncorrelated copy)
    ("groups_against_all", "SELECT b, sum(c) AS t FROM r GROUP BY b HAVING sum(c) >= "
                           "(SELECT avg(t) FROM (SELECT b, sum(c) AS t FROM r GROUP BY b) z)"),
]

SCHEMAS = {"r": pa.schema([("a", pa.int64()), ("b", pa.int64()), ("c", pa.int64())]),
           "s": pa.schema([("c", pa.int64()), ("d", pa.int64()), ("e", pa.int64())])}


@pytest.mark.parametrize("name,sql", QUERIES, ids=[n for n, _ in QUERIES])
@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_maintained_result_equals_duckdb(name, sql, data):
    maintain_and_compare(sql, data)


def _repeated(root: PlanNode) -> Counter:
    """Stateful subplans that occur more than once in ``root``."""
    seen = Counter(n for n in root.walk() if isinstance(n, Aggregate))
    return Counter({n: c for n, c in seen.items() if c > 1})


def _partitions() -> PartitionSet:
    return PartitionSet((RangePartition("r", "a", pa.int64(), (4, 8)),))


@pytest.mark.parametrize("name,sql", QUERIES, ids=[n for n, _ in QUERIES])
def test_equal_subplans_are_one_operator(name, sql):
    plan = plan_sql(sql, SCHEMAS)
    repeated = _repeated(plan.root)
    assert repeated, "the query should repeat an aggregation"
    q = IncrementalQuery(plan, _partitions())
    aggregates = [op for op in q.operators if isinstance(op, AggregateOp)]
    distinct = {n for n in plan.root.walk() if isinstance(n, Aggregate)}
    assert len(aggregates) == len(distinct) < sum(1 for n in plan.root.walk()
                                                  if isinstance(n, Aggregate))
    assert len({op.op_id for op in q.operators}) == len(q.operators)


def test_a_shared_operator_steps_once_per_batch_and_snapshots_round_trip():
    plan = plan_sql(QUERIES[1][1], SCHEMAS)
    q = IncrementalQuery(plan, _partitions())
    r = pa.table({"a": pa.array(range(10), pa.int64()),
                  "b": pa.array([i % 5 for i in range(10)], pa.int64()),
                  "c": pa.array(range(10), pa.int64())})
    q.apply({"r": TableDelta.inserts(r)})
    (agg,) = [op for op in q.operators if isinstance(op, AggregateOp)]
    assert agg.stats.calls == 1  # three copies in the plan, one step
    again = IncrementalQuery(plan, _partitions())
    again.restore(q.snapshot())
    more = pa.table({"a": [10, 11, 2], "b": [5, 6, 0], "c": [3, 4, 9]}, schema=SCHEMAS["r"])
    for pipeline in (q, again):
        pipeline.apply({"r": TableDelta.inserts(more)})
    assert again.sketch() == q.sketch()
    assert again.result().to_counter() == q.result().to_counter()
    assert agg.stats.calls == 2


def test_windows_over_a_whole_partition_run_last_and_copies_share_the_others():
    """A partition-wide window re-emits every row of a touched partition, so the planner
    stacks it above the ordered windows of the same SELECT; the rank then reads the
    groups' small delta, and the copies of the block that need no average use the same
    rank operator (their call columns are named for what they compute)."""
    sql = dict(QUERIES)["ranked_copies_one_averaged"]
    plan = plan_sql(sql, SCHEMAS)
    stacks = {tuple(_frames(n)) for n in plan.root.walk() if isinstance(n, Window)}
    assert stacks == {("range",), ("range", "partition")}  # innermost first
    q = IncrementalQuery(plan, _partitions())
    windows = [op for op in q.operators if isinstance(op, WindowOp)]
    assert sorted(op.window.frame for op in windows) == ["partition", "range"]
    (rank,) = [op for op in windows if op.window.frame == "range"]
    r = pa.table({"a": pa.array(range(12), pa.int64()),
                  "b": pa.array([i % 4 for i in range(12)], pa.int64()),
                  "c": pa.array(range(12), pa.int64())})
    q.apply({"r": TableDelta.inserts(r)})
    assert rank.stats.calls == 1  # three copies of the block, one rank step


def _frames(top: Window) -> list[str]:
    """The frames of the windows stacked under ``top``, innermost first."""
    frames = []
    node: PlanNode = top
    while isinstance(node, Window):
        frames.append(node.frame)
        node = node.input
    return frames[::-1]


def test_the_memory_estimate_counts_shared_state_once():
    plan = plan_sql(QUERIES[0][1], SCHEMAS)
    stats = {"r": TableStats(1000, {"b": ColumnStats(distinct=50)})}
    est = estimate_plan(plan.root, stats, fragments=4)
    by_node: dict[PlanNode, list] = {}
    for o in est.operators:
        by_node.setdefault(o.node, []).append(o)
    (first, repeat), = [v for v in by_node.values() if len(v) == 2
                        and isinstance(v[0].node.children()[0], Aggregate)]
    assert first.state_bytes == 0 and repeat.state_bytes == 0  # projections hold nothing
    assert repeat.rows == first.rows > 0
    aggregates = [o for o in est.operators if isinstance(o.node, Aggregate)]
    assert len(aggregates) == 1 and aggregates[0].state_bytes > 0
