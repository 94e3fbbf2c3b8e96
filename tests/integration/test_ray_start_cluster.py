"""The service on a Ray cluster started as one is in production: ``ray start --head`` and
``ray start --address`` worker nodes as separate process trees on loopback
(``services.ray_cluster``, what ``imp cluster up`` runs), each with its own raylet,
object store and caps; the coordinator joins it by address (``IMP_RAY_ADDRESS``).

Queries' shards spread over the nodes; join sides beyond the per-actor budget are probed
through shared indexes whose disk copies the actors on every node map from the store;
a worker node killed (every process of it, as a lost machine) while updates stream
loses no acknowledged update and every sketch stays equal to a recapture from scratch
(the reference evaluator at the sketch's table versions)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.ray, pytest.mark.integration, pytest.mark.slow]

SUPPORT = Path(__file__).resolve().parents[1] / "support"
ROOT = SUPPORT.parents[1]


def test_ray_start_nodes_host_the_shards_and_a_lost_node_loses_nothing(tmp_path):
    """The scenario runs in a process of its own (``tests/support/ray_start_scenario.py``
    says why); it fails here with its output."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(SUPPORT), str(ROOT), os.environ.get("PYTHONPATH", "")])}
    for name in ("RAY_ADDRESS", "IMP_RAY_ADDRESS", "RAY_AUTH_MODE"):
        env.pop(name, None)  # the scenario's own cluster, not one a test before set
    run = subprocess.run([sys.executable, str(SUPPORT / "ray_start_scenario.py"),
                          str(tmp_path)], capture_output=True, text=True, timeout=900,
                         env=env, cwd=ROOT)
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-12000:]
    assert "exact sketches after" in run.stdout and "nothing of the cluster left" in \
        run.stdout, run.stdout[-4000:]
