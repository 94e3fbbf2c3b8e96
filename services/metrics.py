"""Per-method call counters of the front end (for ``Stats`` and operators).

Invariant: for every method, the counts by status add up to the calls that finished.
"""

from __future__ import annotations

import threading
import time
from collections import defaultdict
from typing import Any


class CallMetrics:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._started = time.time()
        self._codes: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
        self._seconds: dict[str, float] = defaultdict(float)

    def record(self, method: str, code: str, seconds: float) -> None:
        name = method.rsplit("/", 1)[-1]
        with self._lock:
            self._codes[name][code] += 1
            self._seconds[name] += seconds

    def snapshot(self) -> dict[str, Any]:
        with self._lock:
            methods = {}
            for name, codes in sorted(self._codes.items()):
                calls = sum(codes.values())
                methods[name] = {"calls": calls, "by_status": dict(codes),
                                 "mean_ms": round(1000 * self._seconds[name] / calls, 3)}
        return {"uptime_s": round(time.time() - self._started, 3), "methods": methods}
