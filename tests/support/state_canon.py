"""Canonical forms of a pipeline's state tables, for comparing state built in different ways.

Group ids, row order and how a Z-set is split into rows are arbitrary, so state is keyed
by content: an aggregation's groups by their key tuples (CNT, non-NULL counts, exact sums,
F_g as {fragment: count}, min/max multisets and completeness), top-k entries and in-memory
join sides (also of semi-, anti- and outer joins) as consolidated counters, a set
operation's rows by value with their counts and F_t, a Spark-served join side by its
versions, μ's counts and the result. With a bounded
min/max buffer m only the m best values are compared: a buffer may hold more than m
values (values better than its worst are always admitted) and still be the same state as
far as results and refills go.
"""

from __future__ import annotations

import json
from typing import Any, Mapping

import pyarrow as pa

from imp_core.engine.operators.aggregate import AggregateOp
from imp_core.engine.operators.join import JoinOp
from imp_core.engine.operators.keyed_join import KeyedJoinOp
from imp_core.engine.operators.merge import MergeOp
from imp_core.engine.operators.set_ops import SetOpOp
from imp_core.engine.operators.topk import TopKOp
from imp_core.engine.pipeline import IncrementalQuery
from imp_core.engine.state import group_state
from imp_core.engine.zset import WEIGHT, batch_from_arrow


def canonical_state(pipeline, tables: Mapping[str, pa.Table] | None = None,
                    minmax_buffer: int | None = None) -> dict[str, Any]:
    """The canonical form of ``tables`` (default: the pipeline's own state tables)."""
    tables = pipeline.state_tables() if tables is None else tables
    grouped = group_state(tables)
    out: dict[str, Any] = {}
    for op in pipeline.operators:
        state = grouped.get(op.op_id, {})
        if isinstance(op, AggregateOp):
            out[op.op_id] = _aggregate(op, state, minmax_buffer)
        elif isinstance(op, TopKOp):
            out[op.op_id] = (batch_from_arrow(state[op.ENTRIES.name]).to_counter(),
                             state[op.META.name].column("complete")[0].as_py())
        elif isinstance(op, (JoinOp, KeyedJoinOp)):
            out[op.op_id] = tuple(_side(state[name]) for name in op.STATE.names())
        elif isinstance(op, SetOpOp):
            out[op.op_id] = _set_op(op, state)
    merge = grouped[IncrementalQuery.MERGE][MergeOp.COUNTS.name]
    out["merge"] = merge.column("count").to_pylist()
    result = IncrementalQuery.RESULT.name
    if result in tables:
        out["result"] = batch_from_arrow(tables[result]).to_counter()
    return out


def _set_op(op: SetOpOp, state: Mapping[str, pa.Table]) -> dict:
    """A set operation's rows by value: (left count, right count, {fragment: count})."""
    rows = state[op.ROWS.name]
    keys = zip(*[rows.column(f"k{j}").to_pylist() for j in range(len(op.key_types))])
    frags: dict[int, dict[int, int]] = {}
    table = state[op.FRAGMENTS.name]
    for key, count in zip(table.column("key").to_pylist(), table.column("count").to_pylist()):
        g, f = divmod(key, op.frags.P)
        if count:
            frags.setdefault(g, {})[f] = count
    return {tuple(k): (lc, rc, frags.get(g, {})) for k, g, lc, rc in zip(
        keys, rows.column("gid").to_pylist(), rows.column("left").to_pylist(),
        rows.column("right").to_pylist())}


def _side(table: pa.Table) -> Any:
    if WEIGHT in table.column_names:  # rows held in memory
        return batch_from_arrow(table).to_counter()
    return json.loads(table.column("versions")[0].as_py())  # served by Spark


def _aggregate(op: AggregateOp, state: Mapping[str, pa.Table], buffer: int | None) -> dict:
    groups = state[op.GROUPS.name]
    nkeys = len(op.agg.group_by)
    keys = list(zip(*[groups.column(f"k{j}").to_pylist() for j in range(nkeys)])) \
        if nkeys else [()] * groups.num_rows
    by_gid = dict(zip(groups.column("gid").to_pylist(), keys))
    frags: dict[tuple, dict[int, int]] = {k: {} for k in keys}
    fr = state[op.FRAGMENTS.name]
    for key, count in zip(fr.column("key").to_pylist(), fr.column("count").to_pylist()):
        g, frag = divmod(key, op.frags.P)
        frags[by_gid[g]][frag] = count
    rows: dict[tuple, list] = {}
    for r, k in enumerate(keys):
        values = [groups.column("cnt")[r].as_py()]
        for i in range(len(op.agg.aggregates)):
            values.append(groups.column(f"nonnull{i}")[r].as_py())
            if f"sum{i}" in groups.column_names:
                values.append(int(groups.column(f"sum{i}")[r].as_py()))
        rows[k] = [tuple(values), frags[k]]
    for i, a in enumerate(op.agg.aggregates):
        if a.func not in ("min", "max"):
            continue
        multisets: dict[tuple, dict] = {}
        t = state[op.MINMAX.of(i)]
        for g, v, c in zip(t.column("gid").to_pylist(), t.column("value").to_pylist(),
                           t.column("count").to_pylist()):
            multisets.setdefault(by_gid[g], {})[v] = c
        ct = state[op.COMPLETE.of(i)]
        complete = dict(zip(ct.column("gid").to_pylist(), ct.column("complete").to_pylist()))
        for g, k in by_gid.items():
            values = multisets.get(k, {})
            if buffer is not None:
                best = sorted(values, reverse=a.func == "max")[:buffer]
                values = {v: values[v] for v in best}
            rows[k].append((values, complete.get(g)))
    return rows


def first_difference(a: Any, b: Any, path: str = "") -> str | None:
    """Where two canonical forms first differ (None when equal), for assertion messages."""
    if isinstance(a, dict) and isinstance(b, dict):
        for k in list(a) + [k for k in b if k not in a]:
            if k not in a or k not in b:
                return f"{path}/{k!r}: only in the {'first' if k in a else 'second'}"
            found = first_difference(a[k], b[k], f"{path}/{k!r}")
            if found:
                return found
        return None
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)) and len(a) == len(b):
        for i, (x, y) in enumerate(zip(a, b)):
            found = first_difference(x, y, f"{path}[{i}]")
            if found:
                return found
        return None
    return None if a == b else f"{path}: {str(a)[:200]} != {str(b)[:200]}"
