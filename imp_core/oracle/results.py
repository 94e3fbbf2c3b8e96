"""Comparing query results: two Arrow tables are the same result when they hold the same
rows as multisets (order ignored, duplicates counted), doubles equal within a relative
and absolute tolerance of 1e-9, NULL equal only to NULL.

Used wherever a result computed one way is checked against another (a query with and
without its sketch, the service against a recapture): the demo and the benchmarks.
"""

from __future__ import annotations

import math
from typing import Any

import pyarrow as pa


def _norm(v: Any) -> Any:
    if isinstance(v, float):
        return float(f"{v:.9g}") if math.isfinite(v) else repr(v)
    return v


def _close(a: Any, b: Any) -> bool:
    if isinstance(a, float) and isinstance(b, float):
        return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-9)
    return a == b


def same_rows(left: pa.Table, right: pa.Table) -> bool:
    """Equal as multisets of rows; doubles compared with a relative tolerance of 1e-9.

    >>> same_rows(pa.table({"k": [1, 2]}), pa.table({"k": [2, 1]}))
    True
    """
    if left.num_rows != right.num_rows or left.num_columns != right.num_columns:
        return False
    a = [tuple(r.values()) for r in left.to_pylist()]
    b = [tuple(r.values()) for r in right.to_pylist()]

    def key(row: tuple) -> tuple:
        return tuple((x is None, repr(type(x)), _norm(x) if x is not None else 0) for x in row)

    a.sort(key=key)
    b.sort(key=key)
    return all(len(x) == len(y) and all(_close(p, q) for p, q in zip(x, y))
               for x, y in zip(a, b))
