"""``SketchService``: each call converts its request, asks the coordinator, converts the
answer. No business logic lives here: checks are ``Guard``'s, conversions ``convert``'s,
errors become statuses in ``services.handlers.CallWrapper``.

Deadlines and cancellation: a call whose client has gone (cancelled, deadline passed) is
not started; the long calls (RunQuery, Maintain, a current GetSketch, ApplyUpdate)
check again before building their answer; WatchSketch waits in short slices and stops
as soon as its client cancels, its deadline passes or the server stops.

Idempotency keys: a call that changes state and carries ``idempotency_key`` runs through
``services.idempotency.CallLedger`` (``_once``): a retry gets the first outcome, and a
key unknown here is first looked up where its effect would be durable (an update's in its
table's log, by the coordinator under its writer lock; a registration's or drop's in the
registry), so a retry after a crash or a fail-over is not applied again.
"""

from __future__ import annotations

import json
import os
import threading
import time
from typing import Any, Callable, Iterator

import grpc

from imp_core.errors import (
    IdempotencyKeyError,
    ImpError,
    QuarantinedRequestError,
    UnknownQueryError,
)
from imp_core.storage.calls import CallTag, check_key
from services import convert
from services.auth import client_identity
from services.call_metrics import CallMetrics
from services.errors import BadRequestError, CallEndedError, status_of
from services.guards import Guard, StalledStreams
from services.handlers import parse_request
from services.idempotency import CallLedger, message_digest
from services.protos import pb, rpc
from services.sketch_responses import SketchResponses

WATCH_SLICE_S = 0.25  # longest wait between two checks of a watch's client
# a layout's row groups: smaller ones make a table of mostly metadata, larger ones skip less
MIN_ROWS_PER_GROUP, MAX_ROWS_PER_GROUP = 1024, 1 << 24


def _alive(context: grpc.ServicerContext) -> None:
    if not context.is_active():
        raise CallEndedError("the call was cancelled or its deadline passed")


class SketchServicer(rpc.SketchServiceServicer):
    # methods whose handler takes the request's bytes and parses them itself
    RAW_REQUESTS = frozenset({"GetSketch"})

    def __init__(self, coordinator: Any, guard: Guard, metrics: CallMetrics,
                 stopping: threading.Event | None = None):
        self.c = coordinator
        self.guard = guard
        self.metrics = metrics
        self.stopping = stopping or threading.Event()
        self.sketches = convert.SketchEncoder()
        self.responses = SketchResponses(coordinator)
        self.stalled = StalledStreams(guard.limits.watch_send_seconds)
        self.ledger = CallLedger()

    def _once(self, method: str, request: Any, context: grpc.ServicerContext,
              run: Callable[[CallTag | None], Any],
              durable: Callable[[CallTag], Any] | None = None) -> Any:
        """``run(tag)`` under the request's idempotency key (module docstring);
        ``durable(tag)``: the first outcome where it is kept durably, or None."""
        key = request.idempotency_key
        if not key:
            return run(None)
        tag = CallTag(check_key(key), message_digest(method, request), method)

        def first() -> Any:
            found = durable(tag) if durable is not None else None
            return found if found is not None else run(tag)

        return self.ledger.run(method, key, tag.digest, first, lambda: _alive(context))

    def _registered(self, tag: CallTag) -> Any:
        """The outcome of a registration or drop made before with ``tag``'s key."""
        found = self.c.registered_call(tag.key)
        if found is None:
            return None
        if found.method != tag.method or found.digest != tag.digest:
            raise IdempotencyKeyError(
                f"idempotency key {tag.key!r} was used before for another request "
                f"({found.method} of {found.query!r}): a key names one logical call, and "
                "its retries must send the same request")
        self.ledger.replayed += 1
        if tag.method == "DropQuery":
            return pb.DropQueryResponse()
        try:
            info = self.c.info(found.query)
        except UnknownQueryError:
            raise UnknownQueryError(
                f"query {found.query!r} was registered by this idempotency key at "
                f"{time.strftime('%Y-%m-%d %H:%M:%S', time.gmtime(found.at))} UTC and "
                "dropped since") from None
        return pb.RegisterQueryResponse(
            query=convert.query_info_to_proto(info),
            explanation=convert.explanation_to_proto(self.c.explain(info.name, fresh=False)))

    # -- queries ---------------------------------------------------------------------------
    def RegisterQuery(self, request, context):
        self.guard.sql(request.sql)
        spec = convert.query_spec(request)
        _alive(context)

        def run(tag: CallTag | None) -> pb.RegisterQueryResponse:
            with self.guard.registration(client_identity(context), spec.name):
                info = self.c.register(spec, tag)
            return pb.RegisterQueryResponse(
                query=convert.query_info_to_proto(info),
                explanation=convert.explanation_to_proto(self.c.explain(info.name,
                                                                        fresh=False)))

        return self._once("RegisterQuery", request, context, run, self._registered)

    def LayoutTable(self, request, context):
        if request.rows_per_group and not \
                MIN_ROWS_PER_GROUP <= request.rows_per_group <= MAX_ROWS_PER_GROUP:
            raise BadRequestError(f"rows_per_group must lie in [{MIN_ROWS_PER_GROUP:,}, "
                                  f"{MAX_ROWS_PER_GROUP:,}] (0: sized for skipping)")
        _alive(context)
        return self._once("LayoutTable", request, context, lambda tag: convert.layout_to_proto(
            self.c.layout(request.table, tuple(request.columns),
                          request.rows_per_group or None, request.dry_run)))

    def ExplainSketch(self, request, context):
        fresh = request.freshness != pb.FRESHNESS_LATEST_MAINTAINED
        return pb.ExplainSketchResponse(
            explanation=convert.explanation_to_proto(self.c.explain(request.query, fresh)))

    def DropQuery(self, request, context):
        def run(tag: CallTag | None) -> pb.DropQueryResponse:
            self.c.drop(request.name, tag)
            self.guard.dropped(request.name)
            self.sketches.forget(request.name)
            self.responses.forget(request.name)
            return pb.DropQueryResponse()

        return self._once("DropQuery", request, context, run, self._registered)

    def ListQueries(self, request, context):
        return pb.ListQueriesResponse(
            queries=[convert.query_info_to_proto(q) for q in self.c.queries()])

    def ListTables(self, request, context):
        store = self.c.ctx.store
        return pb.ListTablesResponse(tables=[
            pb.TableInfo(name=t, version=store.version(t),
                         arrow_schema=convert.schema_to_bytes(store.declared_schema(t)))
            for t in self.c.tables()])

    # -- sketches --------------------------------------------------------------------------
    def GetSketch(self, data: bytes, context):
        """Takes the request's bytes (``RAW_REQUESTS``): a request answered before whose
        answer still holds is answered without parsing (``services.sketch_responses``)."""
        response = self.responses.lookup(data)
        if response is not None:
            return response
        request = parse_request(pb.GetSketchRequest, data)
        if request.HasField("seq"):
            sv = self.c.sketch_version(request.query, request.seq)
        else:
            fresh = request.freshness != pb.FRESHNESS_LATEST_MAINTAINED
            # a gone client starts no maintenance; a current sketch is answered at once
            sv = self.c.get_sketch(request.query, fresh=fresh,
                                   before_work=lambda: _alive(context))
        response = self.sketches.response(sv, request.include_partitions)
        self.responses.keep(data, request, sv, response)
        return response

    def GetSketches(self, request, context):
        names = list(dict.fromkeys(request.queries)) or [q.name for q in self.c.queries()]
        fresh = request.freshness != pb.FRESHNESS_LATEST_MAINTAINED
        known = dict(request.known_seqs)
        out = pb.GetSketchesResponse()
        for name in names:
            _alive(context)
            try:
                sv = self.c.get_sketch(name, fresh=fresh)
            except ImpError as error:  # this query only: the others are still answered
                out.errors.add(query=name, code=status_of(error.code).name, message=str(error))
                continue
            if known.get(name) != sv.seq:
                out.sketches.append(self.sketches.encode(sv, request.include_partitions))
        return out

    def WatchSketch(self, request, context) -> Iterator[pb.WatchSketchResponse]:
        with self.guard.watch_slot():
            after = request.after_seq
            self.c.info(request.query)  # NOT_FOUND before the stream starts
            while context.is_active() and not self.stopping.is_set():
                remaining = context.time_remaining()
                wait = WATCH_SLICE_S if remaining is None else \
                    max(0.0, min(WATCH_SLICE_S, remaining))
                sv = self.c.watch(request.query, after, timeout=wait)
                if sv is None:
                    continue
                msg = pb.WatchSketchResponse(
                    sketch=self.sketches.encode(sv, request.include_partitions))
                with self.stalled.sending(context.cancel):  # a reader that stopped: dropped
                    yield msg
                after = sv.seq

    def Maintain(self, request, context):
        # changes no state a client sees (sketches are made current): repeated as it is
        _alive(context)
        done = self.c.maintain(queries=list(request.queries) or None,
                               tables=list(request.tables) or None)
        _alive(context)
        return pb.MaintainResponse(
            sketches=[convert.sketch_to_proto(sv) for _, sv in sorted(done.items())])

    # -- data ------------------------------------------------------------------------------
    def ApplyUpdate(self, request, context):
        parts = (request.inserts, request.deletes, request.update_old, request.update_new)
        self.guard.batch_bytes(sum(len(p) for p in parts))
        inserts, deletes, old, new = (
            convert.ipc_to_table(p, what) for p, what in
            zip(parts, ("inserts", "deletes", "update_old", "update_new")))
        self.guard.batch_rows(sum(t.num_rows for t in (inserts, deletes, old, new)
                                  if t is not None))
        if (old is None) != (new is None):
            raise BadRequestError("an update needs both update_old and update_new")
        if old is not None and new is not None and old.num_rows != new.num_rows:
            raise BadRequestError(f"update_old has {old.num_rows:,} rows and update_new "
                                  f"{new.num_rows:,}: they pair row by row")
        _alive(context)
        # the durable lookup of a key is the coordinator's, under its writer lock
        return self._once("ApplyUpdate", request, context, lambda tag: convert.update_to_proto(
            self.c.apply_update(request.table, inserts=inserts, deletes=deletes,
                                updates=(old, new) if old is not None else None, call=tag)))

    def GetUpdateStatus(self, request, context):
        key = check_key(request.idempotency_key)
        try:
            incidents = getattr(self.c, "incidents", None)
            if incidents is not None:
                incidents.check("GetUpdateStatus", key)
        except QuarantinedRequestError as error:
            return pb.GetUpdateStatusResponse(state=pb.CALL_QUARANTINED, message=str(error))
        known = self.ledger.known(key)
        if known is not None and known.running:
            return pb.GetUpdateStatusResponse(
                state=pb.CALL_IN_PROGRESS, method=known.method,
                message=f"a {known.method} with this key is running on this server")
        out = pb.GetUpdateStatusResponse(state=pb.CALL_APPLIED)
        if known is not None:
            out.method, out.applied_at = known.method, known.finished_at
            out.message = f"{known.method} applied by this server"
            if isinstance(known.response, pb.ApplyUpdateResponse):
                out.update.CopyFrom(known.response)
            elif isinstance(known.response, pb.RegisterQueryResponse):
                out.query = known.response.query.name
            return out
        found = self.c.registered_call(key)
        if found is not None:
            out.method, out.query, out.applied_at = found.method, found.query, found.at
            out.message = f"{found.method} of {found.query!r} applied"
            return out
        update = self.c.applied_update(key, request.table or None)
        if update is not None:
            out.method, out.applied_at = update.method, update.committed_at
            out.update.CopyFrom(pb.ApplyUpdateResponse(
                table=update.table, version=update.version, inserted=update.inserted,
                deleted=update.deleted, replayed=True))
            out.message = f"{update.method} committed as version {update.version} of " \
                          f"{update.table}"
            return out
        where = f"table {request.table}" if request.table else "any table"
        return pb.GetUpdateStatusResponse(
            state=pb.CALL_NOT_APPLIED,
            message=f"no call with this key took effect on {where} or the registry (keys "
                    "are kept 24 h): sending it again with the same key applies it once")

    def RunQuery(self, request, context):
        if request.sql:
            self.guard.sql(request.sql)
        elif not request.query:
            raise BadRequestError("give the SQL to run or a registered query name")
        _alive(context)
        result = self.c.run_query(sql=request.sql or None, query=request.query or None,
                                  use_sketch=request.use_sketch)
        _alive(context)
        rows = convert.table_to_ipc(result.rows)
        self.guard.result_bytes(len(rows))
        return convert.query_result_to_proto(result, rows)

    # -- actors ----------------------------------------------------------------------------
    # a repeat of these moves to the same target state: their keys are kept in memory only
    def Checkpoint(self, request, context):
        return self._once("Checkpoint", request, context, lambda tag: pb.CheckpointResponse(
            checkpoints=[convert.checkpoint_to_proto(c) for c in
                         self.c.checkpoint(request.query)]))

    def Evict(self, request, context):
        def run(tag: CallTag | None) -> pb.EvictResponse:
            self.c.evict(request.query)
            return pb.EvictResponse()

        return self._once("Evict", request, context, run)

    def Restore(self, request, context):
        return self._once("Restore", request, context, lambda tag: pb.RestoreResponse(
            query=convert.query_info_to_proto(self.c.restore(request.query))))

    def ScaleQuery(self, request, context):
        if request.shards < 1:
            raise BadRequestError("shards must be at least 1")
        return self._once("ScaleQuery", request, context, lambda tag: pb.ScaleQueryResponse(
            query=convert.query_info_to_proto(self.c.scale(request.query, request.shards))))

    def Stats(self, request, context):
        service = self.metrics.snapshot()
        service["open_watches"] = self.guard.open_watches
        service["dropped_watches"] = self.stalled.dropped
        service["idempotent_replays"] = self.ledger.replayed
        service["pid"] = os.getpid()
        return pb.StatsResponse(coordinator_json=json.dumps(self.c.stats(), default=str),
                                service_json=json.dumps(service))
