"""The autoscaling policy (``imp_actors.autoscaler``) and what it measures
(``imp_actors.telemetry``), with a fake clock and made-up load samples: no coordinator,
no actors. The end-to-end behaviour under a real update stream is in
``tests/integration/test_autoscaling.py``."""

from __future__ import annotations

import math

import pytest

from imp_actors.autoscaler import (
    Autoscaler,
    ScaleState,
    Trend,
    ceiling,
    decide,
    desired_shards,
)
from imp_actors.registry import QueryRecord, Registry
from imp_actors.runtime_config import Autoscaling
from imp_actors.storage import BlobStore
from imp_actors.telemetry import LatencyHistogram, LoadMeter
from services import convert
from services.cli.commands import _autoscaling
from services.errors import BadRequestError
from services.protos import pb

POLICY = Autoscaling(min_shards=1, max_shards=4, target_load=0.5, upscale_delay_s=10.0,
                     downscale_delay_s=60.0, window_s=30.0)


class FakeClock:
    def __init__(self, now: float = 1000.0):
        self.now = now

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


def run(policy: Autoscaling, shards: int, loads: list[float], every: float = 1.0,
        start: float = 0.0) -> list[tuple[float, int]]:
    """Drive ``decide`` once per ``every`` seconds with these loads, applying each target at
    once (a rescale that takes no time); returns (time, shards) after every step."""
    state = ScaleState(Trend.STEADY, start)
    out = []
    now = start
    for load in loads:
        d = decide(policy, state, shards, load, policy.max_shards, now)
        state = d.state
        if d.target is not None:
            assert d.state.trend is Trend.RESCALING
            shards = d.target
            state = ScaleState(Trend.STEADY, now)  # the rescale ended
        out.append((now, shards))
        now += every
    return out


# -- the decision ------------------------------------------------------------------------------

def test_desired_shards_is_the_load_over_the_target_within_bounds():
    assert desired_shards(POLICY, 0.0, 4) == 1            # idle: the minimum
    assert desired_shards(POLICY, 0.5, 4) == 1            # exactly one target: one shard
    assert desired_shards(POLICY, 0.51, 4) == 2
    assert desired_shards(POLICY, 1.5, 4) == 3
    assert desired_shards(POLICY, 50.0, 4) == 4           # the maximum
    assert desired_shards(POLICY, 50.0, 2) == 2           # under the ceiling
    two = Autoscaling(min_shards=2, max_shards=3)
    assert desired_shards(two, 0.0, 3) == 2
    assert desired_shards(two, 0.0, 1) == 1               # a ceiling below the minimum wins


def test_rises_under_load_only_after_the_upscale_delay():
    state = ScaleState(Trend.STEADY, 0.0)
    for t in range(10):  # load 1.6: four shards wanted, but not for 10 s yet
        d = decide(POLICY, state, 1, 1.6, 4, float(t))
        assert d.target is None and d.desired == 4 and d.state.trend is Trend.RISING
        assert d.state.since == 0.0
        state = d.state
    d = decide(POLICY, state, 1, 1.6, 4, 10.0)
    assert d.target == 4 and d.state.trend is Trend.RESCALING
    # while that rescale runs, nothing else is asked for, whatever the load
    assert decide(POLICY, d.state, 1, 0.0, 4, 500.0).target is None


def test_falls_when_idle_only_after_the_downscale_delay():
    history = run(POLICY, 4, [0.0] * 70)
    assert [s for t, s in history if t < 60] == [4] * 60
    assert history[60] == (60.0, 1)
    assert all(s == 1 for _, s in history[60:])


def test_respects_bounds_and_the_ceiling():
    policy = Autoscaling(min_shards=2, max_shards=3, target_load=0.1, upscale_delay_s=0,
                         downscale_delay_s=0)
    assert run(policy, 2, [100.0])[-1][1] == 3            # never beyond max_shards
    assert run(policy, 3, [0.0])[-1][1] == 2              # never below min_shards
    d = decide(policy, ScaleState(Trend.STEADY, 0.0), 2, 100.0, 2, 0.0)
    assert d.target is None and d.state.trend is Trend.STEADY  # no room: stays
    # a ceiling below the current count (IMP_MAX_SHARDS lowered) brings it down
    d = decide(policy, ScaleState(Trend.STEADY, 0.0), 3, 100.0, 2, 0.0)
    assert d.target == 2


def test_no_flapping_around_a_boundary():
    """A load that crosses a boundary back and forth faster than the delays never moves
    the query; a change of direction starts the wait over."""
    policy = Autoscaling(min_shards=1, max_shards=4, target_load=0.5, upscale_delay_s=5,
                         downscale_delay_s=5)
    wobbling = [0.45, 0.55] * 50  # one shard, two shards, one, two ... every second
    assert {s for _, s in run(policy, 1, wobbling)} == {1}
    assert {s for _, s in run(policy, 2, wobbling)} == {2}
    # rising for 4 s, one dip, rising again: the wait restarts at the dip
    loads = [0.9] * 4 + [0.4] + [0.9] * 6
    history = run(policy, 1, loads)
    assert [s for _, s in history] == [1] * 10 + [2]


def test_after_a_rescale_the_next_move_waits_its_full_delay():
    policy = Autoscaling(min_shards=1, max_shards=8, target_load=0.25, upscale_delay_s=3,
                         downscale_delay_s=3)
    history = run(policy, 1, [0.6] * 20)  # three shards wanted
    moves = [(t, s) for (t, s), (_, before) in zip(history, [(0, 1)] + history) if s != before]
    assert moves == [(3.0, 3)]  # one move, then steady: the load asks for what it has


def test_a_constant_load_settles_on_load_over_target_shards_and_stays():
    """Closed loop with a load that does not depend on the shard count (the shard-seconds
    of work per second stay the same however they are split): the count rises to
    ceil(load / target) once and stays; when the load stops it falls to the minimum once."""
    policy = Autoscaling(min_shards=1, max_shards=6, target_load=0.3, upscale_delay_s=2,
                         downscale_delay_s=5)
    history = run(policy, 1, [1.0] * 30 + [0.0] * 30)
    counts = [s for _, s in history]
    assert counts[:2] == [1, 1] and counts[2] == math.ceil(1.0 / 0.3) == 4
    assert set(counts[2:30]) == {4}
    assert counts[30:35] == [4] * 5 and set(counts[35:]) == {1}
    changes = sum(1 for a, b in zip(counts, counts[1:]) if a != b)
    assert changes == 2


def test_ceiling_respects_every_limit():
    args = dict(max_shards=16, max_live_actors=None, live_actors=0, splittable=True)
    assert ceiling(POLICY, 1, **args) == 4
    assert ceiling(POLICY, 1, **{**args, "max_shards": 2}) == 2          # IMP_MAX_SHARDS
    assert ceiling(POLICY, 1, **{**args, "splittable": False}) == 1      # probed join sides
    # the live-actor cap: the new shards start beside the old ones, and no other query
    # is evicted to make room for growth
    assert ceiling(POLICY, 1, **{**args, "max_live_actors": 8, "live_actors": 5}) == 3
    assert ceiling(POLICY, 2, **{**args, "max_live_actors": 8, "live_actors": 8}) == 2
    assert ceiling(POLICY, 1, **{**args, "max_live_actors": 2, "live_actors": 0}) == 2


def test_autoscaler_keeps_each_querys_state_with_its_clock():
    clock = FakeClock()
    a = Autoscaler(clock)
    policy = Autoscaling(max_shards=3, target_load=0.5, upscale_delay_s=5,
                         downscale_delay_s=5)
    assert a.decide("q", policy, 1, 1.2, 3).target is None
    assert a.state("q").trend is Trend.RISING
    assert a.decide("other", policy, 2, 0.9, 3).state.trend is Trend.STEADY
    clock.advance(5)
    d = a.decide("q", policy, 1, 1.2, 3)
    assert d.target == 3 and a.state("q").trend is Trend.RESCALING
    a.forget("q")  # a rescale in flight is kept until it ends
    assert a.state("q").trend is Trend.RESCALING
    clock.advance(1)
    a.done("q")
    assert a.state("q") == ScaleState(Trend.STEADY, clock.now)
    a.forget("q")
    assert a.state("q") is None and a.names() == ["other"]


# -- what is measured --------------------------------------------------------------------------

def test_load_meter_averages_busy_shard_seconds_over_the_window():
    clock = FakeClock(0.0)
    meter = LoadMeter(clock)
    clock.advance(100)
    for t in range(91, 101):  # 0.2 shard-seconds of work each second for 10 s
        meter.record(0.2, at=float(t))
    assert meter.load(10.0) == pytest.approx(0.2)
    assert meter.load(20.0) == pytest.approx(0.1)   # the 10 s before were idle
    clock.advance(30)
    assert meter.load(10.0) == 0.0                   # idle since
    young = LoadMeter(FakeClock(0.0))
    young.clock.advance(2)
    young.record(1.0)
    assert young.load(30.0) == pytest.approx(0.5)    # 1 s of work in its 2 s of life


def test_load_meter_forgets_beyond_its_horizon():
    clock = FakeClock(0.0)
    meter = LoadMeter(clock, horizon_s=60.0)
    for t in range(0, 200):
        meter.record(0.5, at=float(t))
    clock.now = 199.0
    assert len(meter._samples) <= 61
    assert meter.load(60.0) == pytest.approx(0.5, rel=0.02)


def test_latency_histogram_is_cumulative_and_ends_at_infinity():
    h = LatencyHistogram((0.01, 0.1, 1.0, math.inf))
    for s in (0.005, 0.01, 0.05, 0.5, 3.0, 100.0):
        h.observe(s)
    snap = h.snapshot()
    assert snap.counts == (2, 3, 4, 6) and snap.count == 6
    assert snap.sum == pytest.approx(103.565)
    with pytest.raises(ValueError):
        LatencyHistogram((0.1, 0.01, math.inf))


# -- configuration -----------------------------------------------------------------------------

@pytest.mark.parametrize("kwargs,message", [
    ({"min_shards": 0}, "min_shards"),
    ({"min_shards": 3, "max_shards": 2}, "min_shards <= max_shards"),
    ({"target_load": 0.0}, "target_load"),
    ({"target_load": 1.5}, "target_load"),
    ({"upscale_delay_s": -1.0}, "upscale_delay_s"),
    ({"downscale_delay_s": math.inf}, "downscale_delay_s"),
    ({"window_s": 0.0}, "window_s"),
])
def test_bad_autoscaling_is_refused(kwargs, message):
    with pytest.raises(ValueError, match=message):
        Autoscaling(**kwargs)


def test_autoscaling_survives_the_registry_and_the_wire(tmp_path):
    policy = Autoscaling(min_shards=2, max_shards=5, target_load=0.25, upscale_delay_s=3,
                         downscale_delay_s=7.5, window_s=12)
    registry = Registry(BlobStore(str(tmp_path)))
    registry.put(QueryRecord("q", "SELECT 1", (), {"kind": "lazy"}, shards=2,
                             autoscaling=policy.to_json()))
    registry.put(QueryRecord("plain", "SELECT 1", (), {"kind": "lazy"}))
    again = Registry(BlobStore(str(tmp_path))).records()
    assert Autoscaling.from_json(again["q"].autoscaling) == policy
    assert again["plain"].autoscaling is None and Autoscaling.from_json(None) is None
    assert convert.autoscaling_from_proto(convert.autoscaling_to_proto(policy)) == policy
    # unset fields take the defaults; a policy that makes no sense is INVALID_ARGUMENT
    assert convert.autoscaling_from_proto(pb.Autoscaling(max_shards=3)) == \
        Autoscaling(min_shards=1, max_shards=3)
    with pytest.raises(BadRequestError, match="min_shards <= max_shards"):
        convert.autoscaling_from_proto(pb.Autoscaling(min_shards=2))
    request = pb.RegisterQueryRequest(name="q", sql="SELECT 1", shards=2,
                                      autoscaling=convert.autoscaling_to_proto(policy))
    assert convert.query_spec(request).autoscaling == policy
    assert convert.query_spec(pb.RegisterQueryRequest(name="q", sql="x")).autoscaling is None


def test_register_flags_give_the_policy():
    from services.cli.main import build_parser

    def policy(*flags: str) -> Autoscaling | None:
        args = build_parser().parse_args(["register", "q", "--sql", "SELECT 1", *flags])
        return _autoscaling(args)

    assert policy() is None
    assert policy("--max-shards", "4") == Autoscaling(max_shards=4)
    assert policy("--max-shards", "4", "--min-shards", "2", "--target-load", "0.25",
                  "--upscale-delay", "5", "--downscale-delay", "60",
                  "--load-window", "10") == Autoscaling(2, 4, 0.25, 5.0, 60.0, 10.0)
    with pytest.raises(ValueError, match="--max-shards"):
        policy("--min-shards", "2")
    with pytest.raises(ValueError, match="target_load"):
        policy("--max-shards", "4", "--target-load", "2")
