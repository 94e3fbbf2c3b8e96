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
    # a filter made for n keys is sized for HEADROOM * n: room for the inserts to come
    # before it saturates and is rebuilt
    HEADROOM = 1.25

    def __init__(self, expected: int, fp_rate: float = 0.01):
        expected = max(expected, 1024)
        bits = int(-expected * np.log(fp_rate) / (np.log(2) ** 2))
        # a multiple of 64 below 2**32 (positions fit 32 bits), or 2**32 itself
        self.bits = 1 << 32 if bits >= (1 << 32) - 64 else -(-bits // 64) * 64
        self.hashes = max(1, int(round(self.bits / expected * np.log(2))))
        self.hashes = min(self.hashes, 8)
        self.array = np.zeros(self.bits // 8, dtype=np.uint8)
        self.count = 0

    @staticmethod
    def for_keys(n: int) -> BloomFilter:
        """A filter for a side now holding ``n`` distinct keys."""
        return BloomFilter(int(n * BloomFilter.HEADROOM))

    def _positions(self, keys: np.ndarray) -> np.ndarray:
        """(hashes, n) bit positions from h1 + i * h2 (double hashing) in 32 bits: the
        low bits when the bit count is a power of two (filters of earlier versions, kept
        in checkpoints, are read the same way), else the 32-bit value scaled to the bit
        count (multiply-shift), which needs no power-of-two size."""
        h = _mix(keys)
        h1 = (h & np.uint64(0xFFFFFFFF)).astype(np.uint32)
        h2 = ((h >> np.uint64(32)) | np.uint64(1)).astype(np.uint32)
        out = np.empty((self.hashes, len(h)), dtype=np.uint32)
        power_of_two = self.bits & (self.bits - 1) == 0
        mask = np.uint32(self.bits - 1)
        scale = np.uint64(self.bits)
        with np.errstate(over="ignore"):
            for i in range(self.hashes):
                mixed = h1 + np.uint32(i) * h2
                if power_of_two:
                    np.bitwise_and(mixed, mask, out=out[i])
                else:
                    out[i] = (mixed.astype(np.uint64) * scale) >> np.uint64(32)
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
