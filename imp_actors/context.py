"""What the coordinator's parts share: the stores and services it was built with, its
counters, and the directory of registered queries.

Invariants of ``QueryDirectory``: a name maps to at most one ``QueryRuntime``; a table
routes to exactly the names of the listed queries that read it once they are routed
(registration routes a query only after its first state is built); every read and
change holds the directory's lock, and the lock is never held while waiting for a
query's own lock.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from imp_actors.checkpoints import CheckpointStore
from imp_actors.feed import DeltaFeed, VersionProbe
from imp_actors.handles import Backend
from imp_actors.lease import StoreLease
from imp_actors.lifecycle import QueryRuntime, QueryState
from imp_actors.reconcile import Targets
from imp_actors.registry import Registry
from imp_actors.runtime_config import RuntimeConfig
from imp_actors.spark_work import SparkWork
from imp_core.engine.pipeline import EngineOptions
from imp_core.errors import QueryExistsError, UnknownQueryError
from imp_core.plan.nodes import QueryPlan

_KEEP_TIMINGS = 1000


class QueryDirectory:
    """The registered queries by name, and which of them read each table."""

    def __init__(self) -> None:
        self.lock = threading.RLock()
        self._queries: dict[str, QueryRuntime] = {}
        self._routes: dict[str, set[str]] = {}

    def get(self, name: str) -> QueryRuntime:
        q = self._queries.get(name)  # a dict read is atomic; writers hold the lock
        if q is None:
            raise UnknownQueryError(f"no registered query {name!r}")
        return q

    def get_or_none(self, name: str) -> QueryRuntime | None:
        """``get`` without the error: None for a name not registered."""
        return self._queries.get(name)  # atomic, as in ``get``

    def check_free(self, name: str) -> None:
        with self.lock:
            if name in self._queries:
                raise QueryExistsError(f"a query named {name!r} is already registered")

    def add(self, q: QueryRuntime) -> None:
        with self.lock:
            self.check_free(q.name)
            self._queries[q.name] = q

    def put(self, q: QueryRuntime) -> None:
        """Add ``q`` or replace the query of its name (recovery from the registry)."""
        with self.lock:
            self._queries[q.name] = q

    def route(self, q: QueryRuntime) -> None:
        with self.lock:
            for t in q.tables:
                self._routes.setdefault(t, set()).add(q.name)

    def remove(self, name: str) -> None:
        with self.lock:
            self._queries.pop(name, None)
            for names in self._routes.values():
                names.discard(name)

    def all(self) -> list[QueryRuntime]:
        with self.lock:
            return list(self._queries.values())

    def names(self) -> list[str]:
        with self.lock:
            return sorted(self._queries)

    def tables(self) -> list[str]:
        """The tables some registered query reads."""
        with self.lock:
            return sorted(self._routes)

    def with_plan(self, plan: QueryPlan) -> QueryRuntime | None:
        """A registered query with this plan (the same fingerprint), if any."""
        fp = plan.fingerprint()
        return next((q for q in self.all() if q.plan.fingerprint() == fp), None)

    def select(self, names: list[str] | None, tables: list[str] | None) -> list[QueryRuntime]:
        """The queries named or reading any of ``tables`` (all without either), by name."""
        if not names and not tables:
            return self.all_by_name()
        chosen = {n: self.get(n) for n in names or ()}
        chosen.update((q.name, q) for q in self.reading([t.lower() for t in tables or ()]))
        return [chosen[n] for n in sorted(chosen)]

    def all_by_name(self) -> list[QueryRuntime]:
        with self.lock:
            return [self._queries[n] for n in sorted(self._queries)]

    @staticmethod
    def wait_idle(queries: list[QueryRuntime], timeout: float) -> bool:
        """True once none of ``queries`` has maintenance scheduled or running (False when
        ``timeout`` seconds pass first)."""
        deadline = time.monotonic() + timeout
        while any(q.scheduled or q.state is QueryState.MAINTAINING for q in queries):
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.0005)
        return True

    def reading(self, tables: list[str]) -> list[QueryRuntime]:
        """The routed queries that read any of ``tables``, by name."""
        with self.lock:
            names = sorted(set().union(*(self._routes.get(t, set()) for t in tables)))
            return [self._queries[n] for n in names if n in self._queries]


@dataclass
class RuntimeContext:
    """The coordinator's collaborators, built once and shared by its parts."""

    config: RuntimeConfig
    store: Any
    options: EngineOptions
    backend: Backend
    registry: Registry
    checkpoints: CheckpointStore
    probe: VersionProbe
    spark: SparkWork
    feed: DeltaFeed
    queries: QueryDirectory = field(default_factory=QueryDirectory)
    lease: StoreLease | None = None  # this coordinator's hold on the store (``lease.py``)
    targets: Targets = field(default_factory=Targets)  # what each query should be
    counters: Counter = field(default_factory=Counter)
    timings: dict[str, list[float]] = field(
        default_factory=lambda: {"maintain_s": [], "restore_s": []})

    def time(self, what: str, seconds: float) -> None:
        """Record one duration, keeping the newest ones only."""
        kept = self.timings.setdefault(what, [])
        kept.append(seconds)
        del kept[:-_KEEP_TIMINGS]

    def latest_versions(self, q: QueryRuntime, max_age: float = 0.0) -> dict[str, int]:
        """The newest committed version of every table ``q`` reads (as found at most
        ``max_age`` seconds ago, see ``VersionProbe``)."""
        return {t: self.probe.latest(t, max_age) for t in q.tables}

    def stats(self) -> dict[str, Any]:
        """The service's counters, live queries and actors, feed and timings."""
        queries = self.queries.all()
        live = [q for q in queries if q.live]
        maint = sorted(self.timings["maintain_s"])
        fs = self.feed.stats
        return {
            "backend": self.backend.kind,
            "registered_queries": len(queries),
            "live_queries": len(live),
            "live_actors": sum(len(q.handles or ()) for q in live),
            "state_bytes_live": sum(q.state_bytes for q in live),
            "tables": self.queries.tables(),
            "nodes": self.backend.nodes(),
            "feed": {"pulls": fs.pulls, "hits": fs.hits, "spark_pulls": fs.spark_pulls,
                     "pulled_rows": fs.pulled_rows, "cached_bytes": self.feed.cached_bytes()},
            "maintain_ms_p50": 1000 * maint[len(maint) // 2] if maint else None,
            "counters": dict(self.counters),
        }
