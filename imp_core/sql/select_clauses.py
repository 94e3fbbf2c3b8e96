"""What one SELECT block may carry: the clauses the planner takes (the others are
refused by name and position), and two questions about its expressions asked before
planning (does it aggregate, does a subquery read the enclosing query's columns)."""

from __future__ import annotations

from typing import Mapping

import pyarrow as pa
from sqlglot import exp

from imp_core.sql.scope import Scope
from imp_core.sql.text import SqlText

_ALLOWED_CLAUSES = frozenset({"expressions", "distinct", "from_", "joins", "where", "group",
                              "having", "order", "limit"})
_CLAUSES = {
    "with_": ("WITH clause (CTE)", "WITH"), "laterals": ("LATERAL VIEW", "LATERAL"),
    "pivots": ("PIVOT", "PIVOT"), "qualify": ("QUALIFY clause", "QUALIFY"),
    "windows": ("WINDOW clause", "WINDOW"), "distribute": ("DISTRIBUTE BY", "DISTRIBUTE"),
    "sort": ("SORT BY", "SORT"), "cluster": ("CLUSTER BY", "CLUSTER"),
    "offset": ("OFFSET", "OFFSET"), "hint": ("query hint", None),
    "into": ("SELECT INTO", "INTO"), "sample": ("TABLESAMPLE", "TABLESAMPLE"),
}
GROUPING_CLAUSES = {"grouping_sets": ("GROUP BY GROUPING SETS", "GROUPING"),
             "cube": ("GROUP BY ... WITH CUBE", "CUBE"),
             "rollup": ("GROUP BY ... WITH ROLLUP", "ROLLUP"),
             "totals": ("GROUP BY ... WITH TOTALS", "TOTALS"), "all": ("GROUP BY ALL", "ALL")}


def check_clauses(select: exp.Select, text: SqlText) -> None:
    for key, value in select.args.items():
        if key in _ALLOWED_CLAUSES or value in (None, [], False, ""):
            continue
        construct, keyword = _CLAUSES.get(key, (f"{key.rstrip('_').upper()} clause", None))
        node = value if isinstance(value, exp.Expression) else None
        if isinstance(value, list) and value and isinstance(value[0], exp.Expression):
            node = value[0]
        raise text.unsupported(construct, node, keyword)


def has_aggregate(node: exp.Expression) -> bool:
    nested = (exp.Window, exp.Subquery, exp.Select)
    return any(isinstance(n, exp.AggFunc)
               for n in node.walk(prune=lambda n: isinstance(n, nested)))


def is_correlated(inner: exp.Select, scope: Scope, catalog: Mapping[str, pa.Schema]) -> bool:
    """Whether a subquery refers to the enclosing query's columns (a best effort)."""
    inner_aliases: set[str] = set()
    inner_columns: set[str] = set()
    for table in inner.find_all(exp.Table):
        inner_aliases.add((table.alias or table.name).lower())
        schema = catalog.get(table.name.lower())
        inner_columns |= {n.lower() for n in schema.names} if schema is not None else set()
    outer_aliases = {s.alias for s in scope.sources}
    for column in inner.find_all(exp.Column):
        qualifier = column.table.lower()
        if qualifier:
            if qualifier not in inner_aliases and qualifier in outer_aliases:
                return True
        elif (column.name.lower() not in inner_columns
              and any(s.find(column.name) for s in scope.sources)):
            return True
    return False
