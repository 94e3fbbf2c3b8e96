"""The gRPC server: ``SketchService`` plus the standard health and reflection services,
its calls wrapped by ``services.handlers`` (token, errors to statuses, metrics), on an
insecure or TLS port.

``SketchServer`` fronts a coordinator it is given (tests, benchmarks); ``serve`` is
``imp serve``: it builds the coordinator from a ``ServerConfig``, serves until SIGINT or
SIGTERM, then drains calls and closes the coordinator (which checkpoints live queries).
With ``metrics_listen`` it also serves Prometheus metrics over HTTP
(``services/exporter.py``), from a registry of its own.

Invariants: the health service reports SERVING only between a successful start and the
beginning of shutdown. The default address is loopback; listening elsewhere is an explicit
setting (IMP_LISTEN), and doing so without TLS and tokens is logged as a warning. The
metrics endpoint runs exactly while the gRPC server does (started first: a port that
cannot be bound fails the start before any call is taken).
"""

from __future__ import annotations

import gc
import ipaddress
import logging
import os
import signal
import socket
import threading
import time
import uuid
from concurrent import futures
from contextlib import nullcontext
from pathlib import Path
from typing import Any, Callable

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection
from prometheus_client import CollectorRegistry, ProcessCollector

from imp_actors.runtime_watch import RuntimeState
from services.auth import TokenAuth
from services.call_metrics import CallMetrics
from services.exporter import MetricsEndpoint, RuntimeCollector, ServiceCollector
from services.guards import Guard
from services.handlers import CallWrapper, register_service
from services.protos import SERVICE_NAME, rpc
from services.server_config import ServerConfig
from services.servicer import SketchServicer
from services.supervisor import restarts

log = logging.getLogger("imp.services")


def is_loopback(listen: str) -> bool:
    host = listen.rsplit(":", 1)[0].strip("[]")
    if host in ("localhost", ""):
        return host == "localhost"
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def server_credentials(config: ServerConfig) -> grpc.ServerCredentials:
    key = Path(config.tls_key).read_bytes()
    cert = Path(config.tls_cert).read_bytes()
    client_ca = Path(config.tls_client_ca).read_bytes() if config.tls_client_ca else None
    return grpc.ssl_server_credentials([(key, cert)], root_certificates=client_ca,
                                       require_client_auth=client_ca is not None)


def preflight(config: ServerConfig) -> None:
    """What can be refused before anything starts (Ray, Spark): the token file, the TLS
    files, the listen address (resolvable, and the port free) and, unless a standby, a
    store in use by a live server. Raises ``OSError``, ``ValueError`` or
    ``StoreBusyError`` with the reason."""
    config.auth_tokens()
    if config.tls:
        server_credentials(config)
    check_listen(config.listen)
    if not config.standby:  # a store in use: refused here, not by a supervised child
        from imp_actors.lease import StoreLease
        from imp_actors.storage import BlobStore

        runtime = config.runtime_config()
        StoreLease(BlobStore(runtime.registry_dir), runtime.lease_seconds).ensure_free()
    if config.metrics_listen is not None:
        try:
            check_listen(config.metrics_listen)
        except OSError as exc:
            raise OSError(f"metrics endpoint (IMP_METRICS_LISTEN; 'off' turns it off): "
                          f"{exc} (another imp serve on this host? Each server's metrics "
                          "port follows its gRPC port unless given: give each its own "
                          "--listen, or --metrics-listen HOST:PORT)") from None


def check_listen(listen: str) -> None:
    """``OSError`` unless ``listen`` (host:port) resolves and its port can be bound now."""
    host, sep, port_text = listen.rpartition(":")
    host = host.strip("[]") or "0.0.0.0"
    try:
        port = int(port_text)
        if not sep or not 0 <= port < 65536:
            raise ValueError
    except ValueError:
        raise OSError(f"cannot listen on {listen!r}: expected host:port") from None
    try:
        family, kind, proto, _, address = socket.getaddrinfo(
            host, port, type=socket.SOCK_STREAM)[0]
    except socket.gaierror as exc:
        raise OSError(f"cannot listen on {listen}: {host!r} does not resolve "
                      f"({exc.strerror})") from None
    with socket.socket(family, kind, proto) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as gRPC does
        try:
            probe.bind(address)
        except OSError as exc:
            raise OSError(f"cannot listen on {listen}: {exc.strerror}") from None


# calls that read only: not recorded, never quarantined
_UNRECORDED = frozenset({"Stats", "ListQueries", "ListTables", "GetUpdateStatus"})


def call_record(incidents: Any) -> Callable[[str, Any], Any]:
    """The ``CallWrapper.around`` of a server: a call named by a quarantine entry is
    refused; every other call runs recorded as what its thread does
    (``imp_actors.incidents``), with a request id for the log."""
    from imp_actors.incidents import sql_digest

    def around(method: str, request: Any) -> Any:
        if method in _UNRECORDED:
            return nullcontext()
        key = getattr(request, "idempotency_key", "")
        sql = getattr(request, "sql", "")
        query = getattr(request, "query", "") or getattr(request, "name", "")
        incidents.check(method, key, sql, query)
        return incidents.entering(method=method, query=query,
                                  table=getattr(request, "table", ""), key=key,
                                  sql_digest=sql_digest(sql) if sql else "",
                                  request=uuid.uuid4().hex[:12], at=round(time.time(), 3))

    return around


class SketchServer:
    """A started-on-demand gRPC server in front of ``coordinator``."""

    def __init__(self, config: ServerConfig, coordinator: Any):
        if not is_loopback(config.listen) and not (config.tls and config.auth_token_file):
            log.warning("listening on %s (not loopback) without %s: any host that reaches "
                        "this port can call the service", config.listen,
                        "TLS and token authentication" if not config.tls and not
                        config.auth_token_file else "TLS" if not config.tls else
                        "token authentication")
        self.config = config
        self.coordinator = coordinator
        self.registry = CollectorRegistry()  # this server's own, not the global one
        self.metrics = CallMetrics(self.registry)
        self.guard = Guard(config.limits)
        self.stopping = threading.Event()
        self.health = health.HealthServicer()
        tokens = config.auth_tokens()
        incidents = getattr(coordinator, "incidents", None)
        wrapper = CallWrapper(self.metrics, TokenAuth(tokens) if tokens else None,
                              around=call_record(incidents) if incidents else None)
        size = config.limits.max_message_bytes
        # an open WatchSketch stream holds its thread: the pool has one thread per allowed
        # watch on top of the workers, so watches never starve the other calls
        threads = config.workers + config.limits.max_watches
        self.server = grpc.server(
            futures.ThreadPoolExecutor(max_workers=threads, thread_name_prefix="imp-grpc"),
            options=[("grpc.max_receive_message_length", size),
                     ("grpc.max_send_message_length", size),
                     ("grpc.so_reuseport", 0),
                     # watch streams may sit idle for long: let clients keep them alive
                     ("grpc.http2.min_ping_interval_without_data_ms", 10_000),
                     ("grpc.keepalive_permit_without_calls", 1)])
        self.servicer = SketchServicer(coordinator, self.guard, self.metrics, self.stopping)
        self.serving = False
        runtime = getattr(coordinator, "runtime", None)
        if runtime is not None:
            runtime.add_listener(self._on_runtime)
        self.registry.register(RuntimeCollector(
            coordinator.metrics,
            lambda: (self.guard.open_watches, self.servicer.stalled.dropped)))
        # the process's RSS, CPU seconds and open files, its build, its restarts
        ProcessCollector(registry=self.registry)
        self.registry.register(ServiceCollector(restarts()))
        self.metrics_endpoint = MetricsEndpoint(config.metrics_listen, self.registry) \
            if config.metrics_listen is not None else None
        register_service(self.server, rpc.add_SketchServiceServicer_to_server, self.servicer,
                         wrapper)
        health_pb2_grpc.add_HealthServicer_to_server(self.health, self.server)
        reflection.enable_server_reflection(
            (SERVICE_NAME, health.SERVICE_NAME, reflection.SERVICE_NAME), self.server)
        try:
            if config.tls:
                self.port = self.server.add_secure_port(config.listen,
                                                        server_credentials(config))
            else:
                self.port = self.server.add_insecure_port(config.listen)
        except RuntimeError as exc:  # grpcio: "Failed to bind to address ..."
            raise OSError(f"cannot listen on {config.listen}: {exc}") from None
        if not self.port:
            raise OSError(f"cannot listen on {config.listen}")

    @property
    def address(self) -> str:
        host = self.config.listen.rsplit(":", 1)[0]
        return f"{host}:{self.port}"

    @property
    def metrics_address(self) -> str | None:
        """host:port of the metrics endpoint once started (None: no endpoint)."""
        return self.metrics_endpoint.address if self.metrics_endpoint else None

    def start(self) -> SketchServer:
        if self.metrics_endpoint is not None:
            try:
                self.metrics_endpoint.start()
            except OSError:
                self.server.stop(0)  # release the gRPC port bound in __init__
                raise
        self.server.start()
        self.serving = True
        runtime = getattr(self.coordinator, "runtime", None)
        self._set_health(runtime is None or runtime.state is RuntimeState.UP)
        log.info("SketchService listening on %s (%s%s)", self.address,
                 "TLS" if self.config.tls else "plaintext",
                 ", token auth" if self.config.auth_token_file else "")
        return self

    def _on_runtime(self, state: RuntimeState, reason: str) -> None:
        """The actor runtime went down or came back: so does the health status."""
        if self.serving and not self.stopping.is_set():
            up = state is RuntimeState.UP
            self._set_health(up)
            log.warning("health: %s%s", "SERVING" if up else "NOT_SERVING",
                        f" ({reason})" if reason else "")

    def _set_health(self, up: bool) -> None:
        status = health_pb2.HealthCheckResponse.SERVING if up else \
            health_pb2.HealthCheckResponse.NOT_SERVING
        for name in ("", SERVICE_NAME):
            self.health.set(name, status)

    def stop(self, grace: float | None = None) -> None:
        """Stop accepting calls, end watch streams, let running calls finish."""
        self.serving = False
        self.health.enter_graceful_shutdown()
        self.stopping.set()
        grace = self.config.grace_seconds if grace is None else grace
        self.server.stop(grace).wait()
        if self.metrics_endpoint is not None:
            self.metrics_endpoint.stop()

    def wait(self, timeout: float | None = None) -> bool:
        return self.server.wait_for_termination(timeout)

    def __enter__(self) -> SketchServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop(0)


SHUTDOWN_SECONDS = 10.0  # for checkpoints and stopping actors, after the calls' grace


def _overran(grace: float) -> None:
    log.error("shutdown did not finish within %.0f s: exiting now (the queries resume from "
              "their last checkpoints)", grace + SHUTDOWN_SECONDS)
    logging.shutdown()
    os._exit(1)


def start_coordinator(config: ServerConfig) -> Any:
    """The started coordinator of ``imp serve``; a standby (``config.standby``) waits
    for the store's lease while another server holds it, instead of refusing."""
    from imp_actors.coordinator import Coordinator
    from imp_core.errors import StoreBusyError

    coordinator = Coordinator(config.runtime_config())
    # what this process does is recorded where a crash leaves it (imp_actors.incidents)
    coordinator.incidents.record()
    owner: str | None = None
    while True:
        try:
            return coordinator.start(standby_for=owner)
        except StoreBusyError as exc:
            if not config.standby:
                raise
            if owner is None:
                held = coordinator.ctx.lease.read() if coordinator.ctx.lease else None
                owner = held.owner if held is not None else "another server"
                # ready for the take-over: the actor runtime up (Ray started or joined)
                t0 = time.monotonic()
                coordinator.prepare()
                log.warning("standby: %s; taking over when its lease expires (runtime %s "
                            "ready in %.1f s)", exc, coordinator.ctx.backend.kind,
                            time.monotonic() - t0)
            # an owner on this host that dies is seen dead at the next look (its pid is
            # gone): look often; another host's lease expires, no need to hurry
            held = coordinator.ctx.lease.read() if coordinator.ctx.lease else None
            here = held is not None and held.host == socket.gethostname()
            time.sleep(0.25 if here else min(max(coordinator.config.lease_seconds / 5,
                                                  0.25), 1.0))


def serve(config: ServerConfig, ready: threading.Event | None = None) -> int:
    """``imp serve``: run the coordinator and the server until SIGINT/SIGTERM; returns
    ``RESTART_EXIT`` when the server's own local Ray is lost (its supervisor starts a
    new server)."""
    from services.supervisor import RESTART_EXIT, bind_to_parent

    bind_to_parent()
    os.environ.update(config.spark_env())
    coordinator = start_coordinator(config)
    lost: list[str] = []
    try:
        server = SketchServer(config, coordinator).start()
        done = threading.Event()

        def on_runtime(state: RuntimeState, reason: str) -> None:
            # a lost local Ray cannot be started again in this process: end it, the
            # supervisor (or a pod's restart policy) starts a new server
            if state is RuntimeState.DOWN and coordinator.embedded_ray:
                log.error("the local Ray of this server is lost (%s): the server ends "
                          "so that a new one starts with a new Ray", reason)
                lost.append(reason)
                done.set()

        coordinator.runtime.add_listener(on_runtime)

        def on_signal(signum: int, _frame: object) -> None:
            name = signal.Signals(signum).name
            if done.is_set():  # a second signal: the operator means now
                log.warning("signal %s again: exiting at once", name)
                os._exit(128 + signum)
            log.info("signal %s: shutting down", name)
            done.set()
            # whatever runs (a registration on Spark, a stuck actor), the process ends
            # within seconds: a watchdog exits once the orderly shutdown overruns
            watchdog = threading.Timer(config.grace_seconds + SHUTDOWN_SECONDS,
                                       _overran, args=(config.grace_seconds,))
            watchdog.daemon = True
            watchdog.start()

        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, on_signal)
        # what start-up made (modules, the coordinator, recovered queries) lives as long
        # as the process: kept out of the cyclic collector, whose full passes would
        # otherwise walk it again and again while calls are served
        gc.collect()
        gc.freeze()
        print(f"imp: serving on {server.address}", flush=True)
        if ready is not None:
            ready.set()
        done.wait()
        server.stop(min(config.grace_seconds, 1.0) if lost else None)
    finally:
        if lost:  # its actors are gone with the runtime: nothing to checkpoint or stop
            coordinator.abandon()
        else:
            coordinator.close()
    return RESTART_EXIT if lost else 0
