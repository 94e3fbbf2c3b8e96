"""Two small random tables for subquery tests, ``o(k, g, z)`` and ``i(j, g, x)``, with
NULLs and duplicates, and DuckDB's answer to a query over them."""

from __future__ import annotations

import random

import duck
import duckdb
import pyarrow as pa


def outer_rows(rng: random.Random, keys: range) -> pa.Table:
    return pa.table({"k": pa.array(list(keys), pa.int64()),
                     "g": pa.array([rng.choice([1, 2, 3, None]) for _ in keys], pa.int64()),
                     "z": pa.array([rng.choice([0, 5, 6, 7, 12, None]) for _ in keys],
                                   pa.int64())})


def inner_rows(rng: random.Random, keys: range) -> pa.Table:
    return pa.table({"j": pa.array(list(keys), pa.int64()),
                     "g": pa.array([rng.choice([1, 2, None]) for _ in keys], pa.int64()),
                     "x": pa.array([rng.choice([None, 5, 6, 7]) for _ in keys], pa.int64())})


def duckdb_rows(sql: str, tables: dict[str, pa.Table]) -> list[tuple] | str:
    """DuckDB's rows for ``sql`` (sorted), or "raises" where a scalar subquery returns
    several rows (DuckDB raises as Spark does)."""
    con = duck.connection()
    for name, data in tables.items():
        con.register(name, data)
    try:
        return sorted(con.sql(sql).fetchall(), key=repr)
    except duckdb.Error as error:
        assert "More than one row" in str(error), error
        return "raises"
