"""Requests that ended a server process, and the quarantine that keeps them from ending
the next one.

A server records what each of its threads is doing in a file a crash cannot erase, and
``faulthandler`` writes its Python stacks when it dies in native code
(``imp_core.process.inflight``). The next server to take the store's lease reads the
files of its dead predecessors on this host (or of the owner whose lease it took over),
logs what was in flight with the stacks, and quarantines the request that caused the
death, so that neither a client's automatic retry (same idempotency key) nor the same
request sent again (same SQL), nor the recovery of a query whose maintenance crashed,
ends the new server too. A quarantined request is refused with ``QuarantinedRequestError``
(FAILED_PRECONDITION) naming the incident; a quarantined query is not recovered at start
(it can still be dropped).

Which request caused it: the call of the thread that faulted (faulthandler names it);
failing that, the only call in flight. When several calls were in flight and none is
named, each is a suspect: a suspect in flight at a second death is quarantined.

The quarantine is the blob ``quarantine.json`` beside the registry, written under the
store lease; an entry expires after ``QUARANTINE_SECONDS`` (``IMP_QUARANTINE_SECONDS``).

Invariants: a request is refused only by an entry that names it (its key, its SQL's
digest, or the query it maintains); the files of a live process are never read as a
dead one's (host and pid in their names); files are removed once read and recorded.
"""

from __future__ import annotations

import json
import logging
import os
import time
from contextlib import nullcontext
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Callable, ContextManager

from imp_actors.storage import BlobStore
from imp_core.errors import QuarantinedRequestError
from imp_core.process.inflight import (
    Death,
    InflightSlots,
    dead_processes,
    enable_fault_record,
    forget,
    read_death,
    this_host,
)
from imp_core.storage.calls import request_digest

log = logging.getLogger(__name__)

QUARANTINE = "quarantine.json"
QUARANTINE_SECONDS = float(os.environ.get("IMP_QUARANTINE_SECONDS", 7 * 24 * 3600))
# the work whose query is quarantined when it ends the process (a maintenance step of a
# query, or a call naming it); a registration's query name is not: the name is free
QUERY_SCOPED = frozenset({"maintain", "recover", "GetSketch", "GetSketches", "Maintain",
                          "Restore", "Evict", "Checkpoint", "ScaleQuery", "ExplainSketch"})


def sql_digest(sql: str) -> str:
    return request_digest("sql", sql.strip())


@dataclass
class Entry:
    """One quarantined (or suspected) request: ``kind`` "key", "sql" or "query" and its
    ``value``; ``strikes``: deaths it was in flight at; ``active``: refused now."""

    kind: str
    value: str
    method: str
    reason: str
    at: float
    strikes: int = 1
    active: bool = False

    @property
    def ident(self) -> str:
        return f"{self.kind}:{self.value}"


class Incidents:
    """See the module docstring. ``fence`` is called before every quarantine write (it
    raises when this process no longer holds the store's lease)."""

    def __init__(self, blobs: BlobStore, journal_dir: Path,
                 fence: Callable[[], None] | None = None):
        self.blobs = blobs
        self.journal_dir = journal_dir
        self.fence = fence
        self.journal: InflightSlots | None = None
        self._fault_file: Any = None
        self._entries: dict[str, Entry] = {}
        self.deaths: list[dict[str, Any]] = []  # what ``collect`` found, for Stats

    # -- this process ------------------------------------------------------------------
    def record(self) -> None:
        """Record this process's calls and fault stacks (a server does; embedded use and
        tests, many coordinators to a process, do not)."""
        if self.journal is None:
            self.journal = InflightSlots(self.journal_dir)
            self._fault_file = enable_fault_record(self.journal_dir)

    def entering(self, **fields: Any) -> ContextManager[None]:
        """Record ``fields`` as what this thread does for the block (nothing when this
        process does not record)."""
        journal = self.journal
        return nullcontext() if journal is None else journal.entering(**fields)

    def close(self) -> None:
        """A clean end: this process's files go (nothing in them is an incident)."""
        if self.journal is not None:
            import faulthandler

            faulthandler.disable()
            self.journal.close()
            self._fault_file.close()
            Path(self._fault_file.name).unlink(missing_ok=True)
            self.journal = None

    # -- the quarantine ----------------------------------------------------------------
    def load(self) -> None:
        self._entries = {}
        if not self.blobs.exists(QUARANTINE):
            return
        try:
            doc = json.loads(self.blobs.read(QUARANTINE))
            for raw in doc.get("entries", []):
                e = Entry(**raw)
                self._entries[e.ident] = e
        except (ValueError, TypeError) as exc:  # a damaged quarantine refuses nothing
            log.error("the quarantine %s is damaged (%s): it is ignored",
                      self.blobs.path(QUARANTINE), exc)
            self._entries = {}
        self._expire()

    def _save(self) -> None:
        if self.fence is not None:
            self.fence()
        self._expire()
        doc = {"entries": [asdict(e) for e in self._entries.values()]}
        self.blobs.write_atomic(QUARANTINE, json.dumps(doc, indent=1).encode())

    def _expire(self) -> None:
        cutoff = time.time() - QUARANTINE_SECONDS
        self._entries = {k: e for k, e in self._entries.items() if e.at >= cutoff}

    def active(self) -> list[Entry]:
        return [e for e in self._entries.values() if e.active]

    def check(self, method: str, key: str = "", sql: str = "", query: str = "") -> None:
        """``QuarantinedRequestError`` when a quarantine entry names this request."""
        if not self._entries:
            return
        names = [("key", key), ("sql", sql_digest(sql) if sql else "")]
        if method in QUERY_SCOPED:
            names.append(("query", query))
        for kind, value in names:
            entry = self._entries.get(f"{kind}:{value}") if value else None
            if entry is not None and entry.active:
                until = time.gmtime(entry.at + QUARANTINE_SECONDS)
                raise QuarantinedRequestError(
                    f"this request is quarantined: {entry.reason}; it is not run again "
                    f"(until {time.strftime('%Y-%m-%d %H:%M', until)} UTC, "
                    "IMP_QUARANTINE_SECONDS; or remove the entry from "
                    f"{self.blobs.path(QUARANTINE)})")

    def query_quarantined(self, name: str) -> Entry | None:
        entry = self._entries.get(f"query:{name}")
        return entry if entry is not None and entry.active else None

    # -- what predecessors left ----------------------------------------------------------
    def collect(self, took_over: str | None = None) -> list[Death]:
        """Read, log and quarantine what dead server processes of this store left (this
        host's, and those of ``took_over``, "host:pid:id", the owner whose lease this
        coordinator took over); their files are removed. Call with the lease held."""
        self.load()
        if not self.journal_dir.is_dir():
            return []
        owner = took_over.split(":") if took_over else []
        here = this_host()

        def alive(host: str, pid: int) -> bool:
            if len(owner) > 1 and host == owner[0] and str(pid) == owner[1]:
                return False
            if host != here or pid == os.getpid():
                return True  # another host's files, unless its owner was taken over
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                return False
            except PermissionError:
                return True
            return True

        deaths = []
        changed = False
        for host, pid in dead_processes(self.journal_dir, alive):
            death = read_death(self.journal_dir, host, pid)
            if death.inflight or death.fatal:
                deaths.append(death)
                changed |= self._learn(death)
            forget(self.journal_dir, host, pid)
        if changed:
            self._save()
        return deaths

    def _learn(self, death: Death) -> bool:
        """Log ``death`` and record its culprits (or suspects); whether entries changed."""
        what = death.fatal or "killed (no fault record: SIGKILL, the OOM killer?)"
        calls = [_describe(slot["calls"]) for slot in death.inflight]
        log.error("server process %s of %s died (%s) with %d calls in flight%s%s",
                  death.pid, death.host, what, len(calls),
                  "".join(f"\n  in flight: {c}" for c in calls),
                  f"\n{death.stacks}" if death.stacks else "")
        culprits = death.culprits
        self.deaths.append({"host": death.host, "pid": death.pid, "fatal": death.fatal,
                            "in_flight": calls, "at": time.time(),
                            "culprits": [_describe(s["calls"]) for s in culprits]})
        if not death.fatal:
            return False  # killed from outside: no call is to blame
        changed = False
        blamed = culprits or death.inflight
        for slot in blamed:
            call = slot["calls"][-1]  # the innermost: what the thread was doing
            reason = (f"{_describe([call])} was in flight when server process "
                      f"{death.pid} of {death.host} died ({death.fatal}) at "
                      f"{time.strftime('%Y-%m-%d %H:%M:%S', time.gmtime())} UTC")
            for kind, value in _names(call):
                entry = self._entries.get(f"{kind}:{value}")
                if entry is None:
                    entry = Entry(kind, value, str(call.get("method", "")), reason,
                                  time.time(), strikes=0)
                    self._entries[entry.ident] = entry
                entry.strikes += 1
                entry.reason, entry.at = reason, time.time()
                # named by the faulting thread, or a suspect a second time
                entry.active = entry.active or bool(culprits) or entry.strikes >= 2
                changed = True
                if entry.active:
                    log.error("quarantined %s %s: %s", kind, value[:60], reason)
        return changed


def _names(call: dict[str, Any]) -> list[tuple[str, str]]:
    out = []
    if call.get("key"):
        out.append(("key", str(call["key"])))
    if call.get("sql_digest"):
        out.append(("sql", str(call["sql_digest"])))
    if call.get("method") in QUERY_SCOPED and call.get("query"):
        out.append(("query", str(call["query"])))
    return out


def _describe(calls: list[dict[str, Any]]) -> str:
    parts = []
    for call in calls:
        fields = " ".join(f"{k}={v}" for k, v in call.items()
                          if k not in ("method", "sql_digest", "at"))
        parts.append(f"{call.get('method', '?')}({fields})")
    return " > ".join(parts)
