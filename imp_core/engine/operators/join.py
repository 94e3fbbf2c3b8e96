"""Incremental inner join (and cross product).

Delta rule (bilinear, so deletions are just negative weights):
    Δ(L ⋈ R) = ΔL ⋈ R + L ⋈ ΔR + ΔL ⋈ ΔR = ΔL ⋈ R_old + L_new ⋈ ΔR
(with a left side probed in the data layer, L_new ⋈ ΔR is L_old ⋈ ΔR + ΔL ⋈ ΔR: the
side is asked only for its old contents, none at all from empty state)
and each output row's annotation is P_left ∪ P_right (section 5.2.4). A pair's residual
condition is evaluated before its annotation is built, the deltas of an input computed
by a grouping are consolidated before the rule (``_repeating``), and a side holds equal
(row, annotation) pairs as one row of summed weight: these change only the work, not the
output as a Z-set.
State: both sides' contents, each behind a ``SideIndex`` (hash of the equi-keys, and a
Bloom filter that lets a delta skip probes that cannot match) or another ``JoinSide``
provider; the state tables ``left`` and ``right`` are the sides' own snapshots.
"""

from __future__ import annotations

from typing import Any, Callable, ClassVar

import numpy as np
import pyarrow as pa

from imp_core.engine.annotation import Annotation
from imp_core.engine.join_index import JoinSide, PairFilter, SideIndex
from imp_core.engine.operators.two_sided import TwoSidedOp
from imp_core.engine.probed_side import is_probed
from imp_core.engine.state import StateLayout, StateTable
from imp_core.engine.zset import DeltaBatch
from imp_core.plan.evaluate import evaluate_predicate
from imp_core.plan.nodes import (
    Aggregate,
    Distinct,
    Join,
    PlanNode,
    SetOp,
    TopK,
    Window,
    arrow_schema,
)
from imp_core.plan.shapes import unique_on

# (a join: inner, semi-, anti- or outer; "left" | "right") -> its provider, or None
SideChooser = Callable[[Any, str], "JoinSide | None"]


class JoinOp(TwoSidedOp):
    kind = "join"
    LEFT: ClassVar[StateTable] = StateTable(
        "left", "the left side's state in its provider's layout (``SideIndex``: its rows)")
    RIGHT: ClassVar[StateTable] = StateTable(
        "right", "the right side's state in its provider's layout")
    STATE: ClassVar[StateLayout] = StateLayout((LEFT, RIGHT))

    def __init__(self, node: Join, op_id: str, use_bloom: bool = True,
                 dedupe_annotations: bool = False,
                 side_factory: Callable[..., JoinSide] = SideIndex,
                 choose_side: SideChooser | None = None):
        super().__init__(node, op_id)
        self.left_keys, self.right_keys, self.residual = node.equi_keys()
        # the provider of each side's contents is pluggable: in memory by default, a
        # lookup in the database holding the table for sides too large to keep
        # (``choose_side(node, "left" | "right")``; None keeps that side in memory)
        left = choose_side(node, "left") if choose_side else None
        right = choose_side(node, "right") if choose_side else None
        # a side holds equal rows as one row of summed weight: a dimension projected to
        # the join key (q2's weeks, seven days each) then pairs once, not once per day
        self.left = left if left is not None else side_factory(
            arrow_schema(node.left.schema), self.left_keys, use_bloom, merge_equal=True)
        self.right = right if right is not None else side_factory(
            arrow_schema(node.right.schema), self.right_keys, use_bloom, merge_equal=True)
        self.dedupe = dedupe_annotations
        self.merge_inputs = (_repeating(node.left), _repeating(node.right))
        if self.residual is not None:
            # the residual reads a few columns of every pair; the others are taken for
            # the pairs it keeps only (q2's weeks a year apart: one pair in 52)
            read = self.residual.columns()
            picked = [i for i, f in enumerate(self.output_schema) if f.name in read] or [0]
            nl = len(arrow_schema(node.left.schema))  # output: the left's, the right's
            self.read_left = [i for i in picked if i < nl]
            self.read_right = [i - nl for i in picked if i >= nl]
            self.read_schema = pa.schema([self.output_schema.field(i) for i in picked])

    def _kept(self, lcols: list[pa.ChunkedArray], rcols: list[pa.ChunkedArray],
              weights: np.ndarray) -> np.ndarray:
        """Mask of the pairs that pass the residual, from the columns it reads
        (``read_left``, ``read_right``), each pair's raising rows counted once with its
        weight (its count in the join)."""
        assert self.residual is not None
        narrow = pa.Table.from_arrays([*lcols, *rcols], schema=self.read_schema)
        errors = self._row_errors(DeltaBatch(narrow, weights, Annotation.empty(len(weights))))
        keep = evaluate_predicate(self.residual, narrow, errors=errors)
        self._count(errors, weights)
        return np.asarray(keep, dtype=bool)

    def _probe(self, delta: DeltaBatch, delta_is_left: bool
               ) -> tuple[np.ndarray, DeltaBatch, bool]:
        """The other side probed with ``delta``: (delta rows, matched rows, whether the
        pairs passed the residual already). An in-memory side applies the residual before
        taking its rows whole (a partition's 36 months paired with one month, one kept:
        q47, q57)."""
        side, keys = (self.right, self.left_keys) if delta_is_left else \
            (self.left, self.right_keys)
        if self.residual is None or not isinstance(side, SideIndex):
            return (*side.probe(delta, keys), self.residual is None)
        mine, theirs = (self.read_left, self.read_right) if delta_is_left else \
            (self.read_right, self.read_left)

        def test(probe_idx: np.ndarray, columns: list[pa.ChunkedArray],
                 weights: np.ndarray) -> np.ndarray:
            own = _Rows(delta, probe_idx)
            pair = (own.columns(mine), columns) if delta_is_left else (columns, own.columns(mine))
            return self._kept(*pair, own.weights() * weights)

        return (*side.probe(delta, keys, keep=PairFilter(theirs, test)), True)

    def _pairs(self, left: DeltaBatch, li: np.ndarray | None, right: DeltaBatch,
               ri: np.ndarray | None, checked: bool = False) -> DeltaBatch:
        """The pairs (``left`` row ``li[k]``, ``right`` row ``ri[k]``) that pass the
        residual (``checked``: they were, by the probe that found them); None for ``li``
        or ``ri`` pairs every row of that side in order (a probe's matched rows, already
        taken). Their annotations are united only for the pairs kept: a theta join's
        pairs are mostly dropped, and rows from aggregations carry many ids."""
        n = len(left) if li is None else len(li)
        if n == 0:
            return self.empty()
        lrows, rrows = _Rows(left, li), _Rows(right, ri)
        weights = lrows.weights() * rrows.weights()
        if self.residual is not None and not checked:
            mask = self._kept(lrows.columns(self.read_left), rrows.columns(self.read_right),
                              weights)
            if not mask.all():
                lrows, rrows = lrows.kept(mask), rrows.kept(mask)
                weights = weights[mask]
        cols = list(lrows.data().columns) + list(rrows.data().columns)
        data = pa.Table.from_arrays(cols, schema=self.output_schema)
        ann = lrows.annotation().union_rows(rrows.annotation(), dedupe=self.dedupe)
        return DeltaBatch(data, weights, ann)

    def _delta_left(self, dl: DeltaBatch) -> DeltaBatch:
        if self.left_keys:
            idx, matched, checked = self._probe(dl, True)
            return self._pairs(dl, idx, matched, None, checked=checked)
        side = self.right.contents()
        li = np.repeat(np.arange(len(dl)), len(side))
        ri = np.tile(np.arange(len(side)), len(dl))
        return self._pairs(dl, li, side, ri)

    def _delta_pairs(self, dl: DeltaBatch, dr: DeltaBatch) -> DeltaBatch:
        index = SideIndex(arrow_schema(self.node.left.schema), self.left_keys, False)
        index.apply(dl)
        idx, matched = index.probe(dr, self.right_keys)
        return self._pairs(matched, None, dr, idx)

    def _delta_right(self, dr: DeltaBatch) -> DeltaBatch:
        if self.left_keys:
            idx, matched, checked = self._probe(dr, False)
            return self._pairs(matched, None, dr, idx, checked=checked)
        side = self.left.contents()
        li = np.tile(np.arange(len(side)), len(dr))
        ri = np.repeat(np.arange(len(dr)), len(side))
        return self._pairs(side, li, dr, ri)

    def _step(self, inputs: list[DeltaBatch]) -> DeltaBatch:
        dl, dr = (d.consolidate() if merge and len(d) > 1 else d
                  for d, merge in zip(inputs, self.merge_inputs))
        # a probed left side is asked only for its old contents (none at all from empty
        # state, the bootstrap) and ΔL ⋈ ΔR pairs in memory; an index in memory answers
        # L_new ⋈ ΔR in one probe once ΔL is applied
        pair_deltas = bool(len(dl) and len(dr) and self.left_keys and is_probed(self.left))
        parts = []
        if len(dl):
            parts.append(self._delta_left(dl))  # ΔL ⋈ R_old
            if not pair_deltas:
                self.left.apply(dl)
        if len(dr):
            parts.append(self._delta_right(dr))  # L_new ⋈ ΔR, or L_old ⋈ ΔR
            if pair_deltas:
                parts.append(self._delta_pairs(dl, dr))  # + ΔL ⋈ ΔR
                self.left.apply(dl)
            self.right.apply(dr)
        return DeltaBatch.concat(parts, self.output_schema)


class _Rows:
    """Rows ``idx`` of ``batch`` (repeats allowed), or ``batch`` itself (``idx`` None):
    a side of ``JoinOp._pairs``, taken only for the parts asked."""

    def __init__(self, batch: DeltaBatch, idx: np.ndarray | None):
        self.batch, self.idx = batch, idx

    def data(self) -> pa.Table:
        return self.batch.data if self.idx is None else self.batch.data.take(self.idx)

    def columns(self, positions: list[int]) -> list[pa.ChunkedArray]:
        """The columns at ``positions`` (ascending)."""
        if not positions:
            return []
        part = self.batch.data.select(positions)
        return list((part if self.idx is None else part.take(self.idx)).columns)

    def weights(self) -> np.ndarray:
        return self.batch.weights if self.idx is None else self.batch.weights[self.idx]

    def annotation(self) -> Annotation:
        ann = self.batch.annotation
        return ann if self.idx is None else ann.take(self.idx)

    def kept(self, mask: np.ndarray) -> _Rows:
        idx = np.flatnonzero(mask) if self.idx is None else self.idx[mask]
        return _Rows(self.batch, idx)


def _repeating(node: PlanNode) -> bool:
    """Whether ``node``'s deltas are consolidated before the join: its rows come from a
    grouping somewhere below (an aggregation, DISTINCT, a window, a set operation other
    than UNION ALL, a top-k), unless it holds at most one row per row of its columns
    (``unique_on``: an aggregation's rows through filters and projections that copy its
    group keys, a retraction and a new row per changed group). Equal rows are common
    there and cost every pair above: TPC-DS q2 joins each week's sums with the seven
    days of the week and projects them back to the week, so seven equal rows would each
    pair with the next join's rows (and carry the week's id set). Deltas of rows
    straight from tables (selected, projected, joined) are not, since a grouping per
    batch would rarely merge anything there."""
    return not unique_on(node, tuple(node.column_names)) and any(
        isinstance(n, (Aggregate, Distinct, Window, TopK))
        or isinstance(n, SetOp) and not n.linear for n in node.walk())
