"""Operator state snapshots: round trips mid-stream, damaged bytes, foreign snapshots.

For every stateful operator (aggregation incl. bounded min/max, DISTINCT, join, top-k,
comparison with a scalar subquery, set operations) a pipeline is snapshotted in the
middle of a random batch sequence and restored into a fresh pipeline built from the
same plan; both then take the same further batches and must agree with each other and
with the reference after every batch.
"""

from __future__ import annotations

import os
import re
import struct

import pytest
from diff_harness import (
    HypChooser,
    RandChooser,
    World,
    col,
    lit,
    op,
    qplan,
    random_partition,
    scan,
)
from hypothesis import given, settings
from hypothesis import strategies as st

from imp_core.engine.operators.join import JoinOp
from imp_core.engine.operators.merge import MergeOp
from imp_core.engine.pipeline import EngineOptions, IncrementalQuery
from imp_core.engine.snapshot import MAGIC, read_snapshot, write_snapshot
from imp_core.engine.state import group_state, state_key
from imp_core.errors import SnapshotError
from imp_core.plan.nodes import (
    AggCall,
    Aggregate,
    Distinct,
    Join,
    NamedExpr,
    Project,
    Select,
    SetOp,
    SortKey,
    TopK,
    Window,
    WindowCall,
)
from imp_core.sketch.partition import PartitionSet

SCALE = float(os.environ.get("IMP_TEST_SCALE", "1"))
SNAP = settings(max_examples=int(60 * SCALE), deadline=None)


def _agg_plan():
    return Aggregate(scan("r", ("a", "b", "c", "f", "m")), ("r.b",), (
        AggCall("sum", "r.c", "s"), AggCall("count", "r.c", "n_c"),
        AggCall("count_star", None, "n"), AggCall("avg", "r.f", "af"),
        AggCall("sum", "r.m", "sm"), AggCall("min", "r.c", "lo"), AggCall("max", "r.a", "hi")))


def _having_plan():
    return Select(_agg_plan(), op(">", col("s"), lit(2)))


def _distinct_plan():
    return Distinct(Project(scan("r", ("a", "b", "c")),
                            (NamedExpr("b", col("r.b")), NamedExpr("c", col("r.c")))))


def _join_plan():
    join = Join(scan("r", ("a", "b", "c")), scan("s", ("c", "d", "e")),
                op("=", col("r.b"), col("s.d")))
    return Aggregate(join, ("r.b",), (AggCall("count_star", None, "n"),
                                      AggCall("max", "s.e", "me")))


def _self_join_plan():
    return Join(scan("r", ("a", "b"), alias="r1"), scan("r", ("a", "c"), alias="r2"),
                op("=", col("r1.b"), col("r2.c")))


def _topk_plan():
    return TopK(scan("r", ("a", "b", "c")), (SortKey("r.b", True), SortKey("r.c")), 3)


def _window_plan():
    calls = (WindowCall("rank", None, "rk"), WindowCall("sum", "r.c", "s"))
    return Window(scan("r", ("a", "b", "c")), ("r.b",), (SortKey("r.c", True),), calls,
                  "rows")


def _topk_agg_plan():
    agg = Aggregate(scan("r", ("a", "b", "c")), ("r.b",), (AggCall("sum", "r.c", "s"),))
    return TopK(agg, (SortKey("s", True),), 2)


def _scalar_filter_plan():
    # TPC-H q11's shape: groups compared with the total of the same table
    groups = Aggregate(scan("r", ("a", "b", "c"), alias="r1"), ("r1.b",),
                       (AggCall("sum", "r1.c", "g"),))
    total = Project(Aggregate(scan("r", ("a", "c"), alias="r2"), (),
                              (AggCall("sum", "r2.c", "t"),)), (NamedExpr("v", col("t")),))
    return Project(Select(Join(groups, total, None), op(">", op("*", col("g"), lit(3)),
                                                         col("v"))),
                   (NamedExpr("r1.b", col("r1.b")), NamedExpr("g", col("g"))))


def _set_op_plan(kind: str, distinct: bool):
    def build():
        left = Project(scan("r", ("a", "b", "c")), (NamedExpr("x", col("r.b")),
                                                    NamedExpr("y", col("r.c"))))
        right = Project(scan("s", ("c", "d", "e")), (NamedExpr("sx", col("s.d")),
                                                     NamedExpr("sy", col("s.e"))))
        return SetOp(left, right, kind, distinct)
    return build


CASES = {
    "aggregate": (_agg_plan, ("r",), EngineOptions()),
    "aggregate_minmax_buffer": (_having_plan, ("r",), EngineOptions(minmax_buffer=2)),
    "distinct": (_distinct_plan, ("r",), EngineOptions()),
    "join": (_join_plan, ("r", "s"), EngineOptions()),
    "join_no_bloom": (_join_plan, ("r", "s"), EngineOptions(use_bloom=False)),
    "self_join": (_self_join_plan, ("r",), EngineOptions()),
    "topk": (_topk_plan, ("r",), EngineOptions()),
    "topk_buffer": (_topk_plan, ("r",), EngineOptions(topk_buffer=4)),
    "topk_over_aggregate_buffer": (_topk_agg_plan, ("r",), EngineOptions(topk_buffer=3)),
    "scalar_filter": (_scalar_filter_plan, ("r",), EngineOptions()),
    "except_all": (_set_op_plan("except", False), ("r", "s"), EngineOptions()),
    "intersect": (_set_op_plan("intersect", True), ("r", "s"), EngineOptions()),
    "union": (_set_op_plan("union", True), ("r", "s"), EngineOptions()),
    "window": (_window_plan, ("r",), EngineOptions()),
}


def _partitions(ch, tables) -> PartitionSet:
    parts = [random_partition(ch, "r", "a")]
    if "s" in tables and ch.bool():
        parts.append(random_partition(ch, "s", "c"))
    return PartitionSet(tuple(parts))


def _roundtrip(ch, case: str, before: int, after: int) -> None:
    plan_fn, tables, options = CASES[case]
    world = World(qplan(plan_fn()), _partitions(ch, tables), tables, (options,),
                  with_source=True)
    world.bootstrap(ch)
    for _ in range(before):
        world.step(ch)
    (orig,) = world.pipelines
    blob = orig.snapshot({"note": "mid-stream"})
    fresh = world.new_pipeline(options)
    meta = fresh.restore(blob)
    assert meta["note"] == "mid-stream" and meta["batches"] == orig.batches
    assert fresh.batches == orig.batches
    assert fresh.sketch() == orig.sketch()
    assert fresh.result().to_counter() == orig.result().to_counter()
    # a snapshot of the restored pipeline restores too (state survives two hops)
    third = world.new_pipeline(options)
    third.restore(fresh.snapshot())
    world.pipelines = [orig, fresh, third]
    world.check()
    for _ in range(after):
        world.step(ch)  # checks all three against the reference after every batch
        assert orig.sketch() == fresh.sketch() == third.sketch()
        assert orig.result().to_counter() == fresh.result().to_counter() \
            == third.result().to_counter()


@pytest.mark.parametrize("case", sorted(CASES))
@SNAP
@given(data=st.data())
def test_snapshot_restore_mid_stream(case, data):
    ch = HypChooser(data)
    _roundtrip(ch, case, ch.int(0, 5), ch.int(1, 5))


@pytest.mark.parametrize("case", sorted(CASES))
def test_snapshot_restore_seeded(case):
    for seed in range(3):
        ch = RandChooser(seed)
        _roundtrip(ch, case, 4, 4)


def test_snapshot_of_empty_and_emptied_pipelines():
    for case in ("aggregate_minmax_buffer", "join", "topk_buffer", "distinct", "except_all"):
        plan_fn, tables, options = CASES[case]
        ch = RandChooser(1)
        world = World(qplan(plan_fn()), _partitions(ch, tables), tables, (options,),
                      with_source=True)
        fresh = world.new_pipeline(options)
        fresh.restore(world.pipelines[0].snapshot())  # nothing applied yet
        world.pipelines.append(fresh)
        world.bootstrap(ch)
        world.apply({t: (list(world.rows[t]), [-1] * len(world.rows[t])) for t in tables})
        again = world.new_pipeline(options)
        again.restore(world.pipelines[0].snapshot())  # everything deleted again
        world.pipelines.append(again)
        for _ in range(4):
            world.step(ch)


@pytest.mark.parametrize("case", sorted(CASES))
def test_snapshots_follow_the_declared_layouts(case):
    """Each operator's snapshot holds exactly the tables its layout declares, with the
    declared schemas; the flat state holds nothing else besides μ's and the result."""
    plan_fn, tables, options = CASES[case]
    for steps in (0, 4):
        ch = RandChooser(steps)
        world = World(qplan(plan_fn()), _partitions(ch, tables), tables, (options,),
                      with_source=True)
        world.bootstrap(ch)
        for _ in range(steps):
            world.step(ch)
        (q,) = world.pipelines
        grouped = group_state(q.state_tables())
        owners = {op.op_id for op in q.operators if op.stateful}
        assert set(grouped) == owners | {IncrementalQuery.MERGE, ""}
        assert list(grouped[""]) == [IncrementalQuery.RESULT.name]
        for o in q.operators:
            declared = o.state_schemas()
            assert list(o.snapshot()) == list(declared)
            patterns = [re.escape(t.name).replace(re.escape("{i}"), r"\d+")
                        for t in o.STATE.tables]
            assert all(any(re.fullmatch(p, name) for p in patterns) for name in declared)
            for name, t in grouped.get(o.op_id, {}).items():
                if declared[name] is not None:
                    assert t.schema == declared[name], (o.op_id, name)
        counts = MergeOp.COUNTS.name
        assert grouped[IncrementalQuery.MERGE][counts].schema == \
            q.merge.state_schemas()[counts]


# -- damaged and foreign snapshots ------------------------------------------------------

def _sample_world(case="aggregate_minmax_buffer", seed=3) -> tuple[World, bytes]:
    plan_fn, tables, options = CASES[case]
    ch = RandChooser(seed)
    world = World(qplan(plan_fn()), _partitions(ch, tables), tables, (options,),
                  with_source=True)
    world.bootstrap(ch)
    for _ in range(3):
        world.step(ch)
    return world, world.pipelines[0].snapshot()


def _header_end(blob: bytes) -> int:
    (hlen,) = struct.unpack_from("<I", blob, len(MAGIC))
    return len(MAGIC) + 4 + hlen


def _assert_refused(q: IncrementalQuery, blob, match: str | None = None) -> SnapshotError:
    before = q.snapshot()
    with pytest.raises(SnapshotError, match=match) as info:
        q.restore(blob)
    assert q.snapshot() == before, "a refused restore changed the pipeline"
    return info.value


def test_flipped_payload_bytes_are_refused():
    world, blob = _sample_world()
    target = world.new_pipeline(CASES["aggregate_minmax_buffer"][2])
    start = _header_end(blob)
    positions = sorted(set(range(start, len(blob), max(1, (len(blob) - start) // 200)))
                       | {start, len(blob) - 1})
    for pos in positions:
        bad = bytearray(blob)
        bad[pos] ^= 0x5A
        _assert_refused(target, bytes(bad), "checksum")


def test_flipped_header_bytes_are_refused():
    world, blob = _sample_world()
    target = world.new_pipeline(CASES["aggregate_minmax_buffer"][2])
    for pos in range(len(MAGIC), _header_end(blob)):
        bad = bytearray(blob)
        bad[pos] ^= 0x01
        _assert_refused(target, bytes(bad))


def test_truncated_snapshots_are_refused():
    world, blob = _sample_world()
    target = world.new_pipeline(CASES["aggregate_minmax_buffer"][2])
    for n in sorted({0, 1, len(MAGIC) - 1, len(MAGIC), len(MAGIC) + 2, len(MAGIC) + 4,
                     _header_end(blob) - 1, _header_end(blob), _header_end(blob) + 7,
                     len(blob) // 2, len(blob) - 1}):
        _assert_refused(target, blob[:n])


def test_wrong_magic_and_wrong_types_are_refused():
    world, blob = _sample_world()
    target = world.new_pipeline(CASES["aggregate_minmax_buffer"][2])
    _assert_refused(target, b"NOTASNAP" + blob[len(MAGIC):], "magic")
    _assert_refused(target, b"", "magic")
    _assert_refused(target, "IMPSNAP text", "magic")
    # a future format version is refused by name
    hdr = write_snapshot({}, {}).replace(b'"format": 1', b'"format": 9')
    _assert_refused(target, hdr, "format")


def test_snapshot_of_another_plan_is_refused():
    world, blob = _sample_world("aggregate_minmax_buffer")
    other_plan = qplan(Select(_agg_plan(), op(">", col("s"), lit(3))))  # another constant
    target = IncrementalQuery(other_plan, world.partitions, EngineOptions(minmax_buffer=2),
                              source=world.source)
    err = _assert_refused(target, blob, "another plan")
    assert other_plan.fingerprint() in str(err)
    # the refused target still works: it maintains its own query from scratch
    ref_world = World(other_plan, world.partitions, ("r",), (EngineOptions(minmax_buffer=2),),
                      with_source=True)
    ref_world.pipelines = [target]
    ch = RandChooser(5)
    ref_world.bootstrap(ch)
    for _ in range(3):
        ref_world.step(ch)


def test_snapshot_of_another_partition_is_refused():
    world, blob = _sample_world("join")
    plan_fn, tables, options = CASES["join"]
    ch = RandChooser(11)
    other = PartitionSet((random_partition(ch, "r", "b", max_bounds=2),))
    target = IncrementalQuery(world.plan, other, options)
    err = _assert_refused(target, blob, "another partitions")
    assert other.fingerprint() in str(err)
    # the same plan with the same partitions but built anew accepts it
    same = IncrementalQuery(world.plan, world.partitions, options)
    same.restore(blob)
    assert same.sketch() == world.pipelines[0].sketch()


def test_checksum_valid_but_unfitting_snapshot_leaves_target_unchanged():
    """A well-formed snapshot with our identity but missing state must not half-apply."""
    world, blob = _sample_world("join")
    meta, tables = read_snapshot(blob)
    plan_fn, tables_of, options = CASES["join"]
    world = World(world.plan, world.partitions, tables_of, (options,))
    (target,) = world.pipelines
    ch = RandChooser(8)
    world.bootstrap(ch)
    join = next(o for o in target.operators if isinstance(o, JoinOp))
    for drop in (state_key(IncrementalQuery.MERGE, MergeOp.COUNTS.name),
                 state_key(join.op_id, JoinOp.RIGHT.name)):
        partial = {k: v for k, v in tables.items() if k != drop}
        _assert_refused(target, write_snapshot(meta, partial))
    for _ in range(3):
        world.step(ch)


def test_read_snapshot_round_trip():
    import pyarrow as pa

    t = pa.table({"x": [1, 2, 3]})
    meta, tables = read_snapshot(write_snapshot({"plan": "p", "n": 1}, {"a/b": t, "c": t}),
                                 expect={"plan": "p"})
    assert meta == {"plan": "p", "n": 1}
    assert list(tables) == ["a/b", "c"] and tables["c"].equals(t)
    with pytest.raises(SnapshotError, match="another plan"):
        read_snapshot(write_snapshot({"plan": "p"}, {}), expect={"plan": "q"})
