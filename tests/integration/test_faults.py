"""Issue 28: faults injected under a running service with real processes, Ray and
sockets (``benchmarks.faults``, also ``imp bench faults``): the local raylet killed under
a supervised ``imp serve``, a worker node of a 3-node Ray cluster removed mid-stream, and
the active server killed with ``kill -9`` while a standby waits. In each, no
acknowledged update is lost, every sketch is exact afterwards, and service resumes
within a bound (no call hangs: the client's deadline is far above it)."""

from __future__ import annotations

import pytest

from benchmarks.faults import failover_fault, node_fault, raylet_fault

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def test_a_standby_takes_over_when_the_active_server_is_killed(tmp_path):
    r = failover_fault(tmp_path, rows=5000, batches=6, batch=10)
    # every batch acknowledged, once: the ones cut off were retried with their keys
    assert r["lost"] == 0 and r["duplicated"] == 0 and r["refused"] == 0 and r["exact"], r
    assert r["acked"] == 6 + 1, r  # and the one that found the standby serving
    assert r["served_by_standby"] and r["lease_takeovers"] == 1, r
    # the take-over is logged and counted where operators look
    assert r["takeover_logged"] and r["takeovers_metric"] == 1, r
    # the killed owner's process is gone: no wait for its lease (5 s) to expire
    assert r["recover_s"] < 30, r


@pytest.mark.ray
def test_a_killed_raylet_is_replaced_by_a_new_server(tmp_path):
    r = raylet_fault(tmp_path, rows=5000, batches=6, batch=10)
    assert r["lost"] == 0 and r["duplicated"] == 0 and r["refused"] == 0 and r["exact"], r
    assert r["recover_s"] < 240, r


@pytest.mark.ray
def test_a_lost_worker_node_moves_its_shards(tmp_path):
    r = node_fault(tmp_path, rows=5000, batches=6, batch=10)
    assert r["lost"] == 0 and r["duplicated"] == 0 and r["exact"] and r["victim_gone"], r
    assert r["shard_restarts"] >= 1 and r["recover_s"] < 120, r
