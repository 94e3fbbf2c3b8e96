"""A query's recent sketch versions, and waiting for the next one.

Invariants: versions are appended in ``seq`` order with no gaps; at most ``keep`` are
held (the oldest are dropped); a ``SketchVersion`` is immutable, so readers share them
without copying and never see one that mixes two sets of table versions.
"""

from __future__ import annotations

import threading
import time
from collections import deque

from imp_actors.types import SketchVersion
from imp_core.errors import VersionError


class SketchHistory:
    def __init__(self, query: str, keep: int):
        self.query = query
        self._versions: deque[SketchVersion] = deque(maxlen=max(keep, 1))
        self._cond = threading.Condition()
        self.closed = False

    @property
    def latest(self) -> SketchVersion | None:
        versions = self._versions
        return versions[-1] if versions else None

    def append(self, version: SketchVersion) -> None:
        with self._cond:
            last = self.latest
            if last is not None and version.seq != last.seq + 1:
                raise ValueError(f"sketch version {version.seq} does not follow {last.seq}")
            self._versions.append(version)
            self._cond.notify_all()

    def get(self, seq: int) -> SketchVersion:
        for v in list(self._versions):
            if v.seq == seq:
                return v
        kept = [v.seq for v in self._versions]
        where = f"{kept[0]}..{kept[-1]}" if kept else "none"
        raise VersionError(f"sketch version {seq} of {self.query} is not kept (kept: {where})")

    def next_after(self, seq: int, timeout: float | None = None) -> SketchVersion | None:
        """The version following ``seq`` (or the oldest kept newer one); waits for it up
        to ``timeout`` seconds (None: forever); None on timeout or when closed."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            while True:
                newer = [v for v in self._versions if v.seq > seq]
                if newer:
                    return newer[0]
                if self.closed:
                    return None
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    return None
                self._cond.wait(left)

    def close(self) -> None:
        with self._cond:
            self.closed = True
            self._cond.notify_all()

    def seqs(self) -> list[int]:
        return [v.seq for v in list(self._versions)]
