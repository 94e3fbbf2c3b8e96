"""Loading tables into a service's table store: generated workloads (TPC-H, TPC-DS,
synthetic), Parquet files or existing Delta tables (copied).

Used by ``imp data`` (on the machine or pod that holds the store; the running service
sees new tables at once, its catalog re-reads ``catalog.json`` when it changes). Each
table is a Delta table (change data feed on) clustered on the workload queries' sketch
attributes, so Parquet statistics let sketch-filtered scans skip data.
Invariant: a table that already exists is never overwritten (``TableExistsError``).
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Iterable, Sequence

from imp_core.errors import TableExistsError

# the sketch attribute of the workload queries over each table (``-- sketch:`` headers)
CLUSTER = {"lineitem": ("l_orderkey",), "orders": ("o_orderkey",), "crimes": ("beat",),
           "t50g": ("a",), "t1000g": ("a",), "t5000g": ("a",), "t500000g": ("a",),
           "tjoinhelp": ("ttid",)}


def _say(progress: bool, text: str) -> None:
    if progress:
        print(text, file=sys.stderr, flush=True)


def _check_new(store, names: Iterable[str]) -> None:
    have = set(store.tables())
    clash = sorted(set(names) & have)
    if clash:
        raise TableExistsError(f"tables already in the store: {', '.join(clash)} "
                               "(drop them first or load into another root)")


def load_tpch(store, scale: float, work_dir: Path, tables: Sequence[str] | None = None,
              progress: bool = True) -> list[str]:
    """Generate TPC-H at ``scale`` with tpchgen-cli into ``work_dir`` and load it."""
    from imp_core.workloads.schemas import TABLES, TPCH_TABLES
    from imp_core.workloads.tpch import generate_tpch

    wanted = list(tables or TPCH_TABLES)
    _check_new(store, wanted)
    paths = generate_tpch(scale, work_dir / f"tpch-sf{scale:g}", progress=progress,
                          tables=wanted)
    _load_generated(store, paths, TABLES, CLUSTER, progress)
    return wanted


def load_tpcds(store, scale: float, work_dir: Path, tables: Sequence[str] | None = None,
               progress: bool = True) -> list[str]:
    """Generate TPC-DS at ``scale`` with tpcgen-cli into ``work_dir`` and load it (the 24
    tables, or ``tables``), each with its key and domains (``tpcds_schemas.TPCDS``) and
    clustered on the sketch attribute the ``tpcds99`` queries use on it. TPC-DS has its
    own ``customer``: a store that holds TPC-H's cannot take TPC-DS too."""
    from imp_core.workloads.tpcds import generate_tpcds
    from imp_core.workloads.tpcds_schemas import TPCDS, TPCDS_TABLES

    wanted = list(tables or TPCDS_TABLES)
    if "customer" in wanted and "customer" in store.tables() and "c_custkey" in \
            store.schema("customer").names:
        raise TableExistsError("this store holds TPC-H, whose customer table is not "
                               "TPC-DS's: load TPC-DS into a store of its own (--root)")
    _check_new(store, wanted)
    paths = generate_tpcds(scale, work_dir / f"tpcds-sf{scale:g}", progress=progress,
                           tables=wanted)
    _load_generated(store, paths, TPCDS, tpcds_cluster(), progress)
    return wanted


def tpcds_cluster() -> dict[str, tuple[str, ...]]:
    """Per TPC-DS table, the sketch attribute the most ``tpcds99`` query headers use on it."""
    from collections import Counter

    from imp_core.workloads.queries import list_queries

    uses = Counter(attr for q in list_queries("tpcds99") for attr in q.sketch)
    out: dict[str, tuple[str, ...]] = {}
    for (table, column), _ in uses.most_common():
        out.setdefault(table, (column,))
    return out


def _load_generated(store, paths, infos, cluster, progress: bool) -> None:
    """Each generated Parquet file as a table with its workload key and domains."""
    for name, path in paths.items():
        t0 = time.perf_counter()
        info = infos[name]
        store.create_table_from_parquet(name, path, key=info.key, domains=info.domains,
                                        cluster_by=cluster.get(name, ()), progress=progress)
        _say(progress, f"loaded {name} ({time.perf_counter() - t0:.1f} s)")


def load_synthetic(store, names: Sequence[str], rows: int, seed: int = 0,
                   progress: bool = True) -> list[str]:
    """The synthetic workload tables (``tNg``, ``tjoinhelp``, ``crimes``) of ``rows`` rows."""
    from imp_core.workloads.schemas import TABLES
    from imp_core.workloads.synthetic import generate_table

    _check_new(store, names)
    for name in names:
        t0 = time.perf_counter()
        _say(progress, f"generating {name} ({rows:,} rows) ...")
        info = TABLES[name]
        store.create_table(name, generate_table(name, rows, seed), key=info.key,
                           domains=info.domains, cluster_by=CLUSTER.get(name, ()))
        _say(progress, f"loaded {name} ({time.perf_counter() - t0:.1f} s)")
    return list(names)


def load_parquet(store, name: str, path: str, key: Sequence[str] | None = None,
                 cluster_by: Sequence[str] = (), progress: bool = True,
                 domains: Sequence[str] = ()) -> int:
    """A table from a Parquet file, a folder of Parquet parts or a Delta table; returns
    its rows.

    ``key``: the ``--key`` columns; ``domains``: ``--domain COL=LO..HI`` texts
    (``imp_core.storage.declared``). From a Delta table, the simple bounds among its CHECK
    constraints are domains too (a ``--domain`` of the same column wins). Every
    declaration is checked against the input's schema before anything is written, and
    the rows against the key and domains by the store, also before writing."""
    from deltalake import DeltaTable

    from imp_core.storage import declared

    _check_new(store, [name.lower()])
    delta = DeltaTable(str(path)) if _is_delta_table(str(path)) else None
    if delta is not None:
        schema = _delta_user_schema(delta)
        implied = declared.constraint_domains(delta.metadata().configuration, schema)
    else:
        schema, implied = _parquet_schema(Path(path)), {}
    key_columns = declared.parse_key(key, schema) if key else None
    wanted = {**implied, **declared.parse_domains(domains, schema)}
    if implied:
        _say(progress, f"domains from the CHECK constraints of {path}: "
             f"{declared.describe_domains(implied)}")
    if delta is not None:  # its current snapshot, copied into the store
        store.create_table(name, delta.to_pyarrow_table(columns=schema.names),
                           key=key_columns, domains=wanted, cluster_by=tuple(cluster_by),
                           progress=progress)
    else:
        store.create_table_from_parquet(name, path, key=key_columns, domains=wanted,
                                        cluster_by=tuple(cluster_by), progress=progress)
    return store.read(name.lower()).num_rows


def _is_delta_table(path: str) -> bool:
    """A Delta table's folder (or URI); a Parquet file or folder of parts is not one."""
    from deltalake import DeltaTable

    from imp_core.storage.catalog import is_uri

    if not is_uri(path):  # delta-rs fails on a file's path instead of answering False
        return (Path(path) / "_delta_log").is_dir()
    return DeltaTable.is_deltatable(path)


def _parquet_schema(path: Path):
    """The Arrow schema a Parquet file or folder of parts loads as (strings plain)."""
    import pyarrow.parquet as pq

    from imp_core.storage.batches import plain_schema
    from imp_core.storage.parquet_load import parquet_files

    return plain_schema(pq.read_schema(parquet_files(path)[0]))


def _delta_user_schema(table):
    """A Delta table's columns as loaded (an IMP table's hidden row id left out)."""
    from imp_core.storage.snapshots import stored_schema, user_schema

    return user_schema(stored_schema(table))
