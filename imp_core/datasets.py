"""Loading tables into a service's table store: generated workloads or Parquet files.

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
    for name in wanted:
        t0 = time.perf_counter()
        info = TABLES[name]
        store.create_table_from_parquet(name, paths[name], key=info.key, domains=info.domains,
                                        cluster_by=CLUSTER.get(name, ()), progress=progress)
        _say(progress, f"loaded {name} ({time.perf_counter() - t0:.1f} s)")
    return wanted


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
                 cluster_by: Sequence[str] = (), progress: bool = True) -> int:
    """A table from a Parquet file or a folder of Parquet parts; returns its rows."""
    _check_new(store, [name.lower()])
    store.create_table_from_parquet(name, path, key=tuple(key) if key else None,
                                    cluster_by=tuple(cluster_by), progress=progress)
    return store.read(name.lower()).num_rows
