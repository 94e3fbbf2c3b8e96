"""DuckDB connections for the tests' oracle checks.

A new DuckDB database costs about 30 ms to open, and the suite's checks ask for one
thousands of times. ``connection()`` is the fuzzer's ``duckdb_connection``: a cursor of
one in-memory database per process, about 2 ms, and as isolated as a new database for
what the checks do (a cursor's registered Arrow tables and ``SET`` options are its own).
Tables created with ``CREATE TABLE`` would be shared: checks that create tables open
their own database.
"""

from __future__ import annotations

from benchmarks.fuzz_sql import duckdb_connection as connection

__all__ = ["connection"]
