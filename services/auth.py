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
from typing import Iterable

import grpc

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


class TokenAuth:
    """The accepted tokens; ``refusal`` says why a call's metadata is not let in (None:
    it is). The server applies it to every SketchService call (``services.handlers``);
    the health and reflection services are registered without it."""

    def __init__(self, tokens: Iterable[str]):
        self._tokens = tuple(t.encode("utf-8") for t in tokens)
        if not self._tokens:
            raise ValueError("token authentication needs at least one token")

    def refusal(self, metadata: Iterable[tuple[str, str | bytes]] | None) -> str | None:
        token = bearer_token(metadata)
        if token is None:
            return "missing bearer token (metadata 'authorization: Bearer <token>')"
        if not token_matches(token, self._tokens):
            return "invalid bearer token"
        return None
