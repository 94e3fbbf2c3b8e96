"""``imp bench scale --cluster DIR [--remove-node I]``: the options are checked before
any data is prepared, and the state per node is summed from the live shards."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from benchmarks.scale import join_cluster, placement
from services.ray_cluster import Cluster, ClusterError, Node


def _cluster(tmp_path) -> Cluster:
    nodes = [Node(0, "head", 6001, 1, 4 << 30, 256 << 20),
             Node(1, "worker", 6002, 1, 4 << 30, 256 << 20)]
    c = Cluster(str(tmp_path), "127.0.0.1:6379", str(tmp_path / "tmp"), nodes, 0.0,
                str(tmp_path / "token"))
    c.save()
    return c


def test_the_local_backend_needs_no_cluster_and_cannot_lose_a_node(tmp_path):
    assert join_cluster(None, None) == (None, None)
    with pytest.raises(ValueError, match="needs a cluster"):
        join_cluster(None, 1)
    with pytest.raises(ClusterError, match="no cluster is described"):
        join_cluster(tmp_path / "none", None)


def test_a_cluster_is_joined_with_its_address_and_token(tmp_path, monkeypatch):
    c = _cluster(tmp_path)
    for name in ("IMP_RAY_ADDRESS", "RAY_AUTH_MODE", "RAY_AUTH_TOKEN_PATH"):
        # set first, so the teardown restores the variable as it was (absent): joining
        # sets Ray's token mode, which would break every later Ray start of the worker
        monkeypatch.setenv(name, "")
        monkeypatch.delenv(name)
    with pytest.raises(ValueError, match="no worker node 0"):
        join_cluster(tmp_path, 0)  # the head cannot be removed
    with pytest.raises(ValueError, match="no worker node 7"):
        join_cluster(tmp_path, 7)
    assert "IMP_RAY_ADDRESS" not in os.environ  # refused: nothing changed
    found, address = join_cluster(tmp_path, 1)
    assert address == c.address and [n.index for n in found.nodes] == [0, 1]
    assert os.environ["IMP_RAY_ADDRESS"] == c.address
    assert os.environ["RAY_AUTH_MODE"] == "token"


def test_the_cli_refuses_a_wrong_cluster_before_preparing_data(tmp_path):
    _cluster(tmp_path)
    for extra, said in ((["--cluster", str(tmp_path / "none")], "no cluster is described"),
                        (["--remove-node", "1"], "needs a cluster"),
                        (["--cluster", str(tmp_path), "--remove-node", "0"], "no worker node 0")):
        run = subprocess.run([sys.executable, "-m", "services.cli", "bench", "scale",
                              "--sf", "0.01", "--data-root", str(tmp_path / "data"), *extra],
                             capture_output=True, text=True, timeout=120)
        assert run.returncode == 2 and said in run.stderr, run.stderr
        assert not (tmp_path / "data").exists()


class _Diagnostics:
    def __init__(self, spread):
        self.spread = spread

    def state_by_node(self):
        return self.spread


class _Coordinator:
    def __init__(self, spread):
        self.diagnostics = _Diagnostics(spread)


def test_placement_sums_each_nodes_shards_largest_first():
    MiB = 1 << 20
    report = placement(_Coordinator({"node-a-0123456789": {"q1": 30 * MiB},
                                     "node-b-0123456789": {"q2": 50 * MiB, "q3": 20 * MiB}}))
    assert [n["node"] for n in report["nodes"]] == ["node-b-01234", "node-a-01234"]
    assert report["nodes"][0] == {"node": "node-b-01234", "state_mib": 70.0, "share": 0.7,
                                  "queries": ["q2", "q3"]}
    assert report["total_mib"] == 100.0 and report["max_share"] == 0.7
    assert json.loads(json.dumps(report)) == report
    assert placement(_Coordinator({})) == {"nodes": [], "total_mib": 0.0, "max_share": 0.0}


def test_a_call_that_finds_its_worker_lost_is_retried_and_each_loss_recorded(monkeypatch):
    """After a node removal a query's worker may be found lost again (a recovered shard
    on a node not yet known dead, or one Ray's memory monitor killed): the bench asks
    again, as a client retries UNAVAILABLE, and records each loss; other errors, and a
    loss past the recovery timeout, end the run."""
    import benchmarks.scale as scale
    from imp_core.errors import WorkerLostError

    monkeypatch.setattr(scale.time, "sleep", lambda _s: None)
    answers = iter([WorkerLostError("worker w1 is lost"), WorkerLostError("worker w2 is lost"),
                    12.5])

    def call(x: float) -> float:
        got = next(answers)
        if isinstance(got, Exception):
            raise got
        return got * x

    lost: list[str] = []
    assert scale._retrying("t delete -> h01", lost, call, 2.0) == 25.0
    assert lost == ["t delete -> h01: worker w1 is lost", "t delete -> h01: worker w2 is lost"]

    def broken() -> None:
        raise ValueError("not a lost worker")

    with pytest.raises(ValueError):
        scale._retrying("other", lost, broken)
    assert len(lost) == 2

    monkeypatch.setattr(scale, "RECOVERY_TIMEOUT_S", -1.0)

    def always_lost() -> None:
        raise WorkerLostError("worker w3 is lost")

    with pytest.raises(WorkerLostError):
        scale._retrying("late", lost, always_lost)
    assert lost[-1] == "late: worker w3 is lost"
