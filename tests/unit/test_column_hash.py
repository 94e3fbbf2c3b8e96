"""Column hashes (``imp_core.engine.column_hash``) and the join keys made of them.

A join finds partners by equal key hashes, so equal values must hash alike whatever
their array's layout (slice offset, chunks, string or large_string, the short path or
the dictionary path of long columns); distinct values should not collide.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from imp_core.engine.column_hash import number_hashes, string_hashes
from imp_core.engine.join_index import key_hashes, keys_equal

texts = st.lists(st.one_of(st.none(), st.text(max_size=12)), min_size=0, max_size=60)


def _by_value(values: list, hashes: np.ndarray) -> dict:
    seen: dict = {}
    for v, h in zip(values, hashes.tolist()):
        seen.setdefault("" if v is None else v, set()).add(h)
    return seen


@settings(max_examples=200, deadline=None)
@given(texts, st.integers(0, 5))
def test_equal_strings_hash_alike_and_distinct_ones_do_not_collide(values, cut):
    arr = pa.array(values, type=pa.string())
    hashes = string_hashes(arr)
    seen = _by_value(values, hashes)
    assert all(len(h) == 1 for h in seen.values())  # a value, one hash (NULL as "")
    assert len({next(iter(h)) for h in seen.values()}) == len(seen)  # no collisions
    # a slice (non-zero offset) and the large_string kind hash each value alike
    assert string_hashes(arr.slice(min(cut, len(arr)))).tolist() == \
        hashes[min(cut, len(arr)):].tolist()
    assert string_hashes(arr.cast(pa.large_string())).tolist() == hashes.tolist()


@settings(max_examples=30, deadline=None)
@given(st.lists(st.text(max_size=6), min_size=1, max_size=20), st.integers(0, 2**32))
def test_long_columns_hash_through_their_dictionary_alike(distinct, seed):
    rng = np.random.default_rng(seed)
    picks = rng.integers(0, len(distinct) + 1, 5000)  # the extra index is a NULL
    values = [None if i == len(distinct) else distinct[i] for i in picks]
    long = string_hashes(pa.array(values, type=pa.string()))  # the dictionary path
    short = string_hashes(pa.array(distinct + [""], type=pa.string()))
    expected = short[picks]
    assert long.tolist() == expected.tolist()


def test_buffers_past_the_cached_powers_hash_alike(monkeypatch):
    """Buffers longer than the shared table of powers (grown, or computed for one call
    past its cap) hash each value as a short buffer does."""
    from imp_core.engine import column_hash

    values = ["x" * 700, "ab", "é" * 300, ""] * 3  # about 5 KB: past 1,024 bytes
    alone = [int(string_hashes(pa.array([v]))[0]) for v in values]
    monkeypatch.setattr(column_hash, "_TABLES", column_hash._power_tables(1024))
    assert string_hashes(pa.array(values)).tolist() == alone  # the table grows
    monkeypatch.setattr(column_hash, "_CACHED_POWERS", 2048)
    monkeypatch.setattr(column_hash, "_TABLES", column_hash._power_tables(1024))
    assert string_hashes(pa.array(values)).tolist() == alone  # past the cap
    assert len(column_hash._TABLES[0]) <= 2048


def test_numbers_hash_their_value_and_both_zeros_alike():
    ints = np.array([0, 1, -1, 2**62, 1], dtype=np.int64)
    h = number_hashes(ints)
    assert h[1] == h[4] and len(set(h.tolist())) == 4
    floats = number_hashes(np.array([0.0, -0.0, 1.5], dtype=np.float64))
    assert floats[0] == floats[1] != floats[2]


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["a", "bb", "", None, "ü"]),
                          st.one_of(st.none(), st.integers(-3, 3)),
                          st.sampled_from([1.0, -0.0, 0.0, 2.5])), min_size=1, max_size=40),
       st.integers(1, 4))
def test_join_keys_of_equal_rows_match_across_layouts(rows, chunks):
    """Two tables of the same rows, one of them in other types (large_string, int32,
    decimal) and chunks: hash-equal key pairs are exactly the value-equal pairs."""
    s, i, f = (list(c) for c in zip(*rows))
    left = pa.table({"s": pa.array(s, pa.string()), "i": pa.array(i, pa.int64()),
                     "f": pa.array(f, pa.float64())})
    size = -(-len(rows) // chunks)
    pieces = [pa.table({"s": pa.array(s[k:k + size], pa.large_string()),
                        "i": pa.array(i[k:k + size], pa.int32()),
                        "f": pa.array(f[k:k + size], pa.float64()).cast(pa.decimal128(6, 2))})
              for k in range(0, len(rows), size)]
    right = pa.concat_tables(pieces)
    keys = ("s", "i", "f")
    lh, lvalid, lexact = key_hashes(left, keys)
    rh, rvalid, _ = key_hashes(right, keys)
    assert not lexact
    assert lvalid.tolist() == [r[0] is not None and r[1] is not None for r in rows]
    assert lvalid.tolist() == rvalid.tolist()
    for a in range(len(rows)):
        for b in range(len(rows)):
            if not (lvalid[a] and rvalid[b]):
                continue
            same = (s[a], i[a], f[a]) == (s[b], i[b], f[b])  # -0.0 == 0.0 in Python too
            assert (lh[a] == rh[b]) == same
    ok = keys_equal(left, keys, right.combine_chunks(), keys)
    assert ok.tolist() == [bool(v) for v in lvalid]
