"""Subqueries in WHERE and HAVING, decorrelated into joins of one SELECT's plan.

Each conjunct holding a subquery becomes a step applied to the plan of the FROM clause
(WHERE) or of the aggregation (HAVING). The subquery is planned as a derived table
``__sq<i>`` whose outputs are named here:

- ``[NOT] EXISTS (SELECT ... WHERE <correlated> AND <rest>)``: the conjuncts of the
  subquery's WHERE that read outer columns move into the join condition; the inner
  columns they read become outputs ``_c<j>``. EXISTS is a ``SemiJoin``, NOT EXISTS an
  anti-join. Uncorrelated, the join has no condition.
- ``x IN (SELECT e ...)``: a semi-join on ``x = __sq<i>._v`` (plus correlated conjuncts
  as for EXISTS); ``x NOT IN (SELECT e ...)``: a null-aware anti-join on that equality
  (SQL's NULL semantics; uncorrelated only).
- a scalar subquery ``(SELECT agg ...)`` inside a comparison: an aggregate without GROUP
  BY. Uncorrelated, it is one row joined to every row (no condition); correlated by
  equalities ``inner = outer``, it is grouped on the inner sides (outputs ``_k<j>``) and
  joined on them. The comparison is then a selection on ``__sq<i>._v``, and a projection
  drops the subquery's columns again. A missing group
  (or an empty uncorrelated input) drops the outer row, as SQL's NULL comparison does;
  so a scalar subquery must sit where NULL rejects the row (an operand of a comparison
  conjunct), and one whose value over no rows is not NULL (a COUNT, correlated or not)
  is refused. One that may return several rows (no aggregate, or GROUP BY; uncorrelated
  only) is ``SELECT one_row(max(e), count(*)) FROM (...)``: its row's value, NULL over
  none, and Spark's error over several (``imp_core.plan.ansi``).

- ``[NOT] EXISTS`` and ``x IN (subquery)`` inside OR (only AND / OR above them): the
  DISTINCT of the correlation keys (and of ``e``) with a mark ``_m``, LEFT joined; the
  subquery reads ``_m IS NOT NULL``. A COUNT compared with 0 is an EXISTS.

Invariants: every name introduced is unique within the SELECT; binding the join
conditions records the outer columns they read before the FROM clause is built (column
pruning); anything outside these shapes raises ``UnsupportedSqlError`` naming it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Mapping, Protocol

import pyarrow as pa
from sqlglot import exp

from imp_core.plan.empty_input import sql_row_over_empty
from imp_core.plan.expr import BinaryOp, ColumnRef, Expr
from imp_core.plan.nodes import (
    Join,
    NamedExpr,
    OuterJoin,
    PlanNode,
    Project,
    Select,
    SemiJoin,
)
from imp_core.sql.expressions import split_and
from imp_core.sql.from_clause import (
    SCALAR_SOURCE,
    Planned,
    bind_from_item,
    set_operation_name,
)
from imp_core.sql.nesting import and_
from imp_core.sql.scope import Scope
from imp_core.sql.text import SqlText

Step = Callable[[PlanNode], PlanNode]
_COMPARISONS = (exp.EQ, exp.NEQ, exp.GT, exp.GTE, exp.LT, exp.LTE)
_NESTED = (exp.Select, exp.Subquery)


def has_subquery(node: exp.Expression) -> bool:
    """Whether ``node`` holds a subquery (EXISTS, IN (SELECT ...), or a scalar one)."""
    return any(isinstance(n, (exp.Select, exp.Exists)) for n in node.walk())


class SelectOwner(Protocol):
    """What the planner of the enclosing SELECT offers (``SelectPlanner``)."""

    text: SqlText
    catalog: Mapping[str, pa.Schema]
    scope: Scope

    def plan_subquery(self, select: exp.Select,
                      required: frozenset[str] | None) -> Planned: ...

    def bind_with_scope(self, node: exp.Expression, scope: Scope, clause: str,
                        derived: set[str]) -> Expr: ...


@dataclass
class _Derived:
    """A subquery planned as a derived table, and the scope that sees it too."""

    alias: str
    node: PlanNode
    scope: Scope


class SubqueryPlanner:
    """Plans the subquery conjuncts of one SELECT (``owner``)."""

    def __init__(self, owner: SelectOwner):
        self.owner = owner
        self.text = owner.text
        self.count = 0

    # -- entry points -------------------------------------------------------------------
    def where_step(self, conjunct: exp.Expression) -> Step:
        node, negated = conjunct, False
        while isinstance(node, exp.Paren):
            node = node.this
        if isinstance(node, exp.Not):
            inner = node.this
            while isinstance(inner, exp.Paren):
                inner = inner.this
            if isinstance(inner, (exp.Exists, exp.In)):
                node, negated = inner, True
        if isinstance(node, exp.Exists):
            return self._exists(node, negated)
        if isinstance(node, exp.In) and node.args.get("query") is not None:
            return self._in(node, negated)
        counted = count_as_exists(node)
        if counted is not None:
            return self._exists(*counted)
        marked = self._marked(conjunct)
        if marked is not None:
            return marked
        return self._scalar(conjunct, "WHERE")

    def having_step(self, conjunct: exp.Expression) -> Step:
        return self._scalar(conjunct, "HAVING")

    # -- EXISTS and IN ------------------------------------------------------------------
    def _exists(self, node: exp.Exists, negated: bool) -> Step:
        sub = self._select_of(node.this, node)
        sub, correlated, inner_columns = self._decorrelate(sub)
        if correlated and _aggregates(sub):
            raise self.text.unsupported("correlated EXISTS over an aggregating subquery",
                                        node, "EXISTS")
        items = [exp.alias_(c.copy(), f"_c{j}") for j, c in enumerate(inner_columns)]
        sub.set("expressions", items or [exp.alias_(exp.Literal.number(1), "_c0")])
        derived = self._derive(sub)
        condition = self._bind_all(self._rewrite(correlated, inner_columns, derived.alias),
                                   derived, "EXISTS condition")
        anti = negated

        def step(outer: PlanNode) -> PlanNode:
            return SemiJoin(outer, derived.node, condition, anti=anti)

        return step

    def _in(self, node: exp.In, negated: bool) -> Step:
        query = node.args["query"]
        sub = self._select_of(query.this if isinstance(query, exp.Subquery) else query, node)
        if len(sub.expressions) != 1:
            raise self.text.unsupported("IN subquery with several columns", node, "IN")
        sub, correlated, inner_columns = self._decorrelate(sub)
        if correlated and (negated or _aggregates(sub)):
            construct = ("correlated NOT IN subquery" if negated
                         else "correlated IN over an aggregating subquery")
            raise self.text.unsupported(construct, node, "IN")
        value = sub.expressions[0]
        value = value.this if isinstance(value, exp.Alias) else value
        items = [exp.alias_(value.copy(), "_v")]
        items += [exp.alias_(c.copy(), f"_c{j}") for j, c in enumerate(inner_columns)]
        sub.set("expressions", items)
        derived = self._derive(sub)
        equal = exp.EQ(this=node.this.copy(), expression=exp.column("_v", derived.alias))
        conjuncts = [equal] + self._rewrite(correlated, inner_columns, derived.alias)
        condition = self._bind_all(conjuncts, derived, "IN condition")
        if negated:  # a null-aware anti-join compares plain columns
            if not (isinstance(condition, BinaryOp) and isinstance(condition.left, ColumnRef)):
                raise self.text.unsupported("NOT IN over an expression (use a column)",
                                            node.this, "NOT")

        def step(outer: PlanNode) -> PlanNode:
            return SemiJoin(outer, derived.node, condition, anti=negated,
                            null_aware=negated)

        return step

    # -- EXISTS and IN inside OR -------------------------------------------------------
    def _marked(self, conjunct: exp.Expression) -> Step | None:
        """A conjunct with [NOT-free] EXISTS / IN (subquery) inside OR, e.g. ``p OR EXISTS
        (SELECT ... WHERE inner = outer)``: each subquery becomes the DISTINCT of its
        correlation keys with a mark ``_m``, LEFT joined on them (at most one partner per
        outer row, so no row is duplicated), and the EXISTS reads ``_m IS NOT NULL``.
        Where NOT or any other operator than AND / OR sits above the subquery, NULL and
        FALSE would differ: None (refused as before)."""
        targets = [n for n in conjunct.find_all(exp.Exists, exp.In)
                   if (isinstance(n, exp.Exists) or n.args.get("query") is not None)
                   and not _inside_subquery(n, conjunct)]
        if not targets or not any(isinstance(n, exp.Or) for n in conjunct.walk()) or \
                not all(_positive(n, conjunct) for n in targets):
            return None
        rewritten = conjunct.copy()
        copies = [n for n in rewritten.find_all(exp.Exists, exp.In)
                  if (isinstance(n, exp.Exists) or n.args.get("query") is not None)
                  and not _inside_subquery(n, rewritten)]
        joins: list[tuple[_Derived, Expr | None]] = []
        scope = self.owner.scope
        for original, copy in zip(targets, copies):
            derived, condition = self._mark(original)
            joins.append((derived, condition))
            copy.replace(exp.Not(this=exp.Is(this=exp.column("_m", derived.alias),
                                               expression=exp.Null())))
            scope = Scope(scope.sources + derived.scope.sources[-1:], self.text, scope.used)
        predicate = self.owner.bind_with_scope(rewritten, scope, "WHERE",
                                               {d.alias for d, _ in joins})

        def step(outer: PlanNode) -> PlanNode:
            joined = outer
            for derived, condition in joins:
                joined = OuterJoin(joined, derived.node, condition, kind="left")
            return Project(Select(joined, predicate),
                           tuple(NamedExpr(n, ColumnRef(n)) for n in outer.column_names))

        return step

    def _mark(self, node: exp.Expression) -> tuple[_Derived, Expr | None]:
        value: exp.Expression | None = None
        if isinstance(node, exp.In):  # x IN (SELECT e ...): also joined on x = e
            sub = self._select_of(node.args["query"], node)
            if len(sub.expressions) != 1:
                raise self.text.unsupported("IN subquery with several columns", node)
            value = sub.expressions[0]
            value = value.this if isinstance(value, exp.Alias) else value
        else:
            sub = self._select_of(node.this, node)
        sub, correlated, _ = self._decorrelate(sub)
        if _aggregates(sub):
            raise self.text.unsupported("EXISTS / IN over an aggregating subquery inside OR",
                                        node)
        keys, outer_sides = self._correlation_keys(correlated, node)
        items = [exp.alias_(k.copy(), f"_k{j}") for j, k in enumerate(keys)]
        if value is not None:
            items.append(exp.alias_(value.copy(), "_v"))
        sub.set("expressions", items + [exp.alias_(exp.Literal.number(1), "_m")])
        sub.set("distinct", exp.Distinct())
        derived = self._derive(sub)
        equalities: list[exp.Expression] = [
            exp.EQ(this=o.copy(), expression=exp.column(f"_k{j}", derived.alias))
            for j, o in enumerate(outer_sides)]
        if value is not None:
            equalities.append(exp.EQ(this=node.this.copy(),
                                     expression=exp.column("_v", derived.alias)))
        return derived, self._bind_all(equalities, derived, "correlation")

    # -- scalar subqueries --------------------------------------------------------------
    def _scalar(self, conjunct: exp.Expression, clause: str) -> Step:
        comparison = conjunct
        while isinstance(comparison, exp.Paren):
            comparison = comparison.this
        subqueries = [n for n in conjunct.find_all(exp.Subquery)]
        # an EXISTS inside one of the subqueries is planned with it (its own WHERE)
        if not isinstance(comparison, _COMPARISONS) or not subqueries or any(
                isinstance(n, exp.Exists) and not _inside_subquery(n, conjunct)
                for n in conjunct.walk()):
            raise self.text.unsupported(f"subquery in {clause} outside a comparison",
                                        subqueries[0] if subqueries else conjunct)
        joins: list[tuple[_Derived, Expr | None, bool]] = []
        rewritten = conjunct.copy()
        scope = self.owner.scope
        for original, copy in zip(subqueries, rewritten.find_all(exp.Subquery)):
            if _inside_subquery(original, conjunct):
                continue  # nested deeper: planned with its own subquery
            derived, condition, empty = self._scalar_join(original, clause)
            joins.append((derived, condition, empty is not None))
            value: exp.Expression = exp.column("_v", derived.alias)
            if empty is not None:
                # an outer row without partners reads the value over no rows (a COUNT's
                # 0): its padded key is NULL, a partner's never is (it equals the outer's)
                value = exp.Case(ifs=[exp.If(
                    this=exp.Is(this=exp.column("_k0", derived.alias), expression=exp.Null()),
                    true=empty)], default=value)
            copy.replace(value)
            scope = Scope(scope.sources + derived.scope.sources[-1:], self.text, scope.used)
        predicate = self.owner.bind_with_scope(rewritten, scope, clause,
                                               {d.alias for d, _, _ in joins})

        def step(outer: PlanNode) -> PlanNode:
            joined = outer
            for derived, condition, padded in joins:
                joined = OuterJoin(joined, derived.node, condition, kind="left") if padded \
                    else Join(joined, derived.node, condition)
            # the subqueries' values are not the outer query's columns: projecting them
            # away keeps a changed value from changing every outer row downstream
            # (the engine maintains this shape as one operator, ``ScalarFilterOp``)
            return Project(Select(joined, predicate),
                           tuple(NamedExpr(n, ColumnRef(n)) for n in outer.column_names))

        return step

    def scalar_value(self, node: exp.Subquery) -> tuple[_Derived, Expr | None]:
        """An uncorrelated scalar subquery of the SELECT list as a one-row derived table
        (``_v``); correlated ones are refused."""
        sub = self._select_of(node.this, node)
        if self._decorrelate(sub.copy())[1]:
            raise self.text.unsupported("correlated subquery in the SELECT list", node)
        derived, condition, _ = self._scalar_join(node, "SELECT list")
        return derived, condition

    def _scalar_join(self, node: exp.Subquery, clause: str
                     ) -> tuple[_Derived, Expr | None, exp.Expression | None]:
        """(the subquery as a derived table: its correlation keys ``_k<i>`` and value
        ``_v``, the join condition, and for a correlated subquery whose value over no rows
        is not NULL (a COUNT) that value, which an outer row without partners reads)."""
        sub = self._select_of(node.this, node)
        if len(sub.expressions) != 1:
            raise self.text.unsupported("scalar subquery with several columns", node)
        several = not _aggregates(sub) or sub.args.get("group") is not None
        if several:  # Spark raises when it returns more than one row: checked as it runs
            if self._decorrelate(sub.copy())[1]:
                raise self.text.unsupported(
                    "correlated scalar subquery that may return several rows (only an "
                    "aggregate without GROUP BY is known to return one)", node)
            sub = _at_most_one_row(sub)
        sub, correlated, _ = self._decorrelate(sub)
        if correlated and clause == "HAVING":
            raise self.text.unsupported("correlated subquery in HAVING", node)
        value = sub.expressions[0]
        value = value.this if isinstance(value, exp.Alias) else value
        no_rows = None
        if correlated and any(isinstance(n, exp.Count) for n in value.walk()):
            no_rows = _over_no_rows(value)
        keys, outer_sides = self._correlation_keys(correlated, node)
        items = [exp.alias_(k.copy(), f"_k{j}") for j, k in enumerate(keys)]
        sub.set("expressions", items + [exp.alias_(value.copy(), "_v")])
        if keys:
            sub.set("group", exp.Group(expressions=[k.copy() for k in keys]))
        derived = self._derive(sub)
        if not keys and clause != "SELECT list":  # there, read through a COALESCE
            # SQL's one row over no input: where its value is not NULL (a COUNT), the
            # outer rows must be compared with it rather than dropped
            empty = sql_row_over_empty(derived.node)
            if empty is not None and empty.num_rows and \
                    empty.column(f"{derived.alias}._v")[0].is_valid:
                raise self.text.unsupported(
                    "scalar subquery whose value over no rows is not NULL (e.g. COUNT)",
                    node)
        equalities: list[exp.Expression] = [
            exp.EQ(this=o.copy(), expression=exp.column(f"_k{j}", derived.alias))
            for j, o in enumerate(outer_sides)]
        return derived, self._bind_all(equalities, derived, "correlation"), no_rows

    def _correlation_keys(self, correlated: list[exp.Expression], where: exp.Expression
                          ) -> tuple[list[exp.Expression], list[exp.Expression]]:
        """Split each correlated conjunct ``a = b`` into its inner and outer side."""
        inner_sides: list[exp.Expression] = []
        outer_sides: list[exp.Expression] = []
        for part in correlated:
            if isinstance(part, exp.EQ):
                left_outer = self._outer_columns(part.this)
                right_outer = self._outer_columns(part.expression)
                left_inner = self._inner_columns(part.this)
                right_inner = self._inner_columns(part.expression)
                if left_outer and not left_inner and right_inner and not right_outer:
                    inner_sides.append(part.expression), outer_sides.append(part.this)
                    continue
                if right_outer and not right_inner and left_inner and not left_outer:
                    inner_sides.append(part.this), outer_sides.append(part.expression)
                    continue
            raise self.text.unsupported(
                "correlated scalar subquery with a correlation that is not an equality "
                "of inner and outer expressions", part)
        return inner_sides, outer_sides

    # -- correlation --------------------------------------------------------------------
    def _select_of(self, node: exp.Expression, where: exp.Expression) -> exp.Select:
        while isinstance(node, exp.Subquery) and not [k for k, v in node.args.items()
                                                      if v and k != "this"]:
            node = node.this
        if isinstance(node, exp.SetOperation):  # planned only as a query or in FROM
            name = set_operation_name(node)
            raise self.text.unsupported(f"{name} in a WHERE or HAVING subquery", node,
                                        name.split()[0])
        if not isinstance(node, exp.Select):
            raise self.text.unsupported("subquery that is not a SELECT", where)
        return node.copy()

    def _decorrelate(self, sub: exp.Select
                     ) -> tuple[exp.Select, list[exp.Expression], list[exp.Column]]:
        """``sub`` without its correlated WHERE conjuncts, those conjuncts, and the inner
        columns they read (distinct, in order of appearance)."""
        self._inner = _inner_names(sub, self.owner.catalog)
        where = sub.args.get("where")
        kept: list[exp.Expression] = []
        correlated: list[exp.Expression] = []
        for part in split_and(where.this) if where is not None else []:
            (correlated if self._outer_columns(part) else kept).append(part)
        if correlated:
            sub.set("where", exp.Where(this=and_(kept)) if kept else None)
        rest = [c for c in _columns(sub) if self._is_outer(c)]
        if rest:
            raise self.text.unsupported(
                "correlated reference outside the subquery's WHERE conjuncts", rest[0])
        inner: dict[tuple[str, str], exp.Column] = {}
        for part in correlated:
            for column in _columns(part):
                if not self._is_outer(column):
                    inner.setdefault((column.table.lower(), column.name.lower()), column)
        return sub, correlated, list(inner.values())

    def _is_outer(self, column: exp.Column) -> bool:
        aliases, columns = self._inner
        scope = self.owner.scope
        qualifier = column.table.lower()
        if qualifier:
            return qualifier not in aliases and qualifier in scope.aliases()
        return column.name.lower() not in columns and \
            any(s.find(column.name) is not None for s in scope.sources)

    def _outer_columns(self, node: exp.Expression) -> list[exp.Column]:
        return [c for c in _columns(node) if self._is_outer(c)]

    def _inner_columns(self, node: exp.Expression) -> list[exp.Column]:
        return [c for c in _columns(node) if not self._is_outer(c)]

    def _rewrite(self, correlated: list[exp.Expression], inner_columns: list[exp.Column],
                 alias: str) -> list[exp.Expression]:
        """The correlated conjuncts reading the derived table's ``_c<j>`` outputs."""
        index = {(c.table.lower(), c.name.lower()): j for j, c in enumerate(inner_columns)}
        out = []
        for part in correlated:
            part = part.copy()
            for column in list(_columns(part)):
                j = index.get((column.table.lower(), column.name.lower()))
                if j is not None and not self._is_outer(column):
                    column.replace(exp.column(f"_c{j}", alias))
            out.append(part)
        return out

    # -- planning -----------------------------------------------------------------------
    def _derive(self, sub: exp.Select) -> _Derived:
        alias = f"__sq{self.count}"
        self.count += 1
        item = bind_from_item(exp.Subquery(this=sub, alias=exp.TableAlias(
            this=exp.to_identifier(alias))), len(self.owner.scope.sources) + 100,
            self.text, self.owner.catalog, self.owner.plan_subquery)
        node = item.build(item.source.columns)
        scope = Scope(self.owner.scope.sources + [item.source], self.text,
                      self.owner.scope.used)
        return _Derived(alias, node, scope)

    def _bind_all(self, conjuncts: list[exp.Expression], derived: _Derived,
                  clause: str) -> Expr | None:
        if not conjuncts:
            return None
        return self.owner.bind_with_scope(and_(conjuncts), derived.scope, clause,
                                          {derived.alias})


# (op, constant) -> whether ``count op constant`` says "some row" (True) or "no row"
_COUNT_TESTS = {(exp.GT, 0): True, (exp.GTE, 1): True, (exp.NEQ, 0): True,
                (exp.EQ, 0): False, (exp.LT, 1): False, (exp.LTE, 0): False}
_FLIPPED = {exp.GT: exp.LT, exp.LT: exp.GT, exp.GTE: exp.LTE, exp.LTE: exp.GTE,
            exp.EQ: exp.EQ, exp.NEQ: exp.NEQ}


def _over_no_rows(value: exp.Expression) -> exp.Expression:
    """``value`` over no rows: each COUNT 0, each other aggregate NULL (SQL's rule)."""
    def empty(node: exp.Expression) -> exp.Expression:
        if isinstance(node, exp.Count):
            return exp.Literal.number(0)
        if isinstance(node, exp.AggFunc):
            return exp.Null()
        return node
    return value.copy().transform(empty)


def count_as_exists(node: exp.Expression) -> tuple[exp.Exists, bool] | None:
    """``(SELECT count(...) FROM ... WHERE ...) > 0`` (or ``>= 1``, ``<> 0``) as EXISTS,
    ``= 0`` (or ``< 1``, ``<= 0``) as NOT EXISTS: (the EXISTS, negated), or None.

    A COUNT is never NULL, so comparing it with 0 asks only whether a row qualifies;
    ``count(x)`` counts the rows where x is not NULL. Correlated or not, this is what
    the semi- and anti-join compute (the correlated COUNT itself, 0 for a row without
    partners, is otherwise not supported)."""
    if not isinstance(node, tuple(_FLIPPED)):
        return None
    op, sub, value = type(node), node.this, node.expression
    if isinstance(value, exp.Subquery) and not isinstance(sub, exp.Subquery):
        op, sub, value = _FLIPPED[op], value, sub
    while isinstance(sub, exp.Subquery) and isinstance(sub.this, exp.Subquery):
        sub = sub.this
    if not (isinstance(sub, exp.Subquery) and isinstance(sub.this, exp.Select)
            and isinstance(value, exp.Literal) and value.is_int):
        return None
    select = sub.this
    if len(select.expressions) != 1 or any(select.args.get(k) for k in (
            "group", "having", "limit", "order", "distinct", "qualify")):
        return None
    count = select.expressions[0]
    count = count.this if isinstance(count, exp.Alias) else count
    some = _COUNT_TESTS.get((op, int(value.to_py())))
    if not isinstance(count, exp.Count) or some is None or isinstance(
            count.this, exp.Distinct) or count.expressions:
        return None
    inner = select.copy()
    arg = count.this
    if arg is not None and not isinstance(arg, exp.Star) and not (
            isinstance(arg, exp.Literal) and not isinstance(arg, exp.Null)):
        inner = inner.where(exp.Not(this=exp.Is(this=arg.copy(), expression=exp.Null())))
    inner.set("expressions", [exp.Literal.number(1)])
    return exp.Exists(this=inner), not some


ONE_ROW = "__imp_one_row"  # imp_core.plan.evaluate: its first argument, raising if the
# second (the row count) is over 1


def _at_most_one_row(sub: exp.Select) -> exp.Select:
    """``(SELECT e ...)`` that may return several rows as ``SELECT one_row(max(e),
    count(*)) FROM (SELECT e ...)``: one row whose value is e's where the subquery has
    one row, NULL where it has none, and an error (Spark's) where it has more."""
    value = sub.expressions[0]
    value = value.this if isinstance(value, exp.Alias) else value
    inner = sub.copy()
    alias = exp.TableAlias(this=exp.to_identifier(SCALAR_SOURCE))
    if isinstance(value, exp.Star) or isinstance(value, exp.Column) \
            and isinstance(value.this, exp.Star):
        # ``(SELECT * FROM t)``: the one column t has, named by the alias list (a star
        # over several columns fails there: the list has the wrong length)
        alias.set("columns", [exp.to_identifier("_e")])
    else:
        inner.set("expressions", [exp.alias_(value.copy(), "_e")])
    source = exp.Subquery(this=inner, alias=alias)
    check = exp.Anonymous(this=ONE_ROW, expressions=[
        exp.Max(this=exp.column("_e", SCALAR_SOURCE)), exp.Count(this=exp.Star())])
    return exp.select(exp.alias_(check, "_v")).from_(source)


def _positive(node: exp.Expression, root: exp.Expression) -> bool:
    """Whether only AND, OR and parentheses stand between ``node`` and ``root`` (where a
    NULL and a FALSE reject the row alike)."""
    parent = node.parent
    while node is not root:
        if not isinstance(parent, (exp.And, exp.Or, exp.Paren)):
            return False
        node, parent = parent, parent.parent
    return True


def _aggregates(select: exp.Select) -> bool:
    if select.args.get("group") is not None or select.args.get("having") is not None:
        return True
    return any(isinstance(n, exp.AggFunc) for e in select.expressions
               for n in e.walk(prune=lambda n: isinstance(n, _NESTED)))


def _columns(node: exp.Expression) -> list[exp.Column]:
    """The column references of ``node`` outside nested subqueries."""
    return [n for n in node.walk(prune=lambda n: n is not node and isinstance(n, _NESTED))
            if isinstance(n, exp.Column)]


def _inside_subquery(node: exp.Expression, root: exp.Expression) -> bool:
    parent = node.parent
    while parent is not None and parent is not root:
        if isinstance(parent, (exp.Subquery, exp.Select)):
            return True
        parent = parent.parent
    return False


def _inner_names(sub: exp.Select, catalog) -> tuple[set[str], set[str]]:
    """The aliases of ``sub``'s FROM items and the column names they may provide."""
    aliases: set[str] = set()
    columns: set[str] = set()
    items = [sub.args["from_"].this] if sub.args.get("from_") is not None else []
    items += [j.this for j in sub.args.get("joins") or []]
    for item in items:
        alias = item.alias_or_name.lower()
        aliases.add(alias)
        if isinstance(item, exp.Table):
            schema = catalog.get(item.name.lower())
            if schema is not None:
                columns |= {n.lower() for n in schema.names}
        elif isinstance(item, exp.Subquery) and isinstance(item.this, exp.Select):
            columns |= {e.alias_or_name.lower() for e in item.this.expressions}
        if isinstance(item.args.get("alias"), exp.TableAlias):
            columns |= {c.name.lower() for c in item.args["alias"].columns}
    return aliases, columns

