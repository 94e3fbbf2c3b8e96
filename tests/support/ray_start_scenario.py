"""The scenario of ``tests/integration/test_ray_start_cluster.py``, run as a process of
its own (``python ray_start_scenario.py FOLDER``): Ray reads its authentication mode once
per process, and the cluster's token authentication must be in the environment before
(a pytest worker that ran another Ray test first has it fixed to "disabled").

Exits 0 when every check held, printing the recovery time; an assertion's traceback and
a non-zero status otherwise. The cluster is taken down either way."""

from __future__ import annotations

import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from runtime_support import fill_store, make_config, random_batch, reference_sketch, workload_spec

from imp_actors.coordinator import Coordinator
from services import ray_cluster

BUDGET = 40_000  # bytes of join inputs an actor may hold: the test lineitem is more


def _exact(c: Coordinator, name: str) -> None:
    sv = c.get_sketch(name)
    assert sv.sketch == reference_sketch(c, name, sv), name


def scenario(cluster: ray_cluster.Cluster, tmp_path: Path) -> None:
    nodes = ray_cluster.alive_nodes(cluster)
    assert len([n for n in nodes if n["alive"]]) == 3
    assert all(n["resources"].get("memory") == 2 << 30 for n in nodes)
    root = tmp_path / "svc"
    fill_store(root, ("synthetic", "tpch"))
    rng = np.random.default_rng(52)
    cfg = make_config(root, backend="ray", ray_address=cluster.address,
                      join_state_budget_bytes=BUDGET)
    with Coordinator(cfg) as c:
        c.register(workload_spec("g", "q_groups_1000", shards=3))
        c.register(workload_spec("q03", "q03"))
        c.register(workload_spec("q10", "q10"))
        assert c.info("q03").probed_join_sides and c.info("q10").probed_join_sides
        # each new actor goes to the node least used: g's three shards one per node
        assert len(set(c.diagnostics.nodes("g"))) == 3
        assert c.diagnostics.wait_for_indexes(120)  # the actors' builds asked at wiring
        spread = c.diagnostics.state_by_node()
        assert set(spread) <= {n["node_id"] for n in nodes}
        assert {q for per in spread.values() for q in per} == {"g", "q03", "q10"}
        assert sum(sum(per.values()) for per in spread.values()) == sum(
            c.info(q).state_bytes for q in ("g", "q03", "q10"))
        tables = ("t1000g", "lineitem", "orders", "customer")
        acknowledged: dict[str, int] = {}
        for step in range(2):
            for t in tables:
                ins, dels = random_batch(c.ctx.store, t, rng, 60, 9 * 10**7 + 1000 * step)
                acknowledged[t] = c.apply_update(t, inserts=ins, deletes=dels).version
            for q in ("g", "q03", "q10"):
                _exact(c, q)
        # the probed sides read shared indexes, which the queries show (a side whose
        # probes its Bloom filter all spared has built none)
        indexes = [i for q in ("q03", "q10") for i in c.info(q).indexes]
        assert indexes and all(i.table in ("lineitem", "orders", "customer")
                               and i.bytes + i.disk_bytes > 0 for i in indexes), indexes
        # a worker node holding a shard of g is lost: all its processes killed at once
        import ray

        port_of = {n["NodeID"]: n["NodeManagerPort"] for n in ray.nodes()}
        victim_port = next(port_of[n] for n in c.diagnostics.nodes("g")
                           if port_of.get(n) != cluster.nodes[0].node_manager_port)
        victim = next(n.index for n in cluster.nodes if n.node_manager_port == victim_port)
        assert ray_cluster.remove_node(cluster, victim) > 0
        t0 = time.monotonic()
        for t in tables:  # updates keep coming while the node is gone
            ins, dels = random_batch(c.ctx.store, t, rng, 60, 9 * 10**7 + 5000)
            acknowledged[t] = c.apply_update(t, inserts=ins, deletes=dels).version
        for q in ("g", "q03", "q10"):
            sv = c.get_sketch(q)
            # every acknowledged update is in the sketch's versions, and it is exact
            assert all(sv.versions[t] >= v for t, v in acknowledged.items()
                       if t in sv.versions), (q, sv.versions, acknowledged)
            assert sv.sketch == reference_sketch(c, q, sv), q
        recovery_s = time.monotonic() - t0
        detected_s = ray_cluster.wait_for_loss(cluster, victim_port)
        alive = {n["node_manager_port"] for n in ray_cluster.alive_nodes(cluster)
                 if n["alive"]}
        assert victim_port not in alive and len(alive) == 2
        assert set(c.diagnostics.nodes("g")) <= {n for n, p in port_of.items() if p in alive}
        print(f"the loss of node {victim}: exact sketches after {recovery_s:.1f} s, "
              f"reported by the cluster after {detected_s:.1f} s more")


def main(folder: Path) -> int:
    # a short folder: Ray's Unix sockets live under it (a path limit of 107 bytes)
    socket_dir = Path(tempfile.mkdtemp(prefix="imprc-", dir="/tmp"))
    cluster = ray_cluster.up(3, socket_dir, num_cpus=1, memory_bytes=2 << 30,
                             object_store_bytes=100 << 20)
    try:
        os.environ.update(cluster.env())  # the cluster's address and token, as a server gets
        scenario(cluster, folder)
    finally:
        import ray

        ray.shutdown()
        ray_cluster.down(cluster)
    assert not ray_cluster._processes(cluster.temp_dir)  # nothing of the cluster is left
    print("nothing of the cluster left")
    return 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1])))
