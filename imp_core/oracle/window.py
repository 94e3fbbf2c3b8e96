"""Reference evaluation of a window (``imp_core.plan.nodes.Window``), from scratch.

Independent of the incremental ``WindowOp``: the input bag is sorted once with Arrow by
(partition codes, the total order of ``imp_core.engine.ordering`` rebuilt as sort keys),
every row repeated by its multiplicity into occurrences, and each value read off prefix
sums over the occurrences (exact integers): the frame of an occurrence ends at the last
occurrence of its partition ("partition"), of its peer group ("range") or at itself
("rows"), and starts at its partition's first. Ranks come from the positions of peer
groups. Annotations: the union over the partition, or over the occurrences up to the end
of the peer group (ordered windows). One output row per occurrence, multiplicity 1.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from imp_core.oracle.grouping import order_key_columns
from imp_core.plan.aggregates.base import GroupState
from imp_core.plan.aggregates.exact import python_exact
from imp_core.plan.nodes import Window, arrow_schema


def evaluate_window(node: Window, child, codes_fn, padded_fn, bag_cls):
    """``node`` over the evaluated input ``child`` (a reference ``Bag``); ``codes_fn``,
    ``padded_fn`` and ``bag_cls`` are the reference evaluator's ``_codes``, ``_padded``
    and ``Bag``."""
    schema = arrow_schema(node.schema)
    n = len(child)
    if n == 0:
        return bag_cls(schema.empty_table(), np.zeros(0, np.int64),
                       pa.array([], type=pa.list_(pa.int32())))
    data = child.data
    part, _ = codes_fn([data.column(c) for c in node.partition_by], n)
    keys: dict[str, pa.Array] = {"p": pa.array(part)}
    sort = [("p", "ascending")]

    def add(values: pa.Array, descending: bool, nulls_first: bool) -> None:
        for column, direction in order_key_columns(values, descending, nulls_first):
            keys[f"k{len(keys)}"] = column
            sort.append((f"k{len(keys) - 1}", direction))

    ordered_cols = [s.column for s in node.order]
    for s in node.order:
        add(data.column(s.column), s.descending, s.effective_nulls_first)
    for name in node.input.column_names:
        if name not in ordered_cols:
            add(data.column(name), False, True)
    padded = padded_fn(child.ann)
    for j in range(padded.shape[1]):
        keys[f"a{j}"] = pa.array(padded[:, j])
        sort.append((f"a{j}", "ascending"))
    idx = pc.sort_indices(pa.table(keys), sort_keys=sort).to_numpy()
    occ = np.repeat(idx, child.mult[idx])  # one entry per occurrence, in order
    m = len(occ)
    p = part[occ]
    peer_codes, _ = codes_fn([pa.array(part)] + [data.column(c) for c in ordered_cols], n)
    peer = peer_codes[occ]
    new_part = np.ones(m, dtype=bool)
    new_part[1:] = p[1:] != p[:-1]
    new_peer = new_part.copy()
    new_peer[1:] |= peer[1:] != peer[:-1]
    pos = np.arange(m)
    part_start = np.maximum.accumulate(np.where(new_part, pos, 0))
    peer_start = np.maximum.accumulate(np.where(new_peer, pos, 0))
    part_end = _ends(new_part)
    peer_end = _ends(new_peer)
    if node.frame == "partition":
        end = part_end
    elif node.frame == "range":
        end = peer_end
    else:
        end = pos
    cols = [data.column(c).take(pa.array(occ)) for c in node.input.column_names]
    for call, field in zip(node.calls, list(schema)[len(cols):]):
        if call.func == "row_number":
            values = pa.array(pos - part_start + 1, type=pa.int32())
        elif call.func == "rank":
            values = pa.array(peer_start - part_start + 1, type=pa.int32())
        elif call.func == "dense_rank":
            dense = np.cumsum(new_peer) - np.cumsum(new_peer)[part_start] + 1
            values = pa.array(dense, type=pa.int32())
        else:
            values = _aggregate(call, data, occ, part_start, end, node)
        cols.append(values.cast(field.type))
    ann = _annotations(child.ann, occ, part_start, part_end if node.frame == "partition"
                       else peer_end)
    out = pa.Table.from_arrays(cols, schema=schema)
    return bag_cls(out, np.ones(m, dtype=np.int64), ann)


def _ends(starts: np.ndarray) -> np.ndarray:
    """For each position, the last position of its run (runs begin where ``starts``)."""
    m = len(starts)
    begin = np.flatnonzero(starts)
    last = np.append(begin[1:] - 1, m - 1)
    run = np.cumsum(starts) - 1
    return last[run]


def _aggregate(call, data: pa.Table, occ: np.ndarray, start: np.ndarray, end: np.ndarray,
               node: Window) -> pa.Array:
    fn = call.function
    dtype = None if call.arg is None else {f.name: f.dtype for f in node.input.schema}[call.arg]
    values = [None] * len(occ) if call.arg is None else \
        data.column(call.arg).take(pa.array(occ)).to_pylist()
    cnt = end - start + 1  # occurrences start..end
    valid = np.array([v is not None for v in values], dtype=np.int64)
    cum_valid = np.concatenate([[0], np.cumsum(valid)])
    nonnull = cum_valid[end + 1] - cum_valid[start]
    sums: list[list[int]] = []
    for j in range(1, fn.moments + 1):
        x = [0 if v is None else python_exact(v, dtype) ** j for v in values]
        cum = [0]
        for v in x:
            cum.append(cum[-1] + v)
        sums.append([cum[e + 1] - cum[s] for s, e in zip(start.tolist(), end.tolist())])
    extremes = None
    if fn.extremes:
        extremes = []
        for s, e in zip(start.tolist(), end.tolist()):
            frame = [v for v in values[s:e + 1] if v is not None]
            extremes.append(None if not frame else max(frame) if fn.largest_first
                            else min(frame))
    state = GroupState(cnt.astype(np.int64), nonnull.astype(np.int64) if dtype is not None
                       else cnt.astype(np.int64), sums, extremes)
    return fn.finalize(state, dtype)


def _annotations(ann: pa.ListArray, occ: np.ndarray, start: np.ndarray,
                 end: np.ndarray) -> pa.ListArray:
    """Per occurrence: the sorted union of the annotations of occurrences start..end."""
    sets = [ann[int(i)].as_py() for i in occ]
    out: list[list[int]] = []
    acc: set[int] = set()
    cur, ptr = -1, 0
    last: tuple[int, list[int]] = (-1, [])
    for s, e in zip(start.tolist(), end.tolist()):
        if s != cur:  # a new partition: start over
            acc, cur, ptr = set(), s, s
        while ptr <= e:
            acc.update(sets[ptr])
            ptr += 1
        if last[0] != e or s != cur:
            last = (e, sorted(acc))
        out.append(last[1])
    return pa.array(out, type=pa.list_(pa.int32()))
