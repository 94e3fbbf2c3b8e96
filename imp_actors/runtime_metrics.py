"""The coordinator's metrics as typed records (``Coordinator.metrics``), computed when
asked: per query its lifecycle state, shards, state size, maintenance latencies and
load, shard recoveries and how far its latest sketch is behind the tables.

Invariants: nothing here takes a query's lock or calls an actor, so a scrape never
waits for maintenance (values may be one step old); a dropped query is simply absent
from the next result; staleness is measured against the tables' newest committed
versions (``VersionProbe``, which sees other writers' commits too) and is never
negative.
"""

from __future__ import annotations

import time
from typing import Mapping

from imp_actors.context import RuntimeContext
from imp_actors.lifecycle import QueryRuntime
from imp_actors.telemetry import DEFAULT_WINDOW_S
from imp_actors.types import QueryMetrics, RuntimeMetrics
from imp_core.errors import ImpError


def runtime_metrics(ctx: RuntimeContext) -> RuntimeMetrics:
    now = time.time()
    queries = ctx.queries.all()
    live = sum(len(q.handles or ()) for q in queries if q.live)
    return RuntimeMetrics(tuple(query_metrics(ctx, q, now) for q in
                                sorted(queries, key=lambda q: q.name)),
                          live, _copy(ctx.counters), now)


def query_load(q: QueryRuntime) -> float:
    """Shard-seconds of maintenance per second over the query's autoscaling window (the
    default window without autoscaling)."""
    policy = q.autoscaling
    return q.telemetry.load.load(policy.window_s if policy else DEFAULT_WINDOW_S)


def query_metrics(ctx: RuntimeContext, q: QueryRuntime, now: float) -> QueryMetrics:
    behind, since = staleness(ctx, q, now)
    return QueryMetrics(
        name=q.name, state=q.state.reported, shards=q.shards, state_bytes=q.state_bytes,
        pending_tuples=q.pending_tuples, maintenance=q.telemetry.maintenance.snapshot(),
        load=query_load(q), restarts=q.telemetry.restarts, staleness_versions=behind,
        stale_since=since, autoscaling=q.autoscaling)


def staleness(ctx: RuntimeContext, q: QueryRuntime, now: float
              ) -> tuple[int | None, float | None]:
    """(table versions committed beyond the latest sketch's, in memory or kept by the
    checkpoints of an evicted query, Unix time of the first of them); (None, None)
    without a sketch or when a table cannot be probed; (0, None) for a current sketch."""
    last = q.last_known()  # an evicted query's kept version counts too
    if last is None:
        return None, None
    try:
        current = ctx.latest_versions(q)
    except ImpError:  # a table gone from the store: the query fails when next used
        return None, None
    held = last[2]
    lag = lag_of(held, current)
    if not lag:
        return 0, None
    # the sketch has been stale since the first commit it does not hold; its log entry's
    # time says when (an object store's does not: then since the change was accounted)
    times = [ctx.probe.committed_at(t, held[t] + 1) for t in lag]
    found = [t for t in times if t is not None]
    since = min(found) if found else (q.pending_since or now)
    return sum(lag.values()), min(since, now)


def lag_of(maintained: Mapping[str, int], current: Mapping[str, int]) -> dict[str, int]:
    """Per table, how many versions ``current`` is ahead of ``maintained`` (only > 0)."""
    out = {}
    for t, v in current.items():
        ahead = v - maintained.get(t, v)
        if ahead > 0:
            out[t] = ahead
    return out


def _copy(counters: Mapping[str, int]) -> dict[str, int]:
    """A copy of counters other threads keep adding keys to (a key added during the copy
    makes it start over; keys are few and rarely new)."""
    for _ in range(100):
        try:
            return dict(counters)
        except RuntimeError:  # dictionary changed size during iteration
            continue
    return {}
