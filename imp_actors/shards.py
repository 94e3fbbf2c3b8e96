"""Shard management: the workers that hold a query's shards, and how they get their state.

A shard's worker is started (or taken from the warm pool), then loaded from its newest
readable checkpoint, or built from the tables (on Spark, or by feeding the rows through
the engine), by the rules of ``imp_core.query.driver`` (the bootstrap choice and the
first-state feed every front uses). Invariants:
- a worker is loaded with the ``WorkerSpec`` made by ``spec`` (the one place it is
  built), for the query's current record (shard count and checkpoint generation);
- ``start_shards`` starts all shards or none: on failure every worker it started is
  stopped, and the query is left as it was;
- warm workers are empty and running; one is handed out at most once.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from typing import Callable, Collection, Mapping, Sequence

from imp_actors.context import RuntimeContext
from imp_actors.handles import WORKER_PREFIX, WorkerHandle
from imp_actors.lifecycle import QueryRuntime, QueryState
from imp_actors.node_balance import NodeLedger, cluster_room, emptiest_node, node_loads
from imp_actors.registry import QueryRecord
from imp_actors.sharding import route_rows
from imp_actors.worker import WorkerSpec, WorkerStatus
from imp_core.errors import SnapshotError, WorkerLostError
from imp_core.plan.strict import is_strict
from imp_core.query.driver import bootstrap_mode, first_changes
from imp_core.query.driver import read_columns as spec_columns

log = logging.getLogger(__name__)

# a shard's replacement that dies is replaced again (``recover_shard``): pauses 0.5, 1, 2,
# 4, 8, 8, 8 s, 31.5 s in all, beyond the ~15 s Ray takes to declare a silent node dead
RECOVER_ATTEMPTS = 8
RECOVER_PAUSE_S = 0.5
RECOVER_PAUSE_MAX_S = 8.0

Prepare = Callable[[int, WorkerHandle], WorkerStatus]


class ShardManager:
    def __init__(self, ctx: RuntimeContext):
        self.ctx = ctx
        self._warm: list[WorkerHandle] = []  # started, empty workers ready for use
        self._warm_lock = threading.Lock()
        self.nodes = NodeLedger()  # where each worker started here was asked to run

    # -- workers ------------------------------------------------------------------------
    def spawn(self, starting: Sequence[tuple[str, int]] = (), avoid: Collection[str] = ()
              ) -> WorkerHandle:
        """An empty worker: a warm one when available (no process start-up), else a new
        one on the node with the least live state; ``starting``: (worker name, state
        bytes) of the workers of a query being started, not yet live; ``avoid``: nodes
        taken only when no other is alive (where a worker was just lost, or where the
        query's other shards run)."""
        with self._warm_lock:
            if self._warm:
                return self._warm.pop()
        return self._new_worker(starting, avoid)

    def _new_worker(self, starting: Sequence[tuple[str, int]] = (),
                    avoid: Collection[str] = ()) -> WorkerHandle:
        name = f"{WORKER_PREFIX}{uuid.uuid4().hex[:12]}"
        node = self._emptiest_node(starting, avoid)
        handle = self.ctx.backend.spawn(name, node=node)
        self.nodes.record(name, node)
        return handle

    def _live_shards(self) -> list[tuple[str, int]]:
        """(worker name, state bytes) of every live shard."""
        out = []
        for q in self.ctx.queries.all():
            handles, sizes = q.handles, q.shard_bytes  # read once: others may swap them
            if q.live and handles is not None:
                out.extend((h.name, size) for h, size in zip(handles, sizes))
        return out

    def room(self, shards: int) -> int | None:
        """On a cluster of several nodes, the most state a new query of ``shards``
        shards could be given there (``node_balance.cluster_room``); None on one node or
        the local backend (this machine's memory decides)."""
        if self.ctx.backend.kind != "ray":
            return None
        nodes = self.ctx.backend.nodes()
        if sum(1 for n in nodes if n.get("alive")) < 2:
            return None
        return cluster_room(nodes, node_loads(self.nodes.placed(), self._live_shards()),
                            shards)

    def _emptiest_node(self, starting: Sequence[tuple[str, int]] = (),
                       avoid: Collection[str] = ()) -> str | None:
        """Where a new worker goes (``node_balance``); None: let the backend choose (one
        node, or the local backend)."""
        if self.ctx.backend.kind != "ray":
            return None
        shards = self._live_shards() + list(starting)
        placed = self.nodes.placed()
        if len(placed) > 4 * len(shards) + 1000:  # forget workers long stopped
            self.nodes.forget(set(placed) - {w for w, _ in shards})
        return emptiest_node(self.ctx.backend.nodes(), node_loads(placed, shards), avoid)

    def keep_warm(self) -> None:
        with self._warm_lock:
            missing = self.ctx.config.warm_actors - len(self._warm)
        for _ in range(max(missing, 0)):
            h = self._new_worker()
            h.ping().result()  # wait until its process runs
            with self._warm_lock:
                self._warm.append(h)

    def kill_warm(self) -> None:
        with self._warm_lock:
            warm, self._warm = self._warm, []
        for h in warm:
            h.kill()

    def warm_handles(self) -> list[WorkerHandle]:
        with self._warm_lock:
            return list(self._warm)

    def spec(self, q: QueryRuntime, shard: int, record: QueryRecord | None = None
             ) -> WorkerSpec:
        """What a worker needs to host ``shard`` of ``q`` (as of ``record``, default the
        query's own)."""
        rec = record or q.record
        return WorkerSpec(q.name, shard, rec.shards, rec.generation, q.plan, q.partitions,
                          self.ctx.options, self.ctx.config.checkpoints_dir,
                          tables_root=self.ctx.config.tables_dir,
                          placement=rec.probed_sides)

    def stop(self, q: QueryRuntime, to: QueryState) -> None:
        """Stop ``q``'s workers and move it to ``to`` (evicted or dropped)."""
        for h in q.detach():
            h.kill()
        q.transition(to)

    # -- adopting what outlived a coordinator ----------------------------------------------
    def reattach(self, queries: list[QueryRuntime]) -> list[QueryRuntime]:
        """Give each query whose every shard's worker survived (same generation, a state at
        some versions) those workers; empty workers join the warm pool (once: those in it
        already are left as they are), the rest are stopped. Returns the queries that got
        their workers back."""
        found: dict[tuple[str, int, int], tuple[WorkerHandle, WorkerStatus]] = {}
        with self._warm_lock:  # this coordinator's own warm workers (``prepare``)
            warm = {h.name for h in self._warm}
        for wname in self.ctx.backend.worker_names():
            if wname in warm:  # in the pool already: a second entry would give it twice
                continue
            h = self.ctx.backend.find(wname)
            if h is None:
                continue
            try:
                st = h.status().result()
            except WorkerLostError:
                continue
            if st.query is None:
                with self._warm_lock:
                    self._warm.append(h)
            else:
                found[(st.query, st.generation, st.shard)] = (h, st)
        adopted = []
        for q in queries:
            mine = [found.get((q.name, q.record.generation, i)) for i in range(q.shards)]
            whole = [m for m in mine if m is not None and m[1].shards == q.shards
                     and m[1].versions]
            if len(whole) == q.shards:
                for i in range(q.shards):
                    del found[(q.name, q.record.generation, i)]
                q.transition(QueryState.RESTORING)
                q.attach([h for h, _ in whole], [st for _, st in whole])
                adopted.append(q)
        for h, _ in found.values():
            h.kill()  # a dropped query's, an older generation's or a partial query's actor
        return adopted

    # -- starting and replacing shards ------------------------------------------------------
    def start_shards(self, q: QueryRuntime, shards: int, prepare: Prepare
                     ) -> tuple[list[WorkerHandle], list[WorkerStatus]]:
        """A worker per shard, each prepared by ``prepare(shard, handle)``; all or none."""
        handles: list[WorkerHandle] = []
        statuses: list[WorkerStatus] = []
        try:
            for i in range(shards):
                # the shards started so far count where they run, and a query's shards go
                # to different nodes while there are nodes: bytes alone (a few hundred KB
                # against gigabytes of memory) would put them all on the lightest node,
                # which the cluster's room (``cluster_room``) assumes they do not
                placed = self.nodes.placed()
                siblings = {placed[h.name] for h in handles if placed.get(h.name)}
                handles.append(self.spawn(
                    [(h.name, st.state_bytes) for h, st in zip(handles, statuses)],
                    avoid=siblings))
                statuses.append(prepare(i, handles[-1]))
        except BaseException:
            for h in handles:
                h.kill()
            raise
        finally:
            q.capture = None  # a Spark capture serves one start of the shards only
        return handles, statuses

    def restore_shard(self, q: QueryRuntime, shard: int, h: WorkerHandle) -> WorkerStatus:
        """Load a shard from its newest usable checkpoint, else rebuild it."""
        st = self.load_newest_checkpoint(q, shard, h)
        return st or self.rebuild_shard(q, shard, h, "it has no usable checkpoint")

    def recover_shard(self, q: QueryRuntime, shard: int) -> None:
        """Replace a dead shard worker: newest checkpoint, else rebuild.

        A replacement that dies too is replaced again, after a pause doubling from
        ``RECOVER_PAUSE_S`` (``RECOVER_ATTEMPTS`` in all, about 30 s): when a node is
        lost without a word (a machine gone, not a drained node), the cluster keeps
        placing actors on it until its missed heartbeats mark it dead, some seconds
        later."""
        assert q.handles is not None
        q.handles[shard].kill()
        lost = {self.nodes.placed().get(q.handles[shard].name)} - {None}
        for attempt in range(1, RECOVER_ATTEMPTS + 1):
            h = self.spawn(avoid=lost)
            try:
                st = self.load_newest_checkpoint(q, shard, h)
                if st is None:
                    st = self.rebuild_shard(q, shard, h,
                                            "its actor died and no checkpoint is usable")
                    q.capture = None
                break
            except WorkerLostError as exc:
                h.kill()
                lost |= {self.nodes.placed().get(h.name)} - {None}
                if attempt == RECOVER_ATTEMPTS:
                    raise
                pause = min(RECOVER_PAUSE_MAX_S, RECOVER_PAUSE_S * 2 ** (attempt - 1))
                log.warning("%s shard %d: its replacement died too (%s), perhaps on a "
                            "node lost but not yet known dead; again in %.1f s", q.name,
                            shard, exc, pause)
                self.ctx.counters["actor_failures"] += 1
                time.sleep(pause)  # a backoff: the cluster needs time to notice the loss
        q.set_shard(shard, h, st)
        self.ctx.counters["actor_recoveries"] += 1
        q.telemetry.restarted()

    def load_newest_checkpoint(self, q: QueryRuntime, shard: int, h: WorkerHandle
                               ) -> WorkerStatus | None:
        for name in self.ctx.checkpoints.names(q.name, q.record.generation, shard):
            try:
                return h.load(self.spec(q, shard), checkpoint=name).result()
            except SnapshotError as exc:
                log.warning("checkpoint %s of %s is unusable (%s); trying an older one",
                            name, q.name, exc)
                self.ctx.counters["damaged_checkpoints"] += 1
        return None

    def rebuild_shard(self, q: QueryRuntime, shard: int, h: WorkerHandle,
                      reason: str | None = None) -> WorkerStatus:
        """Capture a shard's state from the tables at their latest versions (``reason``:
        why a registered query's shard is recaptured; None for a first capture)."""
        if reason is not None:
            log.warning("%s shard %d: %s; recapturing its state from the tables",
                        q.name, shard, reason)
            self.ctx.counters["recaptures"] += 1
        else:
            self.ctx.counters["captures"] += 1
        versions = self.ctx.latest_versions(q)
        if self.spark_bootstrap(q, versions):
            states = self.spark_states(q, versions)
            return h.load(self.spec(q, shard), state=(states[shard], versions)).result()
        h.load(self.spec(q, shard)).result()
        whole = first_changes(self.ctx.store, {t: versions[t] for t in q.tables}, q.scan_specs,
                              schema=self.ctx.feed.schema)
        changes = {t: route_rows(t, rows, q.key, q.shards)[shard] for t, rows in whole.items()}
        h.apply(changes, {}, versions).result()
        return h.status().result()

    # -- building a first state ------------------------------------------------------------
    def read_columns(self, q: QueryRuntime, table: str) -> list[str] | None:
        """The columns of ``table`` that ``q`` reads (its scan spec's and its pushed-down
        selection's), in table order; None (all) when it has no spec."""
        return spec_columns(q.scan_specs.get(table), self.ctx.feed.schema(table))

    def spark_bootstrap(self, q: QueryRuntime, versions: Mapping[str, int]) -> bool:
        """Whether ``q``'s first state is computed on Spark: by configuration, or (auto)
        when the bytes of the columns it reads exceed ``spark_bootstrap_min_bytes``; never
        for a query in ANSI mode, whose rows that raise only the engine counts."""
        if is_strict(q.plan.root):
            return False

        def read_bytes(limit: int) -> int:
            size = 0
            for t, v in versions.items():
                size += self.ctx.store.column_bytes(t, v, self.read_columns(q, t),
                                                    limit - size + 1)
                if size > limit:
                    break
            return size

        # the service always has Spark at hand (started on first use)
        return bootstrap_mode(self.ctx.config.bootstrap, spark_at_hand=True,
                              min_bytes=self.ctx.config.spark_bootstrap_min_bytes,
                              read_bytes=read_bytes) == "spark"

    def spark_states(self, q: QueryRuntime, versions: Mapping[str, int]) -> list[dict]:
        """Every shard's first state computed on Spark (imp_core.spark.bootstrap): the
        whole query's state, re-split by the routing column when sharded. One Spark run
        serves all shards of a capture."""
        from imp_actors.resharding import reshard

        if q.capture is not None and q.capture[0] == dict(versions) \
                and len(q.capture[1]) == q.shards:
            return q.capture[1]
        ctx = self.ctx
        t0 = time.perf_counter()
        tables = ctx.spark.first_state(q.plan, q.partitions, ctx.options, versions,
                                       q.record.probed_sides)
        ctx.time("first_state_spark_s", time.perf_counter() - t0)
        states = [tables] if q.shards == 1 else \
            reshard([tables], q.plan, q.partitions, ctx.options, q.key, q.shards)
        q.capture = (dict(versions), states)
        ctx.counters["spark_bootstraps"] += 1
        return states
