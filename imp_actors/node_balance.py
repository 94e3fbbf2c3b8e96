"""Which node of the cluster a new query actor goes to: the one whose memory is least
used by the live queries' state.

Ray's ``SPREAD`` strategy balances the number of actors, not their memory: at SF 10 the
22 TPC-H queries' state ranges from 1 MiB to 600 MiB a query, so an even count can leave
one node with most of the state. Here every actor this coordinator started is
remembered with the node it was asked onto, and each query reports its shards' state
bytes after every step; a new actor (a registration, a restore, a recovery, a rescale)
is asked onto the alive node with the smallest share of its memory in use (Ray's
``memory`` resource of the node, ``ray start --memory``), among the nodes still under
it when there are such. The affinity is soft: if that node cannot take the actor (it was
lost meanwhile), Ray places it elsewhere.

Invariants: ``NodeLedger`` knows a worker's node only as asked for at its start (actors
never move in Ray: a restarted or lost one is a new worker); a worker it does not know
(a warm or adopted one) counts for no node.
"""

from __future__ import annotations

import threading
from typing import Any, Collection, Iterable, Mapping, Sequence


def node_loads(placed: Mapping[str, str], shards: Iterable[tuple[str, int]]
               ) -> dict[str, tuple[int, int]]:
    """Per node, the state bytes and the number of ``shards`` (worker name, state bytes)
    on it, each counted on the node ``placed`` says its worker was started on."""
    held: dict[str, tuple[int, int]] = {}
    for worker, size in shards:
        node = placed.get(worker)
        if node is not None:
            total, count = held.get(node, (0, 0))
            held[node] = (total + size, count + 1)
    return held


def emptiest_node(nodes: Sequence[Mapping[str, Any]], held: Mapping[str, tuple[int, int]],
                  avoid: Collection[str] = ()) -> str | None:
    """The alive node with the smallest share of its memory held (``held`` bytes over its
    ``memory``; a node without a memory figure counts its bytes over 1 GiB), preferring
    nodes not full; among equal shares the one with fewest workers, then the one listed
    first. Nodes in ``avoid`` (where a worker was just lost: the node may be lost and not
    yet known dead) only when no other is alive. None when fewer than two nodes are alive
    (there is nothing to choose)."""
    alive = [n for n in nodes if n.get("alive")]
    if len(alive) < 2:
        return None
    alive = [n for n in alive if n["node_id"] not in avoid] or alive

    def used(n: Mapping[str, Any]) -> float:
        return held.get(n["node_id"], (0, 0))[0] / float(n.get("memory") or 1 << 30)

    room = [n for n in alive if used(n) < 1.0] or alive
    return min(room, key=lambda n: (used(n), held.get(n["node_id"], (0, 0))[1]))["node_id"]


def cluster_room(nodes: Sequence[Mapping[str, Any]], held: Mapping[str, tuple[int, int]],
                 shards: int = 1) -> int | None:
    """The most state a new query of ``shards`` shards could be given: its shards go to
    different nodes while there are nodes, so the room left (a node's ``memory`` less
    the state ``held`` there) on the ``shards`` roomiest alive nodes. None when no alive
    node states its memory (the runtime's nodes are not known: the caller's own
    machine decides)."""
    rooms = sorted((max(0, int(n["memory"]) - held.get(n["node_id"], (0, 0))[0])
                    for n in nodes if n.get("alive") and n.get("memory")), reverse=True)
    if not rooms:
        return None
    return sum(rooms[:max(1, shards)])


class NodeLedger:
    """The node each worker this coordinator started was asked onto."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._placed: dict[str, str] = {}

    def record(self, worker: str, node: str | None) -> None:
        if node is not None:
            with self._lock:
                self._placed[worker] = node

    def forget(self, workers: Iterable[str]) -> None:
        with self._lock:
            for w in workers:
                self._placed.pop(w, None)

    def placed(self) -> dict[str, str]:
        with self._lock:
            return dict(self._placed)
