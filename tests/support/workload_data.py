"""Tiny workload databases for differential tests (built once per session, cached).

TPC-H comes from a real tpchgen-cli run at SF 0.01, cut down to the first orders and
their lineitems so that the reference evaluator stays fast; the synthetic and crimes
tables come from their generators at a few thousand rows.
"""

from __future__ import annotations

import functools
import tempfile
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc

from imp_core.workloads.synthetic import generate_crimes, generate_groups_table, generate_joinhelp
from imp_core.workloads.tpch import generate_tpch, load_tpch_tables

TPCH_ORDERS = 400


@functools.cache
def tpch_full_tables() -> dict[str, pa.Table]:
    """All of TPC-H at SF 0.01 (15,000 orders, about 60,000 lineitems)."""
    out = Path(tempfile.gettempdir()) / "imp-test-tpch-sf0.01"
    return load_tpch_tables(generate_tpch(0.01, out, progress=False))


@functools.cache
def tpch_tables() -> dict[str, pa.Table]:
    tables = dict(tpch_full_tables())
    orders = tables["orders"].sort_by("o_orderkey").slice(0, TPCH_ORDERS)
    keys = orders.column("o_orderkey")
    tables["orders"] = orders
    tables["lineitem"] = tables["lineitem"].filter(pc.is_in(tables["lineitem"]["l_orderkey"],
                                                            value_set=keys))
    return tables


@functools.cache
def synthetic_tables(rows: int = 3000) -> dict[str, pa.Table]:
    return {
        "t50g": generate_groups_table(50, rows, seed=1),
        "t1000g": generate_groups_table(1000, rows, seed=2),
        "t5000g": generate_groups_table(5000, rows, seed=3),
        "t500000g": generate_groups_table(500000, rows, seed=4),
        "tjoinhelp": generate_joinhelp(500, groups=5000, fanout=1, selectivity=0.1, seed=5),
        "crimes": generate_crimes(rows, seed=6),
    }


def workload_stores(root: Path) -> dict[str, object]:
    """Delta stores ("tpch", "synthetic") under ``root`` holding the tiny workload tables,
    each clustered on the sketch columns the workload queries use."""
    from imp_core.storage import DeltaStore
    from imp_core.workloads.queries import list_queries
    from imp_core.workloads.schemas import TABLES

    queries = list_queries()
    out: dict[str, object] = {}
    for suite, tables in (("tpch", tpch_tables()), ("synthetic", synthetic_tables())):
        store = DeltaStore(Path(root) / suite)
        for name, data in tables.items():
            info = TABLES[name]
            sketch_cols = tuple({c for q in queries for t, c in q.sketch if t == name})
            store.create_table(name, data, key=info.key, domains=info.domains,
                               cluster_by=sketch_cols)
        out[suite] = store
    return out


@functools.cache
def tpcds_tables() -> dict[str, pa.Table]:
    """All 24 TPC-DS tables at SF 0.01 (tpcgen-cli; about 2.3 million rows, most of them
    in the fixed-size customer_demographics)."""
    from imp_core.workloads.tpcds import generate_tpcds, load_tpcds_tables

    out = Path(tempfile.gettempdir()) / "imp-test-tpcds-sf0.01"
    return load_tpcds_tables(generate_tpcds(0.01, out, progress=False))
