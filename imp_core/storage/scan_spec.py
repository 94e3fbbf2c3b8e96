"""What a query needs of one table's delta: columns, pushed-down selection, partition.

Invariant: filtering a table's change feed with ``predicate`` (written over the table's
own column names) and keeping ``columns`` loses nothing the query's scan of that table
would keep: the predicate is the selection directly above the query's only scan of it
(whatever consumes that selection: any kind of join or aggregation sees the same rows).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from imp_core.engine.operators.base import FRAGMENT_COLUMN, TableDelta
from imp_core.plan.evaluate import evaluate_predicate
from imp_core.plan.expr import ColumnRef, Expr, Strict, conjoin, conjuncts, rename_columns
from imp_core.plan.nodes import PlanNode, Scan, Select
from imp_core.sketch.partition import PartitionSet, RangePartition

__all__ = ["FRAGMENT_COLUMN", "ScanSpec", "restrict_delta", "scan_specs"]


@dataclass(frozen=True)
class ScanSpec:
    table: str
    columns: tuple[str, ...]
    predicate: Expr | None = None
    partition: tuple[RangePartition, int] | None = None


def scan_specs(root: PlanNode, partitions: PartitionSet) -> dict[str, ScanSpec]:
    """One spec per table read by the plan (pushdown only for tables scanned once)."""
    scans: dict[str, list[Scan]] = {}
    parents: dict[int, PlanNode] = {}
    for node in root.walk():
        for child in node.children():
            parents[id(child)] = node
        if isinstance(node, Scan):
            scans.setdefault(node.table, []).append(node)
    out = {}
    for table, found in scans.items():
        columns = sorted({c for s in found for c in s.source_columns})
        part = partitions.for_table(table)
        if part is not None and part[0].column not in columns:
            columns.append(part[0].column)
        predicate = None
        if len(found) == 1:
            parent = parents.get(id(found[0]))
            if isinstance(parent, Select):
                scan = found[0]
                mapping = {f.name: ColumnRef(src)
                           for f, src in zip(scan.fields, scan.source_columns)}
                predicate = _before_raising(rename_columns(parent.predicate, mapping))
        out[table] = ScanSpec(table, tuple(columns), predicate, part)
    return out


def _before_raising(predicate: Expr) -> Expr | None:
    """The conjuncts Spark evaluates before the first one that may raise (ANSI mode,
    ``Strict``): a row they drop never reaches it, so the pipeline counts every row that
    raises."""
    kept = []
    for part in conjuncts(predicate):
        if any(isinstance(e, Strict) for e in part.walk()):
            break
        kept.append(part)
    return conjoin(kept)


def read_columns(spec: ScanSpec | None) -> frozenset[str] | None:
    """The columns of a table's changes ``restrict_delta`` needs for ``spec`` (None: the
    whole rows, there being no spec)."""
    if spec is None:
        return None
    predicate = spec.predicate.columns() if spec.predicate is not None else frozenset()
    return frozenset(spec.columns) | predicate


def restrict_delta(delta: TableDelta, spec: ScanSpec | None) -> TableDelta:
    """A table's full delta cut down to what one query needs: rows passing the pushed-down
    selection, the spec's columns, and (for a partitioned table) each row's global
    fragment id in ``FRAGMENT_COLUMN``."""
    if spec is None:
        return delta
    rows, weights = delta.rows, np.asarray(delta.weights, dtype=np.int64)
    if spec.predicate is not None and rows.num_rows:
        keep = evaluate_predicate(spec.predicate, rows)
        if not keep.all():
            rows, weights = rows.filter(pa.array(keep)), weights[keep]
    rows = rows.select(list(spec.columns))
    if spec.partition is not None:
        part, offset = spec.partition
        ids = part.annotate(rows.column(part.column)).astype(np.int32) + np.int32(offset)
        rows = rows.append_column(pa.field(FRAGMENT_COLUMN, pa.int32()), pa.array(ids))
    return TableDelta(rows, weights)
