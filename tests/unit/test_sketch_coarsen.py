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
