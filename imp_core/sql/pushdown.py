"""Selection push-down into a planned subquery.

``push_selection(node, predicate)`` is equivalent to ``Select(node, predicate)`` (same
bag of rows, same provenance): each conjunct moves below a ``Project`` (rewritten over
the projected expressions), ``Distinct``, an ``Aggregate`` when it reads only group
keys, a ``Window`` when it reads only PARTITION BY columns, or into the side of a
``Join`` it reads (the join condition when it reads both), into the left input of a
``SemiJoin`` (whose rows are the left's), into both inputs of a ``SetOp`` (its rows are
rows equal to input rows), and ends merged into a ``Select`` directly above a ``Scan``
when it gets that far; conjuncts that stop at the same place elsewhere are stacked in
the order written (the first evaluated first). It
never crosses a ``TopK`` (which rows make the top k depends on all rows) nor an
``OuterJoin`` (filtering an input of an outer join is not filtering its output: rows
would turn NULL-padded instead of disappearing).

A conjunct that reads both sides of a ``Join`` stays in its condition, and when it is an
OR, each side also gets the OR it implies (``implied``): per branch, the AND of the
branch's conjuncts over that side's columns alone (TPC-DS q13's ``(cd_marital_status =
'M' AND ... AND hd_dep_count = 3) OR (...)`` filters customer_demographics by its two
columns). A row failing the implied OR fails the whole condition, in three-valued logic
too, so the result is the same, and so is its provenance (the rows removed contribute to
no result row); joins then hold and probe only rows that may match. Implied predicates
never land in a join condition or above an operator they cannot cross (they are
dropped there: the original stays), and they are built only from conjuncts that cannot
raise under ANSI mode (a row the join would drop must not raise there).
"""

from __future__ import annotations

from dataclasses import replace

from imp_core.plan.ansi import can_raise
from imp_core.plan.expr import BinaryOp, ColumnRef, Expr, conjoin, conjuncts, rename_columns
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
    Window,
)


def push_selection(node: PlanNode, predicate: Expr) -> PlanNode:
    for part in conjuncts(predicate):
        node = _push(node, part)
    return node


def _push(node: PlanNode, predicate: Expr, implied: bool = False) -> PlanNode:
    """``node`` filtered by ``predicate``; ``implied``: the predicate is implied by one
    kept above (``implied``), so it may be dropped where it cannot go further down."""
    if isinstance(node, Project):
        mapping = {e.name: e.expr for e in node.exprs}
        return Project(_push(node.input, rename_columns(predicate, mapping), implied),
                       node.exprs)
    if isinstance(node, Distinct):
        return Distinct(_push(node.input, predicate, implied))
    if isinstance(node, Aggregate) and predicate.columns() <= set(node.group_by):
        return Aggregate(_push(node.input, predicate, implied), node.group_by,
                         node.aggregates)
    if isinstance(node, Window) and predicate.columns() and \
            predicate.columns() <= set(node.partition_by):
        # it keeps or drops whole partitions, and a window reads one partition at a time
        return replace(node, input=_push(node.input, predicate, implied))
    if isinstance(node, Join):
        return _push_join(node, predicate, implied)
    if isinstance(node, SemiJoin) and predicate.columns() and \
            predicate.columns() <= set(node.left.column_names):
        return SemiJoin(_push(node.left, predicate, implied), node.right, node.condition,
                        node.anti, node.null_aware)
    if implied and not isinstance(node, (SetOp, Select, Scan)):
        return node
    if isinstance(node, SetOp):
        # a row is in the output only as a row equal to input rows, so filtering both
        # inputs filters the output (for every set operation); the right input's columns
        # are the left's by position
        to_right = {a: ColumnRef(b) for a, b in zip(node.left.column_names,
                                                     node.right.column_names)}
        return SetOp(_push(node.left, predicate, implied),
                     _push(node.right, rename_columns(predicate, to_right), implied),
                     node.kind, node.distinct)
    if isinstance(node, Select):
        if isinstance(node.input, Scan):  # one Select per scan, predicates in arrival order
            return Select(node.input, conjoin([*conjuncts(node.predicate), predicate]))
        inner = _push(node.input, predicate, implied)
        if isinstance(inner, Select) and inner.input is node.input:
            # it stops right here: it goes above, so that conjuncts stopped at one place
            # run in the order written (a cheap d_year = 2000 before q57's division)
            return Select(node, predicate)
        return Select(inner, node.predicate)
    return Select(node, predicate)


def _push_join(join: Join, predicate: Expr, implied: bool = False) -> PlanNode:
    columns = predicate.columns()
    left, right = join.left, join.right
    if columns and columns <= set(left.column_names):
        return Join(_push(left, predicate, implied), right, join.condition)
    if columns and columns <= set(right.column_names):
        return Join(left, _push(right, predicate, implied), join.condition)
    if not columns:
        return join if implied else Select(join, predicate)
    left, right = (_push_implied(side, predicate) for side in (left, right))
    condition = join.condition if implied else \
        conjoin([*conjuncts(join.condition), predicate])
    return Join(left, right, condition)


def _push_implied(node: PlanNode, predicate: Expr) -> PlanNode:
    """``node`` also filtered by what ``predicate`` implies for its columns alone."""
    weaker = implied_by(predicate, frozenset(node.column_names))
    return node if weaker is None else _push(node, weaker, implied=True)


def implied_by(predicate: Expr, columns: frozenset[str]) -> Expr | None:
    """An OR over ``columns`` alone that every row satisfying ``predicate`` satisfies
    (None: none found): for each branch of an OR, the AND of its conjuncts over those
    columns (a nested OR contributing what it implies), when every branch has some.
    Conjuncts that may raise under ANSI mode are left out."""
    branches = _disjuncts(predicate)
    if len(branches) < 2:
        return None
    found: list[Expr] = []
    for branch in branches:
        own: list[Expr] = []
        for part in conjuncts(branch):
            if part.columns() and part.columns() <= columns:
                if not any(can_raise(e) for e in part.walk()):
                    own.append(part)
            else:
                inner = implied_by(part, columns)
                if inner is not None:
                    own.append(inner)
        if not own:
            return None
        found.append(conjoin(own))
    out = found[0]
    for part in found[1:]:
        out = BinaryOp("or", out, part)
    return out


def _disjuncts(expr: Expr) -> list[Expr]:
    if isinstance(expr, BinaryOp) and expr.op == "or":
        return _disjuncts(expr.left) + _disjuncts(expr.right)
    return [expr]
