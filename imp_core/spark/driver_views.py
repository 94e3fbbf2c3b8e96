"""Rows the state bootstrap holds on the driver, handed back to Spark as temp views.

A semi-, anti- or outer join with one side served by the data layer and the other held
in memory is evaluated by Spark (``imp_core.spark.bootstrap``): the served side's rows
are never shipped to the driver. The in-memory side's rows are on the driver anyway (its
state is those rows); where they are the output of a join or of a stateful operator, the
join's Spark query reads them from a view made here instead of evaluating that subtree
again (``_Compiler``'s ``substitutes``). The view holds the engine's own rows, so an
operator stepped on the driver (an aggregation with its HAVING, a top-k) is read exactly
as the engine produced it.

Invariant: a view holds exactly a batch's rows, each repeated by its weight (a
bootstrap's output is a bag at one version: consolidated, no weight is negative), in
columns named as the node's, plus one annotation column named ``__imp_d<k>`` (distinct
from the compiler's ``__imp_a<k>``): ``INT`` when every row has one fragment,
``ARRAY<INT>`` (ascending, duplicate-free) otherwise; none when no row has a fragment.
"""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa

from imp_core.engine.zset import DeltaBatch
from imp_core.plan.nodes import PlanNode
from imp_core.spark.sql_text import AnnColumn, Relation
from imp_core.spark.tables import arrow_to_dataframe

if TYPE_CHECKING:  # pragma: no cover
    from pyspark.sql import SparkSession

# A side's rows above this size are not shipped back where Spark can evaluate the side
# itself: Python-to-JVM transfer runs at about 100 MB/s here (a side of 15 M rows would
# cost more than its join)
VIEW_BYTES = 256 << 20


class DriverViews:
    """The views of one bootstrap: plan subtree -> its view, dropped together."""

    def __init__(self, spark: SparkSession):
        self.spark = spark
        self.relations: dict[PlanNode, Relation] = {}
        self._prefix = f"__imp_drv_{uuid.uuid4().hex[:10]}_"

    def add(self, node: PlanNode, rows: DeltaBatch) -> Relation:
        """A view of ``rows`` (``node``'s output) that compilations read for ``node``."""
        known = self.relations.get(node)
        if known is not None:
            return known
        k = len(self.relations)
        table, ann = view_table(rows, node.column_names, f"__imp_d{k}")
        name = f"{self._prefix}{k}"
        arrow_to_dataframe(self.spark, table).createOrReplaceTempView(name)
        rel = Relation(name, ann)
        self.relations[node] = rel
        return rel

    def drop(self) -> None:
        for rel in self.relations.values():
            self.spark.catalog.dropTempView(rel.name)
        self.relations.clear()


def view_table(rows: DeltaBatch, names: tuple[str, ...], ann_name: str
               ) -> tuple[pa.Table, tuple[AnnColumn, ...]]:
    """``rows`` as one Arrow table (module invariant) and its annotation columns."""
    weights = np.asarray(rows.weights)
    if len(weights) and weights.min() <= 0:
        # a stepped operator may emit a row and its retraction in one output
        rows = rows.consolidate()
        weights = np.asarray(rows.weights)
        if len(weights) and weights.min() < 0:
            raise ValueError("a view holds a bag: a row of negative weight has no place")
    data, ann = rows.data, rows.annotation
    if len(weights) and weights.max() > 1:
        idx = np.repeat(np.arange(len(weights), dtype=np.int64), weights)
        data, ann = data.take(pa.array(idx)), ann.take(idx)
    data = data.rename_columns(list(names))
    if len(ann.values) == 0:
        return data, ()
    if ann.is_singleton():
        ids = ann.values if ann.stored_offsets is None else ann.values[ann.offsets[:-1]]
        column: pa.Array = pa.array(np.asarray(ids, dtype=np.int32), pa.int32())
        return data.append_column(ann_name, column), (AnnColumn(ann_name, False),)
    ann = ann.deduplicated()
    offsets = pa.array(np.asarray(ann.offsets, dtype=np.int32), pa.int32())
    column = pa.ListArray.from_arrays(offsets, pa.array(ann.values, pa.int32()))
    return data.append_column(ann_name, column), (AnnColumn(ann_name, True),)


def view_bytes(rows: DeltaBatch) -> int:
    """What a view of ``rows`` ships, near enough to compare with ``VIEW_BYTES``."""
    weights = np.asarray(rows.weights)
    repeat = float(weights.sum()) / max(1, len(weights))
    return int((rows.data.nbytes + rows.annotation.nbytes()) * max(1.0, repeat))
