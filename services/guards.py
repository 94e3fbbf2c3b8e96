"""Checks a request passes before it reaches the coordinator: the server's limits, the
read-only SELECT rule, the per-client registration quota and the number of open watch
streams; and ``StalledStreams``, which drops watchers that stopped reading.

Invariants: a refused request changes nothing (every check runs before the coordinator
call, and a quota slot taken for a registration is given back if it fails); a client
never holds more than ``max_registrations_per_client`` registrations made through this
server process (counts start at zero when the server starts: the coordinator's registry
does not record who registered a query).
"""

from __future__ import annotations

import itertools
import logging
import threading
import time
from contextlib import contextmanager
from typing import Callable, Iterator

from imp_core.sql.readonly import check_read_only_select
from services.errors import BadRequestError, LimitExceededError
from services.server_config import Limits

log = logging.getLogger("imp.services")


class Guard:
    def __init__(self, limits: Limits):
        self.limits = limits
        self._lock = threading.Lock()
        self._owned: dict[str, set[str]] = {}  # client -> query names it registered
        self._watches = 0

    # -- request content ---------------------------------------------------------------
    def sql(self, sql: str) -> None:
        """A read-only SELECT no longer than the limit (refused before it is parsed)."""
        if len(sql) > self.limits.max_sql_chars:
            raise LimitExceededError(f"SQL text of {len(sql):,} characters exceeds the limit "
                                     f"of {self.limits.max_sql_chars:,}")
        if not sql.strip():
            raise BadRequestError("the SQL text is empty")
        check_read_only_select(sql)

    def batch_bytes(self, total: int) -> None:
        if total > self.limits.max_batch_bytes:
            raise LimitExceededError(f"update batches of {total:,} bytes exceed the limit of "
                                     f"{self.limits.max_batch_bytes:,} bytes")

    def batch_rows(self, total: int) -> None:
        if total > self.limits.max_batch_rows:
            raise LimitExceededError(f"update batches of {total:,} rows exceed the limit of "
                                     f"{self.limits.max_batch_rows:,} rows")

    def result_bytes(self, size: int) -> None:
        # keep room for the response's other fields
        limit = self.limits.max_message_bytes - 64 * 1024
        if size > limit:
            raise LimitExceededError(f"the query result has {size:,} bytes, more than the "
                                     f"{limit:,} a response may carry: select fewer rows "
                                     "or columns (e.g. add a LIMIT)")

    # -- per-client quota ----------------------------------------------------------------
    @contextmanager
    def registration(self, client: str, name: str) -> Iterator[None]:
        """Holds a quota slot of ``client`` for ``name`` while registering; keeps it if
        the block succeeds, gives it back if it raises."""
        with self._lock:
            owned = self._owned.setdefault(client, set())
            limit = self.limits.max_registrations_per_client
            if name not in owned and len(owned) >= limit:
                raise LimitExceededError(f"this client already registered {len(owned)} "
                                         f"queries, the limit per client is {limit}")
            fresh = name not in owned
            owned.add(name)
        try:
            yield
        except BaseException:
            if fresh:
                with self._lock:
                    self._owned.get(client, set()).discard(name)
            raise

    def dropped(self, name: str) -> None:
        """``name`` no longer counts against whoever registered it."""
        with self._lock:
            for owned in self._owned.values():
                owned.discard(name)

    def registrations(self, client: str) -> int:
        with self._lock:
            return len(self._owned.get(client, ()))

    # -- watch streams -------------------------------------------------------------------
    @contextmanager
    def watch_slot(self) -> Iterator[None]:
        """One of the ``max_watches`` stream slots (each open stream holds a thread)."""
        with self._lock:
            if self._watches >= self.limits.max_watches:
                raise LimitExceededError(f"{self._watches} sketch watches are open, the "
                                         f"server's limit is {self.limits.max_watches}")
            self._watches += 1
        try:
            yield
        finally:
            with self._lock:
                self._watches -= 1

    @property
    def open_watches(self) -> int:
        with self._lock:
            return self._watches


class StalledStreams:
    """Cancels a stream whose message has waited longer than ``limit_s`` for its reader.

    A streaming call sends one message at a time: gRPC hands the next one to the
    transport only once the client has taken enough of the last one (HTTP/2 flow
    control), so what a stream buffers is bounded by one message plus the transport's
    window. A client that stops reading would still hold a thread and a watch slot for
    as long as its deadline allows; such a stream is cancelled instead (the client sees
    CANCELLED and may resume with ``after_seq``). One daemon thread checks the streams
    with a message in flight every ``tick_s``; it starts with the first message.

    Invariant: a stream is listed exactly while one of its messages is being sent.
    """

    def __init__(self, limit_s: float, tick_s: float = 0.5):
        self.limit_s = limit_s
        self.tick_s = min(tick_s, limit_s / 2)
        self.dropped = 0
        self._sending: dict[int, tuple[float, Callable[[], None]]] = {}
        self._ids = itertools.count()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    @contextmanager
    def sending(self, cancel: Callable[[], None]) -> Iterator[None]:
        """Around the ``yield`` of one message: ``cancel`` ends the stream if the message
        is still unsent after ``limit_s``."""
        key = next(self._ids)
        with self._lock:
            self._sending[key] = (time.monotonic(), cancel)
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="imp-stalled-streams",
                                                daemon=True)
                self._thread.start()
        try:
            yield
        finally:
            with self._lock:
                self._sending.pop(key, None)

    def sweep(self, now: float | None = None) -> int:
        """Cancels the overdue streams; returns how many."""
        now = time.monotonic() if now is None else now
        with self._lock:
            overdue = [(k, c) for k, (t, c) in self._sending.items() if now - t > self.limit_s]
            for k, _ in overdue:
                del self._sending[k]
            self.dropped += len(overdue)
        for _, cancel in overdue:
            log.warning("a watch stream took no message for %.0f s: cancelled", self.limit_s)
            try:
                cancel()
            except Exception:  # noqa: BLE001 - the call may have ended meanwhile
                log.debug("cancel of a stalled stream failed", exc_info=True)
        return len(overdue)

    def _run(self) -> None:
        while True:
            time.sleep(self.tick_s)
            self.sweep()
