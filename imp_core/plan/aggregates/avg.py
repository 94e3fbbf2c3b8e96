"""AVG(x): Σx / n over a group's n non-NULL values, NULL when n = 0.

Delta rule: as SUM, the state (n, Σx) is linear in the input; the value is derived from
it, a correctly rounded double (integers, doubles) or a decimal at scale + 4 rounded
half up. Not monotone: a partial group's average can be larger or smaller.
"""

from __future__ import annotations

import decimal
from typing import Sequence

import numpy as np
import pyarrow as pa

from imp_core.plan.aggregates.base import (
    MAX_PRECISION,
    AggregateFunction,
    GroupState,
    Monotonicity,
    ValueRange,
)
from imp_core.plan.aggregates.exact import (
    EXACT_FLOAT,
    FLOAT_SHIFT,
    correct_div,
    half_up_div,
    kind_of,
)


class Avg(AggregateFunction):
    name = "avg"
    sql_keys = ("avg",)
    moments = 1
    numeric_only = True
    partial = Monotonicity.EITHER
    value_range = ValueRange.ARGUMENT
    spark_name = "AVG"

    def result_type(self, dtype: pa.DataType | None) -> pa.DataType:
        assert dtype is not None
        if pa.types.is_decimal(dtype):
            return pa.decimal128(min(MAX_PRECISION, dtype.precision + 4),
                                 min(MAX_PRECISION, dtype.scale + 4))
        if pa.types.is_integer(dtype) or pa.types.is_floating(dtype):
            return pa.float64()
        raise TypeError(f"avg is not defined for {dtype}")

    def finalize(self, state: GroupState, dtype: pa.DataType | None) -> pa.Array:
        assert dtype is not None
        return finalize_avg(state.sums[0], state.nonnull, dtype)

    def exact_on_spark(self, dtype: pa.DataType | None) -> bool:
        return False  # Spark divides (and sums doubles) with its own rounding


def finalize_avg(sums: Sequence[int], nonnull: Sequence[int], dtype: pa.DataType) -> pa.Array:
    """Output array of AVG: correctly rounded double, or half-up decimal at scale+4."""
    out_type = AVG.result_type(dtype)
    k = kind_of(dtype)
    if k == "int" and isinstance(sums, np.ndarray) and sums.dtype != object:
        s = np.asarray(sums)
        n = np.asarray(nonnull)
        if len(s) == 0 or np.abs(s).max() < EXACT_FLOAT:
            with np.errstate(invalid="ignore", divide="ignore"):
                res = s.astype(np.float64) / n.astype(np.float64)
            return pa.array(res, type=pa.float64(), mask=(n == 0))
    vals: list[object] = []
    for s, n in zip(sums, nonnull):
        s, n = int(s), int(n)
        if n == 0:
            vals.append(None)
        elif k == "int":
            vals.append(correct_div(s, n))
        elif k == "decimal":
            grow = out_type.scale - dtype.scale
            vals.append(decimal.Decimal(half_up_div(s * 10**grow, n)).scaleb(-out_type.scale))
        else:
            vals.append(s / (n << FLOAT_SHIFT))
    return pa.array(vals, type=out_type)


AVG = Avg()
FUNCTIONS = (AVG,)
