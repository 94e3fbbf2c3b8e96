"""Watch streams cannot starve the server (issue 13, P5).

Forty WatchSketch streams with ``include_partitions`` on a query with large partitions
pushed health checks from ~30 ms to 0.7-5 s and GetSketch on a small query into
timeouts, because every stream converted every new version (a message of over a
megabyte) on its own, and a client that stopped reading held its thread and watch slot
until its deadline. Conversions are now single-flight (a version is converted once for
all streams), each stream has at most one message in flight, and a stream whose message
waits longer than ``watch_send_seconds`` for its reader is cancelled.

Real server, real sockets.
"""

from __future__ import annotations

import statistics
import threading
import time

import grpc
import numpy as np
import pytest
from grpc_harness import TOKEN, running_service
from runtime_support import random_batch
from waiting import wait_until

import services.convert as convert
from imp_core.workloads.queries import load_query
from services.protos import pb, rpc
from services.server_config import Limits

pytestmark = [pytest.mark.grpc, pytest.mark.integration]

WATCHERS = 16  # never read
SLOW = 4  # read each message only once the next version's calls were measured
VERSIONS = 3
METADATA = (("authorization", f"Bearer {TOKEN}"),)


def _latencies(client, rounds: int) -> tuple[list[float], list[float]]:
    """Seconds of ``rounds`` health checks and GetSketch calls of the small query."""
    health, sketch = [], []
    for _ in range(rounds):
        t0 = time.perf_counter()
        assert client.health(timeout=2.0) == "SERVING"
        health.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        assert client.sketch("small", fresh=False, timeout=2.0).seq >= 1
        sketch.append(time.perf_counter() - t0)
    return health, sketch


def test_watchers_of_a_large_sketch_do_not_starve_other_calls(tmp_path, monkeypatch):
    conversions: dict[tuple[str, bool], int] = {}
    real = convert.sketch_to_proto

    def counted(sv, include_partitions=False):
        key = (sv.query, include_partitions)
        conversions[key] = conversions.get(key, 0) + 1
        return real(sv, include_partitions)

    monkeypatch.setattr(convert, "sketch_to_proto", counted)
    limits = Limits(max_watches=WATCHERS + SLOW + 2)
    with running_service(tmp_path / "svc", limits=limits, workers=4) as svc:
        client = svc.client()
        sql = load_query("q_groups_1000").sql
        client.register("wide", sql, partitions={"t1000g.a": list(range(1, 30_001))})
        client.register("small", sql, partitions={"t1000g.a": 4})
        before_health, before_sketch = _latencies(client, 20)
        latest = client.sketch("wide", fresh=False).seq
        request = pb.WatchSketchRequest(query="wide", after_seq=latest,
                                        include_partitions=True)
        idle = [client.stub.WatchSketch(request, metadata=METADATA) for _ in range(WATCHERS)]
        slow_got: list[int] = []
        measured: list[int] = []  # the steps whose calls were measured

        def slow_reader() -> None:
            """Reads the message of version k only after the calls of step k were
            measured: meanwhile that message waits for it, in flight."""
            got = 0
            for msg in client.stub.WatchSketch(request, metadata=METADATA, timeout=60):
                slow_got.append(msg.sketch.seq)
                got += 1
                if got == VERSIONS:
                    return
                wait_until(lambda want=got: len(measured) > want, timeout=60,
                           what="the next step's measurements")

        readers = [threading.Thread(target=slow_reader, daemon=True) for _ in range(SLOW)]
        for r in readers:
            r.start()
        try:
            wait_until(lambda: client.stats()["service"]["open_watches"] >= WATCHERS + SLOW,
                       timeout=20, what="every watch to open")
            rng = np.random.default_rng(8)
            published = []
            during_health: list[float] = []
            during_sketch: list[float] = []
            for step in range(VERSIONS):
                ins, dels = random_batch(svc.coordinator.ctx.store, "t1000g", rng, 6,
                                         salt=70_000_000 + 100 * step)
                client.apply_update("t1000g", inserts=ins, deletes=dels)
                published.append(client.sketch("wide").seq)  # a new version to send
                # meanwhile, the other calls keep their pace
                h, s = _latencies(client, 10)
                during_health += h
                during_sketch += s
                measured.append(step)
            for r in readers:
                r.join(60)
            assert not any(r.is_alive() for r in readers)
            assert sorted(slow_got) == sorted(published * SLOW)  # each reader got each
            # each version of "wide" was converted with its partitions once for all the
            # streams (the registration's first version and the three published ones)
            assert conversions[("wide", True)] <= 1 + VERSIONS
            # typical latency as without watchers (a loaded CI machine may add a few ms;
            # before the fix it grew by 0.7-5 s)
            for before, during in ((before_health, during_health),
                                   (before_sketch, during_sketch)):
                assert statistics.median(during) <= 3 * statistics.median(before) + 0.05, \
                    (before, during)
        finally:
            for call in idle:
                call.cancel()


def test_a_watcher_that_stops_reading_is_dropped(tmp_path):
    """A client that opens watches and reads nothing held a thread and a watch slot each
    until its deadline; with one message in flight per stream, such a stream is
    cancelled once its message waits ``watch_send_seconds``, its slot is free again, and
    the watchers that read are served."""
    limits = Limits(max_watches=4, watch_send_seconds=2)
    with running_service(tmp_path / "svc", limits=limits) as svc:
        client = svc.client()
        sql = load_query("q_groups_1000").sql
        client.register("wide", sql, partitions={"t1000g.a": list(range(1, 30_001))})
        request = pb.WatchSketchRequest(query="wide", after_seq=0, include_partitions=True)
        # no bandwidth probing: the client's window stays at 64 KiB, smaller than one
        # message, so a client that does not read stalls the first send
        channel = grpc.insecure_channel(svc.address, options=[("grpc.http2.bdp_probe", 0)])
        stub = rpc.SketchServiceStub(channel)
        try:
            idle = [stub.WatchSketch(request, metadata=METADATA, timeout=120)
                    for _ in range(limits.max_watches)]
            wait_until(lambda: client.stats()["service"]["dropped_watches"] >= len(idle),
                       timeout=30, interval=0.2, what="the unread watches to be dropped")
            service = client.stats()["service"]
            assert service["dropped_watches"] == len(idle)
            wait_until(lambda: client.stats()["service"]["open_watches"] == 0, timeout=10,
                       what="the dropped watches' slots to be freed")
            for call in idle:
                with pytest.raises(grpc.RpcError) as err:
                    for _ in call:
                        pass
                assert err.value.code() == grpc.StatusCode.CANCELLED
            # a watcher that reads gets its message as before
            first = next(iter(client.stub.WatchSketch(request, metadata=METADATA,
                                                      timeout=30)))
            assert first.sketch.query == "wide" and first.sketch.has_partitions
        finally:
            channel.close()
