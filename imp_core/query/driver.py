"""The query driver: how one registered query's pipeline is placed, started and stepped.

Every front runs a registered query through a ``QueryDriver`` and differs only in where
it runs and where its rows come from: the embedded ``Engine`` (in-memory tables), the
embedded ``Maintainer`` (a versioned table store, in this process) and the service's
shard workers (a Ray actor per shard). The rules all of them follow live here, once:

- **placement** (``place_sides``): which join sides (and groups) are probed in the data
  layer instead of held in memory. Only a query that never has more than one shard probes
  anything (a shard's side holds only its routed rows, which the files alone cannot
  tell); a side is probed when its rows exceed a row limit, or when the state beyond a
  byte budget would not fit (sized by the registration's estimate, else by the Parquet
  footers, ``DataLayer.place``);
- **the bootstrap choice** (``bootstrap_mode``): "spark" or "engine" as asked, and for
  "auto", Spark when the front has it at hand and (with a size floor) the columns the
  query reads are larger than the floor;
- **the first-state feed** (``first_changes``): each table at its version as insertions,
  cut to the query's scan spec (its selection, columns and fragment ids), read by the
  delta source's snapshot when it has one (Spark: filtered and annotated there), else
  from the table's files with the spec's columns and row filter;
- **a step** (``QueryDriver.step``): the batch's versions set on the version context
  (which probed sides and refills read) and the changes applied, together.

Invariants: ``QueryDriver.versions`` are the table versions its pipeline's state is exact
for, and change only together with the state (``step``, ``load_state``, ``restore``); on
an error in ``apply`` neither moves. Every ``apply`` of a driven pipeline is preceded by
the ``begin`` of its batch's versions, because ``step`` is the only place that calls it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

import pyarrow as pa

from imp_core.engine.operators.base import TableDelta
from imp_core.engine.pipeline import EngineOptions, IncrementalQuery, SketchDelta
from imp_core.engine.probed_side import VersionContext
from imp_core.engine.zset import DeltaBatch
from imp_core.errors import BootstrapModeError
from imp_core.plan.arrow_filter import scan_filter
from imp_core.plan.nodes import PlanNode, QueryPlan
from imp_core.query.data_layer import DataLayer, JoinPlacement, Wiring, join_sides
from imp_core.sketch.partition import PartitionSet
from imp_core.sketch.sketch import Sketch
from imp_core.storage.scan_spec import ScanSpec, restrict_delta

BOOTSTRAP_MODES = ("auto", "spark", "engine")

# a table's rows at one version as the delta source reads them: (table, version, spec)
Snapshot = Callable[[str, int, "ScanSpec | None"], TableDelta]


def check_mode(mode: str) -> str:
    """``mode`` if it is one of ``BOOTSTRAP_MODES``, else ``BootstrapModeError``."""
    if mode not in BOOTSTRAP_MODES:
        raise BootstrapModeError(f"unknown bootstrap mode {mode!r}; use one of "
                                 f"{', '.join(BOOTSTRAP_MODES)}")
    return mode


def bootstrap_mode(requested: str, spark_at_hand: bool, min_bytes: int | None = None,
                   read_bytes: Callable[[int], int] | None = None) -> str:
    """How a query's first state is built: "spark" (its operators' state computed on
    Spark, ``imp_core.spark.bootstrap``) or "engine" (the tables fed through the pipeline).

    ``requested`` "spark" or "engine" is kept; "auto" is "spark" when Spark is at hand
    and, with ``min_bytes`` given, when ``read_bytes(limit)`` (the bytes of the columns
    the query reads, counted up to at least ``limit``) exceeds it.

    >>> bootstrap_mode("auto", spark_at_hand=False)
    'engine'
    >>> bootstrap_mode("auto", spark_at_hand=True, min_bytes=100, read_bytes=lambda n: 50)
    'engine'
    >>> bootstrap_mode("auto", spark_at_hand=True, min_bytes=100, read_bytes=lambda n: 101)
    'spark'
    """
    mode = check_mode(requested)
    if mode != "auto":
        return mode
    if not spark_at_hand:
        return "engine"
    if min_bytes is None or read_bytes is None:
        return "spark"
    return "spark" if read_bytes(min_bytes) > min_bytes else "engine"


def place_sides(plan: QueryPlan, partitions: PartitionSet, versions: Mapping[str, int],
                data: DataLayer | None, shards: int = 1, memory_rows: int | None = None,
                budget_bytes: int | None = None, estimated: JoinPlacement | None = None
                ) -> JoinPlacement:
    """The join sides of ``plan`` to probe in the data layer (see the module docstring).

    ``shards``: the most shards the query may ever have (more than one: nothing probed).
    ``memory_rows``: a side whose filtered, projected rows exceed it is probed.
    ``budget_bytes``: the state budget; the sides beyond it are ``estimated`` (the
    registration's memory estimate) or, without an estimate, sized by the footers.
    """
    if shards != 1 or data is None:
        return frozenset()
    if memory_rows is not None:
        return frozenset(sid for sid, _, _, child in join_sides(plan.root)
                         if data.side_rows(child, partitions, versions, memory_rows) > memory_rows)
    if budget_bytes is None:
        return frozenset()
    if estimated is not None:
        return frozenset(estimated)
    return data.place(plan, partitions, versions, budget_bytes)


def read_columns(spec: ScanSpec | None, schema: pa.Schema) -> list[str] | None:
    """The columns of a table (``schema``) a query reads under ``spec``: its spec's and its
    pushed-down selection's, in table order; None (all) without a spec, or when the spec
    names columns the table lacks."""
    if spec is None:
        return None
    wanted = set(spec.columns)
    if spec.predicate is not None:
        wanted |= spec.predicate.columns()
    if not wanted <= set(schema.names):
        return None
    return [c for c in schema.names if c in wanted]


def first_changes(store: Any, versions: Mapping[str, int], specs: Mapping[str, ScanSpec],
                  snapshot: Snapshot | None = None,
                  schema: Callable[[str], pa.Schema] | None = None) -> dict[str, TableDelta]:
    """Each table at its version in ``versions`` as insertions cut to its scan spec: the
    bootstrap batch of an "engine" bootstrap. ``snapshot``: the delta source's own reader
    (which cuts to the spec itself), else the store's files are read; ``schema``: a
    table's schema where the caller keeps it (else read from the store)."""
    out: dict[str, TableDelta] = {}
    for table, version in versions.items():
        spec = specs.get(table)
        if snapshot is not None:
            out[table] = snapshot(table, version, spec)
            continue
        table_schema = schema(table) if schema is not None else store.schema(table)
        where = None if spec is None or spec.predicate is None else \
            scan_filter(spec.predicate, table_schema)
        rows = store.read(table, version, columns=read_columns(spec, table_schema),
                          row_filter=where)
        out[table] = restrict_delta(TableDelta.inserts(rows), spec)
    return out


def wire(plan: QueryPlan, partitions: PartitionSet, options: EngineOptions,
         data: DataLayer | None = None, placement: JoinPlacement = frozenset(),
         refill: Callable[[PlanNode], DeltaBatch] | None = None) -> Wiring:
    """The query's pipeline with empty state: wired to ``data`` (probed sides and refills
    at the batch's versions), or without a data layer, refilled by ``refill`` (the
    embedded engine's evaluation over its in-memory tables) and probing nothing."""
    if data is not None:
        return data.wire(plan, partitions, options, placement)
    if placement:
        raise ValueError("join sides can only be probed in a data layer")
    return Wiring(IncrementalQuery(plan, partitions, options, source=refill),
                  VersionContext())


@dataclass
class QueryDriver:
    """One query's pipeline, its version context, and the versions its state is exact for.

    Invariant: ``versions`` is empty before the first step (no state) and afterwards the
    versions the pipeline's state reflects; only ``step``, ``load_state`` and ``restore``
    change them, together with the state.
    """

    wiring: Wiring
    placement: JoinPlacement = frozenset()
    versions: dict[str, int] = field(default_factory=dict)

    @classmethod
    def start(cls, plan: QueryPlan, partitions: PartitionSet, options: EngineOptions,
              data: DataLayer | None = None, placement: JoinPlacement = frozenset(),
              refill: Callable[[PlanNode], DeltaBatch] | None = None) -> QueryDriver:
        """A driver of ``plan`` with empty state (see ``wire``)."""
        return cls(wire(plan, partitions, options, data, placement, refill),
                   frozenset(placement))

    @property
    def pipeline(self) -> IncrementalQuery:
        return self.wiring.pipeline

    @property
    def context(self) -> VersionContext:
        return self.wiring.context

    def step(self, from_versions: Mapping[str, int] | None, to_versions: Mapping[str, int],
             changes: Mapping[str, TableDelta]) -> SketchDelta:
        """Apply the tables' ``changes`` from ``from_versions`` (None or empty: the
        bootstrap batch of an empty state) to ``to_versions``; the probed sides and
        refills of the batch read the tables at those versions."""
        self.context.begin(dict(from_versions) if from_versions else None, to_versions)
        delta = self.pipeline.apply(changes)
        self.versions = dict(to_versions)
        return delta

    def bootstrap_on_spark(self, spark: Any, store: Any, versions: Mapping[str, int]
                           ) -> Any:
        """Compute the state at ``versions`` on Spark and load it
        (``imp_core.spark.bootstrap``); returns what the bootstrap did (a BootstrapRun)."""
        from imp_core.spark.bootstrap import bootstrap

        self.context.begin(None, versions)
        run = bootstrap(spark, store, self.pipeline, versions)
        self.versions = dict(versions)
        return run

    def spark_state(self, spark: Any, store: Any, versions: Mapping[str, int],
                    index_served: bool = False) -> dict[str, pa.Table]:
        """The state at ``versions`` computed on Spark, not loaded (state tables in the
        layout of this driver's pipeline; the driver is left empty). ``index_served``:
        the pipeline that loads it answers probes from shared indexes
        (``imp_core.spark.bootstrap``)."""
        from imp_core.spark.bootstrap import bootstrap_tables

        self.context.begin(None, versions)
        tables, _ = bootstrap_tables(spark, store, self.pipeline, versions,
                                     index_served=index_served)
        return tables

    def load_state(self, tables: Mapping[str, pa.Table], versions: Mapping[str, int],
                   batches: int = 0) -> None:
        """Replace the state by ``tables`` (exact for ``versions``); all or nothing."""
        self.pipeline.load_state(tables, batches)
        self.versions = {str(k): int(v) for k, v in versions.items()}

    def restore(self, blob: bytes) -> dict[str, object]:
        """Replace the state by a ``snapshot``'s; its metadata must name its versions."""
        meta = self.pipeline.restore(blob)
        self.versions = {str(k): int(v) for k, v in dict(meta.get("versions") or {}).items()}
        return meta

    def snapshot(self, meta: Mapping[str, object]) -> bytes:
        """The state as bytes, its metadata holding ``meta`` and the versions."""
        return self.pipeline.snapshot({**meta, "versions": dict(self.versions)})

    def sketch(self) -> Sketch:
        return self.pipeline.sketch()
