"""Arrow schemas, keys and declared value domains of every workload table.

Invariants:
- TPC-H schemas list exactly the columns, order and types that ``tpchgen-cli parquet``
  (4.0.0) writes, every column NOT NULL. Its files carry an Arrow schema hint that makes
  pyarrow read strings as ``string_view``; ``string_view`` lacks most Arrow compute
  kernels (comparison, sort, join keys, LIKE), so the schemas here say ``string`` and
  ``imp_core.workloads.tpch.load_tpch_tables`` casts to them. Spark reads those columns as
  ``StringType`` either way. Decimals are ``decimal128(15, 2)``, dates ``date32``.
- The synthetic and crimes schemas are what ``imp_core.workloads.synthetic`` produces.
- ``key`` is a set of columns unique in the table, or ``None`` when the table has none.
- ``domains`` maps a column to a declared ``(low, high)`` range (inclusive; ``None`` for an
  open side) that every value of the column satisfies, by the TPC-H specification (4.2.3)
  or by the generator. Bounds have the column's Python type (``int``, ``Decimal``,
  ``datetime.date``). A column without an entry has no declared domain.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from decimal import Decimal

import pyarrow as pa

Bound = object | None


@dataclass(frozen=True)
class TableInfo:
    """One workload table: its schema, unique key (or None) and declared value domains."""

    name: str
    schema: pa.Schema
    key: tuple[str, ...] | None
    domains: dict[str, tuple[Bound, Bound]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        names = set(self.schema.names)
        for col in (self.key or ()) + tuple(self.domains):
            if col not in names:
                raise ValueError(f"table {self.name}: {col!r} is not a column")


def _schema(*cols: tuple[str, pa.DataType]) -> pa.Schema:
    return pa.schema([pa.field(name, dtype, nullable=False) for name, dtype in cols])


I64 = pa.int64()
I32 = pa.int32()
F64 = pa.float64()
STR = pa.string()
DEC = pa.decimal128(15, 2)
DATE = pa.date32()

# TPC-H dates: O_ORDERDATE lies in [STARTDATE, ENDDATE - 151 days]; L_SHIPDATE is
# O_ORDERDATE + [1, 121]; L_COMMITDATE is O_ORDERDATE + [30, 90]; L_RECEIPTDATE is
# L_SHIPDATE + [1, 30].
_START = dt.date(1992, 1, 1)
_LAST_ORDER = dt.date(1998, 12, 31) - dt.timedelta(days=151)  # 1998-08-02
_DAY = dt.timedelta(days=1)
_POSITIVE: tuple[Bound, Bound] = (1, None)


def _money(low: str | None, high: str | None) -> tuple[Bound, Bound]:
    return (None if low is None else Decimal(low), None if high is None else Decimal(high))


_TPCH = [
    TableInfo(
        "region",
        _schema(("r_regionkey", I64), ("r_name", STR), ("r_comment", STR)),
        key=("r_regionkey",),
        domains={"r_regionkey": (0, 4)},
    ),
    TableInfo(
        "nation",
        _schema(("n_nationkey", I64), ("n_name", STR), ("n_regionkey", I64), ("n_comment", STR)),
        key=("n_nationkey",),
        domains={"n_nationkey": (0, 24), "n_regionkey": (0, 4)},
    ),
    TableInfo(
        "supplier",
        _schema(
            ("s_suppkey", I64),
            ("s_name", STR),
            ("s_address", STR),
            ("s_nationkey", I64),
            ("s_phone", STR),
            ("s_acctbal", DEC),
            ("s_comment", STR),
        ),
        key=("s_suppkey",),
        domains={
            "s_suppkey": _POSITIVE,
            "s_nationkey": (0, 24),
            "s_acctbal": _money("-999.99", "9999.99"),
        },
    ),
    TableInfo(
        "customer",
        _schema(
            ("c_custkey", I64),
            ("c_name", STR),
            ("c_address", STR),
            ("c_nationkey", I64),
            ("c_phone", STR),
            ("c_acctbal", DEC),
            ("c_mktsegment", STR),
            ("c_comment", STR),
        ),
        key=("c_custkey",),
        domains={
            "c_custkey": _POSITIVE,
            "c_nationkey": (0, 24),
            "c_acctbal": _money("-999.99", "9999.99"),
        },
    ),
    TableInfo(
        "part",
        _schema(
            ("p_partkey", I64),
            ("p_name", STR),
            ("p_mfgr", STR),
            ("p_brand", STR),
            ("p_type", STR),
            ("p_size", I32),
            ("p_container", STR),
            ("p_retailprice", DEC),
            ("p_comment", STR),
        ),
        key=("p_partkey",),
        domains={
            "p_partkey": _POSITIVE,
            "p_size": (1, 50),
            # (90000 + ((partkey / 10) mod 20001) + 100 * (partkey mod 1000)) / 100
            "p_retailprice": _money("900.00", "2099.00"),
        },
    ),
    TableInfo(
        "partsupp",
        _schema(
            ("ps_partkey", I64),
            ("ps_suppkey", I64),
            ("ps_availqty", I32),
            ("ps_supplycost", DEC),
            ("ps_comment", STR),
        ),
        key=("ps_partkey", "ps_suppkey"),
        domains={
            "ps_partkey": _POSITIVE,
            "ps_suppkey": _POSITIVE,
            "ps_availqty": (1, 9999),
            "ps_supplycost": _money("1.00", "1000.00"),
        },
    ),
    TableInfo(
        "orders",
        _schema(
            ("o_orderkey", I64),
            ("o_custkey", I64),
            ("o_orderstatus", STR),
            ("o_totalprice", DEC),
            ("o_orderdate", DATE),
            ("o_orderpriority", STR),
            ("o_clerk", STR),
            ("o_shippriority", I32),
            ("o_comment", STR),
        ),
        key=("o_orderkey",),
        domains={
            "o_orderkey": _POSITIVE,
            "o_custkey": _POSITIVE,
            "o_totalprice": _money("0.00", None),
            "o_orderdate": (_START, _LAST_ORDER),
            "o_shippriority": (0, 0),
        },
    ),
    TableInfo(
        "lineitem",
        _schema(
            ("l_orderkey", I64),
            ("l_partkey", I64),
            ("l_suppkey", I64),
            ("l_linenumber", I32),
            ("l_quantity", DEC),
            ("l_extendedprice", DEC),
            ("l_discount", DEC),
            ("l_tax", DEC),
            ("l_returnflag", STR),
            ("l_linestatus", STR),
            ("l_shipdate", DATE),
            ("l_commitdate", DATE),
            ("l_receiptdate", DATE),
            ("l_shipinstruct", STR),
            ("l_shipmode", STR),
            ("l_comment", STR),
        ),
        key=("l_orderkey", "l_linenumber"),
        domains={
            "l_orderkey": _POSITIVE,
            "l_partkey": _POSITIVE,
            "l_suppkey": _POSITIVE,
            "l_linenumber": (1, 7),
            "l_quantity": _money("1.00", "50.00"),
            "l_extendedprice": _money("0.00", None),
            "l_discount": _money("0.00", "0.10"),
            "l_tax": _money("0.00", "0.08"),
            "l_shipdate": (_START + _DAY, _LAST_ORDER + 121 * _DAY),
            "l_commitdate": (_START + 30 * _DAY, _LAST_ORDER + 90 * _DAY),
            "l_receiptdate": (_START + 2 * _DAY, _LAST_ORDER + 151 * _DAY),
        },
    ),
]

TPCH_TABLES: tuple[str, ...] = tuple(info.name for info in _TPCH)

# Synthetic tables tNg: N groups in column a (see imp_core.workloads.synthetic).
GROUP_TABLES: dict[str, int] = {"t50g": 50, "t1000g": 1000, "t5000g": 5000, "t500000g": 500000}
_INT_COLS = ("b", "c", "d", "e")
_FLOAT_COLS = ("f", "g", "h", "i", "j", "k")


def groups_schema(key_col: str, doubled: bool = False) -> pa.Schema:
    """Schema of a ``tNg``-shaped table: ``key_col`` then a..k (``aa``..``kk`` if doubled)."""

    def name(col: str) -> str:
        return col * 2 if doubled else col

    return _schema(
        (key_col, I64),
        (name("a"), I64),
        *((name(c), I64) for c in _INT_COLS),
        *((name(c), F64) for c in _FLOAT_COLS),
    )


_SYNTHETIC = [
    TableInfo(
        name,
        groups_schema("id"),
        key=("id",),
        domains={"id": _POSITIVE, "a": (1, groups)},
    )
    for name, groups in GROUP_TABLES.items()
]
# tjoinhelp: ttid is the join key, not unique (a join variant repeats it), so no key.
_SYNTHETIC.append(
    TableInfo(
        "tjoinhelp",
        groups_schema("ttid", doubled=True),  # ttid, aa, bb, ..., kk
        key=None,
        domains={"ttid": _POSITIVE, "aa": _POSITIVE},
    )
)

_CRIMES = TableInfo(
    "crimes",
    _schema(
        ("id", I64),
        ("beat", I64),
        ("year", I64),
        ("district", I64),
        ("ward", I64),
        ("community_area", I64),
    ),
    key=("id",),
    domains={
        "id": _POSITIVE,
        "beat": (111, 2534),
        "year": (2001, 2025),
        "district": (1, 25),
        "ward": (1, 50),
        "community_area": (1, 77),
    },
)

TABLES: dict[str, TableInfo] = {info.name: info for info in (*_TPCH, *_SYNTHETIC, _CRIMES)}


def catalog() -> dict[str, pa.Schema]:
    """Table name -> Arrow schema of every workload table."""
    return {name: info.schema for name, info in TABLES.items()}
