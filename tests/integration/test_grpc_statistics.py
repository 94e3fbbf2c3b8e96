"""VAR_SAMP, VAR_POP, STDDEV_SAMP and STDDEV_POP through gRPC: a query whose HAVING tests
them is registered over the wire, maintained over inserts and deletes, and its sketch
equals a recapture by the reference evaluator after every update (the statistics decide
which groups pass, so a wrong value shows as a wrong sketch)."""

from __future__ import annotations

import decimal

import numpy as np
import pyarrow as pa
import pytest
from grpc_harness import reference, running_service

pytestmark = [pytest.mark.grpc, pytest.mark.integration]

CITIES = ["Aarau", "Basel", "Bern", "Chur", "Genf", "Zug"]
SQL = ("SELECT city, var_samp(amount) AS v, stddev_pop(score) AS s, variance(n) AS w, "
       "stddev(n) AS d FROM events GROUP BY city "
       "HAVING var_samp(amount) > 80000 OR stddev_pop(score) < 2.85 OR var_pop(n) > 900")


def _events(rows: int, first: int, seed: int) -> pa.Table:
    rng = np.random.default_rng(seed)
    return pa.table({
        "id": pa.array(np.arange(first, first + rows), pa.int64()),
        "city": pa.array(rng.choice(CITIES, rows)),
        "amount": pa.array([decimal.Decimal(int(c)) / 100 for c in
                            rng.integers(0, 100_000, rows)], pa.decimal128(10, 2)),
        "score": rng.random(rows) * 10,
        "n": pa.array([None if v < 5 else int(v) for v in rng.integers(0, 110, rows)],
                      pa.int64()),
    })


def test_statistics_maintained_through_grpc(tmp_path):
    with running_service(tmp_path, fill=False) as svc:
        store = svc.coordinator.ctx.store
        store.create_table("events", _events(300, 1, 3), key=["id"])
        client = svc.client()
        client.register("spread", SQL, partitions={"events.city": ["Basel", "Chur", "Zug"]})
        sketch = client.sketch("spread", include_partitions=True)
        assert sketch.sketch() == reference(svc.coordinator, SQL, sketch)
        for step in range(3):
            current = store.read("events", sketch.versions["events"])
            rng = np.random.default_rng(step)
            dels = current.take(pa.array(rng.choice(current.num_rows, 25, replace=False)))
            client.apply_update("events", inserts=_events(20, 10_000 * (step + 1), step),
                                deletes=dels)
            sketch = client.sketch("spread", include_partitions=True)
            assert sketch.sketch() == reference(svc.coordinator, SQL, sketch)
