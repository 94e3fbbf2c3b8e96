"""Join sides probed in the data layer instead of held in memory (sections 7.1-7.2).

A ``ProbedSide`` stands for one input of an equi-join whose contents are too large to
keep in an actor's state. It keeps no rows: only the table versions its contents
correspond to and a Bloom filter of its join keys. A probe drops the delta rows whose
key cannot have a partner (when none remain, the data layer is not asked at all), asks
the data layer for the input subtree's annotated rows at those versions whose keys are
among the remaining distinct keys (``lookup``), and pairs them with the delta rows in
memory exactly as the in-memory side does (null keys never match). Subclasses say how
the data layer answers: Spark (``imp_core.spark.joins.SparkJoinSide``) or a read of the
Delta table's files filtered by the keys (``imp_core.storage.file_side.FileJoinSide``).

Invariants: within a batch a side is at the batch's start versions until ``apply`` and
at its target versions after (``VersionContext``, set by whoever drives the pipeline
before ``IncrementalQuery.apply``; start versions ``None`` mean the empty state a
pipeline is bootstrapped from). Every key ever inserted tests positive in the filter;
deletions leave bits set (more false positives, never a missed match). When the filter
holds far more keys than it was sized for, it is rebuilt from the subtree's distinct
keys (``distinct_keys``). A side made ``open`` (by its bootstrap, kept in its state)
keeps no filter: every key may have a partner and goes to the data layer.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Mapping

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from imp_core.engine.bloom import BloomFilter
from imp_core.engine.join_index import SideIndex, key_hashes
from imp_core.engine.zset import DeltaBatch
from imp_core.errors import ProbedSideError
from imp_core.plan.nodes import PlanNode, arrow_schema

PROBE_KEY = "__imp_k"  # prefix of the probe-key columns handed to ``lookup``


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


class ProbedSide:
    """A ``JoinSide`` whose contents are the subtree ``node`` evaluated in the data layer.

    Subclasses implement ``lookup`` (rows whose keys are among given keys) and
    ``distinct_keys``; both read the tables at ``self.versions`` (never None there).
    """

    kind = "probed"

    def __init__(self, node: PlanNode, key_columns: tuple[str, ...],
                 context: VersionContext, use_bloom: bool = True):
        if not key_columns:
            raise ProbedSideError("only equi-joins can have a join side probed in the data "
                                  "layer; theta joins and cross products stay in memory")
        self.node = node
        self.schema = arrow_schema(node.schema)
        self.key_columns = key_columns
        self.context = context
        self.use_bloom = use_bloom
        self.tables = sorted(node.tables())
        self.versions: dict[str, int] | None = None  # None: empty
        self._batch = context.batch
        self.bloom: BloomFilter | None = None
        # no filter kept: every probe key is looked up (``make_open``)
        self.open = False
        self.lookups = 0  # calls into the data layer
        self.probes_skipped = 0

    # -- the data layer -----------------------------------------------------------------
    def lookup(self, probe_keys: pa.Table) -> DeltaBatch:
        """The subtree's annotated rows (weight +1 each) at ``self.versions`` whose key
        columns equal one row of ``probe_keys`` (columns ``__imp_k0``, ``__imp_k1``, ...,
        distinct rows, no nulls)."""
        raise NotImplementedError

    def distinct_keys(self) -> pa.Table:
        """The subtree's distinct key-column values at ``self.versions``."""
        raise NotImplementedError

    # -- versions -----------------------------------------------------------------------
    def _restrict(self, versions: Mapping[str, int] | None) -> dict[str, int] | None:
        return None if versions is None else {t: versions[t] for t in self.tables}

    def _sync(self) -> None:
        """Enter the context's current batch at its start versions."""
        if self._batch != self.context.batch:
            self._batch = self.context.batch
            self.versions = self._restrict(self.context.before)

    def make_open(self) -> None:
        """Keep no Bloom filter from now on: where a lookup reads rows by key value
        (``keys_looked_up_by_value``), so a key without partner costs a binary search,
        building and keeping the filter costs more than it saves."""
        self.open, self.bloom = True, None

    @property
    def filters(self) -> bool:
        """Whether probe keys are checked against the Bloom filter first."""
        return self.use_bloom and not self.open

    # -- updates ------------------------------------------------------------------------
    def apply(self, delta: DeltaBatch) -> None:
        self._sync()
        self.versions = self._restrict(self.context.after)
        if not self.filters or len(delta) == 0:
            return
        ins = delta.filter(delta.weights > 0)
        keys, valid, _ = key_hashes(ins.data, self.key_columns)
        # the distinct keys: a side's first load (the whole subtree) often holds many
        # rows a key (lineitem by l_partkey: 30), and the filter is sized and counted
        # (``saturated``) by keys
        keys = pc.unique(pa.array(keys[valid])).to_numpy()
        if self.bloom is None:
            self.bloom = BloomFilter.for_keys(len(keys))
        self.bloom.add(keys)
        if self.bloom.saturated():
            self.rebuild_bloom()

    def rebuild_bloom(self) -> None:
        assert self.versions is not None
        self.lookups += 1
        keys, valid, _ = key_hashes(self.distinct_keys(), self.key_columns)
        self.bloom = BloomFilter.for_keys(int(valid.sum()))
        self.bloom.add(keys[valid])

    # -- lookups ------------------------------------------------------------------------
    def probe(self, delta: DeltaBatch, keys: tuple[str, ...]) -> tuple[np.ndarray, DeltaBatch]:
        self._sync()
        none = np.zeros(0, dtype=np.int64), DeltaBatch.empty(self.schema)
        if len(delta) == 0 or self.versions is None:
            return none
        pkeys, valid, _ = key_hashes(delta.data, keys)
        candidates = np.flatnonzero(valid)
        if self.filters:
            hit = self.bloom.might_contain(pkeys[candidates]) if self.bloom is not None \
                else np.zeros(len(candidates), dtype=bool)
            self.probes_skipped += int(len(candidates) - hit.sum())
            candidates = candidates[hit]
        if len(candidates) == 0:
            return none
        probing = delta.take(candidates)
        names = [f"{PROBE_KEY}{i}" for i in range(len(keys))]
        distinct = probing.data.select(list(keys)).rename_columns(names) \
            .group_by(names).aggregate([])
        self.lookups += 1
        matched = self.lookup(distinct)
        if len(matched) == 0:
            return none
        # pair delta rows with the rows found exactly as the in-memory side does
        index = SideIndex(self.schema, self.key_columns, use_bloom=False)
        index.apply(matched)
        idx, rows = index.probe(probing, keys)
        return candidates[idx], rows

    def contents(self) -> DeltaBatch:
        raise ProbedSideError("a join side probed in the data layer holds no rows; theta "
                              "joins and cross products keep both sides in memory")

    # -- state ------------------------------------------------------------------------
    STATE_SCHEMA = pa.schema([("versions", pa.string()), ("bloom", pa.binary()),
                              ("bits", pa.int64()), ("hashes", pa.int64()),
                              ("count", pa.int64()), ("open", pa.bool_())])

    def state_schema(self) -> pa.Schema:
        """The one-row table ``snapshot`` returns: versions (JSON), the Bloom filter and
        whether the side is open (a state written before ``open`` existed lacks it: not
        open)."""
        return self.STATE_SCHEMA

    def snapshot(self) -> pa.Table:
        bloom = self.bloom
        return pa.table({
            "versions": pa.array([json.dumps(self.versions)]),
            "bloom": pa.array([None if bloom is None else bloom.array.tobytes()], pa.binary()),
            "bits": pa.array([0 if bloom is None else bloom.bits], pa.int64()),
            "hashes": pa.array([0 if bloom is None else bloom.hashes], pa.int64()),
            "count": pa.array([0 if bloom is None else bloom.count], pa.int64()),
            "open": pa.array([self.open], pa.bool_()),
        }, schema=self.STATE_SCHEMA)

    def restore(self, table: pa.Table) -> None:
        row = table.to_pylist()[0]
        self.versions = json.loads(row["versions"])
        self._batch = self.context.batch
        self.bloom = None
        self.open = bool(row.get("open"))
        if row["bloom"] is not None:
            bloom = BloomFilter(1)
            bloom.bits, bloom.hashes, bloom.count = row["bits"], row["hashes"], row["count"]
            bloom.array = np.frombuffer(row["bloom"], dtype=np.uint8).copy()
            self.bloom = bloom

    def nbytes(self) -> int:
        return 0 if self.bloom is None else self.bloom.array.nbytes


def is_probed(side: object) -> bool:
    """Whether a join side is served by the data layer (holds no rows)."""
    return isinstance(side, ProbedSide)
