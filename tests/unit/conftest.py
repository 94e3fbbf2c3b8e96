"""Unit tests: logic without a cluster. They run real Delta tables in temporary folders
where the logic is about them, but never start Ray or Spark: an autouse fixture turns
either into an immediate failure (Ray Serve's unit tests do the same), so a test that
needs one belongs in ``tests/integration``."""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def no_cluster(monkeypatch):
    """Starting Ray or Spark fails the test."""
    import imp_actors.handles as handles
    import imp_core.spark.session as session

    def forbidden(*args, **kwargs):
        raise AssertionError("a unit test started Ray or Spark; move it to tests/integration")

    monkeypatch.setattr(handles.RayBackend, "start", forbidden)
    monkeypatch.setattr(session, "get_spark", forbidden)
