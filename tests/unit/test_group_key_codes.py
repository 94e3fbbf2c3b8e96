"""Group keys of several or non-integer columns held as packed codes (``KeyCodes`` in
``GroupKeys``): every distinct key tuple gets one dense id that never changes, like a
dictionary of tuples, through columns outgrowing their bits and through the fall back to
dictionary keys when the codes no longer fit; keys come back exactly."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from imp_core.engine.operators import key_codes
from imp_core.engine.operators.groups import GroupKeys

TYPES = [pa.string(), pa.int64(), pa.float64()]
_ROW = st.tuples(st.one_of(st.none(), st.sampled_from(["a", "b", "ab", ""]),
                           st.text(max_size=3)),
                 st.one_of(st.none(), st.integers(-5, 5), st.integers(-(1 << 62), 1 << 62)),
                 st.one_of(st.none(), st.sampled_from([0.5, -1.25, 3.0])))


def _table(rows: list[tuple]) -> pa.Table:
    return pa.table({n: pa.array([r[j] for r in rows], t)
                     for j, (n, t) in enumerate(zip("abc", TYPES))})


def _check(keys: GroupKeys, batches: list[list[tuple]], by_add: bool) -> dict:
    seen: dict = {}
    for rows in batches:
        before = len(seen)
        if by_add:
            got = [keys.add(r) for r in rows]
        else:
            gids, inv = keys.lookup(_table(rows), ("a", "b", "c"))
            got = [int(gids[i]) for i in inv.tolist()]
        for row, g in zip(rows, got):
            if row in seen:
                assert g == seen[row]
            else:  # a new key gets a new id
                assert g >= before and g not in seen.values()
                seen[row] = g
        assert sorted(seen.values()) == list(range(len(seen)))  # dense
    assert len(keys) == len(seen)
    for row, g in seen.items():
        assert keys.gid_of(row) == g
        assert keys.key_of(g) == row
    by_id = sorted(seen, key=seen.get)
    cols = keys.key_arrays(np.arange(len(seen), dtype=np.int64))
    assert [tuple(c[i].as_py() for c in cols) for i in range(len(seen))] == by_id
    return seen


@settings(max_examples=60, deadline=None)
@given(batches=st.lists(st.lists(_ROW, max_size=30), max_size=8), by_add=st.booleans(),
       max_bits=st.sampled_from([62, 9]))
def test_coded_keys_match_a_dictionary(batches, by_add, max_bits):
    """Strings, integers (any width) and floats with NULLs, added a row or a batch at a
    time; with 9 bits in all, the codes soon no longer fit and the keys fall back to a
    dictionary, every id kept."""
    mp = pytest.MonkeyPatch()
    mp.setattr(key_codes, "MAX_BITS", max_bits)
    try:
        keys = GroupKeys(TYPES)
        _check(keys, batches, by_add)
        assert keys.gid_of(("never", 99, 0.5)) is None
    finally:
        mp.undo()


def test_columns_outgrow_their_bits_and_keys_stay_sorted():
    """Thousands of values in one column widen it several times; every key keeps its id,
    the arrays stay compact (no tuple a group) and lookups still find them."""
    keys = GroupKeys([pa.string(), pa.int32()])
    rng = np.random.default_rng(3)
    rows = [(f"brand{int(b)}", int(s)) for b, s in zip(rng.integers(0, 25, 5000),
                                                       rng.integers(0, 3000, 5000))]
    seen = {}
    for start in range(0, len(rows), 700):
        part = rows[start:start + 700]
        t = pa.table({"a": pa.array([r[0] for r in part]),
                      "b": pa.array([r[1] for r in part], pa.int32())})
        gids, inv = keys.lookup(t, ("a", "b"))
        for r, i in zip(part, inv.tolist()):
            assert seen.setdefault(r, int(gids[i])) == int(gids[i])
    assert keys._codes is not None and not keys.ids  # still coded
    assert keys._codes.bits[1] >= 12  # 3,000 supplier-like values
    main = keys._main_keys
    assert np.all(main[:-1] < main[1:])
    for r, g in seen.items():
        assert keys.gid_of(r) == g
    assert keys.nbytes() < 40 * len(seen) + 150 * 3025


def test_every_nan_is_one_group():
    """NaN keys from different batches (different float objects) are one group, as SQL
    groups them."""
    keys = GroupKeys([pa.float64(), pa.string()])
    first, _ = keys.lookup(pa.table({"x": [float("nan")], "s": ["a"]}), ("x", "s"))
    again, _ = keys.lookup(pa.table({"x": [float("nan"), 1.0], "s": ["a", "a"]}), ("x", "s"))
    assert int(again[0]) == int(first[0]) and len(keys) == 2
    assert keys.gid_of((float("nan"), "a")) == int(first[0])
