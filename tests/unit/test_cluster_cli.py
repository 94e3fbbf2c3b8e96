"""``imp cluster`` without starting Ray: sizes and counts parsed or refused, a missing or
damaged description refused with a clear error, the head never removed, and the
environment a joining process needs (address and token)."""

from __future__ import annotations

import argparse
import json

import pytest

from services import ray_cluster
from services.cli.cluster_commands import _size
from services.cli.commands import _at_least_one
from services.cli.main import main


def test_sizes_and_counts():
    assert _size("512m") == 512 << 20 and _size("4g") == 4 << 30 and _size("4GiB") == 4 << 30
    assert _size("1024") == 1024 and _size("1.5g") == int(1.5 * (1 << 30))
    for bad in ("lots", "-1g", "0"):
        with pytest.raises(argparse.ArgumentTypeError):
            _size(bad)
    assert _at_least_one("3") == 3
    with pytest.raises(argparse.ArgumentTypeError, match=">= 1"):
        _at_least_one("0")


def test_a_missing_or_damaged_description_is_a_clear_error(tmp_path, capsys):
    assert main(["cluster", "status", "--dir", str(tmp_path)]) == 2
    assert "no cluster is described" in capsys.readouterr().err
    (tmp_path / ray_cluster.STATE_FILE).write_text("{not json")
    with pytest.raises(ray_cluster.ClusterError, match="not a cluster description"):
        ray_cluster.load(tmp_path)


def test_the_head_is_never_removed_and_the_env_names_the_token(tmp_path):
    head = ray_cluster.Node(0, "head", 50000, 1, 1 << 30, 1 << 28, {})
    c = ray_cluster.Cluster(str(tmp_path), "127.0.0.1:6379", str(tmp_path / "ray"), [head],
                            0.0, str(tmp_path / "auth_token"))
    c.save()
    again = ray_cluster.load(tmp_path)
    assert again == c and json.loads((tmp_path / "cluster.json").read_text())["nodes"]
    with pytest.raises(ray_cluster.ClusterError, match="head node cannot be removed"):
        ray_cluster.remove_node(again, 0)
    with pytest.raises(ray_cluster.ClusterError, match="no node 7"):
        ray_cluster.remove_node(again, 7)
    assert again.env() == {"IMP_RAY_ADDRESS": "127.0.0.1:6379", "RAY_AUTH_MODE": "token",
                           "RAY_AUTH_TOKEN_PATH": str(tmp_path / "auth_token")}
    with pytest.raises(ray_cluster.ClusterError, match="at least 1 node"):
        ray_cluster.up(0, tmp_path / "other")
    with pytest.raises(ray_cluster.ClusterError, match="already described"):
        ray_cluster.up(2, tmp_path)
