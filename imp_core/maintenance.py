"""Sketches over versioned (Delta) tables: register, maintain from pulled deltas, recapture.

A ``MaintainedQuery`` records, per input table, the table version its state reflects.
Invariant: its pipeline's state is exactly the query's annotated state at those
versions; ``maintain`` pulls the change feed from each recorded version up to the
table's current one, applies all tables' changes as one batch, and only then advances
the recorded versions (a failure leaves the query at its old versions).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Mapping, Protocol

import numpy as np
import pyarrow as pa

from imp_core.api import DEFAULT_FRAGMENTS
from imp_core.engine.operators.base import TableDelta
from imp_core.engine.pipeline import EngineOptions, IncrementalQuery, SketchDelta
from imp_core.errors import ImpError, PartitionError, UnknownQueryError
from imp_core.plan.evaluate import evaluate_predicate
from imp_core.plan.nodes import (
    Aggregate,
    Distinct,
    Join,
    PlanNode,
    Project,
    QueryPlan,
    Scan,
    Select,
    TopK,
)
from imp_core.reference import reference_capture, reference_evaluate
from imp_core.scan_spec import ScanSpec, scan_specs
from imp_core.sketch.partition import PartitionSet, PartitionSpec, build_partition_set
from imp_core.sketch.sketch import Sketch

if TYPE_CHECKING:  # pragma: no cover
    from imp_core.engine.join_index import JoinSide
    from imp_core.engine.zset import DeltaBatch
    from imp_core.spark.bootstrap import BootstrapRun
    from imp_core.spark.joins import VersionContext

BOOTSTRAP_MODES = ("auto", "spark", "engine")


class BootstrapModeError(ImpError):
    """An unknown way to bootstrap a query's state."""

    code = "INVALID_ARGUMENT"


class VersionedTables(Protocol):
    """What maintenance needs of a table store (``imp_core.storage.DeltaStore``)."""

    def version(self, name: str) -> int: ...

    def read(self, name: str, version: int | None = None,
             columns: list[str] | None = None) -> pa.Table: ...

    def schema(self, name: str) -> pa.Schema: ...

    def tables(self) -> list[str]: ...

    def entry(self, name: str) -> Any: ...


class DeltaSource(Protocol):
    """Where annotated deltas come from: delta-rs directly, or Spark."""

    def changes(self, table: str, from_version: int, to_version: int,
                spec: ScanSpec | None = None) -> TableDelta: ...


class DirectDeltaSource:
    """The change feed read by delta-rs in-process (no JVM): best for small deltas."""

    def __init__(self, store: Any):
        self.store = store

    def changes(self, table: str, from_version: int, to_version: int,
                spec: ScanSpec | None = None) -> TableDelta:
        from imp_core.storage import to_weighted

        feed = self.store.changes(table, from_version, to_version)
        rows, weights = to_weighted(feed)
        weights = np.asarray(weights, dtype=np.int64)
        if spec is not None:
            if spec.predicate is not None and rows.num_rows:
                keep = evaluate_predicate(spec.predicate, rows)
                rows, weights = rows.filter(pa.array(keep)), weights[keep]
            rows = rows.select(list(spec.columns))
        return TableDelta(rows, weights)


@dataclass
class MaintainedQuery:
    name: str
    plan: QueryPlan
    partitions: PartitionSet
    pipeline: IncrementalQuery
    versions: dict[str, int]
    specs: dict[str, ScanSpec] = field(default_factory=dict)
    history: list[SketchDelta] = field(default_factory=list)
    # the batch's versions: join sides served by Spark and min/max / top-k refills read
    # the tables at them
    context: VersionContext | None = None
    bootstrap: str = "engine"  # how the state was first built: "spark" or "engine"
    bootstrap_run: BootstrapRun | None = None  # what the Spark bootstrap did

    @property
    def sketch(self) -> Sketch:
        return self.pipeline.sketch()


class Maintainer:
    """Registered queries over a versioned table store.

    With ``join_memory_rows`` set, each equi-join input is held in memory only when its
    filtered, projected row count is at most that many rows; larger inputs are served by
    Spark (``imp_core.spark.joins.SparkJoinSide``), decided per join at registration.
    None (the default) keeps every join input in memory and never starts Spark for joins.

    ``bootstrap`` says how a registered query's initial state is built:

    - ``"spark"``: Spark computes every stateful operator's state on the table versions
      (``imp_core.spark.bootstrap``) and ships it as Arrow;
    - ``"engine"``: the tables (filtered, projected and annotated by the delta source when
      it reads snapshots) are fed to the pipeline as one insert batch;
    - ``"auto"`` (the default): ``"spark"`` when this maintainer works with Spark anyway
      (a Spark session or a Spark delta source given, or join sides served by Spark),
      else ``"engine"``, so that a maintainer without Spark never starts it.

    With bounded min/max or top-k buffers (``EngineOptions``), an exhausted buffer is
    refilled from the operator's input at the batch's target versions: evaluated by Spark
    when the maintainer works with Spark and the input's values are exact there, else by
    the reference evaluator over the stored tables.
    """

    def __init__(self, store: Any, source: DeltaSource | None = None,
                 options: EngineOptions = EngineOptions(),
                 join_memory_rows: int | None = None, spark: Any = None,
                 bootstrap: str = "auto"):
        _check_mode(bootstrap)
        self.store = store
        self.source = source or DirectDeltaSource(store)
        self.options = options
        self.join_memory_rows = join_memory_rows
        self.bootstrap = bootstrap
        self._spark = spark
        self.queries: dict[str, MaintainedQuery] = {}

    def catalog(self) -> dict[str, pa.Schema]:
        return {t: self.store.schema(t) for t in self.store.tables()}

    def register(self, name: str, sql: str,
                 partitions: Mapping[str, PartitionSpec] | None = None,
                 force: bool = False, fragments: int = DEFAULT_FRAGMENTS,
                 bootstrap: str | None = None) -> MaintainedQuery:
        """Plan ``sql``, build its partitions on the current table versions, check the
        sketch attributes' safety and bootstrap the state (``bootstrap`` overrides the
        maintainer's mode for this query)."""
        from imp_core.safety import require_safe
        from imp_core.spark.joins import VersionContext
        from imp_core.sql import parse_sketch_header, plan_sql

        mode = self._mode(bootstrap)
        plan = plan_sql(sql, self.catalog())
        if partitions is None:
            header = parse_sketch_header(sql)
            if not header:
                raise PartitionError("no partitions given and no '-- sketch:' header")
            partitions = {f"{t}.{c}": fragments for t, c in header}
        versions = {t: self.store.version(t) for t in sorted(plan.root.tables())}
        pset = self._partitions(partitions, versions)
        columns = {t: self.store.schema(t).names for t in self.store.tables()}
        domains = {t: dict(self.store.entry(t).domains or {}) for t in versions}
        require_safe(plan, [(p.table, p.column) for p in pset.partitions], domains=domains,
                     force=force, table_columns=columns)
        context = VersionContext()
        context.begin(None, versions)  # the bootstrap batch: from empty to versions
        chooser = None
        if self.join_memory_rows is not None:
            chooser = self._join_sides(pset, versions, context)
        refill = self._refill_source(pset, context) if self._bounded() else None
        pipeline = IncrementalQuery(plan, pset, self.options, source=refill,
                                    join_sides=chooser)
        specs = scan_specs(plan.root, pset)
        run = None
        if mode == "spark":
            from imp_core.spark.bootstrap import bootstrap

            run = bootstrap(self.spark(), self.store, pipeline, versions)
        else:
            pipeline.apply({t: self._initial(t, v, specs.get(t))
                            for t, v in versions.items()})
        q = MaintainedQuery(name, plan, pset, pipeline, versions, specs, context=context,
                            bootstrap=mode, bootstrap_run=run)
        self.queries[name] = q
        return q

    # -- bootstrap and refills ------------------------------------------------------------
    def _mode(self, requested: str | None) -> str:
        mode = _check_mode(requested or self.bootstrap)
        if mode == "auto":
            return "spark" if self.uses_spark() else "engine"
        return mode

    def uses_spark(self) -> bool:
        """Whether this maintainer works with Spark anyway (so using it costs no start)."""
        return (self._spark is not None or _source_session(self.source) is not None
                or self.join_memory_rows is not None)

    def _bounded(self) -> bool:
        return self.options.minmax_buffer is not None or self.options.topk_buffer is not None

    def _refill_source(self, pset: PartitionSet, context: VersionContext):
        """An operator input's full annotated contents at the current batch's target
        versions, for refilling exhausted min/max and top-k buffers."""

        def source(node: PlanNode) -> DeltaBatch:
            versions = {t: context.after[t] for t in sorted(node.tables())}
            if self.uses_spark() and _exact_on_spark(node):
                from imp_core.spark.joins import subtree_batch

                return subtree_batch(self.spark(), self.store, node, pset, versions)
            tables = {t: self.store.read(t, v) for t, v in versions.items()}
            return reference_evaluate(node, tables, pset).to_batch()

        return source

    # -- join sides ---------------------------------------------------------------------
    def spark(self) -> Any:
        if self._spark is None:
            self._spark = _source_session(self.source)
        if self._spark is None:
            from imp_core.spark.session import get_spark

            self._spark = get_spark()
        return self._spark

    def _join_sides(self, pset: PartitionSet, versions: Mapping[str, int],
                    context: VersionContext):
        """The pipeline's per-join-side choice: None (in memory) or a Spark side."""
        from imp_core.spark.joins import SparkJoinSide

        decided: dict[tuple[int, str], bool] = {}  # a rewiring (restore) keeps the choice

        def choose(node: Join, which: str) -> JoinSide | None:
            left_keys, right_keys, _ = node.equi_keys()
            if not left_keys:  # theta joins and cross products stay in memory
                return None
            child = node.left if which == "left" else node.right
            key = (id(node), which)
            if key not in decided:
                decided[key] = self.side_rows(child, pset, versions) > self.join_memory_rows
            if not decided[key]:
                return None
            keys = left_keys if which == "left" else right_keys
            return SparkJoinSide(child, keys, pset, self.store, context, self.spark(),
                                 self.options.use_bloom)

        return choose

    def side_rows(self, node: PlanNode, pset: PartitionSet,
                  versions: Mapping[str, int]) -> int:
        """A join input's filtered, projected row count as far as the limit needs it: an
        upper bound from the tables' Parquet footers when that is within the limit,
        otherwise the exact count by Spark."""
        import pyarrow.dataset as ds

        assert self.join_memory_rows is not None
        rows = {}
        for t in node.tables():
            files = self.store.file_uris(t, versions[t])
            rows[t] = ds.dataset(files, format="parquet").count_rows() if files else 0
        bound = _row_bound(node, rows)
        if bound <= self.join_memory_rows:
            return bound
        from imp_core.spark.joins import subtree_rows

        return subtree_rows(self.spark(), self.store, node, pset, versions)

    def _initial(self, table: str, version: int, spec: ScanSpec | None) -> TableDelta:
        """The table at ``version`` as insertions, through the delta source when it can
        read snapshots (Spark: filtered, projected and annotated there)."""
        snapshot = getattr(self.source, "snapshot", None)
        if snapshot is not None:
            return snapshot(table, version, spec)
        return TableDelta.inserts(self.store.read(table, version))

    def _partitions(self, specs: Mapping[str, PartitionSpec],
                    versions: Mapping[str, int]) -> PartitionSet:
        return build_partition_set(
            specs, self.store.schema,
            lambda t, c: self.store.read(t, versions.get(t), columns=[c]).column(0))

    def query(self, name: str) -> MaintainedQuery:
        try:
            return self.queries[name]
        except KeyError:
            raise UnknownQueryError(f"no registered query {name!r}") from None

    def maintain(self, name: str) -> SketchDelta:
        """Bring the sketch up to the tables' current versions."""
        q = self.query(name)
        t0 = time.perf_counter()
        target = {t: self.store.version(t) for t in q.versions}
        changes = {t: self.source.changes(t, q.versions[t], v, q.specs.get(t))
                   for t, v in target.items() if v > q.versions[t]}
        if not changes:
            return SketchDelta(type(q.sketch.fragments)(), type(q.sketch.fragments)(), 0.0)
        if q.context is not None:
            q.context.begin(q.versions, target)
        delta = q.pipeline.apply(changes)
        q.versions = target
        delta = SketchDelta(delta.added, delta.removed, time.perf_counter() - t0)
        q.history.append(delta)
        return delta

    def maintain_all(self) -> dict[str, SketchDelta]:
        return {name: self.maintain(name) for name in self.queries}

    def reference_sketch(self, name: str) -> Sketch:
        """Recapture in-process (reference evaluator) at the query's versions."""
        q = self.query(name)
        tables = {t: self.store.read(t, v) for t, v in q.versions.items()}
        return reference_capture(q.plan, tables, q.partitions).sketch


def _check_mode(mode: str) -> str:
    if mode not in BOOTSTRAP_MODES:
        raise BootstrapModeError(f"unknown bootstrap mode {mode!r}; use one of "
                                 f"{', '.join(BOOTSTRAP_MODES)}")
    return mode


def _source_session(source: Any) -> Any:
    """The Spark session a delta source works with, if any (``AutoDeltaSource`` holds a
    Spark delta source, which holds the session)."""
    found = getattr(source, "spark", None)
    if found is not None and not hasattr(found, "sql"):
        found = getattr(found, "spark", None)
    return found if found is not None and hasattr(found, "sql") else None


def _exact_on_spark(node: PlanNode) -> bool:
    """Whether Spark computes ``node``'s values exactly as the engine does: everything but
    AVG and sums of doubles, which Spark rounds on its own."""
    import pyarrow.types as pat

    for n in node.walk():
        if isinstance(n, Aggregate):
            types = {f.name: f.dtype for f in n.input.schema}
            for a in n.aggregates:
                if a.func == "avg" or (a.func == "sum" and pat.is_floating(types[a.arg])):
                    return False
    return True


def _row_bound(node: PlanNode, rows: Mapping[str, int]) -> int:
    """An upper bound of ``node``'s row count from its tables' row counts."""
    if isinstance(node, Scan):
        return rows[node.table]
    if isinstance(node, Join):
        return _row_bound(node.left, rows) * _row_bound(node.right, rows)
    if isinstance(node, TopK):
        return min(int(node.k), _row_bound(node.input, rows))
    if isinstance(node, (Select, Project, Aggregate, Distinct)):
        return _row_bound(node.input, rows)
    raise TypeError(f"no row bound for {type(node).__name__}")


class AutoDeltaSource:
    """Chooses the path per pull by the size of the change files: small deltas through
    delta-rs in-process (no JVM round trip), large ones through Spark."""

    def __init__(self, store: Any, spark_source: DeltaSource | None = None,
                 direct_max_bytes: int = 16 << 20):
        self.store = store
        self.direct = DirectDeltaSource(store)
        self.spark = spark_source
        self.direct_max_bytes = direct_max_bytes
        self.last_path = "direct"

    def changes(self, table: str, from_version: int, to_version: int,
                spec: ScanSpec | None = None) -> TableDelta:
        import os

        if self.spark is not None:
            files = self.store.change_files(table, from_version, to_version)
            size = sum(os.path.getsize(f.path) for f in files if os.path.exists(f.path))
            if size > self.direct_max_bytes:
                self.last_path = "spark"
                return self.spark.changes(table, from_version, to_version, spec)
        self.last_path = "direct"
        return self.direct.changes(table, from_version, to_version, spec)

    def snapshot(self, table: str, version: int, spec: ScanSpec | None = None) -> TableDelta:
        reader = getattr(self.spark, "snapshot", None)
        if reader is not None:
            return reader(table, version, spec)
        return TableDelta.inserts(self.store.read(table, version))
