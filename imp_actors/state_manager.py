"""State management: where each query's operator state lives, and moving it.

A query's state is in its live workers, or in its checkpoints while evicted. This part
checkpoints, evicts (least recently used first, to fit ``EvictionPolicy``), restores,
re-splits over a new shard count, and runs a maintenance step on a query made live for
it. Invariants:
- every step that changes a query's workers or state holds the query's lock and moves
  it along its lifecycle (``lifecycle.TRANSITIONS``), back to ``LIVE`` or ``EVICTED``
  whatever fails;
- a query is evicted only after all its shards were checkpointed;
- a rescale commits the new shard count to the registry only after the new shards hold
  the re-split state and were checkpointed under the new generation;
- an eviction and a restore record their outcome as the query's target
  (``reconcile.Targets``) under the query's lock, so the control loop never undoes them.

Locks: each step holds the lock of the query it changes (``QueryRuntime.lock``). Making
room (``make_room``) evicts other queries without holding the incoming query's lock:
a caller holding it lends it out meanwhile (``QueryLock.released``) and checks the
query's state again afterwards, so no thread ever waits for a query's lock while holding
another's (no lock-order cycle between queries). ``probe`` and the control loop's
evictions never wait for a lock at all.
"""

from __future__ import annotations

import hashlib
import logging
import time
from dataclasses import replace
from typing import Any, Callable, Mapping

from imp_actors.context import RuntimeContext
from imp_actors.eviction import LiveQuery, choose_victims
from imp_actors.handles import gather
from imp_actors.lifecycle import QueryRuntime, QueryState
from imp_actors.maintenance import Maintenance
from imp_actors.reconcile import Want
from imp_actors.registry import QueryRecord, partitions_to_records
from imp_actors.sharding import shard_key
from imp_actors.shards import ShardManager
from imp_actors.types import CheckpointInfo, SketchVersion
from imp_core.errors import (
    ImpError,
    SnapshotError,
    UnknownQueryError,
    UnshardableQueryError,
    WorkerLostError,
)
from imp_core.process.memory_release import release_free_memory
from imp_core.sketch.partition import PartitionSet
from imp_core.storage.scan_spec import scan_specs

log = logging.getLogger(__name__)


class StateManager:
    def __init__(self, ctx: RuntimeContext, shards: ShardManager, maintenance: Maintenance):
        self.ctx = ctx
        self.shards = shards
        self.maintenance = maintenance
        # ``adaptive_ranges.AdaptiveRanges``: counts each batch's rows per fragment
        self.ranges: Any = None
        # ``incidents.Incidents``: records what this thread maintains (a crash's record)
        self.incidents: Any = None

    # -- first state ------------------------------------------------------------------------
    def bootstrap(self, q: QueryRuntime) -> None:
        """First state of a registering query, from the tables; leaves it ``LIVE``."""
        self.make_room(q, q.shards)
        if q.state is not QueryState.REGISTERING:  # dropped while its lock was lent out
            raise UnknownQueryError(f"query {q.name!r} was dropped while registering")
        t0 = time.perf_counter()
        q.attach(*self.shards.start_shards(
            q, q.shards, lambda i, h: self.shards.rebuild_shard(q, i, h)))
        self.maintenance.publish(q, self.maintenance.align(q), 0.0)
        q.batches_since_checkpoint = 0
        t1 = time.perf_counter()
        self.checkpoint_locked(q)
        self.ctx.time("register_first_state_s", t1 - t0)  # workers started and loaded
        self.ctx.time("register_checkpoint_s", time.perf_counter() - t1)
        q.transition(QueryState.LIVE)
        release_free_memory()  # the capture's results collected into this process

    # -- maintenance on a live query --------------------------------------------------------
    def maintain(self, q: QueryRuntime, target: Mapping[str, int]) -> SketchVersion:
        """``q`` live and at ``target``, with its sketch there published."""
        with self.incidents.entering(method="maintain", query=q.name), q.lock:
            self.ensure_live(q)
            q.transition(QueryState.MAINTAINING)
            try:
                version, moved = self.maintenance.step(q, target)
                if moved:
                    if self.ranges is not None:
                        self.ranges.count(q, target)
                    every = self.ctx.config.checkpoint_every_batches
                    if every and q.batches_since_checkpoint >= every:
                        self.checkpoint_locked(q)
                    self.maintenance.prune_feed(q.tables)
                return version
            finally:
                q.transition(QueryState.LIVE)

    # -- checkpoints ------------------------------------------------------------------------
    def checkpoint(self, q: QueryRuntime) -> list[CheckpointInfo]:
        """Checkpoint a live query now; an evicted one's newest checkpoints."""
        with q.lock:
            if not q.live:
                return [self.checkpoint_info(q, i) for i in range(q.shards)]
            return self.checkpoint_locked(q)

    def checkpoint_info(self, q: QueryRuntime, shard: int) -> CheckpointInfo:
        """The newest checkpoint of an evicted query's shard (read and verified)."""
        from imp_core.engine.snapshot import read_snapshot

        store = self.ctx.checkpoints
        names = store.names(q.name, q.record.generation, shard)
        if not names:
            raise SnapshotError(f"{q.name} shard {shard} has no checkpoint")
        blob = store.read(names[0])
        meta, _ = read_snapshot(blob)
        uri = store.blobs.path(names[0])
        return CheckpointInfo(q.name, shard, uri, dict(meta.get("versions", {})), len(blob),
                              hashlib.sha256(blob).hexdigest(),
                              store.blobs.fs.get_file_info(uri).mtime.timestamp())

    def checkpoint_locked(self, q: QueryRuntime) -> list[CheckpointInfo]:
        """Checkpoint every shard (caller holds ``q.lock``; a lost shard is recovered and
        checkpointed again)."""
        assert q.handles is not None
        infos = []
        for i, p in enumerate([h.checkpoint() for h in q.handles]):
            try:
                infos.append(p.result())
            except WorkerLostError:
                self.shards.recover_shard(q, i)
                infos.append(q.handles[i].checkpoint().result())
        q.batches_since_checkpoint = 0
        self.ctx.counters["checkpoints"] += len(infos)
        latest = q.history.latest
        if latest is not None and all(dict(i.versions) == dict(latest.versions)
                                      for i in infos):
            q.kept = {"seq": latest.seq, "fragments": len(latest.sketch.fragments),
                      "versions": dict(latest.versions), "at": time.time()}
            try:
                self.ctx.checkpoints.write_kept(q.name, q.kept)
            except OSError as exc:  # only a listing's summary: the checkpoints are written
                log.warning("cannot write the kept-version summary of %s: %s", q.name, exc)
        return infos

    # -- eviction and restore ---------------------------------------------------------------
    def evict(self, q: QueryRuntime, timeout: float | None = None,
              only_if_wanted: bool = False) -> bool:
        """Checkpoint and stop ``q``'s actors; waits for its lock up to ``timeout`` seconds
        (None: as long as it takes) and gives up (False) if it stays busy.
        ``only_if_wanted``: only while its target says evicted (the control loop's)."""
        if not q.lock.acquire(timeout=-1 if timeout is None else timeout):
            return False
        try:
            if only_if_wanted and not self.ctx.targets.wants(q.name, Want.EVICTED):
                return True
            if q.live:
                self.checkpoint_locked(q)
                self.shards.stop(q, QueryState.EVICTED)
                self.ctx.counters["evictions"] += 1
                release_free_memory()  # an in-process worker's state was just dropped
            if q.state is QueryState.EVICTED:
                self.ctx.targets.set(q, want=Want.EVICTED, shards=q.shards, by="evict")
            return True
        finally:
            q.lock.release()

    def restore(self, q: QueryRuntime, only_if_wanted: bool = False) -> None:
        """``q`` live (restored from its checkpoints when evicted); ``only_if_wanted``:
        only while its target says live (the control loop's restore)."""
        with q.lock:
            if not only_if_wanted or self.ctx.targets.wants(q.name, Want.LIVE):
                self.ensure_live(q)

    def ensure_live(self, q: QueryRuntime) -> None:
        """Actors for every shard of ``q`` (caller holds ``q.lock``, which is lent out
        while room is made; a query registering meanwhile is waited for)."""
        while q.state is QueryState.REGISTERING:  # its registration lent its lock out
            with q.lock.released():
                time.sleep(0.005)
        if not q.live:
            self._check_not_dropped(q)
            self.make_room(q, q.shards)
        if q.live:  # live already, or made live by another thread while room was made
            return
        self._check_not_dropped(q)
        t0 = time.perf_counter()
        q.transition(QueryState.RESTORING)
        try:
            started = self.shards.start_shards(
                q, q.shards, lambda i, h: self.shards.restore_shard(q, i, h))
        except BaseException:
            q.transition(QueryState.EVICTED)
            raise
        q.attach(*started)
        q.transition(QueryState.LIVE)
        self.ctx.targets.set(q, want=Want.LIVE, by="use")
        self.ctx.counters["restores"] += 1
        if q.history.latest is None:  # first restore after a coordinator restart
            self.maintenance.publish(q, self.maintenance.align(q), 0.0)
        self.ctx.time("restore_s", time.perf_counter() - t0)

    @staticmethod
    def _check_not_dropped(q: QueryRuntime) -> None:
        if q.state is QueryState.DROPPED:
            raise UnknownQueryError(f"no registered query {q.name!r}")

    def make_room(self, incoming: QueryRuntime, actors: int) -> None:
        """Evict least recently used queries so that ``actors`` more actors of
        ``incoming`` fit the limits. Busy queries are passed over at first; if that is not
        enough, the last round waits (bounded) for them to finish their step. Never under
        ``incoming``'s lock: a caller holding it (in a settled state) lends it out while
        others are evicted (only then) and must check ``incoming``'s state afterwards."""
        for final in (False, True):
            live = [LiveQuery(q.name, len(q.handles or ()), q.last_used, q.state_bytes,
                              q.busy and not final)
                    for q in self.ctx.queries.all() if q.live]
            victims = choose_victims(live, self.ctx.config.eviction, time.time(),
                                     incoming_actors=actors, protect=[incoming.name])
            if not victims:
                return  # the lock was not lent out
            with incoming.lock.released():
                for name in victims:
                    victim = self.ctx.queries.get_or_none(name)
                    if victim is not None:
                        self.evict(victim, timeout=10.0 if final else 0.0)

    def idle_victims(self, now: float) -> list[QueryRuntime]:
        """The idle live queries the policy's idle time and memory budget say must go."""
        pol = self.ctx.config.eviction
        if pol.idle_seconds is None and pol.memory_budget_bytes is None:
            return []
        live = {q.name: q for q in self.ctx.queries.all() if q.live}
        return [live[n] for n in choose_victims(
            [LiveQuery(q.name, len(q.handles or ()), q.last_used, q.state_bytes,
                       q.busy or q.scheduled) for q in live.values()], pol, now)]

    # -- found by the control loop ----------------------------------------------------------
    def probe(self, q: QueryRuntime) -> tuple[int, ...] | None:
        """The shards of the idle live query ``q`` whose worker does not answer a ping (one
        per shard, sent together); None when ``q`` is busy (its lock is not waited for)
        or not live."""
        if not q.lock.acquire(blocking=False):
            return None
        try:
            if q.state is not QueryState.LIVE or q.handles is None:
                return None
            pending = [h.ping() for h in q.handles]
            dead = []
            for i, p in enumerate(pending):
                try:
                    p.result()
                except WorkerLostError:
                    dead.append(i)
            return tuple(dead)
        finally:
            q.lock.release()

    def recover(self, q: QueryRuntime, dead: tuple[int, ...]) -> None:
        """Replace the dead shards of the live query ``q`` (``ShardManager.recover_shard``)
        and bring them to the other shards' versions; a query no longer idle and live is
        left to its next step (which recovers a lost shard on its own)."""
        with q.lock:
            if q.state is not QueryState.LIVE:
                return
            q.transition(QueryState.RECOVERING)
            try:
                for i in dead:
                    self.shards.recover_shard(q, i)
                self.maintenance.align(q)
            finally:
                q.transition(QueryState.LIVE)

    def resume(self, runtime_of: Callable[[QueryRecord], QueryRuntime]) -> None:
        """Rebuild the in-memory registry from the durable one (``runtime_of`` plans each
        record) and re-attach the actors that outlived the previous coordinator (a query
        whose shards did not all survive restarts from its checkpoints when next used)."""
        ctx = self.ctx
        for name, record in sorted(ctx.registry.records().items()):
            try:
                q = runtime_of(record)
            except ImpError as exc:
                log.error("registered query %s cannot be recovered: %s", name, exc)
                continue
            q.kept = ctx.checkpoints.read_kept(name)
            ctx.queries.put(q)
            ctx.queries.route(q)
        for q in self.shards.reattach(ctx.queries.all()):
            q.transition(QueryState.LIVE)
            ctx.counters["reattached_queries"] += 1
            if all(v == q.shard_versions[0] for v in q.shard_versions):
                self.maintenance.publish(q, q.shard_versions[0], 0.0)
        for q in ctx.queries.all():
            ctx.targets.set(q, by="recovery")  # as it is: live if reattached

    def shutdown(self, checkpoint: bool) -> None:
        """Checkpoint (optionally) and stop every live query's actors."""
        for q in self.ctx.queries.all():
            with q.lock:
                if q.live:
                    if checkpoint:
                        try:
                            self.checkpoint_locked(q)
                        except ImpError as exc:
                            log.warning("checkpoint of %s at shutdown failed: %s", q.name, exc)
                    self.shards.stop(q, QueryState.EVICTED)
            q.history.close()

    # -- rescaling --------------------------------------------------------------------------
    def repartition(self, q: QueryRuntime, pset: PartitionSet) -> None:
        """Build ``q``'s state anew on the partitions ``pset`` (new ranges of the same
        attributes) from the tables at their latest versions, publish its sketch there,
        and retire the old shards; the old sketch versions stay readable meanwhile, and
        nothing changes when the new shards cannot be built."""
        ctx = self.ctx
        with q.lock:
            self.ensure_live(q)
            q.transition(QueryState.REPARTITIONING)
            before = (q.record, q.partitions, q.scan_specs)
            try:
                record = replace(q.record, partitions=partitions_to_records(pset),
                                 generation=q.record.generation + 1)
                specs = scan_specs(q.plan.root, pset)
                if not record.pushdown:
                    specs = {t: replace(s, predicate=None) for t, s in specs.items()}
                q.record, q.partitions, q.scan_specs = record, pset, specs
                started = self.shards.start_shards(
                    q, q.shards, lambda i, h: self.shards.rebuild_shard(q, i, h))
            except BaseException:
                q.record, q.partitions, q.scan_specs = before
                q.transition(QueryState.LIVE)
                raise
            old = q.detach()
            q.attach(*started)
            try:
                self.maintenance.publish(q, self.maintenance.align(q), 0.0)
            finally:
                q.transition(QueryState.LIVE)
            self.checkpoint_locked(q)
            ctx.registry.put(q.record)
            for h in old:
                h.kill()
            ctx.checkpoints.drop(q.name, keep_generation=q.record.generation)
            ctx.counters["repartitions"] += 1

    def rescale(self, q: QueryRuntime, shards: int, only_if_wanted: bool = False) -> None:
        """Split ``q``'s state over ``shards`` actors. The live shards' operator state is
        re-split by the routing column (``imp_actors.resharding``), no table is read;
        updates committed meanwhile are later versions, applied next. ``only_if_wanted``:
        only while its target asks for ``shards`` (the control loop's rescale)."""
        from imp_actors.resharding import reshard

        ctx = self.ctx
        if shards == q.shards or \
                only_if_wanted and not ctx.targets.wants(q.name, shards=shards):
            return
        key = shard_key(q.plan)  # raises with the reason when the plan cannot split
        if q.record.placement and shards > 1:
            raise UnshardableQueryError(
                f"{q.name} probes join sides in the data layer "
                f"({', '.join(q.record.placement)}), which hold no rows to split; "
                "register it with the shards it needs instead")
        # room for the new shards next to the old (and those, when evicted) first, as no
        # other query is evicted under ``q``'s lock
        self.make_room(q, shards + (0 if q.live else q.shards))
        with q.lock:
            if shards == q.shards or \
                    only_if_wanted and not self.ctx.targets.wants(q.name, shards=shards):
                return
            self.ensure_live(q)
            q.transition(QueryState.RESCALING)
            try:
                assert q.handles is not None
                common = {t: max(v[t] for v in q.shard_versions) for t in q.tables}
                self.maintenance.advance(q, common)
                states = [st for st, _ in gather([h.state() for h in q.handles])]
                parts = reshard(states, q.plan, q.partitions, ctx.options, key, shards)
                record = q.record.with_shards(shards)
                started = self.shards.start_shards(q, shards, lambda i, h: h.load(
                    self.shards.spec(q, i, record), state=(parts[i], common)).result())
                old = q.detach()
                q.record, q.key = record, key if shards > 1 else None
                q.attach(*started)
            finally:
                q.transition(QueryState.LIVE)
            self.checkpoint_locked(q)
            ctx.registry.put(record)
            for h in old:
                h.kill()
            ctx.checkpoints.drop(q.name, keep_generation=record.generation)
            ctx.counters["rescales"] += 1
