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
        self.bits = 1 << max(10, int(np.ceil(np.log2(bits))))
        self.hashes = max(1, int(round(self.bits / expected * np.log(2))))
        self.hashes = min(self.hashes, 8)
        self.array = np.zeros(self.bits // 8, dtype=np.uint8)
        self.count = 0

    def _positions(self, keys: np.ndarray) -> np.ndarray:
        h = _mix(keys)
        h1 = h & np.uint64(0xFFFFFFFF)
        h2 = (h >> np.uint64(32)) | np.uint64(1)
        i = np.arange(self.hashes, dtype=np.uint64)[:, None]
        with np.errstate(over="ignore"):
            return ((h1[None, :] + i * h2[None, :]) & np.uint64(self.bits - 1)).astype(np.int64)

    def add(self, keys: np.ndarray) -> None:
        if len(keys) == 0:
            return
        pos = self._positions(keys).ravel()
        np.bitwise_or.at(self.array, pos >> 3, (1 << (pos & 7)).astype(np.uint8))
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
