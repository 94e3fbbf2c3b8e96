"""The 22 TPC-H queries as written, registered through the gRPC service (real server on
loopback, in-process coordinator, Delta tables with the SF 0.01 cut of ``workload_data``).

Each registers with its workload sketch attribute (nothing forced); after updates of
lineitem and orders (deletes of whole orders' lineitems included, so EXISTS and NOT
EXISTS flip) every current sketch equals a recapture by the reference evaluator at the
sketch's table versions, and ``RunQuery`` with the sketch returns the plain result.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from grpc_harness import reference, running_service
from runtime_support import fill_store, random_batch

from imp_core.oracle.results import same_rows
from imp_core.workloads.queries import list_queries

pytestmark = [pytest.mark.grpc, pytest.mark.integration]

QUERIES = list_queries("tpch22")


@pytest.fixture(scope="module")
def svc(tmp_path_factory):
    root = tmp_path_factory.mktemp("grpc-tpch22")
    fill_store(root, ("tpch",))
    with running_service(root, fill=False, workers=4) as service:
        client = service.client()
        for wq in QUERIES:
            client.register(wq.name, wq.sql, partitions={_attr(wq): 16})
        yield service


def _attr(wq) -> str:
    table, column = wq.sketch[0]
    return f"{table}.{column}"


def test_all_22_register_and_stay_exact(svc):
    client = svc.client()
    c = svc.coordinator
    names = {q.name for q in client.queries()}
    assert {wq.name for wq in QUERIES} <= names
    rng = np.random.default_rng(7)
    items = c.ctx.store.read("lineitem")
    orders = pc.unique(items.column("l_orderkey")).slice(0, 6)
    client.apply_update("lineitem", deletes=items.filter(
        pc.is_in(items.column("l_orderkey"), value_set=orders)))
    for step, table in enumerate(("lineitem", "orders", "lineitem", "customer")):
        inserts, deletes = random_batch(c.ctx.store, table, rng, 12, salt=20_000_000 + 1000 * step)
        client.apply_update(table, inserts=inserts, deletes=deletes)
    for wq in QUERIES:
        got = client.sketch(wq.name, include_partitions=True)
        assert got.sketch() == reference(c, wq.sql, got), wq.name


def test_run_query_with_the_sketch_returns_the_plain_result(svc):
    client = svc.client()
    for wq in QUERIES:
        with_sketch = client.run_query(query=wq.name, use_sketch=True)
        plain = client.run_query(query=wq.name, use_sketch=False)
        assert isinstance(with_sketch.rows, pa.Table)
        assert same_rows(with_sketch.rows, plain.rows), wq.name
