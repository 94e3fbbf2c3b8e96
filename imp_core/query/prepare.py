"""The one way a query is prepared for maintenance: SQL → plan → partitions → safety.

``prepare_query`` is the register path shared by the embedded ``Engine``
(``imp_core.embedded.api``), the versioned-store ``Maintainer``
(``imp_core.embedded.maintainer``) and the service's coordinator (``imp_actors``): it
plans the SQL over the tables' schemas, takes the partitions given or the SQL's
``-- sketch: table.column`` header, estimates the memory the plan's operators would need
from the tables' statistics and refuses a plan beyond the registration memory budget
(``imp_core.estimate.memory``), builds the range partitions on the tables' current
contents, checks every sketch attribute's safety (refusing unsafe ones unless forced) and
derives the per-table scan specs. The pipeline that maintains the prepared query is run
by ``imp_core.query.driver``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Protocol

import pyarrow as pa
import pyarrow.compute as pc

from imp_core.errors import PartitionError
from imp_core.estimate.memory import (
    AUTO,
    SIDE_INDEX_BYTES,
    ColumnStats,
    PlanEstimate,
    TableStats,
    check_memory,
    column_stats,
    estimate_plan,
    memory_budget,
)
from imp_core.plan.nodes import Aggregate, PlanNode, QueryPlan, Scan
from imp_core.query.limits import check_fragments, requested_fragments
from imp_core.query.sketch_columns import LEARNED
from imp_core.sketch.partition import (
    PartitionSet,
    PartitionSpec,
    build_partition_set,
)
from imp_core.storage.scan_spec import ScanSpec, scan_specs

DEFAULT_FRAGMENTS = 64
# partitions="auto": the attribute advisor (``imp_core.advice.attributes``) chooses them
AUTO_PARTITIONS = "auto"

# (plan, partitions, table versions) -> the accurate sketch (a capture on Spark, or the
# reference evaluator over in-memory tables)
Capture = Callable[[QueryPlan, PartitionSet, Mapping[str, int]], Any]
# (table, version, column) -> ``imp_core.storage.row_groups.RowGroups`` (None: no files)
LayoutOf = Callable[[str, int, str], Any]


class TableSource(Protocol):
    """What preparing a query reads of the tables: schemas, one column's current values
    (equi-depth partitions), declared value domains, and the current versions.

    A source may also offer ``statistics(table) -> imp_core.estimate.memory.TableStats`` (row
    count, per-column min/max or distinct counts, read cheaply: ``StoreTables`` reads
    the Delta log); without it the row count and the statistics of the integer-like
    columns the plan reads are taken from ``column`` (cheap for in-memory tables such as
    the ``Engine``'s).
    """

    def catalog(self) -> dict[str, pa.Schema]: ...

    def column(self, table: str, column: str) -> pa.Array | pa.ChunkedArray: ...

    def domains(self, table: str) -> Mapping[str, tuple[Any, Any]]: ...

    def versions(self, tables: list[str]) -> dict[str, int]: ...


@dataclass(frozen=True)
class PreparedQuery:
    """A planned, partitioned query whose sketch attributes passed the safety check."""

    sql: str
    plan: QueryPlan
    partitions: PartitionSet
    verdicts: tuple[Any, ...]
    scan_specs: Mapping[str, ScanSpec] = field(default_factory=dict)
    # the table versions the partitions were built on ({} for unversioned tables)
    versions: Mapping[str, int] = field(default_factory=dict)
    # the memory estimate the registration guard checked (None: no statistics taken)
    estimate: PlanEstimate | None = None
    # the attributes considered and why these were chosen (``imp_core.advice.attributes.Advice``)
    advice: Any = None

    @property
    def tables(self) -> tuple[str, ...]:
        return tuple(sorted(self.plan.root.tables()))


def partition_specs(sql: str, partitions: Mapping[str, PartitionSpec] | str | None,
                    fragments: int) -> Mapping[str, PartitionSpec] | str:
    """The partitions given, or ``fragments`` ranges per attribute of the SQL's
    ``-- sketch: table.column`` header, or ``AUTO_PARTITIONS`` (asked for, or neither
    given): the advisor chooses."""
    from imp_core.sql import parse_sketch_header

    if isinstance(partitions, str):
        if partitions.strip().lower() != AUTO_PARTITIONS:
            raise PartitionError(f"partitions {partitions!r}: give 'auto' or a mapping of "
                                 "'table.column' to a fragment count or split points")
        return AUTO_PARTITIONS
    if partitions is not None:
        return partitions
    header = parse_sketch_header(sql)
    if not header:
        return AUTO_PARTITIONS
    return {f"{t}.{c}": fragments for t, c in header}


def prepare_query(sql: str, source: TableSource,
                  partitions: Mapping[str, PartitionSpec] | str | None = None,
                  fragments: int = DEFAULT_FRAGMENTS, force: bool = False,
                  pushdown: bool = True, memory_budget_bytes: int | None | str = AUTO,
                  join_state_budget_bytes: int | None = None,
                  clustered: Callable[[str, int, str], bool] | None = None,
                  not_null: Callable[[str, str], bool] | None = None,
                  indexed: Callable[[str, str], bool] | None = None,
                  capture: Capture | None = None, layout: LayoutOf | None = None,
                  progress: Callable[[str], None] | None = None,
                  ansi: bool = False) -> PreparedQuery:
    """Plan, check and partition ``sql`` over ``source``; raises the domain error of the
    first problem (bad SQL, unknown table or column, bad partition, a plan too large for
    memory, unsafe attribute).

    ``partitions`` "auto" (or none given and no SQL header): the attribute advisor
    (``imp_core.advice.attributes.advise``) chooses them, capturing candidates with ``capture``
    and estimating their reads from ``layout``; the choice is checked as any other.

    ``ansi``: the session's ANSI mode (Spark's ``spark.sql.ansi.enabled``), which a
    ``SET`` statement at the head of ``sql`` overrides.
    ``pushdown=False`` keeps every selection above its scan (the scan specs carry no
    predicate): deltas then reach the pipeline unfiltered.
    ``memory_budget_bytes``: the most memory one operator of the plan may need (its
    state and largest batch, see ``imp_core.estimate.memory``), a byte count, None (no check)
    or ``"auto"``: ``IMP_REGISTRATION_MEMORY_BYTES``, else half the memory available
    now; a plan beyond it raises ``PlanTooLargeError`` before partitions are built.
    ``join_state_budget_bytes``: the caller will probe the largest equi-join sides in
    the data layer beyond this many bytes (``imp_core.query.data_layer.place_join_sides``), so
    the estimate counts no state for those sides (None: every side in memory).
    ``clustered(table, version, column)``: whether a lookup by that column reads about
    one row group (``TableFiles.clustered``), so a side busy tables probe may still be
    probed (None: no side is taken as clustered); with ``not_null(table, column)``
    (whether a column never holds NULL) an aggregation's groups may be held by the data
    layer too (``imp_core.query.data_layer.groups_lookup``), as may those whose lookups
    a shared index serves (``indexed(table, column)``).
    """
    from imp_core.safety import declared_not_null, require_safe
    from imp_core.sql import plan_sql
    from imp_core.sql.session import Session

    budget = memory_budget(memory_budget_bytes)  # a bad setting is refused first
    catalog = source.catalog()
    plan = plan_sql(sql, catalog, Session(ansi=ansi))
    wanted = partition_specs(sql, partitions, fragments)
    tables = sorted(plan.root.tables())
    auto = wanted == AUTO_PARTITIONS
    if auto:  # the memory check assumes every table sketched: the advisor may do so
        wanted = {f"{t}.*": fragments for t in tables}
    check_fragments(wanted)  # before any value is read or any range chosen
    versions = source.versions(tables)
    reads = _ColumnReads(source, versions)
    estimate = None
    if budget is not None:
        sketch_columns = reads.prefetch(wanted, catalog, tables)
        estimate = estimate_memory(
            plan.root, table_statistics(source, plan.root, sketch_columns), wanted,
            fragments, join_state_budget_bytes,
            None if clustered is None else lambda t, c: clustered(t, versions[t], c),
            not_null, indexed)
        check_memory(estimate, budget)
    domains = {t: dict(source.domains(t)) for t in tables}
    advice = None
    if auto:
        reads.clear()
        advice = _advise(plan, source, catalog, tables, versions, domains, fragments,
                         capture, layout, progress)
        wanted = advice.partition_specs()
    pset = reads.partitions(wanted, lambda t: _schema(catalog, t))
    reads.clear()
    verdicts = require_safe(plan, [(p.table, p.column) for p in pset.partitions],
                            domains=domains, force=force,
                            table_columns={t: s.names for t, s in catalog.items()},
                            not_null=declared_not_null(catalog))
    if advice is None:
        from imp_core.advice.attributes import given_advice

        advice = given_advice(verdicts, pset)
    scans = scan_specs(plan.root, pset)
    if not pushdown:
        scans = {t: ScanSpec(s.table, s.columns, None, s.partition) for t, s in scans.items()}
    return PreparedQuery(sql, plan, pset, tuple(verdicts), scans, versions, estimate,
                         advice)


def _advise(plan: QueryPlan, source: TableSource, catalog: Mapping[str, pa.Schema],
            tables: list[str], versions: Mapping[str, int],
            domains: Mapping[str, Mapping[str, Any]], fragments: int,
            capture: Capture | None, layout: LayoutOf | None,
            progress: Callable[[str], None] | None) -> Any:
    """``imp_core.advice.attributes.advise`` over ``source`` at ``versions``."""
    from imp_core.advice.attributes import advise

    if capture is None:
        raise PartitionError("no sketch attribute given (no partitions, no "
                             "'-- sketch: table.column' header) and this front cannot "
                             "capture sketches to choose one: name the attribute")
    clustered_of = getattr(source, "cluster_columns", None)
    clustered = {t: tuple(clustered_of(t)) for t in tables} if callable(clustered_of) \
        else {}
    groups = None
    if layout is not None:
        def groups(table: str, column: str) -> Any:
            return layout(table, versions[table], column) if table in versions else None
    return advise(plan, catalog, source.column, fragments,
                  lambda pset: capture(plan, pset, versions), groups, domains, clustered,
                  progress=progress)


def estimate_memory(root: PlanNode, stats: Mapping[str, TableStats],
                    specs: Mapping[str, PartitionSpec] | None = None,
                    fragments: int = DEFAULT_FRAGMENTS,
                    join_state_budget_bytes: int | None = None,
                    clustered: Callable[[str, str], bool] | None = None,
                    not_null: Callable[[str, str], bool] | None = None,
                    indexed: Callable[[str, str], bool] | None = None) -> PlanEstimate:
    """``imp_core.estimate.memory.estimate_plan`` of ``root`` for the partitions ``specs``
    ("table.column" to a spec), with the equi-join sides that ``place_join_sides``
    would probe under ``join_state_budget_bytes`` keeping no state."""
    specs = specs or {}
    sketched = {key.split(".", 1)[0].lower() for key in specs}
    sizes = [requested_fragments(spec) for spec in specs.values()]
    per_table = max(sizes, default=fragments)
    est = estimate_plan(root, stats, sketched, fragments=per_table)
    if join_state_budget_bytes is None:
        return est
    from imp_core.query.data_layer import place_join_sides

    sides: dict[int, float] = {}
    for op in est.operators:
        # a join input: its rows with their key index; an aggregation: its groups' state
        sides[id(op.node)] = op.state_bytes if isinstance(op.node, Aggregate) else \
            op.rows * (op.row_bytes + SIDE_INDEX_BYTES)
    # a table's rows stand for its rate of change (nothing is measured at registration)
    rates = {t: float(s.rows) for t, s in stats.items()}
    probed = place_join_sides(root, lambda n: int(sides.get(id(n), 0)),
                              join_state_budget_bytes, rates, clustered, not_null, indexed)
    return estimate_plan(root, stats, sketched, probed, fragments=per_table)


def table_statistics(source: TableSource, root: PlanNode,
                     columns_read: Mapping[tuple[str, str], Any] | None = None,
                     ) -> dict[str, TableStats]:
    """Each table ``root`` scans: ``source.statistics`` when the source has it, else the
    row count and the statistics of the integer-like columns the plan reads, from
    ``source.column`` (``column_stats``); the columns already read (``columns_read``,
    the sketch columns: ``(table, column)`` to values) add their exact statistics;
    declared domains fill the bounds statistics lack."""
    columns_read = columns_read or {}
    stats_of = getattr(source, "statistics", None)
    scanned: dict[str, set[str]] = {}
    for node in root.walk():
        if isinstance(node, Scan):
            scanned.setdefault(node.table, set()).update(node.source_columns)
    out: dict[str, TableStats] = {}
    for table, names in sorted(scanned.items()):
        have = {c: v for (t, c), v in columns_read.items() if t == table}
        if callable(stats_of):
            stats = stats_of(table)
        else:
            stats = _column_statistics(source, table, sorted(names), have)
        cols = dict(stats.columns)
        cols.update({name: values if isinstance(values, ColumnStats) else column_stats(values)
                     for name, values in have.items()})
        out[table] = TableStats(stats.rows, cols).with_domains(dict(source.domains(table)))
    return out


def _column_statistics(source: TableSource, table: str, names: list[str],
                       have: Mapping[str, Any]) -> TableStats:
    """A table's statistics from its columns (for in-memory sources): the row count and
    ``column_stats`` of the integer-like columns in ``names``."""
    schema = _schema(source.catalog(), table)
    cols: dict[str, ColumnStats] = {}
    read = [v for v in have.values() if not isinstance(v, ColumnStats)]
    rows = len(read[0]) if read else None
    for name in names:
        if name in have or name not in schema.names:
            continue
        t = schema.field(name).type
        if pa.types.is_integer(t) or pa.types.is_date(t):
            values = source.column(table, name)
            rows = len(values)
            cols[name] = column_stats(values)
    if rows is None:
        rows = len(source.column(table, schema.names[0]))
    return TableStats(rows, cols)


class _ColumnReads:
    """The columns the partition build reads (equi-depth partitions), read once: read
    ahead for the memory estimate's statistics, then handed to the build. What a
    store's column at a version gave before (``sketch_columns.LEARNED``: its statistics
    and partitions) is taken from there instead of read again."""

    def __init__(self, source: TableSource, versions: Mapping[str, int]):
        self.source = source
        self.versions = versions
        self.kept: dict[tuple[str, str], Any] = {}
        self._keys: dict[tuple[str, str], Any] = {}

    def key(self, table: str, column: str) -> Any:
        """The memo's key of ``table.column`` at its version (None: the source has none);
        asked of the source once."""
        if (table, column) not in self._keys:
            key_of = getattr(self.source, "column_key", None)
            self._keys[(table, column)] = None \
                if not callable(key_of) or table not in self.versions \
                else key_of(table, column, self.versions[table])
        return self._keys[(table, column)]

    def prefetch(self, specs: Mapping[str, PartitionSpec], catalog: Mapping[str, pa.Schema],
                 tables: list[str]) -> dict[tuple[str, str], Any]:
        """The columns of ``specs`` the build will read, for ``tables`` only: their values,
        or their statistics where the memo has them (the build then reads no value)."""
        out: dict[tuple[str, str], Any] = {}
        for attr, spec in specs.items():
            table, _, column = attr.lower().partition(".")
            schema = catalog.get(table)
            if (isinstance(spec, int) and not isinstance(spec, bool) and table in tables
                    and schema is not None and column in schema.names):
                key = self.key(table, column)
                known = LEARNED.stats(key)
                if known is not None and LEARNED.partition(key, spec) is not None:
                    out[(table, column)] = known
                    continue
                values = self.kept[(table, column)] = self.source.column(table, column)
                if key is not None:
                    out[(table, column)] = stats = column_stats(values)
                    LEARNED.keep_stats(key, stats)
                else:
                    out[(table, column)] = values
        return out

    def column(self, table: str, column: str) -> Any:
        found = self.kept.get((table, column))
        return found if found is not None else self.source.column(table, column)

    def partitions(self, specs: Mapping[str, PartitionSpec],
                   schema_of: Callable[[str], pa.Schema]) -> PartitionSet:
        """``build_partition_set`` of ``specs``, equi-depth partitions the memo holds
        taken from it, those built kept in it."""
        given: dict[str, PartitionSpec] = {}
        built: dict[tuple[str, str], tuple[Any, int]] = {}
        for attr, spec in specs.items():
            table, _, column = attr.lower().partition(".")
            if isinstance(spec, int) and not isinstance(spec, bool):
                key = self.key(table, column)
                known = LEARNED.partition(key, spec)
                if known is not None:
                    given[attr] = known
                    continue
                built[(table, column)] = (key, spec)
            given[attr] = spec
        pset = build_partition_set(given, schema_of, self.column)
        for part in pset.partitions:
            if (part.table, part.column) in built:
                key, fragments = built[(part.table, part.column)]
                LEARNED.keep_partition(key, fragments, part)
        return pset

    def clear(self) -> None:
        self.kept.clear()


def _schema(catalog: Mapping[str, pa.Schema], table: str) -> pa.Schema:
    from imp_core.errors import UnknownTableError

    try:
        return catalog[table]
    except KeyError:
        raise UnknownTableError(f"unknown table {table!r}; known: "
                                f"{', '.join(sorted(catalog)) or 'none'}") from None


class StoreTables:
    """A versioned table store (``imp_core.storage.DeltaStore``) as a ``TableSource``:
    schemas, domains and the latest versions from the store (or ``latest``, e.g. the
    service's version probe), column values read at those versions."""

    def __init__(self, store: Any, latest: Any = None,
                 catalog: Mapping[str, pa.Schema] | None = None):
        self.store = store
        self._latest = latest or store.version
        self._catalog = dict(catalog) if catalog is not None else None
        self._versions: dict[str, int] = {}

    def catalog(self) -> dict[str, pa.Schema]:
        if self._catalog is None:
            self._catalog = {t: self.store.schema(t) for t in self.store.tables()}
        return dict(self._catalog)

    def versions(self, tables: list[str]) -> dict[str, int]:
        for t in tables:
            self._versions.setdefault(t, self._latest(t))
        return {t: self._versions[t] for t in tables}

    def column(self, table: str, column: str) -> pa.ChunkedArray:
        version = self.versions([table])[table]
        return self.store.read(table, version, columns=[column]).column(0)

    def domains(self, table: str) -> Mapping[str, tuple[Any, Any]]:
        return dict(self.store.entry(table).domains or {})

    def cluster_columns(self, table: str) -> tuple[str, ...]:
        """The columns the table is kept in order on (its cluster columns, else its
        first key column): candidates a sketch may skip by."""
        entry = self.store.entry(table)
        return tuple(entry.sketch_columns) or tuple(entry.key or ())[:1]

    def column_key(self, table: str, column: str, version: int) -> tuple[str, ...]:
        """What names ``table.column`` at ``version`` in this store for good: the store,
        the Delta table's id (a table created anew has another), the version."""
        table_id, _ = self.store.snapshot_files(table, version)
        return (str(getattr(self.store, "root", id(self.store))), table_id, str(version),
                column)

    def statistics(self, table: str) -> TableStats:
        """Row count and per-column min/max at the recorded version, from the Delta
        log's file statistics (the Parquet footers count the rows of files without)."""
        from imp_core.storage.snapshots import open_delta

        version = self.versions([table])[table]
        delta = open_delta(self.store.entry(table), version)
        actions = pa.table(delta.get_add_actions(flatten=True))
        names = set(actions.column_names)
        counts = actions.column("num_records") if "num_records" in names else None
        if counts is not None and counts.null_count == 0:
            rows = int(pc.sum(counts).as_py() or 0)
        else:
            import pyarrow.dataset as ds

            files = delta.file_uris()
            rows = ds.dataset(files, format="parquet").count_rows() if files else 0
        cols: dict[str, ColumnStats] = {}
        schema = self.catalog().get(table)
        for name in schema.names if schema is not None else ():
            lo, hi = f"min.{name}", f"max.{name}"
            if lo in names and hi in names and actions.num_rows \
                    and actions.column(lo).null_count == 0 \
                    and actions.column(hi).null_count == 0:
                cols[name] = ColumnStats(None, pc.min(actions.column(lo)).as_py(),
                                         pc.max(actions.column(hi)).as_py())
        return TableStats(rows, cols)
