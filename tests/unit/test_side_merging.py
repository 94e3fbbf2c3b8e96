"""How join sides hold their rows: a side read once its pending rows are as many as its
main part's merges them first (so a side fed by a grouping, each change a retraction
and a new row, is not read with every version of a key), equal rows are held as one
row of summed weight, and deltas are consolidated before a join only where they can
repeat rows. Each changes the work only: the contents stay the same Z-set."""

from __future__ import annotations

import random
from collections import Counter

import numpy as np
import pyarrow as pa
import pytest

from imp_core.engine.annotation import Annotation
from imp_core.engine.join_index import SideIndex, _repeats
from imp_core.engine.operators.join import JoinOp
from imp_core.engine.zset import DeltaBatch
from imp_core.plan.nodes import Join
from imp_core.sql.planner import plan_sql

SCHEMA = pa.schema([("k", pa.int64()), ("v", pa.int64())])
LIVE = 20


def _batch(rows: list[tuple[int, int]], weights: list[int], ids: list[list[int]]) -> DeltaBatch:
    data = pa.table({"k": [r[0] for r in rows], "v": [r[1] for r in rows]}, schema=SCHEMA)
    return DeltaBatch(data, np.array(weights, dtype=np.int64), Annotation.from_sets(ids))


def _zset(batch: DeltaBatch) -> Counter:
    out: Counter = Counter()
    for (row, ids), w in batch.to_counter().items():
        out[(row, ids)] += w
    return Counter({k: v for k, v in out.items() if v})


@pytest.mark.parametrize("read", ["probe", "contents"])
def test_a_churning_side_is_read_without_its_retracted_versions(read: str) -> None:
    rng = random.Random(7)
    side = SideIndex(SCHEMA, ("k",), merge_equal=True)
    # every row carries the ids 0..9 (shared, factored out) and one of its own
    value = {k: 0 for k in range(LIVE)}
    own = {k: 10 + k % 3 for k in range(LIVE)}
    side.apply(_batch([(k, 0) for k in range(LIVE)], [1] * LIVE,
                      [list(range(10)) + [own[k]] for k in range(LIVE)]))
    for _ in range(60):
        keys = rng.sample(range(LIVE), 6)
        rows, weights, ids = [], [], []
        for k in keys:  # a group's change: its old row out, its new row in
            rows += [(k, value[k]), (k, value[k] + 1)]
            weights += [-1, 1]
            ids += [list(range(10)) + [own[k]]] * 2
            value[k] += 1
        side.apply(_batch(rows, weights, ids))
        model = Counter({((k, v), tuple(range(10)) + (own[k],)): 1 for k, v in value.items()})
        if read == "probe":
            probe = pa.table({"k": list(range(LIVE))}, schema=pa.schema([("k", pa.int64())]))
            idx, matched = side.probe(DeltaBatch(probe, np.ones(LIVE, dtype=np.int64),
                                                 Annotation.empty(LIVE)), ("k",))
            assert len(idx) == len(matched)
            seen = matched
        else:
            seen = side.contents()
        assert _zset(seen) == model
        # a few versions a key, not one for each change since the first (720 rows)
        assert len(seen) <= 4 * LIVE


def test_repeats_are_told_by_the_rows_hashes() -> None:
    distinct = pa.table({"a": list(range(100)), "b": ["x"] * 100})
    assert not _repeats(distinct)
    repeated = pa.table({"a": [i % 80 for i in range(100)], "b": ["x"] * 100})
    assert _repeats(repeated)
    nulls = pa.table({"a": [None] * 50 + list(range(50)), "b": ["x"] * 100})
    assert _repeats(nulls)  # NULLs repeat too
    assert not _repeats(distinct.slice(0, 1))
    # numbers that repeat, told apart by the text (hashed only then)
    by_text = pa.table({"a": [i % 10 for i in range(100)], "b": [f"s{i}" for i in range(100)],
                        "c": [1.5] * 100})
    assert not _repeats(by_text)
    assert _repeats(by_text.set_column(1, "b", pa.array([f"s{i % 20}" for i in range(100)])))
    # rows all numbers or all text
    assert _repeats(pa.table({"b": ["x", "y"] * 50})) and not _repeats(pa.table(
        {"b": [str(i) for i in range(100)]}))


def test_a_side_of_equal_rows_holds_them_once() -> None:
    side = SideIndex(SCHEMA, ("k",), merge_equal=True)
    side.apply(_batch([(k // 7, 0) for k in range(70)], [1] * 70, [[]] * 70))
    held = side.contents()
    assert len(held) == 10 and held.weights.tolist() == [7] * 10
    _, matched = side.probe(DeltaBatch(pa.table({"k": [3]}), np.ones(1, dtype=np.int64),
                                       Annotation.empty(1)), ("k",))
    assert matched.weights.tolist() == [7]


CATALOG = {"f": pa.schema([("id", pa.int64()), ("wk", pa.int64()), ("v", pa.int64())]),
           "d": pa.schema([("day", pa.int64()), ("wk", pa.int64()), ("yr", pa.int64())])}


def _merges(sql: str) -> list[tuple[bool, bool]]:
    """Each join's (left, right) consolidation flags, leaves first."""
    joins = [n for n in plan_sql(sql, CATALOG).root.walk() if isinstance(n, Join)]
    return [JoinOp(j, str(i)).merge_inputs for i, j in enumerate(reversed(joins))]


def test_deltas_are_consolidated_only_where_rows_can_repeat() -> None:
    # an aggregation's rows, whole: one retraction and one new row per group
    assert _merges("SELECT a.wk, a.t, d.day FROM (SELECT wk, sum(v) AS t FROM f "
                   "GROUP BY wk) a JOIN d ON a.wk = d.wk") == [(False, False)]
    # projected to the sums without the week: two weeks' rows can be equal
    assert _merges("SELECT a.t, d.day FROM (SELECT t FROM (SELECT wk, sum(v) AS t FROM f "
                   "GROUP BY wk) x) a JOIN d ON a.t = d.wk") == [(True, False)]
    # an aggregation's rows joined with the days of their week, then back to the week
    (lower, upper) = _merges(
        "SELECT y.wk, y.t, z.t FROM (SELECT w.wk, w.t FROM (SELECT wk, sum(v) AS t FROM f "
        "GROUP BY wk) w, d WHERE d.wk = w.wk AND d.yr = 0) y, (SELECT wk, sum(v) AS t "
        "FROM f GROUP BY wk) z WHERE y.wk = z.wk - 1")
    assert lower == (False, False) and upper == (True, False)


@pytest.mark.parametrize("collide", [False, True])
def test_a_filtered_probe_keeps_the_pairs_its_test_keeps(collide: bool, monkeypatch) -> None:
    """A probe with a ``PairFilter`` (a join's residual) returns exactly the pairs of the
    plain probe that the test keeps, from the main and the pending part alike; the test
    sees only pairs of equal keys, even when every key hash collides."""
    from imp_core.engine import join_index

    if collide:
        monkeypatch.setattr(join_index, "string_hashes",
                            lambda column: np.zeros(len(column), dtype=np.uint64))
        join_index._RECENT_KEYS.clear()
    schema = pa.schema([("k", pa.string()), ("v", pa.int64())])
    rng = random.Random(7)

    def batch(n: int) -> DeltaBatch:
        data = pa.table({"k": [rng.choice("abcd") for _ in range(n)],
                         "v": [rng.randrange(10) for _ in range(n)]}, schema=schema)
        return DeltaBatch(data, np.array([rng.choice([1, 1, -1]) for _ in range(n)]),
                          Annotation.from_sets([[rng.randrange(5)] for _ in range(n)]))

    side = SideIndex(schema, ("k",))
    side.apply(batch(40))
    side._merge()
    side.apply(batch(8))  # pending beside the main part
    delta = batch(6)
    seen: list[tuple[str, str]] = []

    def test(probe_idx: np.ndarray, columns: list, weights: np.ndarray) -> np.ndarray:
        keys = delta.data.column("k").take(probe_idx).to_pylist()
        seen.extend(zip(keys, columns[0].to_pylist()))
        return (np.asarray(columns[1]) + np.asarray(delta.data.column("v"))[probe_idx]) % 3 == 0

    all_idx, all_rows = side.probe_parts(delta, ("k",))
    idx, rows = side.probe_parts(delta, ("k",), keep=join_index.PairFilter([0, 1], test))
    assert seen and all(a == b for a, b in seen)
    def pairs(index: np.ndarray, rows: DeltaBatch) -> list[tuple]:
        ids = [tuple(sorted(rows.annotation.row(j).tolist())) for j in range(len(rows))]
        return [(i, tuple(r.values()), a, int(w)) for i, r, a, w in
                zip(index.tolist(), rows.data.to_pylist(), ids, rows.weights)]

    v = delta.data.column("v").to_pylist()
    expected = Counter(p for p in pairs(all_idx, all_rows) if (p[1][1] + v[p[0]]) % 3 == 0)
    assert Counter(pairs(idx, rows)) == expected and sum(expected.values()) < len(all_idx)


def test_a_lazily_built_bloom_filter_keeps_every_key_held() -> None:
    """The filter is built when first asked for, takes the keys applied since at the next
    ask and is rebuilt from the main and the pending parts once saturated: every key of
    a row of positive weight tests positive throughout."""
    side = SideIndex(SCHEMA, ("k",))
    held: list[int] = []
    rebuilt = 0
    for step in range(60):
        keys = list(range(step * 100, step * 100 + 100))
        side.apply(_batch([(k, 0) for k in keys], [1] * 100, [[]] * 100))
        held += keys
        before = side.bloom
        assert side.bloom_filter(side.contents(), np.array(held)).all()
        rebuilt += before is not None and side.bloom is not before
    assert rebuilt >= 1  # 6,000 keys saturate a filter made for 1,280
