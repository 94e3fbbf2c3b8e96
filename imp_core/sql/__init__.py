"""SQL front end: parses Spark SQL (via sqlglot) into the plan nodes of ``imp_core.plan``."""

from imp_core.sql.planner import parse_sketch_header, plan_sql

__all__ = ["parse_sketch_header", "plan_sql"]
