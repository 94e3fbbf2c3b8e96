"""Resolving the sketch attribute a caller names to a table and column the query knows.

``pick`` takes an exact match first and a case-insensitive one only when it is unique, so
a resolved name is always spelled as the plan, the declared columns or the declared
domains spell it; a name that cannot be resolved raises, never guesses.
"""

from __future__ import annotations

from typing import Iterable, Mapping, Sequence

from imp_core.errors import UnknownColumnError, UnknownTableError
from imp_core.plan.nodes import PlanNode, Scan
from imp_core.safety.intervals import Domains


def pick(name: str, candidates: Iterable[str]) -> str | None:
    candidates = list(candidates)
    if name in candidates:
        return name
    folded = [c for c in candidates if c.casefold() == name.casefold()]
    return folded[0] if len(folded) == 1 else None


def resolve(root: PlanNode, table: str, column: str, domains: Domains | None,
            table_columns: Mapping[str, Sequence[str]] | None) -> tuple[str, str]:
    scans = [n for n in root.walk() if isinstance(n, Scan)]
    real_table = pick(table, {s.table for s in scans})
    if real_table is None:
        read = ", ".join(sorted({s.table for s in scans})) or "no table"
        raise UnknownTableError(f"table {table!r} is not read by the query (it reads {read})")
    table = real_table
    if table_columns is not None and pick(table, table_columns) is not None:
        known: list[str] = list(table_columns[pick(table, table_columns)])
    else:
        known = [c for s in scans if s.table == table for c in s.source_columns]
        if domains is not None and pick(table, domains) is not None:
            known += list(domains[pick(table, domains)])
    real_column = pick(column, known)
    if real_column is None:
        raise UnknownColumnError(
            f"column {column!r} is not a column of table {table!r}"
            + ("" if table_columns is not None else
               " read by the query (pass table_columns to name columns it does not read)")
        )
    return table, real_column

