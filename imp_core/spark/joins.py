"""Join sides served by Spark (sections 7.1-7.2: joins outsourced to the database behind a
Bloom filter).

A ``SparkJoinSide`` stands for one input of an equi-join whose contents are too large to
hold in memory. It keeps no rows: only the table versions its contents correspond to and
a Bloom filter of its join keys. A probe drops the delta rows whose key cannot have a
partner (when none remain, Spark is not called at all), then evaluates the input
subtree's annotated SQL in Spark over the table files at those versions, semi-joined with
the remaining distinct keys, and pairs the rows it gets back with the delta rows in
memory (null keys never match).

Invariants: within a batch a side is at the batch's start versions until ``apply`` and
at its target versions after (``VersionContext``, set by ``Maintainer.maintain`` before
``pipeline.apply``; start versions ``None`` mean the empty state a pipeline is
bootstrapped from). Every key ever inserted tests positive in the filter; deletions leave
bits set (more false positives, never a missed match). When the filter holds far more keys
than it was sized for, it is rebuilt in Spark from the subtree's distinct keys.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Mapping

import numpy as np
import pyarrow as pa

from imp_core.engine.annotation import Annotation
from imp_core.engine.bloom import BloomFilter
from imp_core.engine.join_index import SideIndex, key_hashes
from imp_core.engine.zset import DeltaBatch
from imp_core.errors import ImpError
from imp_core.plan.nodes import PlanNode, arrow_schema
from imp_core.sketch.partition import PartitionSet
from imp_core.spark.compile import ANNOTATION_COLUMN, annotated_sql, quote
from imp_core.spark.tables import arrow_to_dataframe, snapshot_frame

if TYPE_CHECKING:  # pragma: no cover
    from pyspark.sql import DataFrame, SparkSession

_KEY = "__imp_k"


class SparkSideError(ImpError):
    """A Spark join side asked for something only an in-memory side has."""


@dataclass
class VersionContext:
    """The versions one batch moves a query from (``before``) and to (``after``)."""

    before: dict[str, int] | None = None  # None: the batch starts from empty state
    after: dict[str, int] = field(default_factory=dict)
    batch: int = 0

    def begin(self, before: Mapping[str, int] | None, after: Mapping[str, int]) -> None:
        self.before = dict(before) if before is not None else None
        self.after = dict(after)
        self.batch += 1


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
    return _to_batch(spark.sql(sql).toArrow(), arrow_schema(node.schema))


def subtree_frame(spark: SparkSession, store: Any, node: PlanNode, partitions: PartitionSet,
                  versions: Mapping[str, int]) -> DataFrame:
    """``node``'s annotated rows (plus ``__imp_ann``) over the tables at ``versions``."""
    views = version_views(spark, store, {t: versions[t] for t in sorted(node.tables())})
    return spark.sql(annotated_sql(node, partitions, "case", views))


def subtree_rows(spark: SparkSession, store: Any, node: PlanNode, partitions: PartitionSet,
                 versions: Mapping[str, int]) -> int:
    """The number of rows of ``node`` (filtered and projected) at ``versions``, by Spark."""
    return subtree_frame(spark, store, node, partitions, versions).count()


class SparkJoinSide:
    """A ``JoinSide`` whose contents are the subtree ``node`` evaluated in Spark."""

    def __init__(self, node: PlanNode, key_columns: tuple[str, ...], partitions: PartitionSet,
                 store: Any, context: VersionContext, spark: SparkSession,
                 use_bloom: bool = True):
        if not key_columns:
            raise SparkSideError("only equi-joins can have a join side served by Spark")
        self.node = node
        self.schema = arrow_schema(node.schema)
        self.key_columns = key_columns
        self.partitions = partitions
        self.store = store
        self.context = context
        self.spark = spark
        self.use_bloom = use_bloom
        self.tables = sorted(node.tables())
        self.versions: dict[str, int] | None = None  # None: empty
        self._batch = context.batch
        self.bloom: BloomFilter | None = None
        self.spark_calls = 0
        self.probes_skipped = 0

    # -- versions ---------------------------------------------------------------------
    def _restrict(self, versions: Mapping[str, int] | None) -> dict[str, int] | None:
        return None if versions is None else {t: versions[t] for t in self.tables}

    def _sync(self) -> None:
        """Enter the context's current batch at its start versions."""
        if self._batch != self.context.batch:
            self._batch = self.context.batch
            self.versions = self._restrict(self.context.before)

    # -- updates ----------------------------------------------------------------------
    def apply(self, delta: DeltaBatch) -> None:
        self._sync()
        self.versions = self._restrict(self.context.after)
        if not self.use_bloom or len(delta) == 0:
            return
        ins = delta.filter(delta.weights > 0)
        keys, valid, _ = key_hashes(ins.data, self.key_columns)
        if self.bloom is None:
            self.bloom = BloomFilter(2 * int(valid.sum()))
        self.bloom.add(keys[valid])
        if self.bloom.saturated():
            self._rebuild_bloom()

    def _rebuild_bloom(self) -> None:
        assert self.versions is not None
        self.spark_calls += 1
        df = subtree_frame(self.spark, self.store, self.node, self.partitions, self.versions)
        distinct = df.select(*[df[quote(c)] for c in self.key_columns]).distinct().toArrow()
        keys, valid, _ = key_hashes(distinct, self.key_columns)
        self.bloom = BloomFilter(2 * int(valid.sum()))
        self.bloom.add(keys[valid])

    # -- lookups ------------------------------------------------------------------------
    def probe(self, delta: DeltaBatch, keys: tuple[str, ...]) -> tuple[np.ndarray, DeltaBatch]:
        self._sync()
        none = np.zeros(0, dtype=np.int64), DeltaBatch.empty(self.schema)
        if len(delta) == 0 or self.versions is None:
            return none
        pkeys, valid, _ = key_hashes(delta.data, keys)
        candidates = np.flatnonzero(valid)
        if self.use_bloom:
            hit = self.bloom.might_contain(pkeys[candidates]) if self.bloom is not None \
                else np.zeros(len(candidates), dtype=bool)
            self.probes_skipped += int(len(candidates) - hit.sum())
            candidates = candidates[hit]
        if len(candidates) == 0:
            return none
        probing = delta.take(candidates)
        matched = self._lookup(probing.data.select(list(keys)))
        if len(matched) == 0:
            return none
        # pair delta rows with the rows found exactly as the in-memory side does
        index = SideIndex(self.schema, self.key_columns, use_bloom=False)
        index.apply(matched)
        idx, rows = index.probe(probing, keys)
        return candidates[idx], rows

    def _lookup(self, probe_keys: pa.Table) -> DeltaBatch:
        """The subtree's rows (weight +1 each) whose keys are among ``probe_keys``."""
        assert self.versions is not None
        names = [f"{_KEY}{i}" for i in range(len(self.key_columns))]
        distinct = probe_keys.rename_columns(names).group_by(names).aggregate([])
        self.spark_calls += 1
        side = subtree_frame(self.spark, self.store, self.node, self.partitions, self.versions)
        kdf = arrow_to_dataframe(self.spark, distinct)
        cond = None
        for col, name in zip(self.key_columns, names):
            c = side[quote(col)] == kdf[quote(name)]
            cond = c if cond is None else cond & c
        out = side.join(kdf, on=cond, how="left_semi").toArrow()
        return _to_batch(out, self.schema)

    def contents(self) -> DeltaBatch:
        raise SparkSideError("a join side served by Spark holds no rows; theta joins and "
                             "cross products keep both sides in memory")

    # -- state ------------------------------------------------------------------------
    def snapshot(self) -> pa.Table:
        bloom = self.bloom
        return pa.table({
            "versions": pa.array([json.dumps(self.versions)]),
            "bloom": pa.array([None if bloom is None else bloom.array.tobytes()], pa.binary()),
            "bits": pa.array([0 if bloom is None else bloom.bits], pa.int64()),
            "hashes": pa.array([0 if bloom is None else bloom.hashes], pa.int64()),
            "count": pa.array([0 if bloom is None else bloom.count], pa.int64()),
        })

    def restore(self, table: pa.Table) -> None:
        row = table.to_pylist()[0]
        self.versions = json.loads(row["versions"])
        self._batch = self.context.batch
        self.bloom = None
        if row["bloom"] is not None:
            bloom = BloomFilter(1)
            bloom.bits, bloom.hashes, bloom.count = row["bits"], row["hashes"], row["count"]
            bloom.array = np.frombuffer(row["bloom"], dtype=np.uint8).copy()
            self.bloom = bloom

    def nbytes(self) -> int:
        return 0 if self.bloom is None else self.bloom.array.nbytes


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
