"""Messages for SQL that does not parse, in the words of SQL rather than of sqlglot.

sqlglot describes a parse failure by its own internals ("Required keyword: 'this' missing
for <class 'sqlglot.expressions.query.Where'>", token reprs). A user needs where it is,
what is wrong there and what was found instead, so ``describe_parse_error`` turns one of
``ParseError.errors`` into (message, line, column).

Invariants: the message never holds a Python class repr, a sqlglot token repr or a
sqlglot module path; the position is 1-based and is the start of the token the parser
stopped at (``None`` when sqlglot gave none); nothing here raises on an unexpected
error shape (an unknown description is passed through, stripped of reprs).
"""

from __future__ import annotations

import difflib
import re
from typing import Any

from sqlglot.dialects.spark import Spark
from sqlglot.errors import SqlglotError
from sqlglot.tokens import TokenType

_MISSING = re.compile(r"Required keyword: '(\w+)' missing for <class '(?:[\w.]+\.)?(\w+)'>")
_CLASS_REPR = re.compile(r"<class '(?:[\w.]+\.)?(\w+)'>")
_TOKEN_REPR = re.compile(r"<Token token_type: TokenType\.(\w+), text: (.*?), line: .*?>")

# what an incomplete clause or operator lacks, by sqlglot's expression class name
_NEEDS = {
    "Where": "WHERE needs a condition",
    "Having": "HAVING needs a condition",
    "Qualify": "QUALIFY needs a condition",
    "Limit": "LIMIT needs a row count",
    "Offset": "OFFSET needs a row count",
    "Order": "ORDER BY needs an expression",
    "Group": "GROUP BY needs an expression",
    "Not": "NOT needs an operand",
    "Between": "BETWEEN needs 'low AND high'",
    "In": "IN needs a list or a subquery",
    "Exists": "EXISTS needs a subquery",
    "Cast": "CAST needs 'expression AS type'",
    "Alias": "AS needs a name",
}
# binary operators: their SQL spelling (the message says which operand is missing)
_OPERATORS = {
    "And": "AND", "Or": "OR", "Add": "+", "Sub": "-", "Mul": "*", "Div": "/", "Mod": "%",
    "EQ": "=", "NEQ": "<>", "NullSafeEQ": "<=>", "GT": ">", "GTE": ">=", "LT": "<",
    "LTE": "<=", "Like": "LIKE", "ILike": "ILIKE", "RLike": "RLIKE", "Is": "IS",
    "DPipe": "||", "BitwiseAnd": "&", "BitwiseOr": "|", "BitwiseXor": "^",
}
# clause keywords a misspelled word is compared with (short ones match too much)
_KEYWORDS = ("SELECT", "FROM", "WHERE", "GROUP", "ORDER", "HAVING", "LIMIT", "JOIN",
             "INNER", "OUTER", "LEFT", "RIGHT", "FULL", "CROSS", "UNION", "WITH",
             "DISTINCT", "BETWEEN", "EXISTS", "CASE", "WHEN", "THEN", "ELSE", "LIKE",
             "NULL", "INTERVAL", "CAST")


def describe_parse_error(sql: str, error: dict[str, Any] | None,
                         fallback: str) -> tuple[str, int | None, int | None]:
    """(message, line, column) of one entry of ``sqlglot.errors.ParseError.errors``;
    ``fallback`` (the exception's text) when the entry is missing.

    >>> describe_parse_error("SELECT a FROM t WHERE", {
    ...     "description": "Required keyword: 'this' missing for "
    ...                    "<class 'sqlglot.expressions.query.Where'>",
    ...     "line": 1, "col": 21, "highlight": "WHERE", "end_context": ""}, "")
    ('WHERE needs a condition, found the end of the text', 1, 17)
    """
    error = error or {}
    description = str(error.get("description") or fallback or "cannot parse the text")
    highlight = str(error.get("highlight") or "")
    line, column = _start(error.get("line"), error.get("col"), highlight)
    at_end = not str(error.get("end_context") or "").strip()
    found = _found(highlight, at_end)

    missing = _MISSING.fullmatch(description)
    if missing is not None:
        kind = missing.group(2)
        if kind in _NEEDS:
            message = _NEEDS[kind]
            keyword = message.split(" needs", 1)[0].split()[0]
        elif kind in _OPERATORS:
            keyword = _OPERATORS[kind]
            message = f"'{keyword}' needs an operand on its right"
        else:
            keyword = kind.upper()
            message = f"{keyword} is incomplete"
        # the parser stops on the construct's own keyword when nothing follows it
        if at_end and highlight.upper().startswith(keyword):
            found = "the end of the text"
        message = f"{message}, found {found}"
    elif description == "Expecting )":
        message = "missing ')' at the end of the text" if at_end and found != "')'" \
            else f"missing ')' before {found}"
    elif description.startswith("Invalid expression / Unexpected token"):
        message = f"unexpected {found}"
        if highlight == ")":
            message += " (no '(' to close)"
    else:
        message = _CLASS_REPR.sub(r"\1", _TOKEN_REPR.sub(_token_text, description))
    hint = _misspelled(sql, line, column)
    return (f"{message}; {hint}" if hint else message), line, column


def strip_internals(text: str) -> str:
    """``text`` without sqlglot's class and token reprs (for errors raised after parsing)."""
    return _CLASS_REPR.sub(r"\1", _TOKEN_REPR.sub(_token_text, text))


def _token_text(match: re.Match[str]) -> str:
    return "end of input" if match.group(1) == "SENTINEL" else repr(match.group(2))


def _found(highlight: str, at_end: bool) -> str:
    if not highlight:
        return "the end of the text"
    return repr(highlight) if not at_end else f"{highlight!r} at the end of the text"


def _start(line: Any, col: Any, highlight: str) -> tuple[int | None, int | None]:
    """sqlglot's (line, col) is the highlighted token's last character: its first."""
    if not isinstance(line, int) or not isinstance(col, int):
        return None, None
    if highlight and "\n" not in highlight:
        col = max(col - len(highlight) + 1, 1)
    return line, col


def _misspelled(sql: str, line: int | None, column: int | None) -> str:
    """'is X a misspelled Y?' for the last word up to the error that is no keyword but
    looks like one ('' when none does)."""
    try:
        tokens = list(Spark().tokenize(sql))
    except SqlglotError:
        return ""
    hint = ""
    for token in tokens:
        if line is not None and (token.line, token.col - len(token.text) + 1) > (line, column):
            break
        word = token.text.upper()
        if token.token_type != TokenType.VAR or len(word) < 3:
            continue
        close = difflib.get_close_matches(word, _KEYWORDS, n=1, cutoff=0.75)
        if close and close[0] != word:
            hint = f"is {token.text!r} a misspelled {close[0]}?"
    return hint
