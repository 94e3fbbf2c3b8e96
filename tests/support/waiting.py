"""Waiting in tests: for a condition, with a deadline, never for a fixed time.

A test that sleeps a fixed time and then checks is decided by the machine's load: on a
busy machine the margin runs out and the test fails for nothing, on an idle one it waits
for nothing. ``wait_until`` asks the condition again and again until it holds, and fails
at a deadline far above the expected time, saying what did not happen. It is the one
function of the tests that calls ``time.sleep`` (``tests/unit/test_test_hygiene.py``
fails on any other).
"""

from __future__ import annotations

import time
from typing import Callable, TypeVar

T = TypeVar("T")

DEFAULT_TIMEOUT_S = 30.0


def wait_until(condition: Callable[[], T], timeout: float = DEFAULT_TIMEOUT_S,
               interval: float = 0.02, what: str | Callable[[], object] | None = None) -> T:
    """``condition()``'s first true value, asked every ``interval`` seconds; an
    ``AssertionError`` naming ``what`` (or the condition; a callable is asked then, for
    the state that did not change) when it has not held within ``timeout`` seconds.

    >>> wait_until(lambda: 3)
    3
    >>> wait_until(lambda: 0, timeout=0.05, what="zero to turn true")
    Traceback (most recent call last):
    AssertionError: timed out after 0.05 s waiting for zero to turn true
    """
    deadline = time.monotonic() + timeout
    while True:
        got = condition()
        if got:
            return got
        if time.monotonic() >= deadline:
            name = what() if callable(what) else \
                what or getattr(condition, "__name__", repr(condition))
            raise AssertionError(f"timed out after {timeout} s waiting for {name}")
        time.sleep(interval)
