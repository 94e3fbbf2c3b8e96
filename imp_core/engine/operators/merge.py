"""The final merge μ (section 5.1): result-tuple annotations to a sketch delta.

State: S[ρ] = weighted number of result tuples whose annotation contains ρ.
    S'[ρ] = S[ρ] + |Δ+_ρ| − |Δ−_ρ|
    ΔP = {+ρ | S[ρ] = 0 ≠ S'[ρ]} ∪ {−ρ | S[ρ] ≠ 0 = S'[ρ]}
Invariant: the sketch is exactly {ρ | S[ρ] > 0}.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
from pyroaring import BitMap

from imp_core.engine.zset import DeltaBatch


class MergeOp:
    kind = "merge"

    def __init__(self, nfrag: int):
        self.counts = np.zeros(nfrag, dtype=np.int64)

    def step(self, batch: DeltaBatch) -> tuple[BitMap, BitMap]:
        """(added fragments, removed fragments)."""
        if len(batch) == 0 or len(batch.annotation.values) == 0:
            return BitMap(), BitMap()
        old = self.counts
        new = old + batch.annotation.fragment_counts(batch.weights, len(old))
        self.counts = new
        added = np.flatnonzero((old <= 0) & (new > 0))
        removed = np.flatnonzero((old > 0) & (new <= 0))
        return BitMap(added), BitMap(removed)

    def sketch(self) -> BitMap:
        return BitMap(np.flatnonzero(self.counts > 0))

    def snapshot(self) -> dict[str, pa.Table]:
        return {"counts": pa.table({"count": self.counts})}

    def restore(self, state: dict[str, pa.Table]) -> None:
        counts = state["counts"].column("count").to_numpy().astype(np.int64)
        if len(counts) != len(self.counts):
            raise ValueError("merge state has a different number of fragments")
        self.counts = counts
