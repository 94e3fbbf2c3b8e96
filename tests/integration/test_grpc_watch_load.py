"""Watch streams cannot starve the server (issue 13, P5).

Forty WatchSketch streams with ``include_partitions`` on a query with large partitions
pushed health checks from ~30 ms to 0.7-5 s and GetSketch on a small query into
timeouts, because every stream converted every new version (a message of over a
megabyte) on its own. Conversions are now single-flight: a version is converted once
for all streams. Here, non-reading and slow watchers sit on a query with 30,000
fragments while new versions are published; every health check and GetSketch meanwhile
finishes within its deadline, and each version is converted once however many streams
send it. Real server, real sockets.
"""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest
from grpc_harness import TOKEN, running_service
from runtime_support import random_batch

import services.convert as convert
from imp_core.workloads.queries import load_query
from services.config import Limits
from services.protos import pb

pytestmark = [pytest.mark.grpc, pytest.mark.integration]

WATCHERS = 16  # never read
SLOW = 4  # read one message a second
VERSIONS = 3


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
        latest = client.sketch("wide", fresh=False).seq
        metadata = (("authorization", f"Bearer {TOKEN}"),)
        request = pb.WatchSketchRequest(query="wide", after_seq=latest,
                                        include_partitions=True)
        idle = [client.stub.WatchSketch(request, metadata=metadata) for _ in range(WATCHERS)]
        slow_got: list[int] = []

        def slow_reader() -> None:
            got = 0
            for msg in client.stub.WatchSketch(request, metadata=metadata, timeout=60):
                slow_got.append(msg.sketch.seq)
                got += 1
                if got == VERSIONS:
                    return
                time.sleep(1.0)

        readers = [threading.Thread(target=slow_reader, daemon=True) for _ in range(SLOW)]
        for r in readers:
            r.start()
        try:
            deadline = time.time() + 20
            while client.stats()["service"]["open_watches"] < WATCHERS + SLOW and \
                    time.time() < deadline:
                time.sleep(0.05)
            rng = np.random.default_rng(8)
            published = []
            for step in range(VERSIONS):
                ins, dels = random_batch(svc.coordinator.store, "t1000g", rng, 6,
                                         salt=70_000_000 + 100 * step)
                client.apply_update("t1000g", inserts=ins, deletes=dels)
                published.append(client.sketch("wide").seq)  # a new version to send
                # meanwhile, the other calls keep their deadlines
                for _ in range(10):
                    assert client.health(timeout=2.0) == "SERVING"
                small = client.sketch("small")
                assert small.seq >= 1
            for r in readers:
                r.join(60)
            assert not any(r.is_alive() for r in readers)
            assert sorted(slow_got) == sorted(published * SLOW)  # each reader got each
            # each version of "wide" was converted with its partitions once for all the
            # streams (the registration's first version and the three published ones)
            assert conversions[("wide", True)] <= 1 + VERSIONS
        finally:
            for call in idle:
                call.cancel()
