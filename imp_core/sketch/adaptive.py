"""Adaptive ranges: the rows of a table per fragment of a range partition, kept as updates
arrive, and when skewed updates have made a fragment over- or underflow, new ranges.

Equi-depth ranges hold about equally many rows when they are chosen; inserts into a
narrow part of the domain (new orders, recent dates) pile up in one fragment, whose
sketch bit then admits a large share of the table, and deletes leave fragments nearly
empty. ``FragmentCounts`` tracks every fragment's rows from the change feed (each
delta's partition column, by its signed weights) and says when one holds more than
``overflow`` times the mean (2 by default) or less than ``underflow`` times it
(``skew``); ``rebalanced`` gives new equi-depth ranges over the column's current values
(splitting the overflowing fragment, merging the underflowing ones), used only when
they are markedly more even (``worth``). The caller then brings every sketch on the partition to
the new ranges by capturing it anew on them (exact by construction) and serves the old
sketch until the new one is ready.

Invariants: ``counts`` sums to the table's rows (as counted from the changes applied since
the counts were built from the column's values); counts never go negative for a
consistent change feed; a partition whose values cannot be spread more evenly (few
distinct values) is not re-partitioned over and over: after a rebalance that would not
help, the counts are ``settled`` until the table's rows change by ``RECHECK_SHARE``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa

from imp_core.sketch.partition import RangePartition

# a fragment beyond this many times the mean is split: a selective sketch then reads at
# most about this many times what fresh ranges give it (``imp bench skew``: 2x kept it
# within 1.4x of fresh ranges after 50 skewed batches, 4x let it reach 2.9x)
OVERFLOW = 2.0
UNDERFLOW = 0.25
MIN_ROWS_PER_FRAGMENT = 64  # below this many rows per fragment on average, never skewed
RECHECK_SHARE = 0.25
STATE_VERSION = 1


@dataclass
class FragmentCounts:
    """The rows of ``partition``'s table per fragment (see the module docstring)."""

    partition: RangePartition
    counts: np.ndarray
    settled_at: int | None = None  # total rows when a rebalance last would not help
    rebalances: int = field(default=0)

    @staticmethod
    def of(partition: RangePartition, values: pa.Array | pa.ChunkedArray) -> FragmentCounts:
        ids = partition.annotate(values)
        return FragmentCounts(partition, np.bincount(ids, minlength=partition.size)
                              .astype(np.int64))

    @property
    def total(self) -> int:
        return int(self.counts.sum())

    def apply(self, values: pa.Array | pa.ChunkedArray, weights: np.ndarray) -> None:
        """Count a delta: ``values`` of the partition column with signed ``weights``."""
        if len(values):
            np.add.at(self.counts, self.partition.annotate(values),
                      np.asarray(weights, dtype=np.int64))

    def ratio(self) -> tuple[float, float]:
        """(largest, smallest) fragment over the mean."""
        mean = self.total / self.partition.size
        if mean <= 0:
            return 0.0, 0.0
        return float(self.counts.max() / mean), float(self.counts.min() / mean)

    def skew(self, overflow: float = OVERFLOW, underflow: float = UNDERFLOW) -> str | None:
        """Why the partition should get new ranges (None: it need not)."""
        size = self.partition.size
        total = self.total
        if size < 2 or total < MIN_ROWS_PER_FRAGMENT * size:
            return None
        if self.settled_at is not None and \
                abs(total - self.settled_at) < RECHECK_SHARE * self.settled_at:
            return None
        high, low = self.ratio()
        p = self.partition
        if high > overflow:
            f = int(self.counts.argmax())
            return (f"fragment {f} of {p.table}.{p.column} holds {high:.1f}x the mean "
                    f"({int(self.counts[f]):,} of {total:,} rows)")
        if low < underflow:
            f = int(self.counts.argmin())
            return (f"fragment {f} of {p.table}.{p.column} holds {low:.2f}x the mean "
                    f"({int(self.counts[f]):,} of {total:,} rows)")
        return None

    def worth(self, proposed: FragmentCounts) -> bool:
        """Whether ``proposed`` (counts on new ranges) is markedly more even: its
        largest fragment over the mean at least halfway from this one's to 1 (perfectly
        even), or its smallest at least twice this one's. Otherwise this partition is
        ``settled`` at its current rows."""
        high, low = self.ratio()
        new_high, new_low = proposed.ratio()
        better = new_high <= (1 + high) / 2 or (low > 0 and new_low >= 2 * low) or \
            (low == 0 and new_low > 0)
        if not better:
            self.settled_at = self.total
        return better

    # -- state ----------------------------------------------------------------------------
    def snapshot(self) -> dict[str, Any]:
        return {"version": STATE_VERSION, "counts": self.counts.tolist(),
                "settled_at": self.settled_at, "rebalances": self.rebalances}

    @staticmethod
    def restore(partition: RangePartition, raw: dict[str, Any]) -> FragmentCounts:
        if raw.get("version") != STATE_VERSION:
            raise ValueError(f"fragment counts of format {raw.get('version')!r} are not "
                             f"supported (this build reads {STATE_VERSION})")
        counts = np.asarray(raw["counts"], dtype=np.int64)
        if len(counts) != partition.size:
            raise ValueError(f"{len(counts)} fragment counts for a partition of "
                             f"{partition.size} fragments")
        return FragmentCounts(partition, counts, raw.get("settled_at"),
                              int(raw.get("rebalances", 0)))


def rebalanced(partition: RangePartition, values: pa.Array | pa.ChunkedArray
               ) -> RangePartition:
    """Equi-depth ranges over ``values`` (the column's current values) with as many
    fragments as ``partition``."""
    return RangePartition.equi_depth(partition.table, partition.column, values,
                                     partition.size)
