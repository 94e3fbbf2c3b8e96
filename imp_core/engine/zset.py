"""The one delta currency: a weighted, annotated batch (a Z-set over annotated tuples).

Invariants: ``len(data) == len(weights) == len(annotation)``; weights are int64,
positive for insertions and negative for deletions; a batch may hold zero weights and
repeated rows (``consolidate`` removes both) and consumers must not assume otherwise.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from imp_core.engine.annotation import Annotation, key_ids

WEIGHT = "__w"
ANN = "__ann"
ROW = "__row"
# the one NaN that rows read into Python hold: tuples holding it are equal (by identity)
# and hash alike, so NaNs are equal as SQL's are and a deleted row holding one cancels
NAN = float("nan")


def py_columns(data: pa.Table) -> list[list]:
    """``data``'s columns as Python lists, every NaN the one ``NAN``."""
    out = []
    for c in data.columns:
        values = c.to_pylist()
        if pa.types.is_floating(c.type) and pc.any(pc.is_nan(c)).as_py():
            values = [NAN if v is not None and v != v else v for v in values]
        out.append(values)
    return out


@dataclass(frozen=True, eq=False)
class DeltaBatch:
    data: pa.Table
    weights: np.ndarray
    annotation: Annotation

    def __post_init__(self) -> None:
        n = self.data.num_rows
        if len(self.weights) != n or len(self.annotation) != n:
            raise ValueError(f"batch parts disagree: {n} rows, {len(self.weights)} weights, "
                             f"{len(self.annotation)} annotations")

    # -- construction ---------------------------------------------------------------------
    @staticmethod
    def empty(schema: pa.Schema) -> DeltaBatch:
        return DeltaBatch(schema.empty_table(), np.zeros(0, dtype=np.int64), Annotation.empty())

    @staticmethod
    def of(data: pa.Table, weight: int | np.ndarray, annotation: Annotation) -> DeltaBatch:
        if np.isscalar(weight):
            weights = np.full(data.num_rows, weight, dtype=np.int64)
        else:
            weights = np.asarray(weight, dtype=np.int64)
        return DeltaBatch(data, weights, annotation)

    @staticmethod
    def concat(batches: Sequence[DeltaBatch], schema: pa.Schema | None = None) -> DeltaBatch:
        batches = [b for b in batches if len(b)] or list(batches[:1])
        if not batches:
            assert schema is not None
            return DeltaBatch.empty(schema)
        if len(batches) == 1:
            return batches[0]
        data = pa.concat_tables([b.data for b in batches], promote_options="none")
        return DeltaBatch(data, np.concatenate([b.weights for b in batches]),
                          Annotation.concat([b.annotation for b in batches]))

    # -- basic ops ---------------------------------------------------------------------
    def __len__(self) -> int:
        return self.data.num_rows

    @property
    def schema(self) -> pa.Schema:
        return self.data.schema

    def take(self, idx: np.ndarray) -> DeltaBatch:
        idx = np.asarray(idx, dtype=np.int64)
        return DeltaBatch(self.data.take(idx), self.weights[idx], self.annotation.take(idx))

    def filter(self, mask: np.ndarray) -> DeltaBatch:
        if mask.all():
            return self
        return self.take(np.flatnonzero(mask))

    def with_data(self, data: pa.Table) -> DeltaBatch:
        return DeltaBatch(data, self.weights, self.annotation)

    # -- memory -------------------------------------------------------------------------
    def compact(self) -> DeltaBatch:
        """The same batch, held in less memory where its parts are uniform: weights all
        equal (a table's rows: all 1) become a read-only view of one value instead of 8
        bytes a row, and annotations lose their offsets where they are implied (one id
        per row, or none; see ``Annotation.compact``).
        Operations on such a batch return ordinary arrays; none writes into a batch's
        arrays in place."""
        n = len(self)
        weights, ann = self.weights, self.annotation
        if n and weights.strides != (0,) and weights[0] == weights[-1] \
                and (weights == weights[0]).all():
            weights = np.broadcast_to(np.int64(weights[0]), n)
        ann = ann.compact()
        if weights is self.weights and ann is self.annotation:
            return self
        return DeltaBatch(self.data, weights, ann)

    def nbytes(self) -> int:
        """Bytes held: data, weights and annotation (a view of one value holds none)."""
        return self.data.nbytes + _held(self.weights) + self.annotation.nbytes()

    def negate(self) -> DeltaBatch:
        return DeltaBatch(self.data, -self.weights, self.annotation)

    def net_weight(self) -> int:
        return int(self.weights.sum())

    # -- consolidation ------------------------------------------------------------------
    # batches up to this many rows are consolidated in Python: Arrow's group-by costs
    # about a quarter millisecond however few rows it gets, and a maintenance step
    # consolidates a few small batches per operator
    SMALL = 48

    def consolidate(self) -> DeltaBatch:
        """Merge equal (tuple, annotation) pairs by summing weights; drop zero weights."""
        if len(self) == 0:
            return self
        keys = self.annotation.keys()
        if len(self) <= self.SMALL:
            rows, w = _consolidate_small(self.data, keys, self.weights)
            out = self.take(rows)
            return DeltaBatch(out.data, w, out.annotation)
        ann_col = pa.array(keys, type=pa.int64() if keys.dtype != object else pa.binary())
        names = [f"c{i}" for i in range(self.data.num_columns)]
        t = self.data.rename_columns(names)
        t = t.append_column(ANN, ann_col)
        t = t.append_column(WEIGHT, pa.array(self.weights))
        t = t.append_column(ROW, pa.array(np.arange(len(self), dtype=np.int64)))
        g = t.group_by(names + [ANN], use_threads=False).aggregate(
            [(WEIGHT, "sum"), (ROW, "min")])
        w = g.column(WEIGHT + "_sum").to_numpy()
        rows = g.column(ROW + "_min").to_numpy()
        keep = w != 0
        rows, w = rows[keep], w[keep]
        order = np.argsort(rows, kind="stable")
        rows, w = rows[order], w[order]
        out = self.take(rows)
        return DeltaBatch(out.data, w.astype(np.int64), out.annotation)

    def keyed_counts(self) -> dict[tuple[tuple, bytes], int]:
        """{(row tuple, its annotation's ``set_key``): summed weight}, zero sums dropped:
        a batch as operators holding rows in Python read it (``Annotation.row_keys``)."""
        out: dict[tuple[tuple, bytes], int] = {}
        rows = zip(*py_columns(self.data)) if self.data.num_columns else (
            () for _ in range(len(self)))
        for row, ann, w in zip(rows, self.annotation.row_keys(), self.weights.tolist()):
            key = (tuple(row), ann)
            out[key] = out.get(key, 0) + w
        return {k: v for k, v in out.items() if v != 0}

    def to_counter(self) -> Counter:
        """{(row tuple, fragment-id tuple): weight} with zero weights dropped (for tests)."""
        return Counter({(row, key_ids(key)): w for (row, key), w in self.keyed_counts().items()})


def batch_to_arrow(batch: DeltaBatch) -> pa.Table:
    """One table holding data, weight (``__w``) and annotation (``__ann``) columns."""
    ann = pa.LargeListArray.from_arrays(pa.array(batch.annotation.offsets, type=pa.int64()),
                                        pa.array(batch.annotation.values, type=pa.int32()))
    return batch.data.append_column(WEIGHT, pa.array(batch.weights, type=pa.int64())) \
        .append_column(ANN, ann)


def batch_from_arrow(table: pa.Table) -> DeltaBatch:
    """Inverse of ``batch_to_arrow``."""
    ann_col = table.column(ANN).combine_chunks()
    if isinstance(ann_col, pa.ChunkedArray) or ann_col.offset:
        ann_col = pa.concat_arrays([ann_col]) if not isinstance(ann_col, pa.ChunkedArray) \
            else ann_col.combine_chunks()
    offsets = ann_col.offsets.to_numpy().astype(np.int64)
    values = ann_col.values.to_numpy().astype(np.int32)
    offsets = offsets - offsets[0]
    values = values[: offsets[-1]] if len(offsets) else values[:0]
    weights = table.column(WEIGHT).to_numpy().astype(np.int64)
    data = table.drop_columns([WEIGHT, ANN])
    return DeltaBatch(data, weights, Annotation(offsets, values))


def _held(a: np.ndarray) -> int:
    return 0 if a.strides == (0,) else a.nbytes


def _consolidate_small(data: pa.Table, ann_keys: np.ndarray, weights: np.ndarray
                       ) -> tuple[np.ndarray, np.ndarray]:
    """(first row of each distinct (tuple, annotation) of nonzero net weight, in row
    order; that net weight) for a few rows."""
    columns = py_columns(data)
    firsts: dict = {}
    totals: list[int] = []
    order: list[int] = []
    for i, (row, ann, w) in enumerate(zip(zip(*columns) if columns else ((),) * len(weights),
                                          ann_keys.tolist(), weights.tolist())):
        slot = firsts.setdefault((row, ann), len(order))
        if slot == len(order):
            order.append(i)
            totals.append(w)
        else:
            totals[slot] += w
    rows = np.array(order, dtype=np.int64)
    w = np.array(totals, dtype=np.int64)
    keep = w != 0
    return rows[keep], w[keep]
