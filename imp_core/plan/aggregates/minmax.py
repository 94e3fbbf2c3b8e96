"""MIN(x) and MAX(x): the best non-NULL value of a group, NULL when there is none.

Delta rule: not linear; the state is an ordered multiset of the group's non-NULL values
with their net counts (``imp_core.engine.operators.minmax``), a delta row of weight w
adding w to its value's count, the value being the multiset's first (min) or last (max)
value of positive count. A bounded multiset holds the best values only and is refilled
from the input when deletions empty it. A partial group's max is no larger (min no
smaller) than the whole group's.
"""

from __future__ import annotations

import pyarrow as pa

from imp_core.plan.aggregates.base import AggregateFunction, GroupState, Monotonicity, ValueRange


class Extreme(AggregateFunction):
    extremes = True
    value_range = ValueRange.ARGUMENT

    def __init__(self, name: str, partial: Monotonicity) -> None:
        self.name = name  # type: ignore[misc]  # per instance: "min" or "max"
        self.sql_keys = (name,)  # type: ignore[misc]
        self.partial = partial  # type: ignore[misc]
        self.spark_name = name.upper()  # type: ignore[misc]
        self.largest_first = partial is Monotonicity.SMALLER  # type: ignore[misc]  # max

    def result_type(self, dtype: pa.DataType | None) -> pa.DataType:
        assert dtype is not None
        return dtype

    def finalize(self, state: GroupState, dtype: pa.DataType | None) -> pa.Array:
        return pa.array(state.extremes, type=dtype)


MIN = Extreme("min", Monotonicity.LARGER)
MAX = Extreme("max", Monotonicity.SMALLER)
FUNCTIONS = (MIN, MAX)
