"""Group keys of several columns, or of non-integer columns, packed into one integer.

``KeyCodes`` gives each distinct value of each key column a dense code (a Python
dictionary per column, so values compare as they do in a dictionary of key tuples:
``None`` is one value, ``0.0 == -0.0``) and packs a row's codes into one int64, the first
column in the highest bits. Columns of a group-by usually have far fewer distinct values
than the group-by has groups (TPC-H Q16's brand, type and size: 25, 150 and 50 values
for about a million groups), so a group costs its packed integer in ``GroupKeys``' arrays
instead of a tuple in a dictionary (about 24 bytes a group instead of about 200).

Invariants: codes are dense per column and never change; column j's codes all fit its
``bits[j]``, whose sum is at most ``MAX_BITS``; a packed key is ``Σ code_j << shift_j``
with ``shift_j`` the bits of the columns after j, so ``unpack(pack(codes)) == codes``.
When a column outgrows its bits the caller repacks every key (``repacked``); when the sum
would pass ``MAX_BITS``, ``encode`` returns None and the caller keeps dictionary keys.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

MAX_BITS = 62  # packed keys stay non-negative int64 values
_FIRST_BITS = 4
# every NaN is one value, as SQL groups them (a dictionary would tell NaN objects apart)
_NAN = float("nan")


class KeyCodes:
    """Per key column, the dictionary of its values' codes, and the packing."""

    def __init__(self, key_types: list[pa.DataType]):
        self.key_types = key_types
        self.codes: list[dict[Any, int]] = [{} for _ in key_types]
        self.values: list[list[Any]] = [[] for _ in key_types]
        self.bits = [_FIRST_BITS for _ in key_types]
        self._arrays: list[pa.Array | None] = [None for _ in key_types]

    def shifts(self, bits: list[int] | None = None) -> list[int]:
        bits = self.bits if bits is None else bits
        return [sum(bits[j + 1:]) for j in range(len(bits))]

    def _code(self, j: int, value: Any) -> int:
        if isinstance(value, float) and math.isnan(value):
            value = _NAN
        found = self.codes[j].get(value)
        if found is None:
            found = self.codes[j][value] = len(self.values[j])
            self.values[j].append(value)
            self._arrays[j] = None
        return found

    def _column_codes(self, j: int, enc: pa.DictionaryArray) -> np.ndarray:
        """Each row's code of column ``j`` from its batch's dictionary encoding ``enc``
        (new values get new codes)."""
        mapping = np.fromiter((self._code(j, v) for v in enc.dictionary.to_pylist()),
                              dtype=np.int64, count=len(enc.dictionary))
        return mapping[enc.indices.to_numpy(zero_copy_only=False).astype(np.int64)]

    def _needed(self) -> list[int] | None:
        """The bits each column needs now: a column that outgrew its bits gets room for
        twice its values, so keys are repacked once per doubling (None: more than
        ``MAX_BITS`` in all)."""
        bits = list(self.bits)
        for j, values in enumerate(self.values):
            if len(values) > 1 << bits[j]:
                bits[j] = (2 * len(values) - 1).bit_length()
        if sum(bits) <= MAX_BITS:
            return bits
        # without the room, the values may still fit
        exact = [max(b, (len(v) - 1).bit_length()) if len(v) > 1 << b else b
                 for b, v in zip(self.bits, self.values)]
        return exact if sum(exact) <= MAX_BITS else None

    def encode(self, cols: list[pa.Array]) -> tuple[np.ndarray, list[int]] | None:
        """(packed key per row, the bits they are packed with), or None when the
        columns' codes no longer fit ``MAX_BITS`` (the codes added stay, unused)."""
        encs = [pc.dictionary_encode(col, null_encoding="encode") for col in cols]
        # each column will have at least its batch's distinct values: a batch that
        # cannot fit is refused before a code is added
        least = [max(len(v), len(e.dictionary)) for v, e in zip(self.values, encs)]
        if sum(max(_FIRST_BITS, (n - 1).bit_length()) for n in least) > MAX_BITS:
            return None
        codes = []
        for j, enc in enumerate(encs):
            codes.append(self._column_codes(j, enc))
            if self._needed() is None:
                return None
        bits = self._needed()
        assert bits is not None
        return self._pack(codes, bits), bits

    def encode_one(self, key: tuple, add: bool = True) -> tuple[int, list[int]] | None:
        """``key``'s packed value and bits; None when it does not fit, or (``add``
        False) when a value of it was never seen."""
        codes = []
        for j, value in enumerate(key):
            if not add and (_NAN if isinstance(value, float) and math.isnan(value)
                            else value) not in self.codes[j]:
                return None
            codes.append(self._code(j, value))
        bits = self._needed()
        if bits is None:
            return None
        return sum(c << s for c, s in zip(codes, self.shifts(bits))), bits

    def _pack(self, codes: list[np.ndarray], bits: list[int]) -> np.ndarray:
        out = np.zeros(len(codes[0]) if codes else 0, dtype=np.int64)
        for c, s in zip(codes, self.shifts(bits)):
            out |= c << s
        return out

    def unpack(self, packed: np.ndarray, bits: list[int] | None = None) -> list[np.ndarray]:
        """Each column's codes of ``packed`` keys (packed with ``bits``, default now)."""
        bits = self.bits if bits is None else bits
        return [(packed >> s) & ((1 << b) - 1) for s, b in zip(self.shifts(bits), bits)]

    def repacked(self, packed: np.ndarray, bits: list[int]) -> np.ndarray:
        """``packed`` (packed with the current bits) packed with ``bits`` instead. Order
        is kept: each column's codes are below its old width."""
        return self._pack(self.unpack(packed), bits)

    def arrays(self, packed: np.ndarray) -> list[pa.Array]:
        """The key columns of ``packed`` keys."""
        out = []
        for j, codes in enumerate(self.unpack(packed)):
            if self._arrays[j] is None:
                self._arrays[j] = pa.array(self.values[j], type=self.key_types[j])
            out.append(self._arrays[j].take(pa.array(codes)))
        return out

    def key(self, packed: int) -> tuple:
        codes = self.unpack(np.array([packed], dtype=np.int64))
        return tuple(self.values[j][int(c[0])] for j, c in enumerate(codes))

    def nbytes(self) -> int:
        """About the dictionaries' memory: 150 bytes a distinct value."""
        return 150 * sum(len(v) for v in self.values)
