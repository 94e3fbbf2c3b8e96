"""The total order used by top-k: SQL order keys, then the other columns, then annotation.

Making the order total means the top-k result, and so its sketch, is deterministic
(NaN included: it equals itself and orders above every number, as in Spark SQL);
the incremental operator and the reference evaluator share this definition.
"""

from __future__ import annotations

import functools
from typing import Any, Sequence

from imp_core.plan.nodes import SortKey


@functools.total_ordering
class _Desc:
    __slots__ = ("v",)

    def __init__(self, v: Any):
        self.v = v

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Desc) and self.v == other.v

    def __lt__(self, other: _Desc) -> bool:
        return other.v < self.v

    def __hash__(self) -> int:
        return hash(self.v)


def _component(v: Any, descending: bool, nulls_first: bool) -> tuple:
    if v is None:
        return (0 if nulls_first else 2, 0)
    if v != v:  # NaN: equal to itself and above every number, as in Spark
        return (0.5 if descending else 1.5, 0)
    return (1, _Desc(v) if descending else v)


def sort_key(row: Sequence[Any], ann: tuple[int, ...] | bytes, order: Sequence[SortKey],
             positions: Sequence[int], rest: Sequence[int]) -> tuple:
    """Key of an annotated tuple; ``positions`` index the order columns in ``row``; ``ann``
    its ids as a sorted tuple or as their ``set_key``, which orders alike."""
    head = tuple(_component(row[p], k.descending, k.effective_nulls_first)
                 for p, k in zip(positions, order))
    tail = tuple(_component(row[p], False, True) for p in rest)
    return head + tail + (ann,)
