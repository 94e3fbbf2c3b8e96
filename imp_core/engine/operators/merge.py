"""The final merge μ (section 5.1): result-tuple annotations to a sketch delta.

State: S[ρ] = weighted number of result tuples whose annotation contains ρ.
    S'[ρ] = S[ρ] + |Δ+_ρ| − |Δ−_ρ|
    ΔP = {+ρ | S[ρ] = 0 ≠ S'[ρ]} ∪ {−ρ | S[ρ] ≠ 0 = S'[ρ]}
Invariant: the sketch is exactly {ρ | S[ρ] > 0}.
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np
import pyarrow as pa
from pyroaring import BitMap

from imp_core.engine.state import StateLayout, StateTable
from imp_core.engine.zset import DeltaBatch


class MergeOp:
    kind = "merge"
    COUNTS: ClassVar[StateTable] = StateTable(
        "counts", "S[ρ]: one row per fragment ρ (in fragment order), column count")
    STATE: ClassVar[StateLayout] = StateLayout((COUNTS,))

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

    # -- state ------------------------------------------------------------------------
    def state_schemas(self) -> dict[str, pa.Schema | None]:
        return {self.COUNTS.name: pa.schema([("count", pa.int64())])}

    @classmethod
    def state_from_counts(cls, counts: np.ndarray) -> dict[str, pa.Table]:
        """The state holding S = ``counts`` (one per fragment)."""
        return {cls.COUNTS.name: pa.table({"count": np.asarray(counts, dtype=np.int64)})}

    def state_from_output(self, output: DeltaBatch | None) -> dict[str, pa.Table]:
        """The state after consuming ``output`` (a query's whole annotated result) from
        empty; None: nothing consumed yet."""
        if output is None:
            return self.state_from_counts(np.zeros(len(self.counts), dtype=np.int64))
        return self.state_from_counts(
            output.annotation.fragment_counts(output.weights, len(self.counts)))

    def snapshot(self) -> dict[str, pa.Table]:
        return self.state_from_counts(self.counts)

    def restore(self, state: dict[str, pa.Table]) -> None:
        counts = state[self.COUNTS.name].column("count").to_numpy().astype(np.int64)
        if len(counts) != len(self.counts):
            raise ValueError("merge state has a different number of fragments")
        self.counts = counts
