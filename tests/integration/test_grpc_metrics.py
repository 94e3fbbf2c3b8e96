"""The Prometheus endpoint of a running server, scraped over HTTP and read with
prometheus_client's own text parser: per-query series (maintenance latency, staleness,
state, shards, load, actor restarts) and per-method gRPC series appear with the values
the calls made imply, and a dropped query's series disappear. Two servers in one process
each export only their own (a registry per server)."""

from __future__ import annotations

import time
import urllib.request
from collections import defaultdict

import numpy as np
import pytest
from grpc_harness import reference, running_service
from prometheus_client.parser import text_string_to_metric_families
from runtime_support import random_batch

from imp_actors.runtime_config import Autoscaling
from imp_core.workloads.queries import load_query
from services.client import RemoteError
from services.exporter import METRIC_NAMES

pytestmark = [pytest.mark.grpc, pytest.mark.integration]

SQL = load_query("q_having_2").sql  # t5000g, groups by a: shardable


class Scrape:
    """One scrape: samples by name, each as (labels, value)."""

    def __init__(self, address: str):
        with urllib.request.urlopen(f"http://{address}/metrics", timeout=30) as resp:
            assert resp.status == 200
            assert resp.headers["Content-Type"].startswith("text/plain")
            text = resp.read().decode()
        self.families = {f.name: f for f in text_string_to_metric_families(text)}
        self.samples: dict[str, list[tuple[dict, float]]] = defaultdict(list)
        for f in self.families.values():
            for s in f.samples:
                self.samples[s.name].append((s.labels, s.value))

    def value(self, name: str, **labels: str) -> float:
        hits = [v for ls, v in self.samples[name] if all(ls.get(k) == x
                                                           for k, x in labels.items())]
        assert len(hits) == 1, (name, labels, self.samples[name])
        return hits[0]

    def queries(self) -> set[str]:
        return {ls["query"] for name, rows in self.samples.items() for ls, _ in rows
                if "query" in ls}


def _update(svc, client, seed: int):
    rng = np.random.default_rng(seed)
    ins, dels = random_batch(svc.coordinator.ctx.store, "t5000g", rng, 12,
                             salt=20_000_000 + 1000 * seed)
    return client.apply_update("t5000g", inserts=ins, deletes=dels)


def test_metrics_over_http(tmp_path):
    with running_service(tmp_path / "a", metrics=True) as svc:
        client = svc.client()
        address = svc.server.metrics_address
        assert address is not None and address.startswith("127.0.0.1:")
        first = Scrape(address)
        assert first.queries() == set()
        assert set(METRIC_NAMES) <= set(first.families)  # every family, even empty

        policy = Autoscaling(min_shards=1, max_shards=2, target_load=0.5,
                             upscale_delay_s=3600, downscale_delay_s=3600)
        client.register("h", SQL, partitions={"t5000g.a": 16}, autoscaling=policy)
        client.register("g", SQL, partitions={"t5000g.a": 8})
        for seed in range(3):  # three versions, each maintained by a current GetSketch
            _update(svc, client, seed)
            got = client.sketch("h", include_partitions=True)
            assert got.sketch() == reference(svc.coordinator, SQL, got)
        with pytest.raises(RemoteError):
            client.sketch("nosuch")
        client.queries()

        m = Scrape(address)
        assert m.queries() == {"h", "g"}
        # maintenance latency: a histogram per query, buckets cumulative, +Inf = count
        buckets = sorted(((float(ls["le"]), v) for ls, v in
                          m.samples["imp_query_maintenance_duration_seconds_bucket"]
                          if ls["query"] == "h"))
        counts = [v for _, v in buckets]
        assert counts == sorted(counts) and buckets[-1][0] == float("inf")
        count = m.value("imp_query_maintenance_duration_seconds_count", query="h")
        assert counts[-1] == count >= 3
        assert 0 < m.value("imp_query_maintenance_duration_seconds_sum", query="h") < 60
        assert m.value("imp_query_staleness_versions", query="h") == 0   # just maintained
        assert m.value("imp_query_staleness_seconds", query="h") == 0
        assert m.value("imp_query_state_bytes", query="h") == \
            svc.coordinator.info("h").state_bytes > 0
        assert m.value("imp_query_shards", query="h") == 1
        assert m.value("imp_query_live", query="h") == 1
        assert m.value("imp_query_actor_restarts_total", query="h") == 0
        assert m.value("imp_query_load", query="h") > 0   # it maintained, it had load
        assert m.value("imp_query_autoscale_max_shards", query="h") == 2
        assert [ls for ls, _ in m.samples["imp_query_autoscale_max_shards"]
                if ls["query"] == "g"] == []  # not autoscaled
        assert m.value("imp_registered_queries") == 2
        assert m.value("imp_live_actors") == 2
        assert m.value("imp_coordinator_events_total", event="registered") == 2
        # per gRPC method: calls by status code and a latency histogram
        calls = m.value("imp_grpc_calls_total", service="imp.v1.SketchService",
                        method="GetSketch", code="OK")
        assert calls == 3
        assert m.value("imp_grpc_calls_total", method="GetSketch", code="NOT_FOUND") == 1
        assert m.value("imp_grpc_calls_total", method="RegisterQuery", code="OK") == 2
        assert m.value("imp_grpc_call_duration_seconds_count", method="GetSketch") == 4
        assert m.value("imp_grpc_call_duration_seconds_sum", method="GetSketch") > 0
        assert m.value("imp_grpc_open_watches") == 0
        # the Stats RPC reports the same calls (CallMetrics on the Prometheus metrics)
        service = client.stats()["service"]
        assert service["methods"]["GetSketch"]["by_status"] == {"OK": 3, "NOT_FOUND": 1}

        # staleness: a commit the lazy query has not maintained yet, in versions and time
        # (the time since the commit: within the wall time from before the update to after
        # the scrape; the log entry's time may lag the clock by the file system's tick)
        t0 = time.time()
        _update(svc, client, 10)
        m = Scrape(address)
        wall = time.time() - t0
        assert m.value("imp_query_staleness_versions", query="h") == 1
        stale = m.value("imp_query_staleness_seconds", query="h")
        assert 0 < stale <= wall + 0.05, (stale, wall)
        assert m.value("imp_query_pending_tuples", query="h") > 0

        # a lost shard's recovery counts as an actor restart of its query
        svc.coordinator.diagnostics.kill_shard("h", 0)
        got = client.sketch("h", include_partitions=True)
        assert got.sketch() == reference(svc.coordinator, SQL, got)
        m = Scrape(address)
        assert m.value("imp_query_actor_restarts_total", query="h") == 1
        assert m.value("imp_query_staleness_versions", query="h") == 0

        # a dropped query's series are gone from the next scrape
        client.drop("g")
        m = Scrape(address)
        assert m.queries() == {"h"} and m.value("imp_registered_queries") == 1
        assert m.value("imp_grpc_calls_total", method="DropQuery", code="OK") == 1


def test_each_server_exports_only_its_own(tmp_path):
    with running_service(tmp_path / "one", metrics=True) as one, \
            running_service(tmp_path / "two", metrics=True) as two:
        one.client().register("first", SQL, partitions={"t5000g.a": 4})
        two.client().register("second", SQL, partitions={"t5000g.a": 4})
        two.client().queries()
        a, b = Scrape(one.server.metrics_address), Scrape(two.server.metrics_address)
        assert a.queries() == {"first"} and b.queries() == {"second"}
        assert a.value("imp_grpc_calls_total", method="RegisterQuery", code="OK") == 1
        assert [ls for ls, _ in a.samples["imp_grpc_calls_total"]
                if ls["method"] == "ListQueries"] == []
        assert b.value("imp_grpc_calls_total", method="ListQueries", code="OK") == 1
    with running_service(tmp_path / "off") as off:  # a ServerConfig built in code: none
        assert off.server.metrics_address is None
        assert off.client().stats()["service"]["methods"] == {}
