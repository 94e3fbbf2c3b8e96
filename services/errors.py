"""Errors of the front end itself, and how an error code becomes a gRPC status.

Domain errors (``imp_core.errors.ImpError``) carry ``code``, the name of a gRPC status
("NOT_FOUND", ...); the front end maps them by that name only, never by class, so a new
domain error needs no change here. The classes below are the front end's own: a
request that cannot be converted (``BadRequestError``), a limit of this server
(``LimitExceededError``), a call that ended on the client's side (``CallEndedError``) and
one without the required token (``UnauthenticatedError``).
"""

from __future__ import annotations

import grpc

from imp_core.errors import ImpError, RequestLimitError


class BadRequestError(ImpError):
    """A request field is missing or malformed (not Arrow IPC, an unknown enum, ...)."""

    code = "INVALID_ARGUMENT"


class LimitExceededError(RequestLimitError):
    """A request exceeds a configured limit of the server (SQL length, batch size,
    registrations per client, concurrent watches, result size)."""


class CallEndedError(ImpError):
    """The client cancelled the call or its deadline passed; nothing is answered."""

    code = "CANCELLED"


class UnauthenticatedError(ImpError):
    """A call without the bearer token this server requires."""

    code = "UNAUTHENTICATED"


def status_of(code: str | None) -> grpc.StatusCode:
    """The gRPC status named ``code``; INTERNAL for an unknown or missing name."""
    if not code:
        return grpc.StatusCode.INTERNAL
    try:
        status = grpc.StatusCode[code.upper()]
    except KeyError:
        return grpc.StatusCode.INTERNAL
    return grpc.StatusCode.INTERNAL if status is grpc.StatusCode.OK else status


# Trailing metadata keys that carry an error's structured details to clients.
META_CODE = "imp-error-code"
META_KIND = "imp-error-kind"
META_LINE = "imp-error-line"
META_COLUMN = "imp-error-column"
META_CONSTRUCT = "imp-error-construct"


def error_metadata(error: ImpError) -> tuple[tuple[str, str], ...]:
    """Trailing metadata describing ``error`` (its class name, code and SQL position)."""
    out = [(META_CODE, str(error.code)), (META_KIND, type(error).__name__)]
    for key, attr in ((META_LINE, "line"), (META_COLUMN, "column"),
                      (META_CONSTRUCT, "construct")):
        value = getattr(error, attr, None)
        if value is not None:
            out.append((key, str(value)))
    return tuple(out)
