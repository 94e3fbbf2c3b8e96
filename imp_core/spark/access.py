"""Whether a sketch-filtered query will read less than the plain one: the access path.

A sketch saves a query time only where its filter skips data. The filter Spark runs is
the sketch coarsened to ``MAX_PREDICATE_RANGES`` ranges per table (``predicate_ranges``),
and the partitions are equi-depth, so the share of a table's fragments that coarse
filter admits estimates the share of its rows the filtered query reads. Where that share
is high (a sketch spread over the whole domain, as for TPC-H Q19's one global sum), the
filter skips little and costs its evaluation on every row, sometimes a worse plan too;
the table is then read without it.

Invariant: the sketch handed to Spark is the given sketch plus every fragment of the
tables read without a filter, a superset of it, so for a safe sketch the query's result
is unchanged (any superset of a safe sketch is safe). When no table keeps its filter,
the query runs plain.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from pyroaring import BitMap

from imp_core.sketch.sketch import Sketch
from imp_core.spark.compile import MAX_PREDICATE_RANGES

DEFAULT_MAX_READ_SHARE = 0.5  # a filter admitting more than this share of a table is dropped

Path = Literal["sketch", "plain"]


@dataclass(frozen=True)
class AccessChoice:
    """How a sketch-filtered query reads its tables. ``sketch``: what Spark filters by
    (None: the plain query); ``read_share``: per sketched table, the estimated share of
    its rows the coarse filter admits; ``filtered``: the tables that keep their filter."""

    path: Path
    sketch: Sketch | None
    read_share: dict[str, float] = field(default_factory=dict)
    filtered: tuple[str, ...] = ()
    reason: str = ""


def read_shares(sketch: Sketch) -> dict[str, float]:
    """Per sketched table, the share of its fragments the coarse filter admits."""
    coarse = sketch.coarsened(MAX_PREDICATE_RANGES)
    return {part.table: len(coarse.table_fragments(part.table)) / part.size
            for part in sketch.partitions.partitions}


def choose_access(sketch: Sketch, max_read_share: float = DEFAULT_MAX_READ_SHARE,
                  shares: dict[str, float] | None = None) -> AccessChoice:
    """The access path for a query filtered by ``sketch`` (module docstring);
    ``shares``: per sketched table, the share its filter reads when known better than
    by fragments (from the row groups the filter meets, ``imp_core.storage.row_groups``).

    >>> import pyarrow as pa
    >>> from imp_core.sketch.partition import PartitionSet, RangePartition
    >>> p = PartitionSet((RangePartition("t", "a", pa.int64(), (10, 20, 30)),))
    >>> choose_access(Sketch(p, BitMap([1]))).path
    'sketch'
    >>> choose_access(Sketch(p, BitMap([0, 1, 3]))).path
    'plain'
    """
    if not 0.0 <= max_read_share <= 1.0:
        raise ValueError("max_read_share must lie in [0, 1]")
    shares = {**read_shares(sketch), **(shares or {})}
    keep = tuple(t for t, s in shares.items() if s <= max_read_share)
    widened = BitMap(sketch.fragments)
    for part, off in zip(sketch.partitions.partitions, sketch.partitions.offsets):
        if part.table not in keep:
            widened.update(range(off, off + part.size))
    summary = ", ".join(f"{t} {100 * s:.0f}%" for t, s in sorted(shares.items()))
    if not keep:
        return AccessChoice("plain", None, shares, (), (
            f"the sketch's filter would read {summary} of the rows (more than "
            f"{100 * max_read_share:.0f}%): the plain query reads about as much without "
            "the filter's cost"))
    return AccessChoice("sketch", Sketch(sketch.partitions, widened), shares, keep,
                        f"the sketch's filter reads {summary} of the rows")
