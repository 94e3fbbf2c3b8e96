"""The actor runtime on several Ray nodes on one machine (``ray.cluster_utils.Cluster``):
actors spread over the nodes; resharding 1 -> 3 -> 1 while updates stream in stays
exact; a chaos run kills random query actors and once the coordinator itself, and every
final sketch still equals a recapture; eviction under a live-actor cap restores
transparently. The oracle is the reference evaluator at each sketch's table versions."""

from __future__ import annotations

import numpy as np
import pytest
from runtime_support import fill_store, make_config, random_batch, reference_sketch, workload_spec

from imp_actors.coordinator import Coordinator
from imp_actors.runtime_config import Eager, EvictionPolicy, Lazy

pytestmark = [pytest.mark.ray, pytest.mark.integration, pytest.mark.slow]


@pytest.fixture(scope="module")
def cluster():
    import ray
    from ray.cluster_utils import Cluster

    c = Cluster(initialize_head=True, head_node_args={"num_cpus": 1})
    for _ in range(2):
        c.add_node(num_cpus=1)
    c.wait_for_nodes()
    yield c
    ray.shutdown()
    c.shutdown()


@pytest.fixture
def root(tmp_path):
    fill_store(tmp_path / "svc", ("synthetic",))
    return tmp_path / "svc"


def _config(root, cluster, **kw):
    return make_config(root, backend="ray", ray_address=cluster.address, **kw)


def _exact(c: Coordinator, name: str) -> None:
    sv = c.get_sketch(name)
    assert sv.sketch == reference_sketch(c, name, sv), name


def test_actors_spread_over_nodes_and_resharding_stays_exact(root, cluster):
    rng = np.random.default_rng(21)
    with Coordinator(_config(root, cluster)) as c:
        assert len([n for n in c.stats()["nodes"] if n["alive"]]) == 3
        c.register(workload_spec("j", "q_joinsel"))
        c.register(workload_spec("g", "q_groups_1000", shards=3))
        assert len(set(c.diagnostics.nodes("g"))) > 1  # SPREAD puts the shards on several nodes
        for step, shards in enumerate([3, 3, 1, 1]):
            for t in ("t5000g", "tjoinhelp", "t1000g"):
                ins, dels = random_batch(c.ctx.store, t, rng, 12, 10**7 + 1000 * step)
                c.apply_update(t, inserts=ins, deletes=dels)
            if c.info("j").shards != shards:
                c.scale("j", shards)
                assert c.info("j").shards == shards
            _exact(c, "j"), _exact(c, "g")
        assert c.ctx.counters["rescales"] == 2


def test_chaos_kills_actors_and_the_coordinator(root, cluster):
    rng = np.random.default_rng(99)
    names = {"h": ("q_having_2", Lazy(), 1), "e": ("q_endtoend", Eager(batch_tuples=8), 1),
             "s": ("q_groups_50", Lazy(), 2), "c": ("cq2", Eager(batch_tuples=20), 1)}
    cfg = _config(root, cluster, checkpoint_every_batches=3)
    c = Coordinator(cfg).start()
    for n, (q, strategy, shards) in names.items():
        c.register(workload_spec(f"chaos-{n}", q, strategy=strategy, shards=shards))
    kills = 0
    for step in range(14):
        for t in ("t5000g", "t50g", "crimes"):
            ins, dels = random_batch(c.ctx.store, t, rng, int(rng.integers(3, 15)),
                                     5 * 10**7 + 1000 * step)
            c.apply_update(t, inserts=ins, deletes=dels)
        if step % 3 == 1:  # kill a random live shard actor
            live = [i for i in (c.info(f"chaos-{n}") for n in names) if i.state == "live"]
            q = live[int(rng.integers(0, len(live)))]
            c.diagnostics.kill_shard(q.name, int(rng.integers(0, q.shards)))
            kills += 1
        if step == 7:  # the coordinator dies; a new one recovers registry and actors
            c.abandon()  # dead for good: a successor here takes its lease over at once
            c = Coordinator(cfg).start()
            assert c.ctx.counters["reattached_queries"] >= 1
        if step % 2:
            for n in names:
                c.get_sketch(f"chaos-{n}")
    for n in names:
        _exact(c, f"chaos-{n}")
    assert kills >= 4
    c.close()


def test_eviction_and_restore_under_a_live_actor_cap(root, cluster):
    rng = np.random.default_rng(5)
    cfg = _config(root, cluster, eviction=EvictionPolicy(max_live_actors=2, idle_seconds=None))
    with Coordinator(cfg) as c:
        names = [f"cap{i}" for i in range(5)]
        for i, n in enumerate(names):
            c.register(workload_spec(n, ["q_having_2", "q_groups_50", "cq1"][i % 3]))
            assert c.stats()["live_actors"] <= 2
        # two rounds: the cap holds 2 of the 5 queries, so each round restores evicted
        # queries behind a batch, the second ones evicted again after their first restore
        for step in range(2):
            for t in ("t5000g", "t50g", "crimes"):
                ins, dels = random_batch(c.ctx.store, t, rng, 8, 7 * 10**7 + 1000 * step)
                c.apply_update(t, inserts=ins, deletes=dels)
            for n in names:
                _exact(c, n)
                assert c.stats()["live_actors"] <= 2
        assert c.ctx.counters["evictions"] >= 5 and c.ctx.counters["restores"] >= 5
