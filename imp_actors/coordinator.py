"""The coordinator: registered queries, their actors, and the deltas that keep them fresh.

``Coordinator`` is the thread-safe front object; the work is done by its parts:
- ``registration.Registration``: SQL to plan, partitions and safety; register and drop;
- ``shards.ShardManager``: workers (spawn, warm pool, adopt survivors, recover a lost
  shard, start all shards of a query);
- ``state_manager.StateManager``: checkpoint, evict, restore, rescale, make room;
- ``maintenance.Maintenance``: advance shards, per-shard changes, publish versions;
- ``control_loop.ControlLoop``: polling for other writers, eager scheduling, and the
  reconcile loop (``reconcile.Reconciler``): each query's target (live or evicted, its
  shards) against its actual state, idle eviction, autoscaling, dead shards;
- ``spark_work.SparkWork``: queries, recaptures and first states on Spark;
- ``table_writes.TableWriter``: update batches committed through the service.
Each query moves along an explicit lifecycle (``lifecycle.QueryState``). The parts are
reached as attributes (``ctx`` holds the stores and counters they share); the
coordinator does not re-export them.

Locks: the coordinator has no lock of its own; the query directory's lock guards the
set of queries and each query's lock its runtime (lock order in ``state_manager``).

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
import time
from dataclasses import replace
from pathlib import Path
from typing import Any, Callable, Mapping

import pyarrow as pa

from imp_actors.adaptive_ranges import AdaptiveRanges
from imp_actors.checkpoints import CheckpointStore
from imp_actors.context import QueryDirectory, RuntimeContext
from imp_actors.control_loop import ControlLoop
from imp_actors.diagnostics import Diagnostics
from imp_actors.feed import DeltaFeed, VersionProbe
from imp_actors.freshness import Freshness
from imp_actors.handles import make_backend
from imp_actors.incidents import Incidents
from imp_actors.layouts import Layouts
from imp_actors.lease import StoreLease
from imp_actors.lifecycle import QueryRuntime
from imp_actors.maintenance import Maintenance
from imp_actors.reconcile import Want
from imp_actors.registration import Registration
from imp_actors.registry import CallRecord, QueryRecord, Registry
from imp_actors.runtime_config import RuntimeConfig
from imp_actors.runtime_metrics import query_load, runtime_metrics
from imp_actors.runtime_watch import RuntimeState, RuntimeWatch
from imp_actors.shards import ShardManager
from imp_actors.sketch_reuse import choose_sketch
from imp_actors.spark_work import SparkWork
from imp_actors.state_manager import StateManager
from imp_actors.storage import BlobStore
from imp_actors.table_writes import TableWriter
from imp_actors.types import (
    CheckpointInfo,
    QueryInfo,
    QueryResult,
    QuerySpec,
    RuntimeMetrics,
    SketchVersion,
    UpdateResult,
)
from imp_core.engine.pipeline import EngineOptions
from imp_core.errors import PartitionError, QuarantinedRequestError, UnknownQueryError
from imp_core.sketch.partition import PartitionSet
from imp_core.sketch.sketch import Sketch
from imp_core.storage.calls import AppliedCall, CallTag
from imp_core.storage.scan_spec import ScanSpec

log = logging.getLogger(__name__)


class Coordinator:
    """See the module docstring. Thread-safe; every public method may be called from
    any thread (the gRPC servicer calls them concurrently)."""

    def __init__(self, config: RuntimeConfig | None = None, store: Any = None,
                 options: EngineOptions | None = None):
        from imp_core.storage import DeltaStore

        config = config or RuntimeConfig.from_env()
        store = store if store is not None else DeltaStore(config.tables_dir)
        spark = SparkWork(store)
        feed = DeltaFeed(store, spark_source=spark.delta_source,
                         spark_min_bytes=config.spark_delta_min_bytes,
                         cache_bytes=config.delta_cache_bytes)
        blobs = BlobStore(config.registry_dir)
        lease = StoreLease(blobs, config.lease_seconds)
        self.ctx = RuntimeContext(
            config, store, options or EngineOptions(topk_buffer=config.topk_buffer),
            make_backend(config),
            Registry(blobs, fence=lease.check), CheckpointStore(config.checkpoints_dir),
            VersionProbe(store), spark, feed, QueryDirectory(), lease)
        self.shards = ShardManager(self.ctx)
        self.maintenance = Maintenance(self.ctx, self.shards)
        self.state = StateManager(self.ctx, self.shards, self.maintenance)
        self.ranges = self.state.ranges = AdaptiveRanges(self.ctx, self.state)
        self.writer = TableWriter(self.ctx)
        self.layouts = Layouts(self.ctx, self.writer)
        self.loop = ControlLoop(self.ctx, self.shards, self.state, self.layouts)
        self.registration = Registration(self.ctx, self.shards, self.state, self.catalog)
        self.freshness = Freshness(self.ctx)
        # where shards run, their operators' counters, killing one (tools and tests)
        self.diagnostics = Diagnostics(self.ctx, self.shards, self.state)
        self.runtime = RuntimeWatch(self.ctx.backend, self.ctx.counters,
                                    config.runtime_check_s)
        # requests that ended a server process: recorded, read back, quarantined
        self.incidents = self.state.incidents = Incidents(
            blobs, Path(config.journal_dir), fence=lease.check)
        self._started = False
        self._prepared = False

    @property
    def config(self) -> RuntimeConfig:
        return self.ctx.config

    @property
    def embedded_ray(self) -> bool:
        """Its actors live on a local Ray it started (lost with it, never recovered
        in this process)."""
        return bool(getattr(self.ctx.backend, "started_ray", False))

    # -- life cycle ---------------------------------------------------------------------
    def prepare(self) -> Coordinator:
        """Start what needs no store lease, so that a standby's take-over does not wait
        for it: the actor runtime (Ray started or joined) and, on a Ray of its own, its
        warm workers (empty, they hold no query's state). Nothing of the store is read
        or written; ``start`` calls it too."""
        if not self._prepared:
            self.ctx.backend.start()
            if self.embedded_ray:  # never on a shared cluster the active server watches
                self.shards.keep_warm()
            self._prepared = True
        return self

    def start(self, standby_for: str | None = None) -> Coordinator:
        """Take the store's lease, recover the registered queries and start the
        background work. ``standby_for``: the owner a standby waited for (its take-over
        is logged and counted even when that owner gave the lease back)."""
        if not self._started:
            lease = self.ctx.lease
            assert lease is not None
            t0 = time.monotonic()
            lease.acquire()  # one coordinator per store, before anything starts
            previous = lease.took_over or standby_for
            if previous:  # a fail-over: the previous owner died, was cut off or stopped
                self.ctx.counters["lease_takeovers"] += 1
            lease.start_heartbeat()
            try:
                # the registry as the previous owner left it (a standby waited meanwhile)
                self.ctx.registry.reload()
                # what dead predecessors were doing: logged, its culprit quarantined
                self.incidents.collect(lease.took_over)
                self.prepare()
                self.state.resume(self._recover)
                self.loop.start()
                self.runtime.start()
                self.loop.restore_eager()
            except BaseException:
                self.loop.stop(wait=False)
                lease.release()
                raise
            self._started = True
            if previous:
                log.warning("took the store %s over from %s (generation %d): %d queries "
                            "recovered in %.2f s", self.config.registry_dir, previous,
                            lease.generation, len(self.ctx.queries.all()),
                            time.monotonic() - t0)
        return self

    def _recover(self, record: QueryRecord) -> QueryRuntime:
        """``Registration.recover``, unless the query's maintenance ended a server."""
        entry = self.incidents.query_quarantined(record.name)
        if entry is not None:
            raise QuarantinedRequestError(f"quarantined, not recovered: {entry.reason}; "
                                          "drop it, or register it again once fixed")
        return self.registration.recover(record)

    def __enter__(self) -> Coordinator:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self, checkpoint: bool = True) -> None:
        """Stop background work; checkpoint live queries and stop their actors."""
        self.runtime.stop()
        self.loop.stop(wait=True)
        self.ranges.stop(wait=True)
        self.state.shutdown(checkpoint)
        self.shards.kill_warm()
        self.ctx.backend.shutdown()
        if self._started and self.ctx.lease is not None:
            self.ctx.lease.release()
        self.incidents.close()
        self._started = self._prepared = False

    def abandon(self) -> None:
        """Stop this coordinator's threads without checkpointing or stopping actors: what
        a crash leaves behind (for recovery tests and tools)."""
        self.runtime.stop(wait=False)
        self.loop.stop(wait=False)
        self.ranges.stop(wait=False)
        if self.ctx.lease is not None:
            self.ctx.lease.abandon()  # its heartbeat stops, as a dead process's would
        for q in self.ctx.queries.all():
            q.history.close()
        self._started = False

    # -- tables ---------------------------------------------------------------------------
    def tables(self) -> list[str]:
        return self.ctx.store.tables()

    def catalog(self) -> dict[str, pa.Schema]:
        return {t: self.ctx.feed.schema(t) for t in self.ctx.store.tables()}

    def apply_update(self, table: str, inserts: pa.Table | None = None,
                     deletes: pa.Table | None = None,
                     updates: tuple[pa.Table, pa.Table] | None = None,
                     call: CallTag | None = None) -> UpdateResult:
        """Commit deletions (and updates' old rows) and insertions (and updates' new rows)
        as one table version. A refused batch commits nothing. ``call``: the update's
        idempotency key; a call committed before is not committed again, its first
        outcome is returned (``UpdateResult.replayed``)."""
        table = table.lower()
        with self.loop.own_commit(table):
            done = self.writer.commit(table, inserts, deletes, updates, call)
            maintained = [] if done.replayed else \
                self.loop.note_commit(table, done.version, done.inserted + done.deleted)
        return UpdateResult(table, done.version, done.inserted, done.deleted,
                            tuple(maintained), replayed=done.replayed)

    def applied_update(self, key: str, table: str | None = None) -> AppliedCall | None:
        """The update with idempotency key ``key`` as committed to ``table`` (None: to any
        table of the store), or None: not committed within the retention window."""
        for name in [table.lower()] if table else self.tables():
            found = self.writer.applied(name, key)
            if found is not None:
                return found
        return None

    # -- registration ---------------------------------------------------------------------
    def register(self, spec: QuerySpec, call: CallTag | None = None) -> QueryInfo:
        """Register ``spec``; returns the query's ``QueryInfo`` as registered: a value,
        not a handle (no front of the service hands out a live object that could go
        stale). ``info``/``get_sketch`` by name answer the current state: re-partitions
        and rescales change the query's runtime in place, and a dropped query's name
        answers NOT_FOUND. ``call``: its idempotency key (``registered_call``)."""
        q = self.registration.register(spec, call)
        self.ctx.targets.set(q, want=Want.LIVE, shards=q.shards, by="register")
        return self.info(q.name)

    def drop(self, name: str, call: CallTag | None = None) -> None:
        try:
            q = self._get(name)
        except UnknownQueryError:
            # a registered query this coordinator could not recover (quarantined, or its
            # SQL no longer plans): only its record and checkpoints are left to remove
            if self.ctx.registry.get(name) is None:
                raise
            self.registration.drop_record(name, call)
            return
        self.registration.drop(q, call)
        self.ctx.targets.forget(name)

    def registered_call(self, key: str) -> CallRecord | None:
        """The registration or drop made with idempotency key ``key`` (within the
        registry's retention), or None."""
        return self.ctx.registry.call(key)

    def layout(self, table: str, columns: tuple[str, ...] = (),
               rows_per_group: int | None = None, dry_run: bool = False) -> dict[str, Any]:
        """Lay ``table`` out for its sketches (``layouts.Layouts``): ``result`` of the
        rewrite (none with ``dry_run``) and the ``advice``: every order weighed, with the
        order ``columns`` (if given, dry run or not) among them; its ``warnings`` name
        the queries the order written (or asked for, else recommended) makes read more,
        and those it makes lose their sketch on the table."""
        if dry_run:
            return {"result": None,
                    "advice": self.layouts.advise(table, tuple(columns)).to_json()}
        result, advice = self.layouts.apply(table, tuple(columns), rows_per_group)
        return {"result": result, "advice": advice.to_json()}

    def explain(self, name: str, fresh: bool = True) -> dict[str, Any]:
        """Why the query is sketched on its attributes (``Layouts.explain``)."""
        return self.layouts.explain(self._get(name), self.get_sketch(name, fresh))

    def _get(self, name: str) -> QueryRuntime:
        return self.ctx.queries.get(name)

    # -- reading ----------------------------------------------------------------------------
    def queries(self) -> list[QueryInfo]:
        out = []
        for n in self.ctx.queries.names():
            try:
                out.append(self.info(n))
            except UnknownQueryError:
                continue  # dropped meanwhile
        return out

    def info(self, name: str) -> QueryInfo:
        q = self._get(name)
        seq, fragments, versions = q.last_known() or (0, 0, q.versions())
        return QueryInfo(
            name=q.name, sql=q.record.sql, tables=q.tables, partitions=tuple(
                p.to_json() for p in q.partitions.partitions),
            strategy=q.strategy, shards=q.shards, state=q.state.reported,
            versions=versions, sketch_seq=seq, sketch_fragments=fragments,
            total_fragments=q.partitions.size, state_bytes=q.state_bytes,
            pending_tuples=q.pending_tuples, last_used=q.last_used,
            probed_join_sides=tuple(q.record.placement), autoscaling=q.autoscaling,
            load=query_load(q), indexes=q.indexes)

    def get_sketch(self, name: str, fresh: bool = True,
                   before_work: Callable[[], None] | None = None) -> SketchVersion:
        """``fresh``: the sketch at the latest committed versions (maintaining first);
        otherwise the latest maintained sketch. ``before_work`` is called before any
        maintenance starts (it may raise to not start it, e.g. for a client gone).
        ``SqlRuntimeError`` while the query raises (ANSI mode, ``imp_core.plan.ansi``)."""
        q = self._get(name)
        q.last_used = time.time()
        sv = self._sketch(q, fresh, before_work)
        q.check_errors()
        return sv

    def _sketch(self, q: QueryRuntime, fresh: bool,
                before_work: Callable[[], None] | None) -> SketchVersion:
        latest = q.history.latest
        if not fresh:
            if latest is None:  # an evicted query after a restart: restore it
                self.state.restore(q)
                latest = q.history.latest
            assert latest is not None
            return latest
        if latest is not None and self.freshness.current(q, latest):
            self.ctx.counters["sketch_hits"] += 1
            return latest
        if before_work is not None:
            before_work()
        return self.state.maintain(q, self.ctx.latest_versions(q))

    def answer_check(self, name: str, sv: SketchVersion, fresh: bool = True
                     ) -> Callable[[], bool]:
        """Whether ``get_sketch(name, fresh)`` would still answer ``sv`` without any work,
        as a check to call on every repeated request (``Freshness.answer_check``)."""
        return self.freshness.answer_check(self._get(name), sv, fresh)

    def sketch_version(self, name: str, seq: int) -> SketchVersion:
        return self._get(name).history.get(seq)

    def sketch_seqs(self, name: str) -> list[int]:
        """Sequence numbers of the query's kept sketch versions, oldest first."""
        return self._get(name).history.seqs()

    def watch(self, name: str, after_seq: int = 0, timeout: float | None = None
              ) -> SketchVersion | None:
        return self._get(name).history.next_after(after_seq, timeout)

    def scan_specs(self, name: str) -> dict[str, ScanSpec]:
        """What the query reads of each table (columns and pushed-down selection)."""
        return dict(self._get(name).scan_specs)

    # -- maintenance ------------------------------------------------------------------------
    def maintain(self, queries: list[str] | None = None, tables: list[str] | None = None
                 ) -> dict[str, SketchVersion]:
        return {q.name: self.state.maintain(q, self.ctx.latest_versions(q))
                for q in self.ctx.queries.select(queries, tables)}

    def poll(self) -> dict[str, int]:
        """Look for versions committed by other writers; account them to eager queries."""
        return self.loop.poll()

    def wait_idle(self, names: list[str], timeout: float = 60.0) -> bool:
        """True once none of ``names`` has maintenance scheduled or running (False when
        ``timeout`` seconds pass first)."""
        return self.ctx.queries.wait_idle([self._get(n) for n in names], timeout)

    # -- checkpoints, eviction, restore, scaling --------------------------------------------
    def checkpoint(self, name: str) -> list[CheckpointInfo]:
        return self.state.checkpoint(self._get(name))

    def evict(self, name: str) -> None:
        self.state.evict(self._get(name))

    def restore(self, name: str) -> QueryInfo:
        q = self._get(name)
        q.last_used = time.time()
        self.state.maintain(q, self.ctx.latest_versions(q))
        return self.info(name)

    def scale(self, name: str, shards: int) -> QueryInfo:
        """Split the query's state over ``shards`` actors (``ControlLoop.scale``)."""
        self.loop.scale(self._get(name), shards)
        return self.info(name)

    # -- queries on Spark -------------------------------------------------------------------
    def run_query(self, sql: str | None = None, query: str | None = None,
                  use_sketch: bool = True) -> QueryResult:
        """Run a SELECT on Spark over the tables' versions of the sketch it uses (or the
        latest versions without one); with ``use_sketch`` the scans read only the
        sketch's fragments, except of tables where its filter would read more than
        ``sketch_max_read_share`` of the rows (``QueryResult.access`` says which). The
        sketch of ``query`` (or, without it, of a registered query chosen by
        ``imp_actors.sketch_reuse``) is used for ``sql`` only where it provably gives the
        plain query's rows (``QueryResult.reuse`` says by which rule); a named sketch that
        cannot is refused and nothing is done; without a name and no sketch able to
        answer, the SQL runs plain and ``access_reason`` says why."""
        from imp_core.sql import plan_sql

        registered = self._get(query) if query else None
        if sql is None and registered is None:
            raise PartitionError("run_query needs SQL or the name of a registered query")
        plan = registered.plan if sql is None else plan_sql(sql, self.catalog())
        reuse, plain_why = None, ""
        if use_sketch:  # a named sketch that cannot answer the SQL is refused up front
            registered, reuse, plain_why = choose_sketch(self.ctx.queries, plan, registered)
        version = None
        if reuse is not None:
            version = self.get_sketch(registered.name, fresh=True)
        versions = dict(version.versions) if version else {}
        for t in sorted(plan.root.tables() - set(versions)):  # not sketched: the latest
            versions[t] = self.ctx.probe.latest(t)
        run = self.ctx.spark.run(plan, versions, version.sketch if version else None,
                                 self.config.sketch_max_read_share)
        if plain_why:
            run = replace(run, access="plain", access_reason=plain_why)
        return replace(run, sketch=version, reuse=reuse.rule if reuse else "",
                       reuse_reason=reuse.reason if reuse else "")

    def recapture(self, name: str, versions: Mapping[str, int] | None = None,
                  partitions: PartitionSet | None = None) -> tuple[Sketch, float]:
        """Full maintenance (the paper's FM): the accurate sketch recaptured by Spark from
        the tables at ``versions`` (default: the query's latest sketch's) on
        ``partitions`` (default: the query's current ranges), and its time."""
        q = self._get(name)
        if versions is None:
            latest = q.history.latest
            versions = dict(latest.versions) if latest else self.ctx.latest_versions(q)
        self.ctx.counters["recaptures_fm"] += 1
        return self.ctx.spark.recapture(q.plan, partitions or q.partitions, versions)

    # -- statistics and tools ---------------------------------------------------------------
    def stats(self) -> dict[str, Any]:
        incidents = {"quarantined": [{"kind": e.kind, "value": e.value, "method": e.method,
                                      "reason": e.reason} for e in self.incidents.active()],
                     "deaths": list(self.incidents.deaths)}
        return dict(self.ctx.stats(), runtime=self.runtime.status(), incidents=incidents)

    def metrics(self) -> RuntimeMetrics:
        """Per query and overall, what an operator watches (``imp_actors.runtime_metrics``): cheap,
        never waits for a query's maintenance or calls an actor (for scrapes)."""
        nodes = self.ctx.backend.known_nodes()
        return replace(runtime_metrics(self.ctx), runtime_up=self.runtime.state is RuntimeState.UP,
                       nodes_alive=sum(1 for n in nodes if n["alive"]) if nodes else None)
