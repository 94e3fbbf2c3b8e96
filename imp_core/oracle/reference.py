"""Reference (non-incremental) evaluation under annotated semantics: the test oracle.

``reference_evaluate`` runs a plan over full tables the way the capture query would:
every base tuple is annotated with its fragment, and each operator propagates
annotations per section 4.3 / Fig. 5 (selection and projection keep them, joins union
them, aggregation unions a group's, top-k keeps the k first, a set operation other than
UNION ALL unions the equal rows' of both inputs, or of the left one for EXCEPT). It
works a column at a time with Arrow and numpy, independently of the incremental
operators and of their annotation and grouping structures (``Annotation``/``DeltaBatch``
only carry the result of ``Bag.to_batch``); only expression evaluation
(``imp_core.plan.evaluate``), the exact-sum finalizers and the set operations'
multiplicity table (``set_multiplicity``) are shared, because they define the query's
values rather than how they are maintained. Group codes and exact per-group sums are in
``grouping.py``. Top-k follows the total order
``imp_core.engine.ordering`` defines, rebuilt here as Arrow sort keys.

Invariants of a ``Bag``: ``data`` has the node's schema; ``mult`` is int64 and > 0, one
per row; ``ann`` is a ``list<int32>`` array, one sorted list of distinct fragment ids per
row. Equal (row, annotation) pairs may occur on several rows: the bag is their sum.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from functools import cached_property
from typing import Mapping

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyroaring import BitMap

from imp_core.engine.annotation import Annotation
from imp_core.engine.zset import DeltaBatch, py_columns
from imp_core.errors import SqlRuntimeError
from imp_core.oracle.expand import expand_rows
from imp_core.oracle.grouping import first_of, group_codes, order_key_columns, power_sums
from imp_core.plan.aggregates.base import GroupState
from imp_core.plan.evaluate import evaluate, evaluate_predicate
from imp_core.plan.expand import Expand
from imp_core.plan.nodes import (
    Aggregate,
    Distinct,
    Join,
    OuterJoin,
    PlanNode,
    Project,
    QueryPlan,
    Scan,
    Select,
    SemiJoin,
    SetOp,
    TopK,
    Window,
    arrow_schema,
    set_multiplicity,
)
from imp_core.sketch.partition import PartitionSet
from imp_core.sketch.sketch import Sketch


# -- fragment sets as list<int32> arrays ---------------------------------------------------
def _sets(parent: np.ndarray, values: np.ndarray, n: int) -> pa.ListArray:
    """Row ``i``'s list is the sorted distinct ``values[parent == i]``."""
    order = np.lexsort((values, parent))
    p, v = parent[order], values[order]
    keep = np.ones(len(p), dtype=bool)
    keep[1:] = (p[1:] != p[:-1]) | (v[1:] != v[:-1])
    offsets = np.zeros(n + 1, dtype=np.int32)
    np.cumsum(np.bincount(p[keep], minlength=n), out=offsets[1:])
    return pa.ListArray.from_arrays(pa.array(offsets), pa.array(v[keep], type=pa.int32()))


def _flat(ann: pa.ListArray) -> tuple[np.ndarray, np.ndarray]:
    """(row of each id, id) of every id in ``ann``."""
    parent = pc.list_parent_indices(ann).to_numpy(zero_copy_only=False).astype(np.int64)
    values = pc.list_flatten(ann).to_numpy(zero_copy_only=False).astype(np.int32)
    return parent, values


def _padded(ann: pa.ListArray) -> np.ndarray:
    """Row i's ids left-aligned, padded with -1: rows compare as the sorted id tuples do."""
    parent, values = _flat(ann)
    lengths = np.bincount(parent, minlength=len(ann)) if len(parent) else np.zeros(len(ann), int)
    width = int(lengths.max()) if len(ann) else 0
    out = np.full((len(ann), width), -1, dtype=np.int64)
    if len(parent):
        starts = np.zeros(len(ann), dtype=np.int64)
        np.cumsum(lengths[:-1], out=starts[1:])
        out[parent, np.arange(len(parent)) - starts[parent]] = values
    return out


# -- grouping ------------------------------------------------------------------------------
def _group_union(ann: pa.ListArray, codes: np.ndarray, groups: int) -> pa.ListArray:
    parent, values = _flat(ann)
    return _sets(codes[parent], values, groups)


# -- the annotated bag ---------------------------------------------------------------------
@dataclass(frozen=True, eq=False)
class Bag:
    """An annotated bag (see the module docstring)."""

    data: pa.Table
    mult: np.ndarray
    ann: pa.ListArray

    @property
    def schema(self) -> pa.Schema:
        return self.data.schema

    def __len__(self) -> int:
        return self.data.num_rows

    def take(self, idx: np.ndarray) -> Bag:
        ix = pa.array(idx, type=pa.int64())
        return Bag(self.data.take(ix), self.mult[idx], self.ann.take(ix))

    def filter(self, mask: np.ndarray) -> Bag:
        return self.take(np.flatnonzero(mask))

    @cached_property
    def items(self) -> Counter:
        """{(row tuple, sorted fragment-id tuple): multiplicity}."""
        out: Counter = Counter()
        rows = zip(*py_columns(self.data)) if self.data.num_columns \
            else (() for _ in range(len(self)))
        for row, ann, m in zip(rows, self.ann.to_pylist(), self.mult.tolist()):
            out[(tuple(row), tuple(ann))] += m
        return out

    def consolidated(self) -> Bag:
        """Equal (row, annotation) pairs merged into one row."""
        if len(self) == 0:
            return self
        codes, groups = group_codes(list(self.data.columns), len(self))
        _, ann_code = np.unique(_padded(self.ann), axis=0, return_inverse=True)
        codes, groups = group_codes([pa.array(codes), pa.array(ann_code.reshape(-1))], len(self))
        mult = np.zeros(groups, dtype=np.int64)
        np.add.at(mult, codes, self.mult)
        first = self.take(first_of(codes, groups))
        return Bag(first.data, mult, first.ann)

    def to_batch(self) -> DeltaBatch:
        bag = self.consolidated()
        lengths = pc.list_value_length(bag.ann).to_numpy(zero_copy_only=False)
        offsets = np.zeros(len(bag) + 1, dtype=np.int64)
        np.cumsum(lengths, out=offsets[1:])
        ann = Annotation(offsets, _flat(bag.ann)[1])
        return DeltaBatch.of(bag.data, bag.mult, ann)


def _empty_sets(n: int) -> pa.ListArray:
    return pa.ListArray.from_arrays(pa.array(np.zeros(n + 1, dtype=np.int32)),
                                    pa.array([], type=pa.int32()))


# -- operators -----------------------------------------------------------------------------
def reference_evaluate(node: PlanNode, tables: Mapping[str, pa.Table],
                       partitions: PartitionSet) -> Bag:
    schema = arrow_schema(node.schema)
    if isinstance(node, Scan):
        return _scan(node, schema, tables, partitions)
    if isinstance(node, Select):
        child = reference_evaluate(node.input, tables, partitions)
        return child.filter(evaluate_predicate(node.predicate, child.data))
    if isinstance(node, Project):
        child = reference_evaluate(node.input, tables, partitions)
        cols = [evaluate(e.expr, child.data).cast(f.type) for e, f in zip(node.exprs, schema)]
        return Bag(pa.Table.from_arrays(cols, schema=schema), child.mult, child.ann)
    if isinstance(node, Join):
        return _join(node, schema, tables, partitions)
    if isinstance(node, SemiJoin):
        return _semi_join(node, tables, partitions)
    if isinstance(node, OuterJoin):
        return _outer_join(node, schema, tables, partitions)
    if isinstance(node, Distinct):
        child = reference_evaluate(node.input, tables, partitions)
        codes, groups = group_codes(list(child.data.columns), len(child))
        first = child.data.take(pa.array(first_of(codes, groups), type=pa.int64()))
        return Bag(first.cast(schema), np.ones(groups, dtype=np.int64),
                   _group_union(child.ann, codes, groups))
    if isinstance(node, Aggregate):
        return _aggregate(node, schema, tables, partitions)
    if isinstance(node, TopK):
        return _topk(node, tables, partitions)
    if isinstance(node, SetOp):
        return _set_op(node, schema, tables, partitions)
    if isinstance(node, Expand):
        child = reference_evaluate(node.input, tables, partitions)
        return Bag(*expand_rows(node, child.data, child.mult, child.ann, schema))
    if isinstance(node, Window):
        from imp_core.oracle.window import evaluate_window

        child = reference_evaluate(node.input, tables, partitions)
        return evaluate_window(node, child, group_codes, _padded, Bag)
    raise TypeError(f"unknown plan node {type(node).__name__}")


def _set_op(node: SetOp, schema: pa.Schema, tables, partitions: PartitionSet) -> Bag:
    """UNION ALL: both bags side by side. The others: per distinct row (NULLs equal) its
    multiplicities l and r in both inputs give its multiplicity (``set_multiplicity``),
    and its annotation is the union over the equal input rows, of the left input only
    for EXCEPT (the negated input contributes no provenance)."""
    left = reference_evaluate(node.left, tables, partitions)
    right = reference_evaluate(node.right, tables, partitions)
    data = pa.concat_tables([left.data.cast(schema),
                             right.data.rename_columns(schema.names).cast(schema)])
    mult = np.concatenate([left.mult, right.mult]).astype(np.int64)
    ann = pa.concat_arrays([left.ann, right.ann])
    if node.linear:
        return Bag(data.combine_chunks(), mult, ann)
    n, nl = data.num_rows, len(left)
    if n == 0:
        return Bag(data.combine_chunks(), mult, ann)
    codes, groups = group_codes(list(data.columns), n)
    lcount = np.bincount(codes[:nl], weights=mult[:nl], minlength=groups).round()
    rcount = np.bincount(codes[nl:], weights=mult[nl:], minlength=groups).round()
    m = np.array([set_multiplicity(node.kind, node.distinct, int(a), int(b))
                  for a, b in zip(lcount.tolist(), rcount.tolist())], dtype=np.int64)
    if node.negates_right:
        sets = _group_union(left.ann, codes[:nl], groups)
    else:
        sets = _group_union(ann, codes, groups)
    keep = np.flatnonzero(m > 0)
    first = first_of(codes, groups)[keep]
    return Bag(data.take(pa.array(first, type=pa.int64())).combine_chunks(), m[keep],
               sets.take(pa.array(keep, type=pa.int64())))


def _scan(node: Scan, schema: pa.Schema, tables, partitions: PartitionSet) -> Bag:
    t = tables[node.table]
    data = t.select(list(node.source_columns))
    data = data.rename_columns([f.name for f in node.fields]).cast(schema).combine_chunks()
    n = data.num_rows if data.num_columns else 0  # as the row-at-a-time evaluator did
    data = data.slice(0, n)
    if partitions.for_table(node.table):
        ids = partitions.annotate(node.table, t)[:n].astype(np.int32)
        ann = pa.ListArray.from_arrays(pa.array(np.arange(n + 1, dtype=np.int32)),
                                       pa.array(ids, type=pa.int32()))
    else:
        ann = _empty_sets(n)
    return Bag(data, np.ones(n, dtype=np.int64), ann)


def _key_type(a: pa.DataType, b: pa.DataType) -> pa.DataType | None:
    """The type both join keys compare in, as Python compares their values; None: never."""
    if a == b:
        return a
    strings = (pa.string(), pa.large_string(), pa.string_view())
    if a in strings and b in strings:
        return pa.string()
    numeric = [pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_decimal(t)
               for t in (a, b)]
    if not all(numeric):
        return None
    if pa.types.is_floating(a) or pa.types.is_floating(b):
        return pa.float64()
    if pa.types.is_decimal(a) or pa.types.is_decimal(b):
        scale = max(t.scale for t in (a, b) if pa.types.is_decimal(t))
        return pa.decimal128(38, scale)
    return pa.int64()


def _join_pairs(node: Join | SemiJoin | OuterJoin, left: Bag,
                right: Bag) -> tuple[np.ndarray, np.ndarray]:
    """Indices (li, ri) of every pair of rows whose equi-keys are equal and not NULL."""
    nl, nr = len(left), len(right)
    lk, rk, _ = node.equi_keys()
    if not lk:
        from imp_core.estimate.memory import check_cross_product  # refuses pairs beyond memory

        check_cross_product(node, nl, nr, left.data.nbytes, right.data.nbytes)
        return (np.repeat(np.arange(nl, dtype=np.int64), nr),
                np.tile(np.arange(nr, dtype=np.int64), nl))
    valid = np.ones(nl + nr, dtype=bool)
    cols = []
    for a, b in zip(lk, rk):
        la, rb = left.data.column(a), right.data.column(b)
        common = _key_type(la.type, rb.type)
        if common is None:
            return np.zeros(0, np.int64), np.zeros(0, np.int64)
        both = pa.chunked_array(la.cast(common).chunks + rb.cast(common).chunks, type=common)
        valid &= both.is_valid().to_numpy(zero_copy_only=False)
        cols.append(both)
    codes, _ = group_codes(cols, nl + nr)
    lcodes, rcodes = codes[:nl], codes[nl:]
    lrows = np.flatnonzero(valid[:nl])
    rrows = np.flatnonzero(valid[nl:])
    order = rrows[np.argsort(rcodes[rrows], kind="stable")]
    sorted_codes = rcodes[order]
    lo = np.searchsorted(sorted_codes, lcodes[lrows], side="left")
    hi = np.searchsorted(sorted_codes, lcodes[lrows], side="right")
    counts = hi - lo
    li = np.repeat(lrows, counts)
    starts = np.repeat(lo - (np.cumsum(counts) - counts), counts)
    ri = order[starts + np.arange(len(li), dtype=np.int64)]
    return li, ri


def _join(node: Join, schema: pa.Schema, tables, partitions) -> Bag:
    left = reference_evaluate(node.left, tables, partitions)
    right = reference_evaluate(node.right, tables, partitions)
    li, ri = _join_pairs(node, left, right)
    lb, rb = left.take(li), right.take(ri)
    data = pa.Table.from_arrays(list(lb.data.columns) + list(rb.data.columns), schema=schema)
    lp, lv = _flat(lb.ann)
    rp, rv = _flat(rb.ann)
    ann = _sets(np.concatenate([lp, rp]), np.concatenate([lv, rv]), len(li))
    out = Bag(data, lb.mult * rb.mult, ann)
    _, _, residual = node.equi_keys()
    if residual is not None and len(out):
        out = out.filter(evaluate_predicate(residual, out.data))
    return out


def _matching_pairs(node: SemiJoin | OuterJoin, left: Bag,
                    right: Bag) -> tuple[np.ndarray, np.ndarray]:
    """The join pairs of ``node`` that satisfy its residual condition too."""
    li, ri = _join_pairs(node, left, right)
    _, _, residual = node.equi_keys()
    if residual is not None and len(li):
        pairs = pa.Table.from_arrays(
            list(left.data.take(pa.array(li)).columns)
            + list(right.data.take(pa.array(ri)).columns),
            names=list(left.data.column_names) + list(right.data.column_names))
        ok = evaluate_predicate(residual, pairs)
        li, ri = li[ok], ri[ok]
    return li, ri


def _uncorrelated_semi_join(node: SemiJoin, left: Bag, right: Bag) -> Bag:
    """EXISTS / NOT EXISTS whose condition reads the right side only: one yes/no for
    every left row, without forming pairs; a kept semi-join row carries the fragments of
    every right row that satisfies the condition (each one a witness)."""
    _, _, residual = node.equi_keys()
    if residual is not None and len(right):
        right = right.filter(evaluate_predicate(residual, right.data))
    exists = int(right.mult.sum()) > 0
    if node.anti:
        return left.filter(np.full(len(left), not exists))
    if not exists:
        return left.filter(np.zeros(len(left), dtype=bool))
    _, witnesses = _flat(right.ann)
    lp, lv = _flat(left.ann)
    n = len(left)
    shared = np.unique(witnesses)
    parent = np.concatenate([lp, np.repeat(np.arange(n, dtype=np.int64), len(shared))])
    values = np.concatenate([lv, np.tile(shared, n)]).astype(np.int32)
    return Bag(left.data, left.mult, _sets(parent, values, n))


def _semi_join(node: SemiJoin, tables, partitions) -> Bag:
    """EXISTS / NOT EXISTS / NOT IN: left rows by whether they have a partner. A kept
    row of a semi-join carries its partners' fragments too; of an anti-join, its own."""
    left = reference_evaluate(node.left, tables, partitions)
    right = reference_evaluate(node.right, tables, partitions)
    if node.uncorrelated:
        return _uncorrelated_semi_join(node, left, right)
    li, ri = _matching_pairs(node, left, right)
    partners = np.bincount(li, minlength=len(left))[:len(left)] if len(li) else \
        np.zeros(len(left), dtype=np.int64)
    if not node.anti:
        lp, lv = _flat(left.ann)
        rp, rv = _flat(right.ann.take(pa.array(ri, type=pa.int64())))
        ann = _sets(np.concatenate([lp, li[rp]]), np.concatenate([lv, rv]), len(left))
        keep = partners > 0
        return Bag(left.data, left.mult, ann).filter(keep)
    if not node.null_aware:
        return left.filter(partners == 0)
    if int(right.mult.sum()) == 0:
        return left
    lk, rk, _ = node.equi_keys()
    if any(right.data.column(k).null_count for k in rk):
        return left.filter(np.zeros(len(left), dtype=bool))
    valid = np.ones(len(left), dtype=bool)
    for k in lk:
        valid &= left.data.column(k).is_valid().to_numpy(zero_copy_only=False)
    return left.filter((partners == 0) & valid)


def _outer_join(node: OuterJoin, schema: pa.Schema, tables, partitions) -> Bag:
    """LEFT / FULL OUTER JOIN: the inner join's pairs plus NULL-padded rows without a
    partner, each carrying only its own fragments."""
    left = reference_evaluate(node.left, tables, partitions)
    right = reference_evaluate(node.right, tables, partitions)
    li, ri = _matching_pairs(node, left, right)
    pieces = [(left.take(li), right.take(ri))]
    lonely = np.setdiff1d(np.arange(len(left)), li)
    pieces.append((left.take(lonely), None))
    if node.kind == "full":
        pieces.append((None, right.take(np.setdiff1d(np.arange(len(right)), ri))))
    bags = []
    for lb, rb in pieces:
        n = len(lb) if lb is not None else len(rb)
        lcols = list(lb.data.columns) if lb is not None else \
            [pa.nulls(n, f.type) for f in left.schema]
        rcols = list(rb.data.columns) if rb is not None else \
            [pa.nulls(n, f.type) for f in right.schema]
        data = pa.Table.from_arrays(lcols + rcols, schema=schema)
        mult = (lb.mult if lb is not None else 1) * (rb.mult if rb is not None else 1)
        parts = [_flat(b.ann) for b in (lb, rb) if b is not None]
        ann = _sets(np.concatenate([p for p, _ in parts]),
                    np.concatenate([v for _, v in parts]), n)
        bags.append(Bag(data, np.asarray(mult, dtype=np.int64), ann))
    return Bag(pa.concat_tables([b.data for b in bags]),
               np.concatenate([b.mult for b in bags]),
               pa.concat_arrays([b.ann for b in bags]))


def _aggregate(node: Aggregate, schema: pa.Schema, tables, partitions) -> Bag:
    child = reference_evaluate(node.input, tables, partitions)
    if len(child) == 0:  # no groups, so no rows (also without GROUP BY)
        return Bag(schema.empty_table(), np.zeros(0, np.int64), _empty_sets(0))
    types = {f.name: f.dtype for f in node.input.schema}
    codes, groups = group_codes([child.data.column(g) for g in node.group_by], len(child))
    first = pa.array(first_of(codes, groups), type=pa.int64())
    cols: list[pa.Array] = [child.data.column(g).take(first) for g in node.group_by]
    counts = np.zeros(groups, dtype=np.int64)
    np.add.at(counts, codes, child.mult)
    for agg in node.aggregates:
        out_type = schema.field(len(cols)).type
        fn = agg.function
        if not fn.takes_argument:
            cols.append(fn.finalize(GroupState(counts, counts), None).cast(out_type))
            continue
        col = child.data.column(agg.arg).combine_chunks()
        valid = col.is_valid().to_numpy(zero_copy_only=False)
        nonnull = np.zeros(groups, dtype=np.int64)
        np.add.at(nonnull, codes, child.mult * valid)
        t = types[agg.arg]
        if not fn.extremes:  # from the counts and the exact power sums Σx … Σx^moments
            powers = [power_sums(codes, groups, col, t, child.mult, k)
                      for k in range(1, fn.moments + 1)]
            state = GroupState(counts, nonnull, powers)
            raising = fn.raises(state, t)  # ANSI mode: a group's value raises
            if raising is not None:
                raise SqlRuntimeError(raising[0], f"{agg.func}({agg.arg}) overflows its "
                                      f"type in {int(raising[1].sum())} group(s)")
            cols.append(fn.finalize(state, t).cast(out_type))
        else:
            g = pa.table({"g": pa.array(codes), "v": col}).group_by("g").aggregate(
                [("v", agg.func)])
            at = np.empty(groups, dtype=np.int64)
            at[g.column("g").to_numpy()] = np.arange(groups)
            cols.append(g.column(f"v_{agg.func}").take(pa.array(at)).cast(out_type))
    data = pa.Table.from_arrays([c.combine_chunks() if isinstance(c, pa.ChunkedArray) else c
                                 for c in cols], schema=schema)
    return Bag(data, np.ones(groups, dtype=np.int64), _group_union(child.ann, codes, groups))


def _topk(node: TopK, tables, partitions) -> Bag:
    """The k first tuple occurrences in the total order of ``imp_core.engine.ordering``:
    the SQL order keys (NULLs where the key puts them), the other columns ascending with
    NULLs first, then the annotation as a sorted id tuple."""
    child = reference_evaluate(node.input, tables, partitions)
    names = list(node.input.column_names)
    order_cols = [s.column for s in node.order]
    keys: dict[str, pa.Array] = {}
    sort: list[tuple[str, str]] = []

    def add(name: str, values: pa.Array, descending: bool, nulls_first: bool) -> None:
        for column, direction in order_key_columns(values, descending, nulls_first):
            keys[f"k{len(keys)}"] = column
            sort.append((f"k{len(keys) - 1}", direction))

    for s in node.order:
        add(s.column, child.data.column(s.column), s.descending, s.effective_nulls_first)
    for name in names:
        if name not in order_cols:
            add(name, child.data.column(name), False, True)
    padded = _padded(child.ann)
    for j in range(padded.shape[1]):
        keys[f"a{j}"] = pa.array(padded[:, j])
        sort.append((f"a{j}", "ascending"))
    if sort and len(child):
        idx = pc.sort_indices(pa.table(keys), sort_keys=sort).to_numpy()
    else:
        idx = np.arange(len(child), dtype=np.int64)
    ordered = child.take(idx)
    before = np.cumsum(ordered.mult) - ordered.mult
    take = np.minimum(ordered.mult, np.maximum(node.k - before, 0))
    out = ordered.filter(take > 0)
    return Bag(out.data, take[take > 0], out.ann)


# -- captures ------------------------------------------------------------------------------
@dataclass(frozen=True)
class ReferenceResult:
    bag: Bag
    sketch: Sketch

    def rows(self) -> Counter:
        """The plain query result: {row: multiplicity}."""
        out: Counter = Counter()
        for (r, _), m in self.bag.items.items():
            out[r] += m
        return out


def reference_capture(plan: QueryPlan | PlanNode, tables: Mapping[str, pa.Table],
                      partitions: PartitionSet) -> ReferenceResult:
    """The accurate sketch and the result of ``plan`` over full ``tables``."""
    root = plan.root if isinstance(plan, QueryPlan) else plan
    bag = reference_evaluate(root, tables, partitions)
    parent, values = _flat(bag.ann)
    live = values[bag.mult[parent] > 0] if len(values) else values
    return ReferenceResult(bag, Sketch(partitions, BitMap(np.unique(live).tolist())))


def restrict_to_sketch(tables: Mapping[str, pa.Table], sketch: Sketch) -> dict[str, pa.Table]:
    """Each sketched table cut down to the tuples of the sketch's fragments (D_P)."""
    out = dict(tables)
    for part in sketch.partitions.partitions:
        t = tables[part.table]
        keep = BitMap(sketch.table_fragments(part.table))
        ids = part.annotate(t.column(part.column))
        mask = np.isin(ids, np.fromiter(keep, dtype=np.int32, count=len(keep)))
        out[part.table] = t.filter(pa.array(mask))
    return out
