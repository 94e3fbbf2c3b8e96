"""Incremental set operations: UNION [ALL], INTERSECT [ALL], EXCEPT [ALL] (``SetOp``).

Rows compare as whole rows, NULLs equal. With l and r the multiplicities of row t in the
left and right input, t's output multiplicity is m(l, r) (``set_multiplicity``): UNION
ALL l + r, UNION [l + r > 0], INTERSECT ALL min(l, r), INTERSECT [l > 0 and r > 0],
EXCEPT ALL max(l − r, 0), EXCEPT [l > 0 and r = 0].

UNION ALL (``UnionAllOp``) is linear and stateless: Δout = ΔL + ΔR, every row with its
own annotation (the bag union of the paper's annotated semantics).

The others (``SetOpOp``) are not linear: a right row can remove an output row (EXCEPT)
or make one appear (INTERSECT), and the distinct forms only count presence. State per
distinct row t: l_t and r_t, and F_t, the weighted count of contributing input rows per
fragment (the left input's rows, and the right's unless the operation is EXCEPT); t's
annotation is P_t = {ρ | F_t[ρ] > 0}. Delta rule per batch, for every row t the batch
touches, with old state (l, r, P) and new state (l', r', P'):

    if P' = P:  +⟨t, P⟩ with weight m(l', r') − m(l, r)      (nothing when 0)
    else:       −⟨t, P⟩ with weight m(l, r)   if m(l, r) > 0
                +⟨t, P'⟩ with weight m(l', r') if m(l', r') > 0

so the integral of the output is exactly m(l_t, r_t) copies of ⟨t, P_t⟩ per row t.

Lineage (provenance): like DISTINCT and grouping, a result row carries the union of the
annotations of all input rows equal to it: of both inputs for UNION and INTERSECT (a
kept row of INTERSECT carries its partners' fragments, like a semi-join), of the left
input only for EXCEPT, whose right input is negated like an anti-join's and contributes
no provenance (whether a sketch may filter tables read there is for the safety check,
``imp_core.safety.set_ops``). State tables (``SetOpOp.STATE``): ``rows`` (one row per
row value with a non-zero count: its columns k<j>, gid, left, right) and ``fragments``
(F_t as ``gid·P + ρ`` and count, as an aggregation's).
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np
import pyarrow as pa

from imp_core.engine.annotation import Annotation
from imp_core.engine.operators.arrays import grow
from imp_core.engine.operators.base import Operator
from imp_core.engine.operators.groups import FragmentCounts, GroupKeys
from imp_core.engine.state import StateLayout, StateTable
from imp_core.engine.zset import DeltaBatch
from imp_core.plan.nodes import SetOp


def multiplicities(kind: str, distinct: bool, left: np.ndarray,
                   right: np.ndarray) -> np.ndarray:
    """``set_multiplicity`` over arrays of counts (int64)."""
    if kind == "union":
        out = left + right
    elif kind == "intersect":
        out = np.minimum(left, right)
    elif distinct:
        out = ((left > 0) & (right == 0)).astype(np.int64)
    else:
        out = np.maximum(left - right, 0)
    return np.minimum(out, 1) if distinct else out


def _as_left(op: Operator, batch: DeltaBatch) -> DeltaBatch:
    """A right input's batch under the output's column names (same types, by position)."""
    schema = op.output_schema
    if batch.data.schema.names == schema.names:
        return batch
    return batch.with_data(batch.data.rename_columns(schema.names))


class UnionAllOp(Operator):
    """UNION ALL: Δout = ΔL + ΔR, annotations unchanged (stateless)."""

    kind = "union_all"

    def __init__(self, node: SetOp, op_id: str):
        super().__init__(node, op_id)
        assert node.linear

    def _step(self, inputs: list[DeltaBatch]) -> DeltaBatch:
        left, right = inputs
        parts = [b for b in (left, _as_left(self, right)) if len(b)]
        parts = [b if b.data.schema == self.output_schema else
                 b.with_data(b.data.cast(self.output_schema)) for b in parts]
        return DeltaBatch.concat(parts, self.output_schema)


class SetOpOp(Operator):
    """UNION, INTERSECT [ALL], EXCEPT [ALL]: per-row counts of both inputs (module
    docstring)."""

    kind = "set_op"
    stateful = True
    ROWS: ClassVar[StateTable] = StateTable(
        "rows", "one row per row value with a non-zero count: its columns k<j>, gid, "
        "left (its multiplicity in the left input) and right (in the right input)")
    FRAGMENTS: ClassVar[StateTable] = StateTable(
        "fragments", "F_t: key = gid·P + ρ (sorted) and count of the contributing input "
        "rows (the right input's only unless EXCEPT), nonzero counts only")
    STATE: ClassVar[StateLayout] = StateLayout((ROWS, FRAGMENTS))

    def __init__(self, node: SetOp, op_id: str, nfrag: int):
        super().__init__(node, op_id)
        assert not node.linear, "UNION ALL is UnionAllOp"
        self.setop = node
        self.key_types = [f.type for f in self.output_schema]
        self.rows = GroupKeys(self.key_types)
        self.frags = FragmentCounts(nfrag)
        self.left_counts = np.zeros(0, dtype=np.int64)
        self.right_counts = np.zeros(0, dtype=np.int64)

    def _ensure(self, n: int) -> None:
        self.left_counts = grow(self.left_counts, n)
        self.right_counts = grow(self.right_counts, n)
        self.frags.ensure(n)

    def _m(self, left: np.ndarray, right: np.ndarray) -> np.ndarray:
        return multiplicities(self.setop.kind, self.setop.distinct, left, right)

    # -- the delta rule -------------------------------------------------------------------
    def _step(self, inputs: list[DeltaBatch]) -> DeltaBatch:
        left, right = inputs[0], _as_left(self, inputs[1])
        both = DeltaBatch.concat([b for b in (left, right) if len(b)] or [left],
                                 self.output_schema)
        if len(both) == 0:
            return self.empty()
        names = tuple(self.output_schema.names)
        gids, inv = self.rows.lookup(both.data, names)
        self._ensure(len(self.rows))
        ng = len(gids)
        nl = len(left)
        old_l = self.left_counts[gids].copy()
        old_r = self.right_counts[gids].copy()
        old_size = self.frags.size[gids].copy()
        old_single = self.frags.single[gids].copy()

        dl = np.zeros(ng, dtype=np.int64)
        dr = np.zeros(ng, dtype=np.int64)
        np.add.at(dl, inv[:nl], both.weights[:nl])
        np.add.at(dr, inv[nl:], both.weights[nl:])
        self.left_counts[gids] += dl
        self.right_counts[gids] += dr
        new_l, new_r = self.left_counts[gids], self.right_counts[gids]

        # F_t over the contributing rows (EXCEPT: the left input's only)
        if self.setop.negates_right:
            before = self.frags.update(gids[inv[:nl]], left.weights, left.annotation)
        else:
            before = self.frags.update(gids[inv], both.weights, both.annotation)

        old_m, new_m = self._m(old_l, old_r), self._m(new_l, new_r)
        moved = np.fromiter((g in before for g in gids.tolist()), dtype=bool, count=ng) \
            if before else np.zeros(ng, dtype=bool)
        # the same annotation: one row of the difference
        same = np.flatnonzero(~moved & (old_m != new_m))
        gone = np.flatnonzero(moved & (old_m > 0))
        come = np.flatnonzero(moved & (new_m > 0))
        parts = []
        if len(same):
            g = gids[same]
            parts.append(self._rows(g, new_m[same] - old_m[same], self.frags.annotation(g)))
        if len(gone):
            g = gids[gone]
            parts.append(self._rows(g, -old_m[gone], self.frags.annotation(
                g, before, old_size[gone], old_single[gone])))
        if len(come):
            g = gids[come]
            parts.append(self._rows(g, new_m[come], self.frags.annotation(g)))
        if not parts:
            return self.empty()
        return DeltaBatch.concat(parts, self.output_schema)

    def _rows(self, gids: np.ndarray, weights: np.ndarray, ann: Annotation) -> DeltaBatch:
        data = pa.Table.from_arrays(self.rows.key_arrays(gids), schema=self.output_schema)
        return DeltaBatch(data, np.asarray(weights, dtype=np.int64), ann)

    def current_output(self) -> DeltaBatch:
        """The whole current output: each row value with a non-zero multiplicity, once,
        weighted by it and annotated with P_t (the integral of every delta emitted)."""
        n = len(self.rows)
        m = self._m(self.left_counts[:n], self.right_counts[:n])
        gids = np.flatnonzero(m > 0)
        if len(gids) == 0:
            return self.empty()
        return self._rows(gids, m[gids], self.frags.annotation(gids))

    # -- state ------------------------------------------------------------------------
    def state_schemas(self) -> dict[str, pa.Schema | None]:
        fields = [pa.field(f"k{j}", t) for j, t in enumerate(self.key_types)]
        fields += [pa.field(c, pa.int64()) for c in ("gid", "left", "right")]
        return {self.ROWS.name: pa.schema(fields),
                self.FRAGMENTS.name: pa.schema([("key", pa.int64()), ("count", pa.int64())])}

    def snapshot(self) -> dict[str, pa.Table]:
        n = len(self.rows)
        live = np.flatnonzero((self.left_counts[:n] != 0) | (self.right_counts[:n] != 0))
        cols = {f"k{j}": a for j, a in enumerate(self.rows.key_arrays(live))}
        cols["gid"] = pa.array(live, pa.int64())
        cols["left"] = pa.array(self.left_counts[live], pa.int64())
        cols["right"] = pa.array(self.right_counts[live], pa.int64())
        rows = pa.table(cols, schema=self.state_schemas()[self.ROWS.name])
        return {self.ROWS.name: rows, self.FRAGMENTS.name: self.frags.snapshot()}

    def restore(self, state: dict[str, pa.Table]) -> None:
        rows = state[self.ROWS.name]
        expected = self.state_schemas()[self.ROWS.name]
        if rows.schema.names != expected.names:
            raise ValueError(f"set operation state has columns {rows.schema.names}, "
                             f"expected {expected.names}")
        gids = rows.column("gid").to_numpy().astype(np.int64)
        self.rows = GroupKeys(self.key_types)
        keycols = [rows.column(f"k{j}").to_pylist() for j in range(len(self.key_types))]
        remap = np.zeros(int(gids.max()) + 1 if len(gids) else 0, dtype=np.int64)
        for pos in np.argsort(gids).tolist():
            remap[gids[pos]] = self.rows.add(tuple(col[pos] for col in keycols))
        n = len(self.rows)
        new_ids = remap[gids] if len(gids) else gids
        self.left_counts = np.zeros(n, dtype=np.int64)
        self.right_counts = np.zeros(n, dtype=np.int64)
        self.left_counts[new_ids] = rows.column("left").to_numpy()
        self.right_counts[new_ids] = rows.column("right").to_numpy()
        fr = state[self.FRAGMENTS.name]
        keys = fr.column("key").to_numpy().astype(np.int64)
        P = self.frags.P
        g_old, frag = np.divmod(keys, P)
        if len(keys) and int(g_old.max()) >= len(remap):
            raise ValueError("set operation fragments name a row the state does not hold")
        fixed = pa.table({"key": pa.array(remap[g_old] * P + frag if len(keys) else keys,
                                          pa.int64()),
                          "count": fr.column("count")}).sort_by("key")
        self.frags = FragmentCounts(P)
        self.frags.restore(fixed, n)
        self._ensure(n)

    def state_bytes(self) -> int:
        return int(self.left_counts.nbytes + self.right_counts.nbytes + self.frags.nbytes()
                   + self.rows.nbytes())
