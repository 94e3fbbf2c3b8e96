"""Incremental top-k τ_{k,O} (section 5.2.7).

State: an ordered map from the total order key (ORDER BY columns, then the remaining
columns, then the annotation; see ``imp_core.engine.ordering``) to (tuple, annotation,
multiplicity). Delta rule: apply the input delta to the map, then output
    +τ_k(S') − τ_k(S)
consolidated, so unchanged top-k tuples produce no output.
With ``buffer = l >= k`` only the first l entries are kept; if deletions leave fewer
than k tuples while entries beyond the buffer exist, the map is refilled from
``source`` (the operator's full current input) or ``StateExhaustedError`` is raised.
"""

from __future__ import annotations

from collections import Counter
from typing import Callable, ClassVar

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from sortedcontainers import SortedDict

from imp_core.engine.annotation import Annotation
from imp_core.engine.operators.base import Operator
from imp_core.engine.ordering import sort_key
from imp_core.engine.state import StateLayout, StateTable
from imp_core.engine.zset import DeltaBatch, batch_from_arrow, batch_to_arrow
from imp_core.errors import StateExhaustedError
from imp_core.plan.nodes import TopK


class TopKOp(Operator):
    kind = "topk"
    stateful = True
    ENTRIES: ClassVar[StateTable] = StateTable(
        "entries", "the kept map as a batch: one row per (tuple, annotation), its "
        "multiplicity as the weight, in the total order")
    META: ClassVar[StateTable] = StateTable(
        "meta", "one row, column complete: whether the entries hold every input tuple")
    STATE: ClassVar[StateLayout] = StateLayout((ENTRIES, META))

    def __init__(self, node: TopK, op_id: str, buffer: int | None = None,
                 source: Callable[[], DeltaBatch] | None = None):
        super().__init__(node, op_id)
        if buffer is not None and buffer < node.k:
            raise ValueError(f"top-k buffer {buffer} is smaller than k = {node.k}")
        names = list(node.input.column_names)
        self.k = node.k
        self.order = node.order
        self.positions = [names.index(s.column) for s in node.order]
        self.rest = [i for i in range(len(names)) if i not in self.positions]
        self.buffer = buffer
        self.source = source
        self.entries: SortedDict = SortedDict()  # key -> [row, ann, count]
        self.complete = True
        self.refills = 0
        self._top: list[tuple[tuple, bytes, int]] = []

    def _key(self, row: tuple, ann: bytes) -> tuple:
        return sort_key(row, ann, self.order, self.positions, self.rest)

    def _top_k(self) -> list[tuple[tuple, bytes, int]]:
        out, m = [], 0
        for row, ann, count in self.entries.values():
            if m >= self.k:
                break
            take = min(count, self.k - m)
            out.append((row, ann, take))
            m += take
        return out

    def _apply(self, row: tuple, ann: bytes, w: int) -> None:
        key = self._key(row, ann)
        entry = self.entries.get(key)
        if entry is None:
            if w < 0:
                if self.complete:
                    raise StateExhaustedError(f"top-k: deleting a tuple it never had: {row}")
                return  # the tuple lies beyond the kept buffer
            if not self.complete and (not self.entries
                                      or key > self.entries.peekitem(-1)[0]):
                return  # beyond the kept prefix (an emptied prefix keeps nothing)
            self.entries[key] = [row, ann, w]
            return
        entry[2] += w
        if entry[2] <= 0:
            del self.entries[key]

    def _beyond(self, batch: DeltaBatch) -> np.ndarray | None:
        """Mask of the rows whose ORDER BY values come strictly after the last kept
        entry's, when the entries are a prefix (not ``complete``): ``_apply`` would
        drop each of them whatever the batch holds besides (the last kept entry only
        moves forward as the batch's deletions empty its end), so they are dropped in
        Arrow instead of one by one in Python. None: nothing to drop."""
        if self.complete:
            return None
        if not self.entries:
            return np.ones(len(batch), dtype=bool)
        last = self.entries.peekitem(-1)[1][0]
        after = np.zeros(len(batch), dtype=bool)
        tied = np.ones(len(batch), dtype=bool)  # equal to ``last`` on the keys so far
        for p, key in zip(self.positions, self.order):
            column, value = batch.data.column(p), last[p]
            nulls = column.is_null().to_numpy(zero_copy_only=False)
            if value is None:
                later = np.zeros(len(batch), dtype=bool) if not key.effective_nulls_first \
                    else ~nulls
                same = nulls
            else:
                scalar = pa.scalar(value, type=column.type)
                cmp = pc.less(column, scalar) if key.descending else \
                    pc.greater(column, scalar)
                later = cmp.fill_null(False).to_numpy(zero_copy_only=False)
                if not key.effective_nulls_first:
                    later = later | nulls
                same = pc.equal(column, scalar).fill_null(False).to_numpy(
                    zero_copy_only=False)
            after |= tied & later
            tied &= same
            if not tied.any():
                break
        return after

    def _load(self, batch: DeltaBatch) -> None:
        beyond = self._beyond(batch)
        if beyond is not None and beyond.any():
            batch = batch.filter(~beyond)
        # equal rows of opposite weights cancel here in Arrow, not per row in Python: a
        # recomputed input (a comparison with a changed average, say) arrives as many
        # such pairs around the few rows that really change
        if len(batch) > DeltaBatch.SMALL:
            batch = batch.consolidate()
        counts = batch.keyed_counts()
        if not self.entries and self.complete and counts and min(counts.values()) > 0:
            # an empty map filled with insertions only (a first state, a restore): one
            # sort of all keys instead of one insertion each (hundreds of thousands of
            # groups under a top-k at SF 10). ``counts`` holds distinct tuples, and equal
            # keys mean equal tuples, so no two entries share a key (but for NaNs, equal
            # as keys, not as Python values: those are merged one by one)
            entries = SortedDict((self._key(row, ann), [row, ann, w])
                                 for (row, ann), w in counts.items())
            if len(entries) == len(counts):
                self.entries = entries
                return
        for (row, ann), w in counts.items():
            self._apply(row, ann, w)

    def _step(self, inputs: list[DeltaBatch]) -> DeltaBatch:
        (batch,) = inputs
        if len(batch) == 0:
            return self.empty()
        old = self._top
        self._load(batch)
        if self.buffer is not None:
            if not self.complete and not self._holds_k():
                self._refill()
            if self.complete and len(self.entries) > self.buffer:
                while len(self.entries) > self.buffer:
                    self.entries.popitem(-1)
                self.complete = False
        self._top = self._top_k()
        diff: Counter = Counter()
        for row, ann, m in self._top:
            diff[(row, ann)] += m
        for row, ann, m in old:
            diff[(row, ann)] -= m
        items = [(k, v) for k, v in diff.items() if v]
        return self._to_batch(items)

    def _holds_k(self) -> bool:
        """Whether the entries hold k occurrences (read up to the k-th, not all of a
        buffer of thousands)."""
        m = 0
        for _, _, count in self.entries.values():
            m += count
            if m >= self.k:
                return True
        return False

    def _refill(self) -> None:
        if self.source is None:
            raise StateExhaustedError("top-k buffer exhausted and no refill source configured")
        self.refills += 1
        self.entries = SortedDict()
        self.complete = True
        self._load(self.source())

    def _to_batch(self, items: list) -> DeltaBatch:
        if not items:
            return self.empty()
        rows = [r for (r, _), _ in items]
        cols = [pa.array([r[i] for r in rows], type=f.type)
                for i, f in enumerate(self.output_schema)]
        data = pa.Table.from_arrays(cols, schema=self.output_schema)
        ann = Annotation.from_keys([a for (_, a), _ in items])
        return DeltaBatch.of(data, [w for _, w in items], ann)

    def current_output(self) -> DeltaBatch:
        """The operator's whole current output: τ_k of its state, each tuple with its
        multiplicity as the weight (the integral of every delta it emitted)."""
        return self._to_batch([((row, ann), m) for row, ann, m in self._top])

    # -- state ------------------------------------------------------------------------
    def state_schemas(self) -> dict[str, pa.Schema | None]:
        return {self.ENTRIES.name: batch_to_arrow(self.empty()).schema,
                self.META.name: pa.schema([("complete", pa.bool_())])}

    def state_from_entries(self, entries: DeltaBatch, complete: bool) -> dict[str, pa.Table]:
        """The state holding ``entries`` (the kept prefix of the input in the total order,
        multiplicities as weights); ``complete``: whether it is the whole input."""
        return {self.ENTRIES.name: batch_to_arrow(entries),
                self.META.name: pa.table({"complete": pa.array([bool(complete)], pa.bool_())})}

    def snapshot(self) -> dict[str, pa.Table]:
        items = [((row, ann), count) for row, ann, count in self.entries.values()]
        return self.state_from_entries(self._to_batch(items), self.complete)

    def restore(self, state: dict[str, pa.Table]) -> None:
        self.entries = SortedDict()
        self.complete = True
        self._load(batch_from_arrow(state[self.ENTRIES.name]))
        self.complete = bool(state[self.META.name].column("complete")[0].as_py())
        self._top = self._top_k()

    def state_bytes(self) -> int:
        return 64 * len(self.entries) * (1 + len(self.output_schema))
