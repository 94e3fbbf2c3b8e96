"""64-bit hashes of Arrow columns, computed in numpy without a Python object per value.

Invariants: equal values of one column hash alike, within a process and across
processes (no per-process seed: nothing here is randomized); a NULL hashes as the
value its kind fills it with (the caller masks NULL keys out). The hashes are not a
stable storage format: they are recomputed from the rows whenever needed.

Strings hash their UTF-8 bytes as a polynomial over 2**64 (the sum of each byte plus
one times ``P**position``, from prefix sums over the whole buffer), mixed with the length
and then through the SplitMix64 finalizer; a long column hashes each distinct value once
(through Arrow's dictionary encoding). Numbers hash their 64-bit patterns through the
same finalizer. A collision only costs a comparison: the join checks hash-equal pairs
on their values (``keys_equal``).
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

_P = np.uint64(0x100000001B3)  # FNV's 64-bit prime: odd, so its powers never vanish
_LEN = np.uint64(0x9E3779B97F4A7C15)
_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)
_P_INVERSE = np.uint64(pow(int(_P), -1, 1 << 64))
_EMPTY = np.uint64(0)  # the hash of the empty string (and of NULL): mix(0) is 0
_DICTIONARY_FROM = 4096


def mix(x: np.ndarray) -> np.ndarray:
    """SplitMix64's finalizer over uint64 values (a bijection that spreads every bit)."""
    with np.errstate(over="ignore"):
        x = x ^ (x >> np.uint64(30))
        x = x * _M1
        x = x ^ (x >> np.uint64(27))
        x = x * _M2
        return x ^ (x >> np.uint64(31))


def string_hashes(column: pa.Array) -> np.ndarray:
    """uint64 hash per value of a string or binary array (NULL as the empty string)."""
    if len(column) > _DICTIONARY_FROM:
        # a long column repeats its values (a join key): hash each distinct value once
        encoded = pc.dictionary_encode(column)
        distinct = np.append(_value_hashes(encoded.dictionary), _EMPTY)
        indices = encoded.indices.fill_null(len(encoded.dictionary)) \
            if encoded.indices.null_count else encoded.indices
        return distinct[indices.to_numpy()]
    return _value_hashes(column)


def _value_hashes(column: pa.Array) -> np.ndarray:
    if pa.types.is_large_string(column.type) or pa.types.is_large_binary(column.type):
        offset_type = np.int64
    elif pa.types.is_string(column.type) or pa.types.is_binary(column.type):
        offset_type = np.int32
    else:
        raise TypeError(f"string_hashes: not a string column: {column.type}")
    n = len(column)
    if n == 0:
        return np.zeros(0, dtype=np.uint64)
    buffers = column.buffers()
    offsets = np.frombuffer(buffers[1], dtype=offset_type)[column.offset:column.offset + n + 1]
    offsets = offsets.astype(np.int64)
    lengths = np.diff(offsets)
    if column.null_count:  # a NULL's bytes are unspecified: hash it as empty
        lengths = np.where(column.is_valid().to_numpy(zero_copy_only=False), lengths, 0)
    first, total = int(offsets[0]), int(offsets[-1] - offsets[0])
    if total == 0:
        return np.full(n, _EMPTY, dtype=np.uint64)
    data = np.frombuffer(buffers[2], dtype=np.uint8)[first:first + total]
    # prefix sums of (byte + 1) * P**k over the bytes' positions k in the buffer: a
    # value's sum is a difference of two, brought to its own first byte by P**-start
    # (P is odd, so invertible modulo 2**64)
    powers, inverse = _powers(total + 1)
    with np.errstate(over="ignore"):
        prefix = np.zeros(total + 1, dtype=np.uint64)
        np.cumsum((data.astype(np.uint64) + np.uint64(1)) * powers[:total], dtype=np.uint64,
                  out=prefix[1:])
        starts = offsets[:-1] - first
        sums = (prefix[starts + lengths] - prefix[starts]) * inverse[starts]
        return mix(sums ^ (lengths.astype(np.uint64) * _LEN))


def _power_tables(size: int) -> tuple[np.ndarray, np.ndarray]:
    """(P**k, P**-k) modulo 2**64 for k = 0 .. size - 1, read-only."""
    tables = []
    for base in (_P, _P_INVERSE):
        out = np.full(size, base, dtype=np.uint64)
        out[0] = 1
        with np.errstate(over="ignore"):
            table = np.cumprod(out, dtype=np.uint64)
        table.setflags(write=False)
        tables.append(table)
    return tables[0], tables[1]


# the powers for the longest string buffer hashed so far (grown by doubling, up to
# _CACHED_POWERS), shared: hashing a few short keys would otherwise spend most of its
# time recomputing them; a longer buffer computes its own (its hashing costs as much)
_TABLES = _power_tables(1024)
_CACHED_POWERS = 1 << 20


def _powers(n: int) -> tuple[np.ndarray, np.ndarray]:
    """(P**k, P**-k) modulo 2**64 for k = 0 .. at least n - 1."""
    global _TABLES
    tables = _TABLES
    if len(tables[0]) >= n:
        return tables
    if n > _CACHED_POWERS:
        return _power_tables(n)
    tables = _TABLES = _power_tables(min(max(n, 2 * len(tables[0])), _CACHED_POWERS))
    return tables


def number_hashes(values: np.ndarray) -> np.ndarray:
    """uint64 hash per value of an int64 or float64 array (float -0.0 as 0.0)."""
    if values.dtype == np.float64:
        values = values + 0.0  # -0.0 + 0.0 is 0.0: both zeros hash alike
    return mix(values.view(np.uint64))
