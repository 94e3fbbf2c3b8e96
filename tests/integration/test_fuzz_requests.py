"""A bounded run of the request fuzzer (``benchmarks/fuzz_requests.py``) against a live
server over a real socket: mutated protobuf messages and Arrow payloads of every unary
method get a status that names the client's mistake (never INTERNAL or UNKNOWN), a
refused request changes nothing, and the server keeps serving."""

from __future__ import annotations

import json

import pytest
from grpc_harness import reference, running_service

from benchmarks.fuzz_requests import base_requests, run_request_fuzz
from imp_core.workloads.queries import load_query

pytestmark = [pytest.mark.grpc, pytest.mark.integration]


def test_mutated_requests_get_clear_statuses_and_change_nothing(tmp_path):
    with running_service(tmp_path / "svc") as svc:
        client = svc.client()
        sql = load_query("q_groups_1000").sql
        client.register("groups", sql, partitions={"t1000g.a": 8})
        base = base_requests(svc.coordinator.ctx.store.read("t1000g"), "groups", sql)
        def ensure() -> None:  # a mutated DropQuery may have dropped it
            if "groups" not in {q.name for q in svc.coordinator.queries()}:
                client.register("groups", sql, partitions={"t1000g.a": 8})

        report = run_request_fuzz(svc.address, svc.token, svc.state, base, rounds=400,
                                  seed=1, ensure=ensure)
        assert report.findings == [], json.dumps(report.findings, indent=1)
        assert report.requests == 400
        assert sum(n for k, n in report.statuses.items() if not k.endswith(" OK")) > 100
        assert client.health() == "SERVING"
        # whatever the accepted requests did (a mutated DropQuery may name "groups"),
        # every registered query's sketch is still exact
        for q in client.queries():
            record = client.sketch(q.name, include_partitions=True)
            query_sql = svc.coordinator.ctx.queries.get(q.name).record.sql
            assert record.sketch() == reference(svc.coordinator, query_sql, record)
