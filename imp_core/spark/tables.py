"""Making tables visible to Spark SQL: temp views over Arrow tables or Parquet files."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping, Sequence, Union

import pyarrow as pa
import pyarrow.parquet as pq

from imp_core.errors import SchemaMismatchError

if TYPE_CHECKING:  # pragma: no cover
    from pyspark.sql import DataFrame, SparkSession

TableSource = Union[pa.Table, Sequence[str], str, "DataFrame"]


def spark_ready(table: pa.Table) -> pa.Table:
    """``table`` with string_view / large_string columns as plain strings (Spark's input)."""
    fields = []
    changed = False
    for f in table.schema:
        t = f.type
        if pa.types.is_string_view(t) or pa.types.is_large_string(t):
            t, changed = pa.string(), True
        elif pa.types.is_binary_view(t) or pa.types.is_large_binary(t):
            t, changed = pa.binary(), True
        fields.append(pa.field(f.name, t, f.nullable))
    return table.cast(pa.schema(fields)) if changed else table


def arrow_to_dataframe(spark: SparkSession, table: pa.Table) -> DataFrame:
    """A Spark DataFrame of an Arrow table (pyspark 4 converts ``pa.Table`` natively)."""
    return spark.createDataFrame(spark_ready(table))


# Delta table id -> the Spark schema of its data files: inferring it reads file footers on
# every read, and a table's files keep one layout for the table's lifetime
_file_schemas: dict[str, Any] = {}


def snapshot_frame(spark: SparkSession, store: Any, table: str, version: int | None,
                   snapshot: tuple[str, list[str]] | None = None) -> tuple[DataFrame, int]:
    """A DataFrame over ``table``'s Parquet files at ``version`` and their number
    (``snapshot``: the store's ``snapshot_files`` answer, or the table id and the subset of
    its files to read, when the caller has it)."""
    table_id, files = snapshot or store.snapshot_files(table, version)
    if not files:
        return arrow_to_dataframe(spark, store.schema(table, version).empty_table()), 0
    known = _file_schemas.get(table_id)
    if known is not None:
        return spark.read.schema(known).parquet(*files), len(files)
    df = spark.read.parquet(*files)
    _file_schemas[table_id] = df.schema
    return df, len(files)


def write_parquet(table: pa.Table, path: str | Path, row_group_size: int | None = None,
                  sort_by: str | None = None) -> str:
    """Write ``table`` (optionally sorted on a column) as one Parquet file; returns its URI."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    table = spark_ready(table)
    if sort_by is not None:
        table = table.sort_by(sort_by)
    pq.write_table(table, path, row_group_size=row_group_size, write_page_index=True)
    return path.resolve().as_uri()


def register_tables(spark: SparkSession, tables: Mapping[str, TableSource],
                    parquet_dir: str | Path | None = None) -> dict[str, DataFrame]:
    """Create (or replace) a temp view per table, named as the table.

    A value is an Arrow table, Parquet file URIs (a list, or one path/URI, which may be a
    directory), or a Spark DataFrame. With ``parquet_dir`` Arrow tables are first written
    there as Parquet, so scans of them are file scans with row counts (``run_query``).
    """
    out = {}
    for name, source in tables.items():
        if isinstance(source, pa.Table):
            if parquet_dir is not None:
                uri = write_parquet(source, Path(parquet_dir) / f"{name}.parquet")
                df = spark.read.parquet(uri)
            else:
                df = arrow_to_dataframe(spark, source)
        elif isinstance(source, (str, Path)):
            df = spark.read.parquet(str(source))
        elif isinstance(source, Sequence):
            uris = [str(u) for u in source]
            if not uris:
                raise SchemaMismatchError(f"table {name}: no Parquet files given")
            df = spark.read.parquet(*uris)
        elif hasattr(source, "createOrReplaceTempView"):
            df = source
        else:
            raise SchemaMismatchError(f"table {name}: cannot register a {type(source).__name__}")
        df.createOrReplaceTempView(name)
        out[name] = df
    return out
