"""Re-splitting a query's operator state from K shards into K' without reading any table.

The shards' states (``IncrementalQuery.state_tables``) are first united, then cut again
by the shard of each piece's routing value (``imp_actors.sharding``):

- the aggregation's groups (and their fragment counts and min/max multisets) by the
  group-by column that copies the routed table's column;
- join sides holding rows of the routed table by that column (under its name on that
  side); sides without it are held whole by every shard, so one copy is taken;
- the merge counts and the kept result of each new shard are recomputed from its
  aggregation's output pushed through the selections and projections above it.

Invariant: for every new shard k, the state equals the state a shard k of K' shards would
have reached by maintenance from the start: same groups, counts, sums, multisets, side
rows (as multisets) and fragment counts.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from imp_actors.sharding import ShardKey, shard_of
from imp_core.engine.operators.aggregate import AggregateOp
from imp_core.engine.operators.join import JoinOp
from imp_core.engine.pipeline import EngineOptions, IncrementalQuery
from imp_core.engine.zset import batch_to_arrow
from imp_core.errors import UnshardableQueryError
from imp_core.plan.expr import ColumnRef
from imp_core.plan.nodes import Aggregate, Join, PlanNode, Project, QueryPlan, Scan, Select
from imp_core.sketch.partition import PartitionSet

StateTables = dict[str, pa.Table]


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
    if isinstance(node, Aggregate):
        inner = column_at(node.input, key)
        return inner if inner in node.group_by else None
    return None


def reshard(states: list[StateTables], plan: QueryPlan, partitions: PartitionSet,
            options: EngineOptions, key: ShardKey, shards: int) -> list[StateTables]:
    """``states`` of the current shards (in shard order) re-split into ``shards``."""
    pipeline = IncrementalQuery(plan, partitions, options)
    aggregate = _top_aggregate(pipeline)
    P = max(partitions.size, 1)  # fragment-count keys are gid * P + fragment
    sides = _join_sides(pipeline, key)
    united: StateTables = {}
    for name, col in sides.items():
        united[name] = pa.concat_tables([s[name] for s in states] if col else [states[0][name]])
    for op in pipeline.operators:
        if isinstance(op, AggregateOp):
            united.update(_unite_groups(op.op_id, states, P))
        elif op.stateful and not isinstance(op, JoinOp):
            raise UnshardableQueryError(f"cannot re-split the state of a {op.kind} operator")
    group_col = column_at(aggregate.node, key)
    assert group_col is not None, "shard_key guarantees a routed group-by column"
    out = []
    for k in range(shards):
        mine: StateTables = {}
        for name, col in sides.items():
            t = united[name]
            mine[name] = t if col is None else t.filter(
                pa.array(shard_of(t.column(col), shards) == k))
        for op in pipeline.operators:
            if isinstance(op, AggregateOp):
                j = op.agg.group_by.index(group_col)
                mine.update(_split_groups(op.op_id, united, j, shards, k, P))
        out.append(_with_outputs(mine, plan, partitions, options))
    return out


def _join_sides(pipeline: IncrementalQuery, key: ShardKey) -> dict[str, str | None]:
    """Each join side's state name and the column routing its rows (None: every shard
    holds the whole side)."""
    out: dict[str, str | None] = {}
    for op in pipeline.operators:
        if isinstance(op, JoinOp):
            out[f"{op.op_id}/left"] = column_at(op.node.left, key)
            out[f"{op.op_id}/right"] = column_at(op.node.right, key)
    return out


def _top_aggregate(pipeline: IncrementalQuery) -> AggregateOp:
    w = pipeline.root
    while not isinstance(w.op, AggregateOp):
        if not w.children or w.op.stateful:
            raise UnshardableQueryError("the plan has no aggregation to split by")
        w = w.children[0]
    return w.op


def _unite_groups(op_id: str, states: list[StateTables], P: int) -> StateTables:
    """All shards' groups in one state, group ids shifted to stay distinct (fragment-count
    keys are ``gid * P + fragment``, so they shift with them)."""
    groups, frags, extra = [], [], {}
    offset = 0
    for s in states:
        g = s[f"{op_id}/groups"]
        gid = g.column("gid").to_numpy()
        groups.append(_shift(g, offset))
        f = s[f"{op_id}/fragments"]
        keys = f.column("key").to_numpy()
        frags.append(f.set_column(0, "key", pa.array(keys + offset * P, pa.int64())))
        for name, t in s.items():
            owner, _, part = name.rpartition("/")
            if owner == op_id and part.startswith(("minmax", "complete")):
                extra.setdefault(name, []).append(_shift(t, offset))
        offset += int(gid.max()) + 1 if len(gid) else 0
    out = {f"{op_id}/groups": pa.concat_tables(groups),
           f"{op_id}/fragments": pa.concat_tables(frags)}
    for name, parts in extra.items():
        out[name] = pa.concat_tables(parts)
    return out


def _shift(t: pa.Table, offset: int) -> pa.Table:
    i = t.schema.get_field_index("gid")
    return t.set_column(i, "gid", pa.array(t.column("gid").to_numpy() + offset, pa.int64()))


def _split_groups(op_id: str, united: StateTables, j: int, shards: int, k: int, P: int
                  ) -> StateTables:
    """Shard ``k``'s part of the united groups: by the hash of group-by column ``j``."""
    groups = united[f"{op_id}/groups"]
    keep = shard_of(groups.column(f"k{j}"), shards) == k
    gids = pa.array(groups.column("gid").to_numpy()[keep], pa.int64())
    frags = united[f"{op_id}/fragments"]
    owner = pa.array(frags.column("key").to_numpy() // P, pa.int64())
    out = {f"{op_id}/groups": groups.filter(pa.array(keep)),
           f"{op_id}/fragments": frags.filter(pc.is_in(owner, value_set=gids))}
    for name, t in united.items():
        owner_id, _, part = name.rpartition("/")
        if owner_id == op_id and part.startswith(("minmax", "complete")):
            out[name] = t.filter(pc.is_in(t.column("gid"), value_set=gids))
    return out


def _with_outputs(tables: StateTables, plan: QueryPlan, partitions: PartitionSet,
                  options: EngineOptions) -> StateTables:
    """Complete a shard's operator state with its merge counts and kept result."""
    probe = IncrementalQuery(plan, partitions, options)
    probe.load_state({**tables, "merge/counts": pa.table({"count": np.zeros(
        partitions.size, dtype=np.int64)})})
    out = _top_aggregate(probe).current_output()
    upper = []
    w = probe.root
    while not isinstance(w.op, AggregateOp):
        upper.append(w.op)
        w = w.children[0]
    for op in reversed(upper):
        out = op.step([out])
    tables["merge/counts"] = pa.table({"count": out.annotation.fragment_counts(
        out.weights, partitions.size)})
    if options.keep_result:
        tables["result"] = batch_to_arrow(out)
    return tables
