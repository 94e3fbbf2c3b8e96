"""Join sides served by Spark (sections 7.1-7.2: joins outsourced to the database behind a
Bloom filter), and the Spark evaluation of plan subtrees over table versions.

A ``SparkJoinSide`` is a ``ProbedSide`` (``imp_core.engine.probed_side``: no rows held, a
Bloom filter of the keys, versions from the batch's ``VersionContext``) whose lookups
evaluate the input subtree's annotated SQL in Spark over the table files at the side's
versions, semi-joined with the probe's distinct keys.

Invariant: every view is named after the files it reads, so a name always means the
same contents.
"""

from __future__ import annotations

import hashlib
from typing import TYPE_CHECKING, Any, Mapping

import numpy as np
import pyarrow as pa

from imp_core.engine.annotation import Annotation
from imp_core.engine.probed_side import ProbedSide, VersionContext
from imp_core.engine.zset import DeltaBatch
from imp_core.plan.nodes import PlanNode, arrow_schema
from imp_core.sketch.partition import PartitionSet
from imp_core.spark.collect import NEVER, collect_arrow
from imp_core.spark.compile import ANNOTATION_COLUMN, annotated_sql, quote
from imp_core.spark.tables import arrow_to_dataframe, snapshot_frame

if TYPE_CHECKING:  # pragma: no cover
    from pyspark.sql import DataFrame, SparkSession

__all__ = ["SparkJoinSide", "VersionContext", "fragment_views", "subtree_batch",
           "subtree_frame", "subtree_rows", "version_views"]


def version_views(spark: SparkSession, store: Any, versions: Mapping[str, int]) -> dict[str, str]:
    """Temp views over the tables' files at ``versions``; table -> view name. A view's name
    is derived from its files, so the same name always means the same contents."""
    views = {}
    for table, version in versions.items():
        table_id, files = store.snapshot_files(table, version)
        digest = hashlib.sha1("\n".join([table_id, *sorted(files)]).encode()).hexdigest()[:16]
        name = f"__imp_v_{table}_{version}_{digest}"
        df, _ = snapshot_frame(spark, store, table, version, (table_id, files))
        df.createOrReplaceTempView(name)
        views[table] = name
    return views


def fragment_views(spark: SparkSession, views: Mapping[str, str],
                   partitions: PartitionSet) -> dict[str, str]:
    """Per partitioned table among ``views`` (table -> version view), a view of it plus its
    rows' global fragment ids (``__imp_fid``, by JVM binary search over the split points:
    a CASE tree of many fragments is too big for code generation)."""
    from imp_core.spark.compile import FID_COLUMN
    from imp_core.spark.run import fragment_id_column

    out = {}
    for part, offset in zip(partitions.partitions, partitions.offsets):
        base = views.get(part.table)
        if base is None:
            continue
        name = f"{base}_f{offset}_{part.fingerprint()[:12]}"
        spark.table(quote(base)).withColumn(FID_COLUMN, fragment_id_column(part, offset)) \
            .createOrReplaceTempView(name)
        out[part.table] = name
    return out


def subtree_batch(spark: SparkSession, store: Any, node: PlanNode, partitions: PartitionSet,
                  versions: Mapping[str, int]) -> DeltaBatch:
    """``node``'s annotated rows at ``versions`` evaluated by Spark, as a batch (weight +1
    per row); e.g. to refill an exhausted min/max or top-k buffer."""
    views = version_views(spark, store, {t: versions[t] for t in sorted(node.tables())})
    sql = annotated_sql(node, partitions, "view", views,
                        fragment_views(spark, views, partitions))
    return _to_batch(collect_arrow(spark.sql(sql)), arrow_schema(node.schema))


def subtree_frame(spark: SparkSession, store: Any, node: PlanNode, partitions: PartitionSet,
                  versions: Mapping[str, int]) -> DataFrame:
    """``node``'s annotated rows (plus ``__imp_ann``) over the tables at ``versions``."""
    views = version_views(spark, store, {t: versions[t] for t in sorted(node.tables())})
    return spark.sql(annotated_sql(node, partitions, "case", views))


def subtree_rows(spark: SparkSession, store: Any, node: PlanNode, partitions: PartitionSet,
                 versions: Mapping[str, int]) -> int:
    """The number of rows of ``node`` (filtered and projected) at ``versions``, by Spark."""
    return subtree_frame(spark, store, node, partitions, versions).count()


class SparkJoinSide(ProbedSide):
    """A ``ProbedSide`` whose contents are the subtree ``node`` evaluated in Spark."""

    kind = "spark"

    def __init__(self, node: PlanNode, key_columns: tuple[str, ...], partitions: PartitionSet,
                 store: Any, context: VersionContext, spark: SparkSession,
                 use_bloom: bool = True):
        super().__init__(node, key_columns, context, use_bloom)
        self.partitions = partitions
        self.store = store
        self.spark = spark

    @property
    def spark_calls(self) -> int:
        return self.lookups

    def _frame(self) -> DataFrame:
        assert self.versions is not None
        return subtree_frame(self.spark, self.store, self.node, self.partitions, self.versions)

    def distinct_keys(self) -> pa.Table:
        df = self._frame()
        return collect_arrow(df.select(*[df[quote(c)] for c in self.key_columns]).distinct())

    def lookup(self, probe_keys: pa.Table) -> DeltaBatch:
        side = self._frame()
        kdf = arrow_to_dataframe(self.spark, probe_keys)
        cond = None
        for col, name in zip(self.key_columns, probe_keys.column_names):
            c = side[quote(col)] == kdf[quote(name)]
            cond = c if cond is None else cond & c
        # rows of the probe keys only: no estimate (Spark sizes a semi-join as its input)
        out = collect_arrow(side.join(kdf, on=cond, how="left_semi"), spill_above=NEVER)
        return _to_batch(out, self.schema)


def _to_batch(out: pa.Table, schema: pa.Schema) -> DeltaBatch:
    """Spark's annotated rows as a batch of ``schema`` (weight +1, annotation from
    ``__imp_ann``: sorted, duplicate-free fragment ids per row)."""
    ann = out.column(ANNOTATION_COLUMN).combine_chunks()
    if isinstance(ann, pa.ChunkedArray):  # no chunks at all (no rows)
        ann = pa.array([], pa.list_(pa.int32()))
    offsets = ann.offsets.to_numpy().astype(np.int64)
    values = ann.values.to_numpy(zero_copy_only=False).astype(np.int32)
    values = values[offsets[0]:offsets[-1]]
    data = out.drop_columns([ANNOTATION_COLUMN]).rename_columns(schema.names).cast(schema)
    return DeltaBatch.of(data, 1, Annotation(offsets - offsets[0], values))
