"""What the coordinator takes and returns: small frozen records, no Ray, no gRPC.

Invariants: a ``SketchVersion`` is immutable and names the exact table versions its
sketch is the accurate sketch of; ``seq`` numbers a query's sketch versions from 1 and
grows by one per new version (a version is made whenever maintenance advances the table
versions, even if the fragments stay the same).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Mapping

import pyarrow as pa

from imp_actors.runtime_config import Autoscaling, Lazy, Strategy
from imp_core.sketch.partition import PartitionSpec
from imp_core.sketch.sketch import Range, Sketch


@dataclass(frozen=True)
class QuerySpec:
    """A registration request.

    ``partitions`` maps "table.column" to a fragment count (equi-depth on the current
    data) or explicit split points; None uses the SQL's ``-- sketch: table.column``
    header with ``fragments`` fragments; "auto" (or None without a header) lets the
    attribute advisor choose (``imp_core.advice.attributes``). ``force`` registers even
    if the safety check finds the sketch attribute unsafe. ``pushdown`` False keeps the
    query's selections out of its scans (every row of a read table reaches its workers;
    for measurements).
    ``autoscaling`` lets the shard count follow the maintenance load within its bounds
    (the query starts with ``shards`` moved into them).
    """

    name: str
    sql: str
    partitions: Mapping[str, PartitionSpec] | str | None = None
    fragments: int | None = None
    strategy: Strategy = field(default_factory=Lazy)
    force: bool = False
    shards: int = 1
    pushdown: bool = True
    autoscaling: Autoscaling | None = None


@dataclass(frozen=True)
class SketchVersion:
    query: str
    seq: int
    versions: Mapping[str, int]  # table -> Delta version the sketch is exact for
    sketch: Sketch
    created_at: float = field(default_factory=time.time)
    maintain_seconds: float = 0.0  # time of the maintenance that made this version

    @property
    def fragments(self) -> list[int]:
        return list(self.sketch.fragments)

    def tables(self) -> list[str]:
        return [p.table for p in self.sketch.partitions.partitions]

    def ranges(self, table: str) -> list[Range]:
        return self.sketch.ranges(table)

    def predicate(self, table: str) -> str:
        return self.sketch.predicate(table)

    def where(self) -> str:
        """The sketch as one SQL condition over all sketched tables (AND of each)."""
        parts = [self.predicate(t) for t in self.tables()]
        return " AND ".join(f"({p})" for p in parts) if parts else "TRUE"


@dataclass(frozen=True)
class IndexUse:
    """A shared index a query reads: ``table`` keyed on ``key`` with ``columns``, its
    base in memory or on disk (``where``), its bytes in memory and on disk, and how many
    readers (query pipelines of the process) share it."""

    table: str
    key: str
    columns: tuple[str, ...]
    where: str
    bytes: int
    disk_bytes: int
    users: int

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> IndexUse:
        return cls(str(d["table"]), str(d["key"]), tuple(d["columns"]), str(d["where"]),
                   int(d["bytes"]), int(d["disk_bytes"]), int(d["users"]))


@dataclass(frozen=True)
class QueryInfo:
    name: str
    sql: str
    tables: tuple[str, ...]
    partitions: tuple[dict[str, Any], ...]  # RangePartition.to_json() of each
    strategy: Strategy
    shards: int
    state: str  # lifecycle.QueryState.reported: "live" | "evicted" | "registering"
    versions: Mapping[str, int]
    sketch_seq: int
    sketch_fragments: int
    total_fragments: int
    state_bytes: int
    pending_tuples: int  # delta tuples committed but not yet maintained
    last_used: float
    # join sides probed in the data layer instead of held in the actors' state
    probed_join_sides: tuple[str, ...] = ()
    autoscaling: Autoscaling | None = None
    # maintenance shard-seconds per second over the autoscaling window (default 30 s)
    load: float = 0.0
    # the shared indexes its probed join sides read (``imp_core.storage.table_index``)
    indexes: tuple[IndexUse, ...] = ()


@dataclass(frozen=True)
class CheckpointInfo:
    query: str
    shard: int
    uri: str
    versions: Mapping[str, int]
    bytes: int
    sha256: str
    created_at: float


@dataclass(frozen=True)
class UpdateResult:
    table: str
    version: int
    inserted: int
    deleted: int
    maintained: tuple[str, ...] = ()  # queries maintained eagerly by this update
    # committed before, by the first call with this update's idempotency key: nothing was
    # done now (``version`` -1: that commit is no longer in the table's history)
    replayed: bool = False


@dataclass(frozen=True)
class QueryResult:
    """Rows of a query run on Spark, with or without a sketch, and what the scans read."""

    rows: pa.Table
    seconds: float
    rows_read: Mapping[str, int]  # per table, rows the Parquet scans returned
    files_read: Mapping[str, int]
    files_skipped: Mapping[str, int]
    sketch: SketchVersion | None = None
    # "sketch" (scans filtered by the sketch) or "plain"; why; and per sketched table the
    # estimated share of its rows the sketch's filter would read
    access: str = "plain"
    access_reason: str = ""
    read_share: Mapping[str, float] = field(default_factory=dict)
    # per table: its rows and compressed bytes at the version read, and the bytes of the
    # pages its scan reads (estimated: the pages the filter meets; all of a plain table)
    table_rows: Mapping[str, int] = field(default_factory=dict)
    table_bytes: Mapping[str, int] = field(default_factory=dict)
    bytes_estimate: Mapping[str, int] = field(default_factory=dict)
    # per table: how many scans of it the query runs (a table read twice counts twice)
    table_scans: Mapping[str, int] = field(default_factory=dict)
    # with a sketch: the rules of ``imp_core.sketch.reuse`` that let it answer this SQL
    # ("same-plan", "subquery", "stronger-selection", "smaller-limit", joined by "+"), why
    reuse: str = ""
    reuse_reason: str = ""


@dataclass(frozen=True)
class LatencySnapshot:
    """A latency histogram at one moment: ``counts[i]`` observations were <=
    ``bounds[i]`` (cumulative; the last bound is +inf, its count the total)."""

    bounds: tuple[float, ...]
    counts: tuple[int, ...]
    sum: float

    @property
    def count(self) -> int:
        return self.counts[-1] if self.counts else 0


@dataclass(frozen=True)
class QueryMetrics:
    """One registered query as an operator watches it (``Coordinator.metrics``).

    ``staleness_versions``: table versions committed beyond those of the latest sketch
    (summed over the query's tables); ``stale_since``: Unix time of the first of them
    (None when the sketch is current); both None while the query has no sketch yet (an
    evicted query after a restart, before it is used)."""

    name: str
    state: str                       # lifecycle.QueryState.reported
    shards: int
    state_bytes: int
    pending_tuples: int
    maintenance: LatencySnapshot     # seconds of each maintenance step
    load: float                      # as QueryInfo.load
    restarts: int                    # lost shards recovered (actor restarts)
    staleness_versions: int | None
    stale_since: float | None
    autoscaling: Autoscaling | None


@dataclass(frozen=True)
class RuntimeMetrics:
    """The coordinator's metrics at one moment (``Coordinator.metrics``)."""

    queries: tuple[QueryMetrics, ...]
    live_actors: int
    counters: Mapping[str, int]      # events since start: maintenance_batches, rescales, ...
    at: float = field(default_factory=time.time)
    runtime_up: bool = True  # the actor runtime answered its last probe (``runtime_watch``)
    nodes_alive: int | None = None  # live Ray nodes as last probed (None: not known yet)
