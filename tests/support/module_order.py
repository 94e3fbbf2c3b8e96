"""The order in which ``make test`` hands test modules to its two workers: the longest
first (longest-processing-time-first scheduling), so that no long module starts last
while the other worker sits idle.

pytest-xdist's ``--dist loadfile`` gives a worker a whole module at a time in collection
order; ``order`` sorts the collected items by their module's measured seconds
(``MODULE_SECONDS``, the file ``module_seconds.json`` beside this one), the longest
first, keeping each module's own order of tests. A module not in the file counts as
``UNKNOWN_SECONDS`` (new modules are usually small). ``record`` adds up the seconds of a
run's tests per module and writes the file anew (``pytest --record-module-seconds``).

Invariant: the order is a function of the collected items and the file alone, so every
worker collects the same order (xdist requires it).
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

MODULE_SECONDS = Path(__file__).with_name("module_seconds.json")
UNKNOWN_SECONDS = 5.0


def module_of(nodeid: str) -> str:
    return nodeid.split("::", 1)[0]


def load(path: Path = MODULE_SECONDS) -> dict[str, float]:
    try:
        return {str(k): float(v) for k, v in json.loads(path.read_text()).items()}
    except (OSError, ValueError, AttributeError):
        return {}


def order(items: list[Any], seconds: dict[str, float]) -> list[Any]:
    """``items`` grouped by module, the modules longest first (then by path), each
    module's items in their own order."""
    first_at: dict[str, int] = {}
    for i, item in enumerate(items):
        first_at.setdefault(module_of(item.nodeid), i)

    def key(pair: tuple[int, Any]) -> tuple:
        i, item = pair
        module = module_of(item.nodeid)
        return (-seconds.get(module, UNKNOWN_SECONDS), module, i)

    return [item for _, item in sorted(enumerate(items), key=key)]


class Recorder:
    """Adds up each module's test seconds (setup, call, teardown) over a run."""

    def __init__(self, path: Path):
        self.path = path
        self.seconds: Counter = Counter()

    def pytest_runtest_logreport(self, report: Any) -> None:
        self.seconds[module_of(report.nodeid)] += report.duration

    def pytest_sessionfinish(self, session: Any) -> None:
        if self.seconds:
            doc = {m: round(s, 1) for m, s in sorted(self.seconds.items())}
            self.path.write_text(json.dumps(doc, indent=1) + "\n")
