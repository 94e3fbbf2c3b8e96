"""FROM items of one SELECT: tables and subqueries, and the joins that combine them.

Invariants: a table is read by a ``Scan`` whose fields are ``"{alias}.{column}"`` and
which reads only the columns the query uses (at least one); a subquery is planned
recursively and seen through a rename-only ``Project`` that names its outputs
``"{alias}.{output}"``; aliases are lower-case and unique within one FROM clause; only
inner, cross and LEFT/RIGHT/FULL OUTER joins are accepted.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Mapping

import pyarrow as pa
from sqlglot import exp

from imp_core.errors import UnknownTableError
from imp_core.plan.expr import ColumnRef
from imp_core.plan.nodes import Field, NamedExpr, PlanNode, Project, Scan, SortKey
from imp_core.sql.scope import Source
from imp_core.sql.text import SqlText

# the FROM alias a scalar subquery's rows are counted under (``subqueries._at_most_one_row``)
SCALAR_SOURCE = "__one"


@dataclass(frozen=True)
class Planned:
    """A planned SELECT: its root, output names, and presentation-only ordering."""

    node: PlanNode
    output: tuple[str, ...]
    order_by: tuple[SortKey, ...] = ()
    shown: tuple[str, ...] = ()  # the SQL's output names where ``output`` renamed repeats


# plans a nested SELECT or set operation; the set names the outputs the caller uses (None:
# all; a set operation keeps all its columns anyway)
SubqueryPlanner = Callable[[exp.Select | exp.SetOperation, "frozenset[str] | None"], Planned]


@dataclass(frozen=True)
class FromItem:
    """A bound FROM item: what it exposes, and how to build its plan once the
    query's column needs are known."""

    source: Source
    build: Callable[[tuple[str, ...]], PlanNode]  # used columns, in source order
    node: exp.Expression


_TABLE_MODIFIERS = {
    "sample": ("TABLESAMPLE", "TABLESAMPLE"), "pivots": ("PIVOT", "PIVOT"),
    "laterals": ("LATERAL VIEW", "LATERAL"), "hints": ("table hint", None),
    "version": ("time travel (VERSION AS OF)", None), "partition": ("PARTITION clause", None),
    "joins": ("parenthesized join", None),
}
_JOIN_OK_KINDS = (None, "", "INNER", "CROSS")


def bind_from_item(node: exp.Expression, index: int, text: SqlText,
                   catalog: Mapping[str, pa.Schema], plan_subquery: SubqueryPlanner) -> FromItem:
    if isinstance(node, exp.Table):
        return _bind_table(node, text, catalog)
    if isinstance(node, exp.Subquery):
        return _bind_subquery(node, index, text, plan_subquery)
    if isinstance(node, exp.Values):
        raise text.unsupported("VALUES list in FROM", node, "VALUES")
    raise text.unsupported(f"{type(node).__name__.upper()} in FROM", node)


def _bind_table(table: exp.Table, text: SqlText,
                catalog: Mapping[str, pa.Schema]) -> FromItem:
    if not isinstance(table.this, exp.Identifier):
        raise text.unsupported("table-valued function", table)
    for key, (construct, keyword) in _TABLE_MODIFIERS.items():
        if table.args.get(key):
            raise text.unsupported(construct, table, keyword)
    extra = [k for k, v in table.args.items() if v and k not in ("this", "alias", "db",
                                                                 "catalog")]
    if extra:
        raise text.unsupported(f"table modifier {extra[0]}", table)
    if table.args.get("db") or table.args.get("catalog"):
        raise text.unsupported("database-qualified table name", table,
                               detail=table.sql(dialect="spark"))
    name = table.name.lower()
    schema = catalog.get(name)
    if schema is None:
        known = ", ".join(sorted(catalog)) or "none"
        raise UnknownTableError(f"unknown table {table.name!r}{text.where(table)}; "
                                f"known tables: {known}")
    alias = (table.alias or name).lower()
    visible = _column_aliases(table, tuple(schema.names), text)
    source_of = dict(zip(visible, schema.names))

    def build(used: tuple[str, ...]) -> PlanNode:
        used = used or visible[:1]  # a scan yields at least one column (count(*) alone)
        fields = tuple(Field(f"{alias}.{c}", schema.field(source_of[c]).type) for c in used)
        return Scan(name, tuple(source_of[c] for c in used), fields)

    return FromItem(Source(alias, visible), build, table)


def _column_aliases(node: exp.Expression, columns: tuple[str, ...],
                    text: SqlText) -> tuple[str, ...]:
    """The names a FROM item's columns go by: ``t AS x(a, b)`` renames them."""
    alias = node.args.get("alias")
    renamed = tuple(c.name for c in alias.columns) if isinstance(alias, exp.TableAlias) else ()
    if not renamed:
        return columns
    if len(renamed) != len(columns) and alias.name == SCALAR_SOURCE:
        raise text.unsupported("scalar subquery of more than one column", alias,
                               detail=f"{len(columns)} columns")
    if len(renamed) != len(columns):
        raise text.unsupported("column alias list of the wrong length", alias,
                               detail=f"{len(renamed)} names for {len(columns)} columns")
    if len({c.lower() for c in renamed}) != len(renamed):
        raise text.unsupported("duplicate column alias", alias)
    return renamed


def _bind_subquery(sub: exp.Subquery, index: int, text: SqlText,
                   plan_subquery: SubqueryPlanner) -> FromItem:
    extra = [k for k, v in sub.args.items() if v and k not in ("this", "alias")]
    if extra:
        raise text.unsupported(f"{extra[0].rstrip('_').upper()} on a subquery in FROM", sub)
    inner = sub.this
    while isinstance(inner, exp.Subquery) and not [k for k, v in inner.args.items()
                                                    if v and k != "this"]:
        inner = inner.this  # redundant parentheses
    if not isinstance(inner, (exp.Select, exp.SetOperation)):
        raise text.unsupported("subquery in FROM that is not a SELECT", sub)
    # Spark names an unaliased subquery itself; this name cannot be written in SQL
    alias = (sub.alias or f"__subquery{index}").lower()
    full = plan_subquery(inner, None)
    visible = _column_aliases(sub, full.output, text)
    visible_of = dict(zip(full.output, visible))
    inner_of = dict(zip(visible, full.output))

    def build(used: tuple[str, ...]) -> PlanNode:
        required = frozenset(inner_of[c].lower() for c in used)
        # every column read: the plan made for the names is that plan (planning it again
        # for each enclosing plan doubled the work at each level of nesting)
        planned = full if required >= {o.lower() for o in full.output} \
            else plan_subquery(inner, required)
        renames = tuple(NamedExpr(f"{alias}.{visible_of[o]}", ColumnRef(o))
                        for o in planned.output)
        return Project(planned.node, renames)

    return FromItem(Source(alias, visible), build, sub)


def sort_key(ordered: exp.Ordered, column: str) -> SortKey:
    """The sort key of an ORDER BY item on output ``column``."""
    descending = bool(ordered.args.get("desc"))
    nulls_first = ordered.args.get("nulls_first")
    # sqlglot fills in Spark's default (NULLs first ascending, last descending), so an
    # explicit NULLS clause equal to the default is indistinguishable and means the same
    explicit = (None if nulls_first is None or bool(nulls_first) == (not descending)
                else bool(nulls_first))
    return SortKey(column, descending, explicit)


def set_operation_name(node: exp.SetOperation) -> str:
    """``UNION``, ``UNION ALL``, ``INTERSECT``, ... as written (MINUS is EXCEPT)."""
    name = {exp.Union: "UNION", exp.Intersect: "INTERSECT", exp.Except: "EXCEPT"}.get(
        type(node), "set operation")
    return name if node.args.get("distinct", True) else f"{name} ALL"


def check_join(join: exp.Join, text: SqlText) -> str:
    """The kind of ``join``: "inner" (also CROSS and comma), "left", "right" or "full";
    every other join is refused, naming the kind found."""
    side = (join.args.get("side") or "").upper()
    kind = (join.args.get("kind") or "").upper()
    method = (join.args.get("method") or "").upper()
    if method:
        raise text.unsupported(f"{method} JOIN", join, method)
    if side and kind not in ("", "OUTER"):
        raise text.unsupported(f"{side} {kind} JOIN", join, side)
    if not side and kind not in _JOIN_OK_KINDS:
        raise text.unsupported(f"{kind} JOIN", join, kind)
    if join.args.get("using"):
        raise text.unsupported("JOIN ... USING", join, "USING")
    extra = [k for k, v in join.args.items()
             if v and k not in ("this", "on", "side", "kind", "method", "using")]
    if extra:
        raise text.unsupported(f"join modifier {extra[0].rstrip('_')}", join)
    return side.lower() or "inner"
