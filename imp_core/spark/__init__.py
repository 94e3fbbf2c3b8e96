"""IMP on Spark: plans compiled to Spark SQL for capture (FM), use and the plain query (NS).

- ``get_spark`` / ``stop_spark`` / ``SparkConfig``: the process's session (local, cluster or
  Spark Connect);
- ``register_tables``: temp views over Arrow tables or Parquet files;
- ``plain_sql`` / ``capture_sql`` / ``use_sql`` / ``annotated_sql``: the SQL text;
- ``capture`` / ``run_query``: run them, returning a ``Sketch`` or a ``QueryRun`` with the
  rows read per table.

Importing this package does not import pyspark; the functions do when called.
"""

from imp_core.spark.compile import (
    annotated_sql,
    capture_sql,
    plain_sql,
    sketch_predicate,
    use_sql,
)
from imp_core.spark.run import (
    CaptureRun,
    QueryRun,
    annotated_result,
    capture,
    capture_run,
    prepare_fragment_views,
    run_query,
    run_sql,
    scan_metrics,
)
from imp_core.spark.session import (
    SparkConfig,
    get_spark,
    java_version,
    stop_spark,
)
from imp_core.spark.tables import register_tables, write_parquet

__all__ = [
    "CaptureRun",
    "QueryRun",
    "SparkConfig",
    "annotated_result",
    "annotated_sql",
    "capture",
    "capture_run",
    "capture_sql",
    "get_spark",
    "java_version",
    "plain_sql",
    "prepare_fragment_views",
    "register_tables",
    "run_query",
    "run_sql",
    "scan_metrics",
    "sketch_predicate",
    "stop_spark",
    "use_sql",
    "write_parquet",
]
