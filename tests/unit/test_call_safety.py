"""Issue 50, the pieces without a server: the idempotency ledger, the request digests,
the in-flight record a crash leaves, the quarantine's rules, failpoints and the derived
metrics port of a second server on one host."""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from imp_actors.incidents import Incidents
from imp_actors.storage import BlobStore
from imp_core.errors import IdempotencyKeyError, QuarantinedRequestError
from imp_core.process import failpoints
from imp_core.process.inflight import InflightSlots, read_death, read_slots, this_host
from imp_core.storage.calls import CallTag, check_key, digest_version
from services.idempotency import CallLedger, message_digest
from services.protos import pb
from services.server_config import ServerConfig, metrics_for

# -- keys and digests ---------------------------------------------------------------------


def test_keys_are_checked():
    assert check_key("a-B_9.:x") == "a-B_9.:x"
    for bad in ("", "with space", "x" * 129, "ünï", "a/b"):
        with pytest.raises(IdempotencyKeyError, match="idempotency key"):
            check_key(bad)
    with pytest.raises(IdempotencyKeyError):
        CallTag("bad key", "0" * 32)


def test_a_digest_names_the_request_without_its_key():
    a = pb.ApplyUpdateRequest(table="t", inserts=b"\x01\x02", idempotency_key="k1")
    b = pb.ApplyUpdateRequest(table="t", inserts=b"\x01\x02", idempotency_key="k2")
    c = pb.ApplyUpdateRequest(table="t", inserts=b"\x01\x03", idempotency_key="k1")
    assert message_digest("ApplyUpdate", a) == message_digest("ApplyUpdate", b)
    assert message_digest("ApplyUpdate", a) != message_digest("ApplyUpdate", c)
    assert message_digest("ApplyUpdate", a) != message_digest("DropQuery", a)
    r1 = pb.RegisterQueryRequest(name="q", sql="SELECT 1", partitions=[
        pb.PartitionSpec(attribute="t.a", fragments=4)])
    r2 = pb.RegisterQueryRequest(name="q", sql="SELECT 1", partitions=[
        pb.PartitionSpec(attribute="t.a", fragments=8)])
    assert message_digest("RegisterQuery", r1) != message_digest("RegisterQuery", r2)
    g1 = pb.GetSketchesRequest(known_seqs={"a": 1, "b": 2})
    g2 = pb.GetSketchesRequest(known_seqs={"b": 2, "a": 1})
    assert message_digest("GetSketches", g1) == message_digest("GetSketches", g2)
    # a digest fits a Delta transaction version (a non-negative 64-bit integer)
    version = digest_version(message_digest("ApplyUpdate", a))
    assert 0 <= version < 2**63


# -- the ledger ----------------------------------------------------------------------------


def test_the_ledger_answers_a_retry_with_the_first_outcome():
    ledger = CallLedger()
    runs = []
    first = ledger.run("ApplyUpdate", "k", "d1", lambda: runs.append(1) or
                       pb.ApplyUpdateResponse(version=3))
    again = ledger.run("ApplyUpdate", "k", "d1", lambda: runs.append(2) or
                       pb.ApplyUpdateResponse(version=4))
    assert runs == [1] and first.version == again.version == 3
    assert not first.replayed and again.replayed and ledger.replayed == 1
    with pytest.raises(IdempotencyKeyError, match="another request"):
        ledger.run("ApplyUpdate", "k", "d2", lambda: pb.ApplyUpdateResponse())
    with pytest.raises(IdempotencyKeyError):
        ledger.run("DropQuery", "k", "d1", lambda: pb.DropQueryResponse())


def test_a_failed_call_is_forgotten_and_runs_again():
    ledger = CallLedger()

    def fails():
        raise RuntimeError("refused")

    with pytest.raises(RuntimeError):
        ledger.run("ApplyUpdate", "k", "d", fails)
    assert ledger.known("k") is None
    assert ledger.run("ApplyUpdate", "k", "d", lambda: "ok") == "ok"


def test_a_retry_waits_for_the_running_call():
    ledger = CallLedger()
    started, release = threading.Event(), threading.Event()
    runs = []

    def slow():
        runs.append("slow")
        started.set()
        release.wait(10)
        return "first"

    out: list[str] = []
    t = threading.Thread(target=lambda: out.append(ledger.run("M", "k", "d", slow)))
    t.start()
    assert started.wait(10)
    known = ledger.known("k")
    assert known is not None and known.running
    waiting = threading.Event()  # set by the retry between its waits for the first
    waiter = threading.Thread(target=lambda: out.append(
        ledger.run("M", "k", "d", lambda: runs.append("second") or "second",
                   alive=waiting.set)))
    waiter.start()
    assert waiting.wait(10)  # the retry is in its wait loop...
    assert waiter.is_alive() and runs == ["slow"]  # ...waiting for the first, not running
    release.set()
    t.join(10)
    waiter.join(10)
    assert runs == ["slow"] and out == ["first", "first"]


def test_the_ledger_forgets_old_and_surplus_entries(monkeypatch):
    import services.idempotency as idempotency

    now = [1_000.0]  # the ledger's clock, moved by the test
    monkeypatch.setattr(idempotency, "time", SimpleNamespace(time=lambda: now[0]))
    ledger = CallLedger(retention_s=0.2, max_entries=3)
    for i in range(5):
        ledger.run("M", f"k{i}", "d", lambda i=i: i)
    assert ledger.known("k0") is None and ledger.known("k4") is not None  # surplus gone
    assert [k for k in ("k1", "k2", "k3", "k4") if ledger.known(k) is not None] == [
        "k2", "k3", "k4"]
    now[0] += 0.15
    assert ledger.known("k4") is not None  # within its retention
    now[0] += 0.1
    assert ledger.known("k4") is None  # past it


# -- what a crash leaves -------------------------------------------------------------------


def test_slots_hold_what_each_thread_does_and_nothing_after(tmp_path):
    slots = InflightSlots(tmp_path)
    with slots.entering(method="RegisterQuery", query="q", key="k1"):
        with slots.entering(method="maintain", query="q"):
            inside = read_slots(slots.path)
        after_inner = read_slots(slots.path)
    assert [c["method"] for c in inside[0]["calls"]] == ["RegisterQuery", "maintain"]
    assert inside[0]["thread"] == threading.get_ident()
    assert [c["method"] for c in after_inner[0]["calls"]] == ["RegisterQuery"]
    assert read_slots(slots.path) == []
    with slots.entering(method="RunQuery", sql_digest="x" * 5000):  # cut to fit a slot
        (slot,) = read_slots(slots.path)
        assert len(slot["calls"][0]["sql_digest"]) < 200
    slots.close()
    assert not slots.path.exists()


def test_a_segfault_leaves_its_calls_and_the_faulting_thread(tmp_path):
    """A child process records a call, then dies in native code: its files name the
    call, the fatal error and the thread that faulted."""
    script = f"""
import ctypes, threading, sys
from pathlib import Path
from imp_core.process.inflight import InflightSlots, enable_fault_record
folder = Path({str(tmp_path)!r})
slots = InflightSlots(folder)
keep = enable_fault_record(folder)
idle = threading.Event()
def other():
    with slots.entering(method="ApplyUpdate", table="t", key="innocent"):
        idle.wait()
threading.Thread(target=other, daemon=True).start()
with slots.entering(method="RegisterQuery", query="bad", key="culprit"):
    ctypes.string_at(0)
"""
    proc = subprocess.run([sys.executable, "-c", script], cwd=os.getcwd(), timeout=60,
                          capture_output=True)
    assert proc.returncode == -signal.SIGSEGV
    death = read_death(tmp_path, this_host(), _pid_of(tmp_path))
    assert death.fatal == "Segmentation fault"
    assert {c["calls"][-1]["key"] for c in death.inflight} == {"innocent", "culprit"}
    assert [c["calls"][-1]["key"] for c in death.culprits] == ["culprit"]
    assert "Current thread" in death.stacks


def _pid_of(folder: Path) -> int:
    (path,) = folder.glob("calls-*.slots")
    return int(path.stem.rsplit("-", 1)[1])


def _dead_record(folder: Path, pid: int, calls: list[list[dict]], fatal: bool,
                 faulting: int | None = None) -> None:
    """Files as a dead process ``pid`` of this host would have left them."""
    import json

    from imp_core.process.inflight import SLOT_BYTES, fault_path, slots_path

    data = bytearray(SLOT_BYTES * max(len(calls), 1))
    for i, stack in enumerate(calls):
        raw = json.dumps({"thread": 1000 + i, "calls": stack}).encode()
        data[i * SLOT_BYTES:i * SLOT_BYTES + len(raw)] = raw
    folder.mkdir(parents=True, exist_ok=True)
    slots_path(folder, pid).write_bytes(bytes(data))
    if fatal:
        current = f"Current thread {hex(faulting)}" if faulting is not None else "Thread 0x1"
        fault_path(folder, pid).write_text(
            f"Fatal Python error: Segmentation fault\n\n{current} (most recent call first):\n")


def _gone_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_the_faulting_call_is_quarantined_at_once_a_suspect_at_its_second_death(tmp_path):
    blobs = BlobStore(str(tmp_path / "registry"))
    journal = tmp_path / "journal"
    incidents = Incidents(blobs, journal)
    # the faulting thread (1001) ran the registration: it alone is quarantined
    _dead_record(journal, _gone_pid(), [
        [{"method": "ApplyUpdate", "table": "t", "key": "innocent"}],
        [{"method": "RegisterQuery", "query": "q", "key": "bad", "sql_digest": "s1"}]],
        fatal=True, faulting=1001)
    (death,) = incidents.collect()
    assert len(death.inflight) == 2
    incidents.check("ApplyUpdate", key="innocent")
    with pytest.raises(QuarantinedRequestError, match="RegisterQuery"):
        incidents.check("RegisterQuery", key="bad")
    assert not list(journal.glob("*"))  # the files were read and removed
    # no faulting thread named, two calls: suspects; the one in flight again is quarantined
    for _ in range(2):
        _dead_record(journal, _gone_pid(), [
            [{"method": "GetSketch", "query": "q2"}, {"method": "maintain", "query": "q2"}],
            [{"method": "ApplyUpdate", "table": "t", "key": f"k{time.time_ns()}"}]],
            fatal=True)
        Incidents(blobs, journal).collect()
    fresh = Incidents(blobs, journal)
    fresh.load()  # the quarantine is durable: another server sees it
    assert fresh.query_quarantined("q2") is not None
    with pytest.raises(QuarantinedRequestError):
        fresh.check("GetSketch", query="q2")
    fresh.check("RegisterQuery", query="q2")  # a registration's name is not quarantined
    assert [e.kind for e in fresh.active()].count("key") == 1  # only "bad"
    # a process killed from outside (no fault record) blames no call
    _dead_record(journal, _gone_pid(), [[{"method": "ApplyUpdate", "key": "z"}]],
                 fatal=False)
    (killed,) = fresh.collect()
    assert killed.fatal is None
    fresh.check("ApplyUpdate", key="z")


def test_a_live_process_files_are_not_read(tmp_path):
    journal = tmp_path / "journal"
    _dead_record(journal, os.getppid(), [[{"method": "RegisterQuery", "key": "k"}]],
                 fatal=True)
    assert Incidents(BlobStore(str(tmp_path / "r")), journal).collect() == []
    assert list(journal.glob("calls-*"))


# -- failpoints ----------------------------------------------------------------------------


def test_failpoints_parse_and_fire_on_their_hit(monkeypatch):
    assert failpoints.parse("a=kill@3, b=raise~XY") == {"a": ("kill", 3, ""),
                                                         "b": ("raise", 1, "XY")}
    for bad in ("a", "a=boom", "a=kill@0", "=kill"):
        with pytest.raises(ValueError, match="IMP_FAILPOINTS"):
            failpoints.parse(bad)
    monkeypatch.setattr(failpoints, "_POINTS", {"p": ("raise", 2, "hot")})
    monkeypatch.setattr(failpoints, "_HITS", {})
    failpoints.failpoint("p", "cold")  # not counted: the text is not in the detail
    failpoints.failpoint("p", "hot 1")
    with pytest.raises(failpoints.FailpointError):
        failpoints.failpoint("p", "hot 2")
    failpoints.failpoint("p", "hot 3")  # fires once only
    failpoints.failpoint("other")


# -- a second server on one host -------------------------------------------------------------


def test_a_second_server_on_one_host_gets_its_own_metrics_port():
    assert metrics_for("127.0.0.1:50051") == "127.0.0.1:9464"
    assert metrics_for("127.0.0.1:50052") == "127.0.0.1:9465"
    assert metrics_for("0.0.0.0:0") == "0.0.0.0:0"  # any port: any metrics port
    assert metrics_for("h:1") == "h:0"  # shifted out of range: any port
    parser = argparse.ArgumentParser()
    ServerConfig.add_arguments(parser)

    def metrics(argv: list[str], env: dict[str, str]) -> str | None:
        return ServerConfig.from_args(parser.parse_args(argv), env).metrics_listen

    assert metrics([], {}) == "127.0.0.1:9464"
    assert metrics(["--listen", "127.0.0.1:50052", "--standby", "on"], {}) == \
        "127.0.0.1:9465"
    assert metrics([], {"IMP_LISTEN": "127.0.0.1:50053"}) == "127.0.0.1:9466"
    assert metrics(["--listen", "127.0.0.1:50052"], {"IMP_METRICS_LISTEN": "off"}) is None
    assert metrics(["--metrics-listen", "127.0.0.1:9999"], {}) == "127.0.0.1:9999"
    assert metrics(["--listen", "127.0.0.1:50052"],
                   {"IMP_METRICS_LISTEN": "127.0.0.1:7000"}) == "127.0.0.1:7000"


# -- a standby's warm workers ----------------------------------------------------------------


def test_warm_workers_started_before_recovery_are_not_pooled_twice(tmp_path):
    """A standby starts its warm workers while it waits (``Coordinator.prepare``); the
    recovery that follows lists the runtime's named workers, its own warm ones among them:
    each must stay in the pool once, or two queries would share one worker (and each
    apply the other's changes)."""
    from runtime_support import make_config

    from imp_actors.coordinator import Coordinator
    from imp_actors.handles import LocalBackend

    class NamedWorkers(LocalBackend):  # workers listed by name, as Ray's named actors are
        def __init__(self, config):
            super().__init__(config)
            self.made = {}

        def spawn(self, name, node=None):
            self.made[name] = super().spawn(name, node)
            return self.made[name]

        def find(self, name):
            return self.made.get(name)

        def worker_names(self):
            return sorted(self.made)

    c = Coordinator(make_config(tmp_path, warm_actors=2))
    c.ctx.backend = NamedWorkers(c.config)
    c.shards.keep_warm()
    c.shards.reattach([])
    names = [h.name for h in c.shards.warm_handles()]
    assert len(names) == 2 and len(set(names)) == 2
    first, second = c.shards.spawn(), c.shards.spawn()
    assert first.name != second.name
