"""Scheduled re-clustering: the tables registered queries read, put back in order once
other writers' commits have left them out of it (``imp_core.storage.clustering``).

A join side probed in the data layer reads about one row group per key while its table
is in order on the key; after enough MERGEs by other writers every lookup reads most of
the table. Every ``recluster_every_s`` (None: never, the default) the control loop asks
this manager to look; a check runs on a thread of its own and rewrites each decayed
table in order (``DeltaStore.optimize``: its change feed is empty, so no query has
anything to maintain and no sketch moves). A rewrite reads the whole table into the
coordinator's memory: enable it where that fits.

Invariants: at most one check runs at a time (``ReclusterState``); a table's failure
is logged and counted (``recluster_errors``), never stops the loop or another table.
"""

from __future__ import annotations

import enum
import logging
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from imp_actors.context import RuntimeContext
from imp_core.storage.clustering import recluster_decayed

log = logging.getLogger(__name__)


class ReclusterState(enum.Enum):
    IDLE = "idle"
    RUNNING = "running"


class Reclustering:
    def __init__(self, ctx: RuntimeContext, layouts: Any = None):
        self.ctx = ctx
        # ``layouts.Layouts``: with ``layout_policy`` "apply", each check first lays the
        # sketched tables out in their recommended order
        self.layouts = layouts
        self.state = ReclusterState.IDLE
        self._lock = threading.Lock()
        self._pool: ThreadPoolExecutor | None = None
        self._last = time.time()  # the first check one period after the start

    def start(self) -> None:
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="imp-recluster")

    def stop(self, wait: bool = True) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=wait, cancel_futures=not wait)

    def tick(self, now: float) -> None:
        """Start a check when one is due and none is running."""
        every = self.ctx.config.recluster_every_s
        if every is None or now - self._last < every or self._pool is None:
            return
        with self._lock:
            if self.state is ReclusterState.RUNNING:
                return
            self.state = ReclusterState.RUNNING
        self._last = now
        try:
            self._pool.submit(self._check)
        except RuntimeError:  # shutting down
            self.state = ReclusterState.IDLE

    def _check(self) -> None:
        try:
            self.run()
        finally:
            self.state = ReclusterState.IDLE

    def run(self) -> list[tuple[str, int]]:
        """Re-cluster every decayed table some registered query reads; returns
        ``(table, version written)`` of each rewrite."""
        def failed(table: str, exc: Exception) -> None:  # e.g. a concurrent commit won
            log.error("re-clustering %s failed: %s", table, exc)
            self.ctx.counters["recluster_errors"] += 1

        if self.layouts is not None and self.ctx.config.layout_policy == "apply":
            self.layouts.apply_policy()
        try:
            done = recluster_decayed(self.ctx.store, self.ctx.queries.tables(), failed)
        except Exception as exc:  # e.g. a table dropped meanwhile: look again next time
            failed("(looking for decayed tables)", exc)
            return []
        for table, version, seconds in done:
            log.info("re-clustered %s (version %d, %.1f s)", table, version, seconds)
            self.ctx.counters["reclustered_tables"] += 1
        return [(table, version) for table, version, _ in done]
