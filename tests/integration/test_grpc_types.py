"""Typed values over the wire: partition bounds and sketch ranges on date, decimal,
string, timestamp, float and integer attributes survive the round trip exactly, and the
sketches registered with them through gRPC equal a recapture by the reference evaluator."""

from __future__ import annotations

import datetime as dt
import decimal

import numpy as np
import pyarrow as pa
import pytest
from grpc_harness import reference, running_service

from services import convert

pytestmark = [pytest.mark.grpc, pytest.mark.integration]

D = decimal.Decimal
VALUES = [
    (7, pa.int64()), (-3, pa.int32()), (2.5, pa.float64()), ("Zürich", pa.string()),
    (D("1234.50"), pa.decimal128(10, 2)), (dt.date(1995, 3, 15), pa.date32()),
    (dt.datetime(2024, 2, 29, 13, 45, 7, 123456), pa.timestamp("us")), (True, pa.bool_()),
]


@pytest.mark.parametrize("value,dtype", VALUES, ids=[str(t) for _, t in VALUES])
def test_value_round_trip(value, dtype):
    assert convert.from_value(convert.to_value(value, dtype)) == value
    assert convert.from_value(convert.to_value(value)) == value  # type from the value
    assert convert.arrow_type(str(dtype)) == dtype


def test_unset_value_is_an_open_end():
    assert convert.to_value(None, pa.int64()) is None
    assert convert.from_value(convert.pb.Value()) is None


def _events(rows: int = 400) -> pa.Table:
    rng = np.random.default_rng(9)
    days = [dt.date(2024, 1, 1) + dt.timedelta(days=int(d)) for d in rng.integers(0, 60, rows)]
    return pa.table({
        "id": pa.array(np.arange(1, rows + 1), pa.int64()),
        "day": pa.array(days, pa.date32()),
        "amount": pa.array([D(int(c)) / 100 for c in rng.integers(0, 100_000, rows)],
                           pa.decimal128(10, 2)),
        "city": pa.array(rng.choice(["Aarau", "Basel", "Bern", "Chur", "Genf", "Zug"], rows)),
        "at": pa.array([dt.datetime(2024, 1, 1) + dt.timedelta(minutes=int(m))
                        for m in rng.integers(0, 90_000, rows)], pa.timestamp("us")),
        "score": rng.random(rows) * 10,
    })


CASES = {
    "by_day": ("SELECT day, count(*) AS n FROM events GROUP BY day HAVING count(*) > 7",
               {"events.day": ["2024-01-10", "2024-01-20", "2024-02-05"]}),
    "by_amount": ("SELECT amount, count(*) AS n FROM events GROUP BY amount "
                  "HAVING count(*) > 1", {"events.amount": 8}),
    "by_city": ("SELECT city, count(*) AS n FROM events GROUP BY city HAVING count(*) > 66",
                {"events.city": ["Bern", "Genf"]}),
    "by_at": ("SELECT at, count(*) AS n FROM events GROUP BY at HAVING count(*) > 1",
              {"events.at": 6}),
    "by_score": ("SELECT score, count(*) AS n FROM events GROUP BY score "
                 "HAVING count(*) > 0", {"events.score": [2.5, 5.0, 7.5]}),
}


@pytest.fixture(scope="module")
def svc(tmp_path_factory):
    with running_service(tmp_path_factory.mktemp("types"), fill=False) as service:
        service.coordinator.ctx.store.create_table("events", _events(), key=["id"])
        yield service


@pytest.mark.parametrize("name", list(CASES))
def test_typed_partitions_through_grpc(svc, name):
    from services.cli.commands import _typed_bounds

    client = svc.client()
    sql, partitions = CASES[name]
    attr, spec = next(iter(partitions.items()))
    if isinstance(spec, list) and isinstance(spec[0], str):
        spec = _typed_bounds(client, attr, spec)  # as `imp register --bounds` sends them
    info = client.register(name, sql, partitions={attr: spec})
    column = attr.split(".")[1]
    dtype = svc.coordinator.ctx.store.schema("events").field(column).type
    bounds = client.sketch(name, include_partitions=True).tables[0].bounds
    if isinstance(spec, list):
        assert list(bounds) == spec
    assert info.partitions[0]["type"] == str(dtype)
    assert all(pa.scalar(b, dtype).as_py() == b for b in bounds)

    first = 10_000 + 100 * list(CASES).index(name)
    rows = _events(30).set_column(0, "id", pa.array(np.arange(first, first + 30), pa.int64()))
    client.apply_update("events", inserts=rows)
    sketch = client.sketch(name, include_partitions=True)
    assert sketch.sketch() == reference(svc.coordinator, sql, sketch)
    table = sketch.tables[0]
    assert table.type == dtype
    for r in table.ranges:
        for end in (r.lo, r.hi):
            assert end is None or end in bounds
    assert table.predicate in sketch.where
