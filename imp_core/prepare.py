"""The one way a query is prepared for maintenance: SQL → plan → partitions → safety.

``prepare_query`` is the register path shared by the embedded ``Engine``
(``imp_core.api``), the versioned-store ``Maintainer`` (``imp_core.maintenance``) and the
service's coordinator (``imp_actors``): it plans the SQL over the tables' schemas, takes
the partitions given or the SQL's ``-- sketch: table.column`` header, builds the range
partitions on the tables' current contents, checks every sketch attribute's safety
(refusing unsafe ones unless forced) and derives the per-table scan specs. The pipeline
that maintains the prepared query is built by ``imp_core.data_layer``.

Invariants: preparing changes nothing anywhere (a refusal leaves no trace); a
``PreparedQuery``'s partitions were built on the table versions it records, and its
verdicts hold for exactly its plan and partitions.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping, Protocol

import pyarrow as pa

from imp_core.errors import PartitionError
from imp_core.plan.nodes import QueryPlan
from imp_core.scan_spec import ScanSpec, scan_specs
from imp_core.sketch.partition import PartitionSet, PartitionSpec, build_partition_set

DEFAULT_FRAGMENTS = 64


class TableSource(Protocol):
    """What preparing a query reads of the tables: schemas, one column's current values
    (equi-depth partitions), declared value domains, and the current versions."""

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
    specs: Mapping[str, ScanSpec] = field(default_factory=dict)
    # the table versions the partitions were built on ({} for unversioned tables)
    versions: Mapping[str, int] = field(default_factory=dict)

    @property
    def tables(self) -> tuple[str, ...]:
        return tuple(sorted(self.plan.root.tables()))


def partition_specs(sql: str, partitions: Mapping[str, PartitionSpec] | None,
                    fragments: int) -> Mapping[str, PartitionSpec]:
    """The partitions given, or ``fragments`` ranges per attribute of the SQL's
    ``-- sketch: table.column`` header."""
    from imp_core.sql import parse_sketch_header

    if partitions is not None:
        return partitions
    header = parse_sketch_header(sql)
    if not header:
        raise PartitionError("no partitions given and the SQL has no "
                             "'-- sketch: table.column' header")
    return {f"{t}.{c}": fragments for t, c in header}


def prepare_query(sql: str, source: TableSource,
                  partitions: Mapping[str, PartitionSpec] | None = None,
                  fragments: int = DEFAULT_FRAGMENTS, force: bool = False,
                  pushdown: bool = True) -> PreparedQuery:
    """Plan, partition and check ``sql`` over ``source``; raises the domain error of the
    first problem (bad SQL, unknown table or column, bad partition, unsafe attribute).

    ``pushdown=False`` keeps every selection above its scan (the scan specs carry no
    predicate): deltas then reach the pipeline unfiltered.
    """
    from imp_core.safety import require_safe
    from imp_core.sql import plan_sql

    catalog = source.catalog()
    plan = plan_sql(sql, catalog)
    specs = partition_specs(sql, partitions, fragments)
    tables = sorted(plan.root.tables())
    versions = source.versions(tables)
    pset = build_partition_set(specs, lambda t: _schema(catalog, t), source.column)
    verdicts = require_safe(plan, [(p.table, p.column) for p in pset.partitions],
                            domains={t: dict(source.domains(t)) for t in tables},
                            force=force,
                            table_columns={t: s.names for t, s in catalog.items()})
    scans = scan_specs(plan.root, pset)
    if not pushdown:
        scans = {t: ScanSpec(s.table, s.columns, None, s.partition) for t, s in scans.items()}
    return PreparedQuery(sql, plan, pset, tuple(verdicts), scans, versions)


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
