"""Grouping-set expansion (``imp_core.plan.expand.Expand``): stateless and linear.

Delta rule: I(Expand(Q), ΔD) = ⊎_i {Δ⟨t ∘ t.keys|s_i ∘ i, P⟩ | Δ⟨t, P⟩ ∈ I(Q, ΔD)}, where
``t.keys|s_i`` is the row's key values with those outside set ``s_i`` NULL: every delta
row becomes one row per grouping set with the same weight and annotation, so the
aggregation above keeps one state per (grouping set, group) and a group's annotation is
the union of the annotations of its input rows. Emptying a group of one set deletes that
group only; emptying an input empties every set's groups (the set's rows go with it).
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from imp_core.engine.annotation import Annotation
from imp_core.engine.operators.base import Operator
from imp_core.engine.zset import DeltaBatch
from imp_core.plan.expand import SET_TYPE, Expand


class ExpandOp(Operator):
    kind = "expand"

    def __init__(self, node: Expand, op_id: str):
        super().__init__(node, op_id)
        self.expand = node

    def _step(self, inputs: list[DeltaBatch]) -> DeltaBatch:
        (batch,) = inputs
        n = len(batch)
        if n == 0:
            return self.empty()
        node = self.expand
        data = batch.data
        keys = [data.column(k) for k in node.keys]
        copies = []
        for i, members in enumerate(node.sets):
            cols = list(data.columns)
            for j, col in enumerate(keys):
                cols.append(col if j in members else pa.nulls(n, col.type))
            cols.append(pa.array(np.full(n, i, dtype=np.int32), type=SET_TYPE))
            copies.append(pa.Table.from_arrays(cols, schema=self.output_schema))
        count = len(node.sets)
        table = copies[0] if count == 1 else pa.concat_tables(copies)
        return DeltaBatch(table, np.tile(np.asarray(batch.weights, dtype=np.int64), count),
                          Annotation.concat([batch.annotation] * count))
