"""Per-group ordered multisets of values: the state of an incremental MIN or MAX.

A group's multiset maps each non-NULL value to its count (always > 0). A group of a few
distinct values (most groups: ``min(ps_supplycost)`` per part holds about four) is a
plain dict, its extreme found by a scan; past ``SMALL`` distinct values it becomes a
``SortedDict``, whose extreme is at an end. Both answer the same; a plain dict costs a
hundredth of a ``SortedDict`` to make, which matters when a first load creates one per
group (10^5 and more).

Invariants: ``complete[g]`` is False only for a bounded group (``buffer``) that dropped
values; then its multiset holds the group's ``buffer`` best distinct values (the smallest
for MIN, the largest for MAX), never fewer unless deletions removed kept ones.
"""

from __future__ import annotations

from typing import Any, Iterable

from sortedcontainers import SortedDict

from imp_core.errors import StateExhaustedError

Values = dict[Any, int]  # a plain dict or a SortedDict


class MinMaxSets:
    """Per-group ordered multisets {value: count} of non-NULL values, maybe bounded."""

    SMALL = 16  # distinct values a group holds in a plain dict

    def __init__(self, is_max: bool, buffer: int | None):
        self.is_max = is_max
        self.buffer = buffer
        self.sets: dict[int, Values] = {}
        self.complete: dict[int, bool] = {}

    # -- the two ends of a multiset -----------------------------------------------------
    @staticmethod
    def _low(s: Values) -> Any:
        return s.peekitem(0)[0] if isinstance(s, SortedDict) else min(s)

    @staticmethod
    def _high(s: Values) -> Any:
        return s.peekitem(-1)[0] if isinstance(s, SortedDict) else max(s)

    def extreme(self, g: int) -> Any:
        s = self.sets.get(g)
        if not s:
            return None
        return self._high(s) if self.is_max else self._low(s)

    def _worst(self, s: Values) -> Any:
        return self._low(s) if self.is_max else self._high(s)

    def _drop_worst(self, s: Values) -> None:
        if isinstance(s, SortedDict):
            s.popitem(0 if self.is_max else -1)
        else:
            del s[self._worst(s)]

    def _better_or_equal(self, v: Any, w: Any) -> bool:
        return v >= w if self.is_max else v <= w

    def _sized(self, g: int, s: Values) -> Values:
        """``s`` in the representation its size calls for (a large one sorted)."""
        if len(s) > self.SMALL and not isinstance(s, SortedDict):
            s = self.sets[g] = SortedDict(s)
        return s

    # -- updates ------------------------------------------------------------------------
    def update(self, g: int, value: Any, w: int) -> None:
        s = self.sets.get(g)
        if s is None:
            s = self.sets[g] = {}
            self.complete[g] = True
        complete = self.complete[g]
        if w > 0:
            if not complete and (not s or not self._better_or_equal(value, self._worst(s))):
                # belongs to the part of the group that is not kept (with every kept value
                # deleted, nothing is known to be kept: the refill must decide)
                return
            s[value] = s.get(value, 0) + w
            s = self._sized(g, s)
        else:
            c = s.get(value)
            if c is None:
                if complete:
                    raise StateExhaustedError(f"deleting value {value!r} that group never had")
                return
            if c + w > 0:
                s[value] = c + w
            else:
                del s[value]
        self._bound(g, s)

    def _bound(self, g: int, s: Values) -> None:
        if self.buffer is not None and len(s) > self.buffer:
            # keep the best ``buffer`` values: still a prefix of the group's sorted values
            # (complete or not), so the bound holds for incomplete groups too
            while len(s) > self.buffer:
                self._drop_worst(s)
            self.complete[g] = False

    def mark_complete_if_whole(self, g: int, nonnull: int) -> None:
        """A bounded multiset that holds all ``nonnull`` values of its group is complete
        again (e.g. a group whose values were all deleted)."""
        if not self.complete.get(g, True):
            s = self.sets.get(g)
            if (sum(s.values()) if s else 0) == nonnull:
                self.complete[g] = True

    def needs_refill(self, g: int, nonnull: int) -> bool:
        return nonnull > 0 and not self.sets.get(g)

    def refill(self, g: int, values: dict) -> None:
        self.complete[g] = True
        s = self.sets[g] = dict(values)
        self._bound(g, self._sized(g, s))

    # -- state ------------------------------------------------------------------------
    def load(self, values: Iterable[tuple[int, Any, int]],
             complete: Iterable[tuple[int, bool]]) -> None:
        """Replace every multiset by ``(group, value, count)`` triples and each group's
        ``(group, complete)`` flag (a group may have a flag and no values)."""
        self.sets, self.complete = {}, {}
        for g, v, c in values:
            self.sets.setdefault(g, {})[v] = c
        for g, comp in complete:
            self.complete[g] = comp
            self.sets.setdefault(g, {})
        for g, s in list(self.sets.items()):
            self._sized(g, s)
