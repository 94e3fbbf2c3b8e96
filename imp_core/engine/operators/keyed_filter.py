"""Incremental comparison with a correlated scalar subquery: π_L σ_p (L ⋈_{a=k} S).

A correlated scalar subquery (``x > (SELECT 1.2 * avg(y) FROM t WHERE t.k = o.a)``) is
planned as a join of the outer rows L with the subquery's aggregate S grouped by k, a
selection ``p`` comparing them and a projection back onto L's columns
(``imp_core.plan.shapes.keyed_filter_parts``). Maintained as three operators, a changed
value of S for key k re-emits every stored L row of key k twice (against the old and the
new value), each carrying S's annotation, and the rows whose comparison did not flip
cancel only where the top of the plan consolidates. This operator maintains the three
together and cancels them before any row or annotation is built.

Delta rule, with ``out(L, S) = Σ_{l∈L, s∈S, l.a = s.k} w_l·w_s·p(l, s) · (π(l), P_l ∪ P_s)``
(bilinear, as the join's):

    Δout = out(L_old, ΔS) + out(ΔL, S_new)

A pair's output row depends only on l and on s's annotation, so the pairs of one stored
row l are summed per annotation of their s before they are emitted: with ΔS = {−s_old,
+s_new} of equal annotation (a key's value moves, its provenance stays: the common case)
l gets ``w_l·(p(l, s_new) − p(l, s_old))``, non-zero exactly when its comparison flips.
When the annotation changes, every passing row is emitted again (its provenance changed).

Lineage: an output row carries its outer row's fragments and those of the subquery row
it was compared with (the inner join's rule, section 5.2.4, then selection and
projection, which keep annotations).

State: both inputs' annotated rows, L keyed by a, S by k (the state tables ``left`` and
``right``, the layout of the joins' sides). The left side may be served by the data
layer (only its old contents are asked for); S is held in memory.
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np
import pyarrow as pa

from imp_core.engine.join_index import JoinSide, SideIndex, key_hashes, keys_equal
from imp_core.engine.operators.two_sided import TwoSidedOp
from imp_core.engine.state import StateLayout, StateTable
from imp_core.engine.zset import DeltaBatch
from imp_core.plan.evaluate import evaluate, evaluate_predicate
from imp_core.plan.expr import ColumnRef
from imp_core.plan.nodes import PlanNode, Project, arrow_schema
from imp_core.plan.shapes import keyed_filter_parts

_ROW = "__imp_row"


class KeyedFilterOp(TwoSidedOp):
    """``π_L σ_p (L ⋈_{a=k} S)`` for S unique on k; see the module doc."""

    kind = "keyed_filter"
    left: JoinSide
    right: SideIndex
    LEFT: ClassVar[StateTable] = StateTable(
        "left", "the outer input's side in its provider's layout (``SideIndex``: its rows)")
    RIGHT: ClassVar[StateTable] = StateTable("right", "the subquery's annotated rows")
    STATE: ClassVar[StateLayout] = StateLayout((LEFT, RIGHT))

    def __init__(self, node: Project, op_id: str, dedupe_annotations: bool = False,
                 left_side: JoinSide | None = None):
        super().__init__(node, op_id)
        parts = keyed_filter_parts(node)
        if parts is None:
            raise TypeError("KeyedFilterOp needs π σ (L ⋈ S) with S unique on its keys")
        self.parts = parts
        self.left_node, self.right_node = parts.left, parts.right
        self.left_keys, self.right_keys = parts.left_keys, parts.right_keys
        self.pair_schema = arrow_schema(parts.join.schema)
        self.read = {e.name for e in parts.predicate.walk() if isinstance(e, ColumnRef)}
        # no Bloom filters: L is probed by the keys whose S row changed and S by the keys
        # of new outer rows, and nearly every such key has rows on the other side (an
        # aggregate of the outer rows' own keys), so a filter would only cost its hashing
        self.left = left_side if left_side is not None else SideIndex(
            arrow_schema(self.left_node.schema), self.left_keys, use_bloom=False)
        self.right = SideIndex(arrow_schema(self.right_node.schema), self.right_keys,
                               use_bloom=False)
        self.dedupe = dedupe_annotations
        self.ranged = parts.ranged
        # the side's main part ordered by (key hash, compared value), built anew when a
        # merge replaces that part: (its data, key hashes, values, rows)
        self._order: tuple[pa.Table, np.ndarray, np.ndarray, np.ndarray] | None = None

    def side_nodes(self) -> tuple[PlanNode, PlanNode]:
        return self.left_node, self.right_node

    def _step(self, inputs: list[DeltaBatch]) -> DeltaBatch:
        dl, ds = inputs
        parts = []
        if len(ds):
            ds = ds.consolidate()
            if len(ds):
                parts.append(self._stored_against(ds))  # out(L_old, ΔS)
                self.right.apply(ds)
        if len(dl):
            idx, matched = self.right.probe(dl, self.left_keys)  # out(ΔL, S_new)
            parts.append(self._emit(dl, idx, matched, np.arange(len(matched))))
            self.left.apply(dl)
        return DeltaBatch.concat(parts, self.output_schema)

    def _stored_against(self, ds: DeltaBatch) -> DeltaBatch:
        """out(L_old, ΔS): each stored row of a changed key paired with every row of ΔS
        of that key. The side is probed once per distinct key, so a row of L appears
        once and its pairs can be summed (``_emit``). For a key whose value moves
        (``_moves``) the main part of the side is searched by value instead: only rows
        between the old and the new value can flip."""
        rows, sizes = _key_groups(ds.data.select(list(self.right_keys)))
        starts = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64)
        firsts = ds.take(rows[starts])
        moves, lo, hi = self._moves(ds, sizes, rows, starts)
        found: list[tuple[np.ndarray, DeltaBatch]] = []
        whole = np.flatnonzero(~moves)
        if len(whole):
            at, stored = self.left.probe(firsts.take(whole), self.right_keys)
            found.append((whole[at], stored))
        moved = np.flatnonzero(moves)
        if len(moved):
            assert isinstance(self.left, SideIndex)
            keys = firsts.take(moved)
            at, stored = self.left.probe_parts(keys, self.right_keys, main=False)
            found.append((moved[at], stored))
            at, stored = self._in_ranges(keys, lo[moved], hi[moved])
            found.append((moved[at], stored))
        group = np.concatenate([g for g, _ in found]).astype(np.int64)
        if len(group) == 0:
            return self.empty()
        stored = DeltaBatch.concat([b for _, b in found], self.left.schema)
        # stored row j pairs with the sizes[group[j]] rows of its key's group
        count = sizes[group]
        li = np.repeat(np.arange(len(stored)), count)
        within = np.arange(len(li)) - np.repeat(np.cumsum(count) - count, count)
        si = rows[np.repeat(starts[group], count) + within]
        return self._emit(stored, li, ds, si)

    def _moves(self, ds: DeltaBatch, sizes: np.ndarray, rows: np.ndarray,
               starts: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Per key group of ``ds``: whether it is one S row's value moving (two rows of
        opposite weights and equal annotation, both values numbers), and the range of L
        values the move may flip (the two values, widened by far more than a float's
        error so that the search in floats misses no row)."""
        n = len(sizes)
        none = np.zeros(n, dtype=bool), np.zeros(n), np.zeros(n)
        if self.ranged is None or not isinstance(self.left, SideIndex):
            return none
        pair = sizes == 2
        if not pair.any():
            return none
        a, b = rows[starts[pair]], rows[starts[pair] + 1]
        values = _floats(evaluate(self.ranged[1], ds.data))
        keys = ds.annotation.keys()
        va, vb = values[a], values[b]
        ok = (ds.weights[a] + ds.weights[b] == 0) & np.isfinite(va) & np.isfinite(vb)
        ok &= np.array([keys[i] == keys[j] for i, j in zip(a.tolist(), b.tolist())],
                       dtype=bool)
        moves, lo, hi = none
        lo[pair], hi[pair] = np.minimum(va, vb), np.maximum(va, vb)
        moves[np.flatnonzero(pair)[ok]] = True
        lo -= np.abs(lo) * 1e-9 + 1e-9
        hi += np.abs(hi) * 1e-9 + 1e-9
        return moves, lo, hi

    def _in_ranges(self, keys: DeltaBatch, lo: np.ndarray, hi: np.ndarray
                   ) -> tuple[np.ndarray, DeltaBatch]:
        """(index into ``keys``, row) of the main part's rows of each key whose compared
        value lies in [lo, hi] (rows with a NULL there compare false with any value)."""
        assert isinstance(self.left, SideIndex) and self.ranged is not None
        main = self.left.main_part()
        if self._order is None or self._order[0] is not main.data:
            self._order = (main.data, *_value_order(main.data, self.left_keys,
                                                     self.ranged[0]))
        _, sorted_keys, sorted_values, perm = self._order
        probe, valid, exact = key_hashes(keys.data, self.right_keys)
        at, picked = [], []
        for i in np.flatnonzero(valid).tolist():
            a = np.searchsorted(sorted_keys, probe[i], side="left")
            b = np.searchsorted(sorted_keys, probe[i], side="right")
            if a == b:
                continue
            values = sorted_values[a:b]
            start = a + np.searchsorted(values, lo[i], side="left")
            stop = a + np.searchsorted(values, hi[i], side="right")
            picked.append(perm[start:stop])
            at.append(np.full(stop - start, i, dtype=np.int64))
        if not picked:
            return np.zeros(0, dtype=np.int64), DeltaBatch.empty(self.left.schema)
        index, found = np.concatenate(at), main.take(np.concatenate(picked))
        if not exact:
            ok = keys_equal(keys.data.take(index), self.right_keys, found.data,
                            self.left_keys)
            index, found = index[ok], found.filter(ok)
        return index, found

    def _emit(self, lrows: DeltaBatch, li: np.ndarray, srows: DeltaBatch,
              si: np.ndarray) -> DeltaBatch:
        """The pairs (``lrows[li[k]]``, ``srows[si[k]]``) that satisfy p, summed per (L
        row, annotation of the S row), projected onto L's columns; zero sums dropped."""
        if len(li) == 0:
            return self.empty()
        # only the columns p reads are paired: most pairs are dropped or cancel
        lcols = [c for c in lrows.data.column_names if c in self.read]
        scols = [c for c in srows.data.column_names if c in self.read]
        data = pa.Table.from_arrays(
            list(lrows.data.select(lcols).take(li).columns)
            + list(srows.data.select(scols).take(si).columns),
            schema=pa.schema([self.pair_schema.field(c) for c in lcols + scols]))
        keep = np.asarray(evaluate_predicate(self.parts.predicate, data), dtype=bool)
        li, si = li[keep], si[keep]
        if len(li) == 0:
            return self.empty()
        weights = lrows.weights[li] * srows.weights[si]
        _, codes = np.unique(srows.annotation.keys(), return_inverse=True)
        pair_key = li.astype(np.int64) * (int(codes.max()) + 1) + codes.reshape(-1)[si]
        first, inverse = np.unique(pair_key, return_index=True, return_inverse=True)[1:]
        sums = np.zeros(len(first), dtype=np.int64)
        np.add.at(sums, inverse.reshape(-1), weights)
        nonzero = np.flatnonzero(sums)
        if len(nonzero) == 0:
            return self.empty()
        pick = first[nonzero]
        li, si = li[pick], si[pick]
        taken = lrows.data.select(list(dict.fromkeys(c for _, c in self.parts.columns))
                                  ).take(li)
        out = pa.Table.from_arrays([taken.column(c) for _, c in self.parts.columns],
                                   schema=self.output_schema)
        ann = lrows.annotation.take(li).union_rows(srows.annotation.take(si),
                                                   dedupe=self.dedupe)
        return DeltaBatch(out, sums[nonzero], ann)


# tables up to this many rows are grouped in Python: Arrow's group-by costs about a
# third of a millisecond however few rows it gets (``DeltaBatch.SMALL`` likewise)
_SMALL_GROUPING = 64


def _key_groups(keys: pa.Table) -> tuple[np.ndarray, np.ndarray]:
    """The rows of ``keys`` grouped by equal values (NULLs equal, as GROUP BY groups
    them): (row numbers, group by group; each group's size)."""
    exact = all(not pa.types.is_floating(t) for t in keys.schema.types)  # NaN != NaN
    if keys.num_rows <= _SMALL_GROUPING and exact:
        groups: dict[tuple, list[int]] = {}
        for i, key in enumerate(zip(*(c.to_pylist() for c in keys.columns))):
            groups.setdefault(key, []).append(i)
        members = list(groups.values())
        return (np.fromiter((i for g in members for i in g), dtype=np.int64,
                            count=keys.num_rows),
                np.array([len(g) for g in members], dtype=np.int64))
    keyed = keys.append_column(_ROW, pa.array(np.arange(keys.num_rows, dtype=np.int64)))
    grouped = keyed.group_by(keys.column_names, use_threads=False).aggregate(
        [(_ROW, "list")])
    lists = grouped.column(_ROW + "_list").combine_chunks()
    return lists.values.to_numpy(), np.diff(lists.offsets.to_numpy())


def _floats(values: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """Numbers as float64, NULL as NaN (decimals round to the nearest float: monotone,
    so an order of floats keeps every exact order up to ties)."""
    out = values.cast(pa.float64())
    return np.asarray(out.to_numpy(zero_copy_only=False), dtype=np.float64)


def _value_order(data: pa.Table, keys: tuple[str, ...], column: str
                 ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Rows of ``data`` with a key and a number in ``column``, ordered by (key hash,
    value): (hashes, values, rows) in that order."""
    hashes, valid, _ = key_hashes(data, keys)
    values = _floats(data.column(column))
    rows = np.flatnonzero(valid & ~np.isnan(values))
    rows = rows[np.lexsort((values[rows], hashes[rows]))]
    return hashes[rows], values[rows], rows
