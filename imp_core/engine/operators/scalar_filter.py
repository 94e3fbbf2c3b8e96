"""Incremental comparison with a scalar subquery's value: π_L σ_p (L × S), as one operator.

An uncorrelated scalar subquery is planned as a cross product of the outer rows L with
the subquery's one-row aggregate S, a selection ``p`` comparing them and a projection
back onto L's columns (``imp_core.sql.subqueries``). Maintained as three operators, a
changed subquery value changes every joined row, so each step would re-emit all of L
(twice, with the old and the new value) with S's whole annotation on every row. This
operator maintains the three together and emits only what changes.

Delta rule, with ``out(L, S) = Σ_{l∈L, s∈S} w_l·w_s·p(l, s) · (π(l), P_l ∪ P_s)``:

    Δout = out(ΔL, S_new) + [out(L_old, S_new) − out(L_old, S_old)]

The bracket is zero unless ΔS holds rows. Otherwise the rows of S_old and S_new are
grouped by annotation: within a group of annotation A, each stored row l gets the
multiplicity ``Σ_{s∈S_new∩A} w_s·p(l, s) − Σ_{s∈S_old∩A} w_s·p(l, s)``, and only rows
whose multiplicity is not zero are emitted, with annotation ``P_l ∪ A``. When the
subquery's value moves but its annotation stays (the common case), that is exactly the
rows whose comparison flips; when the annotation changes, every passing row is emitted
again (its provenance changed).

Lineage: an output row carries its outer row's fragments and those of the subquery row
it was compared with (the inner join's rule, section 5.2.4, then selection and
projection, which keep annotations).

State: both inputs' annotated rows, each in a ``SideIndex`` without keys (the state
tables ``left`` and ``right``, the layout of the joins' sides). S is small: the planner
produces this shape only over an aggregate without GROUP BY (``scalar_filter_parts``).
"""

from __future__ import annotations

from typing import Callable, ClassVar

import numpy as np
import pyarrow as pa

from imp_core.engine.join_index import SideIndex
from imp_core.engine.operators.two_sided import TwoSidedOp
from imp_core.engine.state import StateLayout, StateTable
from imp_core.engine.zset import DeltaBatch
from imp_core.plan.evaluate import evaluate_predicate
from imp_core.plan.expr import ColumnRef
from imp_core.plan.nodes import PlanNode, Project, arrow_schema, scalar_filter_parts


class ScalarFilterOp(TwoSidedOp):
    """``π σ_p (L × S)`` for a one-row S; see the module doc."""

    kind = "scalar_filter"
    left: SideIndex
    right: SideIndex
    LEFT: ClassVar[StateTable] = StateTable("left", "the outer input's annotated rows")
    RIGHT: ClassVar[StateTable] = StateTable("right", "the subquery's annotated row")
    STATE: ClassVar[StateLayout] = StateLayout((LEFT, RIGHT))

    def __init__(self, node: Project, op_id: str):
        super().__init__(node, op_id)
        parts = scalar_filter_parts(node)
        if parts is None:
            raise TypeError("ScalarFilterOp needs π σ (L × S) with S at most one row")
        self.left_node, self.right_node, self.predicate = parts
        self.left_schema = arrow_schema(self.left_node.schema)
        self.right_schema = arrow_schema(self.right_node.schema)
        self.columns = [e.expr.name for e in node.exprs if isinstance(e.expr, ColumnRef)]
        self.left = SideIndex(self.left_schema, (), use_bloom=False)
        self.right = SideIndex(self.right_schema, (), use_bloom=False)
        # p(l, s) over the stored main part for the subquery's current values: the next
        # change of the value needs it as p(l, s_old), so it is not evaluated twice
        # (the part itself is kept: a cached mask belongs to that very object)
        self._main_masks: dict[tuple, tuple[DeltaBatch, np.ndarray]] = {}
        self._s_rows: DeltaBatch | None = None  # S consolidated, until S changes

    def _subquery_rows(self) -> DeltaBatch:
        """S's rows consolidated (kept between steps: S changes only in ``_step``, which
        replaces them, and ``restore``, which drops them)."""
        if self._s_rows is None:
            self._s_rows = self.right.contents().consolidate()
        return self._s_rows

    def restore(self, state: dict[str, pa.Table]) -> None:
        super().restore(state)
        self._s_rows = None
        self._main_masks = {}

    # -- the rule -----------------------------------------------------------------------
    def _main_passing(self, main: DeltaBatch, s: DeltaBatch, i: int) -> np.ndarray:
        """``_passing`` over the main part, remembered for ``s_i``'s values."""
        key = tuple(s.data.slice(i, 1).to_pylist()[0].values())
        hit = self._main_masks.get(key)
        if hit is not None and hit[0] is main:
            return hit[1]
        mask = self._passing(main, s, i)
        self._main_masks[key] = (main, mask)
        return mask

    def _passing(self, rows: DeltaBatch, s: DeltaBatch, i: int) -> np.ndarray:
        """Whether ``p(l, s_i)`` holds, for every row l of ``rows``."""
        values = {name: s.data.column(name)[i] for name in s.data.column_names}
        return evaluate_predicate(self.predicate, rows.data, values)

    def _emit(self, rows: DeltaBatch, weights: np.ndarray, shared: np.ndarray) -> DeltaBatch:
        keep = np.flatnonzero(weights)
        if len(keep) == 0:
            return self.empty()
        rows = rows.take(keep)
        data = pa.Table.from_arrays([rows.data.column(c) for c in self.columns],
                                    schema=self.output_schema)
        return DeltaBatch(data, weights[keep].astype(np.int64),
                          rows.annotation.with_shared(shared))

    def _against(self, rows: DeltaBatch, s: DeltaBatch) -> list[DeltaBatch]:
        """out(rows, s) for consolidated ``s``: one batch per row of s."""
        parts = []
        for i in range(len(s)):
            mult = self._passing(rows, s, i) * rows.weights * int(s.weights[i])
            parts.append(self._emit(rows, mult, s.annotation.row(i)))
        return parts

    def _step(self, inputs: list[DeltaBatch]) -> DeltaBatch:
        dl, ds = inputs
        parts: list[DeltaBatch] = []
        if len(ds):
            s_old = self._subquery_rows()
            s_new = DeltaBatch.concat([s_old, ds], self.right_schema).consolidate()
            self.right.reset(s_new)
            self._s_rows = s_new
            main = self.left.main_part()
            if len(main):
                parts += self._changed(main, s_old, s_new, self._main_passing)
                # only the current values' masks can be asked for again
                current = {tuple(r.values()) for r in s_new.data.to_pylist()}
                self._main_masks = {k: v for k, v in self._main_masks.items()
                                    if k in current and v[0] is main}
            # the pending parts side by side (no copy of their columns): one evaluation
            pending = DeltaBatch.concat(self.left.pending_parts(), self.left_schema)
            if len(pending):
                parts += self._changed(pending, s_old, s_new, self._passing)
        else:
            s_new = self._subquery_rows()
        if len(dl):
            parts += self._against(dl, s_new)
            self.left.apply(dl)
        return DeltaBatch.concat(parts, self.output_schema)

    def _changed(self, stored: DeltaBatch, s_old: DeltaBatch, s_new: DeltaBatch,
                 passing: Callable[[DeltaBatch, DeltaBatch, int], np.ndarray]
                 ) -> list[DeltaBatch]:
        """out(L_old, S_new) − out(L_old, S_old) over ``stored`` rows, grouped by the
        subquery rows' annotation."""
        groups: dict[tuple[int, ...], list[tuple[DeltaBatch, int, int]]] = {}
        for s, sign in ((s_old, -1), (s_new, 1)):
            for i, ids in enumerate(s.annotation.row_sets()):
                groups.setdefault(ids, []).append((s, i, sign))
        parts = []
        for ids, members in groups.items():
            mult = np.zeros(len(stored), dtype=np.int64)
            for s, i, sign in members:
                mult += passing(stored, s, i) * (sign * int(s.weights[i]))
            parts.append(self._emit(stored, mult * stored.weights,
                                    np.asarray(ids, dtype=np.int32)))
        return parts

    # -- state ------------------------------------------------------------------------
    def side_nodes(self) -> tuple[PlanNode, PlanNode]:
        return self.left_node, self.right_node
