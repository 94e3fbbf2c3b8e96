"""Maintenance: bringing a live query's shards to new table versions and publishing the
sketch versions that result.

Each shard is sent only the changes it needs: the feed's per-version changes, restricted
to the rows and columns its query reads (``scan_spec.restrict_delta``) and routed by the
shard key. Invariants:
- a ``SketchVersion`` is published only when every shard is at the versions it names,
  and its sketch is the union of the shards' sketches at those versions;
- a batch lost with its worker is sent again to the recovered shard (from the versions
  the recovered state is at), at most ``RETRIES`` times per advance;
- the feed keeps every change some registered query's shard still needs.
"""

from __future__ import annotations

import logging
import time
from typing import Mapping

from pyroaring import BitMap

from imp_actors.context import RuntimeContext
from imp_actors.lifecycle import QueryRuntime, QueryState
from imp_actors.sharding import route_rows
from imp_actors.shards import ShardManager
from imp_actors.types import SketchVersion
from imp_actors.worker import ApplyResult
from imp_core.engine.operators.base import TableDelta
from imp_core.errors import WorkerLostError
from imp_core.sketch.sketch import Sketch
from imp_core.storage.scan_spec import read_columns, restrict_delta

log = logging.getLogger(__name__)

RETRIES = 3  # attempts of a batch when shards die under it


class Maintenance:
    def __init__(self, ctx: RuntimeContext, shards: ShardManager):
        self.ctx = ctx
        self.shards = shards

    def step(self, q: QueryRuntime, target: Mapping[str, int]) -> tuple[SketchVersion, bool]:
        """Advance the live query ``q`` to ``target`` and publish the sketch there (caller
        holds ``q.lock``); returns the version and whether the shards moved (then the
        caller checkpoints if one is due, and prunes the feed)."""
        latest = q.history.latest
        if latest is not None and all(v == dict(target) for v in q.shard_versions) \
                and dict(latest.versions) == dict(target):
            return latest, False
        t0 = time.perf_counter()
        self.advance(q, dict(target))
        seconds = time.perf_counter() - t0
        self.ctx.time("maintain_s", seconds)
        q.telemetry.maintenance.observe(seconds)
        self.ctx.counters["maintenance_batches"] += 1
        version = self.publish(q, dict(target), seconds)
        q.settle_pending(target)
        q.batches_since_checkpoint += 1
        return version, True

    def advance(self, q: QueryRuntime, target: dict[str, int]) -> None:
        """Bring every shard to ``target``, recovering shards that die on the way. The
        shards' time applying the batches counts to the query's load (``telemetry``)."""
        busy = 0.0
        for _attempt in range(RETRIES):
            assert q.handles is not None
            pending, todo = [], []
            for i, (h, have) in enumerate(zip(q.handles, q.shard_versions)):
                if have == target:
                    continue
                changes = self.shard_changes(q, i, have, target)
                pending.append(h.apply(changes, have, target))
                todo.append(i)
            lost = []
            for i, p in zip(todo, pending):
                try:
                    res: ApplyResult = p.result()
                except WorkerLostError as exc:
                    log.warning("%s shard %d lost during maintenance: %s", q.name, i, exc)
                    lost.append(i)
                    continue
                q.set_shard(i, None, res)
                busy += res.seconds
            if not lost:
                if busy:
                    q.telemetry.load.record(busy)
                return
            self.ctx.counters["actor_failures"] += len(lost)
            for i in lost:
                self.shards.recover_shard(q, i)
        raise WorkerLostError(f"{q.name}: shards kept dying during maintenance "
                              f"({RETRIES} attempts)")

    def align(self, q: QueryRuntime) -> dict[str, int]:
        """Bring shards that differ (a commit landed between their captures, or a crash
        hit mid-batch) to the newest of their versions; returns those versions."""
        target = {t: max(v[t] for v in q.shard_versions) for t in q.tables}
        if any(v != target for v in q.shard_versions):
            self.advance(q, target)
        return target

    def shard_changes(self, q: QueryRuntime, shard: int, have: Mapping[str, int],
                      target: Mapping[str, int]) -> dict[str, TableDelta]:
        out = {}
        for t in q.tables:
            if target[t] == have.get(t, -1):
                continue
            spec = q.scan_specs.get(t)
            full = self.ctx.feed.changes(t, have[t], target[t], read_columns(spec))
            mine = restrict_delta(full, spec)
            out[t] = route_rows(t, mine, q.key, q.shards)[shard]
        return out

    def publish(self, q: QueryRuntime, versions: dict[str, int], seconds: float
                ) -> SketchVersion:
        fragments = BitMap()
        for s in q.shard_sketches:
            fragments |= s
        last = q.history.latest
        seq = last.seq + 1 if last else q.seq_floor + 1
        if seq > q.record.seq_reserved and q.state is not QueryState.REGISTERING:
            # durable before visible: after a crash the next coordinator starts beyond it
            q.record = q.record.reserving(seq)
            self.ctx.registry.put(q.record)
        version = SketchVersion(q.name, seq, dict(versions),
                                Sketch(q.partitions, fragments), maintain_seconds=seconds)
        q.history.append(version)
        return version

    def prune_feed(self, tables: tuple[str, ...]) -> None:
        queries = self.ctx.queries.all()
        for t in tables:
            floors = [min(v.get(t, 0) for v in q.shard_versions) for q in queries
                      if t in q.tables and q.shard_versions]
            if floors:
                self.ctx.feed.prune(t, min(floors))
