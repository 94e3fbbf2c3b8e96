"""Spark SQL of the set operation node (``SetOp``: UNION, INTERSECT, EXCEPT [ALL]).

A mixin of the plan compiler (``imp_core.spark.compile._Compiler``), with the semantics
and the provenance of the engine's ``imp_core.engine.operators.set_ops`` and the
reference evaluator. The right input's columns are renamed to the left's (by position;
the planner gave both the same types).

- Without annotation columns (the plain and the sketch-filtered query): Spark's own
  ``L UNION [ALL] R``, ``INTERSECT [ALL]``, ``EXCEPT [ALL]``, which compare rows with
  NULLs equal.
- UNION ALL with annotation columns: each input's rows with their own annotation as one
  ``ARRAY<INT>`` column, side by side.
- The others with annotation columns: both inputs' rows tagged with their side
  (``__imp_l`` 1 / ``__imp_r`` 1) and their annotation (the right input's counted as
  none for EXCEPT, whose negated input contributes no provenance), grouped by all columns
  (NULLs equal, as in the set operation): per row value its counts l and r and the union
  of the annotations; the rows whose multiplicity m(l, r) is positive are kept, and for
  the ALL forms repeated m times (``explode(sequence(1, m))``).
"""

from __future__ import annotations

from imp_core.plan.nodes import SetOp
from imp_core.spark.sql_text import (
    EMPTY_ANNOTATION,
    AnnColumn,
    CompilerHost,
    Relation,
    ann_aggregate,
    ann_union,
    quote,
)

LEFT_COUNT = "__imp_l"
RIGHT_COUNT = "__imp_r"
MULTIPLICITY = "__imp_m"
TAGGED_ANN = "__imp_t"

# m(l, r) of each set operation as Spark SQL over the counts l and r
_MULTIPLICITY = {
    ("union", False): "{l} + {r}",
    ("union", True): "IF({l} + {r} > 0, 1, 0)",
    ("intersect", False): "least({l}, {r})",
    ("intersect", True): "IF({l} > 0 AND {r} > 0, 1, 0)",
    ("except", False): "greatest({l} - {r}, 0)",
    ("except", True): "IF({l} > 0 AND {r} = 0, 1, 0)",
}


class SetOpCompilers(CompilerHost):
    """``_SetOp``, mixed into the compiler (``CompilerHost``)."""

    def _SetOp(self, node: SetOp) -> Relation:
        left, right = self.compile(node.left), self.compile(node.right)
        names = node.column_names
        lcols = ", ".join(quote(c) for c in node.left.column_names)
        rcols = ", ".join(f"{quote(r)} AS {quote(n)}"
                          for r, n in zip(node.right.column_names, names))
        if not left.ann and not right.ann:
            return self._cte(f"SELECT {lcols} FROM {left.name}\n  {node.sql_name}\n"
                             f"  SELECT {rcols} FROM {right.name}", ())
        lann = ann_union(left.ann) if left.ann else EMPTY_ANNOTATION
        rann = ann_union(right.ann) if right.ann and not node.negates_right \
            else EMPTY_ANNOTATION
        if node.linear:
            out = self._new_ann(True)
            return self._cte(f"SELECT {lcols}, {lann} AS {quote(out.name)} FROM {left.name}\n"
                             f"  UNION ALL\n"
                             f"  SELECT {rcols}, {rann} AS {quote(out.name)} FROM "
                             f"{right.name}", (out,))
        tag = quote(TAGGED_ANN)
        tagged = self._cte(
            f"SELECT {lcols}, 1 AS {quote(LEFT_COUNT)}, 0 AS {quote(RIGHT_COUNT)}, "
            f"{lann} AS {tag} FROM {left.name}\n  UNION ALL\n"
            f"  SELECT {rcols}, 0 AS {quote(LEFT_COUNT)}, 1 AS {quote(RIGHT_COUNT)}, "
            f"{rann} AS {tag} FROM {right.name}", ())
        out = self._new_ann(True)
        keys = ", ".join(quote(c) for c in names)
        m = _MULTIPLICITY[(node.kind, node.distinct)].format(
            l=f"SUM({quote(LEFT_COUNT)})", r=f"SUM({quote(RIGHT_COUNT)})")
        counted = self._cte(
            f"SELECT {keys}, {ann_aggregate((AnnColumn(TAGGED_ANN, True),))} AS "
            f"{quote(out.name)}, {m} AS {quote(MULTIPLICITY)}\n  FROM {tagged.name}\n"
            f"  GROUP BY {keys}", ())
        if node.distinct:
            return self._cte(f"SELECT {keys}, {quote(out.name)} FROM {counted.name}\n"
                             f"  WHERE {quote(MULTIPLICITY)} > 0", (out,))
        copies = f"explode(sequence(1, CAST({quote(MULTIPLICITY)} AS INT)))"
        repeated = self._cte(
            f"SELECT {keys}, {quote(out.name)}, {copies} AS {quote(MULTIPLICITY + '_i')}\n"
            f"  FROM {counted.name}\n"
            f"  WHERE {quote(MULTIPLICITY)} > 0", ())
        return self._cte(f"SELECT {keys}, {quote(out.name)} FROM {repeated.name}", (out,))
