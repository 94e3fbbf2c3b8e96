"""Malformed SQL is refused in SQL's words: where (line, column of the token the parser
stopped on), what is wrong and what was found, never sqlglot's internals (issue 28)."""

from __future__ import annotations

import pyarrow as pa
import pytest

from imp_core.errors import SqlSyntaxError
from imp_core.sql.planner import plan_sql
from imp_core.sql.readonly import check_read_only_select
from imp_core.sql.syntax_errors import describe_parse_error, strip_internals

CATALOG = {"t": pa.schema([("a", pa.int64()), ("b", pa.int64())])}
INTERNALS = ("<class", "sqlglot", "Required keyword", "TokenType", "Invalid expression",
             "'this'", "'expression'")

CASES = [
    # (SQL, message part, (line, column))
    ("SELECT a FROM t WHERE", "WHERE needs a condition, found the end of the text", (1, 17)),
    ("SELECT a FROM t WHERE GROUP BY a", "WHERE needs a condition, found 'GROUP BY'", (1, 23)),
    ("SELECT a FROM t\nWHERE\nGROUP BY a", "WHERE needs a condition", (3, 1)),
    ("SELECT a FROM t HAVING", "HAVING needs a condition", (1, 17)),
    ("SELECT a FROM t WHERE a >", "'>' needs an operand on its right, found the end", (1, 25)),
    ("SELECT a FROM t WHERE a = 1 AND", "'AND' needs an operand", (1, 29)),
    ("SELECT a FROM t ORDER BY", "ORDER BY needs an expression", (1, 17)),
    ("SELECT (a FROM t", "missing ')' before 'FROM'", (1, 11)),
    ("SELECT a FROM t WHERE a IN (1, 2", "missing ')' at the end of the text", (1, 32)),
    ("SELECT a FROM t)", "unexpected ')'", (1, 16)),
    ("SELECT a FROM t garbage garbage", "unexpected 'garbage'", (1, 25)),
    ("SELEC a FROM t", "is 'SELEC' a misspelled SELECT?", (1, 9)),
    ("SELECT a FORM t", "is 'FORM' a misspelled FROM?", (1, 15)),
    ("SELECT a FROM t GRUOP BY a", "is 'GRUOP' a misspelled GROUP?", (1, 23)),
]


@pytest.mark.parametrize("sql,message,position", CASES, ids=[c[0] for c in CASES])
def test_malformed_sql_says_where_and_what(sql, message, position):
    with pytest.raises(SqlSyntaxError) as info:
        plan_sql(sql, CATALOG)
    text = str(info.value)
    assert message in text, text
    assert (info.value.line, info.value.column) == position, text
    assert text.startswith(f"malformed SQL (line {position[0]}, column {position[1]}): ")
    assert not any(word in text for word in INTERNALS), text


@pytest.mark.parametrize("sql", [c[0] for c in CASES])
def test_the_read_only_check_gives_the_same_message(sql):
    with pytest.raises(SqlSyntaxError) as planned:
        plan_sql(sql, CATALOG)
    with pytest.raises(SqlSyntaxError) as checked:
        check_read_only_select(sql)
    assert str(checked.value) == str(planned.value)


def test_an_unknown_error_shape_is_passed_through_without_reprs():
    detail = {"description": "Expected foo but got <Token token_type: TokenType.SENTINEL, "
              "text: , line: 1, col: 3, start: 2, end: 2, comments: []> in "
              "<class 'sqlglot.expressions.core.Foo'>", "line": 1, "col": 3}
    message, line, column = describe_parse_error("abc", detail, "")
    assert message == "Expected foo but got end of input in Foo"
    assert (line, column) == (1, 3)
    assert describe_parse_error("x", None, "boom") == ("boom", None, None)
    assert strip_internals("bad <class 'a.b.Where'>") == "bad Where"
