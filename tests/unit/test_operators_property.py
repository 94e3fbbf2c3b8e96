"""Differential property tests: incremental pipelines vs the non-incremental oracle.

Every ``World`` test builds a plan by hand over the small tables of ``diff_harness``
(int columns with tiny domains so groups and join keys collide, NULLs, duplicates), a
random range partition, and a random sequence of batches (inserts, deletes of current
tuples incl. duplicates, mixed, empty, whole-group deletes, emptying a table, ...).
After every batch the pipeline's sketch and annotated result must equal
``reference_capture`` over the current tables.

The second half unit-tests the building blocks (Bloom filter, CSR annotations,
consolidation, partitions, sketches, exact sums) against naive Python models.
"""

from __future__ import annotations

import math
import os
from decimal import Decimal
from fractions import Fraction

import pyarrow as pa
import pytest
from diff_harness import (
    HypChooser,
    RandChooser,
    World,
    col,
    lit,
    op,
    operators_of,
    qplan,
    random_partition,
    scan,
    setting,
)
from hypothesis import given, settings
from hypothesis import strategies as st

from imp_core.engine import join_index
from imp_core.engine.operators.aggregate import AggregateOp
from imp_core.engine.operators.topk import TopKOp
from imp_core.engine.pipeline import EngineOptions
from imp_core.errors import StateExhaustedError
from imp_core.plan.expr import Case, UnaryOp
from imp_core.plan.nodes import (
    AggCall,
    Aggregate,
    Distinct,
    Join,
    NamedExpr,
    Project,
    Select,
    SortKey,
    TopK,
)
from imp_core.sketch.partition import PartitionSet


@pytest.fixture(autouse=True, scope="module")
def _bloom_for_every_probe():
    # in-memory sides ask their Bloom filter only for probes of 1,024 keys or more, more
    # than these tests' deltas hold: asked for every probe, the BLOOM_BOTH runs compare
    # the filtered probes with the plain ones
    with setting(join_index, "_BLOOM_FROM", 1):
        yield


# IMP_TEST_SCALE=20 runs a long bug hunt with the same tests
SCALE = float(os.environ.get("IMP_TEST_SCALE", "1"))
SETTINGS = settings(max_examples=int(120 * SCALE), deadline=None)
FEW = settings(max_examples=int(60 * SCALE), deadline=None)

BLOOM_BOTH = (EngineOptions(use_bloom=True), EngineOptions(use_bloom=False))

R_ALL = ("a", "b", "c", "f", "m")


def parts_r(ch, column: str = "a") -> PartitionSet:
    return PartitionSet((random_partition(ch, "r", column),))


def parts_rs(ch, with_s: bool | None = None) -> PartitionSet:
    with_s = ch.bool() if with_s is None else with_s
    ps = [random_partition(ch, "r", "a")]
    if with_s:
        ps.append(random_partition(ch, "s", "c"))
    return PartitionSet(tuple(ps))


def run(data, root, partitions_fn, tables=("r",), options=(EngineOptions(),),
        with_source=False, steps=6) -> World:
    ch = HypChooser(data)
    world = World(qplan(root), partitions_fn(ch), tables, options, with_source)
    world.run(ch, steps=steps)
    return world


# -- stateless operators ------------------------------------------------------------------

@SETTINGS
@given(st.data())
def test_selection(data):
    ch = HypChooser(data)
    k = ch.int(-1, 9)
    pred = op("and", op(">", col("r.a"), lit(k)),
              op("or", UnaryOp("is_null", col("r.b")), op("<>", col("r.b"), col("r.c"))))
    root = Select(scan("r", R_ALL), pred)
    world = World(qplan(root), parts_r(ch, ch.choice(["a", "c"])), ("r",))
    world.run(ch)


@SETTINGS
@given(st.data())
def test_projection_arithmetic_case(data):
    case = Case(((UnaryOp("is_null", col("r.b")), lit(-1)),
                 (op(">", col("r.b"), lit(1)), col("r.c"))),
                op("-", col("r.a"), col("r.b")))
    root = Project(scan("r", R_ALL), (
        NamedExpr("a", col("r.a")),
        NamedExpr("x", op("+", op("*", col("r.a"), lit(2)), col("r.c"))),
        NamedExpr("y", case),
        NamedExpr("fm", op("*", col("r.f"), lit(2.0, pa.float64()))),
        NamedExpr("m", col("r.m")),
    ))
    run(data, root, parts_r)


@SETTINGS
@given(st.data())
def test_projection_collapses_to_duplicates(data):
    # only the small-domain columns survive: many input tuples map to equal output rows
    root = Project(Select(scan("r", ("a", "b", "c")), op(">=", col("r.a"), lit(2))),
                   (NamedExpr("b", col("r.b")), NamedExpr("c2", op("%", col("r.c"), lit(2)))))
    run(data, root, parts_r)


# -- joins --------------------------------------------------------------------------------

@SETTINGS
@given(st.data())
def test_equi_join(data):
    root = Join(scan("r", ("a", "b", "c")), scan("s", ("c", "d", "e")),
                op("=", col("r.b"), col("s.d")))
    run(data, root, parts_rs, ("r", "s"), BLOOM_BOTH)


@SETTINGS
@given(st.data())
def test_theta_join(data):
    root = Join(scan("r", ("a", "b")), scan("s", ("c", "d")), op("<", col("r.a"), col("s.c")))
    run(data, root, parts_rs, ("r", "s"), BLOOM_BOTH)


@SETTINGS
@given(st.data())
def test_join_on_two_columns_with_residual(data):
    cond = op("and", op("and", op("=", col("r.b"), col("s.d")), op("=", col("s.e"), col("r.c"))),
              op("<=", col("r.a"), op("+", col("s.c"), lit(3))))
    root = Join(scan("r", ("a", "b", "c")), scan("s", ("c", "d", "e")), cond)
    run(data, root, parts_rs, ("r", "s"), BLOOM_BOTH)


@SETTINGS
@given(st.data())
def test_self_join_of_partitioned_table(data):
    # both sides read r, so annotations of joined tuples must be deduplicated
    root = Join(scan("r", ("a", "b"), alias="r1"), scan("r", ("a", "c"), alias="r2"),
                op("=", col("r1.b"), col("r2.c")))
    run(data, root, parts_r, ("r",), BLOOM_BOTH)


@FEW
@given(st.data())
def test_self_join_theta_under_aggregation(data):
    join = Join(scan("r", ("a", "b"), alias="r1"), scan("r", ("a", "b"), alias="r2"),
                op("and", op("=", col("r1.b"), col("r2.b")), op("<", col("r1.a"), col("r2.a"))))
    root = Aggregate(join, ("r1.b",), (AggCall("count_star", None, "n"),
                                       AggCall("max", "r2.a", "hi")))
    run(data, root, parts_r, ("r",), BLOOM_BOTH)


@FEW
@given(st.data())
def test_cross_product(data):
    root = Join(scan("r", ("a", "b")), scan("s", ("c", "e")), None)
    run(data, root, parts_rs, ("r", "s"), BLOOM_BOTH, steps=4)


@FEW
@given(st.data())
def test_two_partitioned_tables(data):
    join = Join(scan("r", ("a", "b", "c")), scan("s", ("c", "d", "e")),
                op("=", col("r.b"), col("s.d")))
    agg = Aggregate(join, ("r.b",), (AggCall("sum", "s.e", "se"),
                                     AggCall("count_star", None, "n")))
    root = Select(agg, op(">=", col("n"), lit(2)))
    run(data, root, lambda ch: parts_rs(ch, with_s=True), ("r", "s"), BLOOM_BOTH)


def test_bloom_on_and_off_agree_and_filter_probes():
    """Same results with and without the Bloom filter, which does skip probes (asked for
    every probe here: ``_bloom_for_every_probe``)."""
    root = Join(scan("r", ("a", "b", "c")), scan("s", ("c", "d", "e")),
                op("=", col("r.c"), col("s.d")))
    for seed in range(4):
        ch = RandChooser(seed)
        world = World(qplan(root), parts_rs(ch, with_s=True), ("r", "s"), BLOOM_BOTH)
        world.run(ch, steps=8)
        on, off = world.pipelines
        assert on.sketch() == off.sketch()
        assert on.result().to_counter() == off.result().to_counter()
    # a delta whose keys the other side never had is skipped by the filter
    ch = RandChooser(99)
    world = World(qplan(root), parts_rs(ch, with_s=True), ("r", "s"), BLOOM_BOTH)
    world.apply({"s": ([(1, 1, 1), (2, 2, None)], [1, 1]), "r": ([], [])})
    world.apply({"r": ([(3, 0, 4, None, None), (4, 1, 1, None, None)], [1, 1])})
    join_on = world.pipelines[0].operators[-1]
    assert isinstance(join_on, type(world.pipelines[1].operators[-1]))
    assert join_on.right.probes_skipped >= 1
    assert world.pipelines[1].operators[-1].right.probes_skipped == 0


# -- aggregation ------------------------------------------------------------------------

ALL_AGGS = (
    AggCall("sum", "r.c", "sum_c"), AggCall("count", "r.c", "cnt_c"),
    AggCall("count_star", None, "n"), AggCall("avg", "r.c", "avg_c"),
    AggCall("min", "r.c", "min_c"), AggCall("max", "r.c", "max_c"),
    AggCall("sum", "r.f", "sum_f"), AggCall("avg", "r.f", "avg_f"),
    AggCall("min", "r.f", "min_f"), AggCall("max", "r.f", "max_f"),
    AggCall("sum", "r.m", "sum_m"), AggCall("avg", "r.m", "avg_m"),
    AggCall("min", "r.m", "min_m"), AggCall("max", "r.a", "max_a"),
)


@SETTINGS
@given(st.data())
def test_aggregation_all_functions(data):
    ch = HypChooser(data)
    group_by = ch.choice([("r.b",), ("r.b", "r.c"), ("r.a",)])
    root = Aggregate(scan("r", R_ALL), group_by, ALL_AGGS)
    world = World(qplan(root), parts_r(ch, ch.choice(["a", "c"])), ("r",))
    world.run(ch, steps=8)


@SETTINGS
@given(st.data())
def test_having(data):
    ch = HypChooser(data)
    k = ch.int(0, 8)
    agg = Aggregate(scan("r", ("a", "b", "c")), ("r.b",),
                    (AggCall("sum", "r.c", "s"), AggCall("count_star", None, "n")))
    having = Select(agg, op("or", op(">", col("s"), lit(k)), op(">=", col("n"), lit(3))))
    root = Project(having, (NamedExpr("b", col("r.b")), NamedExpr("s", col("s"))))
    world = World(qplan(root), parts_r(ch), ("r",))
    world.run(ch, steps=8)


@SETTINGS
@given(st.data())
def test_aggregation_without_group_by(data):
    ch = HypChooser(data)
    agg = Aggregate(scan("r", R_ALL), (), (
        AggCall("sum", "r.c", "s"), AggCall("count_star", None, "n"),
        AggCall("min", "r.a", "lo"), AggCall("max", "r.a", "hi"), AggCall("avg", "r.f", "af"),
        AggCall("sum", "r.m", "sm")))
    root = agg if ch.bool() else Select(agg, op(">", col("s"), lit(ch.int(0, 10))))
    world = World(qplan(root), parts_r(ch), ("r",))
    world.run(ch, steps=8)


@SETTINGS
@given(st.data())
def test_distinct(data):
    root = Distinct(Project(scan("r", ("a", "b", "c")),
                            (NamedExpr("b", col("r.b")), NamedExpr("c", col("r.c")))))
    run(data, root, parts_r, steps=8)


@FEW
@given(st.data())
def test_distinct_over_join(data):
    join = Join(scan("r", ("a", "b")), scan("s", ("c", "d")), op("=", col("r.b"), col("s.d")))
    root = Distinct(Project(join, (NamedExpr("b", col("r.b")),)))
    run(data, root, parts_rs, ("r", "s"), BLOOM_BOTH)


@SETTINGS
@given(st.data())
def test_minmax_with_small_buffer_and_refill(data):
    root = Aggregate(scan("r", R_ALL), ("r.b",), (
        AggCall("min", "r.c", "lo"), AggCall("max", "r.c", "hi"), AggCall("min", "r.a", "lo_a"),
        AggCall("max", "r.f", "hi_f"), AggCall("sum", "r.c", "s")))
    run(data, root, parts_r, options=(EngineOptions(minmax_buffer=2), EngineOptions()),
        with_source=True, steps=8)


def _refill_world(root, options, rows):
    ch = RandChooser(0)
    world = World(qplan(root), parts_r(ch), ("r",), (options,), with_source=True)
    world.apply({"r": (rows, [1] * len(rows))})
    return world


def test_minmax_refill_is_exercised():
    root = Aggregate(scan("r", ("a", "b", "c")), ("r.b",),
                     (AggCall("min", "r.c", "lo"), AggCall("max", "r.c", "hi")))
    rows = [(i, 1, c, None, None) for i, c in enumerate([1, 2, 3, 4])] + [(9, 2, 0, None, None)]
    world = _refill_world(root, EngineOptions(minmax_buffer=2), rows)
    # delete the two smallest and then the two largest values of group b = 1
    world.apply({"r": ([rows[0], rows[1]], [-1, -1])})
    world.apply({"r": ([rows[2], rows[3]], [-1, -1])})
    (agg,) = operators_of(world.pipelines[0], AggregateOp)
    assert agg.refills > 0


def test_minmax_refill_when_buffer_empties_while_worse_values_arrive():
    root = Aggregate(scan("r", ("a", "b", "c")), ("r.b",), (AggCall("min", "r.c", "lo"),))
    rows = [(i, 1, c, None, None) for i, c in enumerate([1, 2, 3, 4])]
    world = _refill_world(root, EngineOptions(minmax_buffer=2), rows)
    # one batch: both kept values go, a value worse than every kept one arrives
    world.apply({"r": ([rows[0], rows[1], (5, 1, 4, None, None)], [-1, -1, 1])})
    world.apply({"r": ([rows[0], (5, 1, 4, None, None), (7, 1, 4, None, None)], [1, -1, 1])})


def test_minmax_buffer_without_source_group_emptied_and_revived():
    """An emptied group holds all of its (zero) values: reviving it needs no refill."""
    root = Aggregate(scan("r", ("a", "b", "c")), ("r.b",),
                     (AggCall("min", "r.c", "lo"), AggCall("max", "r.c", "hi")))
    ch = RandChooser(0)
    world = World(qplan(root), parts_r(ch), ("r",), (EngineOptions(minmax_buffer=2),))
    rows = [(i, 1, c, None, None) for i, c in enumerate([1, 2, 3, 4])]
    world.apply({"r": (rows, [1] * 4)})
    world.apply({"r": (rows, [-1] * 4)})
    world.apply({"r": ([(5, 1, 7, None, None), (6, 1, 8, None, None)], [1, 1])})
    world.apply({"r": ([(5, 1, 7, None, None), (7, 1, 9, None, None)], [-1, 1])})
    # a group that still has values beyond its emptied buffer needs the source: min keeps
    # only its best two values {1, 2} (the buffer bounds incomplete groups too); deleting
    # both leaves 3, 8 and 9 beyond it
    world.apply({"r": (rows[:3], [1] * 3)})
    with pytest.raises(StateExhaustedError):
        world.apply({"r": (rows[:2], [-1] * 2)})


@SETTINGS
@given(st.data())
def test_topk_plain_rows(data):
    ch = HypChooser(data)
    keys = [SortKey("r.b", ch.bool(), ch.choice([None, True, False]))]
    if ch.bool():
        keys.append(SortKey("r.c", ch.bool(), None))
    k = ch.int(1, 12)  # often larger than the input
    root = TopK(scan("r", ("a", "b", "c")), tuple(keys), k)
    buffered = EngineOptions(topk_buffer=k + 1)
    world = World(qplan(root), parts_r(ch), ("r",), (EngineOptions(), buffered),
                  with_source=True)
    world.run(ch, steps=8)


@SETTINGS
@given(st.data())
def test_topk_buffer_drops_rows_beyond_its_prefix_as_one_by_one(data):
    """A buffered top-k drops the rows ordered after its last kept entry in Arrow
    (``TopKOp._beyond``): over float, decimal and nullable keys in either direction,
    its entries and output equal those of a top-k applying every row in Python, and
    the maintained result equals the reference's."""
    ch = HypChooser(data)
    cols = data.draw(st.lists(st.sampled_from(["r.b", "r.c", "r.f", "r.m"]), min_size=1,
                            max_size=3, unique=True))
    keys = tuple(SortKey(c, ch.bool(), ch.choice([None, True, False])) for c in cols)
    k = ch.int(1, 4)
    root = TopK(scan("r", ("a", "b", "c", "f", "m")), keys, k)
    world = World(qplan(root), parts_r(ch), ("r",), (EngineOptions(topk_buffer=k + 1),),
                  with_source=True)
    (topk,) = operators_of(world.pipelines[0], TopKOp)
    plain = TopKOp(root, "plain", k + 1, topk.source)
    plain._beyond = lambda batch: None  # every row through ``_apply``
    fast_step = topk._step

    def both(inputs):
        out = fast_step(inputs)
        assert out.to_counter() == plain._step(inputs).to_counter()
        assert list(topk.entries.items()) == list(plain.entries.items())
        assert topk.complete == plain.complete
        return out

    topk._step = both
    world.run(ch, steps=8)  # World checks the result and sketch after every batch


@SETTINGS
@given(st.data())
def test_topk_filled_at_once_equals_one_insertion_at_a_time(data):
    """An empty top-k loading a batch of insertions (a first state, a restore) sorts all
    keys at once; its entries equal those of inserting the tuples one by one, over
    duplicate tuples, NULLs, NaN and signed zeros in either direction."""
    from imp_core.engine.annotation import Annotation
    from imp_core.engine.zset import DeltaBatch
    from imp_core.plan.nodes import arrow_schema

    keys = tuple(SortKey(c, data.draw(st.booleans()), data.draw(st.sampled_from(
        [None, True, False]))) for c in data.draw(st.lists(
            st.sampled_from(["r.b", "r.f", "r.m"]), min_size=1, max_size=3, unique=True)))
    root = TopK(scan("r", ("a", "b", "c", "f", "m")), keys, data.draw(st.integers(1, 5)))
    floats = st.sampled_from([None, math.nan, 0.0, -0.0, *FLOATS_SAMPLE])
    n = data.draw(st.integers(1, 40))
    rows = [(data.draw(st.integers(0, 3)), data.draw(st.sampled_from([None, 1, 2, 3])),
             data.draw(st.sampled_from([None, 7])), data.draw(floats),
             data.draw(st.sampled_from([None, Decimal("0.01"), Decimal("-5.50")])))
            for _ in range(n)]
    table = pa.Table.from_pylist([dict(zip(root.input.column_names, r)) for r in rows],
                                 schema=arrow_schema(root.input.schema))
    ann = Annotation.from_sets([data.draw(st.sets(st.integers(0, 3), max_size=2))
                                for _ in range(n)])
    weights = [data.draw(st.integers(1, 3)) for _ in range(n)]
    batch = DeltaBatch.of(table, weights, ann)
    bulk = TopKOp(root, "bulk")
    bulk._load(batch)
    one = TopKOp(root, "one")
    for (row, a), w in batch.keyed_counts().items():
        one._apply(row, a, w)
    # compared by repr: a NaN is not equal to itself as a Python value
    assert repr(list(bulk.entries.values())) == repr(list(one.entries.values()))
    # NaN orders after every number ascending, before them descending (as in Spark)
    f = next((i for i, k in enumerate(keys) if k.column == "r.f"), None)
    if f == 0:
        values = [row[3] for row, _, _ in bulk.entries.values() if row[3] is not None]
        nan = [v != v for v in values]
        assert nan == sorted(nan, reverse=keys[0].descending)


FLOATS_SAMPLE = (0.1, 1e16, -2.5)


def test_topk_buffer_drops_worse_rows_before_python():
    """Rows ordered after the last kept entry (here DESC with NULLs last: lower values,
    then NULLs) never reach ``_apply``; a tie with the last entry does."""
    root = TopK(scan("r", ("a", "b", "c")), (SortKey("r.a", True, False),), 1)
    rows = [(a, 0, 0, None, None) for a in (5, 4, 3, 2)]
    world = _refill_world(root, EngineOptions(topk_buffer=2), rows)
    (topk,) = operators_of(world.pipelines[0], TopKOp)
    applied = []
    apply_one = topk._apply
    topk._apply = lambda row, ann, w: (applied.append(row[0]), apply_one(row, ann, w))
    world.apply({"r": ([(1, 0, 0, None, None), (None, 0, 0, None, None),
                        (4, 1, 0, None, None), (6, 0, 0, None, None)], [1, 1, 1, 1])})
    assert sorted(applied) == [4, 6]


@SETTINGS
@given(st.data())
def test_topk_over_aggregation(data):
    ch = HypChooser(data)
    agg = Aggregate(scan("r", ("a", "b", "c")), ("r.b",),
                    (AggCall("sum", "r.c", "s"), AggCall("count_star", None, "n")))
    k = ch.int(1, 4)
    root = TopK(agg, (SortKey("s", ch.bool()), SortKey("n", ch.bool())), k)
    world = World(qplan(root), parts_r(ch), ("r",),
                  (EngineOptions(), EngineOptions(topk_buffer=k + 1)), with_source=True)
    world.run(ch, steps=8)


def test_topk_refill_is_exercised():
    root = TopK(scan("r", ("a", "b", "c")), (SortKey("r.a"),), 2)
    rows = [(a, 0, 0, None, None) for a in (1, 2, 3, 4, 5)]
    world = _refill_world(root, EngineOptions(topk_buffer=3), rows)
    world.apply({"r": ([rows[0], rows[1]], [-1, -1])})
    (topk,) = operators_of(world.pipelines[0], TopKOp)
    assert topk.refills > 0


def test_topk_buffer_emptied_while_worse_tuples_arrive():
    root = TopK(scan("r", ("a", "b", "c")), (SortKey("r.a"),), 1)
    rows = [(a, 0, 0, None, None) for a in (1, 2, 3, 4, 5)]
    world = _refill_world(root, EngineOptions(topk_buffer=2), rows)
    # deletes of all kept tuples come first in the batch, then a worse tuple arrives
    world.apply({"r": ([rows[0], rows[1], (9, 0, 0, None, None)], [-1, -1, 1])})


@settings(max_examples=10, deadline=None)
@given(st.data())
def test_long_sequences_keep_float_and_decimal_sums_exact(data):
    root = Aggregate(scan("r", ("a", "f", "m")), (), (
        AggCall("sum", "r.f", "sf"), AggCall("avg", "r.f", "af"), AggCall("count", "r.f", "nf"),
        AggCall("sum", "r.m", "sm"), AggCall("avg", "r.m", "am")))
    ch = HypChooser(data)
    world = World(qplan(root), parts_r(ch), ("r",))
    world.bootstrap(ch, max_rows=10)
    for _ in range(30):
        world.step(ch, kind=ch.choice(["insert", "delete", "mixed", "churn"]))
    (q,) = world.pipelines
    got = q.result().to_counter()
    fs = [r[3] for r in world.rows["r"] if r[3] is not None]
    ms = [r[4] for r in world.rows["r"] if r[4] is not None]
    if not world.rows["r"]:
        assert not got
        return
    ((row, _), m), = got.items()
    assert m == 1
    sf, af, nf, sm, am = row
    assert nf == len(fs)
    if fs:
        assert sf == math.fsum(fs) and math.copysign(1, sf) == math.copysign(1, math.fsum(fs))
        assert af == float(sum(Fraction(x) for x in fs) / len(fs))
    else:
        assert sf is None and af is None
    if ms:
        assert sm == sum(ms, Decimal(0))
        exact_mean = sum(ms, Decimal(0)) / len(ms)
        assert abs(am - exact_mean) <= Decimal("0.000051")
    else:
        assert sm is None and am is None


def test_minmax_buffer_bounds_incomplete_groups_too():
    """Once a group's buffer dropped values, better values still keep it at the bound."""
    from imp_core.engine.operators.minmax import MinMaxSets

    mm = MinMaxSets(is_max=False, buffer=3)
    for v in [50, 40, 30, 20, 10, 5, 1, 0]:  # each new value is the best so far
        mm.update(0, v, 1)
        assert len(mm.sets[0]) <= 3
    assert sorted(mm.sets[0]) == [0, 1, 5] and mm.complete[0] is False
    mm.update(0, 60, 1)  # worse than every kept value: beyond the buffer, not kept
    assert sorted(mm.sets[0]) == [0, 1, 5]


@given(st.lists(st.tuples(st.integers(0, 3), st.integers(-40, 40), st.sampled_from([1, 1, 2, -1])),
                max_size=200),
       st.booleans(), st.sampled_from([None, 2, 5, 30]))
@settings(max_examples=int(150 * SCALE), deadline=None)
def test_minmax_sets_small_and_sorted_answer_alike(ops, is_max, buffer):
    """Groups held as plain dicts (few values) and as SortedDicts (many) give the same
    extremes, kept values and completeness as a model of sorted lists, through inserts
    and deletes of values held (a deletion of a value never held is skipped, as the
    operator never sends one to a complete group)."""
    from imp_core.engine.operators.minmax import MinMaxSets

    small = MinMaxSets(is_max, buffer)
    small.SMALL = 3
    large = MinMaxSets(is_max, buffer)
    large.SMALL = 0  # every group sorted from its first value
    for g, v, w in ops:
        held = small.sets.get(g, {})
        if w < 0 and held.get(v, 0) < -w:
            continue
        for mm in (small, large):
            mm.update(g, v, w)
    for g in set(small.sets) | set(large.sets):
        assert dict(small.sets[g]) == dict(large.sets[g])
        assert small.extreme(g) == large.extreme(g)
        assert small.complete[g] == large.complete[g]
        kept = sorted(small.sets[g])
        if kept:
            assert small.extreme(g) == (kept[-1] if is_max else kept[0])
        if buffer is not None:
            assert len(kept) <= buffer
