"""A vectorized Bloom filter over 64-bit key hashes (join-side pre-filter, section 7.2).

Invariant: every key ever added tests positive (no false negatives). Deletions do not
clear bits, so a filter only grows stale towards more false positives, never wrong.
"""

from __future__ import annotations

import numpy as np

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)


def _mix(keys: np.ndarray) -> np.ndarray:
    """splitmix64 finalizer: spreads sequential integer keys over all bits."""
    z = keys.astype(np.uint64, copy=True)
    with np.errstate(over="ignore"):
        z += _GOLDEN
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        z = z ^ (z >> np.uint64(31))
    return z


class BloomFilter:
    def __init__(self, expected: int, fp_rate: float = 0.01):
        expected = max(expected, 1024)
        bits = int(-expected * np.log(fp_rate) / (np.log(2) ** 2))
        # a power of two of at most 2**32 bits (512 MiB): positions fit 32 bits
        self.bits = 1 << min(32, max(10, int(np.ceil(np.log2(bits)))))
        self.hashes = max(1, int(round(self.bits / expected * np.log(2))))
        self.hashes = min(self.hashes, 8)
        self.array = np.zeros(self.bits // 8, dtype=np.uint8)
        self.count = 0

    def _positions(self, keys: np.ndarray) -> np.ndarray:
        """(hashes, n) bit positions: h1 + i * h2 (double hashing) modulo the bit count,
        computed in 32 bits (the bit count is a power of two of at most 2**32, so the
        low 32 bits of the 64-bit sums are the same)."""
        h = _mix(keys)
        h1 = (h & np.uint64(0xFFFFFFFF)).astype(np.uint32)
        h2 = ((h >> np.uint64(32)) | np.uint64(1)).astype(np.uint32)
        mask = np.uint32(self.bits - 1)
        out = np.empty((self.hashes, len(h)), dtype=np.uint32)
        with np.errstate(over="ignore"):
            for i in range(self.hashes):
                np.bitwise_and(h1 + np.uint32(i) * h2, mask, out=out[i])
        return out

    def add(self, keys: np.ndarray) -> None:
        if len(keys) == 0:
            return
        pos = self._positions(keys).ravel()
        if len(pos) * 32 < self.bits:  # a few keys: set their bits in place
            np.bitwise_or.at(self.array, pos >> 3, (1 << (pos & 7)).astype(np.uint8))
        else:  # many (a side's first load): one scatter over the unpacked bits is far
            # cheaper than ufunc.at's per-element updates
            bits = np.unpackbits(self.array, bitorder="little")
            bits[pos] = 1
            self.array = np.packbits(bits, bitorder="little")
        self.count += len(keys)

    def might_contain(self, keys: np.ndarray) -> np.ndarray:
        if len(keys) == 0:
            return np.zeros(0, dtype=bool)
        pos = self._positions(keys)
        hit = (self.array[pos >> 3] >> (pos & 7).astype(np.uint8)) & 1
        return hit.all(axis=0).astype(bool)

    def saturated(self) -> bool:
        """True when the filter holds far more keys than it was sized for."""
        return self.count > 4 * self.bits / max(self.hashes, 1) / 1.44
