"""The actor runtime on a local Ray (started by the coordinator itself, as ``imp serve``
does on one machine): every fresh sketch of several workload queries, maintained by Ray
actors from random update batches, equals a full recapture by Spark at the same versions;
eager and lazy strategies alike."""

from __future__ import annotations

import numpy as np
import pytest
from runtime_support import assert_spark_exact, fill_store, make_config, random_batch, workload_spec
from waiting import wait_until

from imp_actors.coordinator import Coordinator
from imp_actors.runtime_config import Eager, Lazy

pytestmark = [pytest.mark.ray, pytest.mark.spark, pytest.mark.integration]

QUERIES = ["q_having_2", "q_joinsel", "q_topk", "cq1", "q03", "q10"]


@pytest.fixture(scope="module")
def coordinator(tmp_path_factory):
    from imp_core.spark import SparkConfig, get_spark

    get_spark(SparkConfig(master="local[2]", driver_memory="2g"))
    root = tmp_path_factory.mktemp("ray-runtime")
    fill_store(root, ("synthetic", "tpch"))
    c = Coordinator(make_config(root, backend="ray", warm_actors=1)).start()
    yield c
    c.close()


def test_ray_actors_hold_the_queries(coordinator):
    c = coordinator
    for i, q in enumerate(QUERIES):
        strategy = Eager(batch_tuples=10, max_delay_s=0.5) if i % 2 else Lazy()
        c.register(workload_spec(q, q, strategy=strategy, shards=2 if q == "cq1" else 1))
    stats = c.stats()
    assert stats["backend"] == "ray" and stats["live_actors"] == len(QUERIES) + 1
    assert all(n["alive"] for n in stats["nodes"])
    for q in QUERIES:
        assert_spark_exact(c, q)


def test_random_update_batches_stay_exact_under_both_strategies(coordinator):
    c = coordinator
    rng = np.random.default_rng(17)
    tables = ["t5000g", "tjoinhelp", "crimes", "lineitem", "orders"]
    feed, batches = c.stats()["feed"], c.ctx.counters["eager_batches"]
    triggered, committed, reads = [], 0, 0
    for step in range(6):
        t = tables[step % len(tables)]
        ins, dels = random_batch(c.ctx.store, t, rng, int(rng.integers(5, 30)),
                                 2 * 10**7 + 1000 * step)
        done = c.apply_update(t, inserts=ins, deletes=dels)
        triggered += done.maintained
        committed += done.inserted + done.deleted
        reads += sum(1 for q in QUERIES if t in c.ctx.queries.get(q).tables)
        # the eager queries it set going are maintained in the background before the
        # reads below
        assert c.wait_idle(list(done.maintained), timeout=60)
        for q in QUERIES:
            assert_spark_exact(c, q)
    # eager queries maintained in the background, one job at least per triggering commit
    assert triggered and c.ctx.counters["eager_batches"] - batches >= len(set(triggered))
    # the service records its own commits in the feed as it makes them: every query
    # reading a commit's table maintained from that record (a hit of the feed's cache),
    # none read it back from storage
    now = c.stats()["feed"]
    assert now["pulls"] == feed["pulls"], (feed, now)
    assert now["pulled_rows"] - feed["pulled_rows"] == committed, (feed, now, committed)
    assert now["hits"] - feed["hits"] >= reads, (feed, now, reads)


def test_killed_actor_is_restored_and_catches_up(coordinator):
    c = coordinator
    pids = set(c.diagnostics.worker_pids())
    victim = c.ctx.queries.get("q_having_2").handles[0]
    victim_pid = victim.ping().result()
    c.diagnostics.kill_shard("q_having_2", 0)
    rng = np.random.default_rng(3)
    ins, dels = random_batch(c.ctx.store, "t5000g", rng, 20, 3 * 10**7)
    c.apply_update("t5000g", inserts=ins, deletes=dels)
    assert_spark_exact(c, "q_having_2")
    assert c.ctx.counters["actor_recoveries"] >= 1
    assert c.ctx.queries.get("q_having_2").handles[0] is not victim
    # the killed one is gone and not counted; its replacement may have come from the warm
    # pool (or two, when the control loop and the call both found it dead), which refills
    # in the background: the count comes back to all but the killed one
    assert victim_pid not in c.diagnostics.worker_pids()
    assert wait_until(lambda: len(c.diagnostics.worker_pids()) >= len(pids) - 1, timeout=60)


def test_the_control_loop_recovers_a_killed_actor_of_an_idle_query(coordinator):
    """No call on the query: the reconcile loop's liveness probe finds the dead shard
    and replaces it, and the sketch still equals a recapture."""
    c = coordinator
    c.loop.reconciler.probe_every_s = 0.2
    try:
        q = c.ctx.queries.get("cq1")  # lazy, two shards
        assert_spark_exact(c, "cq1")
        found = c.ctx.counters["dead_shards_found"]
        victim, used = q.handles[1], q.last_used
        c.diagnostics.kill_shard("cq1", 1)  # ray.kill of the shard's actor
        wait_until(lambda: q.handles is not None and q.handles[1] is not victim
                   and q.state.value == "live", timeout=60, what="the dead shard's recovery")
        assert c.ctx.counters["dead_shards_found"] == found + 1 and q.last_used == used
        assert q.handles[1].ping().result() > 0
        assert_spark_exact(c, "cq1")
    finally:
        c.loop.reconciler.probe_every_s = 5.0


def test_spark_bootstrap_of_plain_and_sharded_queries(tmp_path):
    """First states computed on Spark (and re-split for shards) stay exact under updates."""
    from dataclasses import replace

    root = tmp_path / "svc"
    fill_store(root, ("synthetic", "tpch"))
    cfg = replace(make_config(root, backend="local"), bootstrap="spark")
    rng = np.random.default_rng(4)
    with Coordinator(cfg) as c:
        for q, shards in (("q_joinsel", 3), ("q10", 1), ("cq2", 2)):
            c.register(workload_spec(q, q, shards=shards))
        assert c.ctx.counters["spark_bootstraps"] == 3
        for step in range(2):
            for t in ("t5000g", "lineitem", "crimes"):
                ins, dels = random_batch(c.ctx.store, t, rng, 12, 4 * 10**7 + 1000 * step)
                c.apply_update(t, inserts=ins, deletes=dels)
            for q in ("q_joinsel", "q10", "cq2"):
                assert_spark_exact(c, q)
