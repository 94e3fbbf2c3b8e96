"""The control loop: what the coordinator does on its own, in a background thread.

Every tick (50 ms) it looks for table versions committed by other writers (every
``poll_seconds``), schedules eager queries whose pending changes are old enough, keeps
the warm pool full, sets the target of idle queries the eviction policy picks to
evicted, (every ``autoscale_every_s``) weighs the load of autoscaled queries
(``autoscaler.py``) and sets their target shard counts, then reconciles every query's
target with its actual state (``reconcile.Reconciler``: evictions, rescales, restores,
liveness probes and recoveries of dead shards), and (every ``recluster_every_s``, when
set) re-clusters tables other writers left out of order (``reclustering.py``). Eager
maintenance runs on a small thread pool, the reconciler's slow steps on a pool of their
own (so they never hold up another query's maintenance), re-clustering on another.
Invariants:
- a query has at most one maintenance job queued or running (``QueryRuntime.scheduled``)
  and at most one step of the reconciler; the autoscaler asks for one shard count at a
  time (``Trend.RESCALING`` until it is reached or given up);
- the autoscaler acts only on live queries (a rescale never restores an evicted one; an
  evicted query's target keeps the shards it has);
- each table version is accounted to the eager queries reading it once
  (``_seen_versions`` only grows);
- one step's failure is logged and counted, never stops the loop or another query.

Locks: the tick's thread holds no query's lock while it calls anything; the steps it
starts take the lock of their own query only (``state_manager``'s lock order).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from typing import Any, Callable

from imp_actors.autoscaler import Autoscaler, Trend, ceiling
from imp_actors.context import RuntimeContext
from imp_actors.lifecycle import QueryRuntime, QueryState
from imp_actors.reclustering import Reclustering
from imp_actors.reconcile import Action, Reconciler, Step, Target, Want
from imp_actors.registration import check_shards
from imp_actors.runtime_config import Eager
from imp_actors.runtime_metrics import query_load
from imp_actors.shards import ShardManager
from imp_actors.state_manager import StateManager
from imp_core.errors import ImpError, PartitionError, UnknownQueryError

log = logging.getLogger(__name__)

TICK_SECONDS = 0.05
AUTOSCALER = "autoscaler"  # ``Target.by`` of the shard counts the autoscaler sets


class ControlLoop:
    def __init__(self, ctx: RuntimeContext, shards: ShardManager, state: StateManager,
                 layouts: Any = None):
        self.ctx = ctx
        self.shards = shards
        self.state = state
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._pool: ThreadPoolExecutor | None = None
        self._steps: ThreadPoolExecutor | None = None  # the reconciler's slow steps
        self.autoscaler = Autoscaler()
        self.reconciler = Reconciler(
            ctx.targets, state, ctx.counters, submit=self._submit_step, done=self._step_done,
            registered=lambda name: ctx.queries.get_or_none(name) is not None)
        self.reclustering = Reclustering(ctx, layouts)
        self._last_poll = 0.0
        self._last_autoscale = 0.0
        self._seen_versions: dict[str, int] = {}
        self._seen_lock = threading.Lock()
        # tables with a commit of the service's own in flight: the poller leaves their new
        # versions to that commit, which accounts them (and reports what it triggered)
        self._own_commits: dict[str, int] = {}

    @contextmanager
    def own_commit(self, table: str) -> Iterator[None]:
        """Wraps a commit by the service itself, so the poller does not account its
        version as another writer's before the committer does."""
        with self._seen_lock:
            self._own_commits[table] = self._own_commits.get(table, 0) + 1
        try:
            yield
        finally:
            with self._seen_lock:
                left = self._own_commits[table] - 1
                if left:
                    self._own_commits[table] = left
                else:
                    del self._own_commits[table]

    # -- running ------------------------------------------------------------------------
    def start(self) -> None:
        self._pool = ThreadPoolExecutor(max_workers=2, thread_name_prefix="imp-maintain")
        self._steps = ThreadPoolExecutor(max_workers=2, thread_name_prefix="imp-reconcile")
        self.reclustering.start()
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="imp-coordinator",
                                        daemon=True)
        self._thread.start()

    def stop(self, wait: bool = True) -> None:
        """Stop the loop; ``wait`` lets queued maintenance finish, else it is dropped."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
        for pool in (self._pool, self._steps):
            if pool is not None:
                if wait:
                    pool.shutdown(wait=True)
                else:
                    pool.shutdown(wait=False, cancel_futures=True)
        self.reclustering.stop(wait)

    def _run(self) -> None:
        while not self._stop.wait(TICK_SECONDS):
            try:
                self.tick()
            except Exception as exc:  # keep the loop alive; log and go on
                log.error("coordinator background step failed: %s", exc)
                self.ctx.counters["background_errors"] += 1

    def tick(self) -> None:
        now = time.time()
        poll = self.ctx.config.poll_seconds
        if poll is not None and now - self._last_poll >= poll:
            self._last_poll = now
            self.poll()
        for q in self.ctx.queries.all():
            strategy = q.strategy
            if isinstance(strategy, Eager) and q.pending_since is not None \
                    and strategy.max_delay_s is not None \
                    and now - q.pending_since >= strategy.max_delay_s:
                self.schedule(q)
        if self.ctx.config.warm_actors > 0:
            self.shards.keep_warm()
        for q in self.state.idle_victims(now):
            self.ctx.targets.set(q, want=Want.EVICTED, by="idle policy", at=now)
        if now - self._last_autoscale >= self.ctx.config.autoscale_every_s:
            self._last_autoscale = now
            self.autoscale()
        self.reconciler.tick(self.ctx.queries.all(), now)
        self.reclustering.tick(now)

    # -- new versions -------------------------------------------------------------------
    def poll(self) -> dict[str, int]:
        """Look for versions committed by other writers; account them to eager queries."""
        found = {}
        for t in self.ctx.queries.tables():
            try:
                latest = self.ctx.probe.latest(t)
            except ImpError:
                continue
            with self._seen_lock:
                if t in self._own_commits:
                    continue  # the committer accounts it (a later poll sees the rest)
                seen = self._seen_versions.get(t)
                if seen is None:
                    self._seen_versions[t] = latest
                    continue
            if latest > seen:
                tuples = self.ctx.feed.count(t, seen, latest)
                self.note_commit(t, latest, tuples)
                found[t] = latest
                self.ctx.counters["external_versions"] += latest - seen
        return found

    def note_commit(self, table: str, version: int, tuples: int) -> list[str]:
        """Account a new version of ``table`` to the queries reading it (their pending
        changes); returns the live eager queries whose maintenance it triggered (an
        evicted query catches up when it is next used)."""
        with self._seen_lock:
            seen = self._seen_versions.get(table, -1)
            if version <= seen:
                return []
            self._seen_versions[table] = version
        now = time.time()
        triggered = []
        for q in self.ctx.queries.reading([table]):
            strategy = q.strategy
            pending = q.note_pending(table, version, tuples, now)
            if isinstance(strategy, Eager) and pending >= strategy.batch_tuples and q.live:
                self.schedule(q)
                triggered.append(q.name)
        return triggered

    # -- eager maintenance ------------------------------------------------------------------
    def restore_eager(self) -> list[str]:
        """Bring every eager query live (restored from its checkpoints after a restart)
        and up to the tables' newest versions, commits made while no coordinator ran
        included, in the background: an eager query is kept current, not only once
        someone reads it. Returns their names."""
        names = []
        for q in self.ctx.queries.all():
            if isinstance(q.strategy, Eager):
                self.schedule(q, restore=True)
                names.append(q.name)
        return names

    def schedule(self, q: QueryRuntime, restore: bool = False) -> None:
        """Maintain ``q`` on the pool (``restore``: also when it has no actors)."""
        if self._pool is None or self._stop.is_set():
            return
        with q.pending_lock:  # the commit path and the tick both schedule
            if q.scheduled:
                return
            q.scheduled = True

        def job() -> None:
            done = False
            try:
                if not q.live and not restore:
                    return  # evicted: it catches up when it is next used
                self.state.maintain(q, self.ctx.latest_versions(q))
                self.ctx.counters["eager_batches"] += 1
                done = True
            except UnknownQueryError:
                pass
            except Exception as exc:  # one query's failure must not stop the others
                log.error("eager maintenance of %s failed: %s", q.name, exc)
                self.ctx.counters["maintenance_errors"] += 1
            finally:
                q.scheduled = False
            # a commit accounted while this job ran found it scheduled and did not
            # schedule again: its changes are still pending, so look once more
            strategy = q.strategy
            if done and isinstance(strategy, Eager) and q.live \
                    and q.pending_tuples >= strategy.batch_tuples:
                self.schedule(q)

        try:
            self._pool.submit(job)
        except RuntimeError:  # shutting down
            q.scheduled = False

    # -- autoscaling ------------------------------------------------------------------------
    def scale(self, q: QueryRuntime, shards: int) -> None:
        """``ScaleQuery``: ``q``'s target shard count, reached now (a failure is raised;
        ``StateManager.rescale``). An autoscaled query accepts a count within its bounds
        only; its autoscaler goes on from there."""
        check_shards(shards, self.ctx.config)
        policy = q.autoscaling
        if policy is not None and policy.clamp(shards) != shards:
            raise PartitionError(f"query {q.name!r} is autoscaled between "
                                 f"{policy.min_shards} and {policy.max_shards} shards; "
                                 f"{shards} is outside")
        self.reconciler.converge(q, shards, by="scale")
        if q.autoscaling is not None:
            self.autoscaler.done(q.name)  # its next move waits a full delay from here

    def autoscale(self) -> None:
        """Weigh every live autoscaled query's load and set the shard counts the
        autoscaler asks for (``autoscaler.decide``) as their targets."""
        queries = self.ctx.queries.all()
        known = {q.name for q in queries}
        for name in self.autoscaler.names():
            if name not in known:
                self.autoscaler.done(name)  # dropped (with a rescale asked for, maybe)
                self.autoscaler.forget(name)
        cfg = self.ctx.config
        live_actors = sum(len(q.handles or ()) for q in queries if q.live)
        for q in queries:
            policy = q.autoscaling
            if policy is None or self._rescaling(q) or q.state is QueryState.RESCALING:
                continue  # not autoscaled, or re-split right now (by ScaleQuery, or by us)
            if not q.live:
                self.autoscaler.forget(q.name)  # unmeasured while evicted
                continue
            top = ceiling(policy, q.shards, max_shards=cfg.max_shards,
                          max_live_actors=cfg.eviction.max_live_actors,
                          live_actors=live_actors, splittable=not q.record.placement)
            load = query_load(q)
            decision = self.autoscaler.decide(q.name, policy, q.shards, load, top)
            if decision.target is None:
                continue
            try:
                check_shards(decision.target, cfg)
            except ImpError as exc:
                log.error("autoscaling %s to %d shards refused: %s", q.name, decision.target,
                          exc)
                self.ctx.counters["autoscale_errors"] += 1
                self.autoscaler.done(q.name)
                continue
            log.info("autoscaling %s from %d to %d shards (load %.3f shard-s/s, target "
                     "%.3f per shard)", q.name, q.shards, decision.target, load,
                     policy.target_load)
            self.ctx.targets.set(q, shards=decision.target, by=AUTOSCALER)

    def _rescaling(self, q: QueryRuntime) -> bool:
        """Whether a shard count the autoscaler asked for ``q`` is still to be reached;
        one that is reached, given up, or dropped by an eviction ends its wait."""
        state = self.autoscaler.state(q.name)
        if state is None or state.trend is not Trend.RESCALING:
            return False
        target = self.ctx.targets.get(q.name)
        if target is not None and target.shards != q.shards and not q.live:
            target = self.ctx.targets.set(q, shards=q.shards, by=f"{AUTOSCALER} (evicted)")
        if target is not None and target.shards != q.shards \
                or self.reconciler.running(q.name):
            return True
        self.autoscaler.done(q.name)
        return False

    def _submit_step(self, job: Callable[[], None]) -> None:
        if self._steps is None or self._stop.is_set():
            raise RuntimeError("the control loop is stopped")
        self._steps.submit(job)

    def _step_done(self, q: QueryRuntime, step: Step, target: Target | None) -> None:
        """The reconciler's step ended: a rescale (the autoscaler's) is counted, and once
        reached or given up the autoscaler's next move waits a full delay from now."""
        if step.action is not Action.RESCALE:
            return
        failed = target is None or target.last is None or target.last.error is not None
        self.ctx.counters["autoscale_errors" if failed else "autoscale_rescales"] += 1
        if target is None or target.shards == q.shards:
            self.autoscaler.done(q.name)
