"""Spark SQL of grouping-set expansion (``imp_core.plan.expand.Expand``).

A mixin of the plan compiler (``imp_core.spark.compile._Compiler``): the input's CTE
cross-joined with an inline table of the set positions, each key's expanded column a
CASE that keeps the key in the positions of the sets holding it (NULL elsewhere), the
set column the position itself. Annotation columns pass through unchanged, as in the
engine's ``ExpandOp`` and the reference evaluator (each copy keeps its row's fragments);
the aggregation above groups on the expanded columns and the position, as Spark's own
plan of ``GROUP BY ROLLUP / CUBE / GROUPING SETS`` does.
"""

from __future__ import annotations

from imp_core.plan.expand import Expand
from imp_core.plan.nodes import arrow_schema
from imp_core.spark.sql_text import CompilerHost, Relation, quote, spark_type

_ROW = "__imp_x"
_SETS = "__imp_g"
_POSITION = "__imp_set"


class ExpandCompiler(CompilerHost):
    """``_Expand``, mixed into the compiler (``CompilerHost``)."""

    def _Expand(self, node: Expand) -> Relation:
        child = self.compile(node.input)
        schema = arrow_schema(node.input.schema)
        position = f"{_SETS}.{quote(_POSITION)}"
        cols = [f"{_ROW}.*"]
        for j, (key, name) in enumerate(zip(node.keys, node.names)):
            holding = [str(i) for i, s in enumerate(node.sets) if j in s]
            column = f"{_ROW}.{quote(key)}"
            if len(holding) == len(node.sets):
                value = column
            elif not holding:
                value = f"CAST(NULL AS {spark_type(schema.field(key).type)})"
            else:
                value = f"CASE WHEN {position} IN ({', '.join(holding)}) THEN {column} END"
            cols.append(f"{value} AS {quote(name)}")
        cols.append(f"{position} AS {quote(node.set_column)}")
        values = ", ".join(f"({i})" for i in range(len(node.sets)))
        body = (f"SELECT {', '.join(cols)}\n  FROM {child.name} AS {_ROW}\n"
                f"  CROSS JOIN (VALUES {values}) AS {_SETS}({quote(_POSITION)})")
        return self._cte(body, child.ann)
