"""Per-method call counters of the front end, as Prometheus metrics (``/metrics``,
``services/exporter.py``) and as the ``Stats`` RPC's JSON (``snapshot``).

Every finished call adds one to ``imp_grpc_calls_total{service, method, code}`` and its
duration to ``imp_grpc_call_duration_seconds{service, method}``, in the registry the
server gives (each server its own, so several can run in one process).

Invariant: for every method, the counts by status add up to the calls that finished.
"""

from __future__ import annotations

import threading
import time
from collections import defaultdict
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram

# gRPC call durations, seconds: sub-millisecond cached sketches to long registrations
CALL_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0,
                2.5, 5.0, 10.0, 30.0, 60.0, 300.0, float("inf"))


def split_method(method: str) -> tuple[str, str]:
    """``/imp.v1.SketchService/GetSketch`` as ("imp.v1.SketchService", "GetSketch")."""
    service, _, name = method.rpartition("/")
    return service.lstrip("/"), name


class CallMetrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        self._started = time.time()
        # calls and durations update together under the lock, so a snapshot never sees
        # a call counted without its time
        self._lock = threading.Lock()
        self._calls = Counter("imp_grpc_calls", "gRPC calls that finished, by status code",
                              ("service", "method", "code"), registry=self.registry)
        self._seconds = Histogram("imp_grpc_call_duration_seconds",
                                  "Time from a call's start to its status, seconds",
                                  ("service", "method"), buckets=CALL_BUCKETS,
                                  registry=self.registry)

    def record(self, method: str, code: str, seconds: float) -> None:
        service, name = split_method(method)
        with self._lock:
            self._calls.labels(service, name, code).inc()
            self._seconds.labels(service, name).observe(seconds)

    def snapshot(self) -> dict[str, Any]:
        """``{"uptime_s", "methods": {method: {"calls", "by_status", "mean_ms"}}}``, the
        methods by name whatever their service (as the Stats RPC has always reported)."""
        codes: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
        seconds: dict[str, float] = defaultdict(float)
        with self._lock:
            families = list(self._calls.collect()) + list(self._seconds.collect())
        for family in families:
            for sample in family.samples:
                name = sample.labels["method"]
                if sample.name == "imp_grpc_calls_total":
                    codes[name][sample.labels["code"]] += int(sample.value)
                elif sample.name == "imp_grpc_call_duration_seconds_sum":
                    seconds[name] += sample.value
        methods = {}
        for name, by_code in sorted(codes.items()):
            calls = sum(by_code.values())
            methods[name] = {"calls": calls, "by_status": dict(by_code),
                             "mean_ms": round(1000 * seconds[name] / calls, 3)}
        return {"uptime_s": round(time.time() - self._started, 3), "methods": methods}
