"""Watching the actor runtime: is the Ray the coordinator's actors live on still there?

A local Ray's raylet or GCS may exit under a running service (killed, out of memory, an
agent that failed to start), and a remote cluster may become unreachable. Without a
watch, every call that touches an actor then hangs until its deadline and the health
service goes on saying SERVING. ``RuntimeWatch`` probes the backend every
``interval`` seconds on a thread of its own (``Backend.problem``, bounded in time) and
moves between two explicit states:

- ``UP``: the last probe found nothing wrong;
- ``DOWN``: it found a problem, named by ``reason``. The backend is marked lost, so
  every actor call in flight or new fails at once with ``RuntimeUnavailableError``
  (gRPC UNAVAILABLE, the reason in its message) instead of hanging; listeners (the
  server's health service, ``imp serve``'s restart of a lost local Ray) hear of it.

Invariants: ``state`` is ``DOWN`` exactly while ``reason`` is set; the backend is
marked lost exactly while the state is ``DOWN``; every change is logged, counted
(``runtime_losses``, ``runtime_recoveries``) and told to every listener once, in order.
"""

from __future__ import annotations

import enum
import logging
import threading
import time
from collections import Counter
from typing import Callable

from imp_actors.handles import Backend, unavailable
from imp_core.errors import RuntimeUnavailableError

log = logging.getLogger(__name__)

CHECK_SECONDS = 2.0  # how often the runtime is probed
PROBE_TIMEOUT_S = 5.0  # a probe that takes longer counts as a runtime that does not answer


class RuntimeState(enum.Enum):
    UP = "up"
    DOWN = "down"


Listener = Callable[[RuntimeState, str], None]


class RuntimeWatch:
    """See the module docstring."""

    def __init__(self, backend: Backend, counters: Counter, interval: float = CHECK_SECONDS):
        self.backend = backend
        self.counters = counters
        self.interval = interval
        self.state = RuntimeState.UP
        self.reason = ""
        self.since = time.time()
        self._listeners: list[Listener] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def add_listener(self, listener: Listener) -> None:
        """Call ``listener(state, reason)`` on every change (from the watch's thread)."""
        self._listeners.append(listener)

    def start(self) -> None:
        if self._thread is not None:
            return
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="imp-runtime-watch",
                                        daemon=True)
        self._thread.start()

    def stop(self, wait: bool = True) -> None:
        self._stop.set()
        thread, self._thread = self._thread, None
        if wait and thread is not None and thread is not threading.current_thread():
            thread.join(timeout=PROBE_TIMEOUT_S + 1)

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                self.probe()
            except Exception as exc:  # a watch that dies would leave the state stale
                log.error("runtime probe failed: %s", exc)

    def probe(self) -> RuntimeState:
        """Probe the backend once and record what it says."""
        problem = self.backend.problem(PROBE_TIMEOUT_S)
        with self._lock:
            if (problem is None) == (self.state is RuntimeState.UP):
                return self.state
            was = self.since
            self.state = RuntimeState.UP if problem is None else RuntimeState.DOWN
            self.reason, self.since = problem or "", time.time()
            if problem is None:
                self.backend.mark_lost(None)
                self.counters["runtime_recoveries"] += 1
                log.warning("the %s runtime is back after %.1f s", self.backend.kind,
                            self.since - was)
            else:
                self.backend.mark_lost(problem)
                self.counters["runtime_losses"] += 1
                log.error("the %s runtime is lost: %s", self.backend.kind, problem)
            state, reason = self.state, self.reason
        for listener in list(self._listeners):
            try:
                listener(state, reason)
            except Exception as exc:  # one listener's failure must not silence the rest
                log.error("runtime listener failed: %s", exc)
        return state

    def check(self) -> None:
        """``RuntimeUnavailableError`` (re-exported here) while the runtime is down."""
        if self.state is RuntimeState.DOWN:
            raise RuntimeUnavailableError(unavailable(self.backend.kind, self.reason))

    def status(self) -> dict[str, object]:
        return {"state": self.state.value, "reason": self.reason, "since": self.since}
