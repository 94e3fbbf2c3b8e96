"""Failpoints: named places where this process can be made to fail on purpose, to test
(or rehearse) what a crash at exactly that point leaves behind.

``IMP_FAILPOINTS`` lists them as ``name=action[@n][~text]`` separated by commas, read
once per process: ``action`` is ``kill`` (SIGKILL of this process: no clean-up, as a
crash), ``segv`` (a segmentation fault in native code, as a library's bug would cause),
``exit`` (``os._exit(70)``) or ``raise`` (``FailpointError``); ``@n`` fires on the n-th
time the point is reached (default: the first) and only then; ``~text`` counts only the
passes whose ``detail`` contains ``text``. For example
``IMP_FAILPOINTS=table_writes.after_commit=kill@3`` kills the server right after its
third commit, before the update is acknowledged.

Invariant: with ``IMP_FAILPOINTS`` unset (production), ``failpoint`` does nothing but one
check of an empty dict.
"""

from __future__ import annotations

import logging
import os
import signal
import threading

log = logging.getLogger(__name__)

ENV = "IMP_FAILPOINTS"
ACTIONS = ("kill", "segv", "exit", "raise")


class FailpointError(RuntimeError):
    """Raised by a failpoint whose action is ``raise``."""


def parse(text: str) -> dict[str, tuple[str, int, str]]:
    """``IMP_FAILPOINTS`` as {name: (action, n, text)}; ``ValueError`` naming a bad
    entry."""
    out: dict[str, tuple[str, int, str]] = {}
    for entry in filter(None, (e.strip() for e in text.split(","))):
        name, sep, spec = entry.partition("=")
        spec, _, when = spec.partition("~")
        action, _, nth = spec.partition("@")
        if not sep or not name.strip() or action not in ACTIONS or \
                (nth and not nth.isdigit()) or nth == "0":
            raise ValueError(f"{ENV}: {entry!r} is not name=action[@n][~text] with action "
                             f"one of {', '.join(ACTIONS)} and n >= 1")
        out[name.strip()] = (action, int(nth or 1), when)
    return out


_POINTS = parse(os.environ.get(ENV, ""))
_HITS: dict[str, int] = {}
_LOCK = threading.Lock()


def failpoint(name: str, detail: str = "") -> None:
    """Fail here when ``IMP_FAILPOINTS`` names ``name`` and this is its n-th hit (of
    those whose ``detail`` holds the entry's text)."""
    if not _POINTS or name not in _POINTS:
        return
    action, nth, when = _POINTS[name]
    if when and when not in detail:
        return
    with _LOCK:
        _HITS[name] = hits = _HITS.get(name, 0) + 1
    if hits != nth:
        return
    log.warning("failpoint %s: %s (hit %d)", name, action, hits)
    if action == "kill":
        for handler in logging.getLogger().handlers:
            handler.flush()
        os.kill(os.getpid(), signal.SIGKILL)
    if action == "segv":
        import ctypes

        ctypes.string_at(0)  # reads address 0: SIGSEGV in native code
    if action == "exit":
        os._exit(70)
    raise FailpointError(f"failpoint {name}")
