"""Keyed calls on this server: each idempotency key's first outcome, answered again to
its retries; a retry that arrives while the first call runs waits for it.

A client names each logical call that changes state with an idempotency key and sends
the same key on every retry (``services.client`` does so by itself). This ledger is the
first of two layers:

- here, in memory: the response of every keyed call that succeeded on this server in the
  last ``retention_s`` (at most ``max_entries``), and the calls running now;
- below, durable, for the calls whose effect must be found again by another process (a
  restarted server, a standby that took over): an update's key rides in its Delta commit
  (``imp_core.storage.calls``), a registration's or drop's in the registry's write
  (``imp_actors.registry``). The servicer asks those before running a call whose key this
  ledger does not know.

Invariants: one key runs at most one call at a time on this server; a key names one
request (its digest): the same key with another request is refused
(``IdempotencyKeyError``), never answered with the first request's outcome; a call that
failed is forgotten (a refused call changed nothing, so its retry runs again).
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any, Callable

from imp_core.errors import IdempotencyKeyError
from imp_core.storage.calls import request_digest

RETENTION_S = 3600.0
MAX_ENTRIES = 10_000
MAX_BYTES = 64 << 20  # of kept responses: the oldest go first beyond it
_WAIT_SLICE_S = 0.25


def message_digest(method: str, request: Any) -> str:
    """The digest of ``request``'s content without its idempotency key: every set field
    in field-number order (bytes hashed as they are, messages serialized
    deterministically), so a retry of the same request has the same digest."""
    parts: list[bytes | str] = [method]
    for fd, value in request.ListFields():
        if fd.name == "idempotency_key":
            continue
        parts.append(str(fd.number))
        parts.extend(_field_bytes(fd, value))
    return request_digest(*parts)


def _field_bytes(fd: Any, value: Any) -> list[bytes | str]:
    values = list(value) if _repeated(fd) else [value]
    if fd.message_type is not None and fd.message_type.GetOptions().map_entry:
        return [repr(sorted((k, _one(v)) for k, v in value.items()))]
    return [_one(v) for v in values]


def _repeated(fd: Any) -> bool:
    label = getattr(fd, "is_repeated", None)
    return bool(label) if label is not None else fd.label == fd.LABEL_REPEATED


def _one(value: Any) -> bytes | str:
    if isinstance(value, bytes):
        return value
    serialize = getattr(value, "SerializeToString", None)
    if serialize is not None:
        return serialize(deterministic=True)
    return repr(value)


def _as_replayed(response: Any) -> Any:
    """``response`` as answered to a retry: a response that says whether it was
    ``replayed`` (ApplyUpdate's) says so."""
    descriptor = getattr(response, "DESCRIPTOR", None)
    if descriptor is None or "replayed" not in descriptor.fields_by_name:
        return response
    out = type(response)()
    out.CopyFrom(response)
    out.replayed = True
    return out


@dataclass
class _Entry:
    method: str
    digest: str
    done: threading.Event = field(default_factory=threading.Event)
    response: Any = None
    succeeded: bool = False
    finished_at: float = 0.0
    size: int = 0


@dataclass(frozen=True)
class KnownCall:
    """What this ledger knows of a key: ``running`` now, or its ``response``."""

    method: str
    running: bool
    response: Any = None
    finished_at: float = 0.0


class CallLedger:
    """See the module docstring. Thread-safe."""

    def __init__(self, retention_s: float = RETENTION_S, max_entries: int = MAX_ENTRIES,
                 max_bytes: int = MAX_BYTES):
        self.retention_s = retention_s
        self.max_entries = max_entries
        self.max_bytes = max_bytes
        self._lock = threading.Lock()
        self._entries: OrderedDict[str, _Entry] = OrderedDict()
        self._bytes = 0
        self.replayed = 0  # retries answered with a first outcome kept here

    def run(self, method: str, key: str, digest: str, call: Callable[[], Any],
            alive: Callable[[], None] | None = None) -> Any:
        """``call()``'s response, or the first response of ``key`` when a call with it
        succeeded here before; waits for a call with ``key`` that is running now
        (``alive()`` is asked between waits and raises when the waiting client is gone)."""
        while True:
            with self._lock:
                self._expire()
                entry = self._entries.get(key)
                if entry is None:
                    entry = _Entry(method, digest)
                    self._entries[key] = entry
                    break
                self._check_same(key, entry, method, digest)
                if entry.done.is_set() and entry.succeeded:
                    self.replayed += 1
                    return _as_replayed(entry.response)
            # running now: wait for its outcome (a failure frees the key: run it here)
            while not entry.done.wait(_WAIT_SLICE_S):
                if alive is not None:
                    alive()
        try:
            response = call()
        except BaseException:
            with self._lock:
                if self._entries.get(key) is entry:
                    del self._entries[key]
            entry.done.set()
            raise
        size = response.ByteSize() if hasattr(response, "ByteSize") else 0
        with self._lock:
            entry.response, entry.succeeded, entry.finished_at = response, True, time.time()
            entry.size = size
            if self._entries.get(key) is entry:
                self._bytes += size
        entry.done.set()
        return response

    def known(self, key: str) -> KnownCall | None:
        """What this ledger knows of ``key`` (None: nothing)."""
        with self._lock:
            self._expire()
            entry = self._entries.get(key)
            if entry is None:
                return None
            running = not entry.done.is_set()
            return KnownCall(entry.method, running, None if running else entry.response,
                             entry.finished_at)

    @staticmethod
    def _check_same(key: str, entry: _Entry, method: str, digest: str) -> None:
        if entry.method != method or entry.digest != digest:
            raise IdempotencyKeyError(
                f"idempotency key {key!r} was used before for another request "
                f"({entry.method}): a key names one logical call, and its retries must "
                "send the same request")

    def _expire(self) -> None:
        cutoff = time.time() - self.retention_s
        while self._entries:
            key, entry = next(iter(self._entries.items()))
            done = entry.done.is_set()
            over = len(self._entries) > self.max_entries or self._bytes > self.max_bytes
            if done and (over or entry.finished_at < cutoff):
                del self._entries[key]
                self._bytes -= entry.size
                continue
            if not done and over:  # the oldest still runs: look behind it next time
                self._entries.move_to_end(key)
            break
