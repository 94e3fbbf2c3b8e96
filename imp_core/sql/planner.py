"""SQL front end: Spark SQL text to an immutable ``QueryPlan`` (IMP paper, Fig. 4).

Invariants of every plan returned by ``plan_sql``:

- it is a pure function of (SQL text, catalog): planning twice gives equal plans and
  equal fingerprints;
- every node's schema has unique field names and type-checks (its ``schema`` and every
  predicate's type are computed here, so errors surface now, not at run time);
- a table is read by a ``Scan`` with fields ``"{alias}.{column}"`` holding only the
  columns the query uses; selections sit directly above the ``Scan`` they filter;
- SQL outside the supported subset raises ``UnsupportedSqlError`` naming the construct
  and its line/column; text that does not parse raises ``SqlSyntaxError``; sqlglot's
  own exceptions never escape.

Before planning, the parsed text is normalized (``imp_core.sql.normalize``): the views
of a ``CREATE VIEW ...; SELECT ...; DROP VIEW ...`` script and WITH clauses inlined,
constants (dates, intervals, literal arithmetic) folded, conjuncts common to all
branches of an OR factored out. See ``imp_core.sql.select_block`` for the shape of the
plan of one SELECT, ``imp_core.sql.set_operations`` for UNION, INTERSECT and EXCEPT.
"""

from __future__ import annotations

import re
from typing import Mapping

import pyarrow as pa
import sqlglot
from sqlglot import exp
from sqlglot.errors import ParseError, SqlglotError, TokenError

from imp_core.errors import NestingLimitError, SqlSyntaxError, UnsupportedSqlError
from imp_core.plan.nodes import PlanNode, QueryPlan
from imp_core.plan.strict import strict_node
from imp_core.sql.nesting import (
    MAX_EXPRESSION_DEPTH_ENV,
    check_depth,
    max_expression_depth,
    nesting_depth,
    rebalance,
)
from imp_core.sql.normalize import normalize_statements
from imp_core.sql.prune import prune_join_inputs
from imp_core.sql.select_block import TYPE_ERRORS, SelectPlanner
from imp_core.sql.session import DEFAULT_SESSION, Session, split_settings
from imp_core.sql.set_operations import plan_query, unwrap
from imp_core.sql.syntax_errors import describe_parse_error, strip_internals
from imp_core.sql.text import SqlText

_SKETCH_LINE = re.compile(r"--\s*sketch\s*:(.*)$", re.IGNORECASE)


def plan_sql(sql: str, catalog: Mapping[str, pa.Schema],
             session: Session = DEFAULT_SESSION) -> QueryPlan:
    """Plan one SELECT statement over ``catalog`` (lower-case table name -> schema), in
    ``session`` as the text's leading ``SET`` statements change it
    (``imp_core.sql.session``; with ANSI mode on, ``imp_core.plan.ansi.strict_node``).

    >>> schema = pa.schema([("a", pa.int64()), ("b", pa.int64())])
    >>> plan = plan_sql("SELECT a, sum(b) AS s FROM t WHERE b > 1 GROUP BY a", {"t": schema})
    >>> print(plan.root.explain())
    Project `t.a` AS a, `_agg0` AS s
      Aggregate BY [t.a] sum(t.b) AS _agg0
        Project `t.a` AS t.a, `t.b` AS t.b
          Select (`t.b` > 1)
            Scan t [t.a, t.b]
    """
    text = SqlText(sql)
    session, statements = split_settings(_parse_statements(text), session)
    if not statements:
        raise SqlSyntaxError("expected a SELECT statement after the SET statements")
    tables = {name.lower(): schema for name, schema in catalog.items()}
    try:
        query = _only_query(normalize_statements(statements, text), text)
        check_depth(query, text)  # inlined WITH bodies and views nest deeper than the text
        planned = plan_query(query, text,
                             lambda s, nested: SelectPlanner(s, text, tables, nested).plan(),
                             False)
    except SqlglotError as error:  # sqlglot's own failures must not escape raw
        raise SqlSyntaxError(strip_internals(str(error))) from None
    except RecursionError:  # a net: check_depth's limit leaves the planner room
        raise _too_deep_to_plan(text) from None
    root = prune_join_inputs(planned.node)
    _check_types(root)
    if session.ansi:
        root = strict_node(root)
    return QueryPlan(sql=sql, root=root, order_by=planned.order_by,
                     output_names=planned.shown)


def _too_deep_to_plan(text: SqlText) -> NestingLimitError:
    """The error for a query that ran the planner out of stack although it passed
    ``check_depth`` (inlined WITH bodies nest deeper than the text)."""
    depth = max(nesting_depth(s)[0] for s in _parse_statements(text))
    return NestingLimitError(depth, max_expression_depth(), MAX_EXPRESSION_DEPTH_ENV,
                             stage="planner")


def parse_sketch_header(sql: str) -> list[tuple[str, str]]:
    """The ``(table, column)`` pairs of leading ``-- sketch: t.c[, t2.c2]`` comments.

    Identifiers are returned lower-case (Spark identifiers are case-insensitive).

    >>> parse_sketch_header("-- sketch: lineitem.l_orderkey\\nSELECT 1")
    [('lineitem', 'l_orderkey')]
    """
    pairs: list[tuple[str, str]] = []
    for number, line in enumerate(sql.splitlines(), start=1):
        stripped = line.strip()
        if not stripped:
            continue
        if not stripped.startswith("--"):
            break  # the header ends at the first line of SQL
        match = _SKETCH_LINE.match(stripped)
        if match is None:
            continue
        for entry in match.group(1).split(","):
            pair = _sketch_entry(entry.strip(), number, line)
            if pair not in pairs:
                pairs.append(pair)
    return pairs


def _sketch_entry(entry: str, number: int, line: str) -> tuple[str, str]:
    parts = entry.split(".")
    if len(parts) != 2 or not all(p.strip() for p in parts):
        column = line.find(entry) + 1 if entry else len(line)
        raise SqlSyntaxError(f"sketch header entry {entry!r} is not table.column",
                             number, column)
    return parts[0].strip().lower(), parts[1].strip().lower()


# -- parsing -------------------------------------------------------------------------------


def _parse(text: SqlText) -> exp.Expression:
    """The one statement of ``text`` (several: ``UnsupportedSqlError``)."""
    statements = _parse_statements(text)
    if len(statements) > 1:
        raise text.unsupported("multiple statements", statements[1])
    return statements[0]


def _parse_statements(text: SqlText) -> list[exp.Expression]:
    """The statements of ``text``, at least one (``SqlSyntaxError`` if it does not parse)."""
    try:
        statements = [s for s in sqlglot.parse(text.sql, read="spark") if s is not None]
    except ParseError as error:  # in SQL's words, at the token the parser stopped on
        message, line, column = describe_parse_error(
            text.sql, error.errors[0] if error.errors else None, str(error))
        raise SqlSyntaxError(message, line, column) from None
    except TokenError as error:
        line, column = _token_error_position(text, error)
        raise SqlSyntaxError("cannot split the text into tokens (unterminated quote?)",
                             line, column) from None
    except RecursionError:
        raise _too_deep_to_parse(text) from None
    except Exception as error:  # noqa: BLE001 - never let a parser failure escape raw
        raise SqlSyntaxError(str(error) or type(error).__name__) from None
    if not statements:
        raise SqlSyntaxError("empty query: expected a SELECT statement", 1, 1)
    # before anything else walks the trees: AND / OR chains balanced, the rest bounded
    statements = [rebalance(s) for s in statements]
    for statement in statements:
        check_depth(statement, text)
    return statements


def _too_deep_to_parse(text: SqlText) -> SqlSyntaxError:
    """The error for text sqlglot's recursive parser cannot parse: it recurses about 20
    frames per level of parentheses, function calls or CASE, and stops near 45 levels
    (the position is the deepest '(' when parentheses are what nests)."""
    depth, deepest, offset = 0, 0, None
    for token in text.tokens:
        if token.token_type == sqlglot.TokenType.L_PAREN:
            depth += 1
            if depth > deepest:
                deepest, offset = depth, token.start
        elif token.token_type == sqlglot.TokenType.R_PAREN:
            depth -= 1
    limit = "the parser takes about 40 levels of parentheses, function calls or CASE"
    if offset is None or deepest < 16:
        return SqlSyntaxError(f"the query is nested too deeply to parse ({limit})")
    line, column = text.position(offset)
    return SqlSyntaxError(f"the query is nested too deeply to parse: parentheses {deepest} "
                          f"deep here ({limit})", line, column)


def _token_error_position(text: SqlText, error: TokenError) -> tuple[int | None, int | None]:
    """Where tokenizing failed: the first unterminated quote, else the end of the context."""
    offset = _unterminated_quote(text.sql)
    if offset is None:
        offset = error.end if error.end is not None else error.start
    return (None, None) if offset is None else text.position(min(offset, len(text.sql)))


def _unterminated_quote(sql: str) -> int | None:
    i = 0
    while i < len(sql):
        char = sql[i]
        if sql.startswith("--", i):
            end = sql.find("\n", i)
            i = len(sql) if end < 0 else end + 1
        elif char in "'\"`":
            end = i + 1
            while end < len(sql) and sql[end] != char:
                end += 2 if sql[end] == "\\" else 1
            if end >= len(sql):
                return i
            i = end + 1
        else:
            i += 1
    return None


def _only_query(statement: exp.Expression, text: SqlText) -> exp.Expression:
    """The SELECT or set operation ``statement`` is (else the error naming what it is)."""
    query = unwrap(statement)
    if isinstance(query, (exp.Select, exp.SetOperation)):
        return query
    first = text.tokens[0] if text.tokens else None
    if first is not None and first.token_type != sqlglot.TokenType.VAR:
        line, column = text.position(first.start)
        raise UnsupportedSqlError(f"{first.text.upper()} statement", line, column,
                                  "only SELECT queries are supported")
    raise SqlSyntaxError("expected a SELECT statement", 1, 1)


# -- type checking ---------------------------------------------------------------------


def _check_types(root: PlanNode) -> None:
    """Infer the root's schema (each SELECT block has checked its own expressions; this
    is the net under the nodes around them)."""
    try:
        root.schema  # noqa: B018 - computes (and caches) every Project/Aggregate type
    except TYPE_ERRORS as error:
        raise UnsupportedSqlError("operation on these types", detail=str(error)) from None
