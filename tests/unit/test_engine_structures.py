"""Property tests of the engine's data structures against naive models: exact float and
decimal sums, the Bloom filter, fragment-set annotations, Z-set consolidation, range
partitions and sketches (the operators themselves: test_operators_property.py)."""

from __future__ import annotations

import bisect
import math
import os
from collections import Counter
from decimal import Decimal
from fractions import Fraction
from unittest import mock

import numpy as np
import pyarrow as pa
import pytest
from diff_harness import (
    DECIMALS,
    FLOATS,
)
from hypothesis import given, settings
from hypothesis import strategies as st
from pyroaring import BitMap
from strategies import (
    INT64,
    fragment_ids,
    fragment_sets,
    indices,
    nullable,
    partition_bounds,
    zset_weights,
)

from imp_core.engine import annotation as annotation_module
from imp_core.engine.annotation import Annotation, key_ids, set_key
from imp_core.engine.bloom import BloomFilter
from imp_core.engine.pipeline import EngineOptions
from imp_core.engine.zset import DeltaBatch
from imp_core.errors import SnapshotError
from imp_core.plan.aggregates.avg import finalize_avg
from imp_core.plan.aggregates.exact import exact_values
from imp_core.plan.aggregates.sum import finalize_sum
from imp_core.sketch.partition import PartitionSet, RangePartition
from imp_core.sketch.sketch import Sketch

# IMP_TEST_SCALE=20 runs a long bug hunt with the same tests
SCALE = float(os.environ.get("IMP_TEST_SCALE", "1"))
SETTINGS = settings(max_examples=int(120 * SCALE), deadline=None)
FEW = settings(max_examples=int(60 * SCALE), deadline=None)

BLOOM_BOTH = (EngineOptions(use_bloom=True), EngineOptions(use_bloom=False))

R_ALL = ("a", "b", "c", "f", "m")


# -- exact sums -------------------------------------------------------------------------

@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(FLOATS + (1e300, -1e300, 5e-324)), st.booleans()),
                max_size=40))
def test_exact_float_sum_matches_fsum(ops):
    """Insert/delete sequences of doubles: the exact state finalizes to fsum of what's left."""
    bag: Counter = Counter()
    total = 0
    count = 0
    for v, delete in ops:
        if delete and bag[v] > 0:
            bag[v] -= 1
            total -= int(exact_values(pa.array([v]))[0])
            count -= 1
        else:
            bag[v] += 1
            total += int(exact_values(pa.array([v]))[0])
            count += 1
        remaining = list(bag.elements())
        got = finalize_sum([total], [count], pa.float64())[0].as_py()
        if remaining:
            assert got == math.fsum(remaining)
            mean = finalize_avg([total], [count], pa.float64())[0].as_py()
            assert mean == float(sum(map(Fraction, remaining)) / len(remaining))
        else:
            assert got is None


def test_exact_decimal_values_and_sum():
    arr = pa.array(list(DECIMALS) + [None], type=pa.decimal128(10, 2))
    ints = exact_values(arr)
    assert [int(x) for x in ints] == [int(d.scaleb(2)) for d in DECIMALS] + [0]
    got = finalize_sum([int(sum(ints))], [len(DECIMALS)], arr.type)[0].as_py()
    assert got == sum(DECIMALS, Decimal(0))


# -- Bloom filter -----------------------------------------------------------------------

@settings(max_examples=40, deadline=None)
@given(st.lists(INT64, max_size=3000),
       st.lists(INT64, max_size=200),
       st.integers(1, 5000))
def test_bloom_has_no_false_negatives(added, probes, expected):
    bf = BloomFilter(expected)
    half = len(added) // 2
    bf.add(np.array(added[:half], dtype=np.int64))
    bf.add(np.array(added[half:], dtype=np.int64))  # in two rounds
    keys = np.array(added, dtype=np.int64)
    assert bf.might_contain(keys).all()
    hit = bf.might_contain(np.array(probes, dtype=np.int64))
    assert hit.dtype == bool and len(hit) == len(probes)


@settings(max_examples=30, deadline=None)
@given(st.lists(INT64, max_size=2000), st.lists(INT64, max_size=2000),
       st.integers(1, 3000), st.booleans())
def test_bloom_answers_whether_every_position_is_set(added, probes, expected, power_of_two):
    """``might_contain`` (one position at a time, narrowing the keys) answers exactly
    whether all of a key's bit positions are set."""
    bf = BloomFilter(expected)
    if power_of_two:
        bf.bits = 1 << 14
        bf.array = np.zeros(bf.bits // 8, dtype=np.uint8)
    bf.add(np.array(added, dtype=np.int64))
    keys = np.array(probes + added[:50], dtype=np.int64)
    pos = bf._positions(keys)
    want = ((bf.array[pos >> 3] >> (pos & 7)) & 1).all(axis=0) if len(keys) else \
        np.zeros(0, bool)
    assert bf.might_contain(keys).tolist() == want.tolist()


@pytest.mark.parametrize("power_of_two", [False, True])
def test_bloom_false_positive_rate_is_low(power_of_two):
    """Sized for its keys (about 10 bits each, not rounded up to a power of two), the
    filter keeps about its 1% target; a power-of-two filter (the layout of earlier
    checkpoints) is read with its own position rule and has no false negatives either."""
    bf = BloomFilter.for_keys(10_000)
    if power_of_two:
        bf.bits = 1 << 17
        bf.array = np.zeros(bf.bits // 8, dtype=np.uint8)
    else:
        assert bf.bits & (bf.bits - 1) != 0 and bf.array.nbytes < 10_000 * 2
    bf.add(np.arange(0, 20_000, 2, dtype=np.int64))
    assert bf.might_contain(np.arange(0, 20_000, 2, dtype=np.int64)).all()
    fp = bf.might_contain(np.arange(1, 20_001, 2, dtype=np.int64)).mean()
    assert fp < 0.02
    assert not bf.saturated()


# -- annotations (CSR) --------------------------------------------------------------------

sets_st = st.lists(fragment_sets(41, max_size=5), max_size=12)


@settings(max_examples=80, deadline=None)
@given(sets_st, st.data())
def test_annotation_ops_match_naive_model(sets, data):
    ann = Annotation.from_sets(sets)
    model = [tuple(s) for s in sets]
    assert len(ann) == len(model)
    assert ann.row_sets() == model
    assert ann.offsets[0] == 0 and ann.offsets[-1] == len(ann.values)
    assert ann.is_singleton() == all(len(s) == 1 for s in model)
    n = len(model)
    # take with repeats (and an empty take)
    idx = data.draw(indices(n, max_size=15)) if n else []
    assert ann.take(np.array(idx, dtype=np.int64)).row_sets() == [model[i] for i in idx]
    mask = np.array(data.draw(st.lists(st.booleans(), min_size=n, max_size=n)), dtype=bool)
    assert ann.filter(mask).row_sets() == [m for m, k in zip(model, mask) if k]
    # row-wise union, with and without deduplication
    other_sets = data.draw(st.lists(fragment_sets(41, max_size=4), min_size=n, max_size=n))
    other = Annotation.from_sets(other_sets)
    u = ann.union_rows(other)
    assert [sorted(r) for r in (list(u.row(i)) for i in range(n))] == \
        [sorted(list(a) + list(b)) for a, b in zip(model, other_sets)]
    # rows listing their (distinct) ids in descending order key as their sets do
    rev = [ids[::-1] for ids in (ann.row(i).tolist() for i in range(n))]
    descending = Annotation(ann.offsets, np.asarray([i for r in rev for i in r] or [],
                                                    dtype=np.int32))
    _check_row_keys(descending, model)
    assert ann.union_rows(other, dedupe=True).row_sets() == \
        [tuple(sorted(set(a) | set(b))) for a, b in zip(model, other_sets)]
    assert u.deduplicated().row_sets() == \
        [tuple(sorted(set(a) | set(b))) for a, b in zip(model, other_sets)]
    # the same through a sort where one mark per (row, id) would not fit
    with mock.patch.object(annotation_module, "_DENSE_MARKS", 0):
        assert ann.union_rows(other, dedupe=True).row_sets() == \
            [tuple(sorted(set(a) | set(b))) for a, b in zip(model, other_sets)]
        assert u.deduplicated().row_sets() == \
            [tuple(sorted(set(a) | set(b))) for a, b in zip(model, other_sets)]
    # per-fragment weighted counts
    weights = np.array(data.draw(zset_weights(n, bound=3)), dtype=np.int64)
    counts = ann.fragment_counts(weights, 41)
    naive = np.zeros(41, dtype=np.int64)
    for s, w in zip(model, weights):
        for f in s:
            naive[f] += w
    assert counts.tolist() == naive.tolist()
    # keys: equal iff the sets are equal
    keys = ann.keys()
    for i in range(n):
        for j in range(n):
            assert (keys[i] == keys[j]) == (model[i] == model[j])
    _check_row_keys(ann, model)
    # bitmaps round trip and concatenation
    assert Annotation.from_bitmaps(ann.to_bitmaps()).row_sets() == model
    assert Annotation.concat([ann, other, Annotation.empty(2)]).row_sets() == \
        model + [tuple(s) for s in other_sets] + [(), ()]


@settings(max_examples=120, deadline=None)
@given(sets_st, fragment_sets(41, max_size=8), st.booleans(), st.data())
def test_shared_ids_added_and_stripped_match_sets(sets, shared, uniform, data):
    """``with_shared`` / ``without`` / ``common_ids`` as set operations, on rows of one
    width (a table's rows: the fixed-width layout) and of any widths."""
    if uniform:  # one own id a row, some of them among the shared ids
        sets = [[data.draw(st.integers(0, 40))] for _ in sets]
    ann = Annotation.from_sets(sets)
    model = [set(s) for s in sets]
    ids = np.array(sorted(shared), dtype=np.int32)
    full = ann.with_shared(ids)
    assert full.offsets[0] == 0 and full.offsets[-1] == len(full.values)
    assert [set(r) for r in full.row_sets()] == [s | set(shared) for s in model]
    assert all(len(set(full.row(i).tolist())) == len(full.row(i)) for i in range(len(full)))
    common = set(full.common_ids().tolist())
    assert common == (set.intersection(*[s | set(shared) for s in model]) if model else set())
    stripped = full.without(ids)
    assert [set(r) for r in stripped.row_sets()] == [s - set(shared) for s in model]
    extra = data.draw(fragment_sets(41, max_size=3))
    drop = np.array(sorted(set(extra) | set(shared)), dtype=np.int32)
    assert [set(r) for r in full.without(drop).row_sets()] == \
        [(s | set(shared)) - set(drop.tolist()) for s in model]


def _check_row_keys(ann: Annotation, model: list[tuple[int, ...]]) -> None:
    """Row keys hold each row's ids, are equal (and hash alike) exactly when the sets
    are, order as the sorted tuples do, and turn back into the same annotation."""
    keys = ann.row_keys()
    assert [key_ids(k) for k in keys] == model
    assert Annotation.from_keys(keys).row_sets() == model
    assert key_ids(set_key(i for x in model for i in x)) == tuple(sorted(set().union(*model)))
    for a, x in zip(keys, model):
        assert set_key(reversed(x)) == a and hash(set_key(x)) == hash(a)
        for b, y in zip(keys, model):
            assert (a == b) == (x == y) and (a < b) == (x < y) and (a <= b) == (x <= y)


def test_annotation_row_keys_of_long_singleton_and_empty_rows():
    """The three ways keys are made: rows of many ids (sorted one by one), singletons
    (no offsets) and rows without ids."""
    long = [tuple(range(0, 300, 3)), tuple(range(5, 400)), (), tuple(range(0, 300, 3))]
    _check_row_keys(Annotation.from_sets([reversed(x) for x in long]), long)
    _check_row_keys(Annotation.singletons(np.array([7, 2, 7])), [(7,), (2,), (7,)])
    _check_row_keys(Annotation.empty(2), [(), ()])


def test_annotation_singletons_and_empty():
    ann = Annotation.singletons(np.array([3, 1, 3]))
    assert ann.is_singleton() and ann.row_sets() == [(3,), (1,), (3,)]
    assert ann.fragment_counts(np.array([1, 2, -1]), 4).tolist() == [0, 2, 0, 0]
    e = Annotation.empty(3)
    assert e.row_sets() == [(), (), ()]
    assert e.take(np.array([0, 2])).row_sets() == [(), ()]
    assert e.fragment_counts(np.ones(3, dtype=np.int64), 2).tolist() == [0, 0]


# -- DeltaBatch consolidation -----------------------------------------------------------

@settings(max_examples=80, deadline=None)
@given(st.lists(st.tuples(nullable(st.integers(0, 2)),
                          st.sampled_from(["x", "y", None]),
                          fragment_sets(4, max_size=2),
                          st.integers(-2, 2)), max_size=25),
       st.sampled_from([0, DeltaBatch.SMALL]))
def test_consolidate_matches_counter(entries, small):
    """Arrow's group-by (SMALL 0) and the Python path for a few rows agree with a
    counter, keep first-occurrence order and leave no zero weight."""
    DeltaBatch.SMALL, saved = small, DeltaBatch.SMALL
    try:
        _check_consolidate(entries)
    finally:
        DeltaBatch.SMALL = saved


def _check_consolidate(entries):
    data = pa.table({"i": pa.array([e[0] for e in entries], pa.int64()),
                     "s": pa.array([e[1] for e in entries], pa.string())})
    batch = DeltaBatch(data, np.array([e[3] for e in entries], dtype=np.int64),
                       Annotation.from_sets([e[2] for e in entries]))
    model: Counter = Counter()
    for i, s, ann, w in entries:
        model[((i, s), tuple(ann))] += w
    model = Counter({k: v for k, v in model.items() if v})
    assert batch.to_counter() == model
    assert {(r, key_ids(k)): w for (r, k), w in batch.keyed_counts().items()} == model
    out = batch.consolidate()
    assert out.to_counter() == model
    assert (out.weights != 0).all()
    keys = list(zip(zip(*[c.to_pylist() for c in out.data.columns]), out.annotation.row_sets()))
    assert len(keys) == len(set(keys)) == len(model)
    first = {}
    for i, key in enumerate(zip(zip(*[c.to_pylist() for c in data.columns]),
                                batch.annotation.row_sets())):
        first.setdefault(key, i)
    assert [first[k] for k in keys] == sorted(first[k] for k in keys)


def test_consolidate_singleton_annotations():
    data = pa.table({"i": pa.array([1, 1, 1, 2], pa.int64())})
    batch = DeltaBatch(data, np.array([1, 1, -1, 0]), Annotation.singletons(np.array([0, 1, 0, 0])))
    assert batch.consolidate().to_counter() == Counter({((1,), (1,)): 1})
    assert len(batch.consolidate()) == 1


# -- partitions and sketches ------------------------------------------------------------

@settings(max_examples=80, deadline=None)
@given(partition_bounds(st.integers(-20, 20), max_size=6),
       st.lists(nullable(st.integers(-25, 25)), max_size=30),
       st.integers(0, 7))
def test_range_partition_annotate_matches_bisect(bounds, values, offset_frags):
    part = RangePartition.from_bounds("t", "v", pa.int64(), bounds)
    ids = part.annotate(pa.array(values, pa.int64()))
    want = [0 if v is None else bisect.bisect_right(bounds, v) for v in values]
    assert ids.tolist() == want
    assert part.size == len(bounds) + 1
    for frag in range(part.size):
        lo, hi = part.range_of(frag)
        for v in values:
            if v is not None and part.annotate(pa.array([v], pa.int64()))[0] == frag:
                assert (lo is None or v >= lo) and (hi is None or v < hi)
    # global ids in a set: offset by the fragments of the partitions before it
    first = RangePartition.from_bounds("u", "x", pa.int64(), list(range(offset_frags)))
    ps = PartitionSet((first, part))
    table = pa.table({"v": pa.array(values, pa.int64())})
    assert ps.annotate("t", table).tolist() == [w + offset_frags + 1 for w in want]
    assert ps.annotate("nope", table).tolist() == [-1] * len(values)


@settings(max_examples=40, deadline=None)
@given(partition_bounds(st.sampled_from([-1.5, 0.0, 0.25, 2.0, 7.75]), max_size=4),
       st.lists(nullable(st.sampled_from([-3.0, -1.5, 0.0, 0.1, 2.0, 9.0])), max_size=12))
def test_range_partition_floats_and_strings(bounds, values):
    part = RangePartition.from_bounds("t", "v", pa.float64(), bounds)
    want = [0 if v is None else bisect.bisect_right(bounds, v) for v in values]
    assert part.annotate(pa.array(values, pa.float64())).tolist() == want
    sb = sorted({str(b) for b in bounds})
    sv = [None if v is None else str(v) for v in values]
    spart = RangePartition.from_bounds("t", "v", pa.string(), sb)
    assert spart.annotate(pa.array(sv, pa.string())).tolist() == \
        [0 if v is None else bisect.bisect_right(sb, v) for v in sv]


def test_range_partition_rejects_bad_bounds():
    from imp_core.errors import PartitionError
    with pytest.raises(PartitionError):
        RangePartition.from_bounds("t", "v", pa.int64(), [3, 3])
    with pytest.raises(PartitionError):
        RangePartition.from_bounds("t", "v", pa.int64(), [5, 1])
    with pytest.raises(PartitionError):
        RangePartition.from_ranges("t", "v", pa.int64(), [(1, 5), (7, 9)])
    with pytest.raises(PartitionError):
        PartitionSet((RangePartition.from_bounds("t", "v", pa.int64(), []),
                      RangePartition.from_bounds("t", "w", pa.int64(), [])))


@settings(max_examples=80, deadline=None)
@given(st.lists(nullable(st.integers(0, 30)), max_size=60), st.integers(1, 8))
def test_equi_depth_bounds(values, fragments):
    part = RangePartition.equi_depth("t", "v", pa.array(values, pa.int64()), fragments)
    b = list(part.bounds)
    nonnull = sorted(v for v in values if v is not None)
    assert b == sorted(set(b)), "strictly increasing"
    assert part.size <= fragments
    assert all(x in nonnull for x in b), "bounds are data values"
    if not nonnull:
        assert b == []
        return
    assert b == [] or b[0] > nonnull[0], "the first fragment is not empty"
    sizes = Counter(part.annotate(pa.array(nonnull, pa.int64())).tolist())
    assert all(sizes[f] > 0 for f in range(part.size)), "no empty fragment"
    if len(set(nonnull)) == len(nonnull) and len(nonnull) >= fragments:
        n = len(nonnull)
        assert part.size == fragments
        assert all(n // fragments <= sizes[f] <= -(-n // fragments) for f in range(part.size))


def test_equi_depth_over_many_values_samples_and_stays_near_equal():
    """Past EQUI_DEPTH_SAMPLE values the split points come from a systematic sample: every
    range still holds within 5% of its share, and the same values in other chunks give
    the same ranges."""
    from imp_core.sketch.partition import EQUI_DEPTH_SAMPLE

    n, fragments = 2 * EQUI_DEPTH_SAMPLE + 12_345, 200
    values = np.random.default_rng(7).permutation(n).astype(np.int64)
    part = RangePartition.equi_depth("t", "v", pa.array(values), fragments)
    again = RangePartition.equi_depth("t", "v", pa.chunked_array([values[:5], values[5:]]),
                                      fragments)
    assert part.bounds == again.bounds
    assert part.size == fragments
    sizes = np.bincount(part.annotate(pa.array(values)), minlength=part.size)
    assert np.all(np.abs(sizes - n / fragments) <= 0.05 * n / fragments), sizes


def _merge_runs(frags: list[int]) -> list[tuple[int, int]]:
    runs: list[tuple[int, int]] = []
    for f in sorted(frags):
        if runs and runs[-1][1] == f - 1:
            runs[-1] = (runs[-1][0], f)
        else:
            runs.append((f, f))
    return runs


@settings(max_examples=60, deadline=None)
@given(partition_bounds(st.integers(0, 50), max_size=5),
       partition_bounds(st.integers(-5, 5), max_size=3), st.data())
def test_sketch_ranges_predicate_and_serialization(bounds_t, bounds_u, data):
    pt = RangePartition.from_bounds("t", "v", pa.int64(), bounds_t)
    pu = RangePartition.from_bounds("u", "w", pa.int64(), bounds_u)
    ps = PartitionSet((pu, pt))
    ids = data.draw(fragment_ids(ps.size))
    sk = Sketch(ps, BitMap(ids))
    local_t = sorted(i - pu.size for i in ids if i >= pu.size)
    assert sk.table_fragments("t") == local_t
    assert sk.table_fragments("u") == sorted(i for i in ids if i < pu.size)
    ranges = sk.ranges("t")
    runs = _merge_runs(local_t)
    assert len(ranges) == len(runs)
    for r, (first, last) in zip(ranges, runs):
        assert (r.lo, r.hi) == (pt.range_of(first)[0], pt.range_of(last)[1])
        assert r.includes_null == (first == 0)
    # the predicate selects exactly the sketch's tuples (NULL is in fragment 0)
    duckdb = pytest.importorskip("duckdb")
    domain = list(range(-2, 53)) + [None]
    pred = sk.predicate("t")
    con = duckdb.connect()
    con.execute("CREATE TABLE x (v BIGINT)")
    con.executemany("INSERT INTO x VALUES (?)", [(v,) for v in domain])
    chosen = sorted(con.execute(f"SELECT v FROM x WHERE {pred}").fetchall(),
                    key=lambda t: (t[0] is None, t[0]))
    local = set(local_t)
    want = [v for v in domain if int(pt.annotate(pa.array([v], pa.int64()))[0]) in local]
    assert [v for (v,) in chosen] == want, pred
    if not local_t:
        assert pred == "FALSE"
    assert Sketch(ps, BitMap()).predicate("t") == "FALSE"
    assert sk.predicate("not_partitioned") == "TRUE"
    # serialization round trip
    assert Sketch.deserialize(ps, sk.serialize()) == sk
    with pytest.raises(SnapshotError):
        Sketch.deserialize(ps, b"\x00garbage")


def test_sketch_rejects_foreign_ids():
    ps = PartitionSet((RangePartition.from_bounds("t", "v", pa.int64(), [1]),))
    with pytest.raises(ValueError):
        Sketch(ps, BitMap([2]))


@pytest.mark.parametrize("min_pending", [1, 3, 4096])
def test_side_index_probes_main_and_pending_parts_alike(monkeypatch, min_pending):
    """Probes find exactly the applied rows with the probe's keys, whether they sit in the
    indexed main part or among the deltas applied since (merged at any threshold)."""
    import numpy as np
    import pyarrow as pa

    from imp_core.engine.annotation import Annotation
    from imp_core.engine.join_index import SideIndex
    from imp_core.engine.zset import DeltaBatch

    monkeypatch.setattr(SideIndex, "MIN_PENDING", min_pending)
    rng = np.random.default_rng(min_pending)
    schema = pa.schema([("k", pa.int64()), ("v", pa.int64())])
    side = SideIndex(schema, ("k",))
    applied: list[tuple[int, int, int]] = []
    live: list[tuple[int, int]] = []
    for step in range(40):
        n = int(rng.integers(1, 6))
        keys = rng.integers(0, 8, n).tolist()
        values = (np.arange(n) + 100 * step).tolist()
        weights = [1] * n
        for _ in range(int(rng.integers(0, 3))):  # deletions of stored rows
            if live:
                k, v = live.pop(int(rng.integers(len(live))))
                keys.append(k), values.append(v), weights.append(-1)
        live += list(zip(keys[:n], values[:n]))
        rows = pa.table({"k": keys, "v": values}, schema=schema)
        side.apply(DeltaBatch(rows, np.array(weights, np.int64),
                              Annotation.singletons(np.array(keys))))
        applied += list(zip(keys, values, weights))
        probe_keys = rng.integers(0, 9, 3)
        probe = DeltaBatch(pa.table({"k": probe_keys}), np.ones(3, np.int64),
                           Annotation.empty(3))
        idx, matched = side.probe(probe, ("k",))
        got = sorted(zip(idx.tolist(), matched.data.column("v").to_pylist(),
                         matched.weights.tolist()))
        want = sorted((i, v, w) for i, p in enumerate(probe_keys.tolist())
                      for k, v, w in applied if k == p)
        assert Counter((i, v) for i, v, w in got for _ in range(w) if w > 0) - Counter(
            (i, v) for i, v, w in got for _ in range(-w) if w < 0) == Counter(
            (i, v) for i, v, w in want for _ in range(w) if w > 0) - Counter(
            (i, v) for i, v, w in want for _ in range(-w) if w < 0)


# -- group keys and fragment counts ----------------------------------------------------------
@settings(max_examples=80, deadline=None)
@given(batches=st.lists(st.lists(st.one_of(st.none(), st.integers(-50, 50)), max_size=40),
                        max_size=12),
       wide=st.booleans())
def test_integer_group_keys_match_a_dictionary(batches, wide):
    """Integer keys kept in numpy arrays (sorted part + recent additions, NULL apart)
    give every distinct key one dense id that never changes, like a dictionary."""
    from imp_core.engine.operators.groups import GroupKeys

    keys = GroupKeys([pa.int64() if wide else pa.int32()])
    seen: dict = {}
    for values in batches:
        data = pa.table({"k": pa.array(values, pa.int64() if wide else pa.int32())})
        gids, inv = keys.lookup(data, ("k",))
        before = len(seen)
        for v, i in zip(values, inv.tolist()):
            g = int(gids[i])
            if v in seen:
                assert g == seen[v]
            else:  # a new key gets a new id
                assert g >= before and g not in seen.values()
                seen[v] = g
        assert sorted(seen.values()) == list(range(len(seen)))  # dense
        keys._maybe_merge()
    assert len(keys) == len(seen)
    for v, g in seen.items():
        assert keys.key_of(g) == (v,)
    by_id = sorted(seen, key=seen.get)
    assert keys.key_arrays(np.arange(len(seen), dtype=np.int64))[0].to_pylist() == by_id


_PAIR_VALUES = st.one_of(st.integers(-3, 3), st.integers(-(1 << 31), (1 << 31) - 1))


@settings(max_examples=80, deadline=None)
@given(batches=st.lists(st.lists(st.tuples(_PAIR_VALUES, _PAIR_VALUES), max_size=12),
                        max_size=6),
       spill=st.sampled_from([None, "wide", "null"]))
def test_two_column_integer_keys_match_a_dictionary(batches, spill):
    """Keys of two integer columns packed into one integer give every distinct pair one
    dense id that never changes, like a dictionary, and keep their ids when a key that
    does not pack (beyond 32 bits, NULL) turns them into dictionary keys."""
    from imp_core.engine.operators.groups import GroupKeys

    keys = GroupKeys([pa.int64(), pa.int32()])
    seen: dict = {}
    odd = {"wide": (1 << 40, 1), "null": (None, 2)}.get(spill or "")
    if odd is not None and batches:
        batches = batches[:1] + [[odd]] + batches[1:]
    for pairs in batches:
        data = pa.table({"a": pa.array([p[0] for p in pairs], pa.int64()),
                         "b": pa.array([p[1] for p in pairs], pa.int32())})
        gids, inv = keys.lookup(data, ("a", "b"))
        before = len(seen)
        for pair, i in zip(pairs, inv.tolist()):
            g = int(gids[i])
            if pair in seen:
                assert g == seen[pair]
            else:
                assert g >= before and g not in seen.values()
                seen[pair] = g
        assert sorted(seen.values()) == list(range(len(seen)))
    assert len(keys) == len(seen)
    for pair, g in seen.items():
        assert keys.gid_of(pair) == g
        assert keys.key_of(g) == pair
    assert keys._packed == (odd is None or not batches)
    by_id = sorted(seen, key=seen.get)
    arrays = keys.key_arrays(np.arange(len(seen), dtype=np.int64))
    assert list(zip(arrays[0].to_pylist(), arrays[1].to_pylist())) == by_id
    assert arrays[1].type == pa.int32()


def test_integer_group_keys_merge_their_recent_additions():
    from imp_core.engine.operators.groups import GroupKeys

    keys = GroupKeys([pa.int64()])
    rng = np.random.default_rng(2)
    values = rng.permutation(20_000)
    for part in np.array_split(values, 10):
        keys.lookup(pa.table({"k": pa.array(part)}), ("k",))
    assert len(keys._main_keys) >= 16_000 and len(keys._pending) <= 4096  # mostly merged
    first, inv = keys.lookup(pa.table({"k": pa.array(values)}), ("k",))
    ids = first[inv]
    assert len(keys) == 20_000 and sorted(ids.tolist()) == list(range(20_000))
    again, inv = keys.lookup(pa.table({"k": pa.array(values[::-1])}), ("k",))
    assert (again[inv] == ids[::-1]).all()  # the same ids whichever order they come in
    assert [keys.key_of(int(g))[0] for g in ids[:50]] == values[:50].tolist()


@settings(max_examples=60, deadline=None)
@given(ops=st.lists(st.tuples(st.integers(0, 9), st.integers(0, 7), st.sampled_from([1, -1])),
                    max_size=60))
def test_fragment_counts_keep_bitmaps_only_for_multi_fragment_groups(ops):
    """Incremental F_g (size and single fragment per group, bitmaps for groups of two or
    more fragments) equals counting from scratch, and restores from its snapshot."""
    from imp_core.engine.operators.groups import FragmentCounts

    fc = FragmentCounts(8)
    fc.ensure(10)
    total: Counter = Counter()
    for g, frag, w in ops:
        if total[(g, frag)] + w < 0:
            continue  # never below zero, as in a real input
        total[(g, frag)] += w
        fc.update(np.array([g]), np.array([w]), Annotation.singletons(np.array([frag])))
    want = {g: BitMap(f for (h, f), c in total.items() if h == g and c > 0) for g in range(10)}
    for g in range(10):
        assert fc.sketch(g) == want[g]
        assert fc.size[g] == len(want[g]) and (g in fc.multi) == (len(want[g]) >= 2)
    again = FragmentCounts(8)
    again.restore(fc.snapshot(), 10)
    for g in range(10):
        assert again.sketch(g) == want[g] and again.single[g] == fc.single[g]


@settings(max_examples=60, deadline=None)
@given(batches=st.lists(st.lists(st.tuples(st.integers(0, 30), st.integers(0, 7),
                                           st.sampled_from([1, 1, 2, -1])), max_size=40),
                        max_size=6))
def test_fragment_counts_bulk_first_fragments_equal_one_by_one(batches):
    """Setting many groups' first fragment at once (a first state's path) gives the same
    sketches and the same sketches-before as one bitmap per group."""
    from imp_core.engine.operators.groups import FragmentCounts

    bulk, single = FragmentCounts(8), FragmentCounts(8)
    bulk.BULK_CROSSINGS = 0  # every batch takes the bulk path where it applies
    total: Counter = Counter()
    for ops in batches:
        ok = []
        for g, frag, w in ops:
            if total[(g, frag)] + w >= 0:
                total[(g, frag)] += w
                ok.append((g, frag, w))
        if not ok:
            continue
        g, frag, w = (np.array(c) for c in zip(*ok))
        ann = Annotation.singletons(frag.astype(np.int32))
        for fc in (bulk, single):
            fc.ensure(31)
        a, b = bulk.update(g, w, ann), single.update(g, w, ann)
        assert {k: BitMap(v) for k, v in a.items()} == {k: BitMap(v) for k, v in b.items()}
        for h in range(31):
            assert bulk.sketch(h) == single.sketch(h)
            assert bulk.size[h] == single.size[h] and bulk.single[h] == single.single[h]


@settings(max_examples=60, deadline=None)
@given(batches=st.lists(st.lists(st.integers(-60, 60), max_size=50), max_size=8),
       bulk_add=st.integers(0, 8))
def test_integer_group_keys_made_at_once_match_a_dictionary(batches, bulk_add):
    """New integer keys given ids in one go (a first state's path) keep the same
    guarantees: one dense, stable id per distinct key."""
    from imp_core.engine.operators.groups import GroupKeys

    keys = GroupKeys([pa.int64()])
    keys.BULK_ADD = bulk_add
    seen: dict = {}
    for values in batches:
        gids, inv = keys.lookup(pa.table({"k": pa.array(values, pa.int64())}), ("k",))
        before = len(seen)
        for v, i in zip(values, inv.tolist()):
            g = int(gids[i])
            if v in seen:
                assert g == seen[v]
            else:
                assert g >= before and g not in seen.values()
                seen[v] = g
        assert sorted(seen.values()) == list(range(len(seen)))
    for v, g in seen.items():
        assert keys.key_of(g) == (v,) and keys.gid_of((v,)) == g


@settings(max_examples=80, deadline=None)
@given(ids=st.lists(st.integers(0, 20), max_size=30), data=st.data())
def test_implicit_singleton_offsets_behave_like_explicit_ones(ids, data):
    """One id per row held without offsets answers every operation like the same
    annotation with explicit offsets 0..n, alone and mixed with other annotations."""
    ids = np.array(ids, dtype=np.int32)
    implicit = Annotation.singletons(ids)
    explicit = Annotation(np.arange(len(ids) + 1, dtype=np.int64), ids)
    assert implicit.stored_offsets is None
    assert (explicit.compact().stored_offsets is None) == (len(ids) > 0)
    assert len(implicit) == len(explicit) and implicit.is_singleton()
    assert (implicit.offsets == explicit.offsets).all()
    assert (implicit.lengths == explicit.lengths).all()
    assert (implicit.row_ids() == explicit.row_ids()).all()
    assert implicit.row_sets() == explicit.row_sets()
    assert list(implicit.keys()) == list(explicit.keys())
    idx = np.array(data.draw(st.lists(st.integers(0, max(len(ids) - 1, 0)),
                                      max_size=10 if len(ids) else 0)), dtype=np.int64)
    assert implicit.take(idx).row_sets() == explicit.take(idx).row_sets()
    other = Annotation.from_sets([data.draw(st.sets(st.integers(0, 20), max_size=3))
                                  for _ in ids])
    assert implicit.union_rows(other, dedupe=True).row_sets() == \
        explicit.union_rows(other, dedupe=True).row_sets()
    for parts in ([implicit, other], [implicit, implicit], [other, implicit]):
        want = [s for p in parts for s in p.row_sets()]
        assert Annotation.concat(parts).row_sets() == want
    w = np.ones(len(ids), dtype=np.int64)
    assert (implicit.fragment_counts(w, 21) == explicit.fragment_counts(w, 21)).all()
    assert implicit.nbytes() == ids.nbytes < explicit.nbytes() or len(ids) == 0


@pytest.mark.parametrize("min_pending", [1, 4096])
@settings(max_examples=40, deadline=None)
@given(steps=st.lists(st.tuples(st.lists(st.tuples(st.integers(0, 5), st.sets(
    st.integers(0, 60), max_size=2)), min_size=1, max_size=5), st.booleans()), max_size=12))
def test_side_index_factors_ids_all_rows_share(min_pending, steps):
    """A side whose rows all carry the same ids (a scalar subquery's sketch) holds them
    once; contents, probes and a snapshot's restore give every row its whole set, also
    after rows without some of those ids arrive (they go back into the rows)."""
    from imp_core.engine.join_index import SideIndex

    schema = pa.schema([("k", pa.int64()), ("v", pa.int64())])
    side = SideIndex(schema, ("k",))
    side.MIN_PENDING = min_pending
    shared = set(range(100, 140))
    model: Counter = Counter()
    serial = 0
    for rows, narrow in steps:
        if narrow:
            shared = set(list(shared)[: len(shared) // 2])  # later rows lack some ids
        sets = [own | shared for _, own in rows]
        values = list(range(serial, serial + len(rows)))
        serial += len(rows)
        data = pa.table({"k": [k for k, _ in rows], "v": values}, schema=schema)
        side.apply(DeltaBatch(data, np.ones(len(rows), np.int64), Annotation.from_sets(sets)))
        for (k, _), v, s in zip(rows, values, sets):
            model[(k, v, frozenset(s))] += 1

        def as_counter(b: DeltaBatch) -> Counter:
            out: Counter = Counter()
            for k, v, s, w in zip(b.data.column("k").to_pylist(), b.data.column("v").to_pylist(),
                                  b.annotation.row_sets(), b.weights.tolist()):
                out[(k, v, frozenset(s))] += w
            return out

        assert as_counter(side.contents()) == model
        probe = DeltaBatch(pa.table({"k": [0, 3]}), np.ones(2, np.int64), Annotation.empty(2))
        idx, matched = side.probe(probe, ("k",))
        want = Counter({key: w for key, w in model.items() if key[0] in (0, 3)})
        assert as_counter(matched) == want and set(idx.tolist()) <= {0, 1}
        again = SideIndex(schema, ("k",))
        again.restore(side.snapshot())
        assert as_counter(again.contents()) == model
    if len(model) >= 3 and len(side._shared) >= 20:  # the shared ids are held once
        held = side._main.annotation.nbytes() + side._shared.nbytes
        assert held < sum(len(s) for _, _, s in model) * 4


@pytest.mark.parametrize("in_order", [True, False])
def test_side_index_of_rows_in_key_order_needs_no_permutation(in_order):
    """A side whose rows already come in key order (read from a table clustered on the
    key) is indexed by its keys alone; otherwise an int32 permutation. Probes find the
    same rows either way, and the index counts in the side's bytes once built."""
    import numpy as np
    import pyarrow as pa

    from imp_core.engine.annotation import Annotation
    from imp_core.engine.join_index import SideIndex
    from imp_core.engine.zset import DeltaBatch

    rng = np.random.default_rng(3)
    keys = np.sort(rng.integers(0, 500, 2000))
    if not in_order:
        keys = rng.permutation(keys)
    schema = pa.schema([("k", pa.int64()), ("v", pa.int64())])
    rows = pa.table({"k": keys, "v": np.arange(len(keys))}, schema=schema)
    side = SideIndex(schema, ("k",))
    side.apply(DeltaBatch(rows, np.ones(len(keys), np.int64), Annotation.singletons(keys)))
    side.contents()  # merged into the main part, as its first read does
    before = side.nbytes()
    probe_keys = rng.integers(0, 520, 50)
    probe = DeltaBatch(pa.table({"k": probe_keys}), np.ones(50, np.int64), Annotation.empty(50))
    idx, matched = side.probe(probe, ("k",))
    got = sorted(zip(idx.tolist(), matched.data.column("v").to_pylist()))
    want = sorted((i, v) for i, p in enumerate(probe_keys.tolist())
                  for v, k in enumerate(keys.tolist()) if k == p)
    assert got == want
    assert side._sorted is not None  # the main part was indexed: counted from now on
    assert (side._perm is None) == in_order
    assert side._perm is None or side._perm.dtype == np.int32
    if in_order:  # the index is the key column itself: a view, counted once
        key_column = side._main.data.column("k").chunk(0).to_numpy()
        assert np.shares_memory(side._sorted, key_column)
        assert side.nbytes() == before
    else:
        assert side.nbytes() >= before + side._sorted.nbytes + side._perm.nbytes


def test_join_side_bloom_filters_are_sized_by_their_distinct_keys():
    """A side's first load is counted once (an in-memory side's filter, built when first
    asked for, is sized for its rows, not twice them) and a probed side's filter for its
    distinct keys (lineitem by l_partkey holds 30 rows a key): no filter is rebuilt from
    the data layer at once, and every key loaded tests positive."""
    import numpy as np
    import pyarrow as pa

    from imp_core.engine.annotation import Annotation
    from imp_core.engine.join_index import SideIndex
    from imp_core.engine.probed_side import ProbedSide, VersionContext
    from imp_core.engine.zset import DeltaBatch
    from imp_core.plan.nodes import Field, Scan

    rng = np.random.default_rng(5)
    n = 20_000
    keys = rng.integers(0, 500, n)
    schema = pa.schema([("R.k", pa.int64()), ("R.v", pa.int64())])
    rows = DeltaBatch(pa.table({"R.k": keys, "R.v": np.arange(n)}, schema=schema),
                      np.ones(n, np.int64), Annotation.empty(n))

    memory = SideIndex(schema, ("R.k",))
    memory.apply(rows)
    assert memory.bloom is None  # built when a probe first has keys enough to use it
    assert memory.bloom_filter(rows, np.unique(keys)).all()
    assert memory.bloom is not None and memory.bloom.bits == BloomFilter.for_keys(n).bits

    class Probed(ProbedSide):
        def lookup(self, probe_keys):
            raise AssertionError("not probed here")

        def distinct_keys(self):
            raise AssertionError("the first load must not rebuild the filter")

    scan = Scan("R", ("k", "v"), (Field("R.k", pa.int64()), Field("R.v", pa.int64())))
    context = VersionContext()
    context.begin(None, {"R": 1})
    probed = Probed(scan, ("R.k",), context)
    probed.apply(rows)
    distinct = len(np.unique(keys))
    assert probed.bloom is not None and probed.bloom.count == distinct
    assert probed.bloom.bits == BloomFilter.for_keys(distinct).bits
    assert probed.bloom.might_contain(np.unique(keys)).all()
    assert not probed.bloom.saturated()


def test_side_index_reset_holds_exactly_the_rows_given():
    """``reset`` leaves a side as applying the difference would: the same contents, the
    same probes (keys indexed anew), the same snapshot."""
    import numpy as np
    import pyarrow as pa

    from imp_core.engine.annotation import Annotation
    from imp_core.engine.join_index import SideIndex
    from imp_core.engine.zset import DeltaBatch

    schema = pa.schema([("k", pa.int64()), ("v", pa.int64())])

    def rows(keys, ids):
        return DeltaBatch(pa.table({"k": keys, "v": [10 * k for k in keys]}, schema=schema),
                          np.ones(len(keys), np.int64), Annotation.from_sets(ids))

    old = rows([1, 2, 3], [[1, 7], [2, 7], [3, 7]])
    new = rows([2, 3, 4], [[2, 7], [3], [4, 9]])
    applied, reset = SideIndex(schema, ("k",)), SideIndex(schema, ("k",))
    for side in (applied, reset):
        side.apply(old)
    applied.apply(DeltaBatch.concat([old.negate(), new], schema))
    reset.reset(new)
    probe = DeltaBatch(pa.table({"k": [1, 2, 4, 5]}), np.ones(4, np.int64), Annotation.empty(4))

    def seen(side):
        c = side.contents().consolidate()
        idx, matched = side.probe(probe, ("k",))
        return (sorted(zip(c.data.column("k").to_pylist(), c.weights.tolist(),
                           map(tuple, c.annotation.row_sets()))),
                sorted(zip(idx.tolist(), matched.data.column("v").to_pylist())))

    assert seen(reset) == seen(applied)
    restored = SideIndex(schema, ("k",))
    restored.restore(reset.snapshot())
    assert seen(restored) == seen(applied)
    assert reset.bloom_filter(probe, np.array([4])).all()
    reset.apply(rows([5], [[1]]))  # added to the built filter when it is next asked
    assert reset.bloom_filter(probe, np.array([4, 5])).all()


def test_an_open_probed_side_filters_no_key_and_its_state_says_so():
    """An open side (``make_open``) keeps no Bloom filter: every probe key goes to the data
    layer, its snapshot says it is open and a restore keeps it so; a state written before
    sides could be open (no ``open`` column) restores as a side that filters."""
    from imp_core.engine.annotation import Annotation
    from imp_core.engine.probed_side import ProbedSide, VersionContext
    from imp_core.engine.zset import DeltaBatch
    from imp_core.plan.nodes import Field, Scan

    schema = pa.schema([("R.k", pa.int64()), ("R.v", pa.int64())])
    rows = DeltaBatch(pa.table({"R.k": [1, 2, 3], "R.v": [10, 20, 30]}, schema=schema),
                      np.ones(3, np.int64), Annotation.empty(3))
    asked: list[list[int]] = []

    class Probed(ProbedSide):
        def lookup(self, probe_keys):
            asked.append(sorted(probe_keys.column(0).to_pylist()))
            keep = np.isin(rows.data.column("R.k").to_numpy(),
                           probe_keys.column(0).to_numpy())
            return rows.filter(keep)

        def distinct_keys(self):
            raise AssertionError("an open side never rebuilds a filter")

    scan = Scan("R", ("k", "v"), (Field("R.k", pa.int64()), Field("R.v", pa.int64())))
    context = VersionContext()
    context.begin(None, {"R": 1})
    side = Probed(scan, ("R.k",), context)
    side.make_open()
    side.apply(rows)
    assert side.open and side.bloom is None and side.nbytes() == 0
    context.begin({"R": 1}, {"R": 2})
    probe = DeltaBatch(pa.table({"k": [2, 9]}), np.ones(2, np.int64), Annotation.empty(2))
    idx, found = side.probe(probe, ("k",))
    assert asked == [[2, 9]] and side.probes_skipped == 0  # 9, absent, is looked up too
    assert idx.tolist() == [0] and found.data.column("R.v").to_pylist() == [20]

    state = side.snapshot()
    assert state.column("open").to_pylist() == [True]
    again = Probed(scan, ("R.k",), context)
    again.restore(state)
    assert again.open and not again.filters and again.versions == {"R": 1}
    older = Probed(scan, ("R.k",), context)
    older.restore(state.drop_columns(["open"]))
    assert not older.open and older.filters and older.bloom is None  # an empty filter


def test_keys_from_whole_tables_traces_each_key_to_an_unfiltered_table():
    """A side's keys come from whole tables when each traces to a scan under projections
    only; a selection on that table, or a key computed rather than copied, does not."""
    from imp_core.plan.expr import BinaryOp, ColumnRef, Literal
    from imp_core.plan.lineage import keys_from_whole_tables
    from imp_core.plan.nodes import Field, Join, NamedExpr, Project, Scan, Select

    r = Scan("r", ("a", "b"), (Field("r.a", pa.int64()), Field("r.b", pa.int64())))
    s = Scan("s", ("c", "d"), (Field("s.c", pa.int64()), Field("s.d", pa.int64())))
    big = BinaryOp(">", ColumnRef("s.d"), Literal(5, pa.int64()))
    join = Join(r, Select(s, big), BinaryOp("=", ColumnRef("r.b"), ColumnRef("s.c")))
    assert keys_from_whole_tables(join, ("r.a",))
    assert not keys_from_whole_tables(join, ("s.d",))  # s is filtered
    assert not keys_from_whole_tables(join, ("r.a", "s.c"))
    renamed = Project(join, (NamedExpr("x", ColumnRef("r.a")),
                             NamedExpr("y", BinaryOp("+", ColumnRef("r.a"),
                                                     Literal(1, pa.int64())))))
    assert keys_from_whole_tables(renamed, ("x",))
    assert not keys_from_whole_tables(renamed, ("y",))  # computed, not a copy
    assert not keys_from_whole_tables(Select(r, BinaryOp("<", ColumnRef("r.a"),
                                                         Literal(3, pa.int64()))), ("r.a",))


def test_keys_looked_up_by_value_in_one_filtered_table_or_whole_tables():
    """A side is looked up by key value when its keys come from whole tables, or when it
    is one table's rows under selections and projections with keys copying its columns;
    not when it joins a filtered table to the key's, nor for a computed key."""
    from imp_core.plan.expr import BinaryOp, ColumnRef, Literal
    from imp_core.plan.lineage import keys_looked_up_by_value
    from imp_core.plan.nodes import Field, Join, NamedExpr, Project, Scan, Select

    r = Scan("r", ("a", "b"), (Field("r.a", pa.int64()), Field("r.b", pa.int64())))
    s = Scan("s", ("c", "d"), (Field("s.c", pa.int64()), Field("s.d", pa.int64())))
    small = Select(r, BinaryOp("<", ColumnRef("r.b"), Literal(3, pa.int64())))
    assert keys_looked_up_by_value(small, ("r.a",))
    assert keys_looked_up_by_value(small, ("r.a", "r.b"))
    renamed = Project(small, (NamedExpr("x", ColumnRef("r.a")),
                              NamedExpr("y", BinaryOp("+", ColumnRef("r.a"),
                                                      Literal(1, pa.int64())))))
    assert keys_looked_up_by_value(renamed, ("x",))
    assert not keys_looked_up_by_value(renamed, ("y",))  # computed, not a copy
    big = BinaryOp(">", ColumnRef("s.d"), Literal(5, pa.int64()))
    join = Join(r, Select(s, big), BinaryOp("=", ColumnRef("r.b"), ColumnRef("s.c")))
    assert keys_looked_up_by_value(join, ("r.a",))  # r is read whole
    assert not keys_looked_up_by_value(join, ("s.d",))  # a join of the filtered s
