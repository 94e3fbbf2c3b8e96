"""The embedded API (``imp_core.embedded.api.Engine``) as a user drives it.

- Table contents equal a plain multiset model after random insert/delete sequences,
  keyed and keyless, with duplicate rows, including when compaction runs often; a failed
  call changes nothing; every registered sketch equals the recapture after each call.
- A one-row delete costs about one row: 200 of them on a 50k-row keyless table index the
  table once (an operation count, not a timing).
- ``RegisteredQuery.partition`` / ``bounds`` expose the partition a sketch is built on.
"""

from __future__ import annotations

import datetime as dt
import time
from collections import Counter

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from imp_core.embedded import memtable
from imp_core.embedded.api import Engine
from imp_core.errors import PartitionError, SchemaMismatchError
from imp_core.sketch.partition import RangePartition

SCHEMA = pa.schema([("id", pa.int64()), ("g", pa.int64()), ("v", pa.float64())])
SQL = "SELECT g, count(*) AS n, sum(v) AS s FROM t GROUP BY g"


def _rows(table: pa.Table) -> Counter:
    return Counter(zip(*[c.to_pylist() for c in table.columns]))


def _table(rows: list[tuple]) -> pa.Table:
    return pa.Table.from_arrays([pa.array([r[i] for r in rows], type=f.type)
                                 for i, f in enumerate(SCHEMA)], schema=SCHEMA)


ROW = st.tuples(st.integers(0, 30), st.integers(0, 3), st.sampled_from([0.5, 1.25, -2.0]))
STEP = st.tuples(st.lists(ROW, max_size=6), st.lists(st.integers(0, 10**6), max_size=4),
                 st.booleans())


@pytest.mark.parametrize("keyed", [False, True])
@pytest.mark.parametrize("compact_often", [False, True])
@settings(max_examples=40, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(initial=st.lists(ROW, max_size=12), steps=st.lists(STEP, max_size=10))
def test_contents_follow_a_multiset_model(keyed, compact_often, initial, steps, monkeypatch):
    if compact_often:  # the same for every example, so the fixture may be shared
        monkeypatch.setattr(memtable, "MIN_PURGE", 0)
        monkeypatch.setattr(memtable, "MAX_CHUNKS", 2)
        # a keyed table switches from joins to its index within the sequence
        monkeypatch.setattr(memtable, "JOIN_LOOKUPS", 2)
    if keyed:  # unique ids: renumber
        initial = [(i, g, v) for i, (_, g, v) in enumerate(initial)]
    eng = Engine()
    eng.create_table("t", _table(initial), key="id" if keyed else None)
    q = eng.register(SQL, partitions={"t.g": [1, 2]})
    model = Counter(initial)
    next_id = 1000
    for inserts, picks, bogus in steps:
        stored = sorted(model.elements())
        # distinct stored occurrences (equal rows may be picked up to their multiplicity)
        dels = [stored[p] for p in dict.fromkeys(p % len(stored) for p in picks)] \
            if stored else []
        if keyed:
            dels = list(dict.fromkeys(dels))  # a key is deleted at most once per call
            inserts = [(next_id + i, g, v) for i, (_, g, v) in enumerate(inserts)]
            next_id += len(inserts)
        if bogus:  # a row that is not stored (or, keyed, an insert of a live key)
            before = _rows(eng.table("t"))
            with pytest.raises(SchemaMismatchError):
                if keyed and stored:
                    eng.insert("t", _table([stored[0]]))
                else:
                    eng.delete("t", _table([(-1, 0, 0.0)]))
            assert _rows(eng.table("t")) == before
        eng.apply("t", inserts=_table(inserts), deletes=_table(dels))
        model.update(inserts)
        model.subtract(dels)
        model = +model
        assert _rows(eng.table("t")) == model
        assert q.sketch == q.reference().sketch
        assert q.result_rows() == q.reference().rows()


@pytest.mark.parametrize("joins", [0, 16])
def test_keyed_changes_are_checked_alike_by_join_and_by_index(joins, monkeypatch):
    """A keyed table finds the rows of its first changes by a join, later ones by its
    index: the same rows deleted, the same refusals, nothing changed by a refused call."""
    monkeypatch.setattr(memtable, "JOIN_LOOKUPS", joins)
    schema = pa.schema([("a", pa.string()), ("b", pa.date32()), ("v", pa.int64())])

    def rows(*keys):
        return pa.Table.from_pylist([{"a": a, "b": dt.date(2020, 1, b), "v": v}
                                     for a, b, v in keys], schema=schema)

    eng = Engine()
    eng.create_table("t", rows(("x", 1, 1), ("x", 2, 2), ("y", 1, 3)), key=["a", "b"])
    refusals = [
        ("cannot delete from t: no row", None, rows(("z", 1, 0))),
        ("cannot delete from t: no row", None, rows(("x", 1, 9), ("x", 1, 9))),
        ("duplicate key in t", rows(("x", 2, 5)), None),
        ("duplicate key in t", rows(("q", 1, 5), ("q", 1, 6)), None),
    ]
    for match, inserts, deletes in refusals:
        with pytest.raises(SchemaMismatchError, match=match):
            eng.apply("t", inserts=inserts, deletes=deletes)
        assert _rows(eng.table("t")) == _rows(rows(("x", 1, 1), ("x", 2, 2), ("y", 1, 3)))
    # keyed deletes match by key only; a key deleted and inserted in one call is replaced
    eng.apply("t", inserts=rows(("x", 1, 7), ("q", 3, 8)), deletes=rows(("x", 1, 0)))
    assert _rows(eng.table("t")) == _rows(rows(("x", 2, 2), ("y", 1, 3), ("x", 1, 7),
                                               ("q", 3, 8)))
    table = eng._get("t")
    assert (table.joined_lookups, table._index is None) == \
        ((5, True) if joins else (0, False))


@pytest.mark.parametrize("key", [None, "id"])
def test_one_row_deletes_cost_one_row(key):
    n = 50_000
    rng = np.random.default_rng(0)
    data = pa.table({"id": np.arange(n), "g": rng.integers(0, 100, n),
                     "v": rng.random(n), "w": rng.integers(0, 10**6, n)})
    eng = Engine()
    eng.create_table("t", data, key=key)
    q = eng.register("SELECT g, sum(w) AS s FROM t GROUP BY g", partitions={"t.g": 8})
    victims = rng.choice(n, size=200, replace=False)
    start = time.perf_counter()
    for i in victims:
        eng.delete("t", data.slice(int(i), 1))
    elapsed = time.perf_counter() - start
    # the table is hashed once, not once per call (200 * 50k before)
    assert eng._get("t").indexed_rows == n
    assert elapsed < 30, elapsed  # generous: about 0.3 s on a 2-core machine
    assert eng.table("t").num_rows == n - 200
    keep = np.ones(n, dtype=bool)
    keep[victims] = False
    assert _rows(eng.table("t")) == _rows(data.filter(pa.array(keep)))
    assert q.sketch == q.reference().sketch


def test_failed_call_changes_nothing():
    eng = Engine()
    eng.create_table("t", _table([(1, 0, 0.5), (2, 1, 1.25)]), key="id")
    q = eng.register(SQL, partitions={"t.g": [1]})
    before, sketch = _rows(eng.table("t")), q.sketch
    with pytest.raises(SchemaMismatchError, match="missing columns"):
        eng.insert("t", _table([(3, 0, 0.5)]).drop_columns(["v"]))
    with pytest.raises(SchemaMismatchError, match="duplicate key"):
        eng.apply("t", inserts=_table([(3, 0, 0.5), (3, 1, 0.5)]))
    with pytest.raises(SchemaMismatchError, match="no row"):
        eng.apply("t", inserts=_table([(4, 0, 0.5)]), deletes=_table([(9, 0, 0.5)]))
    with pytest.raises(SchemaMismatchError, match="has type string"):
        eng.insert("t", _table([(3, 0, 0.5)]).set_column(1, "g", pa.array(["x"])))
    assert _rows(eng.table("t")) == before and q.sketch == sketch
    # deleting a key and inserting it again in one call is an update
    eng.update("t", _table([(1, 0, 0.5)]), _table([(1, 1, 2.0)]))
    assert _rows(eng.table("t")) == Counter({(1, 1, 2.0): 1, (2, 1, 1.25): 1})


def test_partition_and_bounds_accessors():
    eng = Engine()
    eng.create_table("t", _table([(i, i % 4, 0.5) for i in range(20)]), key="id")
    q = eng.register(SQL, partitions={"t.g": [1, 3]})
    part = q.partition("t")
    assert isinstance(part, RangePartition) and (part.table, part.column) == ("t", "g")
    assert q.bounds("t") == [1, 3] == q.bounds("T")
    with pytest.raises(PartitionError, match="no partition on table"):
        q.bounds("nope")


def test_a_top_k_buffer_below_k_keeps_k_and_refills_after_deletes():
    """A buffer is a default for every top-k (the service's IMP_TOPK_BUFFER): a query
    whose k is larger keeps k entries; deleting the best rows refills it, so the
    maintained result and sketch stay those of a recapture."""
    from imp_core.engine.pipeline import EngineOptions

    eng = Engine(EngineOptions(topk_buffer=2))
    rows = [(i, i % 3, float(i)) for i in range(40)]
    eng.create_table("t", _table(rows), key="id")
    sql, parts = "SELECT id, v FROM t ORDER BY v DESC LIMIT 5", {"t.id": [10, 20, 30]}
    q = eng.register(sql, partitions=parts)
    for best in range(39, 30, -1):  # delete the current best, one row at a time
        eng.delete("t", _table([rows[best]]))
        assert _rows(q.result()) == Counter({(i, float(i)): 1 for i in range(best - 5, best)})
        assert q.sketch == eng.register(sql, partitions=parts).sketch
