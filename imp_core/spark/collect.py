"""A Spark query's rows brought to the driver as Arrow, large results through files.

``DataFrame.toArrow`` collects every partition's Arrow batches into the driver JVM before
Python reads them: a result near ``spark.driver.maxResultSize`` (1 GB by default) is
refused, and one near the driver's heap takes the JVM down (at SF 10, TPC-H Q18's and
Q21's registrations did both). ``collect_arrow`` sends a result whose size Spark's
optimizer estimates at more than half that limit through Parquet files instead: the
tasks write them to a scratch folder (``IMP_SPARK_SPILL_DIR``, else the system's
temporary folder; the driver must see what the tasks write, as in local mode or on a
shared volume) and pyarrow reads them, so neither the limit nor the heap holds the rows.
Spark sizes a scan by its compressed files, so an estimate can fall under the threshold
for a result over the limit (at SF 10, TPC-H Q21's): a collect the limit refuses is
then run again through files.

Invariant: both paths return the same rows with the same schema (``toArrow``'s: the
spilled table is cast to it), in no particular order; the scratch files are removed
whether or not the read succeeds.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.dataset as ds

if TYPE_CHECKING:  # pragma: no cover
    from pyspark.sql import DataFrame

DEFAULT_RESULT_LIMIT = 1 << 30  # spark.driver.maxResultSize's default
NEVER = 1 << 62  # spill_above: through files only when the result limit refuses a collect
UNITS = {"b": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}


def size_setting(text: str | None, default: int = DEFAULT_RESULT_LIMIT) -> int:
    """Bytes of a Spark size setting such as ``"1g"``, ``"512m"`` or ``"0"`` (0: no
    limit); ``default`` when unset or unreadable."""
    if not text:
        return default
    text = text.strip().lower().rstrip("b") or "0"
    unit = UNITS.get(text[-1], 1) if text[-1].isalpha() else 1
    digits = text[:-1] if text[-1].isalpha() else text
    try:
        return int(float(digits) * unit)
    except ValueError:
        return default


def estimated_bytes(df: DataFrame) -> int | None:
    """Spark's optimizer estimate of ``df``'s result size (None where the session does
    not expose it, e.g. Spark Connect)."""
    try:
        size = df._jdf.queryExecution().optimizedPlan().stats().sizeInBytes()
        return int(size if isinstance(size, int) else size.toString())  # a BigInt
    except Exception:  # noqa: BLE001 - no estimate: the plain collect
        return None


def spill_threshold(df: DataFrame) -> int:
    """Half the driver's result limit (half of 1 GB when there is none)."""
    try:
        limit = size_setting(df.sparkSession.conf.get("spark.driver.maxResultSize", None))
    except Exception:  # noqa: BLE001
        limit = DEFAULT_RESULT_LIMIT
    return (limit or DEFAULT_RESULT_LIMIT) // 2


def collect_arrow(df: DataFrame, spill_above: int | None = None) -> pa.Table:
    """``df``'s rows as Arrow: by ``toArrow``, or through Parquet files when Spark
    estimates the result above ``spill_above`` bytes (None: ``spill_threshold``)."""
    threshold = spill_threshold(df) if spill_above is None else spill_above
    # no estimate when nothing can pass the threshold (e.g. a lookup by keys, which Spark
    # would size as its whole input): asking the optimizer costs a planning pass
    size = estimated_bytes(df) if threshold < NEVER else None
    if size is not None and size > threshold:
        return spilled(df)
    try:
        return df.toArrow()
    except Exception as exc:  # noqa: BLE001 - only the result limit is retried
        if not over_result_limit(exc):
            raise
    return spilled(df)


def over_result_limit(exc: BaseException) -> bool:
    """Whether Spark aborted a job because its results passed the driver's limit (the
    job is cancelled and the driver unharmed, so the rows can be fetched otherwise)."""
    return "spark.driver.maxResultSize" in str(exc)


def spilled(df: DataFrame) -> pa.Table:
    """``df``'s rows written by Spark's tasks as Parquet and read back with pyarrow."""
    schema = df.limit(0).toArrow().schema  # exactly toArrow's types (time zone, strings)
    names = df.columns
    # positional names: Parquet refuses some characters Spark allows in column names
    plain = df.toDF(*[f"c{i}" for i in range(len(names))])
    folder = tempfile.mkdtemp(prefix="imp-spill-", dir=os.environ.get("IMP_SPARK_SPILL_DIR"))
    try:
        path = os.path.join(folder, "rows")
        # snappy: pyarrow misreads large pages of the "lz4" codec as Spark writes it
        plain.write.mode("overwrite").option("compression", "snappy").parquet(path)
        table = ds.dataset(path, format="parquet").to_table()
        if table.num_columns != len(names):  # no rows: Spark may write no data file
            return schema.empty_table()
        return table.rename_columns(names).cast(schema)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
