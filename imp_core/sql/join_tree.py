"""The FROM clause's join tree of one SELECT (``FromTree``, a part of ``SelectPlanner``).

Invariants of the tree built: every FROM item is joined exactly once, left-deep; a
conjunct on one item filters that item (pushed into a subquery as far as it goes), a
conjunct on several sits in the condition of the join that adds the last of them, one
on none above all; with inner joins only, items are joined in ``join_order`` (no cross
product where the conditions link the items); with outer joins, in FROM order, and a
WHERE conjunct that reads a NULL-padded item is applied above the outer join that pads
it, never pushed below it.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlglot import exp

from imp_core.plan.expr import BinaryOp, ColumnRef, Expr, conjoin
from imp_core.plan.nodes import Join, OuterJoin, PlanNode
from imp_core.sql.from_clause import FromItem
from imp_core.sql.pushdown import implied_by
from imp_core.sql.scope import Scope


@dataclass(frozen=True)
class Sourced:
    """A bound expression and the SQL it came from (for messages)."""

    expr: Expr
    node: exp.Expression
    on: int | None = None  # the FROM item whose JOIN ... ON it comes from (None: WHERE)


class FromTree:
    """The join-tree methods of ``SelectPlanner`` (which provides ``items_from``,
    ``join_kinds``, ``scope``, ``_used_columns``, ``_filtered`` and
    ``_check_conditions``)."""

    items_from: list[FromItem]
    join_kinds: list[str]
    scope: Scope

    def _from_tree(self, predicates: list[Sourced]) -> PlanNode:
        """Left-deep join of the FROM items with each conjunct pushed as low as it goes.

        Outer joins bound the pushing: a WHERE conjunct that reads a NULL-supplying item
        is applied above the outer join that pads it (below, it would let padded rows
        through); an ON conjunct of a LEFT join reading only its right item filters that
        item, any other stays in the join's condition.
        """
        if all(kind == "inner" for kind in self.join_kinds):
            return self._inner_tree(predicates)
        n = len(self.items_from)
        local: list[list[Sourced]] = [[] for _ in range(n)]
        at_join: list[list[Sourced]] = [[] for _ in range(n)]
        after: list[list[Sourced]] = [[] for _ in range(n)]
        above: list[Sourced] = []
        padded_by = self._padded_by()
        for predicate in predicates:
            owners = {self.scope.source_of(c) for c in predicate.expr.columns()}
            kind = self.join_kinds[predicate.on] if predicate.on is not None else "inner"
            if kind != "inner":
                assert predicate.on is not None
                if kind == "left" and owners == {predicate.on}:
                    local[predicate.on].append(predicate)
                else:
                    at_join[predicate.on].append(predicate)
                continue
            padding = max((padded_by[o] for o in owners), default=-1)
            if not owners:
                above.append(predicate)
            elif padding >= 0:
                last = max(owners | {padding})
                if predicate.on is not None:
                    at_join[max(last, predicate.on)].append(predicate)
                else:
                    after[last].append(predicate)
            elif len(owners) == 1:
                local[owners.pop()].append(predicate)
            else:
                at_join[max(owners)].append(predicate)
        leaves = [self._filtered(item.build(self._used_columns(i)), local[i], push=True)
                  for i, item in enumerate(self.items_from)]
        node = self._filtered(leaves[0], after[0])
        for index in range(1, n):
            self._check_conditions(Join(node, leaves[index]), at_join[index])
            condition = conjoin([p.expr for p in at_join[index]])
            kind = self.join_kinds[index]
            if kind == "inner":
                node = Join(node, leaves[index], condition)
            elif kind == "right":
                node = OuterJoin(leaves[index], node, condition, "left")
            else:
                node = OuterJoin(node, leaves[index], condition, kind)
            node = self._filtered(node, after[index])
        return self._filtered(node, above)

    def _inner_tree(self, predicates: list[Sourced]) -> PlanNode:
        """Inner joins only: the items joined left-deep in ``_join_order``, each conjunct
        on one item filtering it, each on several in the condition of the join that adds
        the last of them (and each of its items filtered by the OR it implies for that
        item alone, ``imp_core.sql.pushdown.implied_by``), each on none above all."""
        owners_of = [frozenset(self.scope.source_of(c) for c in p.expr.columns())
                     for p in predicates]
        order = join_order(len(self.items_from), [
            (owners, is_equality(p.expr)) for owners, p in zip(owners_of, predicates)])
        position = {item: k for k, item in enumerate(order)}
        local: list[list[Sourced]] = [[] for _ in order]
        at_join: list[list[Sourced]] = [[] for _ in order]
        above: list[Sourced] = []
        for owners, predicate in zip(owners_of, predicates):
            if not owners:
                above.append(predicate)
            elif len(owners) == 1:
                local[next(iter(owners))].append(predicate)
            else:
                at_join[max(position[o] for o in owners)].append(predicate)
                # each item also filtered by what the conjunct implies for it alone
                for owner in sorted(owners):
                    mine = frozenset(c for c in predicate.expr.columns()
                                     if self.scope.source_of(c) == owner)
                    weaker = implied_by(predicate.expr, mine)
                    if weaker is not None:
                        local[owner].append(Sourced(weaker, predicate.node, predicate.on))
        leaves = [self._filtered(self.items_from[i].build(self._used_columns(i)), local[i],
                                 push=True) for i in order]
        node = leaves[0]
        for k in range(1, len(order)):
            self._check_conditions(Join(node, leaves[k]), at_join[k])
            node = Join(node, leaves[k], conjoin([p.expr for p in at_join[k]]))
        return self._filtered(node, above)

    def _padded_by(self) -> list[int]:
        """Per FROM item, the last outer join that may pad it with NULLs (-1: none)."""
        padded = [-1] * len(self.items_from)
        for k, kind in enumerate(self.join_kinds):
            if kind in ("left", "full"):
                padded[k] = k
            if kind in ("right", "full"):
                for j in range(k):
                    padded[j] = k
        return padded


def is_equality(expr: Expr) -> bool:
    return isinstance(expr, BinaryOp) and expr.op == "=" and \
        isinstance(expr.left, ColumnRef) and isinstance(expr.right, ColumnRef)


def join_order(count: int, predicates: list[tuple[frozenset[int], bool]]) -> list[int]:
    """The order in which to join ``count`` FROM items: the FROM order, except that an
    item with no condition linking it to the items before it waits until one has (an
    equality first, then any condition), so that no cross product is built where the
    WHERE clause joins the items (``FROM part, supplier, lineitem WHERE p = l AND s = l``
    joins lineitem second). Without any link the next item in FROM order comes next."""
    def linked(item: int, done: set[int], equality_only: bool) -> bool:
        return any(item in owners and owners - {item} and owners - {item} <= done
                   and (equal or not equality_only) for owners, equal in predicates)

    joined = [0] if count else []
    rest = list(range(1, count))
    while rest:
        done = set(joined)
        pick = next((i for i in rest if linked(i, done, True)), None)
        if pick is None:
            pick = next((i for i in rest if linked(i, done, False)), rest[0])
        joined.append(pick)
        rest.remove(pick)
    return joined
