"""How a Ray call's failure reaches the coordinator (``imp_actors.handles``): an actor
lost in any way Ray reports (died, its node died, killed by Ray's memory monitor) is a
``WorkerLostError``, which the coordinator recovers from the shard's checkpoint; a
domain error raised inside the actor is re-raised as itself."""

from __future__ import annotations

import pytest
import ray
import ray.exceptions as rex

from imp_actors.handles import _RayPending
from imp_core.errors import UnknownQueryError, WorkerLostError


class _Backend:
    def check(self) -> None:
        return None


class _Handle:
    name = "imp-worker-test"
    backend = _Backend()


def _raising(exc: BaseException):
    def get(ref, timeout=None):
        raise exc
    return get


@pytest.mark.parametrize("exc", [
    rex.OutOfMemoryError("4 worker(s) were killed due to the node running low on memory"),
    rex.NodeDiedError("node gone"),
    rex.WorkerCrashedError(),
    rex.ActorDiedError(),
])
def test_an_actor_lost_any_way_is_a_lost_worker(monkeypatch, exc):
    monkeypatch.setattr(ray, "get", _raising(exc))
    with pytest.raises(WorkerLostError, match="imp-worker-test is lost"):
        _RayPending(_Handle(), object()).result()


def test_a_domain_error_inside_the_actor_is_raised_as_itself(monkeypatch):
    cause = UnknownQueryError("no registered query 'q'")
    err = rex.RayTaskError("load", "traceback", cause)
    err.cause = cause
    monkeypatch.setattr(ray, "get", _raising(err))
    with pytest.raises(UnknownQueryError, match="no registered query"):
        _RayPending(_Handle(), object()).result()
