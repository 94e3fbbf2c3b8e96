"""A Python client of ``SketchService``: typed methods that return plain records and
Arrow tables.

    with SketchClient("127.0.0.1:50051", token="...") as client:
        client.register("q", "SELECT ...", partitions={"lineitem.l_orderkey": 64})
        client.apply_update("lineitem", inserts=new_rows)
        sketch = client.sketch("q")            # current: maintained first
        rows = client.run_query(query="q").rows

Errors come back as ``RemoteError`` carrying the gRPC status name as ``code`` (and the
SQL position for SQL errors).

Retries. Every call that changes state carries an idempotency key: one per logical call
(a new random one unless the caller passes ``idempotency_key``), the same on each of its
retries, so the server applies it at most once and answers a retry with the first
outcome (docs/api.md, Idempotency). Reads and keyed calls are retried on UNAVAILABLE (a
server restarting, a dropped connection, a fail-over) for up to ``retry_seconds``, with
back-off (a client that never reached any server gives up after a few seconds: more
likely a wrong address); a call whose outcome stays unknown can be looked up with
``update_status``. A
watch resumes after the last version it delivered.

Several targets (``"host1:50051,host2:50051"``: an active server and its standbys on the
same store) make the client fail over: when the server it uses answers UNAVAILABLE or
cannot be reached, a retry goes to the next target.
"""

from __future__ import annotations

import json
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator, Mapping, Sequence

import grpc
import pyarrow as pa
from grpc_health.v1 import health_pb2, health_pb2_grpc

from imp_actors.runtime_config import Autoscaling, Lazy, Strategy
from imp_actors.types import CheckpointInfo, QueryInfo, UpdateResult
from imp_core.errors import ImpError
from services import convert
from services.errors import META_COLUMN, META_CONSTRUCT, META_KIND, META_LINE
from services.protos import SERVICE_NAME, pb, rpc
from services.records import RunResult, SketchRecord, TableRecord

DEFAULT_TARGET = "127.0.0.1:50051"

# Calls that change nothing (or reach the same state however often they run): retried
# as they are. The calls that change state are retried with their idempotency key.
IDEMPOTENT = ("ListQueries", "ListTables", "GetSketch", "GetSketches", "WatchSketch", "Maintain",
              "RunQuery", "ExplainSketch", "Checkpoint", "Evict", "Restore", "ScaleQuery",
              "Stats", "GetUpdateStatus")
KEYED = ("RegisterQuery", "DropQuery", "ApplyUpdate", "LayoutTable", "Checkpoint", "Evict",
         "Restore", "ScaleQuery")
# back-off between retries of one call (seconds): doubling from the first to the last
_BACKOFF = (0.05, 1.0)
# how long a client that never reached a server keeps trying to connect
_FIRST_CONTACT_S = 3.0


def new_key() -> str:
    """A fresh idempotency key (random, 32 hex digits)."""
    return uuid.uuid4().hex


class RemoteError(ImpError):
    """A call the server refused or failed; ``code`` is the gRPC status name."""

    def __init__(self, code: str, message: str, kind: str | None = None,
                 line: int | None = None, column: int | None = None,
                 construct: str | None = None):
        super().__init__(message)
        self.code = code
        self.message = message
        self.kind = kind  # the server's error class, e.g. "SqlSyntaxError"
        self.line = line
        self.column = column
        self.construct = construct

    def __str__(self) -> str:
        return f"{self.code}: {self.message}"

    @staticmethod
    def from_rpc(error: grpc.RpcError) -> RemoteError:
        code = error.code() if callable(getattr(error, "code", None)) else None
        details = error.details() if callable(getattr(error, "details", None)) else None
        meta: dict[str, str] = {}
        trailing = getattr(error, "trailing_metadata", None)
        for key, value in (trailing() if callable(trailing) else None) or ():
            meta[key] = value if isinstance(value, str) else value.decode()

        def num(key: str) -> int | None:
            return int(meta[key]) if key in meta else None

        return RemoteError(code.name if code is not None else "UNKNOWN",
                           details or "(no details)", meta.get(META_KIND), num(META_LINE),
                           num(META_COLUMN), meta.get(META_CONSTRUCT))


@dataclass(frozen=True)
class TlsOptions:
    """PEM bytes: the CA that signed the server's certificate (None: system roots), and
    for mutual TLS the client's certificate chain and key; ``server_name`` overrides the
    name checked against the server certificate."""

    root_certificates: bytes | None = None
    certificate_chain: bytes | None = None
    private_key: bytes | None = None
    server_name: str | None = None

    @staticmethod
    def from_files(ca: str | None = None, cert: str | None = None, key: str | None = None,
                   server_name: str | None = None) -> TlsOptions:
        def read(p: str | None) -> bytes | None:
            return Path(p).read_bytes() if p else None

        if bool(cert) != bool(key):
            raise ValueError("a client certificate needs its key (and the other way round)")
        return TlsOptions(read(ca), read(cert), read(key), server_name)


def _service_config(retries: int) -> str:
    policy = {"maxAttempts": max(2, min(retries + 1, 5)), "initialBackoff": "0.1s",
              "maxBackoff": "2s", "backoffMultiplier": 2,
              "retryableStatusCodes": ["UNAVAILABLE"]}
    names = [{"service": SERVICE_NAME, "method": m} for m in IDEMPOTENT]
    names.append({"service": "grpc.health.v1.Health", "method": "Check"})
    return json.dumps({"methodConfig": [{"name": names, "retryPolicy": policy}]})


# what gRPC says when a call found no server to talk to (so it never reached one)
_NOT_CONNECTED = ("failed to connect", "connection refused", "connect failed",
                  "name resolution", "dns resolution")


def _not_connected(error: RemoteError) -> bool:
    text = error.message.lower()
    return error.kind is None and any(s in text for s in _NOT_CONNECTED)


class SketchClient:
    def __init__(self, target: str = DEFAULT_TARGET, *, token: str | None = None,
                 tls: TlsOptions | None = None, timeout: float | None = 60.0,
                 retries: int = 3, max_message_bytes: int = 96 << 20,
                 retry_seconds: float = 60.0):
        """``timeout``: of each attempt; ``retries`` 0: no call is retried; otherwise a
        read or keyed call answered UNAVAILABLE is sent again (to the next target, if
        several) until ``retry_seconds`` have passed since its first attempt."""
        self.targets = [t.strip() for t in target.split(",") if t.strip()]
        if not self.targets:
            raise ValueError(f"no target in {target!r}: give host:port[,host:port...]")
        self.timeout = timeout
        self.retries = retries
        self.retry_seconds = retry_seconds
        self.failovers = 0
        self.retried = 0  # attempts sent again after UNAVAILABLE
        self._reached = False  # a call of this client reached a server
        self._metadata = (("authorization", f"Bearer {token}"),) if token else ()
        self._options = [("grpc.max_receive_message_length", max_message_bytes),
                         ("grpc.max_send_message_length", max_message_bytes),
                         ("grpc.enable_retries", 1 if retries > 0 else 0),
                         ("grpc.service_config", _service_config(retries))]
        self._tls = tls
        self._connect(0)

    def _connect(self, index: int) -> None:
        """Talk to ``targets[index]`` from now on."""
        self._index = index
        self.target = self.targets[index]
        options, tls = list(self._options), self._tls
        if tls is not None:
            if tls.server_name:
                options.append(("grpc.ssl_target_name_override", tls.server_name))
            creds = grpc.ssl_channel_credentials(tls.root_certificates, tls.private_key,
                                                 tls.certificate_chain)
            self.channel = grpc.secure_channel(self.target, creds, options=options)
        else:
            self.channel = grpc.insecure_channel(self.target, options=options)
        self.stub = rpc.SketchServiceStub(self.channel)
        self._health = health_pb2_grpc.HealthStub(self.channel)

    def _fail_over(self) -> bool:
        """Move on to the next target (False: there is only one)."""
        if len(self.targets) < 2:
            return False
        self.channel.close()
        self._connect((self._index + 1) % len(self.targets))
        self.failovers += 1
        return True

    # -- plumbing -------------------------------------------------------------------------
    def close(self) -> None:
        self.channel.close()

    def __enter__(self) -> SketchClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _call(self, method: str, request: Any, timeout: float | None = None) -> Any:
        """One logical call: sent again on UNAVAILABLE while that is safe (a read, a call
        with its idempotency key, or one that reached no server) and ``retry_seconds``
        have not passed, moving on to the next target each time."""
        if method in KEYED and not request.idempotency_key:
            request.idempotency_key = new_key()
        started = time.monotonic()
        attempt = 0
        while True:
            try:
                out = getattr(self.stub, method)(
                    request, timeout=self.timeout if timeout is None else timeout,
                    metadata=self._metadata)
                self._reached = True
                return out
            except grpc.RpcError as rpc_error:
                error = RemoteError.from_rpc(rpc_error)
            safe = method in IDEMPOTENT or method in KEYED or _not_connected(error)
            if error.code != "UNAVAILABLE" or not safe:
                raise error
            self._reached |= not _not_connected(error)
            # no server ever answered this client: a wrong address more likely than a
            # server restarting, so it is said after a few seconds, not a minute
            budget = self.retry_seconds if self._reached else \
                min(self.retry_seconds, _FIRST_CONTACT_S)
            attempt += 1
            if self.retries <= 0:  # no retries: only the other targets, once each
                if attempt >= len(self.targets) or not self._fail_over():
                    raise error
                continue
            pause = min(_BACKOFF[0] * 2 ** (attempt - 1), _BACKOFF[1])
            if time.monotonic() - started + pause > budget:
                raise error
            if not self._fail_over() or attempt >= len(self.targets):
                time.sleep(pause)  # every target tried once: wait before the next round
            self.retried += 1

    # -- queries ---------------------------------------------------------------------------
    def register(self, name: str, sql: str,
                 partitions: Mapping[str, int | Sequence[Any]] | str | None = None,
                 fragments: int | None = None, strategy: Strategy | None = None,
                 force: bool = False, shards: int = 1,
                 autoscaling: Autoscaling | None = None,
                 idempotency_key: str | None = None) -> QueryInfo:
        """Register ``sql`` under ``name``. ``partitions`` maps "table.column" to a
        fragment count or split points; "auto" lets the service choose the attributes;
        None uses the SQL's ``-- sketch:`` header (without one, the service chooses).
        ``autoscaling``: the shard count follows the maintenance load within its bounds.
        ``idempotency_key``: names this call (default: a new one), see the module doc."""
        return self.register_explained(name, sql, partitions, fragments, strategy, force,
                                       shards, autoscaling, idempotency_key)[0]

    def register_explained(self, name: str, sql: str,
                           partitions: Mapping[str, int | Sequence[Any]] | str | None = None,
                           fragments: int | None = None, strategy: Strategy | None = None,
                           force: bool = False, shards: int = 1,
                           autoscaling: Autoscaling | None = None,
                           idempotency_key: str | None = None
                           ) -> tuple[QueryInfo, dict[str, Any]]:
        """``register``, with the explanation of the attributes chosen (as ``explain``)."""
        auto = isinstance(partitions, str)
        if auto and str(partitions).strip().lower() != "auto":
            raise ValueError(f"partitions {partitions!r}: give 'auto' or a mapping")
        specs = []
        for attr, spec in ({} if auto else partitions or {}).items():
            if isinstance(spec, int):
                specs.append(pb.PartitionSpec(attribute=attr, fragments=spec))
            else:
                specs.append(pb.PartitionSpec(attribute=attr, bounds=pb.Bounds(
                    values=[convert.to_value(v) for v in spec])))
        req = pb.RegisterQueryRequest(
            name=name, sql=sql, partitions=specs, fragments=fragments or 0,
            strategy=convert.strategy_to_proto(strategy or Lazy()), force=force,
            shards=shards, autoscaling=convert.autoscaling_to_proto(autoscaling),
            auto_partitions=auto, idempotency_key=idempotency_key or "")
        resp = self._call("RegisterQuery", req)
        return (convert.query_info_from_proto(resp.query),
                convert.explanation_from_proto(resp.explanation))

    def layout(self, table: str, columns: Sequence[str] = (), rows_per_group: int = 0,
               dry_run: bool = False, idempotency_key: str | None = None
               ) -> dict[str, Any]:
        """Rewrite ``table`` in range order of one column or Z-order of several (none:
        the order recommended for the registered sketches), row groups of
        ``rows_per_group`` rows (0: sized for skipping); ``dry_run``: only the advice.
        Returns the rewrite's figures (``applied``, ``version``, ``row_groups``, ...)
        and the ``advice`` (orders weighed, rows each would read, ``why``)."""
        req = pb.LayoutTableRequest(table=table, columns=list(columns),
                                    rows_per_group=rows_per_group, dry_run=dry_run,
                                    idempotency_key=idempotency_key or "")
        return convert.layout_from_proto(self._call("LayoutTable", req))

    def explain(self, name: str, fresh: bool = True) -> dict[str, Any]:
        """Why query ``name`` is sketched on its attributes: the candidates considered
        (roles, safety and reason, sketch size, provenance and read shares), the choice
        (``chosen``, ``why``) and, for a sketch covering all or none of a table,
        ``coverage``; of the current sketch (``fresh``) or the latest maintained."""
        req = pb.ExplainSketchRequest(query=name, freshness=pb.FRESHNESS_CURRENT if fresh
                                      else pb.FRESHNESS_LATEST_MAINTAINED)
        return convert.explanation_from_proto(self._call("ExplainSketch", req).explanation)

    def drop(self, name: str, idempotency_key: str | None = None) -> None:
        self._call("DropQuery", pb.DropQueryRequest(name=name,
                                                    idempotency_key=idempotency_key or ""))

    def queries(self) -> list[QueryInfo]:
        resp = self._call("ListQueries", pb.ListQueriesRequest())
        return [convert.query_info_from_proto(q) for q in resp.queries]

    def info(self, name: str) -> QueryInfo:
        for q in self.queries():
            if q.name == name:
                return q
        raise RemoteError("NOT_FOUND", f"no registered query {name!r}")

    def tables(self) -> list[TableRecord]:
        resp = self._call("ListTables", pb.ListTablesRequest())
        return [convert.table_from_proto(t) for t in resp.tables]

    def schema(self, table: str) -> pa.Schema:
        for t in self.tables():
            if t.name == table.lower():
                return t.schema
        raise RemoteError("NOT_FOUND", f"no table {table!r}")

    # -- sketches --------------------------------------------------------------------------
    def sketch(self, name: str, fresh: bool = True, seq: int | None = None,
               include_partitions: bool = False, timeout: float | None = None
               ) -> SketchRecord:
        """The current sketch (``fresh``, maintained first), the latest maintained one, or
        the kept version ``seq``."""
        req = pb.GetSketchRequest(
            query=name, include_partitions=include_partitions,
            freshness=pb.FRESHNESS_CURRENT if fresh else pb.FRESHNESS_LATEST_MAINTAINED)
        if seq is not None:
            req.seq = seq
        return convert.sketch_from_proto(self._call("GetSketch", req, timeout).sketch)

    def sketches(self, names: Sequence[str] = (), fresh: bool = True,
                 known: Mapping[str, int] | None = None, include_partitions: bool = False,
                 timeout: float | None = None
                 ) -> tuple[dict[str, SketchRecord], dict[str, RemoteError]]:
        """The sketches of many queries (all with no ``names``) in one call: those whose
        latest seq differs from ``known[name]``, and the errors of the queries that could
        not be answered (each as GetSketch would have failed)."""
        req = pb.GetSketchesRequest(
            queries=list(names), include_partitions=include_partitions,
            known_seqs=dict(known or {}),
            freshness=pb.FRESHNESS_CURRENT if fresh else pb.FRESHNESS_LATEST_MAINTAINED)
        resp = self._call("GetSketches", req, timeout)
        return ({s.query: convert.sketch_from_proto(s) for s in resp.sketches},
                {e.query: RemoteError(e.code, e.message) for e in resp.errors})

    def watch(self, name: str, after_seq: int = 0, include_partitions: bool = False,
              timeout: float | None = None) -> Iterator[SketchRecord]:
        """Every sketch version after ``after_seq``, in order, as they are made. Ends when
        ``timeout`` (seconds, for the whole watch) passes; closing the iterator cancels
        the stream. A broken connection is resumed after the last delivered version."""
        attempts = 0
        while True:
            call = self.stub.WatchSketch(
                pb.WatchSketchRequest(query=name, after_seq=after_seq,
                                      include_partitions=include_partitions),
                timeout=timeout, metadata=self._metadata)
            try:
                for msg in call:
                    attempts = 0
                    record = convert.sketch_from_proto(msg.sketch)
                    after_seq = record.seq
                    yield record
                return
            except grpc.RpcError as error:
                code = error.code()
                if code == grpc.StatusCode.DEADLINE_EXCEEDED:
                    return
                if code == grpc.StatusCode.UNAVAILABLE and attempts < self.retries:
                    attempts += 1
                    continue
                raise RemoteError.from_rpc(error) from None
            finally:
                call.cancel()

    def maintain(self, queries: Sequence[str] = (), tables: Sequence[str] = ()
                 ) -> dict[str, SketchRecord]:
        resp = self._call("Maintain", pb.MaintainRequest(queries=list(queries),
                                                         tables=list(tables)))
        return {s.query: convert.sketch_from_proto(s) for s in resp.sketches}

    # -- data ------------------------------------------------------------------------------
    def apply_update(self, table: str, inserts: pa.Table | None = None,
                     deletes: pa.Table | None = None,
                     updates: tuple[pa.Table, pa.Table] | None = None,
                     idempotency_key: str | None = None) -> UpdateResult:
        """Commit one table version: ``deletes`` and the old rows of ``updates`` removed,
        ``inserts`` and their new rows added. Retried with its idempotency key (default:
        a new one), so it is committed once: ``UpdateResult.replayed`` says a retry found
        it committed by an earlier attempt."""
        old, new = updates if updates is not None else (None, None)
        req = pb.ApplyUpdateRequest(
            table=table, inserts=convert.table_to_ipc(inserts),
            deletes=convert.table_to_ipc(deletes), update_old=convert.table_to_ipc(old),
            update_new=convert.table_to_ipc(new), idempotency_key=idempotency_key or "")
        return convert.update_from_proto(self._call("ApplyUpdate", req))

    def update_status(self, idempotency_key: str, table: str | None = None
                      ) -> dict[str, Any]:
        """What became of the call sent with ``idempotency_key`` (``table``: where an
        update would have committed; None: any): ``state`` "applied" (with ``update``, the
        first outcome of an ApplyUpdate, or ``query``), "in_progress", "not_applied" or
        "quarantined", ``method`` and ``message``."""
        resp = self._call("GetUpdateStatus", pb.GetUpdateStatusRequest(
            idempotency_key=idempotency_key, table=table or ""))
        out: dict[str, Any] = {
            "state": pb.CallState.Name(resp.state).removeprefix("CALL_").lower(),
            "method": resp.method, "message": resp.message, "query": resp.query or None,
            "applied_at": resp.applied_at or None}
        out["update"] = convert.update_from_proto(resp.update) \
            if resp.HasField("update") else None
        return out

    def run_query(self, sql: str | None = None, query: str | None = None,
                  use_sketch: bool = True, timeout: float | None = None) -> RunResult:
        """Run a read-only SELECT (or the registered ``query``'s SQL) on Spark; with
        ``use_sketch`` the registered query's current sketch filters the scans."""
        req = pb.RunQueryRequest(sql=sql or "", query=query or "", use_sketch=use_sketch)
        return convert.run_result_from_proto(self._call("RunQuery", req, timeout))

    # -- actors ----------------------------------------------------------------------------
    def checkpoint(self, name: str) -> list[CheckpointInfo]:
        resp = self._call("Checkpoint", pb.CheckpointRequest(query=name))
        return [convert.checkpoint_from_proto(c) for c in resp.checkpoints]

    def evict(self, name: str) -> None:
        self._call("Evict", pb.EvictRequest(query=name))

    def restore(self, name: str) -> QueryInfo:
        resp = self._call("Restore", pb.RestoreRequest(query=name))
        return convert.query_info_from_proto(resp.query)

    def scale(self, name: str, shards: int) -> QueryInfo:
        resp = self._call("ScaleQuery", pb.ScaleQueryRequest(query=name, shards=shards))
        return convert.query_info_from_proto(resp.query)

    def stats(self) -> dict[str, Any]:
        resp = self._call("Stats", pb.StatsRequest())
        return {"coordinator": json.loads(resp.coordinator_json or "{}"),
                "service": json.loads(resp.service_json or "{}")}

    def health(self, service: str = "", timeout: float | None = 5.0) -> str:
        """The health service's status name for ``service`` ("" is the whole server)."""
        try:
            resp = self._health.Check(health_pb2.HealthCheckRequest(service=service),
                                      timeout=timeout)
        except grpc.RpcError as error:
            raise RemoteError.from_rpc(error) from None
        return health_pb2.HealthCheckResponse.ServingStatus.Name(resp.status)
