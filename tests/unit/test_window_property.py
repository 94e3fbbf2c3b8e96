"""Property tests of the window operator (``WindowOp``) against the reference evaluator.

Plans built by hand over ``diff_harness``'s table r (nullable partition and order
columns, duplicates, floats and decimals); after every random batch (inserts, deletes,
batches that empty a partition, reorder ranks by deleting the first rows, weighted rows)
the maintained result and sketch must equal the reference's (``World.run`` asserts both).
"""

from __future__ import annotations

from diff_harness import HypChooser, World, col, lit, op, qplan, scan
from hypothesis import given, settings
from hypothesis import strategies as st
from test_operators_property import SCALE, parts_r

from imp_core.engine.operators.window import WindowOp
from imp_core.engine.pipeline import IncrementalQuery
from imp_core.plan.nodes import (
    AggCall,
    Aggregate,
    Select,
    SortKey,
    Window,
    WindowCall,
)

SETTINGS = settings(max_examples=int(60 * SCALE), deadline=None)
R = ("a", "b", "c", "f", "m")


def _run(data, root, steps=7) -> World:
    ch = HypChooser(data)
    world = World(qplan(root), parts_r(ch, ch.choice(["a", "b", "c"])), ("r",))
    world.run(ch, steps=steps)
    # a snapshot restores into a fresh pipeline that keeps up with the next batches
    fresh = IncrementalQuery(world.plan, world.partitions)
    fresh.restore(world.pipelines[0].snapshot())
    world.pipelines.append(fresh)
    for _ in range(2):
        world.step(ch)
    for pipeline in world.pipelines:
        _check_sizes(pipeline)
    return world


def _check_sizes(pipeline: IncrementalQuery) -> None:
    """The window's counted entries (its size, asked after every batch) equal those its
    partitions and kept outputs hold."""
    for w in (o for o in pipeline.operators if isinstance(o, WindowOp)):
        assert w._rows == sum(len(p) for p in w.parts.values())
        assert w._kept == sum(len(o) for o in w.outputs.values())


def _order(data) -> tuple[SortKey, ...]:
    cols = data.draw(st.lists(st.sampled_from(["r.a", "r.c", "r.f", "r.m"]), min_size=1,
                              max_size=2, unique=True))
    return tuple(SortKey(c, data.draw(st.booleans()),
                         data.draw(st.sampled_from([None, True, False]))) for c in cols)


@SETTINGS
@given(st.data())
def test_ranking_functions(data):
    calls = (WindowCall("rank", None, "rk"), WindowCall("dense_rank", None, "drk"),
             WindowCall("row_number", None, "rn"))
    by = data.draw(st.sampled_from([(), ("r.b",), ("r.b", "r.c")]))
    _run(data, Window(scan("r", R), by, _order(data), calls, "range"))


@SETTINGS
@given(st.data())
def test_partitioned_top_k(data):
    func = data.draw(st.sampled_from(["rank", "dense_rank", "row_number"]))
    window = Window(scan("r", R), ("r.b",), _order(data), (WindowCall(func, None, "rk"),),
                    "range")
    k = data.draw(st.integers(1, 3))
    _run(data, Select(window, op("<=", col("rk"), lit(k, window.schema[-1].dtype))))


@SETTINGS
@given(st.data())
def test_whole_partition_aggregates(data):
    calls = (WindowCall("sum", "r.m", "s"), WindowCall("avg", "r.f", "av"),
             WindowCall("count", "r.c", "n"), WindowCall("count_star", None, "n2"),
             WindowCall("min", "r.c", "lo"), WindowCall("max", "r.m", "hi"))
    by = data.draw(st.sampled_from([(), ("r.b",), ("r.c",)]))
    _run(data, Window(scan("r", R), by, (), calls, "partition"))


@SETTINGS
@given(st.data())
def test_running_frames(data):
    frame = data.draw(st.sampled_from(["range", "rows"]))
    calls = (WindowCall("sum", "r.a", "s"), WindowCall("max", "r.f", "hi"),
             WindowCall("avg", "r.m", "av"), WindowCall("count_star", None, "n"))
    _run(data, Window(scan("r", R), ("r.b",), _order(data), calls, frame))


@SETTINGS
@given(st.data())
def test_window_over_aggregate(data):
    # TPC-DS q53's shape: avg(sum(x)) OVER (PARTITION BY g1) over GROUP BY g1, g2
    agg = Aggregate(scan("r", R), ("r.b", "r.c"), (AggCall("sum", "r.a", "s"),))
    calls = (WindowCall("avg", "s", "avg_s"), WindowCall("rank", None, "rk"))
    order = (SortKey("s", True),)
    w1 = Window(agg, ("r.b",), (), calls[:1], "partition")
    w2 = Window(w1, ("r.b",), order, calls[1:], "range")
    _run(data, Select(w2, op(">", col("s"), col("avg_s"))))
