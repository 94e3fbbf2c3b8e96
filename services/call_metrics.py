"""Per-method call counters of the front end, as Prometheus metrics (``/metrics``,
``services/exporter.py``) and as the ``Stats`` RPC's JSON (``snapshot``).

Every finished call adds one to ``imp_grpc_calls_total{service, method, code}`` and its
duration to ``imp_grpc_call_duration_seconds{service, method}``, in the registry the
server gives (each server its own, so several can run in one process).

A call's record is on the hot path of every RPC, so it is kept in plain counters of
one method under one lock (a bucket found by bisection, a count and a sum), and turned
into metric families only when scraped (``_CallCollector``): prometheus_client's own
labelled series would take three locks per call.

Invariant: for every method, the counts by status add up to the calls that finished,
and its duration histogram counts the same calls.
"""

from __future__ import annotations

import bisect
import threading
import time
from typing import Any, Callable, Iterator

from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, HistogramMetricFamily

# gRPC call durations, seconds: sub-millisecond cached sketches to long registrations
CALL_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0,
                2.5, 5.0, 10.0, 30.0, 60.0, 300.0, float("inf"))


def split_method(method: str) -> tuple[str, str]:
    """``/imp.v1.SketchService/GetSketch`` as ("imp.v1.SketchService", "GetSketch")."""
    service, _, name = method.rpartition("/")
    return service.lstrip("/"), name


class _MethodCalls:
    """The finished calls of one method: counts by status code, a duration histogram."""

    def __init__(self, service: str, name: str):
        self.service = service
        self.name = name
        self.lock = threading.Lock()
        self.codes: dict[str, int] = {}
        self.buckets = [0] * len(CALL_BUCKETS)  # not cumulative: one count per bucket
        self.seconds = 0.0

    def record(self, code: str, seconds: float) -> None:
        i = bisect.bisect_left(CALL_BUCKETS, seconds)
        with self.lock:
            self.codes[code] = self.codes.get(code, 0) + 1
            self.buckets[min(i, len(CALL_BUCKETS) - 1)] += 1
            self.seconds += seconds

    def read(self) -> tuple[dict[str, int], list[int], float]:
        with self.lock:
            return dict(self.codes), list(self.buckets), self.seconds


class CallMetrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        self._started = time.time()
        self._methods: dict[str, _MethodCalls] = {}
        self._lock = threading.Lock()
        self.registry.register(_CallCollector(self))

    def _of(self, method: str) -> _MethodCalls:
        calls = self._methods.get(method)
        if calls is None:
            with self._lock:
                calls = self._methods.setdefault(method, _MethodCalls(*split_method(method)))
        return calls

    def record(self, method: str, code: str, seconds: float) -> None:
        self._of(method).record(code, seconds)

    def recorder(self, method: str) -> Callable[[str, float], None]:
        """``record`` for one method, looked up once (the hot path of every call)."""
        return self._of(method).record

    def methods(self) -> list[_MethodCalls]:
        with self._lock:
            return list(self._methods.values())

    def snapshot(self) -> dict[str, Any]:
        """``{"uptime_s", "methods": {method: {"calls", "by_status", "mean_ms"}}}``, the
        methods by name whatever their service (as the Stats RPC has always reported)."""
        codes: dict[str, dict[str, int]] = {}
        seconds: dict[str, float] = {}
        for m in self.methods():
            by_code, _, total = m.read()
            mine = codes.setdefault(m.name, {})
            for code, n in by_code.items():
                mine[code] = mine.get(code, 0) + n
            seconds[m.name] = seconds.get(m.name, 0.0) + total
        methods = {}
        for name, by_code in sorted(codes.items()):
            calls = sum(by_code.values())
            if not calls:  # a method whose handler exists but never finished a call
                continue
            methods[name] = {"calls": calls, "by_status": dict(by_code),
                             "mean_ms": round(1000 * seconds[name] / calls, 3)}
        return {"uptime_s": round(time.time() - self._started, 3), "methods": methods}


class _CallCollector:
    """``imp_grpc_calls_total`` and ``imp_grpc_call_duration_seconds`` at scrape time."""

    def __init__(self, metrics: CallMetrics):
        self.metrics = metrics

    def collect(self) -> Iterator[Any]:
        calls = CounterMetricFamily("imp_grpc_calls", "gRPC calls that finished, by status code",
                                    labels=("service", "method", "code"))
        durations = HistogramMetricFamily(
            "imp_grpc_call_duration_seconds", "Time from a call's start to its status, seconds",
            labels=("service", "method"))
        for m in sorted(self.metrics.methods(), key=lambda m: (m.service, m.name)):
            by_code, buckets, total = m.read()
            if not by_code:
                continue
            for code, n in sorted(by_code.items()):
                calls.add_metric((m.service, m.name, code), n)
            cumulative, running = [], 0
            for bound, n in zip(CALL_BUCKETS, buckets):
                running += n
                cumulative.append(("+Inf" if bound == float("inf") else repr(bound), running))
            durations.add_metric((m.service, m.name), cumulative, total)
        yield calls
        yield durations

    def describe(self) -> Iterator[Any]:
        return iter(())  # series appear with the calls; nothing to check at registration
