"""Grouping helpers of the reference evaluator: dense group codes, and exact per-group
sums of integers, decimals and doubles (the values SUM, AVG and the variances finalize).

The sums are Python integers: an int or decimal as the engine's exact integer (decimals
scaled), a double as ``value * 2**FLOAT_SHIFT`` (exact for every finite double), so the
oracle's sums never round, whatever the order of the rows.
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from imp_core.plan.aggregates.exact import FLOAT_SHIFT, kind_of, python_exact

INT64_SAFE = 2.0**62


def group_codes(columns: list[pa.Array | pa.ChunkedArray], n: int) -> tuple[np.ndarray, int]:
    """A dense group number per row: rows get one number iff all columns are equal.

    NULLs are equal to each other (SQL grouping) and ``-0.0`` equals ``0.0`` (as Python
    compares the values).
    """
    codes = np.zeros(n, dtype=np.int64)
    groups = 1 if n else 0
    for col in columns:
        if isinstance(col, pa.ChunkedArray):
            col = col.combine_chunks()
        if pa.types.is_floating(col.type):
            col = pc.add(col, pa.scalar(0.0, col.type))
        enc = pc.dictionary_encode(col, null_encoding="encode")
        idx = enc.indices.to_numpy(zero_copy_only=False).astype(np.int64)
        width = max(len(enc.dictionary), 1)
        if groups * width >= 2**62:  # the combined codes would overflow: renumber first
            uniq, codes = np.unique(codes, return_inverse=True)
            groups = len(uniq)
        codes = codes * width + idx
        groups *= width
    if len(columns) > 1 and n:  # combinations that occur, numbered densely
        uniq, codes = np.unique(codes, return_inverse=True)
        groups = len(uniq)
    elif not n:
        groups = 0
    return codes.reshape(-1), groups


def first_of(codes: np.ndarray, groups: int) -> np.ndarray:
    """The first row of each group."""
    first = np.full(groups, len(codes), dtype=np.int64)
    np.minimum.at(first, codes, np.arange(len(codes), dtype=np.int64))
    return first


def _exact(col: pa.Array, dtype: pa.DataType) -> np.ndarray:
    """The exact integer of each int or decimal value as sums keep it (NULL -> 0)."""
    if kind_of(dtype) == "int":
        if pa.types.is_uint64(col.type):
            return np.array([int(v or 0) for v in col.to_pylist()], dtype=object)
        return col.fill_null(0).cast(pa.int64()).to_numpy(zero_copy_only=False)
    if pa.types.is_decimal128(col.type) and col.offset == 0 and len(col):
        # little-endian 128-bit words: a value fits int64 iff its high word is the
        # sign extension of its low word (NULL slots hold arbitrary bytes)
        words = np.frombuffer(col.buffers()[1], dtype=np.int64)[: 2 * len(col)]
        lo, hi = words[0::2], words[1::2]
        if np.array_equal(hi, lo >> 63):
            return np.where(col.is_valid().to_numpy(zero_copy_only=False), lo, 0)
    scale = dtype.scale
    return np.array([0 if v is None else int(v.scaleb(scale)) for v in col.to_pylist()],
                    dtype=object)


def _group_sums(codes: np.ndarray, groups: int, values: np.ndarray,
                mult: np.ndarray) -> list[int]:
    """Exact sum of ``values * mult`` per group, as Python integers."""
    if values.dtype != object:
        bound = float(np.abs(values.astype(np.float64)) @ mult.astype(np.float64))
        if bound < INT64_SAFE:
            out = np.zeros(groups, dtype=np.int64)
            np.add.at(out, codes, values * mult)
            return out.tolist()
    sums = [0] * groups
    for g, v, m in zip(codes.tolist(), values.tolist(), mult.tolist()):
        sums[g] += int(v) * m
    return sums


def power_sums(codes: np.ndarray, groups: int, col: pa.Array, dtype: pa.DataType,
                mult: np.ndarray, k: int) -> list[int]:
    """Exact Σ x^k·mult per group over the non-NULL values (x as the engine's integer)."""
    if k == 1:
        return _float_group_sums(codes, groups, col, mult) if kind_of(dtype) == "float" \
            else _group_sums(codes, groups, _exact(col, dtype), mult)
    sums = [0] * groups
    for g, v, m in zip(codes.tolist(), col.to_pylist(), mult.tolist()):
        if v is not None:
            sums[g] += python_exact(v, dtype) ** k * m
    return sums


def _float_group_sums(codes: np.ndarray, groups: int, col: pa.Array,
                      mult: np.ndarray) -> list[int]:
    """Exact sum per group of ``value * 2**FLOAT_SHIFT * mult`` over doubles.

    A double is ``m * 2**(e - 53)`` with an integer ``|m| < 2**53``; rows of one group
    and one exponent ``e`` are summed as integers (``m`` split in 26/27-bit halves so the
    int64 sums cannot overflow), then shifted into place once per (group, e).
    """
    vals = col.fill_null(0.0).to_numpy(zero_copy_only=False).astype(np.float64)
    if not np.all(np.isfinite(vals)):
        raise ValueError("cannot sum NaN or infinite values exactly")
    mant, exp = np.frexp(vals)
    m = (mant * 2.0**53).astype(np.int64)
    if float(np.abs(m >> 27).astype(np.float64) @ mult.astype(np.float64)) >= INT64_SAFE:
        exact = [int(Fraction(v) * 2**FLOAT_SHIFT) for v in vals.tolist()]
        return _group_sums(codes, groups, np.array(exact, dtype=object), mult)
    pair, pairs = group_codes([pa.array(codes), pa.array(exp.astype(np.int64))], len(vals))
    high = np.zeros(pairs, dtype=np.int64)
    low = np.zeros(pairs, dtype=np.int64)
    np.add.at(high, pair, (m >> 27) * mult)
    np.add.at(low, pair, (m & (2**27 - 1)) * mult)
    first = first_of(pair, pairs)
    sums = [0] * groups
    for g, e, a, b in zip(codes[first].tolist(), exp[first].tolist(), high.tolist(),
                          low.tolist()):
        total, shift = (a << 27) + b, e - 53 + FLOAT_SHIFT
        # a negative shift is still exact: every double is a multiple of 2**-1074
        sums[g] += total << shift if shift >= 0 else total >> -shift
    return sums


def order_key_columns(values: pa.Array, descending: bool, nulls_first: bool
                      ) -> list[tuple[pa.Array, str]]:
    """The sort keys ordering ``values`` as ``imp_core.engine.ordering`` does, each with
    its direction: where NULLs go, then (for floats) NaN above every number, as in Spark,
    then the values."""
    flag = pc.is_valid(values) if nulls_first else pc.is_null(values)
    direction = "descending" if descending else "ascending"
    keys = [(pc.cast(flag, pa.int8()), "ascending")]
    if pa.types.is_floating(values.type):
        keys.append((pc.cast(pc.fill_null(pc.is_nan(values), False), pa.int8()), direction))
    keys.append((values, direction))
    return keys

