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


def _halves(keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The two 32-bit hashes of double hashing (the second odd) of each key."""
    h = _mix(keys)
    return ((h & np.uint64(0xFFFFFFFF)).astype(np.uint32),
            ((h >> np.uint64(32)) | np.uint64(1)).astype(np.uint32))


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
        h1, h2 = _halves(keys)
        out = np.empty((self.hashes, len(h1)), dtype=np.uint32)
        for i in range(self.hashes):
            out[i] = self._position(h1, h2, i)
        return out

    def _position(self, h1: np.ndarray, h2: np.ndarray, i: int) -> np.ndarray:
        """The ``i``-th bit position of the keys hashed to ``h1``, ``h2``."""
        with np.errstate(over="ignore"):
            mixed = h1 + np.uint32(i) * h2
            if self.bits & (self.bits - 1) == 0:
                return mixed & np.uint32(self.bits - 1)
            return ((mixed.astype(np.uint64) * np.uint64(self.bits))
                    >> np.uint64(32)).astype(np.uint32)

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
        # one bit position at a time, for the keys whose earlier bits were all set: a
        # key not in the filter fails at its first position about half the time, so a
        # probe mostly of absent keys costs about two positions per key, not all of them
        # (the keys are narrowed only once many have failed: narrowing costs a copy)
        h1, h2 = _halves(keys)
        alive = np.arange(len(keys))
        ok = np.ones(len(keys), dtype=bool)
        for i in range(self.hashes):
            pos = self._position(h1, h2, i)
            ok &= ((self.array[pos >> 3] >> (pos & 7)) & 1).astype(bool)
            if 2 * np.count_nonzero(ok) < len(ok):
                alive, h1, h2 = alive[ok], h1[ok], h2[ok]
                ok = np.ones(len(alive), dtype=bool)
                if len(alive) == 0:
                    break
        out = np.zeros(len(keys), dtype=bool)
        out[alive[ok]] = True
        return out

    def saturated(self) -> bool:
        """True when the filter holds far more keys than it was sized for."""
        return self.count > 4 * self.bits / max(self.hashes, 1) / 1.44
