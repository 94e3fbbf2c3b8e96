"""State layouts: the named Arrow tables an operator's (and a pipeline's) state consists of.

Invariants: each stateful operator declares its tables once, as ``StateTable`` class
attributes collected in its class-level ``STATE`` layout; its ``snapshot`` returns exactly
the tables its ``state_schemas()`` names, every builder of its state (the Spark bootstrap,
resharding) goes through its public ``state_from_*`` methods, and its ``restore`` takes any
of these back. A pipeline's flat state names table ``name`` of owner ``owner`` (an operator
id, or the final merge) ``"<owner>/<name>"``; ``state_key`` and ``group_state`` are the only
code that spells or parses that form.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

import pyarrow as pa

StateTables = dict[str, pa.Table]


@dataclass(frozen=True)
class StateTable:
    """One kind of state table of an operator.

    ``name`` is the table's name, or a template holding ``{i}`` for one table per
    aggregate ``i`` (e.g. ``"minmax{i}"``); ``doc`` says what its rows hold.
    """

    name: str
    doc: str

    @property
    def per_aggregate(self) -> bool:
        return "{i}" in self.name

    def of(self, i: int) -> str:
        """The name of aggregate ``i``'s table.

        >>> StateTable("minmax{i}", "").of(2)
        'minmax2'
        """
        if not self.per_aggregate:
            raise ValueError(f"state table {self.name!r} is not one per aggregate")
        return self.name.format(i=i)


@dataclass(frozen=True)
class StateLayout:
    """The kinds of tables an operator's state is made of, in snapshot order."""

    tables: tuple[StateTable, ...] = ()

    def names(self) -> tuple[str, ...]:
        return tuple(t.name for t in self.tables)

    def describe(self) -> str:
        return "\n".join(f"{t.name}: {t.doc}" for t in self.tables)


def state_key(owner: str, name: str) -> str:
    """The flat name of ``owner``'s state table ``name``.

    >>> state_key("0.1", "groups")
    '0.1/groups'
    """
    return f"{owner}/{name}"


def group_state(tables: Mapping[str, pa.Table]) -> dict[str, StateTables]:
    """Flat state tables grouped by owner: ``{owner: {name: table}}`` (a flat name without
    an owner lands under ``""``).

    >>> t = pa.table({"x": [1]})
    >>> sorted(group_state({"0/groups": t, "merge/counts": t, "result": t}))
    ['', '0', 'merge']
    """
    grouped: dict[str, StateTables] = {}
    for key, t in tables.items():
        owner, _, name = key.rpartition("/")
        grouped.setdefault(owner, {})[name] = t
    return grouped


def flat_state(grouped: Mapping[str, Mapping[str, pa.Table]]) -> StateTables:
    """Inverse of ``group_state`` for owned tables."""
    return {state_key(owner, name): t for owner, tables in grouped.items()
            for name, t in tables.items()}
