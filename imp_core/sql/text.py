"""Positions in the SQL text, for error messages.

Invariants: positions are 1-based (line, column) of the first character of a construct
in the text exactly as given to ``plan_sql``; a construct that cannot be located gives
``(None, None)`` rather than a guess or an exception.
"""

from __future__ import annotations

from functools import cached_property

from sqlglot import exp
from sqlglot.dialects.spark import Spark
from sqlglot.errors import SqlglotError
from sqlglot.tokens import Token

from imp_core.errors import UnsupportedSqlError

Position = tuple[int | None, int | None]


class SqlText:
    """The SQL text of one query, with lookups from syntax nodes back to positions."""

    def __init__(self, sql: str):
        self.sql = sql

    @cached_property
    def tokens(self) -> list[Token]:
        try:
            return list(Spark().tokenize(self.sql))
        except SqlglotError:  # only positions are lost; the caller still reports the error
            return []

    def position(self, offset: int) -> tuple[int, int]:
        line = self.sql.count("\n", 0, offset) + 1
        return line, offset - (self.sql.rfind("\n", 0, offset) + 1) + 1

    def start_of(self, node: exp.Expression | None) -> int | None:
        """Offset of the leftmost token that sqlglot recorded anywhere in ``node``."""
        if node is None:
            return None
        starts = [n.meta["start"] for n in node.walk() if "start" in n.meta]
        return min(starts) if starts else None

    def keyword_offset(self, keyword: str, before: int | None = None) -> int | None:
        """Offset of ``keyword``: the last one before ``before``, else the first one."""
        # some keywords are one token with the next word ("SORT BY", "GROUPING SETS")
        hits = [t.start for t in self.tokens if t.text.upper().split(" ")[0] == keyword]
        if before is not None:
            earlier = [h for h in hits if h < before]
            if earlier:
                return earlier[-1]
        return hits[0] if hits else None

    def locate(self, node: exp.Expression | None = None, keyword: str | None = None) -> Position:
        """Where ``node`` is, preferring the ``keyword`` that introduces it."""
        start = self.start_of(node)
        if keyword is not None:
            offset = self.keyword_offset(keyword, before=start)
            if offset is not None:
                return self.position(offset)
        if start is not None:
            return self.position(start)
        return None, None

    def unsupported(self, construct: str, node: exp.Expression | None = None,
                    keyword: str | None = None, detail: str = "") -> UnsupportedSqlError:
        line, column = self.locate(node, keyword)
        return UnsupportedSqlError(construct, line, column, detail)

    def where(self, node: exp.Expression | None) -> str:
        """`` at line L, column C`` for messages of other errors ('' when unknown)."""
        line, column = self.locate(node)
        return "" if line is None else f" at line {line}, column {column}"
