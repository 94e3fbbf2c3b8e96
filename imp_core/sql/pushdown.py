"""Selection push-down into a planned subquery.

``push_selection(node, predicate)`` is equivalent to ``Select(node, predicate)`` (same
bag of rows, same provenance): each conjunct moves below a ``Project`` (rewritten over
the projected expressions), ``Distinct``, an ``Aggregate`` when it reads only group
keys, a ``Window`` when it reads only PARTITION BY columns, or into the side of a
``Join`` it reads (the join condition when it reads both), into the left input of a
``SemiJoin`` (whose rows are the left's), into both inputs of a ``SetOp`` (its rows are
rows equal to input rows), and ends merged into a ``Select`` directly above a ``Scan``
when it gets that far; conjuncts that stop at the same place elsewhere are ANDed in one
``Select`` above it in the order written (the first evaluated first). Every AND built
here is balanced, and building it costs O(n log n) for n conjuncts, not O(n^2). It
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
from imp_core.plan.expr import (
    BinaryOp,
    ColumnRef,
    Expr,
    conjoin,
    conjuncts,
    disjoin,
    disjuncts,
    rename_columns,
)
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

_INPUTS = ("input", "left", "right")  # the fields of plan nodes that hold their inputs


def push_selection(node: PlanNode, predicate: Expr) -> PlanNode:
    return _Pushdown(node).push_all(conjuncts(predicate))


class _Pushdown:
    """One ``push_selection``: its conjuncts pushed one at a time, in order.

    Where conjuncts meet (a ``Select`` over a ``Scan``, a join condition, conjuncts
    stopped at the same place), each is ANDed onto what is there in O(1), and each
    predicate so grown is rebuilt balanced once all are pushed (``_settle``): merging
    every arrival into a balanced tree at once would cost O(n) per conjunct, O(n^2) for
    a WHERE of n conjuncts. Conjuncts that stop at the same place elsewhere form one
    ``Select`` whose AND keeps their order (one Select each would nest the plan n deep;
    Spark combines such filters into one AND as well).

    Identity is the bookkeeping: the input plan is held (so no node of it is freed and
    its ``id`` reused), and so is every node whose predicate grew or that was stacked.
    """

    def __init__(self, node: PlanNode):
        self.node = node
        self.original = {id(n) for n in node.walk()}
        self.grown: dict[int, PlanNode] = {}  # nodes whose predicate / condition grew
        self.stacked: dict[int, Select] = {}  # Selects of conjuncts stopped above a node

    def push_all(self, parts: list[Expr]) -> PlanNode:
        node = self.node
        for part in parts:
            node = self._push(node, part)
        return self._settle(node)

    def _grow(self, node: PlanNode) -> PlanNode:
        self.grown[id(node)] = node
        return node

    def _stack(self, node: PlanNode, predicate: Expr) -> Select:
        """``predicate`` stopped right above ``node``: one Select of all that stop there."""
        if id(node) in self.stacked:
            assert isinstance(node, Select)
            out = Select(node.input, _and(node.predicate, predicate))
            self._grow(out)
        else:
            out = Select(node, predicate)
        self.stacked[id(out)] = out
        return out

    def _settle(self, node: PlanNode) -> PlanNode:
        """``node`` with every predicate that grew rebuilt balanced (the input plan's own
        subtrees are kept as they are: nothing grew in them)."""
        if id(node) in self.original:
            return node
        kids = {k: self._settle(getattr(node, k)) for k in _INPUTS
                if isinstance(getattr(node, k, None), PlanNode)}
        changed = {k: v for k, v in kids.items() if v is not getattr(node, k)}
        if id(node) in self.grown and isinstance(node, Select):
            changed["predicate"] = conjoin(conjuncts(node.predicate))
        elif id(node) in self.grown and isinstance(node, Join):
            changed["condition"] = conjoin(conjuncts(node.condition))
        return replace(node, **changed) if changed else node

    def _push(self, node: PlanNode, predicate: Expr, implied: bool = False) -> PlanNode:
        """``node`` filtered by ``predicate``; ``implied``: the predicate is implied by one
        kept above (``implied``), so it may be dropped where it cannot go further down."""
        if isinstance(node, Project):
            mapping = {e.name: e.expr for e in node.exprs}
            return Project(self._push(node.input, rename_columns(predicate, mapping), implied),
                           node.exprs)
        if isinstance(node, Distinct):
            return Distinct(self._push(node.input, predicate, implied))
        if isinstance(node, Aggregate) and predicate.columns() <= set(node.group_by):
            return Aggregate(self._push(node.input, predicate, implied), node.group_by,
                             node.aggregates)
        if isinstance(node, Window) and predicate.columns() and \
                predicate.columns() <= set(node.partition_by):
            # it keeps or drops whole partitions, and a window reads one partition at a time
            return replace(node, input=self._push(node.input, predicate, implied))
        if isinstance(node, Join):
            return self._push_join(node, predicate, implied)
        if isinstance(node, SemiJoin) and predicate.columns() and \
                predicate.columns() <= set(node.left.column_names):
            return SemiJoin(self._push(node.left, predicate, implied), node.right,
                            node.condition, node.anti, node.null_aware)
        if implied and not isinstance(node, (SetOp, Select, Scan)):
            return node
        if isinstance(node, SetOp):
            # a row is in the output only as a row equal to input rows, so filtering both
            # inputs filters the output (for every set operation); the right input's
            # columns are the left's by position
            to_right = {a: ColumnRef(b) for a, b in zip(node.left.column_names,
                                                         node.right.column_names)}
            return SetOp(self._push(node.left, predicate, implied),
                         self._push(node.right, rename_columns(predicate, to_right), implied),
                         node.kind, node.distinct)
        if isinstance(node, Select):
            if isinstance(node.input, Scan):  # one Select per scan, conjuncts in arrival order
                return self._grow(Select(node.input, _and(node.predicate, predicate)))
            inner = self._push(node.input, predicate, implied)
            if isinstance(inner, Select) and inner.input is node.input:
                # it stops right here: it goes above, so that conjuncts stopped at one place
                # run in the order written (a cheap d_year = 2000 before q57's division)
                return self._stack(node, predicate)
            return Select(inner, node.predicate)
        return self._stack(node, predicate)

    def _push_join(self, join: Join, predicate: Expr, implied: bool = False) -> PlanNode:
        columns = predicate.columns()
        left, right = join.left, join.right
        if columns and columns <= set(left.column_names):
            return Join(self._push(left, predicate, implied), right, join.condition)
        if columns and columns <= set(right.column_names):
            return Join(left, self._push(right, predicate, implied), join.condition)
        if not columns:
            return join if implied else self._stack(join, predicate)
        left, right = (self._push_implied(side, predicate) for side in (left, right))
        if implied:
            return Join(left, right, join.condition)
        return self._grow(Join(left, right, _and(join.condition, predicate)))

    def _push_implied(self, node: PlanNode, predicate: Expr) -> PlanNode:
        """``node`` also filtered by what ``predicate`` implies for its columns alone."""
        weaker = implied_by(predicate, frozenset(node.column_names))
        return node if weaker is None else self._push(node, weaker, implied=True)


def _and(left: Expr | None, right: Expr) -> Expr:
    """``left AND right`` in O(1) (``_Pushdown._settle`` balances it afterwards)."""
    return right if left is None else BinaryOp("and", left, right)


def implied_by(predicate: Expr, columns: frozenset[str]) -> Expr | None:
    """An OR over ``columns`` alone that every row satisfying ``predicate`` satisfies
    (None: none found): for each branch of an OR, the AND of its conjuncts over those
    columns (a nested OR contributing what it implies), when every branch has some.
    Conjuncts that may raise under ANSI mode are left out."""
    branches = disjuncts(predicate)
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
    return disjoin(found)
