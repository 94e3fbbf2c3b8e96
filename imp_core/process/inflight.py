"""What this process is doing, kept where a crash cannot erase it.

A process that dies in native code (a segmentation fault in a library) runs no Python
afterwards: no ``except``, no log line. So the work each thread is doing is written,
before it starts, into that thread's slot of a file mapped into memory (``InflightSlots``):
the kernel keeps a shared mapping's pages when the process dies, so whoever looks at the
file afterwards (the supervisor, the next server) reads what was in flight at the moment
of death. ``faulthandler`` writes the Python stacks of every thread into a file of its own
(``fault_path``), naming the thread that faulted.

File names carry the host and the process id, ``calls-<host>-<pid>.slots`` and
``fault-<host>-<pid>.log``, so a reader tells the files of a dead process from those of a
live one. A slot is one NUL-terminated JSON object ``{"thread": id, "calls": [...]}``:
the calls the thread is inside, outermost first (a call may run a maintenance step that
is recorded too). Writing a slot costs a few microseconds and no system call.

Invariants: a slot is written only by its own thread; an empty slot starts with NUL; a
slot's JSON never exceeds ``slot_bytes - 1`` bytes (long values are cut, and the
outermost calls are left out before the innermost).
"""

from __future__ import annotations

import faulthandler
import json
import mmap
import os
import re
import socket
import threading
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

SLOTS = 256
SLOT_BYTES = 1024
_VALUE_CHARS = 160
_CURRENT = re.compile(r"^Current thread (0x[0-9a-fA-F]+)", re.MULTILINE)
_FATAL = re.compile(r"^Fatal Python error: (.+)$", re.MULTILINE)


def _host() -> str:
    return re.sub(r"[^A-Za-z0-9.-]", "_", socket.gethostname()) or "host"


def slots_path(folder: Path, pid: int | None = None, host: str | None = None) -> Path:
    return folder / f"calls-{host or _host()}-{pid or os.getpid()}.slots"


def fault_path(folder: Path, pid: int | None = None, host: str | None = None) -> Path:
    return folder / f"fault-{host or _host()}-{pid or os.getpid()}.log"


class InflightSlots:
    """This process's slots (module docstring). Thread-safe."""

    def __init__(self, folder: Path, slots: int = SLOTS, slot_bytes: int = SLOT_BYTES):
        folder.mkdir(parents=True, exist_ok=True)
        self.path = slots_path(folder)
        self.slots, self.slot_bytes = slots, slot_bytes
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            os.ftruncate(fd, slots * slot_bytes)
            self._map = mmap.mmap(fd, slots * slot_bytes)
        finally:
            os.close(fd)
        self._lock = threading.Lock()
        self._next = 0
        self._local = threading.local()

    @contextmanager
    def entering(self, **fields: Any) -> Iterator[None]:
        """Record ``fields`` (what this thread now does) for the time of the block."""
        slot = self._slot()
        if slot is None:  # more threads than slots: this one goes unrecorded
            yield
            return
        stack: list[dict[str, Any]] = self._local.stack
        stack.append({k: _short(v) for k, v in fields.items() if v not in (None, "")})
        self._write(slot, stack)
        try:
            yield
        finally:
            stack.pop()
            self._write(slot, stack)

    def _slot(self) -> int | None:
        slot = getattr(self._local, "slot", None)
        if slot is None:
            with self._lock:
                if self._next >= self.slots:
                    return None
                slot, self._next = self._next, self._next + 1
            self._local.slot, self._local.stack = slot, []
        return slot

    def _write(self, slot: int, stack: list[dict[str, Any]]) -> None:
        at = slot * self.slot_bytes
        if not stack:
            self._map[at] = 0
            return
        calls = list(stack)
        while True:
            data = json.dumps({"thread": threading.get_ident(), "calls": calls},
                              separators=(",", ":")).encode()
            if len(data) < self.slot_bytes or len(calls) == 1:
                break
            calls = calls[1:]  # the innermost call matters most
        data = data[:self.slot_bytes - 1]
        self._map[at:at + len(data)] = data
        self._map[at + len(data)] = 0

    def close(self) -> None:
        self._map.close()
        self.path.unlink(missing_ok=True)


def _short(value: Any) -> Any:
    if isinstance(value, str) and len(value) > _VALUE_CHARS:
        return value[:_VALUE_CHARS] + "..."
    return value


def read_slots(path: Path) -> list[dict[str, Any]]:
    """The slots of a slots file that hold a call: ``{"thread", "calls"}`` each."""
    try:
        data = path.read_bytes()
    except OSError:
        return []
    out = []
    for at in range(0, len(data), SLOT_BYTES):
        raw = data[at:at + SLOT_BYTES].split(b"\0", 1)[0]
        if not raw:
            continue
        try:
            doc = json.loads(raw)
        except ValueError:  # cut while being written: what it held is unknown
            continue
        if isinstance(doc, dict) and doc.get("calls"):
            out.append(doc)
    return out


@dataclass(frozen=True)
class Death:
    """What a dead process's files say: the calls in flight when it died, the fatal
    error faulthandler printed, the thread that faulted and the stacks it wrote."""

    host: str
    pid: int
    inflight: list[dict[str, Any]] = field(default_factory=list)
    fatal: str | None = None
    faulting_thread: int | None = None
    stacks: str = ""

    @property
    def culprits(self) -> list[dict[str, Any]]:
        """The slots that most likely caused the death: the faulting thread's, else the
        only one in flight, else none (every call in flight is only a suspect)."""
        if self.faulting_thread is not None:
            hit = [s for s in self.inflight if s.get("thread") == self.faulting_thread]
            if hit:
                return hit
        return list(self.inflight) if len(self.inflight) == 1 and self.fatal else []


def read_death(folder: Path, host: str, pid: int) -> Death:
    """The record the process ``pid`` of ``host`` left in ``folder``."""
    inflight = read_slots(slots_path(folder, pid, host))
    try:
        stacks = fault_path(folder, pid, host).read_text(errors="replace")
    except OSError:
        stacks = ""
    current = _CURRENT.search(stacks)
    fatal = _FATAL.search(stacks)
    return Death(host, pid, inflight, fatal.group(1).strip() if fatal else None,
                 int(current.group(1), 16) if current else None, stacks.strip())


def dead_processes(folder: Path, alive: Any) -> list[tuple[str, int]]:
    """(host, pid) of every process with files in ``folder`` for which ``alive(host,
    pid)`` is False."""
    found: set[tuple[str, int]] = set()
    for path in folder.glob("calls-*.slots") if folder.is_dir() else ():
        match = re.match(r"calls-(.+)-(\d+)\.slots$", path.name)
        if match:
            found.add((match.group(1), int(match.group(2))))
    for path in folder.glob("fault-*.log") if folder.is_dir() else ():
        match = re.match(r"fault-(.+)-(\d+)\.log$", path.name)
        if match:
            found.add((match.group(1), int(match.group(2))))
    return sorted(p for p in found if not alive(*p))


def forget(folder: Path, host: str, pid: int) -> None:
    """Remove the files of a dead process once they were read."""
    slots_path(folder, pid, host).unlink(missing_ok=True)
    fault_path(folder, pid, host).unlink(missing_ok=True)


def this_host() -> str:
    return _host()


def enable_fault_record(folder: Path) -> Any:
    """Point ``faulthandler`` at this process's fault file (all threads' Python stacks on
    SIGSEGV, SIGFPE, SIGABRT, SIGBUS, SIGILL); returns the open file, which must stay
    open for the life of the process. An empty file is removed at a clean exit."""
    folder.mkdir(parents=True, exist_ok=True)
    out = fault_path(folder).open("w")
    faulthandler.enable(file=out, all_threads=True)
    return out
