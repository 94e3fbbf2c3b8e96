"""COUNT(x) and COUNT(*): the non-NULL count and CNT of a group.

Delta rule: both are linear, a delta row of weight w adds w to CNT and, when x is not
NULL, to the non-NULL count; the state of a group is exactly (CNT, non-NULL count) of its
current input, and the value is never NULL (0 over no non-NULL value). A partial group
counts no more rows than the whole one.
"""

from __future__ import annotations

import pyarrow as pa

from imp_core.plan.aggregates.base import AggregateFunction, GroupState, Monotonicity, ValueRange


class Count(AggregateFunction):
    name = "count"
    sql_keys = ("count",)
    partial = Monotonicity.SMALLER
    value_range = ValueRange.NONNEG
    never_null = True
    spark_name = "COUNT"

    def result_type(self, dtype: pa.DataType | None) -> pa.DataType:
        return pa.int64()

    def finalize(self, state: GroupState, dtype: pa.DataType | None) -> pa.Array:
        return pa.array(state.nonnull, type=pa.int64())

    def for_star(self) -> AggregateFunction | None:
        return COUNT_STAR


class CountStar(Count):
    """count(*) (also count(<non-NULL constant>), see ``imp_core.sql.expressions``)."""

    name = "count_star"
    sql_keys = ()  # COUNT(*) parses as count; the binder tells the two apart
    takes_argument = False

    def finalize(self, state: GroupState, dtype: pa.DataType | None) -> pa.Array:
        return pa.array(state.cnt, type=pa.int64())

    def spark_sql(self, arg: str | None) -> str:
        return "COUNT(1)"

    def label(self) -> str:
        return "count"


COUNT = Count()
COUNT_STAR = CountStar()
FUNCTIONS = (COUNT, COUNT_STAR)
