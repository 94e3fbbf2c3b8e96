"""The read-only check: SQL that a client may send must be one SELECT query that changes
nothing and reaches nothing outside the tables it names.

Checked on sqlglot's parsed tree (Spark dialect), never on the text: the statement must
be a SELECT or a set operation of SELECTs (CTEs and subqueries included), and no node
anywhere in it may write (INSERT, CTAS, ``SELECT ... INTO``, MERGE, ...), change the
session (SET, USE, CACHE, ADD JAR, ...), call into the JVM (``reflect``,
``java_method``) or read files by path (``parquet.`/some/dir```).

Leading ``SET spark.sql.ansi.enabled = ...`` statements are the one change of session
a query may carry (``imp_core.sql.session``); they only select the semantics the query
is planned with. The one script accepted is the one the planner accepts (TPC-H Q15 as written):
``CREATE [TEMP] VIEW v AS <select>; <select>; DROP VIEW v``. Its statements are never
run: the planner inlines the views, so the script reads what its SELECTs read; those
are checked like any query.
"""

from __future__ import annotations

from sqlglot import TokenType, exp

from imp_core.errors import NotReadOnlyError, SqlSyntaxError, UnsupportedSqlError
from imp_core.sql.normalize import split_script
from imp_core.sql.planner import _parse_statements
from imp_core.sql.session import leading_settings
from imp_core.sql.text import SqlText

# Statement kinds that never belong inside a query; sqlglot parses what it does not know
# (CALL, ADD JAR, SHOW, EXPLAIN, ...) as a generic Command.
_WRITES = (exp.DDL, exp.DML, exp.Command, exp.Set, exp.Use, exp.Cache, exp.Uncache,
           exp.LoadData, exp.Pragma, exp.Transaction, exp.Commit, exp.Rollback, exp.Into,
           exp.Describe, exp.Refresh, exp.TruncateTable, exp.Drop, exp.Alter, exp.Grant,
           exp.Revoke, exp.Analyze)
# Spark functions that invoke arbitrary Java methods.
_JVM_CALLS = frozenset({"reflect", "java_method", "try_reflect"})
# Spark's "format.`path`" table references read files outside the catalog.
_FILE_FORMATS = frozenset({"parquet", "csv", "json", "orc", "text", "avro", "binaryfile",
                           "delta"})


def check_read_only_select(sql: str) -> exp.Query:
    """The parsed query if ``sql`` is one read-only SELECT, else ``NotReadOnlyError``
    (``SqlSyntaxError`` if it does not parse).

    >>> check_read_only_select("SELECT a FROM t WHERE b > 1").sql()
    'SELECT a FROM t WHERE b > 1'
    >>> check_read_only_select("DELETE FROM t")
    Traceback (most recent call last):
    ...
    imp_core.errors.NotReadOnlyError: only read-only SELECT statements are accepted, not \
a DELETE statement at line 1, column 1
    """
    text = SqlText(sql)
    statements = _parse_statements(text)
    statements = statements[leading_settings(statements):]  # SET spark.sql.ansi.enabled
    if not statements:
        raise SqlSyntaxError("expected a SELECT statement after the SET statements", 1, 1)
    try:
        views, root = split_script(statements, text)
    except UnsupportedSqlError as error:
        if error.construct != "multiple statements":
            raise
        raise NotReadOnlyError("more than one statement", error.line, error.column) from None
    query = root
    while isinstance(query, exp.Subquery):
        query = query.this
    if not isinstance(query, (exp.Select, exp.SetOperation)):
        first = text.tokens[0] if text.tokens else None
        if not isinstance(root, _WRITES) and (first is None or first.token_type == TokenType.VAR):
            raise SqlSyntaxError("expected a SELECT statement", 1, 1)  # e.g. "SELEC a"
        raise _refuse(text, _statement(root), root, keyword=True)
    for tree in [*(view.body for view in views.values()), root]:
        _check_nodes(tree, text)
    return query


def _check_nodes(tree: exp.Expression, text: SqlText) -> None:
    for node in tree.walk():
        if isinstance(node, exp.Into):
            raise _refuse(text, "SELECT ... INTO", node)
        if isinstance(node, _WRITES):
            raise _refuse(text, _statement(node), node, keyword=True)
        if isinstance(node, exp.Func) and _function_name(node) in _JVM_CALLS:
            raise _refuse(text, f"the function {_function_name(node)}()", node)
        if isinstance(node, exp.Table) and node.db.lower() in _FILE_FORMATS:
            raise _refuse(text, f"a file read by path ({node.db}.`{node.name}`)", node)


def _function_name(node: exp.Func) -> str:
    return (node.name if isinstance(node, exp.Anonymous) else node.sql_name()).lower()


def _statement_name(node: exp.Expression) -> str:
    if isinstance(node, exp.Command):
        return str(node.this).upper()  # the statement's first word(s), e.g. "CALL"
    return type(node).__name__.upper()


def _statement(node: exp.Expression) -> str:
    name = _statement_name(node)
    return f"{'an' if name[0] in 'AEIOU' else 'a'} {name} statement"


def _refuse(text: SqlText, what: str, node: exp.Expression,
            keyword: bool = False) -> NotReadOnlyError:
    # a statement is located by its first keyword, other nodes by their own position
    line, column = text.locate(node, _statement_name(node).split()[0] if keyword else None)
    if line is None and text.tokens:  # statements often keep no position: use the first
        line, column = text.position(text.tokens[0].start)
    return NotReadOnlyError(what, line, column)
