"""The one place where exceptions become gRPC statuses.

A domain error (``ImpError``) ends its call with the status its ``code`` names and its
message, plus trailing metadata with its kind and SQL position; any other exception is
logged here with its traceback and ends the call with INTERNAL and a short incident id,
never the exception's text (it may hold paths or data). A ``MemoryError`` ends only its
own call, with RESOURCE_EXHAUSTED. Every finished call is counted
in ``CallMetrics``.
"""

from __future__ import annotations

import gc
import logging
import time
import uuid
from typing import Callable

import grpc

from imp_core.errors import ImpError
from services.errors import BadRequestError, error_metadata, status_of
from services.metrics import CallMetrics

log = logging.getLogger("imp.services")


class ErrorMappingInterceptor(grpc.ServerInterceptor):
    def __init__(self, metrics: CallMetrics | None = None):
        self.metrics = metrics or CallMetrics()
        # wrapped handlers by method: the registered handler of a method is one object,
        # so its wrapper is made once, not on every call
        self._wrapped: dict[str, tuple[grpc.RpcMethodHandler, grpc.RpcMethodHandler]] = {}

    def intercept_service(self, continuation: Callable, handler_call_details):
        handler = continuation(handler_call_details)
        if handler is None:
            return None
        method = handler_call_details.method
        known = self._wrapped.get(method)
        if known is not None and known[0] is handler:
            return known[1]
        wrapped = self._wrap(handler, method)
        self._wrapped[method] = (handler, wrapped)
        return wrapped

    def _wrap(self, handler: grpc.RpcMethodHandler, method: str) -> grpc.RpcMethodHandler:
        kwargs = dict(request_deserializer=_tolerant(handler.request_deserializer),
                      response_serializer=handler.response_serializer)
        if handler.unary_unary:
            return grpc.unary_unary_rpc_method_handler(
                self._unary(handler.unary_unary, method), **kwargs)
        if handler.unary_stream:
            return grpc.unary_stream_rpc_method_handler(
                self._stream(handler.unary_stream, method), **kwargs)
        return handler  # client-streaming calls (reflection) keep their own handling

    def _unary(self, behavior: Callable, method: str) -> Callable:
        def call(request, context):
            start = time.perf_counter()
            try:
                _refuse_malformed(request)
                response = behavior(request, context)
            except Exception as error:  # noqa: BLE001 - mapped to a status by _abort
                self._abort(error, context, method, start)
            self.metrics.record(method, "OK", time.perf_counter() - start)
            return response

        return call

    def _stream(self, behavior: Callable, method: str) -> Callable:
        def call(request, context):
            start = time.perf_counter()
            try:
                _refuse_malformed(request)
                yield from behavior(request, context)
            except Exception as error:  # noqa: BLE001 - mapped to a status by _abort
                self._abort(error, context, method, start)
            code = "OK" if context.is_active() else "CANCELLED"
            self.metrics.record(method, code, time.perf_counter() - start)

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


def _refuse_malformed(request: object) -> None:
    if isinstance(request, _Malformed):
        raise BadRequestError(f"the request is not a valid message of this method's type: "
                              f"{request.reason}")
