"""The normalizing front end: rewrites of the parsed text before a SELECT is planned.

``normalize_statements(statements, text)`` turns the parsed statements of one query text
into the one statement the planner receives. Invariants of the result:

- a script ``CREATE [OR REPLACE] [TEMP[ORARY]] VIEW v [(cols)] AS q; ...; <query>;
  [DROP VIEW v; ...]`` became its query with each view inlined; any other text of
  several statements raised ``UnsupportedSqlError("multiple statements")`` at the
  second statement, as before normalization existed;
- no WITH clause is left: each reference to a common table expression (or view) is a
  derived table ``(<copy of its body>) AS <alias or name>(<column list>)``; each
  reference has its own copy, so it plans like a subquery written out by hand;
- constants are folded (``imp_core.sql.folding``): no INTERVAL is left, date literals
  are ``yyyy-mm-dd``, literal arithmetic is computed exactly;
- a conjunct common to every branch of an OR is taken out of it, so
  ``(k = k2 AND a) OR (k = k2 AND b)`` is ``k = k2 AND (a OR b)`` and the join key is
  found (TPC-H Q19);
- nothing else is rewritten: subqueries (EXISTS, IN, scalar) stay where they are (with
  the same rewrites inside them), joins are untouched, and every node taken from the
  text keeps its position metadata, so errors still point at the text;
- a statement that is not a query (``CREATE TABLE``, ``DELETE``) is returned as parsed,
  for the planner to refuse by name.

All rewrites are semantics-preserving under Spark SQL's three-valued logic.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Sequence

from sqlglot import exp

from imp_core.sql.folding import fold_constants
from imp_core.sql.nesting import and_, or_
from imp_core.sql.text import SqlText

_QUERIES = (exp.Query, exp.Subquery)


@dataclass(frozen=True)
class Definition:
    """What a name defined by WITH or CREATE VIEW stands for."""

    body: exp.Expression  # the query, its own references already inlined
    columns: tuple[exp.Identifier, ...]  # the output names given by ``name (a, b)``


def normalize_statements(statements: Sequence[exp.Expression],
                         text: SqlText) -> exp.Expression:
    """The one statement of ``statements`` to plan, normalized (module docstring)."""
    views, query = split_script(statements, text)
    if not isinstance(query, _QUERIES):
        return query
    for body in [v.body for v in views.values()] + [query]:
        fold_constants(body, text)
        split_subquery_between(body)
        factor_common_conjuncts(body)
    earlier: dict[str, Definition] = {}
    for name, view in views.items():  # a view sees the views created before it
        earlier[name] = Definition(_Inliner(text, earlier).run(view.body), view.columns)
    return _Inliner(text, earlier).run(query)


# -- scripts with views ----------------------------------------------------------------------


def split_script(statements: Sequence[exp.Expression],
                 text: SqlText) -> tuple[dict[str, Definition], exp.Expression]:
    """The views a script creates (in order) and its one query.

    Accepted shape: CREATE VIEW statements, one query, DROP VIEW statements of views it
    created. Anything else of several statements is refused as "multiple statements".
    """
    if len(statements) == 1:
        return {}, statements[0]
    views: dict[str, Definition] = {}
    query: exp.Expression | None = None
    for statement in statements:
        if query is None and _is_view_definition(statement):
            _check_view(statement, views, text)
            body = statement.expression.pop()  # its own tree: rewrites stop at its root
            views[_view_name(statement)] = Definition(body, _view_columns(statement))
        elif query is None and isinstance(statement, _QUERIES):
            query = statement
        elif query is not None and _drops_views(statement, views):
            continue  # dropping the script's own view changes nothing the query sees
        else:
            query = None
            break
    if query is None or not views:
        raise text.unsupported("multiple statements", statements[1])
    return views, query


def _is_view_definition(statement: exp.Expression) -> bool:
    return (isinstance(statement, exp.Create) and statement.kind == "VIEW"
            and isinstance(statement.expression, _QUERIES))


def _check_view(create: exp.Create, views: Mapping[str, Definition], text: SqlText) -> None:
    properties = create.args.get("properties")
    if properties and any(isinstance(p, exp.GlobalProperty) for p in properties.expressions):
        raise text.unsupported("CREATE GLOBAL TEMPORARY VIEW", create, "CREATE",
                               detail="its rows are read as global_temp.<name>")
    table = create.this.this if isinstance(create.this, exp.Schema) else create.this
    if table.args.get("db") or table.args.get("catalog"):
        raise text.unsupported("database-qualified view name", table)
    if _view_name(create) in views and not create.args.get("replace"):
        raise text.unsupported("CREATE VIEW of a view the script already created", table,
                               detail="use CREATE OR REPLACE VIEW")


def _view_name(create: exp.Create) -> str:
    table = create.this.this if isinstance(create.this, exp.Schema) else create.this
    return table.name.lower()


def _view_columns(create: exp.Create) -> tuple[exp.Identifier, ...]:
    if not isinstance(create.this, exp.Schema):
        return ()
    return tuple(c if isinstance(c, exp.Identifier) else exp.to_identifier(c.name)
                 for c in create.this.expressions)


def _drops_views(statement: exp.Expression, views: Mapping[str, Definition]) -> bool:
    if not (isinstance(statement, exp.Drop) and statement.kind == "VIEW"):
        return False
    tables = statement.args.get("tables") or [statement.this]
    return all(isinstance(t, exp.Table) and not t.args.get("db") and t.name.lower() in views
               for t in tables)


# -- WITH and views ----------------------------------------------------------------------------


class _Inliner:
    """Replaces references to WITH names and views by derived tables.

    Name resolution follows Spark: the innermost WITH defining a name wins over outer
    ones and over views; a CTE sees only the CTEs before it in its WITH (a non-recursive
    WITH: a reference to itself is to the table of that name); a qualified name
    (``db.t``) is always a table.
    """

    def __init__(self, text: SqlText, views: Mapping[str, Definition]):
        self.text = text
        self.views = views
        self.done: set[int] = set()  # ids of CTE bodies already inlined

    def run(self, root: exp.Expression) -> exp.Expression:
        for with_ in root.find_all(exp.With):
            self._check_with(with_)
        self._inline_within(root)
        for with_ in list(root.find_all(exp.With)):
            with_.pop()
        return root

    def _check_with(self, with_: exp.With) -> None:
        if with_.args.get("recursive"):
            raise self.text.unsupported("recursive WITH", with_, "WITH")
        seen: set[str] = set()
        for cte in with_.expressions:
            if cte.alias.lower() in seen:
                raise self.text.unsupported("duplicate WITH name", cte.args.get("alias"),
                                            detail=cte.alias)
            seen.add(cte.alias.lower())

    def _inline_within(self, tree: exp.Expression) -> None:
        for table in list(tree.find_all(exp.Table)):
            definition = self._resolve(table)
            if definition is not None:
                table.replace(self._derived_table(table, definition))

    def _resolve(self, table: exp.Table) -> Definition | None:
        """The definition ``table`` refers to, its own references already inlined."""
        if table.args.get("db") or table.args.get("catalog") or table.parent is None:
            return None
        name = table.name.lower()
        cte_passed: exp.CTE | None = None
        child: exp.Expression = table
        for node in _ancestors(table):
            if isinstance(node, exp.CTE):
                cte_passed = node
            with_ = node.args.get("with_") if isinstance(node, exp.Query) else None
            if isinstance(with_, exp.With):
                ctes = list(with_.expressions)
                if child is with_ and cte_passed is not None:  # inside a CTE's body
                    ctes = ctes[:next(i for i, c in enumerate(ctes) if c is cte_passed)]
                for cte in ctes:
                    if cte.alias.lower() == name:
                        return self._definition(cte)
            child = node
        return self.views.get(name)

    def _definition(self, cte: exp.CTE) -> Definition:
        if id(cte.this) not in self.done:  # inline its own references before copying it
            self.done.add(id(cte.this))
            self._inline_within(cte.this)
        alias = cte.args.get("alias")
        columns = tuple(alias.columns) if isinstance(alias, exp.TableAlias) else ()
        return Definition(cte.this, columns)

    def _derived_table(self, table: exp.Table, definition: Definition) -> exp.Subquery:
        extra = [k for k, v in table.args.items()
                 if v and k not in ("this", "alias", "db", "catalog")]
        if extra:
            raise self.text.unsupported(f"{extra[0].rstrip('_').upper()} on a WITH or view "
                                        "reference", table)
        alias = table.args.get("alias")
        name = alias.this if isinstance(alias, exp.TableAlias) and alias.this else table.this
        renamed = alias.columns if isinstance(alias, exp.TableAlias) and alias.columns \
            else definition.columns
        body = definition.body.copy()
        for with_ in list(body.find_all(exp.With)):
            with_.pop()  # its references are inlined already
        return exp.Subquery(this=body, alias=exp.TableAlias(
            this=name.copy(), columns=[c.copy() for c in renamed]))


def split_subquery_between(root: exp.Expression) -> None:
    """``x BETWEEN (SELECT ..) AND (SELECT ..)`` as ``x >= (SELECT ..) AND x <= (SELECT
    ..)`` (TPC-DS q54), in place: each bound is then a comparison with a scalar subquery.
    The operand is repeated, so only a deterministic one is split."""
    for node in list(root.find_all(exp.Between)):
        low, high = node.args.get("low"), node.args.get("high")
        if node.args.get("symmetric") or not any(
                b is not None and b.find(exp.Subquery, exp.Select) for b in (low, high)):
            continue
        if node.this.find(exp.Rand, exp.Subquery, exp.Select):
            continue
        node.replace(exp.Paren(this=exp.and_(
            exp.GTE(this=node.this.copy(), expression=low.copy()),
            exp.LTE(this=node.this.copy(), expression=high.copy()))))


def _ancestors(node: exp.Expression):
    parent = node.parent
    while parent is not None:
        yield parent
        parent = parent.parent


# -- OR: common conjuncts ------------------------------------------------------------------------


def factor_common_conjuncts(root: exp.Expression) -> None:
    """Take a conjunct common to all branches out of each OR, in place.

    ``(A AND B) OR (A AND C)`` becomes ``A AND (B OR C)`` and ``A OR (A AND B)`` becomes
    ``A`` (both hold in three-valued logic). Conjuncts are compared structurally, with
    ``x = y`` equal to ``y = x``. sqlglot's ``simplify`` does neither, and its
    ``normalize`` (CNF) would multiply out Q19's OR into hundreds of clauses.
    """
    for node in list(root.find_all(exp.Or)):
        if _or_parent(node) is not None or not _within(node, root):
            continue  # replaced already, or not the top of its OR chain
        branches = [_conjuncts(b) for b in _flatten(node, exp.Or)]
        common = [c for c in branches[0] if all(_contains(b, c) for b in branches[1:])]
        if not common:
            continue
        rests = [[c for c in b if not _contains(common, c)] for b in branches]
        parts = list(common)
        if all(rests):  # else a branch is only the common part: the OR is TRUE there
            parts.append(or_([and_(rest, copy=False) for rest in rests], copy=False))
        factored = and_(parts, copy=False)
        node.replace(factored if isinstance(node.parent, (exp.Paren, exp.Where, exp.Having))
                     else exp.Paren(this=factored))


def _within(node: exp.Expression, root: exp.Expression) -> bool:
    return node is root or any(a is root for a in _ancestors(node))


def _or_parent(node: exp.Expression) -> exp.Expression | None:
    parent = node.parent
    while isinstance(parent, exp.Paren):
        parent = parent.parent
    return parent if isinstance(parent, exp.Or) else None


def _flatten(node: exp.Expression, kind: type[exp.Connector]) -> list[exp.Expression]:
    """The operands of a chain of ``kind`` (AND or OR), through parentheses."""
    out: list[exp.Expression] = []
    stack = [node]
    while stack:  # iterative: long chains nest deeply
        current = stack.pop()
        while isinstance(current, exp.Paren):
            current = current.this
        if isinstance(current, kind):
            stack += [current.expression, current.this]
        else:
            out.append(current)
    return out


def _conjuncts(branch: exp.Expression) -> list[exp.Expression]:
    unique: list[exp.Expression] = []
    for conjunct in _flatten(branch, exp.And):
        if not _contains(unique, conjunct):
            unique.append(conjunct)
    return unique


def _contains(conjuncts: Sequence[exp.Expression], wanted: exp.Expression) -> bool:
    return any(_same(c, wanted) for c in conjuncts)


def _same(a: exp.Expression, b: exp.Expression) -> bool:
    if a == b:
        return True
    symmetric = (exp.EQ, exp.NEQ, exp.NullSafeEQ)
    return (isinstance(a, symmetric) and type(a) is type(b)
            and a.this == b.expression and a.expression == b.this)
