"""Incremental window functions ω (``imp_core.plan.nodes.Window``), maintained per partition.

A window row's values depend on the other rows of its partition, so ω is not linear in
its input; like the keyed joins it is maintained per key, the key being the PARTITION BY
values. State: per partition key, the multiset of its input rows, {(tuple, annotation):
multiplicity}. Delta rule: for the partition keys K that the input delta touches,

    Δout = W(P_new|K) − W(P_old|K)

where W is the window over the stored rows of one partition; partitions the delta does
not touch emit nothing. W(P_old|K) is the output last emitted for K, kept beside the
rows (derived from them, so not in snapshots: after a restore it is computed again on
a partition's first change). A batch that reorders ranks re-emits the rows whose values
changed (and, since the result is consolidated, nothing for rows whose value and
annotation stay); a partition whose rows are all deleted is dropped and emits only −W.

Values (W over one partition P, in the total order of ``imp_core.engine.ordering``: the
order keys, then the other columns ascending with NULLs first, then the annotation;
each occurrence of a row of multiplicity m counted m times):
- rank: 1 + the occurrences ordered strictly before the row's peers (equal order values);
- dense_rank: 1 + the distinct order values before the row's;
- row_number: the occurrence's position (each occurrence its own output row);
- an aggregate (``imp_core.plan.aggregates``, finalized from exact state like
  ``AggregateOp``'s) over the frame: the whole partition ("partition"), the occurrences
  up to the row's last peer ("range"), or up to the occurrence itself ("rows").

Provenance (the output row's annotation): the row's own fragments and those of the
partition rows its values depend on. For a frame over the whole partition, the union
over every row of the partition; for an ordered window (ranking functions, running
frames), the union over the rows ordered before it *and its peers* (whatever a tie
breaker decides about peers, they are included, so the annotation does not depend on
how ties are broken).
"""

from __future__ import annotations

from collections import Counter
from typing import ClassVar

import numpy as np
import pyarrow as pa

from imp_core.engine.annotation import Annotation, key_ids, set_key
from imp_core.engine.operators.base import Operator
from imp_core.engine.ordering import sort_key
from imp_core.engine.state import StateLayout, StateTable
from imp_core.engine.zset import NAN, DeltaBatch, batch_from_arrow, batch_to_arrow
from imp_core.plan.aggregates.base import GroupState
from imp_core.plan.aggregates.exact import python_exact
from imp_core.plan.nodes import Window, WindowCall

Entry = tuple[tuple, bytes, int]  # (row, annotation's set_key, multiplicity)


class _Frame:
    """The exact state of one aggregate over a growing frame (rows added in order)."""

    def __init__(self, call: WindowCall, dtype: pa.DataType | None):
        self.fn = call.function
        self.dtype = dtype
        self.cnt = 0
        self.nonnull = 0
        self.sums = [0] * self.fn.moments
        self.best = None

    def add(self, value: object, m: int) -> None:
        self.cnt += m
        if value is None or self.dtype is None:
            return
        self.nonnull += m
        if self.fn.extremes:
            if self.best is None or (value > self.best if self.fn.largest_first
                                     else value < self.best):
                self.best = value
            return
        x = python_exact(value, self.dtype)
        for j in range(self.fn.moments):
            self.sums[j] += x ** (j + 1) * m

    def state(self) -> tuple:
        return self.cnt, self.nonnull, tuple(self.sums), self.best


def _finalize(call: WindowCall, dtype: pa.DataType | None, out_type: pa.DataType,
              states: list[tuple]) -> list:
    fn = call.function
    if not states:
        return []
    cnt = np.array([s[0] for s in states], dtype=np.int64)
    nonnull = np.array([s[1] for s in states], dtype=np.int64)
    sums = [[s[2][j] for s in states] for j in range(fn.moments)]
    extremes = [s[3] for s in states] if fn.extremes else None
    values = fn.finalize(GroupState(cnt, nonnull, sums, extremes), dtype)
    return values.cast(out_type).to_pylist()


def window_partition(node: Window, entries: list[Entry]) -> list[Entry]:
    """W over one partition: (output row, annotation, multiplicity) per distinct output."""
    names = list(node.input.column_names)
    positions = [names.index(s.column) for s in node.order]
    rest = [i for i in range(len(names)) if i not in positions]
    types = {f.name: f.dtype for f in node.input.schema}
    out_types = [f.dtype for f in node.schema[len(names):]]
    if node.frame == "partition":  # no order: every row reads the whole partition
        everything = set_key(i for _, ann, _ in entries for i in key_ids(ann))
        values = []
        for c, t in zip(node.calls, out_types):
            frame = _Frame(c, None if c.arg is None else types[c.arg])
            col = None if c.arg is None else names.index(c.arg)
            for row, _, m in entries:
                frame.add(None if col is None else row[col], m)
            values.append(_finalize(c, frame.dtype, t, [frame.state()])[0])
        return [(row + tuple(values), everything, m) for row, _, m in entries]
    expand = node.frame == "rows" or any(c.func == "row_number" for c in node.calls)
    # only row numbers and ROWS frames tell peers apart: they need the total order; the
    # other values are the same for every order of peers, so the order keys suffice
    # (order values, entry) in the window's order
    # NaNs as one shared object: tuples holding it compare equal (by identity), so NaNs
    # are peers, as in Spark
    keyed = [(tuple(NAN if (v := e[0][p]) != v else v for p in positions), e)
             for e in entries]
    if expand:
        keyed.sort(key=lambda ke: sort_key(ke[1][0], ke[1][1], node.order, positions, rest))
    elif all(not k.descending for k in node.order) and \
            all(None not in values and all(v == v for v in values) for values, _ in keyed):
        # ascending, without NULLs and NaNs the values order as ``sort_key`` orders them
        keyed.sort(key=lambda ke: ke[0])
    else:
        keyed.sort(key=lambda ke: sort_key(ke[1][0], b"", node.order, positions, ()))
    # ordered windows: peer groups (equal order values) in order
    peers: list[list[Entry]] = []
    last: tuple | None = None
    for key, e in keyed:
        if peers and last == key:
            peers[-1].append(e)
        else:
            peers.append([e])
            last = key
    # one output per occurrence unit: (entry, occurrence count, values per call)
    units: list[Entry] = []  # (row, annotation, multiplicity)
    per_call: list[list] = [[] for _ in node.calls]  # a value or a frame state per unit
    frames = [_Frame(c, None if c.arg is None else types[c.arg]) if not c.ranking else None
              for c in node.calls]
    cols = [None if c.arg is None else names.index(c.arg) for c in node.calls]
    seen: set[int] = set()  # the fragments of the rows up to the current peer group's
    ann = b""  # and their key, made again only when the group brings new fragments
    before = 0  # occurrences before the current peer group
    for dense, group in enumerate(peers, start=1):
        known = len(seen)
        for _, a, _ in group:
            seen.update(key_ids(a))
        if len(seen) != known:
            ann = set_key(seen)
        size = sum(m for _, _, m in group)
        if node.frame == "range":  # running aggregates include the whole peer group
            for f, col in zip(frames, cols):
                if f is not None:
                    for row, _, m in group:
                        f.add(None if col is None else row[col], m)
        position = before
        for row, _, m in group:
            steps = [(1, m)] if not expand else [(1, 1)] * m
            for _, count in steps:
                position += count
                units.append((row, ann, count))
                for i, (c, f, col) in enumerate(zip(node.calls, frames, cols)):
                    if c.func == "rank":
                        per_call[i].append(before + 1)
                    elif c.func == "dense_rank":
                        per_call[i].append(dense)
                    elif c.func == "row_number":
                        per_call[i].append(position)
                    else:
                        assert f is not None
                        if node.frame == "rows":
                            f.add(None if col is None else row[col], count)
                        per_call[i].append(f.state())
        before += size
    for i, (c, t) in enumerate(zip(node.calls, out_types)):
        if not c.ranking:
            dtype = None if c.arg is None else types[c.arg]
            per_call[i] = _finalize(c, dtype, t, per_call[i])
    return [(row + tuple(v[j] for v in per_call), ann, m)
            for j, (row, ann, m) in enumerate(units)]


class WindowOp(Operator):
    kind = "window"
    stateful = True
    ROWS: ClassVar[StateTable] = StateTable(
        "rows", "the input as a batch: one row per (tuple, annotation), its multiplicity "
        "as the weight (the partitions are the groups of its PARTITION BY columns)")
    STATE: ClassVar[StateLayout] = StateLayout((ROWS,))

    def __init__(self, node: Window, op_id: str):
        super().__init__(node, op_id)
        self.window = node
        self.input_schema = pa.schema([pa.field(f.name, f.dtype) for f in node.input.schema])
        names = list(node.input.column_names)
        self.key_positions = [names.index(c) for c in node.partition_by]
        # partition key -> {(row, annotation): multiplicity}
        self.parts: dict[tuple, dict[tuple[tuple, bytes], int]] = {}
        # partition key -> W of its rows as last emitted: derived from ``parts`` (not
        # state), so that a touched partition's old output is not computed again
        self.outputs: dict[tuple, list[Entry]] = {}
        # entries in ``parts`` and in ``outputs``, kept as they change: the size is asked
        # after every batch, and a walk over thousands of partitions would cost more
        # than the batch
        self._rows = 0
        self._kept = 0

    def _key(self, row: tuple) -> tuple:
        return tuple(row[p] for p in self.key_positions)

    def _output(self, part: dict[tuple[tuple, bytes], int]) -> list[Entry]:
        return window_partition(self.window, [(r, a, m) for (r, a), m in part.items()])

    def _step(self, inputs: list[DeltaBatch]) -> DeltaBatch:
        (batch,) = inputs
        if len(batch) == 0:
            return self.empty()
        touched: dict[tuple, list[Entry]] = {}
        for (row, ann), w in batch.keyed_counts().items():
            touched.setdefault(self._key(row), []).append((row, ann, w))
        diff: Counter = Counter()
        for key, changes in touched.items():
            part = self.parts.get(key, {})
            old = self.outputs.get(key)
            self._rows -= len(part)
            self._kept -= 0 if old is None else len(old)
            for row, ann, m in (self._output(part) if old is None else old):
                diff[(row, ann)] -= m
            part = dict(part)
            for row, ann, w in changes:
                count = part.get((row, ann), 0) + w
                if count < 0:
                    raise ValueError(f"window: deleting a row it does not hold: {row}")
                if count:
                    part[(row, ann)] = count
                else:
                    part.pop((row, ann), None)
            if part:
                self.parts[key] = part
                self.outputs[key] = new = self._output(part)
                self._rows += len(part)
                self._kept += len(new)
                for row, ann, m in new:
                    diff[(row, ann)] += m
            else:
                self.parts.pop(key, None)
                self.outputs.pop(key, None)
        return self._to_batch([(k, v) for k, v in diff.items() if v], self.output_schema)

    def _to_batch(self, items: list, schema: pa.Schema) -> DeltaBatch:
        if not items:
            return DeltaBatch.empty(schema)
        rows = [r for (r, _), _ in items]
        cols = [pa.array([r[i] for r in rows], type=f.type) for i, f in enumerate(schema)]
        data = pa.Table.from_arrays(cols, schema=schema)
        ann = Annotation.from_keys([a for (_, a), _ in items])
        return DeltaBatch.of(data, [w for _, w in items], ann)

    def current_output(self) -> DeltaBatch:
        """The whole current output (the integral of every delta emitted)."""
        items = [((row, ann), m) for key, part in self.parts.items()
                 for row, ann, m in self.outputs.get(key) or self._output(part)]
        return self._to_batch(items, self.output_schema)

    # -- state ------------------------------------------------------------------------
    def state_schemas(self) -> dict[str, pa.Schema | None]:
        return {self.ROWS.name: batch_to_arrow(DeltaBatch.empty(self.input_schema)).schema}

    def state_from_rows(self, rows: DeltaBatch) -> dict[str, pa.Table]:
        """The state holding ``rows`` (the whole input, multiplicities as weights)."""
        return {self.ROWS.name: batch_to_arrow(rows)}

    def snapshot(self) -> dict[str, pa.Table]:
        items = [((row, ann), m) for part in self.parts.values()
                 for (row, ann), m in part.items()]
        return self.state_from_rows(self._to_batch(items, self.input_schema))

    def restore(self, state: dict[str, pa.Table]) -> None:
        self.parts = {}
        self.outputs = {}
        for (row, ann), w in batch_from_arrow(state[self.ROWS.name]).keyed_counts().items():
            if w < 0:
                raise ValueError("window state holds a negative multiplicity")
            part = self.parts.setdefault(self._key(row), {})
            part[(row, ann)] = part.get((row, ann), 0) + w
        self._rows = sum(len(p) for p in self.parts.values())
        self._kept = 0

    def state_bytes(self) -> int:
        return 64 * self._rows * (1 + len(self.input_schema)) + \
            64 * self._kept * (1 + len(self.output_schema))
