"""Incremental aggregation γ_{f(a);G} for the functions of ``imp_core.plan.aggregates``; DISTINCT.

State per group g (section 5.2.5/5.2.6): CNT (weighted tuple count), per aggregate its
non-NULL count and what its function declares (``AggregateFunction.moments`` exact power
sums Σx … Σx^k, or for ``extremes`` an ordered multiset of values), and F_g with the
group's sketch {ρ | F_g[ρ] > 0}. Values come from the function's ``finalize``.
Delta rule per batch and touched group g, with old state S[g] and new state S'[g]:
    output  -⟨g ∘ f(S[g]),  P⟩   if CNT > 0
            +⟨g ∘ f(S'[g]), P'⟩  if CNT' > 0
and nothing at all for g when the output tuple and its sketch are unchanged, so each
group contributes at most one deletion and one insertion per batch.
Min/max multisets may be bounded to the ``buffer`` best distinct values; when deletions
empty a bounded buffer of a group that still has values, the group is refilled from
``source`` (the operator's full current input), or ``StateExhaustedError`` is raised.
State tables (``AggregateOp.STATE``): ``groups`` (one row per live group), ``fragments``
(F_g), and per min/max aggregate i ``minmax{i}`` and ``complete{i}``; every table but
``fragments`` names its group by ``gid``, which ``fragments`` encodes as key // P.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, ClassVar, Mapping, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from imp_core.engine.operators.arrays import (
    INT_LIMIT,
    equal_or_both_null,
    grow,
    largest_abs,
    power,
)
from imp_core.engine.operators.base import Operator
from imp_core.engine.operators.groups import FragmentCounts, GroupKeys
from imp_core.engine.operators.minmax import MinMaxSets
from imp_core.engine.state import StateLayout, StateTable, StateTables
from imp_core.engine.zset import DeltaBatch
from imp_core.errors import SqlRuntimeError, StateExhaustedError
from imp_core.plan.aggregates.base import AggregateFunction, GroupState
from imp_core.plan.aggregates.exact import exact_values, kind_of
from imp_core.plan.nodes import Aggregate


@dataclass(frozen=True)
class MinMaxValues:
    """One min/max aggregate's multisets: rows (``gids``, ``values``, ``counts``), and per
    group whether its multiset holds every non-NULL value of the group (``complete``)."""

    gids: np.ndarray
    values: pa.Array
    counts: pa.Array
    complete: np.ndarray


@dataclass(frozen=True)
class GroupTotals:
    """An aggregation's exact state in columnar form; group ``g`` is position ``g``.

    ``keys``: one array per group-by column; ``cnt``: CNT per group; ``nonnull``: per
    aggregate its non-NULL count per group (ignored for count(*)); ``sums``: per aggregate
    with power sums its exact Σx (the engine's integers, see ``imp_core.plan.aggregates.exact``)
    and ``higher`` its Σx², … up to its function's ``moments``;
    ``fragments``: F_g as (group, fragment, count) arrays, repeated pairs adding up;
    ``minmax``: per min/max aggregate its multisets.
    """

    keys: Sequence[pa.Array]
    cnt: np.ndarray
    nonnull: Mapping[int, np.ndarray]
    sums: Mapping[int, Sequence[int] | np.ndarray]
    fragments: tuple[np.ndarray, np.ndarray, np.ndarray]
    minmax: Mapping[int, MinMaxValues] = field(default_factory=dict)
    higher: Mapping[int, Sequence[Sequence[int] | np.ndarray]] = field(default_factory=dict)


class AggregateOp(Operator):
    kind = "aggregate"
    stateful = True
    GROUPS: ClassVar[StateTable] = StateTable(
        "groups", "one row per live group: its keys k<j>, gid, cnt and per aggregate i "
        "nonnull<i> and, for functions with power sums, sum<i> (Σx) and sum<i>p<k> (Σx^k), "
        "exact sums as decimal strings")
    FRAGMENTS: ClassVar[StateTable] = StateTable(
        "fragments", "F_g: key = gid·P + ρ (sorted) and count, nonzero counts only")
    MINMAX: ClassVar[StateTable] = StateTable(
        "minmax{i}", "min/max aggregate i's multisets: gid, value, count")
    COMPLETE: ClassVar[StateTable] = StateTable(
        "complete{i}", "min/max aggregate i: gid, complete (the multiset holds every value)")
    STATE: ClassVar[StateLayout] = StateLayout((GROUPS, FRAGMENTS, MINMAX, COMPLETE))

    def __init__(self, node: Aggregate, op_id: str, nfrag: int,
                 minmax_buffer: int | None = None,
                 source: Callable[[], DeltaBatch] | None = None):
        super().__init__(node, op_id)
        self.agg = node
        in_types = {f.name: f.dtype for f in node.input.schema}
        self.arg_types = [in_types[a.arg] if a.arg else None for a in node.aggregates]
        self.groups = GroupKeys([in_types[g] for g in node.group_by])
        self.frags = FragmentCounts(nfrag)
        self.cnt = np.zeros(0, dtype=np.int64)
        self.nonnull: list[np.ndarray] = [np.zeros(0, dtype=np.int64) for _ in node.aggregates]
        self.funcs = [a.function for a in node.aggregates]
        # Σx per aggregate with power sums (None otherwise), and Σx^2 … Σx^moments
        self.sums: list[np.ndarray | None] = [
            np.zeros(0, dtype=np.int64) if f.moments else None for f in self.funcs]
        self.higher: list[list[np.ndarray]] = [
            [np.zeros(0, dtype=np.int64) for _ in range(f.moments - 1)] for f in self.funcs]
        self.minmax: list[MinMaxSets | None] = [
            MinMaxSets(f.largest_first, minmax_buffer) if f.extremes else None
            for f in self.funcs]
        self.source = source
        self.refills = 0
        # aggregates that raise under ANSI mode (ansi_sum)
        self.raising = [i for i, f in enumerate(self.funcs)
                        if type(f).raises is not AggregateFunction.raises]
        for f, t in zip(self.funcs, self.arg_types):
            if f.numeric_only:
                kind_of(t)  # rejects non-numeric arguments at build time

    # -- helpers --------------------------------------------------------------------------
    def _ensure(self, n: int) -> None:
        self.cnt = grow(self.cnt, n)
        self.nonnull = [grow(a, n) for a in self.nonnull]
        self.sums = [None if s is None else grow(s, n) for s in self.sums]
        self.higher = [[grow(h, n) for h in hs] for hs in self.higher]
        self.frags.ensure(n)

    def _powers(self, i: int) -> list[np.ndarray]:
        """Aggregate ``i``'s power sums Σx, Σx², … (none without power sums)."""
        s = self.sums[i]
        return [] if s is None else [s, *self.higher[i]]

    def _setpower(self, i: int, k: int, arr: np.ndarray) -> None:
        if k == 0:
            self.sums[i] = arr
        else:
            self.higher[i][k - 1] = arr

    def _raising(self, cnt: np.ndarray, nonnull: list[np.ndarray],
                 sums: list[list[np.ndarray]]) -> dict[str, np.ndarray]:
        """ANSI mode: the groups whose values raise, per Spark error class."""
        out: dict[str, np.ndarray] = {}
        for i in self.raising:
            found = self.funcs[i].raises(GroupState(cnt, nonnull[i], sums[i]),
                                         self.arg_types[i])
            if found is not None:
                cls, mask = found
                out[cls] = out[cls] | mask if cls in out else mask
        return out

    def _count_raising(self, old: dict[str, np.ndarray], new: dict[str, np.ndarray],
                       dele: np.ndarray, ins: np.ndarray) -> None:
        for cls in set(old) | set(new):
            delta = int((new[cls] & ins).sum()) if cls in new else 0
            delta -= int((old[cls] & dele).sum()) if cls in old else 0
            if self.errors is None and delta > 0:
                raise SqlRuntimeError(cls, f"SUM overflows its type in {self.node}")
            if self.errors is not None:
                self.errors.add_count(self.op_id, cls, delta, "SUM")

    def _values(self, gids: np.ndarray, cnt: np.ndarray, nonnull: list[np.ndarray],
                sums: list[list[np.ndarray]], extremes: list) -> list[pa.Array]:
        cols = self.groups.key_arrays(gids)
        for i, (f, t) in enumerate(zip(self.funcs, self.arg_types)):
            cols.append(f.finalize(GroupState(cnt, nonnull[i], sums[i], extremes[i]), t))
        return cols

    # -- the delta rule -------------------------------------------------------------------
    def _step(self, inputs: list[DeltaBatch]) -> DeltaBatch:
        (batch,) = inputs
        if len(batch) == 0:
            return self.empty()
        w = batch.weights
        gids, inv = self.groups.lookup(batch.data, self.agg.group_by)
        self._ensure(len(self.groups))
        ng = len(gids)

        # old state of the touched groups
        old_cnt = self.cnt[gids].copy()
        old_nonnull = [a[gids].copy() for a in self.nonnull]
        old_sums = [[p[gids].copy() for p in self._powers(i)] for i in range(len(self.funcs))]
        old_ext = [None if m is None else [m.extreme(g) for g in gids.tolist()]
                   for m in self.minmax]
        old_size = self.frags.size[gids].copy()
        old_single = self.frags.single[gids].copy()

        # linear parts: counts and exact sums
        changed = np.zeros(ng, dtype=bool)
        dcnt = np.zeros(ng, dtype=np.int64)
        np.add.at(dcnt, inv, w)
        self.cnt[gids] += dcnt
        changed |= dcnt != 0
        for i, (a, f) in enumerate(zip(self.agg.aggregates, self.funcs)):
            if not f.takes_argument:
                continue
            col = batch.data.column(a.arg).combine_chunks()
            valid = w if col.null_count == 0 else \
                w * col.is_valid().to_numpy(zero_copy_only=False)
            dn = np.zeros(ng, dtype=np.int64)
            np.add.at(dn, inv, valid)
            self.nonnull[i][gids] += dn
            changed |= dn != 0
            if f.moments:
                vals = exact_values(col)
                for k in range(f.moments):  # Σx^(k+1) += w·x^(k+1)
                    changed |= self._add_sums(i, k, gids, inv, power(vals, k + 1), w)
            elif self.minmax[i] is not None:
                changed |= self._update_minmax(i, gids, inv, col, w, old_nonnull[i])

        before = self.frags.update(gids[inv], w, batch.annotation)
        if before:
            changed |= np.isin(gids, np.fromiter(before, dtype=np.int64))
        if not changed.any():
            return self.empty()

        cg = gids[changed]
        new_ext = [None if m is None else [m.extreme(g) for g in cg.tolist()]
                   for m in self.minmax]
        old_cols = self._values(
            cg, old_cnt[changed], [a[changed] for a in old_nonnull],
            [[p[changed] for p in ps] for ps in old_sums],
            [None if e is None else [x for x, c in zip(e, changed) if c] for e in old_ext])
        new_cols = self._values(
            cg, self.cnt[cg], [a[cg] for a in self.nonnull],
            [[p[cg] for p in self._powers(i)] for i in range(len(self.funcs))], new_ext)
        old_exists = old_cnt[changed] > 0
        new_exists = self.cnt[cg] > 0
        same = old_exists == new_exists
        same &= ~np.isin(cg, np.fromiter(before, dtype=np.int64)) if before else True
        for oc, nc in zip(old_cols[len(self.agg.group_by):], new_cols[len(self.agg.group_by):]):
            same &= equal_or_both_null(oc, nc)
        if self.raising:
            old_raising = self._raising(old_cnt[changed], [a[changed] for a in old_nonnull],
                                        [[p[changed] for p in ps] for ps in old_sums])
            new_raising = self._raising(
                self.cnt[cg], [a[cg] for a in self.nonnull],
                [[p[cg] for p in self._powers(i)] for i in range(len(self.funcs))])
            for cls in set(old_raising) | set(new_raising):
                zero = np.zeros(len(cg), dtype=bool)
                same &= old_raising.get(cls, zero) == new_raising.get(cls, zero)
        dele = old_exists & ~same
        ins = new_exists & ~same
        if self.raising:
            self._count_raising(old_raising, new_raising, dele & old_exists,
                                ins & new_exists)
        parts = []
        if dele.any():
            idx = np.flatnonzero(dele)
            data = pa.Table.from_arrays([c.take(pa.array(idx)) for c in old_cols],
                                        schema=self.output_schema)
            ann = self.frags.annotation(cg[idx], before, old_size[changed][idx],
                                        old_single[changed][idx])
            parts.append(DeltaBatch.of(data, -1, ann))
        if ins.any():
            idx = np.flatnonzero(ins)
            data = pa.Table.from_arrays([c.take(pa.array(idx)) for c in new_cols],
                                        schema=self.output_schema)
            parts.append(DeltaBatch.of(data, 1, self.frags.annotation(cg[idx])))
        return DeltaBatch.concat(parts, self.output_schema)

    def _add_sums(self, i: int, k: int, gids, inv, vals: np.ndarray,
                  w: np.ndarray) -> np.ndarray:
        """Adds w·vals per group to aggregate ``i``'s power sum ``k`` (0: Σx), promoting it
        to Python integers before int64 could overflow; which groups' sums changed."""
        state = self._powers(i)[k]
        if vals.dtype != object and len(vals):
            # bounds as Python integers: np.abs of int64's least value is itself, negative
            bound = largest_abs(vals) * largest_abs(w) * len(vals)
            if bound >= INT_LIMIT:
                vals = vals.astype(object)
        if vals.dtype == object:
            contrib = vals * w.astype(object)
            ds = np.array([0] * len(gids), dtype=object)
        else:
            contrib = vals * w
            ds = np.zeros(len(gids), dtype=np.int64)
        np.add.at(ds, inv, contrib)
        if state.dtype != object:
            if ds.dtype == object or (len(ds) and largest_abs(state[gids])
                                      + largest_abs(ds) >= INT_LIMIT):
                state = state.astype(object)
                self._setpower(i, k, state)
        state[gids] = state[gids] + ds
        return np.asarray(ds != 0, dtype=bool)

    def _update_minmax(self, i: int, gids, inv, col: pa.Array, w: np.ndarray,
                       old_nonnull: np.ndarray) -> np.ndarray:
        mm = self.minmax[i]
        before = [mm.extreme(g) for g in gids.tolist()]
        for g, n in zip(gids.tolist(), old_nonnull.tolist()):
            mm.mark_complete_if_whole(g, n)
        t = pa.table({"g": pa.array(inv), "v": col, "w": pa.array(w)})
        t = t.filter(pc.is_valid(t.column("v")))
        agg = t.group_by(["g", "v"], use_threads=False).aggregate([("w", "sum")])
        for gi, v, dw in zip(agg.column("g").to_pylist(), agg.column("v").to_pylist(),
                             agg.column("w_sum").to_pylist()):
            if dw:
                mm.update(int(gids[gi]), v, dw)
        dry = [g for g in gids.tolist() if mm.needs_refill(g, int(self.nonnull[i][g]))]
        if dry:
            self._refill(i, dry)
        return np.array([mm.extreme(g) != b for g, b in zip(gids.tolist(), before)], dtype=bool)

    def _refill(self, i: int, groups: list[int]) -> None:
        """Reload the emptied buffers of ``groups`` from one read of the full input."""
        if self.source is None:
            raise StateExhaustedError(
                f"{self.agg.aggregates[i].func} buffer of group "
                f"{self.groups.key_of(groups[0])} is exhausted and no refill source is "
                "configured")
        self.refills += 1
        full = self.source()
        wanted = {self.groups.key_of(g): g for g in groups}
        values: dict[int, dict] = {g: {} for g in groups}
        keys = zip(*[full.data.column(c).to_pylist() for c in self.agg.group_by]) \
            if self.agg.group_by else (() for _ in range(len(full)))
        args = full.data.column(self.agg.aggregates[i].arg).to_pylist()
        for k, v, wt in zip(keys, args, full.weights.tolist()):
            g = wanted.get(tuple(k))
            if g is not None and v is not None:
                values[g][v] = values[g].get(v, 0) + wt
        for g, vals in values.items():
            self.minmax[i].refill(g, {v: c for v, c in vals.items() if c > 0})

    # -- state ------------------------------------------------------------------------
    def _minmax_ids(self) -> list[int]:
        return [i for i, m in enumerate(self.minmax) if m is not None]

    def group_tables(self) -> list[str]:
        """The state tables besides ``groups`` that name their group by ``gid``."""
        return [t.of(i) for i in self._minmax_ids() for t in (self.MINMAX, self.COMPLETE)]

    def _groups_table(self, keys: Sequence[pa.Array], gid: np.ndarray, cnt: np.ndarray,
                      nonnull: Sequence[np.ndarray], powers: Sequence[Sequence]) -> pa.Table:
        """The ``groups`` table of groups ``gid`` (the one place its columns are written;
        ``state_schemas`` declares them): keys k<j>, gid, cnt, per aggregate i nonnull<i>
        and its power sums (``_sum_columns``) as decimal strings, exact at any size."""
        cols = {f"k{j}": arr for j, arr in enumerate(keys)}
        cols["gid"] = pa.array(gid, pa.int64())
        cols["cnt"] = pa.array(np.asarray(cnt).astype(np.int64), pa.int64())
        for i, f in enumerate(self.funcs):
            cols[f"nonnull{i}"] = pa.array(np.asarray(nonnull[i]).astype(np.int64), pa.int64())
            for c, p in zip(_sum_columns(i, f.moments), powers[i]):
                cols[c] = pa.array([str(int(v)) for v in p], pa.string())
        return pa.table(cols)

    def state_schemas(self) -> dict[str, pa.Schema | None]:
        fields = [pa.field(f"k{j}", t) for j, t in enumerate(self.groups.key_types)]
        fields += [pa.field("gid", pa.int64()), pa.field("cnt", pa.int64())]
        for i, f in enumerate(self.funcs):
            fields.append(pa.field(f"nonnull{i}", pa.int64()))
            fields += [pa.field(c, pa.string()) for c in _sum_columns(i, f.moments)]
        out: dict[str, pa.Schema | None] = {
            self.GROUPS.name: pa.schema(fields),
            self.FRAGMENTS.name: pa.schema([("key", pa.int64()), ("count", pa.int64())])}
        for i in self._minmax_ids():
            out[self.MINMAX.of(i)] = pa.schema([("gid", pa.int64()),
                                                ("value", self.arg_types[i]),
                                                ("count", pa.int64())])
            out[self.COMPLETE.of(i)] = pa.schema([("gid", pa.int64()),
                                                  ("complete", pa.bool_())])
        return out

    def state_from_groups(self, totals: GroupTotals) -> dict[str, pa.Table]:
        """The state holding ``totals`` (e.g. computed by another system)."""
        n = len(totals.cnt)
        gid = np.arange(n, dtype=np.int64)
        keys = [arr.cast(t) for arr, t in zip(totals.keys, self.groups.key_types)]
        nonnull = [totals.nonnull[i] if f.takes_argument else np.zeros(n, dtype=np.int64)
                   for i, f in enumerate(self.funcs)]
        powers = [_total_powers(totals, i, f.moments) for i, f in enumerate(self.funcs)]
        groups = self._groups_table(keys, gid, totals.cnt, nonnull, powers)
        out = {self.GROUPS.name: groups,
               self.FRAGMENTS.name: self.frags.table_from_pairs(*totals.fragments)}
        for i in self._minmax_ids():
            mm = totals.minmax[i]
            has = np.zeros(n, dtype=bool)
            has[np.asarray(mm.gids, dtype=np.int64)] = True
            out[self.MINMAX.of(i)] = pa.table({
                "gid": pa.array(mm.gids, pa.int64()),
                "value": mm.values.cast(self.arg_types[i]),
                "count": mm.counts.cast(pa.int64())})
            out[self.COMPLETE.of(i)] = pa.table({
                "gid": pa.array(gid[has], pa.int64()),
                "complete": pa.array(np.asarray(mm.complete, dtype=bool)[has], pa.bool_())})
        return out

    def output_from_groups(self, totals: GroupTotals) -> DeltaBatch:
        """The whole output of the operator holding ``totals``: ``current_output`` after
        restoring ``state_from_groups(totals)``, without building that state (no key
        index, no exact sums as text), for a first output whose state is then dropped."""
        cnt = np.asarray(totals.cnt, dtype=np.int64)
        gids = np.flatnonzero(cnt > 0)
        if len(gids) == 0:
            return self.empty()
        take = pa.array(gids)
        cols = [arr.cast(t).take(take) for arr, t in zip(totals.keys, self.groups.key_types)]
        for i, (a, f, t) in enumerate(zip(self.agg.aggregates, self.funcs, self.arg_types)):
            nonnull = np.asarray(totals.nonnull[i])[gids] if f.takes_argument else None
            sums = [np.asarray(p)[gids] for p in _total_powers(totals, i, f.moments)]
            if f.extremes:  # the best value a group's multiset holds
                mm = totals.minmax[i]
                best = pa.table({"g": pa.array(mm.gids, pa.int64()), "v": mm.values.cast(t),
                                 "c": mm.counts}).filter(pc.field("c") > 0) \
                    .group_by("g").aggregate([("v", a.func)])
                at = np.full(len(cnt), -1, dtype=np.int64)
                at[best.column("g").to_numpy()] = np.arange(best.num_rows)
                rows = pa.array(at[gids], mask=at[gids] < 0)
                cols.append(best.column(f"v_{a.func}").take(rows).combine_chunks().cast(t))
                continue
            cols.append(f.finalize(GroupState(cnt[gids], nonnull, sums), t))
        frags = FragmentCounts(self.frags.P)
        frags.restore(frags.table_from_pairs(*totals.fragments), len(cnt))
        data = pa.Table.from_arrays(cols, schema=self.output_schema)
        return DeltaBatch.of(data, 1, frags.annotation(gids))

    def snapshot(self) -> dict[str, pa.Table]:
        n = len(self.groups)
        live = np.flatnonzero(self.cnt[:n] != 0)
        groups = self._groups_table(
            self.groups.key_arrays(live), live, self.cnt[live],
            [a[live] for a in self.nonnull],
            [[p[live] for p in self._powers(i)] for i in range(len(self.funcs))])
        out = {self.GROUPS.name: groups, self.FRAGMENTS.name: self.frags.snapshot()}
        live_ids = set(live.tolist())
        for i in self._minmax_ids():
            mm = self.minmax[i]
            assert mm is not None
            g, v, c, comp = [], [], [], []
            for gid, s in mm.sets.items():
                if gid not in live_ids:
                    continue  # an emptied group: not among the groups, nothing to keep
                for value, count in s.items():
                    g.append(gid), v.append(value), c.append(count)
                comp.append((gid, mm.complete.get(gid, True)))
            out[self.MINMAX.of(i)] = pa.table({"gid": pa.array(g, pa.int64()),
                                               "value": pa.array(v, self.arg_types[i]),
                                               "count": pa.array(c, pa.int64())})
            out[self.COMPLETE.of(i)] = pa.table({
                "gid": pa.array([x for x, _ in comp], pa.int64()),
                "complete": pa.array([y for _, y in comp], pa.bool_())})
        return out

    def restore(self, state: dict[str, pa.Table]) -> None:
        groups = state[self.GROUPS.name]
        gids = groups.column("gid").to_numpy()
        nkeys = len(self.agg.group_by)
        self.groups = GroupKeys(self.groups.key_types)
        order = np.argsort(gids)
        keycols = [groups.column(f"k{j}").to_pylist() for j in range(nkeys)]
        remap = np.zeros(int(gids.max()) + 1 if len(gids) else 0, dtype=np.int64)
        for pos in order.tolist():
            remap[gids[pos]] = self.groups.add(tuple(col[pos] for col in keycols))
        n = len(self.groups)
        new_ids = remap[gids] if len(gids) else gids
        self.cnt = np.zeros(n, dtype=np.int64)
        self.cnt[new_ids] = groups.column("cnt").to_numpy()
        for i, f in enumerate(self.funcs):
            self.nonnull[i] = np.zeros(n, dtype=np.int64)
            self.nonnull[i][new_ids] = groups.column(f"nonnull{i}").to_numpy()
            for k, c in enumerate(_sum_columns(i, f.moments)):
                vals = [int(x) for x in groups.column(c).to_pylist()]
                big = any(abs(v) >= INT_LIMIT for v in vals)
                arr = np.array([0] * n, dtype=object) if big else np.zeros(n, dtype=np.int64)
                arr[new_ids] = np.array(vals, dtype=object if big else np.int64)
                self._setpower(i, k, arr)
        fr = state[self.FRAGMENTS.name]
        keys = fr.column("key").to_numpy()
        g_old, frag = np.divmod(keys, self.frags.P)
        fixed = pa.table({"key": remap[g_old] * self.frags.P + frag if len(keys) else keys,
                          "count": fr.column("count")})
        fixed = fixed.sort_by("key")
        self.frags.restore(fixed, n)
        for i, mm in enumerate(self.minmax):
            if mm is None:
                continue
            t = state[self.MINMAX.of(i)]
            ct = state[self.COMPLETE.of(i)]
            mm.load(zip(remap[t.column("gid").to_numpy()].tolist(),
                        t.column("value").to_pylist(), t.column("count").to_pylist()),
                    zip(remap[ct.column("gid").to_numpy()].tolist(),
                        ct.column("complete").to_pylist()))
        self._ensure(n)

    def unite_states(self, states: Sequence[Mapping[str, pa.Table]]) -> StateTables:
        """Several states of this operator over disjoint groups (e.g. shards) as one,
        group ids shifted to stay distinct (fragment keys ``gid·P + ρ`` shift with them)."""
        P = self.frags.P
        parts: dict[str, list[pa.Table]] = {}
        offset = 0
        for s in states:
            g = s[self.GROUPS.name]
            gid = g.column("gid").to_numpy()
            parts.setdefault(self.GROUPS.name, []).append(_shift(g, offset))
            f = s[self.FRAGMENTS.name]
            keys = f.column("key").to_numpy()
            parts.setdefault(self.FRAGMENTS.name, []).append(
                f.set_column(0, "key", pa.array(keys + offset * P, pa.int64())))
            for name in self.group_tables():
                if name in s:
                    parts.setdefault(name, []).append(_shift(s[name], offset))
            offset += int(gid.max()) + 1 if len(gid) else 0
        return {name: pa.concat_tables(tables) for name, tables in parts.items()}

    def split_state(self, state: Mapping[str, pa.Table], column: str,
                    select: Callable[[pa.ChunkedArray], np.ndarray]) -> StateTables:
        """The part of ``state`` whose groups ``select`` keeps, judged by their values of
        group-by column ``column``."""
        j = self.agg.group_by.index(column)
        groups = state[self.GROUPS.name]
        keep = np.asarray(select(groups.column(f"k{j}")), dtype=bool)
        gids = pa.array(groups.column("gid").to_numpy()[keep], pa.int64())
        frags = state[self.FRAGMENTS.name]
        owner = pa.array(frags.column("key").to_numpy() // self.frags.P, pa.int64())
        out = {self.GROUPS.name: groups.filter(pa.array(keep)),
               self.FRAGMENTS.name: frags.filter(pc.is_in(owner, value_set=gids))}
        for name in self.group_tables():
            if name in state:
                t = state[name]
                out[name] = t.filter(pc.is_in(t.column("gid"), value_set=gids))
        return out

    def current_output(self) -> DeltaBatch:
        """The operator's whole current output: one row (weight +1) per non-empty group,
        annotated with the group's sketch — the integral of every delta it emitted."""
        n = len(self.groups)
        gids = np.flatnonzero(self.cnt[:n] > 0)
        if len(gids) == 0:
            return self.empty()
        cols = self._values(
            gids, self.cnt[gids], [a[gids] for a in self.nonnull],
            [[p[gids] for p in self._powers(i)] for i in range(len(self.funcs))],
            [None if m is None else [m.extreme(g) for g in gids.tolist()] for m in self.minmax])
        data = pa.Table.from_arrays(cols, schema=self.output_schema)
        return DeltaBatch.of(data, 1, self.frags.annotation(gids))

    def state_bytes(self) -> int:
        size = self.cnt.nbytes + sum(a.nbytes for a in self.nonnull)
        size += sum(p.nbytes if p.dtype != object else 32 * len(p)
                    for i in range(len(self.funcs)) for p in self._powers(i))
        size += self.frags.nbytes() + self.groups.nbytes()
        size += sum(0 if m is None else 64 * sum(len(s) for s in m.sets.values())
                    for m in self.minmax)
        return int(size)


def _sum_columns(i: int, moments: int) -> list[str]:
    """The ``groups`` columns of aggregate ``i``'s power sums: sum<i> (Σx), sum<i>p<k>."""
    return [f"sum{i}" if k == 1 else f"sum{i}p{k}" for k in range(1, moments + 1)]


def _total_powers(totals: GroupTotals, i: int, moments: int) -> list:
    """Aggregate ``i``'s power sums Σx … Σx^moments in ``totals``."""
    if not moments:
        return []
    return [totals.sums[i], *totals.higher.get(i, ())][:moments]


def _shift(t: pa.Table, offset: int) -> pa.Table:
    i = t.schema.get_field_index("gid")
    return t.set_column(i, "gid", pa.array(t.column("gid").to_numpy() + offset, pa.int64()))


def distinct_node(node) -> Aggregate:
    """DISTINCT is grouping on every column with no aggregates (δ via γ)."""
    return Aggregate(node.input, tuple(f.name for f in node.input.schema), ())
