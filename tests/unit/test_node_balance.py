"""Where a new query actor goes (``imp_actors.node_balance``): the alive node whose
memory the live queries' state uses least, so that a few large queries do not end up on
one node as an even count of actors (Ray's SPREAD) may leave them."""

from __future__ import annotations

import numpy as np
import pytest

from imp_actors.node_balance import NodeLedger, cluster_room, emptiest_node, node_loads

GiB = 1 << 30


def _nodes(*memory: float, dead: tuple[int, ...] = ()) -> list[dict]:
    return [{"node_id": f"n{i}", "alive": i not in dead, "memory": m * GiB}
            for i, m in enumerate(memory)]


def test_loads_count_each_shard_on_the_node_it_was_started_on():
    placed = {"w1": "n0", "w2": "n1", "w3": "n0"}
    held = node_loads(placed, [("w1", 10), ("w2", 5), ("w3", 7), ("unknown", 99)])
    assert held == {"n0": (17, 2), "n1": (5, 1)}  # a worker of no known node counts nowhere


def test_the_node_with_the_smallest_share_of_its_memory_is_chosen():
    nodes = _nodes(4, 4, 4)
    assert emptiest_node(nodes, {"n0": (3 * GiB, 1), "n1": (1 * GiB, 5), "n2": (2 * GiB, 1)}) \
        == "n1"
    # a larger node holding more bytes may still be the emptiest by share
    assert emptiest_node(_nodes(4, 16), {"n0": (1 * GiB, 1), "n1": (3 * GiB, 1)}) == "n1"


def test_equal_shares_go_to_the_node_with_fewest_workers_then_the_first():
    nodes = _nodes(4, 4, 4)
    assert emptiest_node(nodes, {"n0": (0, 2), "n1": (0, 1)}) == "n2"
    assert emptiest_node(nodes, {}) == "n0"


def test_dead_nodes_are_never_chosen_and_one_node_leaves_the_choice_to_the_runtime():
    assert emptiest_node(_nodes(4, 4, 4, dead=(0,)), {"n1": (GiB, 1)}) == "n2"
    assert emptiest_node(_nodes(4, 4, dead=(1,)), {}) is None
    assert emptiest_node(_nodes(4), {}) is None


def test_a_full_node_is_passed_over_while_another_has_room():
    nodes = _nodes(1, 8)
    # n0 is over its memory; n1 has room though it holds more bytes
    assert emptiest_node(nodes, {"n0": (2 * GiB, 1), "n1": (6 * GiB, 9)}) == "n1"
    # all full: the least over
    assert emptiest_node(_nodes(1, 1), {"n0": (3 * GiB, 1), "n1": (2 * GiB, 1)}) == "n1"


@pytest.mark.parametrize("seed", range(5))
def test_greedy_placement_of_random_queries_stays_within_the_largest_query(seed):
    """Queries placed one after another, each where the state is least: no node holds
    more than an even share plus the largest single query (the greedy bound)."""
    rng = np.random.default_rng(seed)
    sizes = [int(x) for x in rng.pareto(1.2, size=22) * 50e6 + 1e6]
    nodes = _nodes(8, 8, 8)
    ledger = NodeLedger()
    shards: list[tuple[str, int]] = []
    for i, size in enumerate(sizes):
        node = emptiest_node(nodes, node_loads(ledger.placed(), shards))
        ledger.record(f"w{i}", node)
        shards.append((f"w{i}", size))
    held = node_loads(ledger.placed(), shards)
    assert sum(b for b, _ in held.values()) == sum(sizes)
    assert max(b for b, _ in held.values()) <= sum(sizes) / 3 + max(sizes)


def test_the_ledger_forgets_stopped_workers():
    ledger = NodeLedger()
    ledger.record("a", "n0")
    ledger.record("b", None)  # started where the runtime chose: not known
    ledger.record("c", "n1")
    ledger.forget(["a", "zzz"])
    assert ledger.placed() == {"c": "n1"}


def test_a_node_where_a_worker_was_just_lost_is_avoided_while_another_is_alive():
    nodes = _nodes(4, 4, 4)
    held = {"n0": (3 * GiB, 1), "n1": (2 * GiB, 1)}  # n2: its workers just died
    assert emptiest_node(nodes, held) == "n2"
    assert emptiest_node(nodes, held, avoid={"n2"}) == "n1"
    assert emptiest_node(_nodes(4, 4, dead=(0,)), {}, avoid={"n1"}) is None
    assert emptiest_node(_nodes(4, 4, 4, dead=(0,)), {}, avoid={"n1", "n2"}) == "n1"


def test_the_room_of_a_cluster_is_its_roomiest_nodes_one_per_shard():
    nodes = _nodes(4, 4, 8, dead=(1,))
    held = {"n0": (1 * GiB, 2), "n2": (6 * GiB, 9)}
    assert cluster_room(nodes, held) == 3 * GiB  # n0: 4 - 1; n1 is dead
    assert cluster_room(nodes, held, shards=2) == 5 * GiB  # n0 and n2 (8 - 6)
    assert cluster_room(nodes, held, shards=5) == 5 * GiB  # no more nodes than alive
    assert cluster_room(_nodes(1), {"n0": (2 * GiB, 1)}) == 0  # over: no room, not less
    assert cluster_room([{"node_id": "x", "alive": True}], {}) is None  # memory unknown


def test_without_a_setting_the_memory_check_uses_half_the_clusters_room(monkeypatch):
    from imp_actors.registration import _budget

    monkeypatch.delenv("IMP_REGISTRATION_MEMORY_BYTES", raising=False)
    assert _budget(None) == "auto"  # one machine: half its available memory
    assert _budget(8 * GiB) == 4 * GiB
    assert _budget(0) == 1  # a full cluster refuses every plan that needs memory
    monkeypatch.setenv("IMP_REGISTRATION_MEMORY_BYTES", "2G")
    assert _budget(8 * GiB) == "auto"  # the operator's setting wins


def test_a_querys_shards_start_on_different_nodes_while_there_are_nodes():
    """``ShardManager.start_shards`` puts each shard of a query on a node its other shards
    do not use, even when one node holds far fewer bytes (all three once went to the
    lightest node), and shares nodes only when the shards outnumber them."""
    from types import SimpleNamespace

    from imp_actors.shards import ShardManager

    nodes = _nodes(16, 16, 16)
    spawned: list[str | None] = []

    class _Backend:
        kind = "ray"

        def nodes(self):
            return nodes

        def spawn(self, name, node=None):
            spawned.append(node)
            return SimpleNamespace(name=name, kill=lambda: None)

    big = SimpleNamespace(live=True, handles=[SimpleNamespace(name="w-big")],
                          shard_bytes=[GiB])
    ctx = SimpleNamespace(backend=_Backend(), config=SimpleNamespace(warm_actors=0),
                          queries=SimpleNamespace(all=lambda: [big]))
    manager = ShardManager(ctx)
    manager.nodes.record("w-big", "n0")
    q = SimpleNamespace(capture=None)
    status = SimpleNamespace(state_bytes=300_000)
    manager.start_shards(q, 3, lambda i, h: status)
    assert sorted(spawned) == ["n0", "n1", "n2"]
    spawned.clear()
    manager.start_shards(q, 4, lambda i, h: status)
    assert sorted(set(spawned)) == ["n0", "n1", "n2"] and len(spawned) == 4
