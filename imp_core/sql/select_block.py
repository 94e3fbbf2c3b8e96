"""Planning of one SELECT block into plan nodes.

Shape of the plan, bottom-up (each step only when the query needs it):

- FROM: one leaf per FROM item, joined left-deep in FROM order; every WHERE/ON conjunct
  sits at the lowest point where all its columns exist: in a ``Select`` directly above
  the ``Scan`` of the one table it reads (delta filtering relies on this; into a
  subquery as far as ``imp_core.sql.pushdown`` allows), else in the condition of the ``Join``
  that adds the last item it reads;
- aggregation: a ``Project`` of group keys and aggregate arguments, the ``Aggregate``
  (see ``imp_core.sql.aggregation`` for names), and a ``Select`` for HAVING;
- a final ``Project`` of the SELECT list (output name: alias, column name, or ``_c<i>``),
  plus hidden ``_o<i>`` columns that ORDER BY ... LIMIT needs;
- ``Distinct``; ``TopK`` for ORDER BY ... LIMIT, then a rename-only ``Project`` dropping
  hidden columns. ORDER BY without LIMIT only sets the presentation order.

Every expression is type-checked where it is placed, so a type error names its SQL.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Mapping

import pyarrow as pa
from sqlglot import exp

from imp_core.errors import UnknownColumnError, UnsupportedSqlError
from imp_core.plan.aggregates.distinct import is_distinct
from imp_core.plan.empty_input import sql_row_over_empty
from imp_core.plan.evaluate import aggregate_type, infer_type
from imp_core.plan.expr import ColumnRef, Expr, FuncCall, Literal, conjoin, conjuncts
from imp_core.plan.nodes import (
    Aggregate,
    Distinct,
    Join,
    NamedExpr,
    OuterJoin,
    PlanNode,
    Project,
    Select,
    SemiJoin,
    SortKey,
    TopK,
    arrow_schema,
    at_most_one_row,
)
from imp_core.sql.aggregation import Aggregation, global_aggregates
from imp_core.sql.expressions import BindContext, aggregate_call, bind, split_and
from imp_core.sql.from_clause import FromItem, Planned, bind_from_item, check_join
from imp_core.sql.from_clause import sort_key as _sort_key
from imp_core.sql.grouping_sets import (
    SET_COLUMN,
    GroupingSets,
    bind_grouping_sets,
    grouping_arguments,
    has_grouping_sets,
    is_grouping_function,
)
from imp_core.sql.join_tree import FromTree
from imp_core.sql.join_tree import Sourced as _Sourced
from imp_core.sql.nesting import and_
from imp_core.sql.pushdown import push_selection
from imp_core.sql.scalar_merge import merge_scalar_subqueries
from imp_core.sql.scope import Scope
from imp_core.sql.select_clauses import (
    GROUPING_CLAUSES,
    check_clauses,
    has_aggregate,
    is_correlated,
)
from imp_core.sql.set_operations import plan_query
from imp_core.sql.subqueries import Step, SubqueryPlanner, has_subquery
from imp_core.sql.text import SqlText
from imp_core.sql.windows import WindowPlanner

_TRUE = Literal(True, pa.bool_())
_WINDOW_CLAUSES = ("SELECT list", "ORDER BY")  # where window functions may appear
# what type inference raises for an ill-typed expression (KeyError: type pairings that
# the evaluator's coercion tables do not cover)
TYPE_ERRORS = (pa.ArrowException, TypeError, ValueError, ArithmeticError, KeyError)


@dataclass(frozen=True)
class _Item:
    """One SELECT-list entry (after ``*`` expansion)."""

    name: str
    node: exp.Expression  # without its alias


class SelectPlanner(FromTree):
    """Plans one SELECT. For a ``nested`` one (a subquery in FROM), ``required`` (lower-case
    output names, None for all) prunes SELECT items that the enclosing query never reads."""

    def __init__(self, select: exp.Select, text: SqlText, catalog: Mapping[str, pa.Schema],
                 nested: bool = False, required: frozenset[str] | None = None,
                 planned: dict | None = None):
        self.select = select
        # the subqueries of the whole statement planned so far, by (node, required): a
        # subquery in FROM is planned for its columns, then for those read, so without
        # it n nested ones (or n chained WITH bodies) were planned 2^n times
        self.planned: dict = {} if planned is None else planned
        self.text = text
        self.catalog = catalog
        self.nested = nested
        self.required = required
        check_clauses(select, text)
        self.items_from = self._bind_from()
        self.scope = Scope([i.source for i in self.items_from], text)
        self.agg: Aggregation | None = None
        self.grouping: GroupingSets | None = None  # GROUP BY ROLLUP / CUBE / GROUPING SETS
        self.columns_seen: dict[str, exp.Column] = {}  # field -> first reference
        self.subqueries = SubqueryPlanner(self)
        self.where_steps: list[Step] = []  # WHERE conjuncts with subqueries
        self.having_steps: list[Step] = []  # HAVING conjuncts with subqueries
        self.select_joins: list[PlanNode] = []  # scalar subqueries of the SELECT list
        self.shown: tuple[str, ...] = ()  # the SQL's output names where they repeat
        self.windows = WindowPlanner(text, self._bind_window_part)

    def plan(self) -> Planned:
        limit, distinct = self._limit(), self._distinct()
        order = self._order(limit)
        all_items = self._select_items()
        items = self._prune(all_items, keep_all=distinct or limit is not None)
        predicates = self._bind_predicates()
        if self._aggregating(all_items, order):
            self.agg = Aggregation()
            self._bind_groups(all_items)
        outputs = [_Sourced(self._bind_output(i.node, "SELECT list"), i.node) for i in items]
        having = self._bind_having(all_items)
        keys, hidden = self._bind_order(order, items, outputs, all_items)
        if hidden and (distinct or limit is None):
            construct = ("ORDER BY expression not in the SELECT DISTINCT list" if distinct
                         else "ORDER BY expression not in the SELECT list (without LIMIT)")
            raise self.text.unsupported(construct, hidden[0][1].node)
        node = self._from_tree(predicates)
        for step in self.where_steps:
            node = step(node)
        for one_row in merge_scalar_subqueries(self.select_joins):
            node = OuterJoin(node, one_row, None, kind="left")
        if self.agg is not None:
            node = self._aggregate(node, having)
            for step in self.having_steps:
                node = step(node)
        node = self.windows.build(node)
        names = [i.name for i in items]
        node = self._project(node, list(zip(names, outputs)) + hidden)
        if distinct:
            node = Distinct(node)
        if limit is not None and self.select.args.get("order") is None:
            # LIMIT n (n >= 1) of at most one row (an aggregate without GROUP BY) keeps
            # it: the LIMIT changes nothing; of more rows it picks arbitrary ones
            clause = self.select.args["limit"]
            if limit < 1 or not at_most_one_row(node):
                raise self.text.unsupported("LIMIT without ORDER BY", clause, "LIMIT",
                                            detail="Spark picks arbitrary rows; add an "
                                            "ORDER BY that decides which")
            limit = None
        if limit is None:
            return Planned(node, tuple(names), tuple(keys), self.shown)
        node = TopK(node, tuple(keys), limit)
        if hidden:
            node = Project(node, tuple(NamedExpr(n, ColumnRef(n)) for n in names))
        return Planned(node, tuple(names), shown=self.shown)

    # -- clauses -------------------------------------------------------------------------

    def _limit(self) -> int | None:
        limit = self.select.args.get("limit")
        if limit is None:
            return None
        if limit.args.get("offset") or limit.args.get("expressions"):
            raise self.text.unsupported("OFFSET", limit, "OFFSET")
        count = limit.expression
        if not (isinstance(count, exp.Literal) and count.is_int and count.to_py() >= 0):
            raise self.text.unsupported("LIMIT with a count that is not a constant integer",
                                        limit, "LIMIT")
        return int(count.to_py())

    def _order(self, limit: int | None) -> exp.Order | None:
        if limit is None and self.nested:
            return None  # ordering a subquery without LIMIT has no effect on its result
        return self.select.args.get("order")

    def _distinct(self) -> bool:
        distinct = self.select.args.get("distinct")
        if distinct is not None and distinct.args.get("on"):
            raise self.text.unsupported("DISTINCT ON", distinct, "DISTINCT")
        return distinct is not None

    def _bind_from(self) -> list[FromItem]:
        from_ = self.select.args.get("from_")
        if from_ is None:
            raise self.text.unsupported("SELECT without FROM", self.select, "SELECT")
        nodes = [from_.this]
        self.join_kinds = ["inner"]  # per FROM item: how it joins the items before it
        for join in self.select.args.get("joins") or []:
            self.join_kinds.append(check_join(join, self.text))
            nodes.append(join.this)
        items = [bind_from_item(n, i, self.text, self.catalog, self._plan_subquery)
                 for i, n in enumerate(nodes)]
        seen: set[str] = set()
        for item in items:
            if item.source.alias in seen:
                raise self.text.unsupported("duplicate table alias", item.node,
                                            detail=f"{item.source.alias}; give each an alias")
            seen.add(item.source.alias)
        return items

    def _plan_subquery(self, select: exp.Select | exp.SetOperation,
                       required: frozenset[str] | None) -> Planned:
        key = (id(select), required)  # the entry holds the node: its id stays its own
        if key not in self.planned:
            if isinstance(select, exp.SetOperation):  # compares whole rows: all columns
                planned = plan_query(select, self.text, self._plan_operand, True)
            else:
                planned = SelectPlanner(select, self.text, self.catalog, True, required,
                                        self.planned).plan()
            self.planned[key] = (select, planned)
        return self.planned[key][1]

    def _plan_operand(self, select: exp.Select, nested: bool) -> Planned:
        return SelectPlanner(select, self.text, self.catalog, nested, None,
                             self.planned).plan()

    plan_subquery = _plan_subquery

    def bind_with_scope(self, node: exp.Expression, scope: Scope, clause: str,
                        derived: set[str]) -> Expr:
        """Bind ``node`` in ``scope`` (this SELECT's items plus derived tables of
        subqueries named in ``derived``); in HAVING, after aggregation."""
        if clause != "HAVING":
            return bind(node, self._context(clause, scope))
        assert self.agg is not None
        expr = bind(node, self._context(clause, scope, post=True))
        passthrough = frozenset(c for c in expr.columns()
                                if c.split(".", 1)[0] in derived)
        return self.agg.over_groups(expr, self._ungrouped, passthrough)

    def _select_items(self) -> list[_Item]:
        items: list[_Item] = []
        for i, node in enumerate(self.select.expressions):
            if isinstance(node, exp.Star) or (isinstance(node, exp.Column)
                                              and isinstance(node.this, exp.Star)):
                items += self._expand_star(node)
            elif isinstance(node, exp.Alias):
                items.append(_Item(node.alias, node.this))
            elif isinstance(node, exp.Aliases):
                raise self.text.unsupported("multiple aliases for one expression", node)
            elif isinstance(node, exp.Column):
                items.append(_Item(node.name, node))
            else:
                items.append(_Item(f"_c{i}", node))
        # the query's own output may repeat a name (Spark allows it: TPC-DS q39, q64); the
        # plan names the repeats apart and the result shows the SQL's names
        shown = [item.name for item in items]
        seen: set[str] = {item.name.lower() for item in items}
        firsts: set[str] = set()
        for i, item in enumerate(items):
            if item.name.lower() not in firsts:
                firsts.add(item.name.lower())
                continue
            if self.nested:
                raise self.text.unsupported("duplicate output column name", item.node,
                                            detail=item.name)
            n = 2
            while f"{item.name}_{n}".lower() in seen:
                n += 1
            items[i] = _Item(f"{item.name}_{n}", item.node)
            seen.add(items[i].name.lower())
        self.shown = tuple(shown) if any(a != b.name for a, b in zip(shown, items)) else ()
        return items

    def _expand_star(self, node: exp.Expression) -> list[_Item]:
        star = node if isinstance(node, exp.Star) else node.this
        if any(star.args.values()):
            raise self.text.unsupported("* with EXCEPT/REPLACE", node)
        sources = self.scope.sources
        if isinstance(node, exp.Column):
            sources = [s for s in sources if s.alias == node.table.lower()]
            if not sources:
                raise UnknownColumnError(f"unknown table or alias {node.table!r} in "
                                         f"{node.table}.*{self.text.where(node)}")
        return [_Item(c, exp.column(c, table=s.alias, quoted=True))
                for s in sources for c in s.columns]

    def _prune(self, items: list[_Item], keep_all: bool) -> list[_Item]:
        if self.required is None or keep_all:
            return items
        kept = [i for i in items if i.name.lower() in self.required]
        return kept or items[:1]

    def _aggregating(self, items: list[_Item], order: exp.Order | None) -> bool:
        if self.select.args.get("group") is not None or self.select.args.get("having"):
            return True
        nodes = [i.node for i in items] + ([o.this for o in order.expressions] if order else [])
        return any(has_aggregate(n) for n in nodes)

    # -- binding -------------------------------------------------------------------------

    def _context(self, clause: str, scope: Scope | None = None, post: bool = False,
                 aliases: list[_Item] | None = None) -> BindContext:
        """How to bind an expression of ``clause``: ``post`` means after aggregation
        (aggregate calls allowed); ``aliases`` lets names fall back to SELECT aliases."""
        scope = scope or self.scope

        def resolve(column: exp.Column) -> Expr:
            name = scope.resolve(column)
            if name is not None:
                self.columns_seen.setdefault(name, column)
                return ColumnRef(name)
            item = _find_alias(column, aliases)
            if item is None:
                raise scope.unknown(column)
            # the aliased expression itself, bound without alias fallback (no cycles)
            return bind(item.node, self._context(clause, scope, post))

        return BindContext(self.text, resolve, clause,
                           aggregate=self._register_aggregate if post else None,
                           subquery=lambda node: self._subquery_error(node, clause, scope),
                           window=self.windows if clause in _WINDOW_CLAUSES else None)

    def _bind_window_part(self, node: exp.Expression) -> Expr:
        """An OVER clause's expression or a window argument, over the window's input."""
        if self.agg is None:
            return bind(node, self._context("OVER clause"))
        expr = bind(node, self._context("OVER clause", post=True))
        return self.agg.over_groups(expr, self._ungrouped)

    def _register_aggregate(self, node: exp.Expression) -> Expr:
        assert self.agg is not None
        base = self._context("aggregate argument")
        ctx = BindContext(base.text, base.resolve, base.clause, subquery=base.subquery,
                          no_aggregate="nested aggregate function")
        if is_grouping_function(node):
            if self.grouping is None:
                raise self.text.unsupported(f"{node.sql_name().lower()}() without GROUP BY "
                                            "ROLLUP, CUBE or GROUPING SETS", node)
            args = [bind(a, ctx) for a in grouping_arguments(node)]
            return self.grouping.function(node, args, self.text)
        func, arg = aggregate_call(node, ctx)
        return self.agg.add_call(func, arg, node)

    def _bind_predicates(self) -> list[_Sourced]:
        out: list[_Sourced] = []
        for k, join in enumerate(self.select.args.get("joins") or []):
            on = join.args.get("on")
            if on is not None:  # ON sees only the items joined so far
                bound = self._bind_conjuncts(on, self._context("JOIN condition",
                                                               self.scope.prefix(k + 2)))
                out += [_Sourced(p.expr, p.node, k + 1) for p in bound]
        where = self.select.args.get("where")
        if where is not None:
            for part in split_and(where.this):
                if has_subquery(part):
                    self.where_steps.append(self.subqueries.where_step(part))
                else:
                    out += self._bind_conjuncts(part, self._context("WHERE"))
        return out

    def _bind_conjuncts(self, node: exp.Expression, ctx: BindContext) -> list[_Sourced]:
        return [_Sourced(expr, part) for part in split_and(node)
                for expr in conjuncts(bind(part, ctx)) if expr != _TRUE]

    def _bind_groups(self, items: list[_Item]) -> None:
        assert self.agg is not None
        group = self.select.args.get("group")
        if group is None:
            return
        if has_grouping_sets(group):
            def bind_key(node: exp.Expression) -> Expr:
                expr = bind(self._group_target(node, items), self._context("GROUP BY"))
                self.agg.add_group(expr, node)  # type: ignore[union-attr]
                return expr

            self.grouping = bind_grouping_sets(group, self.text, bind_key)
            # after aggregation a key is its expanded column; grouping() reads the set
            self.agg.groups = {**self.grouping.expanded(), ColumnRef(SET_COLUMN): SET_COLUMN}
            return
        for key, (construct, keyword) in GROUPING_CLAUSES.items():
            if group.args.get(key):
                raise self.text.unsupported(construct, group, keyword)
        for node in group.expressions:
            target = self._group_target(node, items)
            self.agg.add_group(bind(target, self._context("GROUP BY")), node)

    def _group_target(self, node: exp.Expression, items: list[_Item]) -> exp.Expression:
        """What a GROUP BY key denotes: a SELECT item for a position or for an alias that
        is not also an input column (Spark's rule), else the key itself."""
        ordinal = _ordinal(node)
        if ordinal is not None:
            return items[self._position(ordinal, len(items), "GROUP BY", node)].node
        if isinstance(node, exp.Column) and not node.table and isinstance(node.this,
                                                                          exp.Identifier):
            if not any(s.find(node.name) for s in self.scope.sources):
                item = _find_alias(node, items)
                if item is not None:
                    return item.node
        return node

    def _position(self, ordinal: int, count: int, clause: str, node: exp.Expression) -> int:
        if not 1 <= ordinal <= count:
            raise UnknownColumnError(f"{clause} position {ordinal} is not in the SELECT "
                                     f"list{self.text.where(node)}")
        return ordinal - 1

    def _bind_output(self, node: exp.Expression, clause: str,
                     aliases: list[_Item] | None = None) -> Expr:
        if self.agg is None:
            ctx = self._context(clause, aliases=aliases)
            if clause == "SELECT list":
                ctx = dataclasses.replace(ctx, scalar=self._select_subquery)
            return bind(node, ctx)
        expr = bind(node, self._context(clause, post=True, aliases=aliases))
        return self.agg.over_groups(expr, self._ungrouped, self.windows.names())

    def _select_subquery(self, node: exp.Subquery) -> Expr:
        """An uncorrelated scalar subquery in the SELECT list of a SELECT without
        aggregation: its one-row derived table LEFT joined to every row (so that rows
        stay where it has no row), read as its value; its value over no rows (a COUNT's
        0) where that is not NULL."""
        derived, condition = self.subqueries.scalar_value(node)
        self.select_joins.append(derived.node)
        value: Expr = ColumnRef(f"{derived.alias}._v")
        empty = sql_row_over_empty(derived.node)
        if empty is not None and empty.num_rows:
            first = empty.column(f"{derived.alias}._v")[0]
            if first.is_valid:
                value = FuncCall("coalesce", (value, Literal(first.as_py(), first.type)))
        return value

    def _ungrouped(self, field: str) -> UnknownColumnError:
        column = self.columns_seen.get(field)
        return UnknownColumnError(f"column {field!r}{self.text.where(column)} must appear in "
                                  "GROUP BY or inside an aggregate function")

    def _bind_having(self, items: list[_Item]) -> _Sourced | None:
        having = self.select.args.get("having")
        if having is None:
            return None
        plain = []
        for part in split_and(having.this):
            if has_subquery(part):
                self.having_steps.append(self.subqueries.having_step(part))
            else:
                plain.append(part)
        if not plain:
            return None
        condition = having.this if len(plain) == len(split_and(having.this)) else \
            and_(plain, copy=False)
        return _Sourced(self._bind_output(condition, "HAVING", aliases=items), having)

    def _bind_order(self, order: exp.Order | None, items: list[_Item],
                    outputs: list[_Sourced], all_items: list[_Item],
                    ) -> tuple[list[SortKey], list[tuple[str, _Sourced]]]:
        """Sort keys on output columns, and the hidden columns computing the others."""
        if order is None:
            return [], []
        keys: list[SortKey] = []
        hidden: list[tuple[str, _Sourced]] = []
        named = [(i.name, o.expr) for i, o in zip(items, outputs)]
        taken = {i.name.lower() for i in items}
        for ordered in order.expressions:
            name = self._order_output(ordered.this, items)
            if name is None:
                expr = self._bind_output(ordered.this, "ORDER BY", aliases=all_items)
                name = next((n for n, e in named if e == expr), None)
                if name is None:
                    name = _fresh("_o", taken)
                    named.append((name, expr))
                    hidden.append((name, _Sourced(expr, ordered)))
            keys.append(_sort_key(ordered, name))
        return keys, hidden

    def _order_output(self, node: exp.Expression, items: list[_Item]) -> str | None:
        """The output column an ORDER BY key names directly (by position or name)."""
        ordinal = _ordinal(node)
        if ordinal is not None:
            return items[self._position(ordinal, len(items), "ORDER BY", node)].name
        if isinstance(node, exp.Column) and not node.table and isinstance(node.this,
                                                                          exp.Identifier):
            return next((i.name for i in items if i.name.lower() == node.name.lower()), None)
        return None

    def _subquery_error(self, node: exp.Expression, clause: str,
                        scope: Scope) -> UnsupportedSqlError:
        inner = node if isinstance(node, exp.Select) else node.find(exp.Select)
        if inner is None:
            return self.text.unsupported(f"subquery in {clause}", node)
        construct = ("correlated subquery" if is_correlated(inner, scope, self.catalog)
                     else f"subquery in {clause}")
        return self.text.unsupported(construct, inner, "SELECT")

    # -- building ------------------------------------------------------------------------

    def _used_columns(self, index: int) -> tuple[str, ...]:
        source = self.scope.sources[index]
        used = {f for f, i in self.scope.used.items() if i == index}
        return tuple(c for c in source.columns if source.field(c) in used)

    def _filtered(self, node: PlanNode, predicates: list[_Sourced],
                  push: bool = False) -> PlanNode:
        """``node`` filtered by ``predicates``; with ``push``, as deep into a subquery as
        they can go, so they reach its scans."""
        if not predicates:
            return node
        self._check_conditions(node, predicates)
        condition = conjoin([p.expr for p in predicates])
        assert condition is not None
        return push_selection(node, condition) if push else Select(node, condition)

    def _aggregate(self, node: PlanNode, having: _Sourced | None) -> PlanNode:
        assert self.agg is not None
        projection = self.agg.projection(_names(node)[0])
        for named in projection:
            self._check_type(named.expr, node, self.agg.sources.get(named.expr))
        pre = Project(node, projection)
        types = {f.name: f.dtype for f in pre.schema}
        calls = self.agg.agg_calls()
        for call, source in zip(calls, self.agg.calls):
            try:
                aggregate_type(call.func, None if call.arg is None else types[call.arg])
            except TYPE_ERRORS as error:
                raise self.text.unsupported("aggregate over this type", self.agg.sources[source],
                                            detail=str(error)) from None
        distinct, plain = self.agg.distinct_arguments()
        source: PlanNode = pre
        if distinct and (plain or len(distinct) > 1) and not self.agg.group_names() \
                and self.grouping is None:
            out = global_aggregates(pre, calls, self.agg.distinct_calls())
            if having is not None:
                self._check_conditions(out, [having])
                out = Select(out, having.expr)
            return out
        if self.grouping is not None:
            if distinct:
                first = next(self.agg.sources[k] for k in self.agg.calls if is_distinct(k[0]))
                raise self.text.unsupported("aggregate with DISTINCT and grouping sets", first)
            keys = [self.agg.projected[k] for k in self.grouping.keys]
            source = self.grouping.expand(pre, keys)
        elif distinct:
            # f(DISTINCT x) GROUP BY g is f(x) over the distinct (g, x) pairs: exact when
            # every call aggregates the same x with DISTINCT
            if plain or len(distinct) > 1:
                first = next(self.agg.sources[k] for k in self.agg.calls
                             if is_distinct(k[0]))
                raise self.text.unsupported(
                    "aggregates with DISTINCT next to other aggregates or over different "
                    "arguments", first)
            keep = set(self.agg.group_names()) | distinct
            kept = tuple(NamedExpr(n.name, ColumnRef(n.name)) for n in projection
                         if n.name in keep)
            source = Distinct(pre if len(kept) == len(projection) else Project(pre, kept))
        out: PlanNode = Aggregate(source, self.agg.group_names(), calls)
        if having is not None:
            self._check_conditions(out, [having])
            out = Select(out, having.expr)
        return out

    def _project(self, node: PlanNode, outputs: list[tuple[str, _Sourced]]) -> Project:
        for _, output in outputs:
            self._check_type(output.expr, node, output.node)
        return Project(node, tuple(NamedExpr(name, o.expr) for name, o in outputs))

    # -- type checks (here, where the SQL of each expression is known) --------------------

    def _check_conditions(self, node: PlanNode, predicates: list[_Sourced]) -> None:
        for predicate in predicates:
            self._check_type(predicate.expr, node, predicate.node, boolean=True)

    def _check_type(self, expr: Expr, node: PlanNode, where: exp.Expression | None,
                    boolean: bool = False) -> None:
        """Infer ``expr``'s type over ``node``'s output; refuse it if it has none."""
        try:
            dtype = infer_type(expr, arrow_schema(node.schema))
        except TYPE_ERRORS as error:
            raise self.text.unsupported("operation on these types", where,
                                        detail=f"{expr}: {error}") from None
        if boolean and not (pa.types.is_boolean(dtype) or pa.types.is_null(dtype)):
            raise self.text.unsupported("condition that is not boolean", where,
                                        detail=f"{expr} is {dtype}")


# -- helpers ---------------------------------------------------------------------------


def _ordinal(node: exp.Expression) -> int | None:
    if isinstance(node, exp.Literal) and node.is_int:
        return int(node.to_py())
    return None


def _find_alias(column: exp.Column, items: list[_Item] | None) -> _Item | None:
    if not items or column.table or not isinstance(column.this, exp.Identifier):
        return None
    return next((i for i in items if i.name.lower() == column.name.lower()), None)


def _fresh(prefix: str, taken: set[str]) -> str:
    i = 0
    while f"{prefix}{i}" in taken:
        i += 1
    taken.add(f"{prefix}{i}")
    return f"{prefix}{i}"


def _names(node: PlanNode) -> tuple[str, ...]:
    """Output names of ``node`` without running type inference."""
    if isinstance(node, Project):
        return tuple(e.name for e in node.exprs)
    if isinstance(node, (Join, OuterJoin)):
        return _names(node.left) + _names(node.right)
    if isinstance(node, SemiJoin):
        return _names(node.left)
    if isinstance(node, Aggregate):
        return node.group_by + tuple(a.name for a in node.aggregates)
    if isinstance(node, (Select, Distinct, TopK)):
        return _names(node.input)
    return node.column_names
