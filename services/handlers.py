"""Every SketchService call passes through one wrapper, applied when the service is
registered (no per-call interceptor pipeline): the bearer token is checked, a malformed
request is refused, exceptions become gRPC statuses, and the finished call is counted.

A domain error (``ImpError``) ends its call with the status its ``code`` names and its
message, plus trailing metadata with its kind and SQL position; any other exception is
logged here with its traceback and ends the call with INTERNAL and a short incident id,
never the exception's text (it may hold paths or data). A ``MemoryError`` ends only its
own call, with RESOURCE_EXHAUSTED. Every finished call, refused ones included, is
counted in ``CallMetrics``.

Invariant: the health and reflection services are registered as they are (no token, no
wrapper), every method of the wrapped services goes through ``CallWrapper``. A servicer
may name methods in ``RAW_REQUESTS``: their handlers get the request's bytes and parse
them with ``parse_request``, which refuses a malformed message as the wrapper does.
"""

from __future__ import annotations

import gc
import logging
import time
import uuid
from typing import Any, Callable

import grpc

from imp_core.errors import ImpError
from services.auth import TokenAuth
from services.call_metrics import CallMetrics
from services.errors import BadRequestError, UnauthenticatedError, error_metadata, status_of

log = logging.getLogger("imp.services")


class CallWrapper:
    """Wraps the method handlers of a service (module docstring). ``around(method,
    request)``, if given, is a context manager each admitted unary call of a method
    taking a parsed request runs inside (it may refuse the call by raising)."""

    def __init__(self, metrics: CallMetrics | None = None, auth: TokenAuth | None = None,
                 around: Callable[[str, Any], Any] | None = None):
        self.metrics = metrics or CallMetrics()
        self.auth = auth
        self.around = around

    def wrap(self, handler: grpc.RpcMethodHandler, method: str, raw: bool = False
             ) -> grpc.RpcMethodHandler:
        """``raw``: the method's behavior takes the request's bytes and parses them itself
        (with ``parse_request``)."""
        deserialize = None if raw else _tolerant(handler.request_deserializer)
        kwargs = dict(request_deserializer=deserialize,
                      response_serializer=_passthrough(handler.response_serializer))
        if handler.unary_unary:
            return grpc.unary_unary_rpc_method_handler(
                self._unary(handler.unary_unary, method, None if raw else self.around),
                **kwargs)
        if handler.unary_stream:
            return grpc.unary_stream_rpc_method_handler(
                self._stream(handler.unary_stream, method), **kwargs)
        raise TypeError(f"{method}: only unary requests are wrapped")

    def _admit(self, request: Any, context: grpc.ServicerContext) -> None:
        if self.auth is not None:
            refusal = self.auth.refusal(context.invocation_metadata())
            if refusal is not None:
                raise UnauthenticatedError(refusal)
        _refuse_malformed(request)

    def _unary(self, behavior: Callable, method: str,
               around: Callable[[str, Any], Any] | None = None) -> Callable:
        record = self.metrics.recorder(method)
        auth = self.auth
        name = method.rsplit("/", 1)[-1]

        def call(request, context):
            start = time.perf_counter()
            try:
                # ``_admit``, inline: this runs on every call, thousands of times a second
                if auth is not None:
                    self._admit(request, context)
                elif type(request) is _Malformed:
                    raise _malformed(request.reason)
                if around is None:
                    response = behavior(request, context)
                else:
                    with around(name, request):
                        response = behavior(request, context)
            except Exception as error:  # noqa: BLE001 - mapped to a status by _abort
                self._abort(error, context, method, start)
            record("OK", time.perf_counter() - start)
            return response

        return call

    def _stream(self, behavior: Callable, method: str) -> Callable:
        record = self.metrics.recorder(method)

        def call(request, context):
            start = time.perf_counter()
            try:
                self._admit(request, context)
                yield from behavior(request, context)
            except Exception as error:  # noqa: BLE001 - mapped to a status by _abort
                self._abort(error, context, method, start)
            record("OK" if context.is_active() else "CANCELLED", time.perf_counter() - start)

        return call

    def _abort(self, error: Exception, context: grpc.ServicerContext, method: str,
               start: float) -> None:
        """Ends the call for ``error``: always raises (``context.abort`` does)."""
        seconds = time.perf_counter() - start
        if _already_aborted(error, context):  # the handler aborted by itself
            self.metrics.record(method, context.code().name, seconds)
            raise error
        if isinstance(error, ImpError):
            status = status_of(error.code)
            self.metrics.record(method, status.name, seconds)
            context.set_trailing_metadata(error_metadata(error))
            context.abort(status, str(error))
        if isinstance(error, MemoryError):
            # one request that did not fit: it failed alone (the memory it took is
            # released with its frames); the server goes on serving the others
            gc.collect()
            log.error("%s ran out of memory", method)
            self.metrics.record(method, "RESOURCE_EXHAUSTED", seconds)
            context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED,
                          "the request needed more memory than the server could give it; "
                          "nothing was changed (for a registration: lower "
                          "IMP_REGISTRATION_MEMORY_BYTES so the estimate refuses such plans "
                          "up front, or give the server more memory)")
        incident = uuid.uuid4().hex[:12]
        log.error("%s failed (incident %s)", method, incident, exc_info=error)
        self.metrics.record(method, "INTERNAL", seconds)
        context.abort(grpc.StatusCode.INTERNAL,
                      f"internal error (incident {incident}); the server log has the details")


class _Capture:
    """Stands in for a server while generated code (``add_*Servicer_to_server``)
    registers a servicer: keeps the method handlers it hands over."""

    def __init__(self) -> None:
        self.services: dict[str, dict[str, grpc.RpcMethodHandler]] = {}

    def add_generic_rpc_handlers(self, handlers: Any) -> None:
        pass  # the same handlers come through add_registered_method_handlers

    def add_registered_method_handlers(self, service: str,
                                       handlers: dict[str, grpc.RpcMethodHandler]) -> None:
        self.services[service] = dict(handlers)


def register_service(server: grpc.Server, add_to_server: Callable[[Any, Any], None],
                     servicer: Any, wrapper: CallWrapper) -> None:
    """Registers ``servicer`` on ``server`` as the generated ``add_to_server`` would, with
    every method handler passed through ``wrapper``."""
    capture = _Capture()
    add_to_server(servicer, capture)
    if not capture.services:
        raise RuntimeError("the generated code registered no method handlers")
    raw = getattr(servicer, "RAW_REQUESTS", frozenset())
    for service, handlers in capture.services.items():
        wrapped = {name: wrapper.wrap(h, f"/{service}/{name}", raw=name in raw)
                   for name, h in handlers.items()}
        server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(service,
                                                                             wrapped),))
        server.add_registered_method_handlers(service, wrapped)


def _already_aborted(error: Exception, context: grpc.ServicerContext) -> bool:
    """True when ``error`` is the bare exception ``context.abort`` raises."""
    code = getattr(context, "code", None)
    return type(error) is Exception and not error.args and callable(code) and \
        code() is not None


class _Malformed:
    """A request whose bytes are not a valid message of its method's type."""

    def __init__(self, reason: str):
        self.reason = reason


def _tolerant(deserialize: Callable | None) -> Callable | None:
    """``deserialize`` that hands a malformed message on as ``_Malformed`` (grpcio itself
    would end the call with INTERNAL, as if the server had failed)."""
    if deserialize is None:
        return None

    def safe(data: bytes):
        try:
            return deserialize(data)
        except Exception as exc:  # noqa: BLE001 - DecodeError, bad UTF-8, ...
            return _Malformed(str(exc) or type(exc).__name__)

    return safe


def _passthrough(serialize: Callable | None) -> Callable | None:
    """``serialize`` that sends bytes as they are: a handler may answer with a response
    it serialized (and cached) itself."""
    if serialize is None:
        return None

    def out(response: Any) -> bytes:
        return response if type(response) is bytes else serialize(response)

    return out


def _refuse_malformed(request: object) -> None:
    if isinstance(request, _Malformed):
        raise _malformed(request.reason)


def parse_request(message_type: Any, data: bytes) -> Any:
    """``data`` parsed as ``message_type``, for a method registered with raw requests; a
    malformed message is refused as any other method refuses it."""
    try:
        return message_type.FromString(data)
    except Exception as exc:  # noqa: BLE001 - DecodeError, bad UTF-8, ...
        raise _malformed(str(exc) or type(exc).__name__) from None


def _malformed(reason: str) -> BadRequestError:
    return BadRequestError(f"the request is not a valid message of this method's type: "
                           f"{reason}")
