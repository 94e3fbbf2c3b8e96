"""Autoscaling: a query's shard count follows its measured maintenance load, within its
``config.Autoscaling`` bounds (the policy of Ray Serve's autoscaler, for shards).

The load is the shard-seconds of maintenance per second of wall time over the policy's
window (``telemetry.LoadMeter``): with K shards splitting the work, each is busy
``load / K`` of the time. The query wants ``ceil(load / target_load)`` shards, moved into
``[min_shards, max_shards]`` and under the ceiling the runtime allows now (``ceiling``).
That wish must hold without a break for ``upscale_delay_s`` before the query grows, or
``downscale_delay_s`` before it shrinks; a change of direction, a wish met, or a finished
rescale starts the wait over, so a load that hovers at a boundary does not flap.

Invariants:
- ``decide`` is a pure function of its arguments (no clock, no I/O): the control loop
  passes the time, the tests a fake one;
- a query is in exactly one ``Trend``; while a shard count it asked for is not reached
  (``RESCALING``: the control loop sets it as the query's target and the reconcile loop
  converges to it, ``reconcile.py``) no other is asked for;
- a decision never leaves ``[1, ceiling]`` and never leaves ``[min_shards, max_shards]``
  unless the ceiling is below ``min_shards``.
"""

from __future__ import annotations

import enum
import math
import threading
import time
from dataclasses import dataclass
from typing import Callable

from imp_actors.runtime_config import Autoscaling


class Trend(enum.Enum):
    STEADY = "steady"        # the load wants the shards the query has
    RISING = "rising"        # it has wanted more since ``ScaleState.since``
    FALLING = "falling"      # it has wanted fewer since ``ScaleState.since``
    RESCALING = "rescaling"  # a shard count this autoscaler asked for is not reached yet


@dataclass(frozen=True)
class ScaleState:
    trend: Trend
    since: float  # when the trend began (clock of the caller)


@dataclass(frozen=True)
class Decision:
    state: ScaleState    # the query's state after this decision
    desired: int         # the shards the load asks for, within bounds and ceiling
    target: int | None   # the shard count to move to now; None: stay


def desired_shards(policy: Autoscaling, load: float, ceiling: int) -> int:
    """``ceil(load / target_load)`` within the policy's bounds and under ``ceiling``."""
    # a hair of tolerance: a load of exactly k targets wants k shards, not k + 1
    wanted = math.ceil(load / policy.target_load - 1e-9) if load > 0 else 0
    return max(1, min(policy.clamp(wanted), ceiling))


def ceiling(policy: Autoscaling, shards: int, *, max_shards: int,
            max_live_actors: int | None, live_actors: int, splittable: bool) -> int:
    """The most shards the autoscaler may give a query of ``shards`` shards now: its
    policy's maximum, ``IMP_MAX_SHARDS`` (``max_shards``), the live-actor cap, and 1 for
    a query whose state cannot be re-split (join sides probed in the data layer). It
    grows only into free actor slots: a rescale starts the new shards while the old ones
    still run, so growing to K' needs ``live_actors + K'`` within the cap, and it never
    evicts another query to grow (``live_actors`` counts this query's shards too)."""
    if not splittable:
        return 1
    top = min(policy.max_shards, max_shards)
    if max_live_actors is not None:
        top = min(top, max_live_actors, max(shards, max_live_actors - live_actors))
    return max(top, 1)


def decide(policy: Autoscaling, state: ScaleState, shards: int, load: float,
           ceiling: int, now: float) -> Decision:
    """The next step for a query of ``shards`` shards whose load is ``load``, at ``now``
    (see the module docstring). ``ceiling``: the most shards it may have now."""
    if state.trend is Trend.RESCALING:
        return Decision(state, shards, None)
    desired = desired_shards(policy, load, ceiling)
    if desired == shards:
        return Decision(ScaleState(Trend.STEADY, now), desired, None)
    trend = Trend.RISING if desired > shards else Trend.FALLING
    if state.trend is not trend:
        state = ScaleState(trend, now)
    delay = policy.upscale_delay_s if trend is Trend.RISING else policy.downscale_delay_s
    if now - state.since >= delay:
        return Decision(ScaleState(Trend.RESCALING, now), desired, desired)
    return Decision(state, desired, None)


class Autoscaler:
    """``decide`` for every autoscaled query, with each one's ``ScaleState`` kept between
    calls. Thread-safe; ``clock`` is monotonic seconds (a fake one in tests)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic):
        self.clock = clock
        self._lock = threading.Lock()
        self._states: dict[str, ScaleState] = {}

    def decide(self, name: str, policy: Autoscaling, shards: int, load: float,
               ceiling: int) -> Decision:
        """The decision for query ``name`` now; a decision with a target marks the query
        ``RESCALING`` until ``done``."""
        now = self.clock()
        with self._lock:
            state = self._states.get(name) or ScaleState(Trend.STEADY, now)
            decision = decide(policy, state, shards, load, ceiling, now)
            self._states[name] = decision.state
        return decision

    def done(self, name: str) -> None:
        """The rescale asked for ``name`` ended (done or failed): the next move waits its
        full delay from now."""
        with self._lock:
            self._states[name] = ScaleState(Trend.STEADY, self.clock())

    def forget(self, name: str) -> None:
        """``name`` is not measured now (evicted, dropped): start afresh when it is. A
        rescale in flight keeps its state until ``done``."""
        with self._lock:
            state = self._states.get(name)
            if state is not None and state.trend is not Trend.RESCALING:
                del self._states[name]

    def state(self, name: str) -> ScaleState | None:
        with self._lock:
            return self._states.get(name)

    def names(self) -> list[str]:
        with self._lock:
            return sorted(self._states)
