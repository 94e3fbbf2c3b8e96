"""Reconciling each query's target state with its actual one (no Ray, no I/O here).

Every registered query has a ``Target``: whether it should be ``LIVE`` or ``EVICTED``,
the shard count it should have, and its placement (join sides probed in the data layer:
such a query stays on one shard). Whoever decides sets the target (``Targets.set``):
registration and use (live, after the restore succeeded), eviction (evicted, once done),
the idle policy (evicted, before the loop evicts), ``ScaleQuery`` and the autoscaler (a
shard count). On each tick of the control loop ``Reconciler.tick`` observes every query
(``observe``: its ``QueryState``, shards, handles, dead shards), computes the difference
(``diff``, a pure function) and issues at most one ``Step`` per query through the
``Actions`` (``state_manager.StateManager``): evict, restore, rescale or recover dead
shards, each a transition through ``QueryRuntime.transition``. Dead shards of an idle
query are found by a liveness probe (one ping per shard), at most once per
``probe_every_s`` per query.

Invariants:
- a busy query (``lifecycle.BUSY``, or with maintenance scheduled) is not evicted,
  restored or probed (its step ends in a settled state and the next tick looks again);
  a rescale is started anyway and waits for the query's lock, as a busy query may stay
  busy for long under a stream of eager batches;
- at most one step per query is in flight (``Reconciler._running``);
- every attempt is recorded in its target (``Target.last``); a failure is logged and
  retried after a backoff that doubles up to ``BACKOFF_MAX_S``; after ``GIVE_UP``
  failures in a row the target is set to the actual state (logged as an error);
- an eviction the idle policy decided before the query's last use is dropped (the
  target goes back to ``LIVE``): a use always wins over an older idle decision.

Locks: ``Targets`` has its own lock, held only for reading or writing a target, never
while calling anything else; the reconciler takes no query lock itself (the actions
take the query's own lock, ``Actions.evict`` and ``Actions.probe`` without waiting on
the tick thread), so it never holds one query's lock while waiting for another's.
"""

from __future__ import annotations

import enum
import logging
import threading
import time
from collections import Counter
from dataclasses import dataclass, field, replace
from typing import Callable, Iterable, Protocol

from imp_actors.lifecycle import BUSY, WITH_ACTORS, QueryRuntime, QueryState

log = logging.getLogger(__name__)

PROBE_EVERY_S = 5.0  # how often an idle live query's shards are pinged
BACKOFF_S = 1.0  # the wait after a first failed attempt; doubled after each further one
BACKOFF_MAX_S = 60.0
GIVE_UP = 5  # failed attempts in a row after which the target is set to the actual state


class Want(enum.Enum):
    """The lifecycle a query should be in."""

    LIVE = "live"
    EVICTED = "evicted"


class Action(enum.Enum):
    EVICT = "evict"
    RESTORE = "restore"
    RESCALE = "rescale"
    RECOVER = "recover"  # replace dead shards


@dataclass(frozen=True)
class Step:
    """One action toward a target: ``shards`` for a rescale, ``dead`` for a recovery."""

    action: Action
    shards: int = 0
    dead: tuple[int, ...] = ()


@dataclass(frozen=True)
class Attempt:
    step: Step
    at: float
    error: str | None = None  # None: it succeeded


@dataclass
class Target:
    """What a query should be (see the module docstring) and how the last attempt to get
    there went."""

    want: Want
    shards: int
    placement: tuple[str, ...] = ()
    by: str = ""  # who set it last
    set_at: float = 0.0
    last: Attempt | None = None
    failures: int = 0  # failed attempts in a row
    retry_at: float = 0.0  # no attempt before then (backoff)
    probed_at: float = 0.0  # the last liveness probe of its shards


@dataclass(frozen=True)
class Actual:
    """What a query is, as observed (without its lock: it may be one step old)."""

    state: QueryState
    shards: int
    handles: int
    busy: bool
    last_used: float
    dead: tuple[int, ...] = ()

    @property
    def live(self) -> bool:
        return self.state in WITH_ACTORS


def observe(q: QueryRuntime, dead: tuple[int, ...] = ()) -> Actual:
    """``q``'s actual state; ``dead``: the shards a probe found dead."""
    return Actual(q.state, q.shards, len(q.handles or ()) if q.live else 0,
                  q.state in BUSY or q.scheduled, q.last_used, dead)


def diff(target: Target, actual: Actual) -> Step | None:
    """The next step from ``actual`` toward ``target``; None: nothing to do now.

    >>> t = Target(Want.LIVE, 2)
    >>> diff(t, Actual(QueryState.LIVE, 1, 1, False, 0.0))
    Step(action=<Action.RESCALE: 'rescale'>, shards=2, dead=())
    >>> diff(Target(Want.EVICTED, 1), Actual(QueryState.MAINTAINING, 1, 1, True, 0.0))
    """
    if actual.state is QueryState.DROPPED:
        return None
    if actual.dead and actual.live:
        return Step(Action.RECOVER, dead=actual.dead)
    if target.want is Want.EVICTED:
        return Step(Action.EVICT) if actual.live and not actual.busy else None
    if not actual.live:
        return None if actual.busy else Step(Action.RESTORE)
    if target.shards != actual.shards:  # it waits for the query's current step
        return Step(Action.RESCALE, shards=target.shards)
    return None


def backoff(failures: int) -> float:
    """Seconds to wait after ``failures`` failed attempts in a row."""
    return min(BACKOFF_MAX_S, BACKOFF_S * 2 ** max(failures - 1, 0))


class Targets:
    """The target of every registered query, by name. Thread-safe; reads return copies."""

    def __init__(self, clock: Callable[[], float] = time.time):
        self.clock = clock
        self._lock = threading.Lock()
        self._targets: dict[str, Target] = {}

    def set(self, q: QueryRuntime, *, want: Want | None = None, shards: int | None = None,
            by: str, at: float | None = None) -> Target:
        """Set what ``q`` should be (unset parts: as they were, or as ``q`` is now for a
        query without a target); a changed target starts without failures."""
        with self._lock:
            old = self._targets.get(q.name)
            new = Target(want or (old.want if old else Want.LIVE if q.live else Want.EVICTED),
                         shards or (old.shards if old else q.shards),
                         tuple(q.record.placement), by,
                         self.clock() if at is None else at,
                         old.last if old else None, probed_at=old.probed_at if old else 0.0)
            if old is not None and (old.want, old.shards) == (new.want, new.shards):
                new.failures, new.retry_at = old.failures, old.retry_at
            self._targets[q.name] = new
            return replace(new)

    def get(self, name: str) -> Target | None:
        with self._lock:
            t = self._targets.get(name)
            return replace(t) if t is not None else None

    def names(self) -> list[str]:
        with self._lock:
            return sorted(self._targets)

    def wants(self, name: str, want: Want | None = None, shards: int | None = None
              ) -> bool:
        """Whether ``name``'s target (if it has one) is still ``want`` and ``shards``: a
        step the loop started checks this under the query's lock before it acts."""
        with self._lock:
            t = self._targets.get(name)
            return t is None or (want in (None, t.want) and shards in (None, t.shards))

    def forget(self, name: str) -> None:
        with self._lock:
            self._targets.pop(name, None)

    def probed(self, name: str, now: float) -> None:
        with self._lock:
            t = self._targets.get(name)
            if t is not None:
                t.probed_at = now

    def record(self, q: QueryRuntime, step: Step, error: str | None, now: float
               ) -> Target | None:
        """Record an attempt; after a failure the next waits ``backoff``, and after
        ``GIVE_UP`` failures in a row the target becomes ``q``'s actual state."""
        gave_up = False
        with self._lock:
            t = self._targets.get(q.name)
            if t is None:
                return None
            t.last = Attempt(step, now, error)
            if error is None:
                t.failures, t.retry_at = 0, 0.0
            else:
                t.failures += 1
                t.retry_at = now + backoff(t.failures)
                if t.failures >= GIVE_UP:
                    gave_up = True
                    t.want = Want.LIVE if q.live else Want.EVICTED
                    t.shards, t.by, t.failures, t.retry_at = q.shards, "give up", 0, 0.0
            t = replace(t)
        if gave_up:
            log.error("%s: %s given up after %d failed attempts; its target is now its "
                      "actual state", q.name, step.action.value, GIVE_UP)
        return t


class Actions(Protocol):
    """The steps, each moving the query along its lifecycle under its own lock;
    ``only_if_wanted``: skipped unless the target (read under that lock) still asks for
    it, as the target may have changed since the tick looked."""

    def evict(self, q: QueryRuntime, timeout: float | None = None,
              only_if_wanted: bool = False) -> bool: ...

    def restore(self, q: QueryRuntime, only_if_wanted: bool = False) -> None: ...

    def rescale(self, q: QueryRuntime, shards: int, only_if_wanted: bool = False
                ) -> None: ...

    def recover(self, q: QueryRuntime, dead: tuple[int, ...]) -> None: ...

    def probe(self, q: QueryRuntime) -> tuple[int, ...] | None: ...


Done = Callable[[QueryRuntime, Step, Target | None], None]
Submit = Callable[[Callable[[], None]], None]


def _inline(job: Callable[[], None]) -> None:
    job()


@dataclass
class Reconciler:
    """Converges every query to its target (see the module docstring). ``submit`` runs a
    slow step (restore, rescale, recovery, probe) off the tick's thread; evictions run on
    it, without waiting for a busy query's lock. ``done`` hears of every attempt.
    ``registered`` tells whether a name is registered now (looked up afresh, not from the
    tick's list of queries): the targets of the others are forgotten."""

    targets: Targets
    actions: Actions
    counters: Counter
    submit: Submit = _inline
    done: Done | None = None
    probe_every_s: float = PROBE_EVERY_S
    registered: Callable[[str], bool] | None = None
    _running: set[str] = field(default_factory=set)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def running(self, name: str) -> bool:
        with self._lock:
            return name in self._running

    def tick(self, queries: Iterable[QueryRuntime], now: float) -> None:
        """Observe every query, and start the step its target asks for (if any)."""
        for q in queries:
            actual = observe(q)  # before the target: a step sets its target after it acts
            t = self.targets.get(q.name)
            if t is None or self.running(q.name):
                continue
            if t.want is Want.EVICTED and actual.live and actual.last_used > t.set_at:
                self.targets.set(q, want=Want.LIVE, by="use")  # used since it was decided
                continue
            step = diff(t, actual)
            if step is None:
                if actual.state is QueryState.LIVE and not actual.busy \
                        and now - t.probed_at >= self.probe_every_s:
                    self.targets.probed(q.name, now)
                    self._start(q, None)
            elif now >= t.retry_at:
                if step.action is Action.EVICT:
                    self._attempt(q, step)  # cheap, and never waits for the query's lock
                else:
                    self._start(q, step)
        for name in self.targets.names() if self.registered is not None else ():
            if not self.registered(name):
                self.targets.forget(name)  # dropped

    def converge(self, q: QueryRuntime, shards: int, by: str) -> None:
        """Set ``q``'s target shard count and reach it now (a request's own rescale): a
        failure is raised, and the target goes back to the actual count."""
        with self._lock:
            self._running.add(q.name)
        try:
            self.targets.set(q, shards=shards, by=by)
            try:
                self.actions.rescale(q, shards)
            except BaseException:
                self.targets.set(q, shards=q.shards, by=f"{by} failed")
                raise
        finally:
            with self._lock:
                self._running.discard(q.name)

    def _start(self, q: QueryRuntime, step: Step | None) -> None:
        """Run ``step`` (None: a probe, then a recovery of what it finds) via ``submit``."""
        with self._lock:
            if q.name in self._running:
                return
            self._running.add(q.name)

        def job() -> None:
            try:
                if step is not None:
                    self._attempt(q, step)
                    return
                dead = self._probe(q)
                if dead:
                    again = diff(self.targets.get(q.name) or Target(Want.LIVE, q.shards),
                                 observe(q, dead))
                    if again is not None:
                        self._attempt(q, again)
            finally:
                with self._lock:
                    self._running.discard(q.name)

        try:
            self.submit(job)
        except RuntimeError:  # shutting down
            with self._lock:
                self._running.discard(q.name)

    def _probe(self, q: QueryRuntime) -> tuple[int, ...]:
        try:
            dead = self.actions.probe(q) or ()
        except Exception as exc:  # e.g. the runtime is down: its watch reports that
            log.warning("liveness probe of %s failed: %s", q.name, exc)
            return ()
        if dead:
            log.warning("%s: shard(s) %s found dead by the control loop; recovering",
                        q.name, ", ".join(map(str, dead)))
            self.counters["dead_shards_found"] += len(dead)
        return dead

    def _attempt(self, q: QueryRuntime, step: Step) -> None:
        """Take ``step`` and record how it went (a failure is logged, never raised)."""
        error = None
        try:
            if step.action is Action.EVICT:
                if not self.actions.evict(q, timeout=0.0, only_if_wanted=True):
                    return  # busy right now: the next tick tries again
            elif step.action is Action.RESTORE:
                self.actions.restore(q, only_if_wanted=True)
            elif step.action is Action.RESCALE:
                self.actions.rescale(q, step.shards, only_if_wanted=True)
            else:
                self.actions.recover(q, step.dead)
        except Exception as exc:  # one query's failure must not stop the others
            error = f"{type(exc).__name__}: {exc}"
            log.error("%s of %s failed: %s", step.action.value, q.name, error)
            self.counters["reconcile_errors"] += 1
        else:
            self.counters[f"reconcile_{step.action.value}"] += 1
        target = self.targets.record(q, step, error, self.targets.clock())
        if self.done is not None:
            self.done(q, step, target)
