"""Splitting one query's state over K actors by a hash of its group key.

A plan can be sharded when, above its single aggregation, there are only selections and
projections (HAVING, output columns), and one group-by column of that aggregation is a
plain copy of a column ``c`` of a table ``T`` that the plan scans exactly once. Then every
row of the join below the aggregation holds exactly one row of ``T``, and its group
(hence its output row) is decided by that row's ``c``. So:

- rows of ``T`` (in every delta and in the bootstrap input) go to shard
  ``hash(c) mod K``;
- rows of every other table go to all shards (each shard joins them with its own part of
  ``T``, which yields exactly its part of the join);
- each shard outputs the result rows of its own groups, disjoint from the others', so
  the query's sketch is the union of the shards' sketches.

Semi-, anti- (also NOT IN) and LEFT outer joins may sit below the aggregation when ``T``
is on their left (the group-by column is traced, by ``trace_column``, only through a
semi/anti-join's left input and a LEFT join's preserved left input): their right input
holds no row of ``T``, so every shard holds all of it, and each of the join's output rows
(with its provenance: all partners, or the absence of any, or the NULL-facts of NOT IN)
depends on one left row and that whole right input, so each shard outputs exactly the
rows of its own part of ``T``. A group-by column from an outer join's NULL-padded side
(the right of a LEFT join, either side of a FULL join) is refused: a padded row would
appear in every shard that lacks its partners. Joins of any kind whose inputs hold no row
of ``T`` are computed whole by every shard.

Invariant: ``route_rows`` is a pure function of the row values and K (the same row goes
to the same shard in every process), so a row deleted later meets the row it deletes.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from imp_core.engine.operators.base import TableDelta
from imp_core.errors import UnshardableQueryError
from imp_core.plan.lineage import trace_column
from imp_core.plan.nodes import (
    Aggregate,
    Join,
    OuterJoin,
    Project,
    QueryPlan,
    Scan,
    Select,
    SemiJoin,
)

# what may sit between the aggregation and the scans (the argument in the module doc)
_SPLITTABLE = (Select, Project, Join, Scan, SemiJoin, OuterJoin)


@dataclass(frozen=True)
class ShardKey:
    """Rows of ``table`` are routed by the hash of their ``column``."""

    table: str
    column: str


def shard_key(plan: QueryPlan) -> ShardKey:
    """The routing column of ``plan``, or ``UnshardableQueryError`` saying why none."""
    node = plan.root
    while isinstance(node, (Select, Project)):
        node = node.input
    if not isinstance(node, Aggregate):
        raise UnshardableQueryError(
            f"only aggregation queries can be sharded (the plan's top stateful operator "
            f"is {type(node).__name__}, which needs all of its input in one place)")
    if not node.group_by:
        raise UnshardableQueryError("an aggregation without GROUP BY has a single group; "
                                    "it cannot be split")
    below = [n for n in node.input.walk() if not isinstance(n, _SPLITTABLE)]
    if below:
        raise UnshardableQueryError(
            f"the aggregation's input holds a {type(below[0]).__name__}, whose state "
            "cannot be split by the group key")
    scans: dict[str, int] = {}
    for n in node.input.walk():
        if isinstance(n, Scan):
            scans[n.table] = scans.get(n.table, 0) + 1
    reasons = []
    for column in node.group_by:
        found = trace_column(node.input, column)
        if found is None:
            padded = trace_column(node.input, column, through_padding=True)
            reasons.append(
                f"{column} comes from {padded[0].table} on the NULL-padded side of an "
                "outer join (a padded row would appear in several shards)"
                if padded is not None else f"{column} is computed, not a table column")
            continue
        table, source = found[0].table, found[1]
        if scans[table] != 1:
            reasons.append(f"{column} comes from {table}, which the query reads "
                           f"{scans[table]} times")
            continue
        return ShardKey(table, source)
    raise UnshardableQueryError("no group-by column can route rows to shards: "
                                + "; ".join(reasons))


def shard_of(values: pa.Array | pa.ChunkedArray, shards: int) -> np.ndarray:
    """Shard number of each value: a process-independent hash (NULLs go to shard 0)."""
    if isinstance(values, pa.ChunkedArray):
        values = values.combine_chunks()
    if shards == 1 or len(values) == 0 or values.null_count == len(values):
        return np.zeros(len(values), dtype=np.int64)
    nulls = values.is_null().to_numpy(zero_copy_only=False) if values.null_count else None
    if nulls is not None:
        # a value's hash must not depend on its neighbours: with a NULL among them, numpy
        # would see integers as floats (and booleans as objects)
        values = pc.fill_null(values, values.drop_null()[0])
    if pa.types.is_decimal(values.type) or pa.types.is_temporal(values.type):
        values = pc.cast(values, pa.string())  # exact text of the value: same everywhere
    arr = values.to_numpy(zero_copy_only=False)
    if arr.dtype == object:
        arr = np.asarray(["" if v is None else str(v) for v in arr], dtype=object)
    hashed = pd.util.hash_array(arr, categorize=False)
    out = (hashed % np.uint64(shards)).astype(np.int64)
    if nulls is not None:
        out[nulls] = 0
    return out


def route_rows(table: str, delta: TableDelta, key: ShardKey | None, shards: int
               ) -> list[TableDelta]:
    """``delta`` of ``table`` split for ``shards`` shards (others' tables: copied)."""
    if shards == 1:
        return [delta]
    if key is None or table != key.table:
        return [delta] * shards
    target = shard_of(delta.rows.column(key.column), shards)
    out = []
    for k in range(shards):
        idx = np.flatnonzero(target == k)
        out.append(TableDelta(delta.rows.take(pa.array(idx, type=pa.int64())),
                              np.asarray(delta.weights)[idx]))
    return out
