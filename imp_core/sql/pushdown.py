"""Selection push-down into a planned subquery.

``push_selection(node, predicate)`` is equivalent to ``Select(node, predicate)`` (same
bag of rows, same provenance): each conjunct moves below a ``Project`` (rewritten over
the projected expressions), ``Distinct``, an ``Aggregate`` when it reads only group
keys, or into the side of a ``Join`` it reads (the join condition when it reads both),
into the left input of a ``SemiJoin`` (whose rows are the left's), into both inputs of
a ``SetOp`` (its rows are rows equal to input rows), and ends merged
into a ``Select`` directly above a ``Scan`` when it gets that far. It
never crosses a ``TopK`` (which rows make the top k depends on all rows) nor an
``OuterJoin`` (filtering an input of an outer join is not filtering its output: rows
would turn NULL-padded instead of disappearing).
"""

from __future__ import annotations

from imp_core.plan.expr import ColumnRef, Expr, conjoin, conjuncts, rename_columns
from imp_core.plan.nodes import (
    Aggregate,
    Distinct,
    Join,
    PlanNode,
    Project,
    Scan,
    Select,
    SemiJoin,
    SetOp,
)


def push_selection(node: PlanNode, predicate: Expr) -> PlanNode:
    for part in conjuncts(predicate):
        node = _push(node, part)
    return node


def _push(node: PlanNode, predicate: Expr) -> PlanNode:
    if isinstance(node, Project):
        mapping = {e.name: e.expr for e in node.exprs}
        return Project(_push(node.input, rename_columns(predicate, mapping)), node.exprs)
    if isinstance(node, Distinct):
        return Distinct(_push(node.input, predicate))
    if isinstance(node, Aggregate) and predicate.columns() <= set(node.group_by):
        return Aggregate(_push(node.input, predicate), node.group_by, node.aggregates)
    if isinstance(node, Join):
        return _push_join(node, predicate)
    if isinstance(node, SemiJoin) and predicate.columns() and \
            predicate.columns() <= set(node.left.column_names):
        return SemiJoin(_push(node.left, predicate), node.right, node.condition, node.anti,
                        node.null_aware)
    if isinstance(node, SetOp):
        # a row is in the output only as a row equal to input rows, so filtering both
        # inputs filters the output (for every set operation); the right input's columns
        # are the left's by position
        to_right = {a: ColumnRef(b) for a, b in zip(node.left.column_names,
                                                     node.right.column_names)}
        return SetOp(_push(node.left, predicate),
                     _push(node.right, rename_columns(predicate, to_right)),
                     node.kind, node.distinct)
    if isinstance(node, Select):
        if isinstance(node.input, Scan):  # one Select per scan, predicates in arrival order
            return Select(node.input, conjoin([*conjuncts(node.predicate), predicate]))
        return Select(_push(node.input, predicate), node.predicate)
    return Select(node, predicate)


def _push_join(join: Join, predicate: Expr) -> PlanNode:
    columns = predicate.columns()
    if columns and columns <= set(join.left.column_names):
        return Join(_push(join.left, predicate), join.right, join.condition)
    if columns and columns <= set(join.right.column_names):
        return Join(join.left, _push(join.right, predicate), join.condition)
    if not columns:
        return Select(join, predicate)
    return Join(join.left, join.right, conjoin([*conjuncts(join.condition), predicate]))
