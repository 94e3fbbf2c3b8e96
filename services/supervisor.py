"""``imp serve``'s supervisor: the server runs as a child process that is started again
when it dies unexpectedly.

A server whose local Ray is lost cannot get it back in the same process (Ray's driver
state is per process, and a driver whose raylet is killed is ended by Ray itself), so
the server exits with ``RESTART_EXIT`` (or dies), and the supervisor starts a new one:
it takes the store's lease over at once (its owner's process is gone), starts a new
local Ray, and recovers every query from the registry, checkpoints and the tables'
change feed. On Kubernetes a pod's restart policy does the same for the whole pod.

Rules: an exit with 0 (a clean stop) or ``REFUSED_EXIT`` (bad settings, a store held by
another server: starting again would be refused again) ends the supervisor with that
code; any other end (``RESTART_EXIT``, a crash, ``kill -9``, the OOM killer) restarts
the server after a back-off of 1, 2, 4 .. 30 s, at most ``MAX_RESTARTS`` times within
``WINDOW_S`` (then it gives up with the child's code). SIGINT and SIGTERM are passed to
the child and end the supervisor once the child has ended; the child ends with its
supervisor (``bind_to_parent``). Each child gets ``IMP_SERVER_RESTARTS`` (how many
restarts came before it) for its metrics.
"""

from __future__ import annotations

import collections
import ctypes
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from typing import Sequence

log = logging.getLogger("imp.supervisor")

RESTART_EXIT = 75  # EX_TEMPFAIL: the server lost its runtime; start it again
REFUSED_EXIT = 2  # the CLI's "refused" code: starting again would be refused again
MAX_RESTARTS = 5
WINDOW_S = 300.0
SUPERVISED_ENV = "IMP_SUPERVISOR_PID"
RESTARTS_ENV = "IMP_SERVER_RESTARTS"
_PR_SET_PDEATHSIG = 1


def supervise(argv: Sequence[str], stop_after_s: float,
              command: Sequence[str] | None = None, journal_dir: str | None = None) -> int:
    """Run ``python -m services.cli *argv`` (an ``imp serve`` with supervision off; or
    ``command``) until it ends cleanly; ``stop_after_s``: how long a stopping child may
    take before it is killed; ``journal_dir``: where the server records its calls and
    faults (``imp_actors.incidents``), read to say what a dead child was doing."""
    command = list(command or [sys.executable, "-m", "services.cli", *argv])
    stopping = threading.Event()
    child: subprocess.Popen | None = None
    failures: collections.deque[float] = collections.deque()
    restarts = 0

    def on_signal(signum: int, _frame: object) -> None:
        if stopping.is_set() and child is not None:  # a second signal: now
            child.kill()
            return
        stopping.set()
        if child is not None and child.poll() is None:
            child.send_signal(signum)

    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, on_signal)
    while True:
        env = dict(os.environ, IMP_SUPERVISE="off", **{SUPERVISED_ENV: str(os.getpid()),
                                                        RESTARTS_ENV: str(restarts)})
        # a session of its own: a terminal's Ctrl-C (or a group kill) reaches the
        # supervisor only, which passes it on once (twice would mean "exit at once")
        child = subprocess.Popen(command, env=env, start_new_session=True)
        code = _wait(child, stopping, stop_after_s)
        if stopping.is_set():  # ended by the signal passed on: a stop, unless killed
            return code if code >= 0 else (1 if code == -signal.SIGKILL else 0)
        if code in (0, REFUSED_EXIT):
            return code
        now = time.monotonic()
        failures.append(now)
        while failures and now - failures[0] > WINDOW_S:
            failures.popleft()
        what = f"signal {-code}" if code < 0 else f"code {code}"
        if journal_dir:
            what += _doing(journal_dir, child.pid, full=len(failures) > MAX_RESTARTS)
        if len(failures) > MAX_RESTARTS:
            log.error("the server ended (%s) %d times within %.0f s: giving up", what,
                      len(failures), WINDOW_S)
            return code if code > 0 else 1
        delay = min(2.0 ** (len(failures) - 1), 30.0)
        log.error("the server ended unexpectedly (%s); starting it again in %.0f s "
                  "(restart %d)", what, delay, restarts + 1)
        if stopping.wait(delay):
            return 0
        restarts += 1


def _doing(journal_dir: str, pid: int, full: bool) -> str:
    """What the dead server ``pid`` was doing, from its record (``full``: with its
    stacks, when no successor will log them); "" when it left none."""
    from pathlib import Path

    from imp_core.process.inflight import read_death, this_host

    death = read_death(Path(journal_dir), this_host(), pid)
    blamed = death.culprits or death.inflight
    if not blamed:
        return ""
    calls = "; ".join(" > ".join(c.get("method", "?") + (f"(query={c['query']})"
                                                          if c.get("query") else "")
                                 for c in slot["calls"]) for slot in blamed)
    named = "while serving" if death.culprits else "with calls in flight"
    return f" {named}: {calls}" + (f"\n{death.stacks}" if full and death.stacks else "")


def _wait(child: subprocess.Popen, stopping: threading.Event, stop_after_s: float) -> int:
    """The child's exit code (negative: the signal that ended it); kills it when it
    overruns ``stop_after_s`` after a stop was asked."""
    asked: float | None = None
    while True:
        try:
            return child.wait(timeout=0.2)
        except subprocess.TimeoutExpired:
            pass
        if stopping.is_set():
            asked = asked or time.monotonic()
            if time.monotonic() - asked > stop_after_s:
                log.error("the server did not stop within %.0f s: killing it", stop_after_s)
                child.kill()


def bind_to_parent() -> None:
    """In a supervised server: end (SIGTERM, an orderly stop) when the supervisor dies,
    so a ``kill -9`` of the supervisor leaves no server behind. Linux only."""
    parent = os.environ.get(SUPERVISED_ENV)
    if not parent or not sys.platform.startswith("linux"):
        return
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
    except (OSError, AttributeError):
        return
    if os.getppid() != int(parent):  # it died before the request took effect
        os.kill(os.getpid(), signal.SIGTERM)


def restarts() -> int:
    """How many times the supervisor restarted the server before this one."""
    raw = os.environ.get(RESTARTS_ENV, "0")
    return int(raw) if raw.isdigit() else 0
