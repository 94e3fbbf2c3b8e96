"""Column pruning at join inputs.

A join's inputs become operator state (in-memory join sides), so a column a join input
carries but nothing above it reads costs memory on every row: TPC-H q13's orders side
held ``o_comment`` (74 MiB at SF 1) only because the left join's ON clause filtered on
it below the join. ``prune_join_inputs`` narrows every join input to the columns read
above it or by the join's condition.

Invariant: the rewritten plan has the same output schema and, for every input, the same
bag of output rows and the same provenance: only columns that no ancestor reads are
dropped, and never below a ``Distinct`` or a ``SetOp`` (which compare whole rows), a
``TopK`` or a ``Window`` (whose total order breaks ties on every column). An input keeps
at least one column, so its row count (a cross product's multiplicity) is unchanged.
"""

from __future__ import annotations

from dataclasses import replace

from imp_core.plan.expand import Expand
from imp_core.plan.expr import ColumnRef
from imp_core.plan.nodes import (
    Aggregate,
    Distinct,
    Join,
    NamedExpr,
    OuterJoin,
    PlanNode,
    Project,
    Scan,
    Select,
    SemiJoin,
    SetOp,
    TopK,
    Window,
)

Required = frozenset[str] | None  # None: every column of the node


def prune_join_inputs(root: PlanNode) -> PlanNode:
    return _prune(root, None)


def _prune(node: PlanNode, required: Required) -> PlanNode:
    if isinstance(node, Scan):
        return node
    if isinstance(node, Project):
        need = frozenset(c for e in node.exprs for c in e.expr.columns())
        return replace(node, input=_prune(node.input, need))
    if isinstance(node, Select):
        need = None if required is None else required | node.predicate.columns()
        return replace(node, input=_prune(node.input, need))
    if isinstance(node, Aggregate):
        need = frozenset(node.group_by) | {a.arg for a in node.aggregates if a.arg}
        return replace(node, input=_prune(node.input, need))
    if isinstance(node, (Distinct, TopK, Expand, Window)):  # rows depend on every column
        return replace(node, input=_prune(node.input, None))
    if isinstance(node, SetOp):  # compares whole rows: every column of both inputs
        return replace(node, left=_prune(node.left, None), right=_prune(node.right, None))
    if isinstance(node, (Join, OuterJoin, SemiJoin)):
        above = frozenset(node.column_names) if required is None else required
        cond = node.condition.columns() if node.condition is not None else frozenset()
        left_cols, right_cols = set(node.left.column_names), set(node.right.column_names)
        left_need = frozenset((above | cond) & left_cols)
        # a semi-/anti-join outputs left rows only: its right input serves the condition
        right_need = frozenset(cond & right_cols) if isinstance(node, SemiJoin) \
            else frozenset((above | cond) & right_cols)
        return replace(node, left=_prune(_narrow(node.left, left_need), left_need),
                       right=_prune(_narrow(node.right, right_need), right_need))
    raise TypeError(f"cannot prune columns below {type(node).__name__}")


def _narrow(node: PlanNode, need: frozenset[str]) -> PlanNode:
    """``node`` with only the columns in ``need`` (at least its first one)."""
    names = node.column_names
    keep = [c for c in names if c in need] or list(names[:1])
    if len(keep) == len(names):
        return node
    if isinstance(node, Project):
        return replace(node, exprs=tuple(e for e in node.exprs if e.name in keep))
    return Project(node, tuple(NamedExpr(c, ColumnRef(c)) for c in keep))
