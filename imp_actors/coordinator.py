"""The coordinator: registered queries, their actors, and the deltas that keep them fresh.

It owns the durable query registry, a table -> queries routing index, the per-version
change cache (``DeltaFeed``) and, per query, the shard workers that hold its operator
state. It learns of new table versions from the updates it commits and, by polling the
Delta logs, from other writers; it pulls each version's changes once and sends each
affected shard only the rows and columns its query needs.

Invariants:
- A query's ``SketchVersion``s are exact for the table versions they name; a version is
  published only after every shard applied the batch that leads to it.
- A shard's state moves only from one recorded set of table versions to another
  (``QueryWorker.apply`` refuses anything else and acknowledges repeats), so a batch is
  never lost or applied twice, whatever dies in between: a lost shard is restored from
  its newest readable checkpoint (or rebuilt from the tables) and replays the changes
  since.
- Evicted queries keep their registry record and checkpoints; asking for their sketch
  restores them transparently.
"""

from __future__ import annotations

import logging
import re
import threading
import time
import uuid
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Mapping

import numpy as np
import pyarrow as pa
from pyroaring import BitMap

from imp_actors.checkpoints import CheckpointStore
from imp_actors.config import Eager, RuntimeConfig, strategy_from_json, strategy_to_json
from imp_actors.eviction import LiveQuery, choose_victims
from imp_actors.feed import DeltaFeed, VersionProbe, count_changes
from imp_actors.handles import WORKER_PREFIX, WorkerHandle, gather, make_backend
from imp_actors.history import SketchHistory
from imp_actors.registry import (
    QueryRecord,
    Registry,
    partitions_from_records,
    partitions_to_records,
)
from imp_actors.sharding import ShardKey, route_rows, shard_key
from imp_actors.spark_work import SparkWork
from imp_actors.storage import BlobStore
from imp_actors.types import (
    CheckpointInfo,
    QueryInfo,
    QueryResult,
    QuerySpec,
    SketchVersion,
    UpdateResult,
)
from imp_actors.worker import ApplyResult, WorkerSpec, WorkerStatus
from imp_core.engine.operators.base import TableDelta
from imp_core.engine.pipeline import EngineOptions
from imp_core.errors import (
    ImpError,
    InvalidNameError,
    PartitionError,
    QueryExistsError,
    SnapshotError,
    UnknownQueryError,
    WorkerLostError,
)
from imp_core.plan.nodes import QueryPlan
from imp_core.scan_spec import ScanSpec, restrict_delta, scan_specs
from imp_core.sketch.partition import PartitionSet, build_partition_set
from imp_core.sketch.sketch import Sketch

log = logging.getLogger(__name__)

_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_.-]{0,63}$")
_RETRIES = 3  # attempts of a batch when shards die under it


@dataclass
class _Query:
    """Runtime state of one registered query (guarded by ``lock``)."""

    record: QueryRecord
    plan: QueryPlan
    partitions: PartitionSet
    specs: dict[str, ScanSpec]
    key: ShardKey | None
    history: SketchHistory
    lock: threading.RLock = field(default_factory=threading.RLock)
    handles: list[WorkerHandle] | None = None  # None: evicted
    shard_versions: list[dict[str, int]] = field(default_factory=list)
    shard_sketches: list[BitMap] = field(default_factory=list)
    shard_bytes: list[int] = field(default_factory=list)
    last_used: float = field(default_factory=time.time)
    batches_since_checkpoint: int = 0
    pending_tuples: int = 0
    pending_since: float | None = None
    scheduled: bool = False
    busy: bool = False
    # the shard states of the Spark capture in progress: (versions, one state per shard)
    capture: tuple[dict[str, int], list[dict]] | None = None

    @property
    def name(self) -> str:
        return self.record.name

    @property
    def tables(self) -> tuple[str, ...]:
        return tuple(sorted(self.plan.root.tables()))

    @property
    def shards(self) -> int:
        return self.record.shards

    @property
    def live(self) -> bool:
        return self.handles is not None

    @property
    def state_bytes(self) -> int:
        return sum(self.shard_bytes)

    @property
    def strategy(self):
        return strategy_from_json(self.record.strategy)

    def versions(self) -> dict[str, int]:
        """The common version of all shards (they differ only mid-recovery)."""
        if not self.shard_versions:
            latest = self.history.latest
            return dict(latest.versions) if latest else {}
        return dict(self.shard_versions[0])


class Coordinator:
    """See the module docstring. Thread-safe; every public method may be called from
    any thread (the gRPC servicer calls them concurrently)."""

    def __init__(self, config: RuntimeConfig | None = None, store: Any = None,
                 options: EngineOptions | None = None):
        from imp_core.storage import DeltaStore

        self.config = config or RuntimeConfig.from_env()
        self.store = store if store is not None else DeltaStore(self.config.tables_dir)
        self.options = options or EngineOptions()
        self.backend = make_backend(self.config)
        self.registry = Registry(BlobStore(self.config.registry_dir))
        self.checkpoints = CheckpointStore(self.config.checkpoints_dir)
        self.probe = VersionProbe(self.store)
        self.spark = SparkWork(self.store)
        self.feed = DeltaFeed(self.store, spark_source=self.spark.delta_source,
                              spark_min_bytes=self.config.spark_delta_min_bytes,
                              cache_bytes=self.config.delta_cache_bytes)
        self._queries: dict[str, _Query] = {}
        self._routes: dict[str, set[str]] = {}
        self._lock = threading.RLock()
        self._store_lock = threading.Lock()
        self._seen_versions: dict[str, int] = {}
        self.counters: Counter = Counter()
        self.timings: dict[str, list[float]] = {"maintain_s": [], "restore_s": []}
        self._stop = threading.Event()
        self._loop: threading.Thread | None = None
        self._pool: ThreadPoolExecutor | None = None
        self._started = False
        self._last_poll = 0.0
        self._warm: list[WorkerHandle] = []  # started, empty workers ready for use
        self._warm_lock = threading.Lock()

    # -- life cycle ---------------------------------------------------------------------
    def start(self) -> Coordinator:
        if self._started:
            return self
        self.backend.start()
        self._recover()
        self._pool = ThreadPoolExecutor(max_workers=2, thread_name_prefix="imp-maintain")
        self._stop.clear()
        self._loop = threading.Thread(target=self._background, name="imp-coordinator",
                                      daemon=True)
        self._loop.start()
        self._started = True
        return self

    def __enter__(self) -> Coordinator:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self, checkpoint: bool = True) -> None:
        """Stop background work; checkpoint live queries and stop their actors."""
        self._stop.set()
        if self._loop is not None:
            self._loop.join(timeout=10)
        if self._pool is not None:
            self._pool.shutdown(wait=True)
        for q in list(self._queries.values()):
            with q.lock:
                if q.live:
                    if checkpoint:
                        try:
                            self._checkpoint_locked(q)
                        except ImpError as exc:
                            log.warning("checkpoint of %s at shutdown failed: %s", q.name, exc)
                    self._stop_actors(q)
            q.history.close()
        self._kill_warm()
        self.backend.shutdown()
        self._started = False

    def abandon(self) -> None:
        """Stop this coordinator's threads without checkpointing or stopping actors: what
        a crash leaves behind (for recovery tests and tools)."""
        self._stop.set()
        if self._loop is not None:
            self._loop.join(timeout=10)
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
        for q in self._queries.values():
            q.history.close()
        self._started = False

    def _recover(self) -> None:
        """Rebuild the in-memory registry from the durable one and re-attach the actors
        that outlived the previous coordinator (a query whose shards did not all survive
        restarts from its checkpoints when it is next used)."""
        for name, record in sorted(self.registry.records().items()):
            try:
                q = self._make_query(record)
            except ImpError as exc:
                log.error("registered query %s cannot be planned any more: %s", name, exc)
                continue
            self._queries[name] = q
            self._route(q)
        found: dict[tuple[str, int, int], tuple[WorkerHandle, WorkerStatus]] = {}
        for wname in self.backend.worker_names():
            h = self.backend.find(wname)
            if h is None:
                continue
            try:
                st: WorkerStatus = h.call("status")
            except WorkerLostError:
                continue
            if st.query is None:
                self._warm.append(h)
            else:
                found[(st.query, st.generation, st.shard)] = (h, st)
        for q in self._queries.values():
            mine = [found.get((q.name, q.record.generation, i)) for i in range(q.shards)]
            whole = [m for m in mine if m is not None and m[1].shards == q.shards
                     and m[1].versions]
            if len(whole) == q.shards:
                for i in range(q.shards):
                    del found[(q.name, q.record.generation, i)]
                self._adopt(q, [h for h, _ in whole], [st for _, st in whole])
                self.counters["reattached_queries"] += 1
                if all(v == q.shard_versions[0] for v in q.shard_versions):
                    self._publish(q, q.shard_versions[0], 0.0)
        for h, _ in found.values():
            h.kill()  # a dropped query's, an older generation's or a partial query's actor

    @staticmethod
    def _adopt(q: _Query, handles: list[WorkerHandle], statuses: list[WorkerStatus]) -> None:
        q.handles = handles
        q.shard_versions = [dict(s.versions) for s in statuses]
        q.shard_sketches = [BitMap.deserialize(s.sketch) for s in statuses]
        q.shard_bytes = [s.state_bytes for s in statuses]

    # -- tables ---------------------------------------------------------------------------
    def tables(self) -> list[str]:
        return self.store.tables()

    def catalog(self) -> dict[str, pa.Schema]:
        return {t: self.feed.schema(t) for t in self.store.tables()}

    def apply_update(self, table: str, inserts: pa.Table | None = None,
                     deletes: pa.Table | None = None,
                     updates: tuple[pa.Table, pa.Table] | None = None) -> UpdateResult:
        """Commit deletions (and updates' old rows) and insertions (and updates' new rows)
        as one table version. A refused batch commits nothing."""
        table = table.lower()
        if updates is not None:
            old, new = updates
            deletes = old if deletes is None else pa.concat_tables(
                [deletes, old.select(deletes.schema.names)], promote_options="permissive")
            inserts = new if inserts is None else pa.concat_tables(
                [inserts, new.select(inserts.schema.names)], promote_options="permissive")
        n_ins = 0 if inserts is None else inserts.num_rows
        n_del = 0 if deletes is None else deletes.num_rows
        with self._store_lock:
            version = self.store.apply(table, inserts=inserts, deletes=deletes)
            if n_ins + n_del:
                self.feed.record(table, version, self._own_changes(table, inserts, deletes))
        self.probe.note(table, version)
        self.counters["updates"] += 1
        maintained = self._note_commit(table, version, n_ins + n_del)
        return UpdateResult(table, version, n_ins, n_del, tuple(maintained))

    def _own_changes(self, table: str, inserts: pa.Table | None, deletes: pa.Table | None
                     ) -> TableDelta:
        """The change feed of a version this coordinator just committed: the store
        accepted exactly these rows (deleted rows equal stored ones), so they are it."""
        from imp_core.storage.batches import conform, plain_strings

        schema = self.feed.schema(table)
        parts, weights = [], []
        for batch, w, what in ((deletes, -1, "delete batch"), (inserts, 1, "insert batch")):
            if batch is not None and batch.num_rows:
                parts.append(plain_strings(conform(batch, schema, table, what)))
                weights.append(np.full(batch.num_rows, w, dtype=np.int64))
        return TableDelta(pa.concat_tables(parts), np.concatenate(weights))

    def _note_commit(self, table: str, version: int, tuples: int) -> list[str]:
        """Account a new version of ``table`` to the eager queries reading it; returns the
        queries whose maintenance it triggered."""
        with self._lock:
            seen = self._seen_versions.get(table, -1)
            if version <= seen:
                return []
            self._seen_versions[table] = version
            names = sorted(self._routes.get(table, ()))
            queries = [self._queries[n] for n in names if n in self._queries]
        now = time.time()
        triggered = []
        for q in queries:
            strategy = q.strategy
            if not isinstance(strategy, Eager):
                continue
            q.pending_tuples += tuples
            if q.pending_since is None:
                q.pending_since = now
            if q.pending_tuples >= strategy.batch_tuples:
                self._schedule(q)
                triggered.append(q.name)
        return triggered

    # -- registration ---------------------------------------------------------------------
    def register(self, spec: QuerySpec) -> QueryInfo:
        from imp_core.safety import require_safe
        from imp_core.sql import parse_sketch_header, plan_sql

        name = spec.name
        if not _NAME.match(name or ""):
            raise InvalidNameError(f"query name {name!r} must start with a letter and hold "
                                 "only letters, digits, '_', '.', '-' (at most 64)")
        if spec.shards < 1:
            raise PartitionError("a query needs at least one shard")
        with self._lock:
            if name in self._queries:
                raise QueryExistsError(f"a query named {name!r} is already registered")
        plan = plan_sql(spec.sql, self.catalog())
        partitions = spec.partitions
        fragments = spec.fragments or self.config.default_fragments
        if partitions is None:
            header = parse_sketch_header(spec.sql)
            if not header:
                raise PartitionError("no partitions given and the SQL has no "
                                     "'-- sketch: table.column' header")
            partitions = {f"{t}.{c}": fragments for t, c in header}
        tables = sorted(plan.root.tables())
        versions = {t: self.probe.latest(t) for t in tables}
        pset = build_partition_set(
            partitions, self.store.schema,
            lambda t, c: self.store.read(t, versions.get(t), columns=[c]).column(0))
        columns = {t: self.store.schema(t).names for t in self.store.tables()}
        domains = {t: dict(self.store.entry(t).domains or {}) for t in tables}
        require_safe(plan, [(p.table, p.column) for p in pset.partitions], domains=domains,
                     force=spec.force, table_columns=columns)
        if spec.shards > 1:
            shard_key(plan)  # raises with the reason when the plan cannot be split
        record = QueryRecord(name, spec.sql, partitions_to_records(pset),
                             strategy_to_json(spec.strategy), spec.force, spec.shards)
        q = self._make_query(record, plan, pset)
        with self._lock:
            if name in self._queries:
                raise QueryExistsError(f"a query named {name!r} is already registered")
            self._queries[name] = q
        try:
            with q.lock:
                self._make_room(q)
                self._bootstrap(q)
                self.registry.put(record)
        except BaseException:
            with self._lock:
                self._queries.pop(name, None)
            self._stop_actors(q)
            raise
        with self._lock:
            self._route(q)
        self.counters["registered"] += 1
        return self.info(name)

    def _make_query(self, record: QueryRecord, plan: QueryPlan | None = None,
                    pset: PartitionSet | None = None) -> _Query:
        from imp_core.sql import plan_sql

        if plan is None:
            plan = plan_sql(record.sql, self.catalog())
        if pset is None:
            pset = partitions_from_records(list(record.partitions))
        key = shard_key(plan) if record.shards > 1 else None
        return _Query(record, plan, pset, scan_specs(plan.root, pset), key,
                      SketchHistory(record.name, self.config.sketch_versions_kept))

    def _route(self, q: _Query) -> None:
        for t in q.tables:
            self._routes.setdefault(t, set()).add(q.name)

    def drop(self, name: str) -> None:
        q = self._get(name)
        with q.lock:
            self.registry.remove(name)
            with self._lock:
                self._queries.pop(name, None)
                for names in self._routes.values():
                    names.discard(name)
            self._stop_actors(q)
            self.checkpoints.drop(name)
            q.history.close()
        self.counters["dropped"] += 1

    # -- reading ----------------------------------------------------------------------------
    def _get(self, name: str) -> _Query:
        with self._lock:
            q = self._queries.get(name)
        if q is None:
            raise UnknownQueryError(f"no registered query {name!r}")
        return q

    def queries(self) -> list[QueryInfo]:
        with self._lock:
            names = sorted(self._queries)
        out = []
        for n in names:
            try:
                out.append(self.info(n))
            except UnknownQueryError:
                continue  # dropped meanwhile
        return out

    def info(self, name: str) -> QueryInfo:
        q = self._get(name)
        latest = q.history.latest
        versions = latest.versions if latest else q.versions()
        return QueryInfo(
            name=q.name, sql=q.record.sql, tables=q.tables, partitions=tuple(
                p.to_json() for p in q.partitions.partitions),
            strategy=q.strategy, shards=q.shards,
            state="live" if q.live else "evicted", versions=dict(versions),
            sketch_seq=latest.seq if latest else 0,
            sketch_fragments=len(latest.sketch.fragments) if latest else 0,
            total_fragments=q.partitions.size, state_bytes=q.state_bytes,
            pending_tuples=q.pending_tuples, last_used=q.last_used)

    def get_sketch(self, name: str, fresh: bool = True) -> SketchVersion:
        """``fresh``: the sketch at the latest committed versions (maintaining first);
        otherwise the latest maintained sketch."""
        q = self._get(name)
        q.last_used = time.time()
        latest = q.history.latest
        if not fresh:
            if latest is None:  # an evicted query after a restart: restore it
                with q.lock:
                    self._ensure_live(q)
                latest = q.history.latest
            assert latest is not None
            return latest
        target = {t: self.probe.latest(t) for t in q.tables}
        if latest is not None and dict(latest.versions) == target:
            self.counters["sketch_hits"] += 1
            return latest
        return self._maintain(q, target)

    def sketch_version(self, name: str, seq: int) -> SketchVersion:
        return self._get(name).history.get(seq)

    def watch(self, name: str, after_seq: int = 0, timeout: float | None = None
              ) -> SketchVersion | None:
        return self._get(name).history.next_after(after_seq, timeout)

    # -- maintenance ------------------------------------------------------------------------
    def maintain(self, queries: list[str] | None = None, tables: list[str] | None = None
                 ) -> dict[str, SketchVersion]:
        names = set(queries or [])
        if tables:
            with self._lock:
                for t in tables:
                    names |= self._routes.get(t.lower(), set())
        if not queries and not tables:
            with self._lock:
                names = set(self._queries)
        out = {}
        for n in sorted(names):
            q = self._get(n)
            out[n] = self._maintain(q, {t: self.probe.latest(t) for t in q.tables})
        return out

    def _maintain(self, q: _Query, target: Mapping[str, int]) -> SketchVersion:
        with q.lock:
            q.busy = True
            try:
                self._ensure_live(q)
                latest = q.history.latest
                current = q.shard_versions
                if latest is not None and all(v == dict(target) for v in current) \
                        and dict(latest.versions) == dict(target):
                    return latest
                t0 = time.perf_counter()
                self._advance(q, dict(target))
                seconds = time.perf_counter() - t0
                self.timings["maintain_s"].append(seconds)
                del self.timings["maintain_s"][:-1000]
                self.counters["maintenance_batches"] += 1
                version = self._publish(q, dict(target), seconds)
                q.pending_tuples, q.pending_since = 0, None
                q.batches_since_checkpoint += 1
                every = self.config.checkpoint_every_batches
                if every and q.batches_since_checkpoint >= every:
                    self._checkpoint_locked(q)
                self._prune_feed(q.tables)
                return version
            finally:
                q.busy = False

    def _advance(self, q: _Query, target: dict[str, int]) -> None:
        """Bring every shard to ``target``, recovering shards that die on the way."""
        for _attempt in range(_RETRIES):
            assert q.handles is not None
            pending, todo = [], []
            for i, (h, have) in enumerate(zip(q.handles, q.shard_versions)):
                if have == target:
                    continue
                changes = self._shard_changes(q, i, have, target)
                pending.append(h.submit("apply", changes, have, target))
                todo.append(i)
            lost = []
            for i, p in zip(todo, pending):
                try:
                    res: ApplyResult = p.result()
                except WorkerLostError as exc:
                    log.warning("%s shard %d lost during maintenance: %s", q.name, i, exc)
                    lost.append(i)
                    continue
                q.shard_versions[i] = dict(res.versions)
                q.shard_sketches[i] = BitMap.deserialize(res.sketch)
                q.shard_bytes[i] = res.state_bytes
            if not lost:
                return
            self.counters["actor_failures"] += len(lost)
            for i in lost:
                self._recover_shard(q, i)
        raise WorkerLostError(f"{q.name}: shards kept dying during maintenance "
                              f"({_RETRIES} attempts)")

    def _shard_changes(self, q: _Query, shard: int, have: Mapping[str, int],
                       target: Mapping[str, int]) -> dict[str, TableDelta]:
        out = {}
        for t in q.tables:
            if target[t] == have.get(t, -1):
                continue
            full = self.feed.changes(t, have[t], target[t])
            mine = restrict_delta(full, q.specs.get(t))
            out[t] = route_rows(t, mine, q.key, q.shards)[shard]
        return out

    def _publish(self, q: _Query, versions: dict[str, int], seconds: float) -> SketchVersion:
        fragments = BitMap()
        for s in q.shard_sketches:
            fragments |= s
        last = q.history.latest
        version = SketchVersion(q.name, (last.seq + 1) if last else 1, dict(versions),
                                Sketch(q.partitions, fragments), maintain_seconds=seconds)
        q.history.append(version)
        return version

    def _prune_feed(self, tables: tuple[str, ...]) -> None:
        with self._lock:
            queries = list(self._queries.values())
        for t in tables:
            floors = [min(v.get(t, 0) for v in q.shard_versions) for q in queries
                      if t in q.tables and q.shard_versions]
            if floors:
                self.feed.prune(t, min(floors))

    # -- actors -----------------------------------------------------------------------------
    def _spawn(self) -> WorkerHandle:
        """An empty worker: a warm one when available (no process start-up)."""
        with self._warm_lock:
            if self._warm:
                return self._warm.pop()
        return self.backend.spawn(f"{WORKER_PREFIX}{uuid.uuid4().hex[:12]}")

    def _keep_warm(self) -> None:
        with self._warm_lock:
            missing = self.config.warm_actors - len(self._warm)
        for _ in range(max(missing, 0)):
            h = self.backend.spawn(f"{WORKER_PREFIX}{uuid.uuid4().hex[:12]}")
            h.call("ping")  # wait until its process runs
            with self._warm_lock:
                self._warm.append(h)

    def _spec(self, q: _Query, shard: int) -> WorkerSpec:
        return WorkerSpec(q.name, shard, q.shards, q.record.generation, q.plan, q.partitions,
                          self.options, self.config.checkpoints_dir)

    def _ensure_live(self, q: _Query) -> None:
        """Actors for every shard of ``q`` (caller holds ``q.lock``)."""
        if q.live:
            return
        t0 = time.perf_counter()
        self._make_room(q)

        def restore(i: int, h: WorkerHandle) -> WorkerStatus:
            st = self._load_newest_checkpoint(q, i, h)
            return st or self._rebuild_shard(q, i, h, "it has no usable checkpoint")

        self._start_shards(q, restore)
        self.counters["restores"] += 1
        if q.history.latest is None:  # first restore after a coordinator restart
            self._publish(q, self._align_shards(q), 0.0)
        self.timings["restore_s"].append(time.perf_counter() - t0)
        del self.timings["restore_s"][:-1000]

    def _start_shards(self, q: _Query,
                      prepare: Callable[[int, WorkerHandle], WorkerStatus]) -> None:
        """A worker per shard, each prepared by ``prepare(shard, handle)``; all or none
        (on failure the started workers are stopped and ``q`` is left as it was)."""
        handles: list[WorkerHandle] = []
        statuses: list[WorkerStatus] = []
        try:
            for i in range(q.shards):
                handles.append(self._spawn())
                statuses.append(prepare(i, handles[-1]))
        except BaseException:
            for h in handles:
                h.kill()
            raise
        finally:
            q.capture = None  # a Spark capture serves one start of the shards only
        self._adopt(q, handles, statuses)

    def _align_shards(self, q: _Query) -> dict[str, int]:
        """Bring shards that differ (a commit landed between their captures, or a crash
        hit mid-batch) to the newest of their versions; returns those versions."""
        target = {t: max(v[t] for v in q.shard_versions) for t in q.tables}
        if any(v != target for v in q.shard_versions):
            self._advance(q, target)
        return target

    def _load_newest_checkpoint(self, q: _Query, shard: int, h: WorkerHandle
                                ) -> WorkerStatus | None:
        for name in self.checkpoints.names(q.name, q.record.generation, shard):
            try:
                return h.call("load", self._spec(q, shard), name)
            except SnapshotError as exc:
                log.warning("checkpoint %s of %s is unusable (%s); trying an older one",
                            name, q.name, exc)
                self.counters["damaged_checkpoints"] += 1
        return None

    def _rebuild_shard(self, q: _Query, shard: int, h: WorkerHandle,
                       reason: str | None = None) -> WorkerStatus:
        """Capture a shard's state from the tables at their latest versions (``reason``:
        why a registered query's shard is recaptured; None for a first capture)."""
        if reason is not None:
            log.warning("%s shard %d: %s; recapturing its state from the tables",
                        q.name, shard, reason)
            self.counters["recaptures"] += 1
        else:
            self.counters["captures"] += 1
        versions = {t: self.probe.latest(t) for t in q.tables}
        if self._spark_bootstrap(q, versions):
            states = self._spark_states(q, versions)
            return h.call("load", self._spec(q, shard), None, (states[shard], versions))
        h.call("load", self._spec(q, shard), None)
        changes = {}
        for t in q.tables:
            rows = self.store.read(t, versions[t], columns=self._read_columns(q, t))
            mine = restrict_delta(TableDelta.inserts(rows), q.specs.get(t))
            changes[t] = route_rows(t, mine, q.key, q.shards)[shard]
        h.call("apply", changes, {}, versions)
        return h.call("status")

    def _read_columns(self, q: _Query, table: str) -> list[str] | None:
        """The columns of ``table`` that ``q`` reads (its scan spec's and its pushed-down
        selection's), in table order; None (all) when it has no spec."""
        spec = q.specs.get(table)
        if spec is None:
            return None
        wanted = set(spec.columns)
        if spec.predicate is not None:
            wanted |= spec.predicate.columns()
        names = self.feed.schema(table).names
        if not wanted <= set(names):  # names the spec holds but the table lacks: read all
            return None
        return [c for c in names if c in wanted]

    def _spark_bootstrap(self, q: _Query, versions: Mapping[str, int]) -> bool:
        """Whether ``q``'s first state is computed on Spark: by configuration, or (auto)
        when the bytes of the columns it reads exceed ``spark_bootstrap_min_bytes``."""
        mode = self.config.bootstrap
        if mode != "auto":
            return mode == "spark"
        limit = self.config.spark_bootstrap_min_bytes
        size = 0
        for t, v in versions.items():
            size += self.store.column_bytes(t, v, self._read_columns(q, t), limit - size + 1)
            if size > limit:
                return True
        return False

    def _spark_states(self, q: _Query, versions: Mapping[str, int]) -> list[dict]:
        """Every shard's first state computed on Spark (imp_core.spark.bootstrap): the
        whole query's state, re-split by the routing column when sharded. One Spark run
        serves all shards of a capture."""
        from imp_actors.resharding import reshard

        if q.capture is not None and q.capture[0] == dict(versions) \
                and len(q.capture[1]) == q.shards:
            return q.capture[1]
        tables = self.spark.first_state(q.plan, q.partitions, self.options, versions)
        states = [tables] if q.shards == 1 else \
            reshard([tables], q.plan, q.partitions, self.options, q.key, q.shards)
        q.capture = (dict(versions), states)
        self.counters["spark_bootstraps"] += 1
        return states

    def _bootstrap(self, q: _Query) -> None:
        """First state of a new query (or of a new shard generation), from the tables."""
        self._start_shards(q, lambda i, h: self._rebuild_shard(q, i, h))
        self._publish(q, self._align_shards(q), 0.0)
        q.batches_since_checkpoint = 0
        self._checkpoint_locked(q)

    def _recover_shard(self, q: _Query, shard: int) -> None:
        """Replace a dead shard worker: newest checkpoint, else rebuild."""
        assert q.handles is not None
        q.handles[shard].kill()
        h = self._spawn()
        st = self._load_newest_checkpoint(q, shard, h)
        if st is None:
            st = self._rebuild_shard(q, shard, h, "its actor died and no checkpoint is usable")
            q.capture = None
        q.handles[shard] = h
        q.shard_versions[shard] = dict(st.versions)
        q.shard_sketches[shard] = BitMap.deserialize(st.sketch)
        q.shard_bytes[shard] = st.state_bytes
        self.counters["actor_recoveries"] += 1

    def _kill_warm(self) -> None:
        with self._warm_lock:
            warm, self._warm = self._warm, []
        for h in warm:
            h.kill()

    def _stop_actors(self, q: _Query) -> None:
        for h in q.handles or []:
            h.kill()
        q.handles = None
        q.shard_versions, q.shard_sketches, q.shard_bytes = [], [], []

    def _make_room(self, incoming: _Query) -> None:
        """Evict least recently used queries so that ``incoming`` fits the limits. Busy
        queries are passed over at first; if that is not enough, the last round waits
        (bounded) for them to finish their maintenance."""
        for final in (False, True):
            with self._lock:
                live = [LiveQuery(q.name, len(q.handles or ()), q.last_used, q.state_bytes,
                                  q.busy and not final)
                        for q in self._queries.values() if q.live and q is not incoming]
            victims = choose_victims(live, self.config.eviction, time.time(),
                                     incoming_actors=incoming.shards, protect=[incoming.name])
            if not victims:
                return
            for name in victims:
                try:
                    self._evict(self._get(name), timeout=10.0 if final else 0.0)
                except UnknownQueryError:
                    continue

    # -- checkpoints, eviction, restore, scaling --------------------------------------------
    def checkpoint(self, name: str) -> list[CheckpointInfo]:
        q = self._get(name)
        with q.lock:
            if not q.live:
                return [self._checkpoint_info(q, i) for i in range(q.shards)]
            return self._checkpoint_locked(q)

    def _checkpoint_info(self, q: _Query, shard: int) -> CheckpointInfo:
        """The newest checkpoint of an evicted query's shard (read and verified)."""
        import hashlib

        from imp_core.engine.snapshot import read_snapshot

        names = self.checkpoints.names(q.name, q.record.generation, shard)
        if not names:
            raise SnapshotError(f"{q.name} shard {shard} has no checkpoint")
        blob = self.checkpoints.read(names[0])
        meta, _ = read_snapshot(blob)
        uri = self.checkpoints.blobs.path(names[0])
        return CheckpointInfo(q.name, shard, uri, dict(meta.get("versions", {})), len(blob),
                              hashlib.sha256(blob).hexdigest(),
                              self.checkpoints.blobs.fs.get_file_info(uri).mtime.timestamp())

    def _checkpoint_locked(self, q: _Query) -> list[CheckpointInfo]:
        assert q.handles is not None
        infos = []
        for i, p in enumerate([h.submit("checkpoint") for h in q.handles]):
            try:
                infos.append(p.result())
            except WorkerLostError:
                self._recover_shard(q, i)
                infos.append(q.handles[i].call("checkpoint"))
        q.batches_since_checkpoint = 0
        self.counters["checkpoints"] += len(infos)
        return infos

    def evict(self, name: str) -> None:
        self._evict(self._get(name))

    def _evict(self, q: _Query, timeout: float | None = None) -> bool:
        """Checkpoint and stop ``q``'s actors; waits for its lock up to ``timeout`` seconds
        (None: as long as it takes) and gives up (False) if it stays busy."""
        if not q.lock.acquire(timeout=-1 if timeout is None else timeout):
            return False
        try:
            if not q.live:
                return True
            self._checkpoint_locked(q)
            self._stop_actors(q)
            self.counters["evictions"] += 1
            return True
        finally:
            q.lock.release()

    def restore(self, name: str) -> QueryInfo:
        q = self._get(name)
        q.last_used = time.time()
        self._maintain(q, {t: self.probe.latest(t) for t in q.tables})
        return self.info(name)

    def scale(self, name: str, shards: int) -> QueryInfo:
        """Split the query's state over ``shards`` actors. The live shards' operator state
        is re-split by the routing column (``imp_actors.resharding``), no table is read;
        updates committed meanwhile are later versions, applied next."""
        from imp_actors.resharding import reshard

        if shards < 1:
            raise PartitionError("a query needs at least one shard")
        q = self._get(name)
        with q.lock:
            if shards == q.shards:
                return self.info(name)
            key = shard_key(q.plan)  # raises with the reason when the plan cannot split
            self._ensure_live(q)
            assert q.handles is not None
            common = {t: max(v[t] for v in q.shard_versions) for t in q.tables}
            self._advance(q, common)
            states = [st for st, _ in gather([h.submit("state") for h in q.handles])]
            parts = reshard(states, q.plan, q.partitions, self.options, key, shards)
            record = q.record.with_shards(shards)
            fresh = _Query(record, q.plan, q.partitions, q.specs,
                           key if shards > 1 else None, q.history)
            self._make_room(fresh)
            self._start_shards(fresh, lambda i, h: h.call(
                "load", self._spec(fresh, i), None, (parts[i], common)))
            old = q.handles
            q.record, q.key = record, fresh.key
            q.handles, q.shard_versions = fresh.handles, fresh.shard_versions
            q.shard_sketches, q.shard_bytes = fresh.shard_sketches, fresh.shard_bytes
            self._checkpoint_locked(q)
            self.registry.put(record)
            for h in old:
                h.kill()
            self.checkpoints.drop(name, keep_generation=record.generation)
            self.counters["rescales"] += 1
        return self.info(name)

    # -- queries on Spark -------------------------------------------------------------------
    def run_query(self, sql: str | None = None, query: str | None = None,
                  use_sketch: bool = True) -> QueryResult:
        """Run a SELECT on Spark over the tables' versions of the sketch it uses (or the
        latest versions without one); with ``use_sketch`` the scans read only the
        sketch's fragments."""
        from imp_core.sql import plan_sql

        registered = self._get(query) if query else None
        if sql is None and registered is None:
            raise PartitionError("run_query needs SQL or the name of a registered query")
        plan = registered.plan if sql is None else plan_sql(sql, self.catalog())
        if registered is None and use_sketch:
            registered = self._find_by_plan(plan)
            if registered is None:
                raise UnknownQueryError("no registered query has this plan; register it "
                                        "first or run it without a sketch")
        version = None
        if use_sketch and registered is not None:
            version = self.get_sketch(registered.name, fresh=True)
            versions = dict(version.versions)
        else:
            versions = {t: self.probe.latest(t) for t in sorted(plan.root.tables())}
        run = self.spark.run(plan, versions, version.sketch if version else None)
        return replace(run, sketch=version)

    def recapture(self, name: str, versions: Mapping[str, int] | None = None
                  ) -> tuple[Sketch, float]:
        """Full maintenance (the paper's FM): the accurate sketch recaptured by Spark from
        the tables at ``versions`` (default: the query's latest sketch's), and its time."""
        q = self._get(name)
        if versions is None:
            latest = q.history.latest
            versions = dict(latest.versions) if latest else \
                {t: self.probe.latest(t) for t in q.tables}
        self.counters["recaptures_fm"] += 1
        return self.spark.recapture(q.plan, q.partitions, versions)

    def _find_by_plan(self, plan: QueryPlan) -> _Query | None:
        fp = plan.fingerprint()
        with self._lock:
            for q in self._queries.values():
                if q.plan.fingerprint() == fp:
                    return q
        return None

    # -- background: polling, eager flushes, idle eviction ----------------------------------
    def _schedule(self, q: _Query) -> None:
        if q.scheduled or self._pool is None or self._stop.is_set():
            return
        q.scheduled = True

        def job() -> None:
            try:
                if not q.live:
                    return  # evicted: it catches up when it is next used
                self._maintain(q, {t: self.probe.latest(t) for t in q.tables})
                self.counters["eager_batches"] += 1
            except UnknownQueryError:
                pass
            except Exception as exc:  # one query's failure must not stop the others
                log.error("eager maintenance of %s failed: %s", q.name, exc)
                self.counters["maintenance_errors"] += 1
            finally:
                q.scheduled = False

        try:
            self._pool.submit(job)
        except RuntimeError:  # shutting down
            q.scheduled = False

    def _background(self) -> None:
        while not self._stop.wait(0.05):
            try:
                self._tick()
            except Exception as exc:  # keep the loop alive; log and go on
                log.error("coordinator background step failed: %s", exc)
                self.counters["background_errors"] += 1

    def _tick(self) -> None:
        now = time.time()
        poll = self.config.poll_seconds
        if poll is not None and now - self._last_poll >= poll:
            self._last_poll = now
            self.poll()
        with self._lock:
            queries = list(self._queries.values())
        for q in queries:
            strategy = q.strategy
            if isinstance(strategy, Eager) and q.pending_since is not None \
                    and strategy.max_delay_s is not None \
                    and now - q.pending_since >= strategy.max_delay_s:
                self._schedule(q)
        if self.config.warm_actors > 0:
            self._keep_warm()
        pol = self.config.eviction
        if pol.idle_seconds is not None or pol.memory_budget_bytes is not None:
            live = [LiveQuery(q.name, len(q.handles or ()), q.last_used, q.state_bytes,
                              q.busy or q.scheduled) for q in queries if q.live]
            for name in choose_victims(live, pol, now):
                with self._lock:
                    victim = self._queries.get(name)
                if victim is not None:
                    self._evict(victim, timeout=0.0)

    def poll(self) -> dict[str, int]:
        """Look for versions committed by other writers; account them to eager queries."""
        with self._lock:
            tables = sorted(self._routes)
        found = {}
        for t in tables:
            try:
                latest = self.probe.latest(t)
            except ImpError:
                continue
            seen = self._seen_versions.get(t)
            if seen is None:
                self._seen_versions[t] = latest
                continue
            if latest > seen:
                tuples = count_changes(self.feed.changes(t, seen, latest))
                self._note_commit(t, latest, tuples)
                found[t] = latest
                self.counters["external_versions"] += latest - seen
        return found

    # -- statistics -------------------------------------------------------------------------
    def stats(self) -> dict[str, Any]:
        with self._lock:
            queries = list(self._queries.values())
        live = [q for q in queries if q.live]
        maint = sorted(self.timings["maintain_s"])
        return {
            "backend": self.backend.kind,
            "registered_queries": len(queries),
            "live_queries": len(live),
            "live_actors": sum(len(q.handles or ()) for q in live),
            "state_bytes_live": sum(q.state_bytes for q in live),
            "tables": sorted(self._routes),
            "nodes": self.backend.nodes(),
            "feed": {"pulls": self.feed.stats.pulls, "hits": self.feed.stats.hits,
                     "spark_pulls": self.feed.stats.spark_pulls,
                     "pulled_rows": self.feed.stats.pulled_rows,
                     "cached_bytes": self.feed.cached_bytes()},
            "maintain_ms_p50": 1000 * maint[len(maint) // 2] if maint else None,
            "counters": dict(self.counters),
        }

    def placement(self, name: str) -> list[str]:
        """The Ray node (or "local") of each live shard of a query."""
        q = self._get(name)
        with q.lock:
            self._ensure_live(q)
            assert q.handles is not None
            if self.backend.kind != "ray":
                return ["local"] * len(q.handles)
            return gather([h.submit("node") for h in q.handles])
