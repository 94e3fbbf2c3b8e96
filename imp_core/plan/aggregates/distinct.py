"""COUNT(DISTINCT x) and every ``f(DISTINCT x)``: an aggregate over the distinct values.

``f(DISTINCT x)`` is not a function with state of its own: the planner computes it as
``f`` over a DISTINCT of the group keys and ``x`` (``imp_core.sql.aggregation``), so its
delta rule and provenance are those of the ``Distinct`` operator (a row is in its output
while its multiplicity is positive; Lineage: every input row of the distinct value) below
those of ``f``. COUNT(DISTINCT x) is thus COUNT over the distinct values: never NULL,
monotone like COUNT. MIN and MAX ignore duplicates anyway, so their DISTINCT is dropped.
This module names the calls: a DISTINCT call of ``f`` is the call ``"distinct_" + f`` until
the planner takes the prefix off.

>>> from imp_core.plan.aggregates import count
>>> distinct_call(count.COUNT)
'distinct_count'
>>> is_distinct("distinct_count"), plain_function("distinct_count")
(True, 'count')
"""

from __future__ import annotations

from imp_core.plan.aggregates.base import AggregateFunction

PREFIX = "distinct_"


def distinct_call(fn: AggregateFunction) -> str:
    """The name of the call ``fn(DISTINCT x)``: ``fn`` itself where duplicates never
    matter (MIN, MAX), else the DISTINCT call."""
    return fn.name if fn.extremes else PREFIX + fn.name


def is_distinct(func: str) -> bool:
    """Whether the call named ``func`` aggregates distinct values."""
    return func.startswith(PREFIX)


def plain_function(func: str) -> str:
    """The function a (DISTINCT or plain) call named ``func`` computes."""
    return func.removeprefix(PREFIX)
