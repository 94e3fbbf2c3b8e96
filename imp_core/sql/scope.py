"""Name resolution: which FROM item a column reference of one SELECT denotes.

Invariants: a resolved column is the field name ``"{alias}.{column}"`` of exactly one
FROM item (aliases are lower-case and unique within a SELECT; column names keep the
spelling of the catalog or the subquery output); identifiers match case-insensitively,
as in Spark; every resolution is recorded in ``used`` (the input to column pruning).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from sqlglot import exp

from imp_core.errors import UnknownColumnError
from imp_core.sql.text import SqlText


@dataclass(frozen=True)
class Source:
    """One FROM item: a table or a subquery, seen under ``alias``."""

    alias: str
    columns: tuple[str, ...]
    _lookup: dict[str, str] = field(init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        lookup: dict[str, str] = {}
        for column in self.columns:
            lookup.setdefault(column.lower(), column)
        object.__setattr__(self, "_lookup", lookup)

    def field(self, column: str) -> str:
        return f"{self.alias}.{column}"

    def find(self, name: str) -> str | None:
        """The column spelled ``name`` in any case, or None."""
        return self._lookup.get(name.lower())


class Scope:
    """The FROM items visible to an expression, in FROM order."""

    def __init__(self, sources: list[Source], text: SqlText,
                 used: dict[str, int] | None = None):
        self.sources = sources
        self.text = text
        # field name -> index of its source; insertion-ordered, shared by prefixes
        self.used: dict[str, int] = {} if used is None else used

    def prefix(self, count: int) -> Scope:
        """The first ``count`` items only (what a JOIN ... ON condition can see)."""
        return Scope(self.sources[:count], self.text, self.used)

    def aliases(self) -> list[str]:
        return [s.alias for s in self.sources]

    def source_of(self, field_name: str) -> int:
        return self.used[field_name]

    def resolve(self, column: exp.Column) -> str | None:
        """The field ``column`` denotes; None if unqualified and found nowhere."""
        if column.args.get("db") or column.args.get("catalog"):
            raise UnknownColumnError(f"unknown column {column.sql(dialect='spark')!r}"
                                     f"{self.text.where(column)}: use alias.column")
        name, qualifier = column.name, column.table
        if qualifier:
            return self._resolve_qualified(column, qualifier, name)
        hits = [(i, s) for i, s in enumerate(self.sources) if s.find(name) is not None]
        if not hits:
            return None
        if len(hits) > 1:
            owners = ", ".join(s.alias for _, s in hits)
            raise UnknownColumnError(f"ambiguous column {name!r}{self.text.where(column)}: "
                                     f"it is in {owners}; qualify it")
        index, source = hits[0]
        return self._use(index, source, source.find(name) or name)

    def _resolve_qualified(self, column: exp.Column, qualifier: str, name: str) -> str:
        for index, source in enumerate(self.sources):
            if source.alias == qualifier.lower():
                actual = source.find(name)
                if actual is None:
                    raise UnknownColumnError(
                        f"unknown column {qualifier}.{name}{self.text.where(column)}; "
                        f"{source.alias} has {', '.join(source.columns)}")
                return self._use(index, source, actual)
        raise UnknownColumnError(
            f"unknown table or alias {qualifier!r} in column {qualifier}.{name}"
            f"{self.text.where(column)}; in scope: {', '.join(self.aliases()) or 'none'}")

    def _use(self, index: int, source: Source, column: str) -> str:
        name = source.field(column)
        self.used.setdefault(name, index)
        return name

    def unknown(self, column: exp.Column) -> UnknownColumnError:
        return UnknownColumnError(f"unknown column {column.name!r}{self.text.where(column)}; "
                                  f"tables in scope: {', '.join(self.aliases()) or 'none'}")
