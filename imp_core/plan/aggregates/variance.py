"""VAR_SAMP, VAR_POP, STDDEV_SAMP and STDDEV_POP (Spark's aliases: VARIANCE = VAR_SAMP,
STDDEV = STDDEV_SAMP), computed exactly from power sums.

State per group: the non-NULL count n and the exact sums S1 = Σx and S2 = Σx² (in units
of unit(type) and unit(type)², see ``imp_core.plan.aggregates.exact``). Delta rule: linear, a
delta row of weight w adds w to n, w·x to S1 and w·x² to S2, so the state always equals
that of the group's current input and never drifts (no running mean is kept).
Value: n·S2 − S1² is n² times the population variance in units², an exact integer >= 0;
VAR_POP = (n·S2 − S1²) / (n²·u²) and VAR_SAMP = (n·S2 − S1²) / (n(n−1)·u²), each a single
correctly rounded division of integers (+Infinity beyond the largest double); STDDEV_* is
the square root of that double.
The result is a double, as in Spark and DuckDB. NULL semantics as Spark with
``spark.sql.legacy.statisticalAggregate=false`` (the default): NULL over no non-NULL
value, and the sample functions are NULL over one value (not NaN); the population ones
are 0.0 over one value. Not monotone: a partial group's spread can be larger or smaller.
"""

from __future__ import annotations

import math

import pyarrow as pa

from imp_core.plan.aggregates.base import AggregateFunction, GroupState, Monotonicity, ValueRange
from imp_core.plan.aggregates.exact import kind_of, unit


class Variance(AggregateFunction):
    moments = 2
    numeric_only = True
    partial = Monotonicity.EITHER
    value_range = ValueRange.NONNEG

    def __init__(self, name: str, sql_keys: tuple[str, ...], sample: bool, root: bool):
        self.name = name  # type: ignore[misc]
        self.sql_keys = sql_keys  # type: ignore[misc]
        self.spark_name = name.upper()  # type: ignore[misc]
        self.sample = sample
        self.root = root

    def result_type(self, dtype: pa.DataType | None) -> pa.DataType:
        assert dtype is not None
        kind_of(dtype)  # rejects non-numeric arguments
        return pa.float64()

    def finalize(self, state: GroupState, dtype: pa.DataType | None) -> pa.Array:
        assert dtype is not None
        u2 = unit(dtype) ** 2
        out: list[float | None] = []
        for n, s1, s2 in zip(state.nonnull, state.sums[0], state.sums[1]):
            n, s1, s2 = int(n), int(s1), int(s2)
            if n == 0 or (self.sample and n == 1):
                out.append(None)
                continue
            num = n * s2 - s1 * s1  # >= 0 exactly (Cauchy–Schwarz over the n values)
            den = n * (n - 1 if self.sample else n) * u2
            try:
                var = num / den  # Python's int / int: correctly rounded
            except OverflowError:  # beyond the largest double, as Spark's doubles overflow
                var = math.inf
            out.append(math.sqrt(var) if self.root else var)
        return pa.array(out, type=pa.float64())

    def exact_on_spark(self, dtype: pa.DataType | None) -> bool:
        return False  # Spark keeps a running mean and M2 in doubles


VAR_SAMP = Variance("var_samp", ("variance",), sample=True, root=False)
VAR_POP = Variance("var_pop", ("variancepop",), sample=False, root=False)
STDDEV_SAMP = Variance("stddev_samp", ("stddev", "stddevsamp"), sample=True, root=True)
STDDEV_POP = Variance("stddev_pop", ("stddevpop",), sample=False, root=True)
FUNCTIONS = (VAR_SAMP, VAR_POP, STDDEV_SAMP, STDDEV_POP)
