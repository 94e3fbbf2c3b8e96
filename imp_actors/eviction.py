"""Which live queries to checkpoint and stop: least recently used first.

Pure policy (no Ray, no I/O), so it is unit-tested directly. Three limits, applied in
order: idle time, the number of live actors (counting the actors about to start), and
the memory budget (sum of the live queries' state sizes). A query that is busy
(maintaining) or protected (the one being made live) is never chosen.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

from imp_actors.runtime_config import EvictionPolicy


@dataclass(frozen=True)
class LiveQuery:
    name: str
    actors: int
    last_used: float
    state_bytes: int
    busy: bool = False


def choose_victims(live: Iterable[LiveQuery], policy: EvictionPolicy, now: float,
                   incoming_actors: int = 0, protect: Iterable[str] = ()) -> list[str]:
    """Names to evict, in eviction order."""
    keep_out = set(protect)
    candidates = sorted((q for q in live), key=lambda q: q.last_used)
    victims: list[str] = []
    chosen: set[str] = set()

    def evictable(q: LiveQuery) -> bool:
        return q.name not in keep_out and q.name not in chosen and not q.busy

    if policy.idle_seconds is not None:
        for q in candidates:
            if evictable(q) and now - q.last_used >= policy.idle_seconds:
                victims.append(q.name)
                chosen.add(q.name)
    remaining = [q for q in candidates if q.name not in chosen]
    if policy.max_live_actors is not None:
        actors = sum(q.actors for q in remaining) + incoming_actors
        for q in list(remaining):
            if actors <= policy.max_live_actors:
                break
            if evictable(q):
                victims.append(q.name)
                chosen.add(q.name)
                actors -= q.actors
        remaining = [q for q in candidates if q.name not in chosen]
    if policy.memory_budget_bytes is not None:
        used = sum(q.state_bytes for q in remaining)
        for q in list(remaining):
            if used <= policy.memory_budget_bytes:
                break
            if evictable(q):
                victims.append(q.name)
                chosen.add(q.name)
                used -= q.state_bytes
    return victims
