"""What the coordinator measures about each query while it runs: maintenance latencies,
maintenance load, recoveries of lost shards. Plain numbers, no Prometheus: the front end
turns them into metrics at scrape time (``services/exporter.py``), the autoscaler reads
the load (``autoscaler.py``).

Invariants:
- ``LatencyHistogram``: ``counts[i]`` is the number of observations <= ``BOUNDS[i]``
  (cumulative, non-decreasing), the last bound is +inf so its count is the total, and
  ``total`` is the sum of every observation; observations only add;
- ``LoadMeter``: samples are kept in time order and only those of the last
  ``horizon_s`` seconds; the load is never negative;
- each object has its own lock, so reading them never waits for a query's lock (a
  maintenance step can take seconds; a scrape must not).
"""

from __future__ import annotations

import bisect
import math
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Callable

from imp_actors.types import LatencySnapshot

# upper bounds of the maintenance latency buckets, seconds: 1 ms to a minute
BOUNDS: tuple[float, ...] = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
                             1.0, 2.5, 5.0, 10.0, 30.0, 60.0, math.inf)

DEFAULT_WINDOW_S = 30.0  # the load reported for queries without autoscaling
HORIZON_S = 600.0        # the longest window any load is asked for


class LatencyHistogram:
    """Counts of durations by bucket (see the module docstring)."""

    def __init__(self, bounds: tuple[float, ...] = BOUNDS):
        if not bounds or bounds[-1] != math.inf or list(bounds) != sorted(set(bounds)):
            raise ValueError("bucket bounds must increase strictly and end with +inf")
        self.bounds = bounds
        self._lock = threading.Lock()
        self._per_bucket = [0] * len(bounds)  # observations in (bounds[i-1], bounds[i]]
        self._sum = 0.0

    def observe(self, seconds: float) -> None:
        i = bisect.bisect_left(self.bounds, seconds)
        with self._lock:
            self._per_bucket[i] += 1
            self._sum += seconds

    def snapshot(self) -> LatencySnapshot:
        with self._lock:
            per_bucket, total = list(self._per_bucket), self._sum
        cumulative, running = [], 0
        for n in per_bucket:
            running += n
            cumulative.append(running)
        return LatencySnapshot(self.bounds, tuple(cumulative), total)


class LoadMeter:
    """Shard-seconds of maintenance per second of wall time: each maintenance step adds
    the time its shards spent applying their batch (``ApplyResult.seconds``, summed over
    the shards), and ``load(window)`` divides what was added in the last ``window``
    seconds by the window (by the meter's age while it is younger than the window, so a
    new query is not taken for idle). With K shards splitting the work evenly, each one
    is busy ``load / K`` of the time; the autoscaler compares that with its target."""

    def __init__(self, clock: Callable[[], float] = time.monotonic,
                 horizon_s: float = HORIZON_S):
        self.clock = clock
        self.horizon_s = horizon_s
        self.started = clock()
        self._lock = threading.Lock()
        self._samples: deque[tuple[float, float]] = deque()  # (time, busy shard-seconds)

    def record(self, busy_seconds: float, at: float | None = None) -> None:
        now = self.clock() if at is None else at
        with self._lock:
            if self._samples and now < self._samples[-1][0]:
                now = self._samples[-1][0]  # keep time order whatever the callers' clocks
            self._samples.append((now, max(busy_seconds, 0.0)))
            self._prune(now)

    def load(self, window_s: float, now: float | None = None) -> float:
        now = self.clock() if now is None else now
        with self._lock:
            self._prune(now)
            busy = sum(b for t, b in self._samples if t > now - window_s)
        span = min(window_s, max(now - self.started, min(window_s, 1.0)))
        return busy / span

    def _prune(self, now: float) -> None:
        while self._samples and self._samples[0][0] <= now - self.horizon_s:
            self._samples.popleft()


@dataclass
class QueryTelemetry:
    """One query's measurements (lives as long as its ``QueryRuntime``)."""

    maintenance: LatencyHistogram = field(default_factory=LatencyHistogram)
    load: LoadMeter = field(default_factory=LoadMeter)
    _restarts: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def restarted(self) -> None:
        """A lost shard was replaced (its actor died and was recovered)."""
        with self._lock:
            self._restarts += 1

    @property
    def restarts(self) -> int:
        with self._lock:
            return self._restarts
