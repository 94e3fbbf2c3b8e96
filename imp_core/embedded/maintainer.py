"""Sketches over versioned (Delta) tables, maintained in this process from pulled deltas.

The ``Maintainer`` is the embedded front of the shared path: queries are prepared by
``imp_core.query.prepare.prepare_query`` and run by a ``imp_core.query.driver.QueryDriver``
(placement of join sides, the bootstrap choice, the first-state feed and every step),
exactly as the service's query actors run theirs, and deltas are read by the one
delta-source policy (``imp_core.storage.ChangeReader``).

A ``MaintainedQuery`` records, per input table, the table version its state reflects.
Invariant: its pipeline's state is exactly the query's annotated state at those
versions; ``maintain`` pulls the change feed from each recorded version up to the
table's current one, applies all tables' changes as one batch, and only then advances
the recorded versions (a failure leaves the query at its old versions).

The handle ``register`` returns is the registry's own object: a re-partition swaps the
query's ``QueryState`` into it in place, so a handle held across re-partitions answers
what ``query(name)`` answers; a dropped query's handle raises ``DroppedQueryError``.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Mapping

import pyarrow as pa

from imp_core.engine.operators.base import TableDelta
from imp_core.engine.pipeline import EngineOptions, IncrementalQuery, SketchDelta
from imp_core.engine.probed_side import VersionContext
from imp_core.errors import (
    DroppedQueryError,
    QueryExistsError,
    UnknownQueryError,
    UnknownTableError,
)
from imp_core.oracle.reference import reference_capture
from imp_core.plan.nodes import QueryPlan
from imp_core.plan.strict import is_strict
from imp_core.query.data_layer import DataLayer, JoinPlacement
from imp_core.query.driver import (
    QueryDriver,
    bootstrap_mode,
    check_mode,
    first_changes,
    place_sides,
)
from imp_core.query.prepare import DEFAULT_FRAGMENTS, StoreTables, prepare_query
from imp_core.sketch.adaptive import OVERFLOW, FragmentCounts, rebalanced
from imp_core.sketch.partition import PartitionSet, PartitionSpec, RangePartition
from imp_core.sketch.sketch import Sketch
from imp_core.storage.change_reader import ChangeReader, DeltaSource
from imp_core.storage.row_groups import StoreLayout
from imp_core.storage.scan_spec import ScanSpec, restrict_delta

if TYPE_CHECKING:  # pragma: no cover
    from imp_core.spark.bootstrap import BootstrapRun


@dataclass
class QueryState:
    """A registered query's state on one partitioning: what a re-partition replaces whole.

    Invariant: ``driver``'s pipeline is built on ``partitions`` and its state is exact for
    ``driver.versions``; ``counts`` (adaptive ranges) count the rows per fragment of
    ``partitions`` at those versions.
    """

    plan: QueryPlan
    partitions: PartitionSet
    driver: QueryDriver  # the pipeline, its placement, and the versions it is exact for
    scan_specs: dict[str, ScanSpec] = field(default_factory=dict)
    bootstrap: str = "engine"  # how the state was first built: "spark" or "engine"
    bootstrap_run: BootstrapRun | None = None  # what the Spark bootstrap did
    # rows per fragment of each sketched table, kept from the changes (adaptive ranges)
    counts: dict[str, FragmentCounts] = field(default_factory=dict)


class MaintainedQuery:
    """The handle of a registered query: the one object ``Maintainer.register`` returns
    and ``Maintainer.query(name)`` gives for as long as the query is registered.

    Invariants:
    - a handle never goes stale: a re-partition (adaptive ranges) builds the new
      ``QueryState`` beside the old one and then swaps it into this very object
      (``_adopt``), so every reference a caller holds answers what ``query(name)``
      answers (sketch, versions, ranges, result);
    - once the query is dropped (``Maintainer.drop``) every read but ``name`` raises
      ``DroppedQueryError``, never an answer from the state it had;
    - ``history`` and ``repartitions`` belong to the query, not to one partitioning:
      they carry across re-partitions.
    """

    def __init__(self, name: str, state: QueryState, advice: Any = None, force: bool = False):
        self.name = name
        self._state: QueryState | None = state
        self._advice = advice  # the attributes considered and the choice (``advice.attributes``)
        self._force = force  # registered with its safety check overridden
        self._history: list[SketchDelta] = []
        # each re-partition: {"versions", "table", "reason", "fragments"}
        self._repartitions: list[dict[str, Any]] = []

    def __repr__(self) -> str:
        status = "dropped" if self._state is None else f"versions={self.versions}"
        return f"MaintainedQuery({self.name!r}, {status})"

    # -- the handle's life ---------------------------------------------------------------
    @property
    def dropped(self) -> bool:
        return self._state is None

    @property
    def state(self) -> QueryState:
        """The query's current state; ``DroppedQueryError`` once it is dropped."""
        return self._alive()

    def _alive(self) -> QueryState:
        if self._state is None:
            raise DroppedQueryError(f"query {self.name!r} was dropped: this handle no "
                                    "longer answers (register it again for a new one)")
        return self._state

    def _adopt(self, state: QueryState) -> None:
        """Swap in the state built on new partitions (the caller built it completely
        first, so a failed re-partition leaves the old state in place)."""
        self._alive()  # a dropped query is not brought back
        self._state = state

    def _retire(self) -> None:
        self._state = None  # the pipeline's memory goes with it

    # -- the state, through the handle --------------------------------------------------
    @property
    def plan(self) -> QueryPlan:
        return self.state.plan

    @property
    def partitions(self) -> PartitionSet:
        return self.state.partitions

    @property
    def driver(self) -> QueryDriver:
        return self.state.driver

    @property
    def scan_specs(self) -> dict[str, ScanSpec]:
        return self.state.scan_specs

    @property
    def bootstrap(self) -> str:
        return self.state.bootstrap

    @property
    def bootstrap_run(self) -> BootstrapRun | None:
        return self.state.bootstrap_run

    @property
    def counts(self) -> dict[str, FragmentCounts]:
        return self.state.counts

    @property
    def advice(self) -> Any:
        self._alive()
        return self._advice

    @property
    def force(self) -> bool:
        self._alive()
        return self._force

    @property
    def history(self) -> list[SketchDelta]:
        self._alive()
        return self._history

    @property
    def repartitions(self) -> list[dict[str, Any]]:
        self._alive()
        return self._repartitions

    @property
    def pipeline(self) -> IncrementalQuery:
        return self.driver.pipeline

    @property
    def versions(self) -> dict[str, int]:
        return self.driver.versions

    @property
    def context(self) -> VersionContext:
        return self.driver.context

    @property
    def placement(self) -> JoinPlacement:
        """The join sides probed in the data layer."""
        return self.driver.placement

    @property
    def sketch(self) -> Sketch:
        return self.pipeline.sketch()

    def explain(self) -> dict[str, Any]:
        """``Advice.to_json`` of the registration with the current sketch's size and
        coverage line (``imp_core.advice.attributes.explanation``)."""
        from imp_core.advice.attributes import explanation

        return explanation(self.advice, self.plan, self.sketch)

    def bounds(self, table: str) -> list:
        """The split points of ``table``'s range partition (the current one: after a
        re-partition, the new ranges)."""
        found = self.partitions.for_table(table)
        if found is None:
            raise UnknownTableError(f"{self.name} has no partition on table {table!r}")
        return list(found[0].bounds)


class Maintainer:
    """Registered queries over a versioned table store.

    With ``join_memory_rows`` set, each equi-join input is held in memory only when its
    filtered, projected row count is at most that many rows; larger inputs are probed in
    the data layer (Spark), decided per join at registration. None (the default) keeps
    every join input in memory and never starts Spark for joins.

    ``source``: where deltas come from; by default the one delta-source policy
    (``ChangeReader``: change files in-process, large ranges through Spark when this
    maintainer works with Spark).

    ``bootstrap`` says how a registered query's initial state is built:

    - ``"spark"``: Spark computes every stateful operator's state on the table versions
      (``imp_core.spark.bootstrap``) and ships it as Arrow;
    - ``"engine"``: the tables (filtered, projected and annotated by the delta source when
      it reads snapshots) are fed to the pipeline as one insert batch;
    - ``"auto"`` (the default): ``"spark"`` when this maintainer works with Spark anyway
      (a Spark session or a Spark delta source given, or join sides served by Spark),
      else ``"engine"``, so that a maintainer without Spark never starts it.

    With bounded min/max or top-k buffers (``EngineOptions``), an exhausted buffer is
    refilled from the operator's input at the batch's target versions (``DataLayer``).

    ``adaptive`` (the default): the rows per fragment of every sketched table are kept
    from the change feed, and after a batch that leaves a fragment over- or underflowing
    (beyond ``overflow`` times the mean, below a quarter of it;
    ``imp_core.sketch.adaptive``) the query gets new equi-depth ranges on that table,
    its state and sketch captured anew on them at the batch's versions (exact); the old
    sketch is the query's until the new one is ready.
    """

    def __init__(self, store: Any, source: DeltaSource | None = None,
                 options: EngineOptions = EngineOptions(),
                 join_memory_rows: int | None = None, spark: Any = None,
                 bootstrap: str = "auto", adaptive: bool = True,
                 overflow: float = OVERFLOW):
        check_mode(bootstrap)
        self.adaptive = adaptive
        self.overflow = overflow  # a fragment beyond this many times the mean is split
        self.store = store
        self._spark = spark
        self.options = options
        self.join_memory_rows = join_memory_rows
        self.bootstrap = bootstrap
        self.source = source if source is not None else \
            ChangeReader(store, self._spark_delta_source if spark is not None else None)
        self.data = DataLayer(store, self.spark if self.uses_spark() else None)
        self.queries: dict[str, MaintainedQuery] = {}

    def _spark_delta_source(self) -> DeltaSource:
        from imp_core.spark.deltas import SparkDeltaSource

        return SparkDeltaSource(self.store, self.spark())

    def catalog(self) -> dict[str, pa.Schema]:
        return {t: self.store.schema(t) for t in self.store.tables()}

    def register(self, name: str, sql: str,
                 partitions: Mapping[str, PartitionSpec] | str | None = None,
                 force: bool = False, fragments: int = DEFAULT_FRAGMENTS,
                 bootstrap: str | None = None) -> MaintainedQuery:
        """Prepare ``sql`` (plan, partitions on the current table versions, safety) and
        bootstrap its state (``bootstrap`` overrides the maintainer's mode for this
        query). The handle returned stays the query's for its whole life (re-partitions
        included); ``QueryExistsError`` for a name already registered (drop it first)."""
        if name in self.queries:
            raise QueryExistsError(f"a query named {name!r} is already registered; drop "
                                   "it first")
        mode = self._mode(bootstrap)
        prepared = prepare_query(sql, StoreTables(self.store), partitions, fragments, force,
                                 capture=self._capture(mode), layout=StoreLayout(self.store))
        if is_strict(prepared.plan.root):
            mode = "engine"  # only the engine counts the rows that raise (plan.ansi)
        q = MaintainedQuery(name, self._start(prepared, mode), prepared.advice, force)
        self.queries[name] = q
        return q

    def drop(self, name: str) -> None:
        """Forget the query: its handles (every reference to it) raise
        ``DroppedQueryError`` from now on, and its state is released."""
        q = self.query(name)
        del self.queries[name]
        q._retire()

    def _start(self, prepared: Any, mode: str) -> QueryState:
        """The prepared query's pipeline wired and bootstrapped at its versions."""
        versions = dict(prepared.versions)
        placement = place_sides(prepared.plan, prepared.partitions, versions, self.data,
                                memory_rows=self.join_memory_rows)
        driver = QueryDriver.start(prepared.plan, prepared.partitions, self.options, self.data,
                                   placement)
        scans = dict(prepared.scan_specs)
        run = None
        if mode == "spark":
            run = driver.bootstrap_on_spark(self.spark(), self.store, versions)
        else:
            snapshot = getattr(self.source, "snapshot", None)
            driver.step(None, versions, first_changes(self.store, versions, scans, snapshot))
        state = QueryState(prepared.plan, prepared.partitions, driver, scans,
                           bootstrap=mode, bootstrap_run=run)
        if self.adaptive:
            state.counts = {p.table: FragmentCounts.of(p, self._column(p, versions[p.table]))
                            for p in state.partitions.partitions}
        return state

    def _column(self, part: RangePartition, version: int) -> pa.ChunkedArray:
        return self.store.read(part.table, version, columns=[part.column]).column(0)

    # -- adaptive ranges ----------------------------------------------------------------
    def rebalance(self, name: str) -> list[dict[str, Any]]:
        """New ranges for each of the query's sketched tables whose fragments over- or
        underflow (``imp_core.sketch.adaptive``), with the query's state and sketch built
        anew on them at its versions and swapped into the query's handle in place (every
        reference to it follows; a failure leaves the old state); returns what was
        re-partitioned."""
        q = self.query(name)
        partitioning: dict[str, Any] = {f"{p.table}.{p.column}": p
                                        for p in q.partitions.partitions}
        done = []
        for table, counts in q.counts.items():
            reason = counts.skew(self.overflow)
            if reason is None:
                continue
            part = counts.partition
            values = self._column(part, q.versions[table])
            new = rebalanced(part, values)
            if not counts.worth(FragmentCounts.of(new, values)):
                continue
            partitioning[f"{table}.{part.column}"] = new
            done.append({"versions": dict(q.versions), "table": table, "reason": reason,
                         "fragments": new.size})
        if not done:
            return []
        prepared = prepare_query(q.plan.sql, StoreTables(self.store), partitioning,
                                 force=q.force)
        fresh = self._start(prepared, q.bootstrap)
        for table, counts in q.counts.items():
            if table not in {d["table"] for d in done}:
                fresh.counts[table].settled_at = counts.settled_at
            else:
                fresh.counts[table].rebalances = counts.rebalances + 1
        # the old state served until here; the handle every caller holds moves with it
        q._adopt(fresh)
        q.repartitions.extend(done)
        return done

    def _capture(self, mode: str) -> Any:
        """The attribute advisor's capture: on Spark where this maintainer uses it, else
        the reference evaluator over the tables read at the versions."""
        def capture(plan: Any, pset: PartitionSet, versions: Mapping[str, int]) -> Sketch:
            if mode == "spark":
                from imp_core.spark.run import capture as spark_capture
                from imp_core.spark.tables import snapshot_frame

                spark = self.spark()
                for t, v in versions.items():
                    snapshot_frame(spark, self.store, t, v)[0].createOrReplaceTempView(t)
                return spark_capture(spark, plan, pset)
            tables = {t: self.store.read(t, v) for t, v in versions.items()}
            return reference_capture(plan, tables, pset).sketch
        return capture

    # -- Spark ----------------------------------------------------------------------------
    def _mode(self, requested: str | None) -> str:
        return bootstrap_mode(requested or self.bootstrap, spark_at_hand=self.uses_spark())

    def uses_spark(self) -> bool:
        """Whether this maintainer works with Spark anyway (so using it costs no start)."""
        return (self._spark is not None or _source_session(self.source) is not None
                or self.join_memory_rows is not None)

    def spark(self) -> Any:
        if self._spark is None:
            self._spark = _source_session(self.source)
        if self._spark is None:
            from imp_core.spark.session import get_spark

            self._spark = get_spark()
        return self._spark

    # -- maintenance ----------------------------------------------------------------------
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
        changes = {t: self._changes(q, t, v) for t, v in target.items() if v > q.versions[t]}
        if not changes:
            return SketchDelta(type(q.sketch.fragments)(), type(q.sketch.fragments)(), 0.0)
        delta = q.driver.step(q.versions, target, changes)
        delta = SketchDelta(delta.added, delta.removed, time.perf_counter() - t0)
        q.history.append(delta)
        if q.counts:
            self.rebalance(name)
        return delta

    def _changes(self, q: MaintainedQuery, table: str, version: int) -> TableDelta:
        """The changes of ``table`` up to ``version`` cut to the query's scan spec; a
        sketched table's are first counted per fragment whole (adaptive ranges)."""
        counts = q.counts.get(table)
        if counts is None:
            return self.source.changes(table, q.versions[table], version,
                                       q.scan_specs.get(table))
        whole = self.source.changes(table, q.versions[table], version, None)
        counts.apply(whole.rows.column(counts.partition.column), whole.weights)
        return restrict_delta(whole, q.scan_specs.get(table))

    def maintain_all(self) -> dict[str, SketchDelta]:
        return {name: self.maintain(name) for name in self.queries}

    def reference_sketch(self, name: str) -> Sketch:
        """Recapture in-process (reference evaluator) at the query's versions."""
        q = self.query(name)
        tables = {t: self.store.read(t, v) for t, v in q.versions.items()}
        return reference_capture(q.plan, tables, q.partitions).sketch


def _source_session(source: Any) -> Any:
    """The Spark session a delta source works with, if any."""
    found = getattr(source, "spark", None)
    return found if found is not None and hasattr(found, "sql") else None
