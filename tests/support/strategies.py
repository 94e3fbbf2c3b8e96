"""Hypothesis strategies shared by the property tests: the one place to define them.

Each strategy draws values of the shape its name says and nothing else: ``fragment_ids``
only ids of existing fragments, ``partition_bounds`` only strictly increasing bounds (what
``RangePartition.from_bounds`` accepts), ``indices`` only valid positions. Shrinking goes
towards fewer and smaller values, so a failing example comes back small.
"""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

INT64 = st.integers(-2**63, 2**63 - 1)
"""Any signed 64-bit integer (the engine's key and hash domain)."""

SEEDS = st.integers(0, 2**31 - 1)
"""Seeds for ``numpy.random.default_rng`` / ``random.Random`` driven tests."""


def nullable(elements: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """``elements`` or NULL (``None``)."""
    return st.one_of(st.none(), elements)


def partition_bounds(elements: st.SearchStrategy[Any], max_size: int
                     ) -> st.SearchStrategy[list[Any]]:
    """Strictly increasing range-partition bounds drawn from ``elements``."""
    return st.lists(elements, unique=True, max_size=max_size).map(sorted)


def fragment_ids(n: int, max_size: int | None = None) -> st.SearchStrategy[set[int]]:
    """A set of fragment ids of a partitioning with ``n`` fragments (ids 0..n-1)."""
    return st.sets(st.integers(0, n - 1), max_size=max_size)


def fragment_sets(n: int, max_size: int | None = None) -> st.SearchStrategy[list[int]]:
    """One row's annotation: a sorted list of distinct fragment ids below ``n``."""
    return fragment_ids(n, max_size).map(sorted)


def indices(n: int, max_size: int | None = None, unique: bool = False
            ) -> st.SearchStrategy[list[int]]:
    """Positions into a sequence of length ``n`` (``n`` > 0), repeats allowed unless
    ``unique``."""
    return st.lists(st.integers(0, n - 1), unique=unique, max_size=max_size)


def zset_weights(n: int, bound: int = 1) -> st.SearchStrategy[list[int]]:
    """``n`` Z-set weights in ``[-bound, bound]`` (zeros included: code must not assume a
    batch holds none)."""
    return st.lists(st.integers(-bound, bound), min_size=n, max_size=n)
