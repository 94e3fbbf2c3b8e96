"""Incremental semi-join, anti-join and outer joins, maintained per join key.

These operators are not linear in their right input (a partner's arrival can remove a
row, as for NOT EXISTS, or swap a NULL-padded row for joined rows), so they do not use
the bilinear rule of the inner join. Instead, for the set K of equi-join keys that a
delta touches (non-NULL keys of ΔL and ΔR):

    Δout = F(L_new|K, R_new|K) − F(L_old|K, R_old|K)

where F is the operator applied to the stored rows of those keys only. Rows of other
keys cannot change, because F's output for a key depends only on that key's rows.
Except for the full outer join, F is linear in its left input once the right rows of a
key are fixed, so for a key only ΔL touches F(L_new|k, R|k) − F(L_old|k, R|k) =
F(ΔL|k, R|k): the stored left rows are looked up only for the keys ΔR touches
(``K_R``), the right rows for all of K:

    Δout = F(L_old|K_R + ΔL, R_new|K) − F(L_old|K_R, R_old|K)

A left row with a NULL key never has a partner (SQL equality), so it passes through
(anti, left outer) or is dropped (semi) without consulting the other side. Without equi
keys there is one key, so every step recomputes F over both whole sides; for an
uncorrelated EXISTS / NOT EXISTS (``SemiJoin.uncorrelated``: a condition over the right
side only) F is one yes/no for all left rows, computed without forming pairs.

NOT IN (``null_aware``) also depends on two global facts about the right side, whether
it is empty and whether it holds a NULL key; when either flips, F is recomputed over the
whole of both sides.

Lineage (the provenance each output row carries, section 4 of the paper extended):
- semi-join: the left row's fragments ∪ those of every right row that is its partner
  (all witnesses, as Lineage takes all of them; uncorrelated: every right row satisfying
  the condition);
- anti-join / NOT IN: the left row's fragments only; the negated side contributes none
  (a sketch that filters the negated side is judged by ``imp_core.safety``);
- outer join: a joined pair carries both rows' fragments (as the inner join); a
  NULL-padded row carries only its own side's fragments.

State: both sides' annotated rows, each in a ``SideIndex`` keyed on the equi keys (the
state tables ``left`` and ``right``, the same layout as the inner join's), or another
``JoinSide`` provider chosen by ``choose_side`` (a side probed in the data layer keeps
no rows, only its versions and a Bloom filter of its keys). The inputs of a NOT IN and
of a join without equi keys are always in memory: F then needs whole sides.
"""

from __future__ import annotations

from typing import Callable, ClassVar

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from imp_core.engine.annotation import Annotation
from imp_core.engine.join_index import JoinSide, SideIndex, key_hashes, key_valid
from imp_core.engine.operators.two_sided import TwoSidedOp
from imp_core.engine.state import StateLayout, StateTable
from imp_core.engine.zset import DeltaBatch
from imp_core.plan.evaluate import evaluate_predicate
from imp_core.plan.nodes import OuterJoin, SemiJoin, arrow_schema


class KeyedJoinOp(TwoSidedOp):
    """Semi-join, anti-join (also NOT IN) and LEFT/FULL outer join; see the module doc."""

    kind = "keyed_join"
    LEFT: ClassVar[StateTable] = StateTable("left", "the left input's annotated rows")
    RIGHT: ClassVar[StateTable] = StateTable("right", "the right input's annotated rows")
    STATE: ClassVar[StateLayout] = StateLayout((LEFT, RIGHT))

    def __init__(self, node: SemiJoin | OuterJoin, op_id: str,
                 choose_side: Callable[..., JoinSide | None] | None = None):
        super().__init__(node, op_id)
        self.left_keys, self.right_keys, self.residual = node.equi_keys()
        self.left_schema = arrow_schema(node.left.schema)
        self.right_schema = arrow_schema(node.right.schema)
        self.pair_schema = pa.schema(list(self.left_schema) + list(self.right_schema))
        if isinstance(node, SemiJoin):
            self.mode = "nai" if node.null_aware else ("anti" if node.anti else "semi")
            self.kind = "anti_join" if node.anti else "semi_join"
        else:
            self.mode = node.kind  # "left" | "full"
            self.kind = "outer_join"
        self.uncorrelated = isinstance(node, SemiJoin) and node.uncorrelated
        # the Bloom filter only helps probes from deltas; here every probe asks for keys
        # the delta itself holds, so most succeed
        can_probe = bool(self.left_keys) and self.mode != "nai"
        left = choose_side(node, "left") if choose_side and can_probe else None
        right = choose_side(node, "right") if choose_side and can_probe else None
        self.left = left if left is not None else \
            SideIndex(self.left_schema, self.left_keys, use_bloom=False)
        # semi-, anti-joins read their right rows for membership only
        self.right = right if right is not None else \
            SideIndex(self.right_schema, self.right_keys, use_bloom=False,
                      merge_equal=self.mode in ("semi", "anti", "nai"))
        self._right_facts: tuple[int, int] | None = None  # (total weight, NULL-key weight)

    # -- the operator F -----------------------------------------------------------------
    def _apply_f(self, left: DeltaBatch, right: DeltaBatch,
                 facts: tuple[int, int]) -> DeltaBatch:
        """F over consolidated rows ``left`` and ``right`` (any set of whole keys)."""
        if self.uncorrelated:
            return self._apply_uncorrelated(left, right)
        li, ri = self._pairs(left, right)
        matches = np.bincount(li, minlength=len(left)) if len(li) else \
            np.zeros(len(left), dtype=np.int64)
        mode = self.mode
        if mode == "semi":
            keep = np.flatnonzero(matches > 0)
            ann = _grouped_union(left.annotation, li, right.annotation.take(ri), len(left))
            out = left.take(keep)
            return DeltaBatch(out.data, out.weights, ann.take(keep))
        if mode == "anti":
            return left.filter(matches == 0)
        if mode == "nai":
            total, nulls = facts
            if total == 0:
                return left
            if nulls:
                return self.empty()
            valid = key_valid(left.data, self.left_keys)
            return left.filter((matches == 0) & valid)
        parts = [self._joined(left.take(li), right.take(ri)),
                 self._padded_left(left.filter(matches == 0))]
        if mode == "full":
            rmatches = np.bincount(ri, minlength=len(right)) if len(ri) else \
                np.zeros(len(right), dtype=np.int64)
            parts.append(self._padded_right(right.filter(rmatches == 0)))
        return DeltaBatch.concat(parts, self.output_schema)

    def _apply_uncorrelated(self, left: DeltaBatch, right: DeltaBatch) -> DeltaBatch:
        """F of an uncorrelated EXISTS / NOT EXISTS: whether any right row satisfies the
        condition decides for every left row; a kept semi-join row carries the fragments
        of all those right rows. Costs the two sides, never their pairs."""
        if self.residual is not None and len(right):
            right = right.filter(evaluate_predicate(self.residual, right.data))
        exists = int(right.weights.sum()) > 0
        if self.mode == "anti":
            return self.empty() if exists else left
        if not exists:
            return self.empty()
        witnesses = np.unique(right.annotation.values)
        return DeltaBatch(left.data, left.weights, left.annotation.with_shared(witnesses))

    def _pairs(self, left: DeltaBatch, right: DeltaBatch) -> tuple[np.ndarray, np.ndarray]:
        """Index pairs (left row, right row) with equal non-NULL keys satisfying the
        residual condition."""
        if len(left) == 0 or len(right) == 0:
            empty = np.zeros(0, dtype=np.int64)
            return empty, empty
        if self.left_keys:
            li, ri = equal_key_pairs(left.data, self.left_keys, right.data, self.right_keys)
        else:
            li = np.repeat(np.arange(len(left), dtype=np.int64), len(right))
            ri = np.tile(np.arange(len(right), dtype=np.int64), len(left))
        if self.residual is not None and len(li):
            pairs = pa.Table.from_arrays(
                list(left.data.take(li).columns) + list(right.data.take(ri).columns),
                schema=self.pair_schema)
            ok = evaluate_predicate(self.residual, pairs)
            li, ri = li[ok], ri[ok]
        return li, ri

    def _joined(self, left: DeltaBatch, right: DeltaBatch) -> DeltaBatch:
        data = pa.Table.from_arrays(list(left.data.columns) + list(right.data.columns),
                                    schema=self.output_schema)
        ann = left.annotation.union_rows(right.annotation, dedupe=True)
        return DeltaBatch(data, left.weights * right.weights, ann)

    def _padded_left(self, left: DeltaBatch) -> DeltaBatch:
        nulls = [pa.nulls(len(left), f.type) for f in self.right_schema]
        data = pa.Table.from_arrays(list(left.data.columns) + nulls, schema=self.output_schema)
        return DeltaBatch(data, left.weights, left.annotation)

    def _padded_right(self, right: DeltaBatch) -> DeltaBatch:
        nulls = [pa.nulls(len(right), f.type) for f in self.left_schema]
        data = pa.Table.from_arrays(nulls + list(right.data.columns), schema=self.output_schema)
        return DeltaBatch(data, right.weights, right.annotation)

    # -- maintenance --------------------------------------------------------------------
    def _facts(self) -> tuple[int, int]:
        """The right side's total weight and NULL-key weight: what NOT IN depends on
        (the other modes never read them, and a probed side could not tell them)."""
        if self.mode != "nai":
            return (0, 0)
        if self._right_facts is None:
            rows = self.right.contents()
            valid = key_valid(rows.data, self.right_keys)
            self._right_facts = (int(rows.weights.sum()), int(rows.weights[~valid].sum()))
        return self._right_facts

    def _step(self, inputs: list[DeltaBatch]) -> DeltaBatch:
        dl, dr = inputs
        # a right row retracted and inserted again unchanged (a subquery's group whose
        # value changed but not its projected row) must not touch its key: that would
        # look up and recompute every left row of the key
        if len(dr) > 1:
            dr = dr.consolidate()
        old_facts = self._facts()
        if self.mode == "nai" and len(dr):
            valid = key_valid(dr.data, self.right_keys)
            new_facts = (old_facts[0] + int(dr.weights.sum()),
                         old_facts[1] + int(dr.weights[~valid].sum()))
            if (new_facts[0] == 0) != (old_facts[0] == 0) or \
                    (new_facts[1] == 0) != (old_facts[1] == 0):
                return self._recompute_all(dl, dr, old_facts, new_facts)
        else:
            new_facts = old_facts
        if not self.left_keys:
            return self._recompute_all(dl, dr, old_facts, new_facts)
        lvalid = key_valid(dl.data, self.left_keys)
        rvalid = key_valid(dr.data, self.right_keys)
        dl_keyed, dr_keyed = dl.filter(lvalid), dr.filter(rvalid)
        keys = self._touched_keys(dl_keyed, dr_keyed)
        # the left rows of keys only ΔL touches are not needed (see the module doc)
        lkeys = keys if self.mode == "full" else \
            self._touched_keys(dl_keyed.take(np.zeros(0, dtype=np.int64)), dr_keyed)
        old_left, old_right = self._rows_of(lkeys, keys)
        old = self._apply_f(old_left, old_right, old_facts)
        # the keys' new rows are their old rows plus the keyed deltas (every keyed delta
        # row's key is in K), so the sides are looked up once per step
        new_left = DeltaBatch.concat([old_left, dl_keyed], self.left_schema)
        new_right = DeltaBatch.concat([old_right, dr_keyed], self.right_schema)
        # F needs rows whose retractions have cancelled; rows of positive weight only
        # (a first state) may repeat: F of repeated rows is F of their sum, so the
        # sort-heavy consolidation of a whole table is skipped
        positive = bool((new_left.weights > 0).all() and (new_right.weights > 0).all())
        if not positive:
            new_left, new_right = new_left.consolidate(), new_right.consolidate()
        self._store(dl, dr, new_facts)
        new = self._apply_f(new_left, new_right, new_facts)
        parts = [new, old.negate(), self._passing(dl.filter(~lvalid), dr.filter(~rvalid),
                                                  new_facts)]
        out = DeltaBatch.concat(parts, self.output_schema)
        if positive and len(old) == 0 and bool((out.weights > 0).all()):
            return out  # nothing retracted, so nothing can cancel
        return out.consolidate()

    def _passing(self, dl: DeltaBatch, dr: DeltaBatch, facts: tuple[int, int]) -> DeltaBatch:
        """The output of rows with a NULL key, which no row of the other side matches."""
        if self.mode in ("anti", "left", "full"):
            parts = [dl if self.mode == "anti" else self._padded_left(dl)]
            if self.mode == "full":
                parts.append(self._padded_right(dr))
            return DeltaBatch.concat(parts, self.output_schema)
        if self.mode == "nai" and facts[0] == 0:
            return dl
        return self.empty()

    def _recompute_all(self, dl: DeltaBatch, dr: DeltaBatch, old_facts: tuple[int, int],
                       new_facts: tuple[int, int]) -> DeltaBatch:
        old = self._apply_f(self.left.contents().consolidate(),
                            self.right.contents().consolidate(), old_facts)
        self._store(dl, dr, new_facts)
        new = self._apply_f(self.left.contents().consolidate(),
                            self.right.contents().consolidate(), new_facts)
        return DeltaBatch.concat([new, old.negate()], self.output_schema).consolidate()

    def _store(self, dl: DeltaBatch, dr: DeltaBatch, facts: tuple[int, int]) -> None:
        self.left.apply(dl)
        self.right.apply(dr)
        self._right_facts = facts

    def _touched_keys(self, dl: DeltaBatch, dr: DeltaBatch) -> pa.Table:
        """The distinct non-NULL keys of both deltas, named like the left keys."""
        names = list(self.left_keys)
        parts = [dl.data.select(names)]
        if len(dr):
            right = dr.data.select(list(self.right_keys)).rename_columns(names)
            parts.append(right.cast(parts[0].schema, safe=False)
                         if right.schema != parts[0].schema else right)
        keys = pa.concat_tables(parts)
        return keys.group_by(names, use_threads=False).aggregate([])

    def _rows_of(self, lkeys: pa.Table, rkeys: pa.Table) -> tuple[DeltaBatch, DeltaBatch]:
        """The stored left rows whose keys are in ``lkeys`` and right rows whose keys are
        in ``rkeys`` (both named like the left keys; consolidated)."""
        lrows = rrows = None
        if lkeys.num_rows:
            _, lrows = self.left.probe(_key_batch(lkeys), self.left_keys)
        if rkeys.num_rows:
            named = rkeys.rename_columns(list(self.right_keys))
            _, rrows = self.right.probe(_key_batch(named), self.right_keys)
        return (lrows.consolidate() if lrows is not None else
                DeltaBatch.empty(self.left_schema),
                rrows.consolidate() if rrows is not None else
                DeltaBatch.empty(self.right_schema))

    # -- state ------------------------------------------------------------------------
    def restore(self, state: dict[str, pa.Table]) -> None:
        super().restore(state)
        self._right_facts = None


def _key_batch(keys: pa.Table) -> DeltaBatch:
    return DeltaBatch(keys, np.ones(keys.num_rows, dtype=np.int64),
                      Annotation.empty(keys.num_rows))


def equal_key_pairs(left: pa.Table, left_keys: tuple[str, ...], right: pa.Table,
                    right_keys: tuple[str, ...]) -> tuple[np.ndarray, np.ndarray]:
    """All index pairs (i, j) with ``left[i]`` and ``right[j]`` equal and non-NULL on the
    key columns, ordered by i."""
    lh, lvalid, exact = key_hashes(left, left_keys)
    rh, rvalid, rexact = key_hashes(right, right_keys)
    exact = exact and rexact
    rows = np.flatnonzero(rvalid)
    order = rows[np.argsort(rh[rows], kind="stable")]
    sorted_keys = rh[order]
    lrows = np.flatnonzero(lvalid)
    lo = np.searchsorted(sorted_keys, lh[lrows], side="left")
    hi = np.searchsorted(sorted_keys, lh[lrows], side="right")
    counts = hi - lo
    total = int(counts.sum())
    li = np.repeat(lrows, counts)
    starts = np.repeat(lo - (np.cumsum(counts) - counts), counts)
    ri = order[starts + np.arange(total, dtype=np.int64)]
    if not exact and total:
        ok = np.ones(total, dtype=bool)
        for a, b in zip(left_keys, right_keys):
            lc, rc = left.column(a).take(li), right.column(b).take(ri)
            if lc.type != rc.type:
                common = pa.string() if pa.types.is_string(lc.type) or \
                    pa.types.is_string(rc.type) else pa.float64()
                lc, rc = lc.cast(common), rc.cast(common)
            ok &= pc.fill_null(pc.equal(lc, rc), False).to_numpy(zero_copy_only=False)
        li, ri = li[ok], ri[ok]
    return li.astype(np.int64), ri.astype(np.int64)


def _grouped_union(own: Annotation, rows: np.ndarray, extra: Annotation,
                   n: int) -> Annotation:
    """Per row r < n: ``own.row(r)`` ∪ the union of ``extra.row(k)`` for every k with
    ``rows[k] == r`` (duplicates removed, ids sorted)."""
    row_of = np.concatenate([own.row_ids(), rows[extra.row_ids()]]).astype(np.int64)
    values = np.concatenate([own.values, extra.values]).astype(np.int64)
    if len(values) == 0:
        return Annotation.empty(n)
    order = np.lexsort((values, row_of))
    row_of, values = row_of[order], values[order]
    keep = np.ones(len(values), dtype=bool)
    keep[1:] = (values[1:] != values[:-1]) | (row_of[1:] != row_of[:-1])
    lengths = np.bincount(row_of[keep], minlength=n)
    offsets = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    return Annotation(offsets, values[keep].astype(np.int32))
