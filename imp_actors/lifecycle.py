"""A registered query's lifecycle and its runtime record in the coordinator.

Invariants:
- a query is always in exactly one ``QueryState`` and moves only along ``TRANSITIONS``
  (``QueryRuntime.transition`` refuses anything else with ``LifecycleError``);
- it holds worker handles iff its state is in ``WITH_ACTORS`` or it is part-way through
  getting them (``REGISTERING``, ``RESTORING``): ``attach`` and ``detach`` are the only
  ways handles come and go, and ``detach`` runs before ``EVICTED`` or ``DROPPED``;
- ``shard_versions``, ``shard_sketches`` and ``shard_bytes`` hold one entry per handle
  (all empty without handles);
- every field is guarded by ``lock`` except ``scheduled`` and ``last_used``, which the
  control loop reads without it (a stale read only delays a decision by one tick), and
  ``telemetry``, which has its own locks; metrics (``metrics.py``) read the state
  fields without the lock too, so a scrape never waits for a maintenance step (its
  values may be one step old);
- ``lock`` (a ``QueryLock``) is held only in a settled state (``LIVE``, ``EVICTED``,
  ``REGISTERING``) when it is lent out (``QueryLock.released``) while other queries are
  evicted to make room for this one; the holder checks the state again afterwards.
  Lock order: the directory's lock (``context.QueryDirectory``) is never held while
  waiting for a query's lock, and no thread waits for one query's lock while holding
  another's.
"""

from __future__ import annotations

import enum
import functools
import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Mapping, Sequence

from pyroaring import BitMap

from imp_actors.handles import WorkerHandle
from imp_actors.history import SketchHistory
from imp_actors.registry import QueryRecord
from imp_actors.runtime_config import Autoscaling, Strategy, strategy_from_json
from imp_actors.sharding import ShardKey
from imp_actors.telemetry import QueryTelemetry
from imp_actors.types import IndexUse
from imp_actors.worker import ApplyResult, WorkerStatus
from imp_core.errors import LifecycleError
from imp_core.plan.ansi import ErrorTally
from imp_core.plan.nodes import QueryPlan
from imp_core.sketch.adaptive import FragmentCounts
from imp_core.sketch.partition import PartitionSet
from imp_core.storage.scan_spec import ScanSpec


class QueryState(enum.Enum):
    """Where a query is in its life; the value is what ``QueryInfo.state`` reports after
    ``reported`` folds the transient states into the ones clients know."""

    REGISTERING = "registering"  # planned; its first state is being built
    LIVE = "live"                # actors hold its state; idle
    MAINTAINING = "maintaining"  # actors are applying a batch
    RESCALING = "rescaling"      # its state is being re-split over a new shard count
    RECOVERING = "recovering"    # dead shards found by the control loop are replaced
    REPARTITIONING = "repartitioning"  # its state is being built anew on new ranges
    EVICTED = "evicted"          # checkpointed, no actors
    RESTORING = "restoring"      # actors are being started from checkpoints
    DROPPED = "dropped"          # gone from the registry; the record is dead

    @property
    def reported(self) -> str:
        """The state clients see ("registering", "live" or "evicted", as the API says)."""
        if self in WITH_ACTORS:
            return QueryState.LIVE.value
        if self is QueryState.REGISTERING:
            return self.value
        return QueryState.EVICTED.value


WITH_ACTORS = frozenset({QueryState.LIVE, QueryState.MAINTAINING, QueryState.RESCALING,
                         QueryState.REPARTITIONING, QueryState.RECOVERING})
BUSY = frozenset({QueryState.REGISTERING, QueryState.MAINTAINING, QueryState.RESCALING,
                  QueryState.REPARTITIONING, QueryState.RESTORING, QueryState.RECOVERING})

TRANSITIONS: dict[QueryState, frozenset[QueryState]] = {
    QueryState.REGISTERING: frozenset({QueryState.LIVE, QueryState.DROPPED}),
    QueryState.LIVE: frozenset({QueryState.MAINTAINING, QueryState.RESCALING,
                                QueryState.REPARTITIONING, QueryState.RECOVERING,
                                QueryState.EVICTED, QueryState.DROPPED}),
    QueryState.MAINTAINING: frozenset({QueryState.LIVE}),
    QueryState.RECOVERING: frozenset({QueryState.LIVE}),
    QueryState.RESCALING: frozenset({QueryState.LIVE}),
    QueryState.REPARTITIONING: frozenset({QueryState.LIVE}),
    QueryState.EVICTED: frozenset({QueryState.RESTORING, QueryState.DROPPED}),
    QueryState.RESTORING: frozenset({QueryState.LIVE, QueryState.EVICTED}),
    QueryState.DROPPED: frozenset(),
}


class QueryLock:
    """A query's re-entrant lock whose holder can lend it out while it waits for other
    queries (``released``), as ``threading.Condition.wait`` does with its lock.

    Invariant: ``_owner`` and ``_depth`` change only under ``_lock``, by its holder.
    """

    def __init__(self) -> None:
        self._lock = threading.RLock()
        self._owner: int | None = None
        self._depth = 0

    def acquire(self, blocking: bool = True, timeout: float = -1) -> bool:
        if not self._lock.acquire(blocking, timeout):
            return False
        self._owner = threading.get_ident()
        self._depth += 1
        return True

    def release(self) -> None:
        self._depth -= 1
        if not self._depth:
            self._owner = None
        self._lock.release()

    def __enter__(self) -> QueryLock:
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()

    def held(self) -> bool:
        """Whether the calling thread holds the lock."""
        return self._owner == threading.get_ident()

    @contextmanager
    def released(self) -> Iterator[None]:
        """Inside, the calling thread does not hold the lock (whatever its depth); it holds
        it again as before afterwards. Without a hold, nothing changes."""
        depth = self._depth if self.held() else 0
        for _ in range(depth):
            self.release()
        try:
            yield
        finally:
            for _ in range(depth):
                self.acquire()


@dataclass
class QueryRuntime:
    """Runtime state of one registered query (see the module docstring)."""

    record: QueryRecord
    plan: QueryPlan
    partitions: PartitionSet
    scan_specs: dict[str, ScanSpec]
    key: ShardKey | None
    history: SketchHistory
    state: QueryState = QueryState.EVICTED
    lock: QueryLock = field(default_factory=QueryLock)
    handles: list[WorkerHandle] | None = None
    shard_versions: list[dict[str, int]] = field(default_factory=list)
    shard_sketches: list[BitMap] = field(default_factory=list)
    shard_bytes: list[int] = field(default_factory=list)
    shard_errors: list[str] = field(default_factory=list)  # ANSI mode (ErrorTally JSON)
    shard_indexes: list[str] = field(default_factory=list)  # WorkerStatus.indexes
    last_used: float = field(default_factory=time.time)
    batches_since_checkpoint: int = 0
    pending_tuples: int = 0
    pending_since: float | None = None
    # the newest version of each table accounted to ``pending_tuples`` (``note_pending``)
    pending_versions: dict[str, int] = field(default_factory=dict)
    pending_lock: threading.Lock = field(default_factory=threading.Lock)
    scheduled: bool = False  # an eager maintenance job is queued or running
    # the sequence number before this runtime's first sketch version (a restarted
    # coordinator's runtime starts after the versions its predecessor may have published)
    seq_floor: int = 0
    # the shard states of the Spark capture in progress: (versions, one state per shard)
    capture: tuple[dict[str, int], list[dict]] | None = None
    # maintenance latencies, load and shard recoveries (``telemetry.py``)
    telemetry: QueryTelemetry = field(default_factory=QueryTelemetry)
    # rows per fragment of each sketched table (``imp_core.sketch.adaptive``) and the
    # table versions they count, kept by ``adaptive_ranges.AdaptiveRanges``; None: not
    # counted yet (built from the tables on the first maintained batch)
    counts: dict[str, FragmentCounts] | None = None
    counted_versions: dict[str, int] = field(default_factory=dict)
    # each re-partition: {"versions", "table", "reason", "fragments"}
    repartitions: list[dict] = field(default_factory=list)
    # the sketch version its newest checkpoints hold: {"seq", "fragments", "versions",
    # "at"} (``CheckpointStore.read_kept``); what is known of an evicted query's sketch
    # when no version is in memory (after a restart)
    kept: dict | None = None

    # -- pending changes (eager queries) ----------------------------------------------------
    def note_pending(self, table: str, version: int, tuples: int, now: float) -> int:
        """Account ``tuples`` changed by ``table``'s ``version``; returns the pending total."""
        with self.pending_lock:
            self.pending_tuples += tuples
            if self.pending_since is None:
                self.pending_since = now
            if version > self.pending_versions.get(table, -1):
                self.pending_versions[table] = version
            return self.pending_tuples

    def settle_pending(self, maintained: Mapping[str, int]) -> None:
        """The query is maintained to ``maintained``: its pending changes are cleared,
        unless a version beyond it was accounted meanwhile (a commit that landed while
        the maintenance ran stays pending, so it is maintained in turn)."""
        with self.pending_lock:
            if all(v <= maintained.get(t, -1) for t, v in self.pending_versions.items()):
                self.pending_tuples, self.pending_since = 0, None
                self.pending_versions.clear()

    # -- lifecycle ------------------------------------------------------------------------
    def transition(self, to: QueryState) -> None:
        if to not in TRANSITIONS[self.state]:
            raise LifecycleError(f"query {self.name!r} cannot go from {self.state.value} "
                                 f"to {to.value}")
        self.state = to

    @property
    def live(self) -> bool:
        """Actors hold its state (it may be busy with them)."""
        return self.state in WITH_ACTORS

    @property
    def busy(self) -> bool:
        """In the middle of a step that holds its lock (never an eviction candidate)."""
        return self.state in BUSY

    def attach(self, handles: list[WorkerHandle], statuses: Sequence[WorkerStatus]) -> None:
        """Take ``handles`` (one per shard, in shard order) with their workers' status."""
        self.handles = handles
        self.shard_versions = [dict(s.versions) for s in statuses]
        self.shard_sketches = [BitMap.deserialize(s.sketch) for s in statuses]
        self.shard_bytes = [s.state_bytes for s in statuses]
        self.shard_errors = [s.errors for s in statuses]
        self.shard_indexes = [s.indexes for s in statuses]

    def detach(self) -> list[WorkerHandle]:
        """Forget the handles (the caller stops them) and their shards' state."""
        handles, self.handles = self.handles or [], None
        self.shard_versions, self.shard_sketches, self.shard_bytes = [], [], []
        self.shard_errors = []
        self.shard_indexes = []
        return handles

    def set_shard(self, shard: int, handle: WorkerHandle | None,
                  status: WorkerStatus | ApplyResult) -> None:
        """Record a shard's new worker (None: the same one) and its state."""
        assert self.handles is not None
        if handle is not None:
            self.handles[shard] = handle
        self.shard_versions[shard] = dict(status.versions)
        self.shard_sketches[shard] = BitMap.deserialize(status.sketch)
        self.shard_bytes[shard] = status.state_bytes
        self.shard_errors[shard] = status.errors
        self.shard_indexes[shard] = status.indexes

    # -- derived ----------------------------------------------------------------------------
    @property
    def name(self) -> str:
        return self.record.name

    @functools.cached_property
    def tables(self) -> tuple[str, ...]:
        """The tables the query reads (its plan never changes)."""
        return tuple(sorted(self.plan.root.tables()))

    @property
    def shards(self) -> int:
        return self.record.shards

    @property
    def state_bytes(self) -> int:
        return sum(self.shard_bytes)

    @property
    def indexes(self) -> tuple[IndexUse, ...]:
        """The shared indexes the query's shards read (one per table and key; shards
        in one process share one, so the largest report of each is kept)."""
        found: dict[tuple[str, str], IndexUse] = {}
        for text in self.shard_indexes:
            for entry in json.loads(text or "[]"):
                use = IndexUse.from_json(entry)
                seen = found.get((use.table, use.key))
                if seen is None or use.bytes + use.disk_bytes > seen.bytes + seen.disk_bytes:
                    found[(use.table, use.key)] = use
        return tuple(found[k] for k in sorted(found))

    def check_errors(self) -> None:
        """ANSI mode: raise ``SqlRuntimeError`` while rows of some shard raise (the
        shards' counts added, as each counts its own rows)."""
        total = ErrorTally()
        for text in self.shard_errors:
            if text and text != "{}":
                shard = ErrorTally.restore(text)
                for (op, cls), n in shard.counts.items():
                    total.add_count(op, cls, n, shard.where[(op, cls)])
        total.check()

    @property
    def strategy(self) -> Strategy:
        return strategy_from_json(self.record.strategy)

    @property
    def autoscaling(self) -> Autoscaling | None:
        return Autoscaling.from_json(self.record.autoscaling)

    def versions(self) -> dict[str, int]:
        """The common version of all shards (they differ only mid-recovery)."""
        if not self.shard_versions:
            latest = self.history.latest
            if latest is not None:
                return dict(latest.versions)
            return dict(self.kept["versions"]) if self.kept else {}
        return dict(self.shard_versions[0])

    def last_known(self) -> tuple[int, int, dict[str, int]] | None:
        """(seq, fragments, table versions) of its newest sketch version in memory, else
        of the one its checkpoints keep; None when neither is known."""
        latest = self.history.latest
        if latest is not None:
            return latest.seq, len(latest.sketch.fragments), dict(latest.versions)
        if self.kept:
            return int(self.kept["seq"]), int(self.kept["fragments"]), \
                {t: int(v) for t, v in self.kept["versions"].items()}
        return None
