"""What the Python client returns for sketches, query runs and tables: frozen records
with plain Python values (query info, checkpoints and update results reuse the
coordinator's records from ``imp_actors.types``).

Invariants: a ``SketchRecord`` is one immutable sketch version as the server sent it;
its ``fragments`` are global ids in ``[0, total_fragments)`` and each table's local
``fragments`` are the global ones of its partition minus ``first_fragment``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

import pyarrow as pa

from imp_core.sketch.partition import PartitionSet, RangePartition
from imp_core.sketch.sketch import Range, Sketch


@dataclass(frozen=True)
class TableSketchRecord:
    table: str
    column: str
    type: pa.DataType
    first_fragment: int
    fragment_count: int
    fragments: tuple[int, ...]       # local fragment numbers in the sketch
    ranges: tuple[Range, ...]        # merged ranges with typed bounds (None: unbounded)
    predicate: str
    bounds: tuple[Any, ...] | None   # split points, when the partitions were asked for

    def partition(self) -> RangePartition:
        if self.bounds is None:
            raise ValueError(f"the sketch of {self.table} was fetched without its partition "
                             "bounds (ask with include_partitions=True)")
        return RangePartition(self.table, self.column, self.type, self.bounds)


@dataclass(frozen=True)
class SketchRecord:
    query: str
    seq: int
    versions: Mapping[str, int]
    tables: tuple[TableSketchRecord, ...]
    where: str
    fragments: tuple[int, ...]       # global fragment ids
    total_fragments: int
    created_at: float
    maintain_seconds: float

    def table(self, name: str) -> TableSketchRecord:
        for t in self.tables:
            if t.table == name:
                return t
        raise KeyError(f"the sketch of {self.query} has no partition on {name!r}")

    def predicate(self, table: str) -> str:
        return self.table(table).predicate

    def ranges(self, table: str) -> list[Range]:
        return list(self.table(table).ranges)

    def sketch(self) -> Sketch:
        """The sketch as the engine's ``Sketch`` (needs the partition bounds)."""
        pset = PartitionSet(tuple(t.partition() for t in self.tables))
        return Sketch(pset, self.fragments)


@dataclass(frozen=True)
class RunResult:
    """Rows of a query run on the server's Spark and what its scans read."""

    rows: pa.Table
    seconds: float
    rows_read: Mapping[str, int]
    files_read: Mapping[str, int]
    files_skipped: Mapping[str, int]
    sketch: SketchRecord | None = None
    access: str = "plain"  # "sketch": scans filtered by the sketch; "plain": no filter
    access_reason: str = ""
    read_share: Mapping[str, float] = field(default_factory=dict)  # estimated, per table
    table_rows: Mapping[str, int] = field(default_factory=dict)
    table_scans: Mapping[str, int] = field(default_factory=dict)
    table_bytes: Mapping[str, int] = field(default_factory=dict)
    bytes_estimate: Mapping[str, int] = field(default_factory=dict)  # pages read, estimated
    reuse: str = ""  # with a sketch: the rules that let it answer this SQL, and why
    reuse_reason: str = ""

    @property
    def total_rows_read(self) -> int:
        return sum(self.rows_read.values())

    def rows_read_share(self) -> dict[str, float]:
        """Per table, the share of its rows Spark's scans actually returned (of its rows
        times the query's scans of it)."""
        return {t: n / (self.table_rows[t] * self.table_scans.get(t, 1))
                for t, n in self.rows_read.items() if self.table_rows.get(t)}


@dataclass(frozen=True)
class TableRecord:
    name: str
    version: int
    schema: pa.Schema
