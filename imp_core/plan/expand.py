"""``Expand``: one copy of each input row per grouping set (GROUP BY ROLLUP / CUBE /
GROUPING SETS), as Spark plans them.

``GROUP BY GROUPING SETS (s_0, ..., s_m)`` is planned as an ``Aggregate`` grouped on the
expanded key columns and the set's position over ``Expand``: the copy of a row for set
``s_i`` carries the row's columns unchanged (aggregate arguments read the true values),
then for every grouping key ``keys[j]`` a column ``names[j]`` holding the key's value if
the key is in ``s_i`` and NULL otherwise, then ``set_column`` = i. A group of the
aggregation is thus a group of one grouping set, and its annotation is the union of the
annotations of the input rows of that group (each copy keeps its row's annotation).
``grouping(k)`` and ``grouping_id(...)`` are functions of ``set_column`` (the planner
writes them as CASE over it). Duplicate sets get distinct positions, so their groups
are kept apart (SQL returns such a group once per occurrence of its set).

Invariants: ``keys`` are distinct input columns; ``sets`` index ``keys``; ``names`` and
``set_column`` are new names.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import pyarrow as pa

from imp_core.plan.nodes import Field, PlanNode, Schema

SET_TYPE = pa.int32()


@dataclass(frozen=True)
class Expand(PlanNode):
    input: PlanNode
    keys: tuple[str, ...]  # input columns grouped on
    sets: tuple[tuple[int, ...], ...]  # per grouping set: the indices of its keys
    names: tuple[str, ...]  # per key: its expanded column (NULL outside the key's sets)
    set_column: str  # the position of the grouping set of each copy

    def __post_init__(self) -> None:
        if len(self.names) != len(self.keys) or not self.sets:
            raise ValueError("Expand needs one name per key and at least one set")
        if any(not 0 <= i < len(self.keys) for s in self.sets for i in s):
            raise ValueError("a grouping set names a key Expand does not have")

    def children(self) -> tuple[PlanNode, ...]:
        return (self.input,)

    @cached_property
    def schema(self) -> Schema:
        by_name = {f.name: f for f in self.input.schema}
        expanded = tuple(Field(n, by_name[k].dtype) for k, n in zip(self.keys, self.names))
        return self.input.schema + expanded + (Field(self.set_column, SET_TYPE),)

    def in_every_set(self, key: int) -> bool:
        """Whether key ``key`` is in every grouping set (its column is then a plain copy)."""
        return all(key in s for s in self.sets)

    def _describe(self) -> str:
        sets = ", ".join("(" + ", ".join(self.keys[i] for i in s) + ")" for s in self.sets)
        return f"Expand GROUPING SETS ({sets}) AS [{', '.join(self.names)}], {self.set_column}"
