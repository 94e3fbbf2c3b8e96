"""Re-splitting a query's operator state from K shards into K' without reading any table.

The shards' states (``IncrementalQuery.state_tables``) are first united, then cut again
by the shard of each piece's routing value (``imp_actors.sharding``); the state tables
are read and built only through the operators' layouts and public methods
(``AggregateOp.unite_states``/``split_state``, ``JoinOp.side_inputs``,
``IncrementalQuery.compose_state``):

- the aggregation's groups (and their fragment counts and min/max multisets) by the
  group-by column that copies the routed table's column;
- join sides holding rows of the routed table by that column (under its name on that
  side); sides without it are held whole by every shard, so one copy is taken; the same
  for the sides of semi-, anti- and outer joins (``KeyedJoinOp.side_inputs``), whose
  right side never holds the routed table (``imp_actors.sharding``);
- the merge counts and the kept result of each new shard are recomputed from its
  aggregation's output pushed through the selections and projections above it.

Invariant: for every new shard k, the state equals the state a shard k of K' shards would
have reached by maintenance from the start: same groups, counts, sums, multisets, side
rows (as multisets) and fragment counts.
"""

from __future__ import annotations

from typing import Callable

import numpy as np
import pyarrow as pa

from imp_actors.sharding import ShardKey, shard_of
from imp_core.engine.operators.aggregate import AggregateOp
from imp_core.engine.operators.join import JoinOp
from imp_core.engine.operators.keyed_join import KeyedJoinOp
from imp_core.engine.pipeline import EngineOptions, IncrementalQuery
from imp_core.engine.state import StateTables, group_state
from imp_core.errors import UnshardableQueryError
from imp_core.plan.expr import ColumnRef
from imp_core.plan.nodes import (
    Aggregate,
    Join,
    OuterJoin,
    PlanNode,
    Project,
    QueryPlan,
    Scan,
    Select,
    SemiJoin,
)
from imp_core.sketch.partition import PartitionSet


def column_at(node: PlanNode, key: ShardKey) -> str | None:
    """The name under which ``node``'s output carries the routed column, if it does."""
    if isinstance(node, Scan):
        if node.table == key.table and key.column in node.source_columns:
            return node.output_name(key.column)
        return None
    if isinstance(node, Select):
        return column_at(node.input, key)
    if isinstance(node, Project):
        inner = column_at(node.input, key)
        for e in node.exprs:
            if inner is not None and isinstance(e.expr, ColumnRef) and e.expr.name == inner:
                return e.name
        return None
    if isinstance(node, Join):
        return column_at(node.left, key) or column_at(node.right, key)
    if isinstance(node, SemiJoin):  # the left input's columns
        return column_at(node.left, key)
    if isinstance(node, OuterJoin):  # a NULL-padded side's column is no routing value
        return column_at(node.left, key) if node.kind == "left" else None
    if isinstance(node, Aggregate):
        inner = column_at(node.input, key)
        return inner if inner in node.group_by else None
    return None


def reshard(states: list[StateTables], plan: QueryPlan, partitions: PartitionSet,
            options: EngineOptions, key: ShardKey, shards: int) -> list[StateTables]:
    """``states`` of the current shards (in shard order) re-split into ``shards``."""
    pipeline = IncrementalQuery(plan, partitions, options)
    aggregate = _top_aggregate(pipeline)
    grouped = [group_state(s) for s in states]
    for op in pipeline.operators:
        if op.stateful and not isinstance(op, (AggregateOp, JoinOp, KeyedJoinOp)):
            raise UnshardableQueryError(f"cannot re-split the state of a {op.kind} operator")
    group_col = column_at(aggregate.node, key)
    assert group_col is not None, "shard_key guarantees a routed group-by column"
    united: dict[str, StateTables] = {}
    routing: dict[str, dict[str, str | None]] = {}  # join id -> side -> routing column
    for op in pipeline.operators:
        if isinstance(op, (JoinOp, KeyedJoinOp)):
            routing[op.op_id] = {name: column_at(node, key)
                                 for name, node in op.side_inputs().items()}
            united[op.op_id] = {
                name: pa.concat_tables([g[op.op_id][name] for g in grouped] if col
                                       else [grouped[0][op.op_id][name]])
                for name, col in routing[op.op_id].items()}
        elif isinstance(op, AggregateOp):
            united[op.op_id] = op.unite_states([g[op.op_id] for g in grouped])
    out = []
    for k in range(shards):
        mine: dict[str, StateTables] = {}
        for op in pipeline.operators:
            if isinstance(op, (JoinOp, KeyedJoinOp)):
                mine[op.op_id] = {}
                for name, t in united[op.op_id].items():
                    col = routing[op.op_id][name]
                    # a side without the routed column is held whole by every shard
                    mine[op.op_id][name] = t if col is None else t.filter(
                        pa.array(shard_of(t.column(col), shards) == k))
            elif isinstance(op, AggregateOp):
                mine[op.op_id] = op.split_state(united[op.op_id], group_col,
                                                _in_shard(shards, k))
        out.append(_with_outputs(mine, plan, partitions, options))
    return out


def _in_shard(shards: int, k: int) -> Callable[[pa.ChunkedArray], np.ndarray]:
    """Mask of routing values that belong to shard ``k`` of ``shards``."""
    return lambda values: shard_of(values, shards) == k


def _top_aggregate(pipeline: IncrementalQuery) -> AggregateOp:
    w = pipeline.root
    while not isinstance(w.op, AggregateOp):
        if not w.children or w.op.stateful:
            raise UnshardableQueryError("the plan has no aggregation to split by")
        w = w.children[0]
    return w.op


def _with_outputs(op_states: dict[str, StateTables], plan: QueryPlan,
                  partitions: PartitionSet, options: EngineOptions) -> StateTables:
    """A shard's flat state: its operator states with the merge counts and kept result
    recomputed from its aggregation's output pushed through the operators above it."""
    probe = IncrementalQuery(plan, partitions, options)
    probe.load_state(probe.compose_state(op_states))
    out = _top_aggregate(probe).current_output()
    upper = []
    w = probe.root
    while not isinstance(w.op, AggregateOp):
        upper.append(w.op)
        w = w.children[0]
    for op in reversed(upper):
        out = op.step([out])
    return probe.compose_state(op_states, out)
