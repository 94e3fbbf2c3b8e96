"""Plan shapes the engine maintains by a dedicated operator, recognised on the plan.

``keyed_filter_parts`` finds ``π_L σ_p (L ⋈_{a = k} S)`` where S holds at most one row
per key (``unique_on``): the plan of a comparison with a correlated scalar subquery
(``x > (SELECT avg(y) FROM t WHERE t.k = outer.a)``, decorrelated into a join with the
aggregate grouped by k) and of any join with a grouped aggregate filtered on its value
and projected back onto the outer rows. The uncorrelated form (S one row, no keys) is
``imp_core.plan.nodes.scalar_filter_parts``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import pyarrow as pa

from imp_core.plan.expr import BinaryOp, ColumnRef, Expr, Strict, conjoin, conjuncts
from imp_core.plan.nodes import (
    Aggregate,
    Join,
    PlanNode,
    Project,
    Scan,
    Select,
    at_most_one_row,
)


def unique_on(node: PlanNode, columns: tuple[str, ...],
              table_key: Callable[[str], tuple[str, ...]] | None = None) -> bool:
    """Whether ``node`` yields at most one row per value of ``columns`` (NULL counting as
    a value) whatever its input: a grouped aggregate whose GROUP BY columns are all among
    them, or (with ``table_key``: a table's declared key) a scan whose table's key they
    copy, under selections and projections that copy them (traced by name), or a node
    yielding at most one row at all."""
    names = set(columns)
    if at_most_one_row(node):
        return True
    while isinstance(node, (Project, Select)):
        if isinstance(node, Project):
            # a column the projection computes is not traced: fewer names, a stricter test
            names = {e.expr.name for e in node.exprs
                     if e.name in names and isinstance(e.expr, ColumnRef)}
        node = node.input
    if isinstance(node, Scan) and table_key is not None:
        key = table_key(node.table)
        return bool(key) and set(key) <= {src for f, src in zip(node.fields,
                                                                 node.source_columns)
                                          if f.name in names}
    return isinstance(node, Aggregate) and bool(node.group_by) \
        and set(node.group_by) <= names


@dataclass(frozen=True)
class KeyedFilter:
    """The parts of ``π_L σ_p (L ⋈_{left_keys = right_keys} S)``: ``join`` is the join
    node, ``predicate`` p (with any residual of the join's condition conjoined), and
    ``columns`` the output's (name, L column) pairs."""

    join: Join
    left_keys: tuple[str, ...]
    right_keys: tuple[str, ...]
    predicate: Expr
    columns: tuple[tuple[str, str], ...]
    # (L column, expression over S) of a conjunct ``column <op> expression`` (op one of
    # < <= > >=, either way round) when every other conjunct reads only L's columns and
    # S's keys: then a key whose S row moves from value v to v' with an unchanged
    # annotation flips the comparison only for L rows of values between v and v'
    ranged: tuple[str, Expr] | None = None

    @property
    def left(self) -> PlanNode:
        return self.join.left

    @property
    def right(self) -> PlanNode:
        return self.join.right


def keyed_filter_parts(node: PlanNode) -> KeyedFilter | None:
    """``node``'s parts when it is ``π_L σ_p (L ⋈_{a = k} S)``: a renaming projection onto
    L's columns only, over a selection, over an equi-join whose right input is unique on
    its key columns; else None. None too where p can raise under ANSI mode (a ``Strict``
    expression): the selection and the join count such rows, the fused form would not."""
    if not (isinstance(node, Project) and node.is_rename_only()
            and isinstance(node.input, Select) and isinstance(node.input.input, Join)):
        return None
    join = node.input.input
    left_keys, right_keys, residual = join.equi_keys()
    if not left_keys or not unique_on(join.right, right_keys):
        return None
    left_names = set(join.left.column_names)
    columns = []
    for e in node.exprs:
        assert isinstance(e.expr, ColumnRef)
        if e.expr.name not in left_names:
            return None
        columns.append((e.name, e.expr.name))
    predicate = conjoin([c for c in (residual, node.input.predicate) if c is not None])
    if predicate is None or any(isinstance(e, Strict) for e in predicate.walk()):
        return None
    return KeyedFilter(join, left_keys, right_keys, predicate, tuple(columns),
                       _ranged(join, right_keys, predicate))


_ORDERED = ("<", "<=", ">", ">=")


def _ranged(join: Join, right_keys: tuple[str, ...], predicate: Expr
            ) -> tuple[str, Expr] | None:
    """``KeyedFilter.ranged`` for ``predicate`` over ``join``'s output, or None."""
    left = {f.name: f.dtype for f in join.left.schema}
    right = set(join.right.column_names)
    found, others = None, []
    for part in conjuncts(predicate):
        pair = None
        if isinstance(part, BinaryOp) and part.op in _ORDERED:
            for column, other in ((part.left, part.right), (part.right, part.left)):
                if isinstance(column, ColumnRef) and column.name in left \
                        and _numeric(left[column.name]) and _reads(other) <= right:
                    pair = (column.name, other)
                    break
        if pair is not None and found is None:
            found = pair
        else:
            others.append(part)
    if found is None:
        return None
    fixed = set(left) | set(right_keys)  # the same for a key's old and new S row
    return found if all(_reads(p) <= fixed for p in others) else None


def _reads(expr: Expr) -> set[str]:
    return {e.name for e in expr.walk() if isinstance(e, ColumnRef)}


def _numeric(dtype: pa.DataType) -> bool:
    return pa.types.is_integer(dtype) or pa.types.is_floating(dtype) \
        or pa.types.is_decimal(dtype)
