"""Every Ray API call of the runtime lives here ("all Ray calls go through one module").

A ``WorkerHandle`` has one typed method per ``QueryWorker`` method the coordinator uses;
each starts the call and returns a ``Pending`` whose ``result()`` waits for it. Two
backends with the same interface (``Backend``):
- ``LocalBackend``: workers are plain objects in this process (tests, embedded use);
- ``RayBackend``: each worker is a detached, named Ray actor in the runtime's namespace,
  so that actors survive a coordinator restart and can be found again by name.

Invariant: a call either returns the worker's result, raises the domain error the worker
raised (an ``ImpError``), raises ``WorkerLostError`` when the worker process is gone, or
``RuntimeUnavailableError`` as soon as the backend is marked lost (``mark_lost``, by the
runtime watch) instead of waiting on a runtime that is gone; Ray's own exception types
never leave this module.
"""

from __future__ import annotations

import logging
import os
import threading
from dataclasses import dataclass
from typing import Any, Callable, Generic, Mapping, Protocol, Sequence, TypeVar

import pyarrow as pa

from imp_actors.runtime_config import RuntimeConfig
from imp_actors.types import CheckpointInfo
from imp_actors.worker import ApplyResult, QueryWorker, WorkerSpec, WorkerStatus
from imp_core.engine.operators.base import TableDelta
from imp_core.errors import ImpError, RuntimeUnavailableError, WorkerLostError

log = logging.getLogger(__name__)

WORKER_PREFIX = "imp-worker-"

T = TypeVar("T")
T_co = TypeVar("T_co", covariant=True)
StateTables = tuple[dict[str, pa.Table], dict[str, int]]
# how long one wait on a Ray result lasts before the backend's liveness is looked at again
_WAIT_SLICE_S = 0.5


def unavailable(kind: str, reason: str) -> str:
    """The message of a call refused because the runtime is lost."""
    return (f"the {kind} runtime of the service is unavailable ({reason}); nothing was "
            "done: retry once the service reports SERVING again")


class Pending(Protocol[T_co]):
    """A call in flight; ``result()`` waits for it (see the module invariant)."""

    def result(self) -> T_co: ...


class WorkerHandle(Protocol):
    """One ``QueryWorker``, wherever it runs: each method starts the worker's method of
    the same name and returns at once; ``kill`` stops the worker for good."""

    name: str

    def load(self, spec: WorkerSpec, checkpoint: str | None = None,
             state: tuple[Mapping[str, pa.Table], Mapping[str, int]] | None = None
             ) -> Pending[WorkerStatus]: ...

    def apply(self, changes: Mapping[str, TableDelta], from_versions: Mapping[str, int],
              to_versions: Mapping[str, int]) -> Pending[ApplyResult]: ...

    def checkpoint(self) -> Pending[CheckpointInfo]: ...

    def state(self) -> Pending[StateTables]: ...

    def status(self) -> Pending[WorkerStatus]: ...

    def stats(self) -> Pending[list[dict]]: ...

    def wait_indexes(self, timeout_s: float) -> Pending[bool]: ...

    def ping(self) -> Pending[int]: ...

    def node(self) -> Pending[str]: ...

    def kill(self) -> None: ...


@dataclass
class _Done(Generic[T]):
    value: T | None = None
    error: BaseException | None = None

    def result(self) -> T:
        if self.error is not None:
            raise self.error
        return self.value  # type: ignore[return-value]


class LocalWorkerHandle:
    """A worker object in this process; calls run at once, errors surface in ``result``."""

    def __init__(self, name: str):
        self.name = name
        self.worker: QueryWorker | None = QueryWorker()

    def _run(self, call: Callable[[QueryWorker], T]) -> Pending[T]:
        try:
            if self.worker is None:
                raise WorkerLostError(f"worker {self.name} was stopped")
            return _Done(call(self.worker))
        except BaseException as exc:  # delivered by result(), like a remote call
            return _Done(error=exc)

    def load(self, spec: WorkerSpec, checkpoint: str | None = None,
             state: tuple[Mapping[str, pa.Table], Mapping[str, int]] | None = None
             ) -> Pending[WorkerStatus]:
        return self._run(lambda w: w.load(spec, checkpoint, state))

    def apply(self, changes: Mapping[str, TableDelta], from_versions: Mapping[str, int],
              to_versions: Mapping[str, int]) -> Pending[ApplyResult]:
        return self._run(lambda w: w.apply(changes, from_versions, to_versions))

    def checkpoint(self) -> Pending[CheckpointInfo]:
        return self._run(lambda w: w.checkpoint())

    def state(self) -> Pending[StateTables]:
        return self._run(lambda w: w.state())

    def status(self) -> Pending[WorkerStatus]:
        return self._run(lambda w: w.status())

    def stats(self) -> Pending[list[dict]]:
        return self._run(lambda w: w.stats())

    def wait_indexes(self, timeout_s: float) -> Pending[bool]:
        return self._run(lambda w: w.wait_indexes(timeout_s))

    def ping(self) -> Pending[int]:
        return self._run(lambda w: w.ping())

    def node(self) -> Pending[str]:
        return self._run(lambda w: w.node())

    def kill(self) -> None:
        self.worker = None


class Backend(Protocol):
    """Where workers run: ``LocalBackend`` or ``RayBackend``."""

    kind: str

    def start(self) -> None: ...

    def spawn(self, name: str, node: str | None = None) -> WorkerHandle:
        """A new empty worker named ``name``, on ``node`` when the runtime has nodes and
        can (None: where the runtime chooses)."""
        ...

    def find(self, name: str) -> WorkerHandle | None: ...

    def worker_names(self) -> list[str]: ...

    def nodes(self) -> list[dict[str, Any]]: ...

    def known_nodes(self) -> list[dict[str, Any]]:
        """The nodes as last seen, without asking the runtime (for metrics)."""
        ...

    def problem(self, timeout: float) -> str | None:
        """What is wrong with the runtime now (None: nothing), found within about
        ``timeout`` seconds."""
        ...

    def mark_lost(self, reason: str | None) -> None:
        """From now on fail every actor call at once with ``reason`` (None: stop)."""
        ...

    def shutdown(self) -> None: ...


class LocalBackend:
    """Workers as objects in this process; no Ray."""

    kind = "local"

    def __init__(self, config: RuntimeConfig):
        self.config = config
        self._n = 0

    def start(self) -> None:
        return None

    def spawn(self, name: str, node: str | None = None) -> LocalWorkerHandle:
        return LocalWorkerHandle(name)

    def find(self, name: str) -> LocalWorkerHandle | None:
        return None  # in-process workers do not outlive their coordinator

    def worker_names(self) -> list[str]:
        return []

    def nodes(self) -> list[dict[str, Any]]:
        return [{"node_id": "local", "alive": True, "address": "127.0.0.1"}]

    def known_nodes(self) -> list[dict[str, Any]]:
        return self.nodes()

    def problem(self, timeout: float) -> str | None:
        return None  # this process is the runtime

    def mark_lost(self, reason: str | None) -> None:
        return None

    def shutdown(self) -> None:
        return None


def gather(pending: Sequence[Pending[T]]) -> list[T]:
    """Results in order; raises the first failure after waiting for all of them."""
    out: list[Any] = []
    first: BaseException | None = None
    for p in pending:
        try:
            out.append(p.result())
        except BaseException as exc:
            out.append(exc)
            first = first or exc
    if first is not None:
        raise first
    return out


# -- Ray ------------------------------------------------------------------------------------
class _RayPending(Generic[T]):
    def __init__(self, handle: RayWorkerHandle, ref: Any):
        self.handle = handle
        self.ref = ref

    def result(self) -> T:
        import ray
        import ray.exceptions as rex

        try:
            while True:  # in slices, so a runtime found lost meanwhile ends the wait
                self.handle.backend.check()
                try:
                    return ray.get(self.ref, timeout=_WAIT_SLICE_S)
                except rex.GetTimeoutError:
                    continue
        except rex.RayTaskError as exc:
            cause = getattr(exc, "cause", None)
            if isinstance(cause, ImpError):
                raise cause from None
            raise
        except (rex.RayActorError, rex.ActorUnavailableError, rex.WorkerCrashedError,
                rex.ObjectLostError, rex.NodeDiedError) as exc:
            raise WorkerLostError(f"worker {self.handle.name} is lost: "
                                  f"{type(exc).__name__}") from None
        except rex.OutOfMemoryError:
            # Ray's memory monitor killed the worker (its node near its memory limit):
            # lost like any other, and recovered from its checkpoint by the next use
            raise WorkerLostError(f"worker {self.handle.name} is lost: Ray killed it, its "
                                  f"node running low on memory") from None


class RayWorkerHandle:
    """A detached Ray actor running ``actor_class.RemoteQueryWorker``."""

    def __init__(self, name: str, actor: Any, backend: RayBackend):
        self.name = name
        self.actor = actor
        self.backend = backend

    def load(self, spec: WorkerSpec, checkpoint: str | None = None,
             state: tuple[Mapping[str, pa.Table], Mapping[str, int]] | None = None
             ) -> Pending[WorkerStatus]:
        return _RayPending(self, self.actor.load.remote(spec, checkpoint, state))

    def apply(self, changes: Mapping[str, TableDelta], from_versions: Mapping[str, int],
              to_versions: Mapping[str, int]) -> Pending[ApplyResult]:
        return _RayPending(self, self.actor.apply.remote(changes, from_versions, to_versions))

    def checkpoint(self) -> Pending[CheckpointInfo]:
        return _RayPending(self, self.actor.checkpoint.remote())

    def state(self) -> Pending[StateTables]:
        return _RayPending(self, self.actor.state.remote())

    def status(self) -> Pending[WorkerStatus]:
        return _RayPending(self, self.actor.status.remote())

    def stats(self) -> Pending[list[dict]]:
        return _RayPending(self, self.actor.stats.remote())

    def wait_indexes(self, timeout_s: float) -> Pending[bool]:
        return _RayPending(self, self.actor.wait_indexes.remote(timeout_s))

    def ping(self) -> Pending[int]:
        return _RayPending(self, self.actor.ping.remote())

    def node(self) -> Pending[str]:
        return _RayPending(self, self.actor.node.remote())

    def kill(self) -> None:
        import ray

        if self.backend.lost is not None:
            return  # nothing to reach: the actor went with its runtime (or is cut off)
        try:
            ray.kill(self.actor, no_restart=True)
        except Exception as exc:  # already gone
            log.debug("kill %s: %s", self.name, exc)


class RayBackend:
    """Detached, named actors in ``config.ray_namespace``; starts a local Ray if needed."""

    kind = "ray"

    def __init__(self, config: RuntimeConfig):
        self.config = config
        self.started_ray = False
        self.lost: str | None = None  # why the runtime is lost (``mark_lost``)
        self._probe: threading.Thread | None = None  # a cluster probe still running
        self._nodes: list[dict[str, Any]] = []  # as the last answered probe saw them

    def check(self) -> None:
        """``RuntimeUnavailableError`` while the runtime is marked lost."""
        lost = self.lost
        if lost is not None:
            raise RuntimeUnavailableError(unavailable(self.kind, lost))

    def mark_lost(self, reason: str | None) -> None:
        self.lost = reason

    def known_nodes(self) -> list[dict[str, Any]]:
        nodes = self._nodes
        return [dict(n, alive=False) for n in nodes] if self.lost is not None else list(nodes)

    def problem(self, timeout: float) -> str | None:
        import ray

        if not ray.is_initialized():
            return "Ray is not running in this process"
        if self.started_ray:  # a Ray of our own: are its processes still running?
            node = getattr(ray._private.worker, "_global_node", None)
            dead = node.dead_processes() if node is not None else []
            if dead:
                return "the local Ray's " + ", ".join(
                    f"{kind} (exit code {proc.returncode})" for kind, proc in dead) + \
                    " exited"
        return self._ask_cluster(timeout)

    def _ask_cluster(self, timeout: float) -> str | None:
        """Ask the cluster for its nodes on a side thread, so a GCS that does not answer
        cannot stall the watch (at most one such probe runs at a time)."""
        import ray

        if self._probe is not None and self._probe.is_alive():
            return f"the Ray cluster {self.config.ray_address or '(local)'} does not answer"
        answer: dict[str, Any] = {}

        def ask() -> None:
            try:
                answer["nodes"] = ray.nodes()
            except Exception as exc:  # whatever the client raises, the runtime is gone
                answer["error"] = f"{type(exc).__name__}: {exc}"

        self._probe = threading.Thread(target=ask, name="imp-ray-probe", daemon=True)
        self._probe.start()
        self._probe.join(timeout)
        where = self.config.ray_address or "(local)"
        if "error" in answer:
            return f"the Ray cluster {where} fails: {answer['error']}"
        if "nodes" not in answer:
            return f"the Ray cluster {where} does not answer within {timeout:.0f} s"
        self._nodes = [_node(n) for n in answer["nodes"]]
        if not any(n["alive"] for n in self._nodes):
            return f"the Ray cluster {where} has no live node"
        return None

    def start(self) -> None:
        import ray

        if ray.is_initialized():
            return
        os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
        address = self.config.ray_address
        kwargs: dict[str, Any] = dict(namespace=self.config.ray_namespace,
                                      log_to_driver=False, logging_level=logging.WARNING)
        if address:
            # the actors' processes are started by the nodes' raylets, whose environment
            # is the node's, not this process's: the service's own settings (IMP_*: index
            # budgets, shared indexes on or off, ...) go with its job to every actor (a
            # Ray this process starts inherits them, and has no runtime-env agent)
            settings = {k: v for k, v in os.environ.items() if k.startswith("IMP_")}
            if settings:
                kwargs["runtime_env"] = {"env_vars": settings}
            ray.init(address=address, **kwargs)
        else:
            # "local": always a new Ray of our own, never one another process started here
            ray.init(address="local", include_dashboard=False, **kwargs)
            self.started_ray = True
            _ensure_reaper()

    def spawn(self, name: str, node: str | None = None) -> RayWorkerHandle:
        from imp_actors.actor_class import RemoteQueryWorker

        self.check()
        res = self.config.resources
        # soft: a node lost since it was chosen leaves the choice to Ray (SPREAD)
        strategy: Any = "SPREAD"
        if node is not None:
            from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

            strategy = NodeAffinitySchedulingStrategy(node, soft=True)
        options: dict[str, Any] = dict(name=name, namespace=self.config.ray_namespace,
                                       lifetime="detached", num_cpus=res.num_cpus,
                                       max_restarts=0, scheduling_strategy=strategy)
        if res.memory_bytes:
            options["memory"] = res.memory_bytes
        return RayWorkerHandle(name, RemoteQueryWorker.options(**options).remote(), self)

    def find(self, name: str) -> RayWorkerHandle | None:
        import ray

        self.check()
        try:
            actor = ray.get_actor(name, namespace=self.config.ray_namespace)
        except ValueError:
            return None
        return RayWorkerHandle(name, actor, self)

    def worker_names(self) -> list[str]:
        import ray.util

        found = ray.util.list_named_actors(all_namespaces=True)
        return sorted(a["name"] for a in found
                      if a.get("namespace") == self.config.ray_namespace
                      and a["name"].startswith(WORKER_PREFIX))

    def nodes(self) -> list[dict[str, Any]]:
        import ray

        if self.lost is not None:  # asking a lost runtime would hang: what it last said
            return [dict(n, alive=False) for n in self._nodes]
        self._nodes = [_node(n) for n in ray.nodes()]
        return list(self._nodes)

    def shutdown(self) -> None:
        import ray

        if self.started_ray and ray.is_initialized():
            if self.lost is not None:  # its processes are gone: nothing to stop cleanly
                log.warning("not stopping the lost local Ray (%s)", self.lost)
                self.started_ray = False
                return
            ray.shutdown()
            self.started_ray = False


def _node(n: dict[str, Any]) -> dict[str, Any]:
    return {"node_id": n["NodeID"], "alive": n["Alive"], "address": n.get("NodeManagerAddress"),
            "cpus": n.get("Resources", {}).get("CPU", 0),
            "memory": n.get("Resources", {}).get("memory", 0)}


_reaper: Any = None


def _ensure_reaper() -> None:
    """One reaper per process that starts a local Ray: if this process is killed, Ray's
    agents do not outlive it (``imp_actors.reaper``)."""
    global _reaper
    if _reaper is None or _reaper.poll() is not None:
        from imp_actors.reaper import start_reaper

        _reaper = start_reaper()


def make_backend(config: RuntimeConfig) -> Backend:
    if config.backend == "local":
        return LocalBackend(config)
    if config.backend == "ray":
        return RayBackend(config)
    raise ValueError(f"unknown backend {config.backend!r} (ray or local)")
