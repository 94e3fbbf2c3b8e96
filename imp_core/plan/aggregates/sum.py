"""SUM(x): the exact sum Σx of a group's non-NULL values (NULL when there is none).

Delta rule: linear; a delta row of weight w adds w·x (exact integer, see
``imp_core.plan.aggregates.exact``) to its group's Σx and w to its non-NULL count. State:
(non-NULL count, Σx) of the group's current input. A partial group's sum is no larger
than the whole group's when every summed value is >= 0 (the safety rules prove that
from the declared domains). Overflow follows Spark with ANSI off: a BIGINT sum wraps
modulo 2^64 (``wrap_bigint``), a decimal sum beyond its DECIMAL(p + 10, s) is NULL.
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
from imp_core.plan.aggregates.exact import FLOAT_SHIFT, kind_of
from imp_core.plan.decimal64 import from_unscaled


class Sum(AggregateFunction):
    name = "sum"
    sql_keys = ("sum",)
    moments = 1
    numeric_only = True
    partial = Monotonicity.SMALLER_IF_NONNEG
    value_range = ValueRange.SUM
    spark_name = "SUM"

    def result_type(self, dtype: pa.DataType | None) -> pa.DataType:
        assert dtype is not None
        if pa.types.is_decimal(dtype):
            return pa.decimal128(min(MAX_PRECISION, dtype.precision + 10), dtype.scale)
        if pa.types.is_integer(dtype) or pa.types.is_boolean(dtype):
            return pa.int64()
        if pa.types.is_floating(dtype):
            return pa.float64()
        raise TypeError(f"sum is not defined for {dtype}")

    def finalize(self, state: GroupState, dtype: pa.DataType | None) -> pa.Array:
        assert dtype is not None
        sums = state.sums[0]
        nonnull = np.asarray(state.nonnull)
        if isinstance(sums, np.ndarray) and sums.dtype != object and kind_of(dtype) == "int":
            return pa.array(sums, type=pa.int64(), mask=(nonnull == 0))
        return finalize_sum(sums, nonnull, dtype)

    def exact_on_spark(self, dtype: pa.DataType | None) -> bool:
        # Spark adds doubles in its own order and rounds each step
        return dtype is None or not pa.types.is_floating(dtype)


def wrap_bigint(x: int) -> int:
    """``x`` as a BIGINT sum overflowing in Spark with ANSI off: modulo 2^64, two's
    complement (so the exact state gives the very value of Spark's wrapping additions,
    whatever their order).

    >>> wrap_bigint(2**63), wrap_bigint(-2**63 - 1), wrap_bigint(5)
    (-9223372036854775808, 9223372036854775807, 5)
    """
    return ((x + 2**63) % 2**64) - 2**63


def finalize_sum(sums: Sequence[int], nonnull: Sequence[int], dtype: pa.DataType) -> pa.Array:
    """Output array of SUM over ``dtype`` given exact sums and non-NULL counts."""
    out_type = SUM.result_type(dtype)
    k = kind_of(dtype)
    if k == "decimal" and isinstance(sums, np.ndarray) and sums.dtype != object \
            and pa.types.is_decimal128(out_type) and out_type.scale == dtype.scale:
        s = sums.astype(np.int64, copy=False)
        if len(s) == 0 or max(abs(int(s.min())), abs(int(s.max()))) < 10 ** min(
                out_type.precision, 18):
            n = np.asarray(nonnull)
            return from_unscaled(np.where(n > 0, s, 0), n > 0, out_type)
    vals: list[object] = []
    for s, n in zip(sums, nonnull):
        if n == 0:
            vals.append(None)
        elif k == "int":
            vals.append(wrap_bigint(int(s)))
        elif k == "decimal":
            # beyond the result's precision: NULL, as Spark with ANSI off
            fits = abs(int(s)) < 10**out_type.precision
            vals.append(decimal.Decimal(int(s)).scaleb(-dtype.scale) if fits else None)
        else:
            vals.append(int(s) / 2**FLOAT_SHIFT)
    return pa.array(vals, type=out_type)


class AnsiSum(Sum):
    """SUM under Spark's ANSI mode (``imp_core.plan.ansi.strict_node`` puts it in place of
    ``sum``): the same state and values, but a group whose exact sum does not fit the
    result type raises ARITHMETIC_OVERFLOW (BIGINT) or NUMERIC_VALUE_OUT_OF_RANGE
    (decimal) instead of wrapping or giving NULL. Spark may also raise when a partial sum
    overflows on the way to a final one that fits, depending on the order it adds rows;
    the final sum decides here."""

    name = "ansi_sum"
    sql_keys = ()

    def finalize(self, state: GroupState, dtype: pa.DataType | None) -> pa.Array:
        out = super().finalize(state, dtype)
        found = self.raises(state, dtype)
        if found is None:
            return out
        return pa.array(out.to_pylist(), out.type, mask=found[1])

    def raises(self, state: GroupState, dtype: pa.DataType | None
               ) -> tuple[str, np.ndarray] | None:
        assert dtype is not None
        k = kind_of(dtype)
        if k == "float":
            return None
        sums = state.sums[0]
        nonnull = np.asarray(state.nonnull)
        if k == "int":
            if isinstance(sums, np.ndarray) and sums.dtype != object:
                return None  # int64 state: the exact sum fits
            bad = [n > 0 and not -2**63 <= int(s) < 2**63 for s, n in zip(sums, nonnull)]
            error = "ARITHMETIC_OVERFLOW"
        else:
            limit = 10 ** SUM.result_type(dtype).precision
            bad = [n > 0 and abs(int(s)) >= limit for s, n in zip(sums, nonnull)]
            error = "NUMERIC_VALUE_OUT_OF_RANGE"
        mask = np.asarray(bad, dtype=bool)
        return (error, mask) if mask.any() else None


SUM = Sum()
FUNCTIONS = (SUM, AnsiSum())
