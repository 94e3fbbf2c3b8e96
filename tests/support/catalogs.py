"""Arrow schemas of the workload tables, for tests that plan queries without data.

TPC-H types are those ``tpchgen-cli parquet`` writes (keys int64, money decimal(15,2),
dates date32, a few int32 counters) except that strings are ``pa.string()`` unless
``string_type`` says otherwise (tpchgen-cli itself writes ``string_view``).
"""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa

QUERY_DIR = Path(__file__).resolve().parents[2] / "imp_core" / "workloads" / "queries"

_I64, _I32, _MONEY, _DATE = pa.int64(), pa.int32(), pa.decimal128(15, 2), pa.date32()
_S = "string"  # placeholder, replaced by the requested string type

_TPCH: dict[str, list[tuple[str, object]]] = {
    "customer": [("c_custkey", _I64), ("c_name", _S), ("c_address", _S),
                 ("c_nationkey", _I64), ("c_phone", _S), ("c_acctbal", _MONEY),
                 ("c_mktsegment", _S), ("c_comment", _S)],
    "lineitem": [("l_orderkey", _I64), ("l_partkey", _I64), ("l_suppkey", _I64),
                 ("l_linenumber", _I32), ("l_quantity", _MONEY), ("l_extendedprice", _MONEY),
                 ("l_discount", _MONEY), ("l_tax", _MONEY), ("l_returnflag", _S),
                 ("l_linestatus", _S), ("l_shipdate", _DATE), ("l_commitdate", _DATE),
                 ("l_receiptdate", _DATE), ("l_shipinstruct", _S), ("l_shipmode", _S),
                 ("l_comment", _S)],
    "nation": [("n_nationkey", _I64), ("n_name", _S), ("n_regionkey", _I64),
               ("n_comment", _S)],
    "orders": [("o_orderkey", _I64), ("o_custkey", _I64), ("o_orderstatus", _S),
               ("o_totalprice", _MONEY), ("o_orderdate", _DATE), ("o_orderpriority", _S),
               ("o_clerk", _S), ("o_shippriority", _I32), ("o_comment", _S)],
    "part": [("p_partkey", _I64), ("p_name", _S), ("p_mfgr", _S), ("p_brand", _S),
             ("p_type", _S), ("p_size", _I32), ("p_container", _S), ("p_retailprice", _MONEY),
             ("p_comment", _S)],
    "partsupp": [("ps_partkey", _I64), ("ps_suppkey", _I64), ("ps_availqty", _I32),
                 ("ps_supplycost", _MONEY), ("ps_comment", _S)],
    "region": [("r_regionkey", _I64), ("r_name", _S), ("r_comment", _S)],
    "supplier": [("s_suppkey", _I64), ("s_name", _S), ("s_address", _S),
                 ("s_nationkey", _I64), ("s_phone", _S), ("s_acctbal", _MONEY),
                 ("s_comment", _S)],
}


def tpch_catalog(string_type: pa.DataType | None = None) -> dict[str, pa.Schema]:
    strings = string_type or pa.string()
    return {table: pa.schema([(name, strings if t is _S else t) for name, t in cols])
            for table, cols in _TPCH.items()}


def _synthetic_schema(int_names: str, float_names: str) -> pa.Schema:
    return pa.schema([(n, pa.int64()) for n in int_names.split()]
                     + [(n, pa.float64()) for n in float_names.split()])


def synthetic_catalog() -> dict[str, pa.Schema]:
    groups = {f"t{n}g": _synthetic_schema("id a b c d e", "f g h i j k")
              for n in (50, 1000, 5000, 500000)}
    return {**groups, "tjoinhelp": _synthetic_schema("ttid aa bb cc dd ee", "ff gg hh ii jj kk")}


def crimes_catalog() -> dict[str, pa.Schema]:
    return {"crimes": pa.schema([(n, pa.int64()) for n in
                                 ("id", "beat", "year", "district", "ward", "community_area")])}


def workload_catalog(string_type: pa.DataType | None = None) -> dict[str, pa.Schema]:
    """Every workload table: TPC-H, synthetic and crimes."""
    return {**tpch_catalog(string_type), **synthetic_catalog(), **crimes_catalog()}


def workload_queries() -> dict[str, str]:
    """``{"tpch/q01": sql, ...}`` for every query file of the default workload suites
    (``tpch22``, the TPC-H texts as written, is tested in ``test_normalize``)."""
    from imp_core.workloads.queries import DEFAULT_SUITES

    return {f"{p.parent.name}/{p.stem}": p.read_text()
            for p in sorted(QUERY_DIR.glob("*/*.sql")) if p.parent.name in DEFAULT_SUITES}
