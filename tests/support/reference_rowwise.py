"""The former row-at-a-time reference evaluator, kept only to cross-check the vectorized one.

``imp_core.oracle.reference`` is the oracle the tests use; this module is its predecessor, a
direct transcription of the annotated semantics, one tuple at a time in plain Python.

``rowwise_evaluate`` runs a plan over full tables the way the capture query would:
every base tuple is annotated with its fragment, and each operator propagates
annotations per section 4.3 / Fig. 5 (selection and projection keep them, joins union
them, aggregation unions a group's, top-k keeps the k first). It is written tuple at a
time in plain Python, independently of the incremental operators; only expression
evaluation (``imp_core.plan.evaluate``), the exact-sum finalizers and the top-k order are
shared, because they define the query's values rather than how they are maintained.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass
from typing import Mapping

import numpy as np
import pyarrow as pa

from imp_core.engine.annotation import Annotation
from imp_core.engine.ordering import sort_key
from imp_core.engine.zset import DeltaBatch
from imp_core.plan.aggregates.base import GroupState
from imp_core.plan.aggregates.exact import python_exact
from imp_core.plan.evaluate import evaluate, evaluate_predicate
from imp_core.plan.nodes import (
    Aggregate,
    Distinct,
    Join,
    PlanNode,
    Project,
    Scan,
    Select,
    TopK,
    arrow_schema,
)
from imp_core.sketch.partition import PartitionSet

Row = tuple
Ann = tuple  # sorted fragment ids


@dataclass
class Bag:
    """An annotated bag: {(row, annotation): multiplicity > 0} with a schema."""

    schema: pa.Schema
    items: Counter

    def table(self) -> tuple[pa.Table, list[tuple[Row, Ann, int]]]:
        entries = [(r, a, m) for (r, a), m in self.items.items()]
        cols = [pa.array([e[0][i] for e in entries], type=f.type)
                for i, f in enumerate(self.schema)]
        return pa.Table.from_arrays(cols, schema=self.schema), entries

    def to_batch(self) -> DeltaBatch:
        table, entries = self.table()
        return DeltaBatch.of(table, [m for _, _, m in entries],
                             Annotation.from_sets([a for _, a, _ in entries]))


def _rows(table: pa.Table) -> list[Row]:
    return list(zip(*[c.to_pylist() for c in table.columns])) if table.num_columns else []


def rowwise_evaluate(node: PlanNode, tables: Mapping[str, pa.Table],
                       partitions: PartitionSet) -> Bag:
    schema = arrow_schema(node.schema)
    if isinstance(node, Scan):
        t = tables[node.table]
        ids = partitions.annotate(node.table, t) if partitions.for_table(node.table) else None
        data = t.select(list(node.source_columns))
        data = data.rename_columns([f.name for f in node.fields]).cast(schema)
        items: Counter = Counter()
        for i, row in enumerate(_rows(data)):
            items[(row, () if ids is None else (int(ids[i]),))] += 1
        return Bag(schema, items)
    if isinstance(node, Select):
        child = rowwise_evaluate(node.input, tables, partitions)
        table, entries = child.table()
        mask = evaluate_predicate(node.predicate, table)
        return Bag(schema, Counter({(r, a): m for (r, a, m), ok in zip(entries, mask) if ok}))
    if isinstance(node, Project):
        child = rowwise_evaluate(node.input, tables, partitions)
        table, entries = child.table()
        cols = [evaluate(e.expr, table).cast(f.type) for e, f in zip(node.exprs, schema)]
        out: Counter = Counter()
        for row, (_, a, m) in zip(_rows(pa.Table.from_arrays(cols, schema=schema)), entries):
            out[(row, a)] += m
        return Bag(schema, out)
    if isinstance(node, Join):
        return _join(node, schema, tables, partitions)
    if isinstance(node, Distinct):
        child = rowwise_evaluate(node.input, tables, partitions)
        groups: dict[Row, set] = defaultdict(set)
        for (r, a), _ in child.items.items():
            groups[r].update(a)
        return Bag(schema, Counter({(r, tuple(sorted(s))): 1 for r, s in groups.items()}))
    if isinstance(node, Aggregate):
        return _aggregate(node, schema, tables, partitions)
    if isinstance(node, TopK):
        child = rowwise_evaluate(node.input, tables, partitions)
        names = list(node.input.column_names)
        pos = [names.index(s.column) for s in node.order]
        rest = [i for i in range(len(names)) if i not in pos]
        ordered = sorted(child.items.items(),
                         key=lambda kv: sort_key(kv[0][0], kv[0][1], node.order, pos, rest))
        out, seen = Counter(), 0
        for (r, a), m in ordered:
            if seen >= node.k:
                break
            take = min(m, node.k - seen)
            out[(r, a)] += take
            seen += take
        return Bag(schema, out)
    raise TypeError(f"unknown plan node {type(node).__name__}")


def _join(node: Join, schema, tables, partitions) -> Bag:
    left = rowwise_evaluate(node.left, tables, partitions)
    right = rowwise_evaluate(node.right, tables, partitions)
    lk, rk, residual = node.equi_keys()
    lnames, rnames = list(node.left.column_names), list(node.right.column_names)
    lpos, rpos = [lnames.index(c) for c in lk], [rnames.index(c) for c in rk]
    index: dict[tuple, list] = defaultdict(list)
    for (r, a), m in right.items.items():
        key = tuple(r[p] for p in rpos)
        if None not in key:
            index[key].append((r, a, m))
    pairs = []
    for (r, a), m in left.items.items():
        key = tuple(r[p] for p in lpos)
        if None in key:
            continue
        for r2, a2, m2 in index.get(key, []) if lk else [
                (x, y, z) for (x, y), z in right.items.items()]:
            pairs.append((r + r2, tuple(sorted(set(a) | set(a2))), m * m2))
    if residual is not None and pairs:
        cols = [pa.array([p[0][i] for p in pairs], type=f.type) for i, f in enumerate(schema)]
        mask = evaluate_predicate(residual, pa.Table.from_arrays(cols, schema=schema))
        pairs = [p for p, ok in zip(pairs, mask) if ok]
    out: Counter = Counter()
    for r, a, m in pairs:
        out[(r, a)] += m
    return Bag(schema, out)


def _aggregate(node: Aggregate, schema, tables, partitions) -> Bag:
    child = rowwise_evaluate(node.input, tables, partitions)
    names = list(node.input.column_names)
    types = {f.name: f.dtype for f in node.input.schema}
    gpos = [names.index(g) for g in node.group_by]
    groups: dict[Row, list] = {}
    for (r, a), m in child.items.items():
        key = tuple(r[p] for p in gpos)
        groups.setdefault(key, []).append((r, a, m))
    out: Counter = Counter()
    for key, members in groups.items():
        values = []
        for agg in node.aggregates:
            if agg.func == "count_star":
                values.append(sum(m for _, _, m in members))
                continue
            p = names.index(agg.arg)
            vals = [(r[p], m) for r, _, m in members if r[p] is not None]
            nonnull = sum(m for _, m in vals)
            t = types[agg.arg]
            fn = agg.function
            if agg.func == "count":
                values.append(nonnull)
            elif fn.moments:  # the function's value of its exact power sums
                powers = [[sum(python_exact(v, t) ** k * m for v, m in vals)]
                          for k in range(1, fn.moments + 1)]
                state = GroupState(np.array([0]), np.array([nonnull]), powers)
                values.append(fn.finalize(state, t)[0].as_py())
            elif agg.func == "min":
                values.append(min((v for v, _ in vals), default=None))
            else:
                values.append(max((v for v, _ in vals), default=None))
        ann = sorted(set().union(*[set(a) for _, a, _ in members]))
        out[(key + tuple(values), tuple(ann))] += 1
    return Bag(schema, out)
