"""File skipping for sketch-filtered queries: the data files a sketch's filter can match.

Spark reads the service's tables as plain Parquet files, so it cannot use the Delta log's
per-file statistics; every file is opened even when its row groups are then skipped. For a
sketched table we keep only the files whose [min, max] of the partition column meets one
of the filter's ranges (``predicate_ranges``). Invariant: a skipped file holds no row the
filter keeps, so the query's result is unchanged. Files without statistics, with NULLs when
a range admits NULL, or of column types whose statistics are unordered (floating point NaN)
are always kept.

Strings: writers truncate logged string statistics to a prefix (delta-rs to 64 characters,
Delta on Spark to 32). A truncated minimum is a prefix of the true minimum, so it is still
a lower bound. A maximum is trusted only when shorter than ``STRING_PREFIX_TRUSTED``
characters, which no writer truncates to; a longer one is read as unbounded above, whatever
the writer did to it (delta-rs raises its last character, Delta appends a tie-breaker).
"""

from __future__ import annotations

import bisect
from typing import Any, Sequence

import pyarrow as pa

from imp_core.sketch.sketch import Range, Sketch
from imp_core.spark.compile import predicate_ranges

# the shortest prefix a Delta writer truncates string statistics to (Delta on Spark's
# default dataSkippingStringPrefixLength); a shorter logged maximum is the true maximum
STRING_PREFIX_TRUSTED = 32


def is_text(dtype: pa.DataType) -> bool:
    """Whether ``dtype`` is a string type."""
    return pa.types.is_string(dtype) or pa.types.is_large_string(dtype) \
        or pa.types.is_string_view(dtype)


def prunable(dtype: pa.DataType) -> bool:
    """Whether file statistics of a column of ``dtype`` may skip files."""
    return (pa.types.is_integer(dtype) or pa.types.is_date(dtype)
            or pa.types.is_decimal(dtype) or pa.types.is_timestamp(dtype)
            or is_text(dtype))


def file_meets(ranges: Sequence[Range], his: Sequence[Any], lo: Any, hi: Any,
               nulls: int | None) -> bool:
    """Whether a file with column statistics ``lo``..``hi`` and ``nulls`` may hold a row in
    ``ranges`` (sorted, disjoint, [lo, hi); ``his`` their upper ends but an open last)."""
    if lo is None or hi is None or nulls is None:  # no statistics, or only NULLs
        return True
    if nulls and ranges and ranges[0].includes_null:
        return True
    # the first range reaching above the file's minimum; later ones start even higher
    i = bisect.bisect_right(his, lo)
    if i == len(ranges):
        return False
    first = ranges[i]
    return first.lo is None or hi >= first.lo


def sketch_files(sketch: Sketch, table: str,
                 stats: Sequence[tuple[str, Any, Any, int | None]]) -> list[str]:
    """The URIs among ``stats`` (uri, min, max, nulls) that the sketch's filter on ``table``
    may read; all of them when the table is not sketched or its type cannot be pruned."""
    found = sketch.partitions.for_table(table)
    if found is None or not prunable(found[0].dtype):
        return [s[0] for s in stats]
    ranges = predicate_ranges(sketch, table)
    bounded = [r.hi for r in ranges if r.hi is not None]
    meets = _text_meets if is_text(found[0].dtype) else file_meets
    return [uri for uri, lo, hi, nulls in stats if meets(ranges, bounded, lo, hi, nulls)]


def _text_meets(ranges: Sequence[Range], his: Sequence[Any], lo: Any, hi: Any,
                nulls: int | None) -> bool:
    """``file_meets`` for logged string statistics (the module docstring)."""
    if lo is None or hi is None or nulls is None:
        return True
    if len(hi) >= STRING_PREFIX_TRUSTED:
        return _meets_above(ranges, lo, nulls)
    return file_meets(ranges, his, lo, hi, nulls)


def _meets_above(ranges: Sequence[Range], lo: Any, nulls: int) -> bool:
    """Whether a file whose values are all >= ``lo`` (no upper bound known) may hold a
    row in ``ranges``."""
    if nulls and ranges and ranges[0].includes_null:
        return True
    return any(r.hi is None or r.hi > lo for r in ranges)
