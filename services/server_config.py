"""How the gRPC server is run: address, security, limits, and the runtime it fronts.

``ServerConfig.from_env`` reads the ``IMP_*`` variables; ``add_arguments`` /
``from_args`` give ``imp serve`` one flag per variable (a flag wins over its variable).

Invariants: every limit is a positive integer; TLS needs both a certificate and a key,
and a client CA (mutual TLS) needs TLS; the server listens on the loopback interface
unless ``listen`` says otherwise, and so does its metrics endpoint (``metrics_listen``:
``imp serve`` serves it on the port derived from its gRPC port, ``metrics_for``:
``DEFAULT_METRICS_LISTEN`` for the default gRPC port, one more for each port above it, so
servers of one host given their own ``--listen`` each get their own metrics port, unless
``IMP_METRICS_LISTEN`` names one or says ``off``; a ``ServerConfig`` built in code has none
unless given one).
"""

from __future__ import annotations

import argparse
import os
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any, Callable, Mapping

from imp_actors.runtime_config import RuntimeConfig

DEFAULT_LISTEN = "127.0.0.1:50051"
DEFAULT_METRICS_LISTEN = "127.0.0.1:9464"  # Prometheus /metrics of `imp serve`
_DERIVED = "auto"  # IMP_METRICS_LISTEN's default: derived from the gRPC address


def metrics_for(listen: str) -> str:
    """The metrics address of a server listening on ``listen``: the same host, port 9464
    for gRPC port 50051 and shifted as the gRPC port is (a standby on 50052 gets 9465);
    port 0 (any free port) where the shift leaves the range."""
    host, _, port_text = listen.rpartition(":")
    default_host, _, default_port = DEFAULT_LISTEN.rpartition(":")
    metrics_port = int(DEFAULT_METRICS_LISTEN.rpartition(":")[2])
    try:
        port = int(port_text)
    except ValueError:
        return DEFAULT_METRICS_LISTEN  # the listen address is refused on its own
    shifted = metrics_port + port - int(default_port) if port else 0
    return f"{host or default_host}:{shifted if 0 < shifted < 65536 else 0}"
MiB = 1 << 20


@dataclass(frozen=True)
class Limits:
    """What one request (or one client) may ask of the server."""

    max_sql_chars: int = 100_000
    max_batch_rows: int = 1_000_000       # rows of one ApplyUpdate, all batches together
    max_batch_bytes: int = 64 * MiB       # Arrow IPC bytes of one ApplyUpdate
    max_message_bytes: int = 96 * MiB     # any gRPC message, in or out
    max_registrations_per_client: int = 100
    max_watches: int = 32                 # concurrent WatchSketch streams
    watch_send_seconds: int = 30          # a watcher that takes no message this long is dropped

    def __post_init__(self) -> None:
        for f in fields(self):
            if getattr(self, f.name) < 1:
                raise ValueError(f"{f.name} must be at least 1")
        if self.max_batch_bytes > self.max_message_bytes:
            raise ValueError("max_batch_bytes cannot exceed max_message_bytes")


@dataclass(frozen=True)
class ServerConfig:
    listen: str = DEFAULT_LISTEN
    # the runtime (None: RuntimeConfig's defaults)
    root: str | None = None
    tables: str | None = None
    checkpoints: str | None = None
    backend: str | None = None
    ray_address: str | None = None
    spark_connect: str | None = None
    spark_master: str | None = None
    max_live_actors: int | None = None
    # security
    auth_token_file: str | None = None
    tls_cert: str | None = None
    tls_key: str | None = None
    tls_client_ca: str | None = None
    # the Prometheus endpoint (host:port; None: none)
    metrics_listen: str | None = None
    # serving
    workers: int = 16
    grace_seconds: float = 5.0
    # ``imp serve`` runs the server as a child it restarts when it dies unexpectedly (a
    # lost local Ray ends the server, ``services.supervisor``)
    supervise: bool = True
    # wait for the store's lease instead of refusing to start while another server
    # holds it (a standby that takes over when the active one dies)
    standby: bool = False
    limits: Limits = Limits()

    def __post_init__(self) -> None:
        if bool(self.tls_cert) != bool(self.tls_key):
            raise ValueError("TLS needs both a certificate (IMP_TLS_CERT) and a key "
                             "(IMP_TLS_KEY)")
        if self.tls_client_ca and not self.tls_cert:
            raise ValueError("mutual TLS (IMP_TLS_CLIENT_CA) needs TLS: set IMP_TLS_CERT "
                             "and IMP_TLS_KEY")
        if self.workers < 2:
            raise ValueError("workers must be at least 2")
        if self.backend not in (None, "ray", "local"):
            raise ValueError(f"backend must be 'ray' or 'local', not {self.backend!r}")

    # -- derived -----------------------------------------------------------------------
    @property
    def tls(self) -> bool:
        return bool(self.tls_cert)

    def auth_tokens(self) -> tuple[str, ...]:
        """The accepted bearer tokens: the token file's non-empty, non-comment lines."""
        if not self.auth_token_file:
            return ()
        lines = Path(self.auth_token_file).read_text().splitlines()
        stripped = (t.strip() for t in lines)
        tokens = tuple(t for t in stripped if t and not t.startswith("#"))
        if not tokens:
            raise ValueError(f"the token file {self.auth_token_file} holds no token")
        return tokens

    def runtime_config(self, base: RuntimeConfig | None = None) -> RuntimeConfig:
        """The coordinator's configuration: ``base`` (default: from the environment) with
        this server's settings applied."""
        cfg = base or RuntimeConfig.from_env()
        changes: dict[str, Any] = {}
        for mine, theirs in (("root", "root"), ("tables", "tables_root"),
                             ("checkpoints", "checkpoint_root"), ("backend", "backend"),
                             ("ray_address", "ray_address")):
            if getattr(self, mine) is not None:
                changes[theirs] = getattr(self, mine)
        if self.max_live_actors is not None:
            changes["eviction"] = replace(cfg.eviction, max_live_actors=self.max_live_actors)
        return replace(cfg, **changes) if changes else cfg

    def spark_env(self) -> dict[str, str]:
        """Variables that select the Spark the data layer uses (read by its session)."""
        out = {}
        if self.spark_connect:
            out["IMP_SPARK_CONNECT"] = self.spark_connect
        if self.spark_master:
            out["IMP_SPARK_MASTER"] = self.spark_master
        return out

    # -- environment and flags ---------------------------------------------------------
    @staticmethod
    def from_env(env: Mapping[str, str] | None = None) -> ServerConfig:
        env = os.environ if env is None else env
        values: dict[str, Any] = {}
        for name, var, conv in _SETTINGS:
            if env.get(var):
                values[name] = _convert(conv, env[var], var)
        values.setdefault("metrics_listen", _DERIVED)  # `imp serve` serves it
        return _build(values)

    @staticmethod
    def add_arguments(parser: argparse.ArgumentParser) -> None:
        for name, var, _conv in _SETTINGS:
            flag = "--" + name.replace("_", "-")
            parser.add_argument(flag, dest=f"cfg_{name}", default=None, metavar=var,
                                help=f"(env {var}) {_HELP.get(name, '')}".strip())

    @staticmethod
    def from_args(args: argparse.Namespace, env: Mapping[str, str] | None = None
                  ) -> ServerConfig:
        base = ServerConfig.from_env(env)
        values = {name: getattr(base, name) for name, _, _ in _SETTINGS if name not in
                  _LIMIT_NAMES}
        values.update({name: getattr(base.limits, name) for name in _LIMIT_NAMES})
        env = os.environ if env is None else env
        if listen_or_off(env.get("IMP_METRICS_LISTEN") or _DERIVED) == _DERIVED:
            values["metrics_listen"] = _DERIVED  # from the listen address the flags give
        for name, _var, conv in _SETTINGS:
            raw = getattr(args, f"cfg_{name}", None)
            if raw is not None:
                values[name] = _convert(conv, raw, "--" + name.replace("_", "-"))
        return _build(values)


_LIMIT_NAMES = tuple(f.name for f in fields(Limits))


def listen_or_off(raw: str) -> str | None:
    """``IMP_METRICS_LISTEN``: host:port, auto (derived from the gRPC address), or
    off / none (no endpoint)."""
    text = raw.strip()
    if text.lower() == _DERIVED:
        return _DERIVED
    return None if text.lower() in ("off", "none") else text

def on_off(raw: str) -> bool:
    """``IMP_SUPERVISE``, ``IMP_STANDBY``: on/off (also true/false, yes/no, 1/0)."""
    text = raw.strip().lower()
    if text in ("on", "true", "yes", "1"):
        return True
    if text in ("off", "false", "no", "0"):
        return False
    raise ValueError(f"expected on or off, got {raw!r}")


# (field, environment variable, converter)
_SETTINGS: tuple[tuple[str, str, Callable[[str], Any]], ...] = (
    ("listen", "IMP_LISTEN", str),
    ("root", "IMP_ROOT", str),
    ("tables", "IMP_TABLES", str),
    ("checkpoints", "IMP_CHECKPOINTS", str),
    ("backend", "IMP_BACKEND", str),
    ("ray_address", "IMP_RAY_ADDRESS", str),
    ("spark_connect", "IMP_SPARK_CONNECT", str),
    ("spark_master", "IMP_SPARK_MASTER", str),
    ("max_live_actors", "IMP_MAX_LIVE_ACTORS", int),
    ("auth_token_file", "IMP_AUTH_TOKEN_FILE", str),
    ("tls_cert", "IMP_TLS_CERT", str),
    ("tls_key", "IMP_TLS_KEY", str),
    ("tls_client_ca", "IMP_TLS_CLIENT_CA", str),
    ("workers", "IMP_WORKERS", int),
    ("grace_seconds", "IMP_GRACE_SECONDS", float),
    ("supervise", "IMP_SUPERVISE", on_off),
    ("standby", "IMP_STANDBY", on_off),
    ("metrics_listen", "IMP_METRICS_LISTEN", listen_or_off),
    ("max_sql_chars", "IMP_MAX_SQL_CHARS", int),
    ("max_batch_rows", "IMP_MAX_BATCH_ROWS", int),
    ("max_batch_bytes", "IMP_MAX_BATCH_BYTES", int),
    ("max_message_bytes", "IMP_MAX_MESSAGE_BYTES", int),
    ("max_registrations_per_client", "IMP_MAX_REGISTRATIONS_PER_CLIENT", int),
    ("max_watches", "IMP_MAX_WATCHES", int),
    ("watch_send_seconds", "IMP_WATCH_SEND_SECONDS", int),
)

_HELP = {
    "listen": f"host:port to listen on (default {DEFAULT_LISTEN}; loopback only)",
    "root": "folder or URI for tables, checkpoints and the registry",
    "tables": "the table store's root: its catalog.json, and its Delta tables in tables/ "
              "below it (default ROOT itself)",
    "checkpoints": "where checkpoints are written (default ROOT/checkpoints)",
    "backend": "'ray' (default) or 'local' (in-process, no Ray)",
    "ray_address": "join this Ray cluster instead of starting a local one",
    "spark_connect": "Spark Connect URL (sc://host:port) for the data layer",
    "spark_master": "Spark master (default local[2])",
    "max_live_actors": "live query actors before the least recently used is evicted",
    "auth_token_file": "file of accepted bearer tokens, one per line (none: no auth)",
    "tls_cert": "PEM server certificate (TLS)",
    "tls_key": "PEM server private key (TLS)",
    "tls_client_ca": "PEM CA that client certificates must chain to (mutual TLS)",
    "workers": "threads serving calls (default 16), plus one per allowed watch stream",
    "grace_seconds": "on shutdown, how long running calls may finish (default 5)",
    "supervise": "on (default): restart the server when it dies unexpectedly, e.g. "
                 "with a lost local Ray; off: exit (a pod's restart policy restarts it)",
    "standby": "on: while another server holds the store, wait and take over when it "
               "dies (default off: refuse to start)",
    "metrics_listen": f"host:port of the Prometheus /metrics endpoint (default 'auto': "
                      f"{DEFAULT_METRICS_LISTEN} for the default --listen, and shifted as "
                      "its port is, so a standby on the next port gets the next one; "
                      "'off': none)",
    "max_sql_chars": "longest SQL text accepted",
    "max_batch_rows": "most rows in one ApplyUpdate",
    "max_batch_bytes": "most Arrow IPC bytes in one ApplyUpdate",
    "max_message_bytes": "largest gRPC message in or out",
    "max_registrations_per_client": "queries one client (token or host) may register",
    "max_watches": "concurrent WatchSketch streams",
    "watch_send_seconds": "seconds a WatchSketch message may wait for its reader before the "
                          "stream is cancelled (default 30)",
}


def _convert(conv: Callable[[str], Any], raw: str, where: str) -> Any:
    try:
        return conv(raw)
    except ValueError as exc:
        if conv in (int, float):
            raise ValueError(f"{where}: expected {conv.__name__}, got {raw!r}") from None
        raise ValueError(f"{where}: {exc}") from None


def _build(values: dict[str, Any]) -> ServerConfig:
    if values.get("metrics_listen") == _DERIVED:
        values["metrics_listen"] = metrics_for(values.get("listen", DEFAULT_LISTEN))
    limits = {k: values.pop(k) for k in list(values) if k in _LIMIT_NAMES}
    return ServerConfig(**values, limits=Limits(**limits))
