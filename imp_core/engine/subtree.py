"""A plan subtree's annotated contents, computed by the engine from whole tables.

Used where the data layer answers for part of a query without Spark: join sides probed
from the tables' files and refills of exhausted min/max and top-k buffers. The subtree
is wired as a fresh pipeline (every operator unbounded, join sides in memory) and fed
the tables as one insert batch; its result is the subtree's annotated bag (consolidated
only where a weight is not positive: a scan of millions of distinct rows is not grouped
again).

Invariant: the returned batch equals, as a bag, the subtree evaluated over ``tables``
(rows with positive weights, each annotated with the fragments of the input rows it
depends on; equal pairs may stand apart), the same contents the incremental pipeline
holds for that subtree.
"""

from __future__ import annotations

from typing import Mapping

import pyarrow as pa

from imp_core.engine.operators.base import TableDelta
from imp_core.engine.pipeline import EngineOptions, IncrementalQuery
from imp_core.engine.zset import DeltaBatch
from imp_core.plan.nodes import PlanNode, QueryPlan
from imp_core.sketch.partition import PartitionSet

_PLAIN = EngineOptions(use_bloom=False, keep_result=True)


def evaluate_subtree(node: PlanNode, partitions: PartitionSet,
                     tables: Mapping[str, pa.Table]) -> DeltaBatch:
    """``node`` over ``tables`` (each holding at least the columns its scans read)."""
    pipeline = IncrementalQuery(QueryPlan("", node), partitions, _PLAIN)
    pipeline.apply({t: TableDelta.inserts(tables[t]) for t in sorted(node.tables())})
    return pipeline.result_bag()
