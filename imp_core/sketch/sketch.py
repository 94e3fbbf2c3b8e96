"""Provenance sketches: sets of fragments, as roaring bitmaps of global fragment ids.

Invariants: ids lie in ``[0, partitions.size)``; a sketch never changes after creation
(maintenance creates a new one), so versions can be shared across threads.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass
from typing import Any

from pyroaring import BitMap

from imp_core.errors import SnapshotError
from imp_core.plan.literal import sql_literal
from imp_core.sketch.partition import PartitionSet, RangePartition


@dataclass(frozen=True)
class Range:
    """[lo, hi) of consecutive fragments merged; None is an open end."""

    lo: Any
    hi: Any
    includes_null: bool

    def predicate(self, column: str) -> str:
        parts = []
        if self.lo is not None:
            parts.append(f"{column} >= {sql_literal(self.lo)}")
        if self.hi is not None:
            parts.append(f"{column} < {sql_literal(self.hi)}")
        cond = " AND ".join(parts) if parts else "TRUE"
        if self.includes_null and self.lo is None:
            cond = f"({cond} OR {column} IS NULL)" if parts else "TRUE"
        return cond


@dataclass(frozen=True)
class Sketch:
    partitions: PartitionSet
    fragments: BitMap  # global ids

    def __post_init__(self) -> None:
        object.__setattr__(self, "fragments", BitMap(self.fragments))
        if len(self.fragments) and self.fragments.max() >= self.partitions.size:
            raise ValueError("sketch holds a fragment id outside its partitions")

    def __eq__(self, other: object) -> bool:
        return (isinstance(other, Sketch) and self.partitions == other.partitions
                and self.fragments == other.fragments)

    def __hash__(self) -> int:
        return hash(tuple(self.fragments))

    def table_fragments(self, table: str) -> list[int]:
        """Local fragment numbers of ``table``'s partition in the sketch."""
        found = self.partitions.for_table(table)
        if found is None:
            return []
        part, off = found
        return [g - off for g in self.fragments if off <= g < off + part.size]

    def ranges(self, table: str) -> list[Range]:
        """The sketch's ranges on ``table``, adjacent fragments merged."""
        found = self.partitions.for_table(table)
        if found is None:
            return []
        part, _ = found
        frags = self.table_fragments(table)
        out: list[Range] = []
        start = prev = None
        for f in frags + [None]:
            if f is not None and prev is not None and f == prev + 1:
                prev = f
                continue
            if start is not None:
                lo, _ = part.range_of(start)
                _, hi = part.range_of(prev)
                out.append(Range(lo, hi, includes_null=start == 0))
            start = prev = f
        return out

    def coarsened(self, max_ranges: int) -> Sketch:
        """A superset of this sketch with at most ``max_ranges`` ranges per table.

        The smallest gaps (in fragments) between ranges are filled first. Any superset of
        a safe sketch is safe, so the coarse sketch gives the same query result; it trades
        a few more rows read for a much shorter filter predicate.
        """
        if max_ranges < 1:
            raise ValueError("max_ranges must be at least 1")
        out = BitMap(self.fragments)
        for part, off in zip(self.partitions.partitions, self.partitions.offsets):
            frags = self.table_fragments(part.table)
            runs: list[list[int]] = []
            for f in frags:
                if runs and f == runs[-1][1] + 1:
                    runs[-1][1] = f
                else:
                    runs.append([f, f])
            excess = len(runs) - max_ranges
            if excess <= 0:
                continue
            gaps = sorted(range(len(runs) - 1),
                          key=lambda i: (runs[i + 1][0] - runs[i][1], i))[:excess]
            for i in gaps:
                out.update(range(off + runs[i][1] + 1, off + runs[i + 1][0]))
        return Sketch(self.partitions, out)

    def predicate(self, table: str, column: str | None = None) -> str:
        """A SQL condition selecting exactly the sketch's data of ``table``."""
        found = self.partitions.for_table(table)
        if found is None:
            return "TRUE"
        part: RangePartition = found[0]
        col = column or part.column
        ranges = self.ranges(table)
        if not ranges:
            return "FALSE"
        conds = [r.predicate(col) for r in ranges]
        return conds[0] if len(conds) == 1 else "(" + " OR ".join(f"({c})" for c in conds) + ")"

    def serialize(self) -> bytes:
        """Portable form: the standard roaring bitmap serialization of the global ids."""
        return self.fragments.serialize()

    @staticmethod
    def deserialize(partitions: PartitionSet, data: bytes) -> Sketch:
        try:
            bm = BitMap.deserialize(data)
        except Exception as exc:  # pyroaring raises ValueError on damaged input
            raise SnapshotError(f"damaged sketch bytes: {exc}") from None
        return Sketch(partitions, bm)

    def to_json(self) -> dict[str, Any]:
        return {
            "fragments": {p.table: self.table_fragments(p.table)
                          for p in self.partitions.partitions},
            "predicates": {p.table: self.predicate(p.table) for p in self.partitions.partitions},
            "roaring_base64": base64.b64encode(self.serialize()).decode(),
        }

    def __repr__(self) -> str:
        parts = ", ".join(f"{p.table}.{p.column}: {self.table_fragments(p.table)}"
                          for p in self.partitions.partitions)
        return f"Sketch({parts})"
