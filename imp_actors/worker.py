"""One query shard's incremental pipeline, as a plain class (Ray wraps it elsewhere).

A ``QueryWorker`` hosts at most one shard of one registered query at a time: its
``IncrementalQuery`` (operator state and sketch) and the table versions that state is
exact for, run by the ``imp_core.query.driver.QueryDriver`` every front uses: join sides
the query's placement names are probed from the table store's files (no rows in the
actor), and exhausted bounded min/max / top-k buffers are refilled from them, both at the
batch's versions and cut to this shard's rows. Invariants:
- ``versions`` changes only together with the state: ``apply`` moves both from
  ``from_versions`` to ``to_versions`` or, on any error, neither;
- a batch whose ``from_versions`` are not the worker's versions is refused, and one the
  worker already applied (its versions equal ``to_versions``) is acknowledged without
  being applied again: re-sending a batch after a lost reply cannot double-count it;
- a checkpoint's metadata names the versions of the state it holds.
"""

from __future__ import annotations

import json
import os
import socket
import time
from dataclasses import dataclass
from typing import Mapping

import pyarrow as pa
from pyroaring import BitMap

from imp_actors.checkpoints import CheckpointStore
from imp_actors.sharding import route_rows, shard_key
from imp_actors.types import CheckpointInfo
from imp_core.engine.operators.base import TableDelta
from imp_core.engine.pipeline import EngineOptions, IncrementalQuery
from imp_core.errors import SnapshotError, VersionError
from imp_core.plan.nodes import QueryPlan
from imp_core.process.memory_release import release_free_memory
from imp_core.query.data_layer import DataLayer, JoinPlacement, indexes_used
from imp_core.query.driver import QueryDriver
from imp_core.sketch.partition import PartitionSet


@dataclass(frozen=True)
class WorkerSpec:
    """What a worker needs to host one shard (plans travel as objects, not SQL)."""

    query: str
    shard: int
    shards: int
    generation: int
    plan: QueryPlan
    partitions: PartitionSet
    options: EngineOptions
    checkpoint_root: str
    # the table store the worker's data layer reads (None: no data layer; then the
    # placement must be empty and the options unbounded)
    tables_root: str | None = None
    placement: JoinPlacement = frozenset()  # join sides probed in the data layer

    @property
    def label(self) -> str:
        return f"{self.query}[{self.shard}/{self.shards}]"


def drive(spec: WorkerSpec) -> QueryDriver:
    """The shard's driver (empty state), wired to its data layer when it needs one."""
    if spec.tables_root is None or not (spec.placement or spec.options.bounded):
        return QueryDriver.start(spec.plan, spec.partitions, spec.options)
    from imp_core.storage import DeltaStore

    row_filter = None
    if spec.shards > 1:
        key = shard_key(spec.plan)

        def row_filter(table: str, rows: pa.Table) -> pa.Table:
            if table != key.table:
                return rows
            return route_rows(table, TableDelta.inserts(rows), key, spec.shards)[spec.shard].rows

    data = DataLayer(DeltaStore(spec.tables_root), spark=None, row_filter=row_filter)
    return QueryDriver.start(spec.plan, spec.partitions, spec.options, data, spec.placement)


@dataclass(frozen=True)
class ApplyResult:
    versions: dict[str, int]
    sketch: bytes  # the shard's whole sketch after the batch (serialized BitMap)
    added: int
    removed: int
    seconds: float
    state_bytes: int
    applied: bool  # False: the batch had been applied before (acknowledged only)
    errors: str = "{}"  # ANSI mode: the shard's counts of rows that raise (ErrorTally)
    indexes: str = "[]"  # JSON: the shared indexes its probes read (``indexes_used``)


@dataclass(frozen=True)
class WorkerStatus:
    query: str | None
    shard: int
    shards: int
    generation: int
    versions: dict[str, int]
    state_bytes: int
    batches: int
    pid: int
    host: str
    sketch: bytes
    errors: str = "{}"  # as ApplyResult.errors
    indexes: str = "[]"  # as ApplyResult.indexes


class QueryWorker:
    def __init__(self) -> None:
        self.spec: WorkerSpec | None = None
        self.driver: QueryDriver | None = None
        self._store: CheckpointStore | None = None

    @property
    def pipeline(self) -> IncrementalQuery | None:
        return self.driver.pipeline if self.driver is not None else None

    @property
    def versions(self) -> dict[str, int]:
        """The table versions the hosted state is exact for ({} when hosting none)."""
        return self.driver.versions if self.driver is not None else {}

    # -- hosting ------------------------------------------------------------------------
    def load(self, spec: WorkerSpec, checkpoint: str | None = None,
             state: tuple[Mapping[str, pa.Table], Mapping[str, int]] | None = None
             ) -> WorkerStatus:
        """Host ``spec``'s shard: empty state, the state of ``checkpoint`` (a name in the
        checkpoint store), or ``state`` (state tables and the versions they are exact
        for). A damaged or foreign checkpoint raises ``SnapshotError`` and leaves the
        worker empty."""
        self.unload()
        driver = drive(spec)
        store = CheckpointStore(spec.checkpoint_root)
        if state is not None:
            tables, at = state
            driver.load_state(tables, at)
        elif checkpoint is not None:
            try:
                blob = store.read(checkpoint)
            except OSError as exc:
                raise SnapshotError(f"checkpoint {checkpoint} cannot be read: {exc}") from None
            meta = driver.restore(blob)
            if meta.get("shard") != spec.shard or meta.get("shards") != spec.shards:
                raise SnapshotError(f"checkpoint {checkpoint} holds shard "
                                    f"{meta.get('shard')}/{meta.get('shards')}, not "
                                    f"{spec.shard}/{spec.shards}")
        self.spec, self.driver, self._store = spec, driver, store
        # building the state (a bootstrap's tables, a checkpoint's blob) peaks well above
        # the state itself; give the difference back before the next query needs it
        release_free_memory()
        return self.status()

    def unload(self) -> None:
        self.spec, self.driver, self._store = None, None, None

    def _hosted(self) -> QueryDriver:
        if self.driver is None:
            raise VersionError("this worker hosts no query")
        return self.driver

    # -- maintenance --------------------------------------------------------------------
    def apply(self, changes: Mapping[str, TableDelta], from_versions: Mapping[str, int],
              to_versions: Mapping[str, int]) -> ApplyResult:
        """Apply one batch (the tables' changes from ``from_versions`` to ``to_versions``);
        ``from_versions`` empty means the bootstrap batch of an empty worker."""
        driver = self._hosted()
        t0 = time.perf_counter()
        if dict(to_versions) == self.versions and self.versions:
            return self._result(t0, 0, 0, applied=False)
        if dict(from_versions) != self.versions:
            raise VersionError(f"{self.spec.label}: state is at versions {self.versions}, "
                               f"the batch starts at {dict(from_versions)}")
        delta = driver.step(from_versions, to_versions, changes)
        return self._result(t0, len(delta.added), len(delta.removed), applied=True)

    def _result(self, t0: float, added: int, removed: int, applied: bool) -> ApplyResult:
        pipeline = self._hosted().pipeline
        return ApplyResult(dict(self.versions), pipeline.merge.sketch().serialize(), added,
                           removed, time.perf_counter() - t0, pipeline.state_bytes(), applied,
                           pipeline.errors.snapshot(), json.dumps(indexes_used(pipeline)))

    def sketch(self) -> bytes:
        return self._hosted().pipeline.merge.sketch().serialize()

    # -- state --------------------------------------------------------------------------
    def checkpoint(self) -> CheckpointInfo:
        driver = self._hosted()
        spec = self.spec
        assert spec is not None and self._store is not None
        blob = driver.snapshot({"query": spec.query, "shard": spec.shard,
                                "shards": spec.shards, "generation": spec.generation})
        return self._store.write(spec.query, spec.generation, spec.shard, blob, self.versions)

    def state(self) -> tuple[dict[str, pa.Table], dict[str, int]]:
        """The state tables and the versions they are exact for (for re-splitting)."""
        return self._hosted().pipeline.state_tables(), dict(self.versions)

    def status(self) -> WorkerStatus:
        spec, p = self.spec, self.pipeline
        return WorkerStatus(
            spec.query if spec else None, spec.shard if spec else 0,
            spec.shards if spec else 0, spec.generation if spec else 0, dict(self.versions),
            p.state_bytes() if p else 0, p.batches if p else 0, os.getpid(),
            socket.gethostname(), p.merge.sketch().serialize() if p else BitMap().serialize(),
            p.errors.snapshot() if p else "{}",
            json.dumps(indexes_used(p)) if p else "[]")

    def ping(self) -> int:
        return os.getpid()

    def node(self) -> str:
        """Where this worker runs ("local" in-process; the Ray actor class overrides it)."""
        return "local"

    def wait_indexes(self, timeout_s: float) -> bool:
        """Wait until this process has no shared index build asked for or running (the
        builds its probed sides asked for at wiring); False when ``timeout_s`` passed
        first. Reads never need this (they go to the files until an index is ready);
        benchmarks do, to time batches of a settled service."""
        from imp_core.storage.index_catalog import wait_for_indexes

        return wait_for_indexes(timeout_s)

    def stats(self) -> list[dict]:
        """Per operator of the hosted pipeline: its counters and state size."""
        return self._hosted().pipeline.stats()
