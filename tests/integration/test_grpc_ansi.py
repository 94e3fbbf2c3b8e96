"""ANSI mode through the service, over a real gRPC channel and Ray-less local workers:
a query registered with ``SET spark.sql.ansi.enabled = true`` answers lookups while no
row raises, is refused with FAILED_PRECONDITION and Spark's error class while a committed
row divides by zero, and answers again (the sketch equal to a recapture) once that row is
deleted; the counts of rows that raise survive an eviction and restore."""

from __future__ import annotations

import pyarrow as pa
import pytest
from grpc_harness import reference, running_service

from services.client import RemoteError

pytestmark = [pytest.mark.grpc, pytest.mark.integration]

TABLE = "t1000g"
SQL = ("SET spark.sql.ansi.enabled = true;\n"
       f"SELECT a, sum(c) / min(b) AS r, count(*) AS n FROM {TABLE} GROUP BY a "
       "HAVING count(*) > 1")
SQL_ROWS = f"SET spark.sql.ansi.enabled = true; SELECT id, c / b AS r FROM {TABLE}"


@pytest.fixture(scope="module")
def svc(tmp_path_factory):
    with running_service(tmp_path_factory.mktemp("grpc-ansi"), bootstrap="engine") as service:
        yield service


def _bad_row(svc, key: int) -> pa.Table:
    row = svc.coordinator.ctx.store.read(TABLE).slice(0, 1).to_pylist()[0]
    row.update(id=key, b=0)
    return pa.Table.from_pylist([row], schema=svc.client().schema(TABLE))


@pytest.mark.parametrize("name, sql", [("ansi_groups", SQL), ("ansi_rows", SQL_ROWS)])
def test_lookups_raise_while_a_row_divides_by_zero(svc, name, sql):
    client = svc.client()
    client.register(name, sql, partitions={f"{TABLE}.id": 16})
    before = client.sketch(name)
    bad = _bad_row(svc, 900_000_000 + len(name))
    client.apply_update(TABLE, inserts=bad)
    with pytest.raises(RemoteError) as refused:
        client.sketch(name)
    assert refused.value.code == "FAILED_PRECONDITION"
    assert "DIVIDE_BY_ZERO" in str(refused.value)
    client.evict(name)  # the count is part of the checkpoint
    client.restore(name)
    with pytest.raises(RemoteError, match="DIVIDE_BY_ZERO"):
        client.sketch(name)
    client.apply_update(TABLE, deletes=bad)
    after = client.sketch(name)
    assert after.seq > before.seq
    record = client.sketch(name, include_partitions=True)
    assert record.sketch() == reference(svc.coordinator, sql, record)
