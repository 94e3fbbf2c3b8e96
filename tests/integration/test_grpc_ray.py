"""SketchService in front of Ray query actors (the coordinator starts a local Ray, as
``imp serve`` does on one machine): register over gRPC, update, and every current sketch
equals a recapture by the reference evaluator; the watch stream and the actor calls
(checkpoint, evict, restore, scale) work across the Ray boundary."""

from __future__ import annotations

import threading
import uuid

import numpy as np
import pytest
from grpc_harness import reference, running_service
from runtime_support import random_batch

from imp_actors.runtime_config import Eager, Lazy
from imp_core.workloads.queries import load_query

pytestmark = [pytest.mark.grpc, pytest.mark.ray, pytest.mark.integration]

QUERIES = {"groups": ("q_groups_1000", Lazy()),
           "having": ("q_having_2", Eager(batch_tuples=5, max_delay_s=0.5))}


def test_service_on_ray_actors(tmp_path):
    namespace = f"imp-grpc-test-{uuid.uuid4().hex[:8]}"  # never touch other tests' actors
    with running_service(tmp_path, backend="ray", ray_namespace=namespace,
                         warm_actors=0) as svc:
        client = svc.client()
        for name, (wq, strategy) in QUERIES.items():
            (table, column), = load_query(wq).sketch
            client.register(name, load_query(wq).sql, partitions={f"{table}.{column}": 16},
                            strategy=strategy)
        stats = client.stats()["coordinator"]
        assert stats["backend"] == "ray" and stats["live_actors"] == len(QUERIES)

        start = client.sketch("groups").seq
        received = []
        # range first: zip stops before asking the stream for a fourth version
        watching = threading.Thread(target=lambda: received.extend(
            r.seq for _, r in zip(range(3), client.watch("groups", after_seq=start,
                                                         timeout=120))))
        watching.start()
        rng = np.random.default_rng(3)
        for step in range(3):
            for table in ("t1000g", "t5000g"):
                inserts, deletes = random_batch(svc.coordinator.ctx.store, table, rng, 15,
                                                salt=30_000_000 + 1000 * step)
                client.apply_update(table, inserts=inserts, deletes=deletes)
            for name, (wq, _) in QUERIES.items():
                sketch = client.sketch(name, include_partitions=True)
                assert sketch.sketch() == reference(svc.coordinator, load_query(wq).sql,
                                                    sketch), (name, step)
        watching.join(120)
        assert received == [start + 1, start + 2, start + 3]

        assert len(client.checkpoint("groups")) == 1
        client.evict("groups")
        assert client.info("groups").state == "evicted"
        assert client.restore("groups").state == "live"
        assert client.scale("groups", 2).shards == 2
        inserts, deletes = random_batch(svc.coordinator.ctx.store, "t1000g", rng, 15,
                                        salt=31_000_000)
        client.apply_update("t1000g", inserts=inserts, deletes=deletes)
        sketch = client.sketch("groups", include_partitions=True)
        assert sketch.sketch() == reference(svc.coordinator, load_query("q_groups_1000").sql,
                                            sketch)
