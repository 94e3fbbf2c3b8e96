"""The Arrow table a view of the driver's rows is made of (``imp_core.spark.driver_views``):
each row repeated by its weight, its fragments in one column whose type says whether
every row has one fragment, each row's set as the annotation holds it."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from imp_core.engine.annotation import Annotation
from imp_core.engine.zset import DeltaBatch
from imp_core.spark.driver_views import view_bytes, view_table

NAMES = ("t.a", "t.b")


def _batch(values: list[int], weights: list[int], sets: list[list[int]]) -> DeltaBatch:
    data = pa.table({"a": pa.array(values, pa.int64()),
                     "b": pa.array([str(v) for v in values])})
    return DeltaBatch(data, np.array(weights, dtype=np.int64), Annotation.from_sets(sets))


rows = st.lists(st.tuples(st.integers(-5, 5), st.integers(1, 3),
                          st.lists(st.integers(0, 40), max_size=4)), max_size=12)


@given(rows)
@settings(max_examples=60, deadline=None)
def test_rows_repeat_by_weight_with_their_fragment_sets(spec):
    batch = _batch([v for v, _, _ in spec], [w for _, w, _ in spec], [s for _, _, s in spec])
    table, ann = view_table(batch, NAMES, "__imp_d0")
    want = sorted((v, str(v), tuple(sorted(set(s)))) for v, w, s in spec for _ in range(w))
    assert table.num_rows == len(want)
    assert table.column_names[:2] == list(NAMES)
    if not any(s for _, _, s in spec):
        assert ann == () and table.num_columns == 2
        got = sorted((a, b, ()) for a, b in zip(*(table.column(n).to_pylist() for n in NAMES)))
        assert got == want
        return
    (col,) = ann
    assert col.name == "__imp_d0" and table.column_names[2] == "__imp_d0"
    ids = table.column("__imp_d0").to_pylist()
    if col.is_set:
        assert pa.types.is_list(table.schema.field("__imp_d0").type)
        sets = [tuple(x) for x in ids]
        assert all(list(s) == sorted(set(s)) for s in sets)  # ascending, no repeats
    else:
        assert table.schema.field("__imp_d0").type == pa.int32()
        assert all(len(set(s)) == 1 for _, _, s in spec)
        sets = [(x,) for x in ids]
    got = sorted(zip(table.column(NAMES[0]).to_pylist(), table.column(NAMES[1]).to_pylist(),
                     sets))
    assert got == want
    assert view_bytes(batch) > 0


def test_one_fragment_per_row_is_an_int_column():
    batch = DeltaBatch(pa.table({"a": [1, 2, 3]}), np.array([1, 2, 1], dtype=np.int64),
                       Annotation.singletons(np.array([7, 8, 9])))
    table, (col,) = view_table(batch, ("x",), "__imp_d3")
    assert not col.is_set
    assert table.to_pydict() == {"x": [1, 2, 2, 3], "__imp_d3": [7, 8, 8, 9]}


def test_a_row_and_its_retraction_leave_the_view():
    batch = DeltaBatch(pa.table({"a": [1, 2, 1]}), np.array([1, 1, -1], dtype=np.int64),
                       Annotation.singletons(np.array([5, 6, 5])))
    table, _ = view_table(batch, ("a",), "__imp_d0")
    assert table.to_pydict() == {"a": [2], "__imp_d0": [6]}


def test_a_negative_weight_is_refused():
    batch = DeltaBatch(pa.table({"a": [1, 2]}), np.array([1, -1], dtype=np.int64),
                       Annotation.singletons(np.array([0, 1])))
    with pytest.raises(ValueError, match="negative"):
        view_table(batch, ("a",), "__imp_d0")
