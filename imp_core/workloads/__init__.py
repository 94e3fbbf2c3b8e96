"""Public workloads: the queries of the IMP paper and generators of the data they run on.

- ``queries``: the Spark SQL text of every workload query with its sketch attribute(s).
- ``schemas``: Arrow schema, key and declared value domains of every workload table.
- ``tpcds_schemas``: the same for the 24 TPC-DS tables (a namespace of their own).
- ``synthetic``: the paper's synthetic tables (``tNg``, ``tjoinhelp``) and ``crimes``.
- ``tpch``: TPC-H Parquet files through the ``tpchgen-cli`` executable.
- ``tpcds``: TPC-DS Parquet files through the ``tpcgen-cli`` executable.

Every generator is deterministic: the same arguments give the same table.
"""

from imp_core.workloads.queries import WorkloadQuery, list_queries, load_query

__all__ = ["WorkloadQuery", "list_queries", "load_query"]
