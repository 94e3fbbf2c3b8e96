"""The reconcile loop (``imp_actors.reconcile``): the difference between a query's target
and its actual state, the backoff and give-up of failed steps, bounded liveness probes;
and, on the in-process backend, a dead shard of an idle query recovered by the loop
alone, and room made for a query without holding its lock."""

from __future__ import annotations

import threading
from collections import Counter
from dataclasses import dataclass, field
from types import SimpleNamespace

import pytest
from runtime_support import fill_store, make_config, reference_sketch, workload_spec
from waiting import wait_until

from imp_actors.coordinator import Coordinator
from imp_actors.lifecycle import QueryLock, QueryState
from imp_actors.reconcile import (
    BACKOFF_MAX_S,
    GIVE_UP,
    Action,
    Actual,
    Reconciler,
    Step,
    Target,
    Targets,
    Want,
    backoff,
    diff,
)
from imp_actors.runtime_config import EvictionPolicy


def _actual(state: QueryState = QueryState.LIVE, shards: int = 1, busy: bool = False,
            dead: tuple[int, ...] = ()) -> Actual:
    live = state in (QueryState.LIVE, QueryState.MAINTAINING)
    return Actual(state, shards, shards if live else 0, busy, 0.0, dead)


@pytest.mark.parametrize("target, actual, step", [
    (Target(Want.LIVE, 1), _actual(), None),
    (Target(Want.LIVE, 1), _actual(QueryState.EVICTED), Step(Action.RESTORE)),
    (Target(Want.EVICTED, 1), _actual(), Step(Action.EVICT)),
    (Target(Want.EVICTED, 1), _actual(QueryState.EVICTED), None),
    (Target(Want.LIVE, 3), _actual(shards=2), Step(Action.RESCALE, shards=3)),
    (Target(Want.LIVE, 1), _actual(shards=2), Step(Action.RESCALE, shards=1)),
    # an evicted query's shard count waits until it is live
    (Target(Want.EVICTED, 3), _actual(QueryState.EVICTED), None),
    # dead shards first, whatever the target
    (Target(Want.EVICTED, 3), _actual(shards=2, dead=(1,)), Step(Action.RECOVER, dead=(1,))),
    (Target(Want.LIVE, 1), _actual(dead=(0,)), Step(Action.RECOVER, dead=(0,))),
    # busy or dropped queries are left alone, but a rescale waits for the current step
    (Target(Want.EVICTED, 1), _actual(QueryState.MAINTAINING, busy=True), None),
    (Target(Want.EVICTED, 1), _actual(busy=True), None),
    (Target(Want.LIVE, 2), _actual(busy=True), Step(Action.RESCALE, shards=2)),
    (Target(Want.LIVE, 1), _actual(QueryState.EVICTED, busy=True), None),
    (Target(Want.LIVE, 1), _actual(QueryState.DROPPED), None),
    (Target(Want.LIVE, 1), _actual(QueryState.RESTORING, busy=True), None),
])
def test_diff_of_target_and_actual(target, actual, step):
    assert diff(target, actual) == step


def test_backoff_doubles_up_to_its_maximum():
    assert [backoff(n) for n in (1, 2, 3)] == [1.0, 2.0, 4.0]
    assert backoff(100) == BACKOFF_MAX_S


@dataclass
class FakeQuery:
    """What the reconciler reads of a ``QueryRuntime``."""

    name: str
    shards: int = 1
    state: QueryState = QueryState.LIVE
    scheduled: bool = False
    last_used: float = 0.0
    record: SimpleNamespace = field(default_factory=lambda: SimpleNamespace(placement=()))

    @property
    def live(self) -> bool:
        return self.state in (QueryState.LIVE, QueryState.MAINTAINING)

    @property
    def handles(self) -> list[str] | None:
        return ["h"] * self.shards if self.live else None


class FakeActions:
    def __init__(self) -> None:
        self.calls: list[tuple] = []
        self.dead: dict[str, tuple[int, ...]] = {}
        self.fail: set[str] = set()

    def evict(self, q, timeout=None, only_if_wanted=False) -> bool:
        self.calls.append(("evict", q.name))
        q.state = QueryState.EVICTED
        return True

    def restore(self, q, only_if_wanted=False) -> None:
        self.calls.append(("restore", q.name))
        q.state = QueryState.LIVE

    def rescale(self, q, shards, only_if_wanted=False) -> None:
        self.calls.append(("rescale", q.name, shards))
        if "rescale" in self.fail:
            raise RuntimeError("no room")
        q.shards = shards

    def recover(self, q, dead) -> None:
        self.calls.append(("recover", q.name, dead))
        self.dead.pop(q.name, None)

    def probe(self, q):
        self.calls.append(("probe", q.name))
        return self.dead.get(q.name, ())


def _reconciler(clock):
    targets = Targets(clock=lambda: clock[0])
    actions = FakeActions()
    done = []
    rec = Reconciler(targets, actions, Counter(), probe_every_s=10.0,
                     done=lambda q, step, t: done.append((q.name, step, t)))
    return rec, targets, actions, done


def test_the_loop_converges_to_a_shard_target_and_records_the_attempt():
    clock = [100.0]
    rec, targets, actions, done = _reconciler(clock)
    q = FakeQuery("a")
    targets.set(q, by="register")
    rec.tick([q], clock[0])
    assert actions.calls == [("probe", "a")]  # nothing to do: its shards are probed once
    targets.set(q, shards=3, by="autoscaler")
    rec.tick([q], clock[0])
    assert q.shards == 3 and actions.calls[-1] == ("rescale", "a", 3)
    t = targets.get("a")
    assert t.last.step == Step(Action.RESCALE, shards=3) and t.last.error is None
    assert done[-1][1].action is Action.RESCALE
    rec.tick([q], clock[0])  # reached: no step, and no probe before probe_every_s
    assert len(actions.calls) == 2


def test_a_failed_step_is_retried_with_backoff_then_given_up():
    clock = [0.0]
    rec, targets, actions, _ = _reconciler(clock)
    q = FakeQuery("a")
    targets.set(q, by="register")
    targets.probed("a", 0.0)
    actions.fail.add("rescale")
    targets.set(q, shards=2, by="autoscaler")
    rec.tick([q], clock[0])
    t = targets.get("a")
    assert t.failures == 1 and "no room" in t.last.error and t.retry_at == 1.0
    rec.tick([q], 0.5)  # within the backoff: not tried
    assert sum(c[0] == "rescale" for c in actions.calls) == 1
    for n in range(2, GIVE_UP + 1):
        clock[0] = targets.get("a").retry_at
        rec.tick([q], clock[0])
        assert sum(c[0] == "rescale" for c in actions.calls) == n
    t = targets.get("a")  # given up: the target is the actual state again
    assert t.shards == 1 and t.failures == 0 and t.by == "give up"
    assert rec.counters["reconcile_errors"] == GIVE_UP


def test_a_dead_shard_of_an_idle_query_is_found_by_a_bounded_probe():
    clock = [0.0]
    rec, targets, actions, _ = _reconciler(clock)
    idle, busy = FakeQuery("idle", shards=2), FakeQuery("busy", scheduled=True)
    for q in (idle, busy):
        targets.set(q, by="register")
    actions.dead["idle"] = (1,)
    rec.tick([idle, busy], 20.0)
    assert ("probe", "idle") in actions.calls and ("recover", "idle", (1,)) in actions.calls
    assert ("probe", "busy") not in actions.calls  # maintenance scheduled: not idle
    assert rec.counters["dead_shards_found"] == 1
    actions.calls.clear()
    for now in (20.05, 21.0, 29.9):  # one probe per query per probe_every_s
        rec.tick([idle, busy], now)
    assert actions.calls == []
    rec.tick([idle, busy], 30.0)
    assert actions.calls == [("probe", "idle")]


def test_an_idle_eviction_decided_before_the_last_use_is_dropped():
    clock = [0.0]
    rec, targets, actions, _ = _reconciler(clock)
    q, other = FakeQuery("used"), FakeQuery("idle")
    for x in (q, other):
        targets.set(x, by="register")
        targets.probed(x.name, 50.0)
        targets.set(x, want=Want.EVICTED, by="idle policy", at=50.0)
    q.last_used = 51.0
    rec.tick([q, other], 52.0)
    assert actions.calls == [("evict", "idle")]
    assert targets.get("used").want is Want.LIVE and q.state is QueryState.LIVE
    # an evicted query read since is not restored by that read
    q.state, q.last_used = QueryState.EVICTED, 60.0
    targets.set(q, want=Want.EVICTED, by="evict", at=55.0)
    rec.tick([q], 61.0)
    assert targets.get("used").want is Want.EVICTED and q.state is QueryState.EVICTED


def test_targets_of_dropped_queries_are_forgotten():
    clock = [0.0]
    rec, targets, _, _ = _reconciler(clock)
    registered = {"new"}
    rec.registered = registered.__contains__
    for name in ("gone", "new"):
        targets.set(FakeQuery(name), by="register")
    rec.tick([], 1.0)  # "new" registered after the tick listed the queries: kept
    assert targets.get("gone") is None and targets.get("new") is not None


def test_a_query_lock_lent_out_is_free_for_others_and_held_again_after():
    lock = QueryLock()
    with lock, lock:
        assert lock.held()
        with lock.released():
            assert not lock.held()
            got = []
            t = threading.Thread(target=lambda: got.append(lock.acquire(timeout=1.0))
                                 or lock.release())
            t.start()
            t.join()
            assert got == [True]
        assert lock.held()
    assert not lock.held()


# -- on the in-process backend --------------------------------------------------------------
@pytest.fixture(scope="module")
def store_root(tmp_path_factory):
    root = tmp_path_factory.mktemp("reconcile-store")
    fill_store(root)
    return root


@pytest.fixture
def root(tmp_path, store_root):
    import shutil

    shutil.copytree(store_root, tmp_path / "svc")
    return tmp_path / "svc"


@pytest.mark.integration
def test_the_loop_recovers_a_dead_shard_of_an_idle_query(root):
    with Coordinator(make_config(root, poll_seconds=None)) as c:
        c.loop.reconciler.probe_every_s = 0.1
        c.register(workload_spec("h", "q_having_2", shards=2))
        sv = c.get_sketch("h")
        q = c.ctx.queries.get("h")
        victim, used = q.handles[1], q.last_used
        c.diagnostics.kill_shard("h", 1)
        # no call on the query: the control loop finds the dead shard and replaces it
        wait_until(lambda: q.handles is not None and q.handles[1] is not victim
                   and q.state is QueryState.LIVE, what="the dead shard to be replaced")
        assert c.ctx.counters["dead_shards_found"] == 1
        assert c.ctx.counters["actor_recoveries"] == 1 and q.last_used == used
        assert c.ctx.targets.get("h").last.step == Step(Action.RECOVER, dead=(1,))
        assert q.handles[1].ping().result()  # it answers
        assert q.shard_versions[0] == q.shard_versions[1] == dict(sv.versions)
        again = c.get_sketch("h")
        assert again.sketch == sv.sketch == reference_sketch(c, "h", again)


@pytest.mark.integration
def test_the_loop_restores_only_what_its_target_still_wants(root):
    with Coordinator(make_config(root, poll_seconds=None)) as c:
        c.register(workload_spec("a", "q_having_2"))
        q = c.ctx.queries.get("a")
        c.evict("a")
        assert c.ctx.targets.get("a").want is Want.EVICTED
        c.state.restore(q, only_if_wanted=True)  # a restore started before the eviction
        assert q.state is QueryState.EVICTED
        c.ctx.targets.set(q, want=Want.LIVE, by="test")
        wait_until(lambda: q.state is QueryState.LIVE, what="the loop to restore it")
        assert c.ctx.targets.get("a").last.step == Step(Action.RESTORE)
        c.ctx.targets.set(q, want=Want.EVICTED, by="test")
        wait_until(lambda: q.state is QueryState.EVICTED, what="the loop to evict it")
        assert c.info("a").state == "evicted"


@pytest.mark.integration
def test_room_is_made_without_the_incoming_querys_lock(root):
    cfg = make_config(root, poll_seconds=None,
                      eviction=EvictionPolicy(max_live_actors=1, idle_seconds=None))
    with Coordinator(cfg) as c:
        seen = []
        evict = c.state.evict

        def watched(victim, timeout=None):
            incoming = [q for q in c.ctx.queries.all() if q is not victim]
            for q in incoming:  # free: another thread takes it at once
                got = []
                t = threading.Thread(target=lambda q=q, got=got: got.append(
                    q.lock.acquire(timeout=0) and (q.lock.release() or True)))
                t.start()
                t.join()
                seen.append((victim.name, q.name, got == [True] and not q.lock.held()))
            return evict(victim, timeout)

        c.state.evict = watched
        c.register(workload_spec("a", "q_having_2"))
        c.register(workload_spec("b", "q_having_2"))  # evicts a while registering b
        assert c.info("a").state == "evicted"
        c.restore("a")  # restores a under its lock: evicts b with that lock lent out
        sv = c.get_sketch("a")
        assert c.info("b").state == "evicted" and c.info("a").state == "live"
        assert seen == [("a", "b", True), ("b", "a", True)]
        assert sv.sketch == reference_sketch(c, "a", sv)
        assert c.ctx.targets.get("b").want is Want.EVICTED
