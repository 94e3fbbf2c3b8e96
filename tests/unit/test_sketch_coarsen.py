"""Coarsening a sketch for use: a superset with few ranges, never fewer fragments."""

from __future__ import annotations

import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st
from pyroaring import BitMap
from strategies import fragment_ids

from imp_core.sketch import PartitionSet, RangePartition, Sketch


@settings(max_examples=200, deadline=None)
@given(frags=fragment_ids(100), max_ranges=st.integers(1, 12))
def test_coarsened_is_a_superset_with_at_most_max_ranges(frags, max_ranges):
    part = RangePartition("t", "a", pa.int64(), tuple(range(10, 1000, 10)))
    sketch = Sketch(PartitionSet((part,)), BitMap(frags))
    coarse = sketch.coarsened(max_ranges)
    assert set(sketch.fragments) <= set(coarse.fragments)
    assert len(coarse.ranges("t")) <= max(max_ranges, 0) or not frags
    if len(sketch.ranges("t")) <= max_ranges:
        assert coarse == sketch
    # only gaps between the sketch's own ranges are filled
    if frags:
        assert min(coarse.fragments) == min(frags) and max(coarse.fragments) == max(frags)


@settings(max_examples=200, deadline=None)
@given(left=fragment_ids(100), right=fragment_ids(40), share=st.floats(0.0, 1.0))
def test_access_choice_drops_only_broad_filters_and_stays_a_superset(left, right, share):
    """``choose_access`` (RunQuery's access path): a table keeps the sketch's filter iff
    the coarse filter admits at most ``share`` of its fragments; a table without a filter
    is read whole; what Spark filters by is a superset of the sketch (so the result of a
    safe sketch is unchanged), and with no filter left the query runs plain."""
    from imp_core.spark.access import choose_access, read_shares
    from imp_core.spark.compile import MAX_PREDICATE_RANGES

    parts = PartitionSet((RangePartition("l", "a", pa.int64(), tuple(range(10, 1000, 10))),
                          RangePartition("r", "b", pa.int64(), tuple(range(5, 200, 5)))))
    sketch = Sketch(parts, BitMap(left) | BitMap(f + 100 for f in right))
    choice = choose_access(sketch, share)
    shares = read_shares(sketch)
    coarse = sketch.coarsened(MAX_PREDICATE_RANGES)
    assert shares == {"l": len(coarse.table_fragments("l")) / 100,
                      "r": len(coarse.table_fragments("r")) / 40}
    assert choice.filtered == tuple(t for t in ("l", "r") if shares[t] <= share)
    if not choice.filtered:
        assert choice.path == "plain" and choice.sketch is None and "plain" in choice.reason
        return
    assert choice.path == "sketch"
    assert set(sketch.fragments) <= set(choice.sketch.fragments)
    for table, size in (("l", 100), ("r", 40)):
        got = choice.sketch.table_fragments(table)
        if table in choice.filtered:
            assert got == sketch.table_fragments(table)
        else:
            assert got == list(range(size))  # read whole
