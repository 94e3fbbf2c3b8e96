"""Adaptive ranges in the service: rows per fragment kept from the change feed, and a
query whose fragments over- or underflow re-partitioned on new equi-depth ranges.

After every maintained batch (``StateManager.maintain``, under the query's lock) the
feed's changes of each sketched table are counted per fragment
(``imp_core.sketch.adaptive.FragmentCounts``; built from the table's column on this
manager's thread after the first batch, without the query's lock); when a fragment
holds more than ``adaptive_overflow`` times the mean (IMP_ADAPTIVE_OVERFLOW) or less
than a quarter of it, a check is queued on this manager's thread: new equi-depth
ranges over the column's current values, and where they are markedly more even,
``StateManager.repartition`` builds the query's state anew on them and publishes its
sketch. Until then every request is answered from the old ranges' versions; the new
version is exact by construction (a capture on the new ranges at the tables' latest
versions).

Invariants: at most one check runs at a time, and a query is checked by one at most;
with ``adaptive_ranges`` off (IMP_ADAPTIVE_RANGES=off) nothing is counted; a failed
re-partition leaves the query on its old ranges (logged and counted).
"""

from __future__ import annotations

import logging
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, Mapping

from imp_actors.context import RuntimeContext
from imp_actors.lifecycle import QueryRuntime
from imp_core.sketch.adaptive import FragmentCounts, rebalanced
from imp_core.sketch.partition import PartitionSet

log = logging.getLogger(__name__)


class AdaptiveRanges:
    def __init__(self, ctx: RuntimeContext, state: Any):
        self.ctx = ctx
        self.state = state  # ``state_manager.StateManager``: re-partitions
        self._lock = threading.Lock()
        self._queued: set[str] = set()
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="imp-ranges")

    def stop(self, wait: bool = True) -> None:
        self._pool.shutdown(wait=wait, cancel_futures=True)

    def count(self, q: QueryRuntime, target: Mapping[str, int]) -> None:
        """Count the changes that brought ``q`` to ``target`` (caller holds ``q.lock``)
        and queue a check when a fragment over- or underflows. The first counts are
        built on this manager's thread (``_build``), so no maintained batch waits for a
        whole column to be read."""
        if not self.ctx.config.adaptive_ranges:
            return
        if q.counts is None:
            self._queue(q.name, self._build, q.partitions, dict(target))
            return
        feed = self.ctx.feed
        for t, counts in q.counts.items():
            have = q.counted_versions[t]
            if target[t] > have:
                column = counts.partition.column
                full = feed.changes(t, have, target[t], (column,))
                counts.apply(full.rows.column(column), full.weights)
                q.counted_versions[t] = target[t]
        if any(c.skew(self.ctx.config.adaptive_overflow) is not None
               for c in q.counts.values()):
            self._queue(q.name, self.check_named)

    def _build(self, name: str, partitions: PartitionSet, versions: dict[str, int]) -> None:
        """``name``'s counts from its sketched columns at ``versions``, read without its
        lock; kept unless it was re-partitioned or counted meanwhile (the batches after
        ``versions`` are counted from the feed by the next ``count``)."""
        store = self.ctx.store
        counts = {p.table: FragmentCounts.of(
            p, store.read(p.table, versions[p.table], columns=[p.column]).column(0))
            for p in partitions.partitions}
        q = self.ctx.queries.get_or_none(name)
        if q is None:
            return
        with q.lock:
            if q.counts is None and q.partitions is partitions:
                q.counts = counts
                q.counted_versions = {t: versions[t] for t in counts}

    def _queue(self, name: str, job: Callable[..., Any], *args: Any) -> None:
        with self._lock:
            if name in self._queued:
                return
            self._queued.add(name)
        try:
            self._pool.submit(self._run, name, job, *args)
        except RuntimeError:  # shutting down
            with self._lock:
                self._queued.discard(name)

    def _run(self, name: str, job: Callable[..., Any], *args: Any) -> None:
        try:
            job(name, *args)
        except Exception as exc:  # noqa: BLE001 - the old ranges stay; logged and counted
            log.error("adaptive ranges of %s failed: %s", name, exc)
            self.ctx.counters["repartition_errors"] += 1
        finally:
            with self._lock:
                self._queued.discard(name)

    def check_named(self, name: str) -> None:
        q = self.ctx.queries.get_or_none(name)
        if q is not None:
            self.check(q)

    def check(self, q: QueryRuntime) -> list[dict[str, Any]]:
        """Re-partition ``q`` where its counts call for it and new ranges help; returns
        what was re-partitioned."""
        store = self.ctx.store
        with q.lock:
            if q.counts is None:
                return []
            versions = dict(q.counted_versions)
            new, done = {}, []
            for t, counts in q.counts.items():
                reason = counts.skew(self.ctx.config.adaptive_overflow)
                if reason is None:
                    continue
                part = counts.partition
                values = store.read(t, versions[t], columns=[part.column]).column(0)
                ranges = rebalanced(part, values)
                if counts.worth(FragmentCounts.of(ranges, values)):
                    new[t] = ranges
                    done.append({"versions": versions, "table": t, "reason": reason,
                                 "fragments": ranges.size})
            if not new:
                return []
            pset = PartitionSet(tuple(new.get(p.table, p) for p in q.partitions.partitions))
            self.state.repartition(q, pset)
            q.counts = None  # counted anew on the new ranges at the next batch
            q.repartitions.extend(done)
        for d in done:
            log.info("%s: new ranges on %s (%s)", q.name, d["table"], d["reason"])
        return done
