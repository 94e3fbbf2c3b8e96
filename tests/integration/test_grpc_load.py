"""Load: 50 concurrent clients, each on its own channel, mix GetSketch (current and latest
maintained) with ApplyUpdate batches for a few seconds. No call may fail, and afterwards
every query's current sketch equals a recapture by the reference evaluator."""

from __future__ import annotations

import threading
import time

import numpy as np
import pyarrow as pa
import pytest
from grpc_harness import reference, running_service

from imp_actors.runtime_config import Eager, Lazy
from imp_core.workloads.queries import load_query

pytestmark = [pytest.mark.grpc, pytest.mark.integration]

CLIENTS = 50
SECONDS = 4.0
QUERIES = {"groups": ("q_groups_1000", Lazy()), "selpd": ("q_selpd", Lazy()),
           "having": ("q_having_2", Eager(batch_tuples=20, max_delay_s=0.2))}


def test_fifty_clients_mixing_reads_and_updates(tmp_path):
    with running_service(tmp_path) as svc:
        admin = svc.client()
        for name, (wq, strategy) in QUERIES.items():
            (table, column), = load_query(wq).sketch
            admin.register(name, load_query(wq).sql, partitions={f"{table}.{column}": 16},
                           strategy=strategy)
        source = {t: svc.coordinator.ctx.store.read(t) for t in ("t1000g", "t5000g")}
        errors: list[BaseException] = []
        calls = {"GetSketch": 0, "ApplyUpdate": 0}
        lock = threading.Lock()
        start = threading.Barrier(CLIENTS)

        def worker(i: int) -> None:
            rng = np.random.default_rng(i)
            client = svc.client(timeout=120)
            mine: dict[str, list[pa.Table]] = {"t1000g": [], "t5000g": []}
            next_id = 100_000_000 + i * 1_000_000
            start.wait()
            deadline = time.monotonic() + SECONDS
            try:
                while time.monotonic() < deadline:
                    if rng.random() < 0.25:
                        table = "t1000g" if rng.random() < 0.6 else "t5000g"
                        data = source[table]
                        rows = data.take(pa.array(rng.integers(0, data.num_rows, 3)))
                        rows = rows.set_column(0, rows.schema.field(0), pa.array(
                            np.arange(next_id, next_id + 3), pa.int64()))
                        next_id += 3
                        deletes = mine[table].pop(0) if mine[table] else None
                        client.apply_update(table, inserts=rows, deletes=deletes)
                        mine[table].append(rows)
                        kind = "ApplyUpdate"
                    else:
                        name = list(QUERIES)[int(rng.integers(0, len(QUERIES)))]
                        client.sketch(name, fresh=bool(rng.random() < 0.5))
                        kind = "GetSketch"
                    with lock:
                        calls[kind] += 1
            except BaseException as exc:  # noqa: BLE001 - every failure is reported
                errors.append(exc)

        threads = [threading.Thread(target=worker, args=(i,)) for i in range(CLIENTS)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(300)
        assert not any(t.is_alive() for t in threads)
        assert errors == []
        assert calls["GetSketch"] > CLIENTS and calls["ApplyUpdate"] > 10
        service = admin.stats()["service"]["methods"]
        assert set(service["ApplyUpdate"]["by_status"]) == {"OK"}
        assert set(service["GetSketch"]["by_status"]) == {"OK"}
        for name, (wq, _) in QUERIES.items():
            sketch = admin.sketch(name, include_partitions=True)
            assert sketch.versions == {t: svc.coordinator.ctx.store.version(t)
                                       for t in sketch.versions}
            assert sketch.sketch() == reference(svc.coordinator, load_query(wq).sql, sketch)
