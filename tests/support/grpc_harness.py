"""A real SketchService for the gRPC tests: a coordinator over Delta tables in a temporary
folder, a gRPC server on a free loopback port, clients over real channels; plus the
oracle (recapture by the reference evaluator at a sketch's table versions)."""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

from runtime_support import fill_store, make_config

from imp_actors.coordinator import Coordinator
from imp_core.oracle.reference import reference_capture
from imp_core.sketch.sketch import Sketch
from imp_core.sql import plan_sql
from services.client import SketchClient, TlsOptions
from services.records import SketchRecord
from services.server import SketchServer
from services.server_config import Limits, ServerConfig

TOKEN = "test-token-0123456789"


@dataclass
class Service:
    coordinator: Coordinator
    server: SketchServer
    token: str | None
    tls: TlsOptions | None = None
    clients: list[SketchClient] = field(default_factory=list)

    @property
    def address(self) -> str:
        return self.server.address

    def client(self, **kw: Any) -> SketchClient:
        kw.setdefault("token", self.token)
        kw.setdefault("tls", self.tls)
        kw.setdefault("timeout", 120.0)
        c = SketchClient(self.address, **kw)
        self.clients.append(c)
        return c

    def state(self) -> tuple:
        """What an error must leave unchanged: queries (name, seq, versions, shards,
        fragments) and table versions."""
        c = self.coordinator
        queries = tuple((q.name, q.sketch_seq, tuple(sorted(q.versions.items())), q.shards,
                         q.sketch_fragments) for q in c.queries())
        tables = tuple((t, c.ctx.store.version(t)) for t in sorted(c.tables()))
        return queries, tables


@contextmanager
def running_service(root: Path, *, backend: str = "local", tokens: tuple[str, ...] = (TOKEN,),
                    limits: Limits | None = None, tls_files: dict[str, str] | None = None,
                    client_tls: TlsOptions | None = None, fill: bool = True,
                    workers: int = 16, metrics: bool = False,
                    **runtime: Any) -> Iterator[Service]:
    """A started coordinator and server; everything is stopped on exit. ``metrics``: with
    a Prometheus endpoint on a free loopback port (``server.metrics_address``)."""
    root.mkdir(parents=True, exist_ok=True)
    if fill:
        fill_store(root)
    token_file = None
    if tokens:
        token_file = root / "tokens"
        token_file.write_text("# accepted tokens\n" + "\n".join(tokens) + "\n")
    config = ServerConfig(listen="127.0.0.1:0", auth_token_file=str(token_file) if token_file
                          else None, limits=limits or Limits(), workers=workers,
                          metrics_listen="127.0.0.1:0" if metrics else None,
                          **(tls_files or {}))
    coordinator = Coordinator(make_config(root, backend, **runtime)).start()
    service = None
    try:
        server = SketchServer(config, coordinator).start()
        service = Service(coordinator, server, tokens[0] if tokens else None, client_tls)
        yield service
    finally:
        if service is not None:
            for c in service.clients:
                c.close()
            service.server.stop(0)
        coordinator.close()


def reference(c: Coordinator, sql: str, record: SketchRecord) -> Sketch:
    """Recapture from scratch at ``record``'s table versions over its (wire) partitions."""
    sketch = record.sketch()
    tables = {t: c.ctx.store.read(t, v) for t, v in record.versions.items()}
    plan = plan_sql(sql, {t: c.ctx.store.schema(t) for t in c.tables()})
    return reference_capture(plan, tables, sketch.partitions).sketch
