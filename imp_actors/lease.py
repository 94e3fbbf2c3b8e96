"""One coordinator per store: a lease with a heartbeat, fenced by a generation number.

The lease is the blob ``lease.json`` beside the registry: the owner (host, process, a
random id), a generation number and the time of its last heartbeat. A coordinator takes
the lease when it starts; a thread of its own (``start_heartbeat``) renews it every third
of ``ttl``, whatever the rest of the process is doing (a Ray call that hangs, a long
capture), so a heartbeat stops only with the process or the coordinator. Another
coordinator may take the lease only when the heartbeat is older than ``ttl`` (its owner
is dead or cut off), or at once when its owner is provably dead: a process of this host
that no longer exists (a ``kill -9`` and a restart on the same machine), or a coordinator
of this very process that was abandoned (``abandon``: what a crash leaves). Taking it
increments the generation.

Every registry write is fenced (``check``): it re-reads the lease and refuses when the
lease is no longer this coordinator's generation, so a coordinator that was presumed dead
cannot overwrite what its successor wrote. Invariants: ``generation`` only grows; a
coordinator writes the registry only while the lease names it.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import threading
import time
import uuid
from dataclasses import asdict, dataclass

from imp_actors.storage import BlobStore
from imp_core.errors import StoreBusyError

log = logging.getLogger(__name__)

LEASE = "lease.json"

# owners ("host:pid:id") of this process's abandoned leases: dead as surely as a process
# that exited, so a successor in this process takes their store over at once
_ABANDONED: set[str] = set()


@dataclass(frozen=True)
class LeaseRecord:
    owner: str  # "host:pid:id"
    generation: int
    heartbeat_at: float

    @property
    def host(self) -> str:
        return self.owner.split(":", 1)[0]

    @property
    def pid(self) -> int | None:
        parts = self.owner.split(":")
        return int(parts[1]) if len(parts) > 2 and parts[1].isdigit() else None


def _process_gone(pid: int | None) -> bool:
    if pid is None:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:  # exists, owned by someone else
        return False
    return False


class StoreLease:
    def __init__(self, blobs: BlobStore, ttl: float):
        self.blobs = blobs
        self.ttl = ttl
        self.owner = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        self.generation = 0  # 0: not held
        self.took_over: str | None = None  # the owner whose lease ``acquire`` took over
        self._lock = threading.Lock()
        self._beat_stop = threading.Event()
        self._beat: threading.Thread | None = None

    # -- reading ------------------------------------------------------------------------
    def read(self) -> LeaseRecord | None:
        if not self.blobs.exists(LEASE):
            return None
        try:
            return LeaseRecord(**json.loads(self.blobs.read(LEASE)))
        except (ValueError, TypeError):  # a damaged lease protects nothing: take it over
            log.warning("the store lease %s is damaged; taking it over",
                        self.blobs.path(LEASE))
            return None

    def _write(self, generation: int) -> None:
        record = LeaseRecord(self.owner, generation, time.time())
        self.blobs.write_atomic(LEASE, json.dumps(asdict(record)).encode())

    # -- taking, renewing, giving back -----------------------------------------------------
    def ensure_free(self) -> None:
        """``StoreBusyError`` when ``acquire`` would refuse now (nothing is written)."""
        held = self.read()
        if held is not None and held.owner != self.owner:
            self._refuse_if_alive(held)

    def _refuse_if_alive(self, held: LeaseRecord) -> bool:
        """Raises while ``held`` is a live owner's; else whether it died on this host."""
        age = time.time() - held.heartbeat_at
        dead_here = held.owner in _ABANDONED or (
            held.host == socket.gethostname() and _process_gone(held.pid))
        if age < self.ttl and not dead_here:
            raise StoreBusyError(
                f"the store {self.blobs.uri} is in use by {held.owner} (its "
                f"heartbeat {age:.1f} s ago): one coordinator per store; stop it "
                f"first, start this one as a standby (--standby on), or start again "
                f"{self.ttl - age:.0f} s after it died (IMP_LEASE_SECONDS)")
        return dead_here

    def acquire(self) -> int:
        """Take the lease, or ``StoreBusyError`` naming its live owner."""
        with self._lock:
            held = self.read()
            if held is not None and held.owner != self.owner:
                dead_here = self._refuse_if_alive(held)
                age = time.time() - held.heartbeat_at
                log.warning("taking over the store lease of %s (heartbeat %.1f s ago%s)",
                            held.owner, age, ", owner gone" if dead_here else "")
                self.took_over = held.owner
            generation = (held.generation if held is not None else 0) + 1
            self._write(generation)
            # two starting at once: the last writer wins, the other sees it and stops
            confirmed = self.read()
            if confirmed is None or confirmed.owner != self.owner:
                raise StoreBusyError(f"the store {self.blobs.uri} was taken by "
                                     f"{confirmed.owner if confirmed else 'another'} "
                                     "while this coordinator started")
            self.generation = generation
            return generation

    def start_heartbeat(self) -> None:
        """Renew the held lease every ``ttl / 3`` on a daemon thread of its own until
        ``release`` or ``abandon``."""
        if self._beat is not None:
            return
        self._beat_stop.clear()
        self._beat = threading.Thread(target=self._heartbeat, name="imp-lease",
                                      daemon=True)
        self._beat.start()

    def _heartbeat(self) -> None:
        while not self._beat_stop.wait(self.ttl / 3):
            try:
                self.renew()
            except OSError as exc:  # the store unreachable for now: the next beat retries
                log.error("cannot renew the store lease %s: %s", self.blobs.path(LEASE), exc)
            if self.generation == 0:
                return

    def stop_heartbeat(self) -> None:
        """Stop renewing (the lease stays held until its heartbeat is ``ttl`` old)."""
        self._beat_stop.set()
        beat, self._beat = self._beat, None
        if beat is not None and beat is not threading.current_thread():
            beat.join(timeout=5)

    def renew(self) -> None:
        """One heartbeat (the heartbeat thread's, every ``ttl / 3``); a lease taken over
        meanwhile is lost for good."""
        with self._lock:
            if self.generation == 0:
                return
            if not self._still_mine():
                log.error("the store lease was taken over by another coordinator: this "
                          "one stops writing the registry")
                self.generation = 0
                return
            self._write(self.generation)

    def check(self) -> None:
        """Fence: ``StoreBusyError`` unless the lease is still this coordinator's."""
        with self._lock:
            if self.generation == 0 or not self._still_mine():
                self.generation = 0
                raise StoreBusyError(f"this coordinator no longer owns the store "
                                     f"{self.blobs.uri} (another took its lease over)")

    def _still_mine(self) -> bool:
        held = self.read()
        return held is not None and held.owner == self.owner and \
            held.generation == self.generation

    def abandon(self) -> None:
        """Stop renewing without giving the lease back, as a crash would, and mark this
        owner dead in this process (a successor here takes over at once; one elsewhere
        after ``ttl``)."""
        self.stop_heartbeat()
        _ABANDONED.add(self.owner)
        self.generation = 0

    def release(self) -> None:
        """Give the lease back (a clean shutdown): the next coordinator need not wait."""
        self.stop_heartbeat()
        with self._lock:
            if self.generation and self._still_mine():
                self.blobs.delete(LEASE)
            self.generation = 0
