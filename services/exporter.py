"""The server's Prometheus metrics and the HTTP endpoint that serves them (``/metrics``).

Each ``SketchServer`` has a registry of its own (never prometheus_client's global one,
so several servers can run in one process): the gRPC call metrics
(``services/call_metrics.py``) plus ``RuntimeCollector``, which reads the coordinator at every
scrape (``Coordinator.metrics``) and the front end's watch counts. Per-query series are
computed then, not pushed, so a dropped query's series are gone from the next scrape.

Invariants: a scrape never waits for a query's maintenance (``Coordinator.metrics``
takes no query lock); every name this module exports is listed in ``METRIC_NAMES``
(the Grafana dashboard's queries are checked against it); the endpoint listens only
where ``IMP_METRICS_LISTEN`` says (loopback by default).
"""

from __future__ import annotations

import logging
import math
import threading
from typing import Callable, Iterable
from wsgiref.simple_server import WSGIServer

from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.metrics_core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    InfoMetricFamily,
    Metric,
)

from imp_actors.types import LatencySnapshot, RuntimeMetrics

log = logging.getLogger("imp.services")

# every metric family the server exports (the name as in the text format, without the
# _total/_bucket/_sum/_count suffixes of counters and histograms)
QUERY_METRICS = (
    "imp_query_maintenance_duration_seconds", "imp_query_staleness_versions",
    "imp_query_staleness_seconds", "imp_query_state_bytes", "imp_query_shards",
    "imp_query_actor_restarts", "imp_query_load", "imp_query_pending_tuples",
    "imp_query_live", "imp_query_autoscale_min_shards", "imp_query_autoscale_max_shards",
    "imp_query_autoscale_target_load")
RUNTIME_METRICS = ("imp_registered_queries", "imp_live_queries", "imp_live_actors",
                   "imp_coordinator_events")
SERVICE_METRICS = ("imp_grpc_calls", "imp_grpc_call_duration_seconds", "imp_grpc_open_watches",
                   "imp_grpc_dropped_watches")
METRIC_NAMES = QUERY_METRICS + RUNTIME_METRICS + SERVICE_METRICS


class RuntimeCollector:
    """Reads the coordinator (and the front end's watch counts) at every scrape."""

    def __init__(self, metrics: Callable[[], RuntimeMetrics],
                 watches: Callable[[], tuple[int, int]] | None = None):
        self.metrics = metrics  # Coordinator.metrics
        self.watches = watches  # () -> (open watch streams, streams dropped so far)

    def collect(self) -> Iterable[Metric]:
        m = self.metrics()
        yield from query_families(m)
        yield GaugeMetricFamily("imp_registered_queries", "Registered queries",
                                value=len(m.queries))
        yield GaugeMetricFamily("imp_live_queries", "Queries whose actors hold their state",
                                value=sum(1 for q in m.queries if q.state == "live"))
        yield GaugeMetricFamily("imp_live_actors", "Live query actors (shards)",
                                value=m.live_actors)
        events = CounterMetricFamily("imp_coordinator_events",
                                     "Coordinator events since it started (maintenance "
                                     "batches, evictions, restores, rescales, ...)",
                                     labels=("event",))
        for name, n in sorted(m.counters.items()):
            events.add_metric((name,), n)
        yield events
        yield GaugeMetricFamily("imp_runtime_up", "1 while the actor runtime (Ray) answers "
                                "its liveness probe, 0 while it is lost",
                                value=1 if m.runtime_up else 0)
        if m.nodes_alive is not None:
            yield GaugeMetricFamily("imp_ray_nodes_alive", "Live Ray nodes (as last probed)",
                                    value=m.nodes_alive)
        if self.watches is not None:
            open_, dropped = self.watches()
            yield GaugeMetricFamily("imp_grpc_open_watches", "Open WatchSketch streams",
                                    value=open_)
            yield CounterMetricFamily("imp_grpc_dropped_watches",
                                      "WatchSketch streams cancelled because their reader "
                                      "stopped taking messages", value=dropped)


class ServiceCollector:
    """What the process is: its build (``imp_build_info``) and how many times its
    supervisor restarted the server before this one (``imp_server_restarts``)."""

    def __init__(self, restarts: int):
        self.restarts = restarts
        self.build = build_info()

    def collect(self) -> Iterable[Metric]:
        info = InfoMetricFamily("imp_build", "Versions of the service and what it runs on")
        info.add_metric((), self.build)
        yield info
        yield CounterMetricFamily("imp_server_restarts", "Times the supervisor started the "
                                  "server again after it died (a lost local Ray, a crash)",
                                  value=self.restarts)


def build_info() -> dict[str, str]:
    """Versions of the package, Python and the libraries the service depends on most."""
    import platform
    from importlib import metadata

    def version(dist: str) -> str:
        try:
            return metadata.version(dist)
        except metadata.PackageNotFoundError:
            return "unknown"

    return {"version": version("imp-on-spark"), "python": platform.python_version(),
            "ray": version("ray"), "pyspark": version("pyspark"),
            "grpcio": version("grpcio")}


def query_families(m: RuntimeMetrics) -> list[Metric]:
    """The per-query metric families, one series per registered query (label ``query``)."""
    def gauge(name: str, doc: str) -> GaugeMetricFamily:
        return GaugeMetricFamily(name, doc, labels=("query",))

    latency = HistogramMetricFamily(
        "imp_query_maintenance_duration_seconds",
        "Wall time of each maintenance step (all shards to new table versions), seconds",
        labels=("query",))
    behind = gauge("imp_query_staleness_versions",
                   "Table versions committed beyond those the latest sketch is exact for")
    stale = gauge("imp_query_staleness_seconds",
                  "Seconds since the first commit the latest sketch does not hold (0: current)")
    size = gauge("imp_query_state_bytes", "Operator state held by the query's shards, bytes")
    shards = gauge("imp_query_shards", "Shards (actors) of the query")
    restarts = CounterMetricFamily("imp_query_actor_restarts",
                                   "Lost shards recovered (their actor died and was replaced)",
                                   labels=("query",))
    load = gauge("imp_query_load", "Maintenance shard-seconds per second over the query's "
                 "autoscaling window (30 s without autoscaling)")
    pending = gauge("imp_query_pending_tuples", "Changed tuples committed, not yet maintained")
    live = gauge("imp_query_live", "1 while actors hold the query's state, else 0")
    low = gauge("imp_query_autoscale_min_shards", "Autoscaling: fewest shards")
    high = gauge("imp_query_autoscale_max_shards", "Autoscaling: most shards")
    target = gauge("imp_query_autoscale_target_load", "Autoscaling: busy fraction per shard "
                   "aimed at")
    for q in m.queries:
        key = (q.name,)
        latency.add_metric(key, buckets(q.maintenance), q.maintenance.sum)
        if q.staleness_versions is not None:
            behind.add_metric(key, q.staleness_versions)
            since = q.stale_since
            stale.add_metric(key, 0.0 if since is None else max(0.0, m.at - since))
        size.add_metric(key, q.state_bytes)
        shards.add_metric(key, q.shards)
        restarts.add_metric(key, q.restarts)
        load.add_metric(key, q.load)
        pending.add_metric(key, q.pending_tuples)
        live.add_metric(key, 1 if q.state == "live" else 0)
        if q.autoscaling is not None:
            low.add_metric(key, q.autoscaling.min_shards)
            high.add_metric(key, q.autoscaling.max_shards)
            target.add_metric(key, q.autoscaling.target_load)
    return [latency, behind, stale, size, shards, restarts, load, pending, live, low, high,
            target]


def buckets(h: LatencySnapshot) -> list[tuple[str, float]]:
    """A histogram's cumulative buckets with Prometheus' bound labels ("+Inf" last)."""
    return [("+Inf" if math.isinf(b) else repr(float(b)), n)
            for b, n in zip(h.bounds, h.counts)]


class MetricsEndpoint:
    """prometheus_client's HTTP server for one registry, on ``host:port`` (port 0: a free
    one). Serves ``/metrics`` (any path, in fact) from a thread per scrape."""

    def __init__(self, listen: str, registry: CollectorRegistry):
        self.listen = listen
        self.registry = registry
        self._server: WSGIServer | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> MetricsEndpoint:
        host, port = split_listen(self.listen)
        try:
            self._server, self._thread = start_http_server(port, host, self.registry)
        except OSError as exc:
            raise OSError(f"cannot serve metrics on {self.listen} (IMP_METRICS_LISTEN; "
                          f"'off' turns the endpoint off): {exc.strerror or exc}") from None
        log.info("metrics on http://%s/metrics", self.address)
        return self

    @property
    def port(self) -> int:
        assert self._server is not None, "not started"
        return self._server.server_port

    @property
    def address(self) -> str:
        host = self.listen.rpartition(":")[0]
        return f"{host}:{self.port}"

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None


def split_listen(listen: str) -> tuple[str, int]:
    """``host:port`` (``[v6]:port`` too) as (host, port); ``ValueError`` otherwise."""
    host, sep, port_text = listen.rpartition(":")
    try:
        port = int(port_text)
    except ValueError:
        port = -1
    if not sep or not 0 <= port < 65536:
        raise ValueError(f"metrics address {listen!r}: expected host:port "
                         "(IMP_METRICS_LISTEN), or 'off'")
    return host.strip("[]") or "0.0.0.0", port

