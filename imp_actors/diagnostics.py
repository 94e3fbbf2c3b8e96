"""Looking into (and, for fault injection, breaking) a query's live actors: where its
shards run, their operators' counters, the workers' process ids, and killing one shard.

Tools and tests use these through ``Coordinator.diagnostics``; nothing here changes a
sketch. Every call that needs a query's actors makes it live first (restoring an
evicted query), under the query's lock, like any other use.
"""

from __future__ import annotations

from typing import Callable

from imp_actors.context import RuntimeContext
from imp_actors.handles import Pending, T, WorkerHandle, gather
from imp_actors.shards import ShardManager
from imp_actors.state_manager import StateManager
from imp_core.errors import UnknownQueryError, WorkerLostError


class Diagnostics:
    def __init__(self, ctx: RuntimeContext, shards: ShardManager, state: StateManager):
        self.ctx = ctx
        self.shards = shards
        self.state = state

    def _ask_shards(self, name: str, ask: Callable[[WorkerHandle], Pending[T]]) -> list[T]:
        """``ask`` every shard of the query (made live first), in shard order."""
        q = self.ctx.queries.get(name)
        with q.lock:
            self.state.ensure_live(q)
            assert q.handles is not None
            return gather([ask(h) for h in q.handles])

    def nodes(self, name: str) -> list[str]:
        """The Ray node (or "local") of each live shard of a query."""
        return self._ask_shards(name, lambda h: h.node())

    def state_by_node(self) -> dict[str, dict[str, int]]:
        """Per node, the state bytes of the live shards placed on it, per query
        (``{node: {query: bytes}}``): how the queries' state is spread over the cluster.
        Evicted queries hold no node's memory and are left out; a query whose actors do
        not answer is left out too (its recovery is the next use's business, not this
        look's)."""
        spread: dict[str, dict[str, int]] = {}
        for q in self.ctx.queries.all():
            with q.lock:
                if not q.live or q.handles is None:
                    continue
                try:
                    where = gather([h.node() for h in q.handles])
                except WorkerLostError:
                    continue
                for node, size in zip(where, q.shard_bytes):
                    per_query = spread.setdefault(node, {})
                    per_query[q.name] = per_query.get(q.name, 0) + size
        return spread

    def wait_for_indexes(self, timeout_s: float) -> bool:
        """Wait until no live worker's process has a shared index build asked for or
        running (asked of all at once); False when one had not finished in ``timeout_s``
        or did not answer."""
        handles = [h for q in self.ctx.queries.all() if q.live for h in q.handles or ()]
        try:
            return all(gather([h.wait_indexes(timeout_s) for h in handles]))
        except WorkerLostError:
            return False

    def operator_stats(self, name: str) -> list[list[dict]]:
        """Per live shard, its pipeline's ``IncrementalQuery.stats()`` (made live first)."""
        return self._ask_shards(name, lambda h: h.stats())

    def worker_pids(self) -> list[int]:
        """Process ids of every live worker (query shards and warm ones)."""
        handles = [h for q in self.ctx.queries.all() if q.live for h in q.handles or ()]
        pending = [h.ping() for h in handles + self.shards.warm_handles()]
        pids = []
        for p in pending:
            try:
                pids.append(p.result())
            except WorkerLostError:
                continue  # died meanwhile: no longer a live worker
        return pids

    def kill_shard(self, name: str, shard: int) -> None:
        """Kill one live shard's actor (fault injection: the reconcile loop finds it dead
        and recovers it, or the next use does, whichever comes first)."""
        q = self.ctx.queries.get(name)
        with q.lock:
            if not q.live or q.handles is None:
                raise UnknownQueryError(f"query {name!r} has no live actors")
            q.handles[shard].kill()
