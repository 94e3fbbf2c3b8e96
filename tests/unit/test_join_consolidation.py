"""A join consolidates the deltas of an input computed by a grouping (here an
aggregation): TPC-DS q2's pattern, a week's sums joined with the seven days of the week
and projected back to the week, reaches the next join as one row of weight 7, so the
pairs above are built once with their weight. The results stay exact (checked against
the reference evaluator after every batch)."""

from __future__ import annotations

import random
from collections import Counter

import pyarrow as pa
import pytest

from imp_core.engine.operators.base import TableDelta
from imp_core.engine.operators.join import JoinOp
from imp_core.engine.pipeline import IncrementalQuery
from imp_core.oracle.reference import reference_capture
from imp_core.sketch.partition import PartitionSet, RangePartition
from imp_core.sql.planner import plan_sql

CATALOG = {"f": pa.schema([("id", pa.int64()), ("wk", pa.int64()), ("v", pa.int64())]),
           "d": pa.schema([("day", pa.int64()), ("wk", pa.int64()), ("yr", pa.int64())])}
WEEKS = 6
SQL = """
WITH w AS (SELECT wk, sum(v) AS t FROM f GROUP BY wk)
SELECT y.wk, y.t, z.t AS t2
FROM (SELECT w.wk, w.t FROM w, d WHERE d.wk = w.wk AND d.yr = 0) y,
     (SELECT w.wk, w.t FROM w, d WHERE d.wk = w.wk AND d.yr = 1) z
WHERE y.wk = z.wk - 3
"""


def _days() -> pa.Table:
    days = [(7 * wk + i, wk, 0 if wk < WEEKS // 2 else 1) for wk in range(WEEKS)
            for i in range(7)]
    return pa.table({"day": [d[0] for d in days], "wk": [d[1] for d in days],
                     "yr": [d[2] for d in days]}, schema=CATALOG["d"])


def _sales(ids: range, rng: random.Random) -> pa.Table:
    return pa.table({"id": list(ids), "wk": [rng.randrange(WEEKS) for _ in ids],
                     "v": [rng.randrange(1, 9) for _ in ids]}, schema=CATALOG["f"])


def _rows(q: IncrementalQuery) -> Counter:
    out: Counter = Counter()
    for (row, _), weight in q.result().to_counter().items():
        out[row] += weight
    return +out


# on the sales: a week's rows carry the ids of its sales; on the weeks of the days (TPC-DS
# q59's advisor attribute, d_week_seq): the seven days of a week share one id
PARTITIONS = {
    "sales": RangePartition.from_ranges("f", "id", pa.int64(),
                                        [(0, 9), (10, 19), (20, 29), (30, 1000)]),
    "days": RangePartition.from_ranges("d", "wk", pa.int64(), [(0, 1), (2, 3), (4, 9)]),
}


@pytest.mark.parametrize("partition", sorted(PARTITIONS))
def test_rows_of_an_aggregation_meet_the_next_join_once_with_their_weight(partition) -> None:
    rng = random.Random(3)
    plan = plan_sql(SQL, CATALOG)
    parts = PartitionSet((PARTITIONS[partition],))
    q = IncrementalQuery(plan, parts)
    sales, days = _sales(range(40), rng), _days()
    q.apply({"f": TableDelta.inserts(sales), "d": TableDelta.inserts(days)})
    (top,) = [op for op in q.operators if isinstance(op, JoinOp) and not op.left_keys]
    # each week's row is held once (weight 7), not once per day
    assert len(top.left.contents()) == WEEKS // 2
    assert sorted(top.left.contents().weights.tolist()) == [7] * (WEEKS // 2)
    for step in range(4):  # delete and insert some sales; compare with the reference
        gone = sales.slice(step * 5, 5)
        fresh = _sales(range(100 + 5 * step, 105 + 5 * step), rng)
        q.apply({"f": TableDelta(pa.concat_tables([gone, fresh]), [-1] * 5 + [1] * 5)})
        sales = pa.concat_tables([sales.slice(0, step * 5), sales.slice(step * 5 + 5), fresh])
        ref = reference_capture(plan, {"f": sales, "d": days}, parts)
        assert q.sketch() == ref.sketch
        assert _rows(q) == ref.rows()
        assert len(top.left.contents()) == WEEKS // 2
