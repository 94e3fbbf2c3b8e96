"""Bearer-token authentication for the gRPC server, and who a caller is.

Every call must carry the metadata ``authorization: Bearer <token>`` with one of the
configured tokens, except the standard health service (so that probes need no secret)
and server reflection (it describes the API, whose protos are public, and holds no
data: a tool such as grpcurl needs it to encode even a health check).
Tokens are compared in constant time, against every configured token, so the time of a
refusal says nothing about how close a guess was.
"""

from __future__ import annotations

import hashlib
import hmac
from typing import Callable, Iterable

import grpc

EXEMPT_PREFIXES = ("/grpc.health.v1.Health/", "/grpc.reflection.v1alpha.ServerReflection/",
                   "/grpc.reflection.v1.ServerReflection/")
_SCHEME = "bearer "


def bearer_token(metadata: Iterable[tuple[str, str | bytes]] | None) -> str | None:
    """The token of the first ``authorization: Bearer ...`` entry, if any."""
    for key, value in metadata or ():
        if key.lower() == "authorization":
            text = value.decode("latin-1") if isinstance(value, bytes) else value
            if text[: len(_SCHEME)].lower() == _SCHEME:
                return text[len(_SCHEME):].strip()
            return None
    return None


def token_matches(given: str, accepted: tuple[bytes, ...]) -> bool:
    probe = given.encode("utf-8")
    ok = False
    for token in accepted:  # no early exit: every token is compared
        ok |= hmac.compare_digest(probe, token)
    return ok


def client_identity(context: grpc.ServicerContext) -> str:
    """Who is calling, for per-client limits: a digest of the bearer token if the call
    carries one, else the peer's host (without the port, which changes per connection)."""
    token = bearer_token(context.invocation_metadata())
    if token:
        return "token:" + hashlib.sha256(token.encode()).hexdigest()[:16]
    peer = context.peer() or "unknown"
    kind, _, rest = peer.partition(":")
    if kind in ("ipv4", "ipv6"):
        host = rest.rsplit(":", 1)[0]
        return f"peer:{host}"
    return f"peer:{peer}"


class TokenAuthInterceptor(grpc.ServerInterceptor):
    """Refuses calls without a valid bearer token with UNAUTHENTICATED."""

    def __init__(self, tokens: Iterable[str], exempt: tuple[str, ...] = EXEMPT_PREFIXES):
        self._tokens = tuple(t.encode("utf-8") for t in tokens)
        if not self._tokens:
            raise ValueError("token authentication needs at least one token")
        self._exempt = exempt

    def intercept_service(self, continuation: Callable, handler_call_details):
        method = handler_call_details.method
        if method.startswith(self._exempt):
            return continuation(handler_call_details)
        token = bearer_token(handler_call_details.invocation_metadata)
        if token is not None and token_matches(token, self._tokens):
            return continuation(handler_call_details)
        handler = continuation(handler_call_details)
        if handler is None:  # unknown method: let gRPC answer UNIMPLEMENTED
            return None
        message = ("missing bearer token (metadata 'authorization: Bearer <token>')"
                   if token is None else "invalid bearer token")
        return _refusal(handler, message)


def _refusal(handler: grpc.RpcMethodHandler, message: str) -> grpc.RpcMethodHandler:
    """A handler of the same kind as ``handler`` that aborts with UNAUTHENTICATED."""

    def deny(_request, context):
        context.abort(grpc.StatusCode.UNAUTHENTICATED, message)

    def deny_stream(_request, context):
        context.abort(grpc.StatusCode.UNAUTHENTICATED, message)
        yield  # pragma: no cover - makes this a generator

    kwargs = dict(request_deserializer=handler.request_deserializer,
                  response_serializer=handler.response_serializer)
    if handler.unary_unary:
        return grpc.unary_unary_rpc_method_handler(deny, **kwargs)
    if handler.unary_stream:
        return grpc.unary_stream_rpc_method_handler(deny_stream, **kwargs)
    if handler.stream_unary:
        return grpc.stream_unary_rpc_method_handler(deny, **kwargs)
    return grpc.stream_stream_rpc_method_handler(deny_stream, **kwargs)
