"""The reference evaluator's grouping-set expansion (``imp_core.plan.expand.Expand``),
written apart from the engine's operator: row by row, each row followed by its copies
for every grouping set (the engine emits one block per set)."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from imp_core.plan.expand import Expand


def expand_rows(node: Expand, data: pa.Table, mult: np.ndarray, ann: pa.ListArray,
                schema: pa.Schema) -> tuple[pa.Table, np.ndarray, pa.ListArray]:
    """The expanded rows, their multiplicities and annotations."""
    n, m = data.num_rows, len(node.sets)
    rows = np.repeat(np.arange(n, dtype=np.int64), m)
    sets = np.tile(np.arange(m, dtype=np.int32), n)
    taken = data.take(pa.array(rows))
    cols = list(taken.columns)
    for j, key in enumerate(node.keys):
        member = np.array([j in s for s in node.sets], dtype=bool)[sets]
        col = taken.column(key)
        cols.append(pc.if_else(pa.array(member), col, pa.scalar(None, col.type)))
    cols.append(pa.array(sets, type=schema.field(node.set_column).type))
    out = pa.Table.from_arrays(cols, schema=schema)
    return out, np.asarray(mult, dtype=np.int64)[rows], ann.take(pa.array(rows))
