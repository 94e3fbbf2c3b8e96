"""Spark SQL of the semi-join, anti-join (also NOT IN) and LEFT / FULL outer join nodes.

A mixin of the plan compiler (``imp_core.spark.compile._Compiler``): each method compiles
one node into CTEs whose columns are the node's schema plus its annotation columns (see
``imp_core.spark.sql_text``), with the semantics and the provenance of the engine's
``KeyedJoinOp`` and the reference evaluator. ``condition`` (equi-keys and residual alike)
is always the join's ``ON``, so the residual decides partners exactly as in the engine
(a NULL comparison is no partner); no condition is ``ON TRUE``.

- ``SemiJoin`` (EXISTS / IN): ``L LEFT SEMI JOIN R ON c``; every left row keeps its
  multiplicity. Annotated, when ``R`` carries annotation columns, a kept row's
  provenance is its own fragments plus those of *all* its partners: the left rows are
  numbered (``monotonically_increasing_id``, in a CTE read once), inner-joined with
  ``R`` and grouped by that number; the left columns are taken back with ``first`` (equal
  within a group) and the partners' annotations unioned with ``collect_set`` into one
  ``ARRAY<INT>`` column. Without annotation columns on ``R`` the plain form is used.
- ``SemiJoin(anti=True)`` (NOT EXISTS): ``L LEFT ANTI JOIN R ON c``; the row keeps its own
  fragments only.
- ``SemiJoin(anti=True, null_aware=True)`` (NOT IN): kept iff ``R`` is empty, or the left
  keys are all non-NULL, no right row matches and no right row has a NULL key. That is
  ``L LEFT ANTI JOIN R ON c OR <some key of either side is NULL>``; with one key pair and
  no residual written ``(l = r) OR ((l = r) IS NULL)``, the form Spark plans as its
  null-aware anti join. Own fragments only.
- ``OuterJoin``: ``L LEFT OUTER JOIN R ON c`` / ``FULL OUTER JOIN``. A joined pair keeps
  both sides' annotation columns; on a NULL-padded row the absent side's columns are NULL,
  so each side that may be absent (the right one; both for FULL) has its annotation
  columns replaced by one ``ARRAY<INT>`` column that is empty when they are NULL
  (``ann_union_padded``): a padded row carries only its own side's fragments.

Invariant: the left and right inputs have disjoint column names (conditions name columns
unqualified), as every plan's joins do; other inputs raise ``SparkCompileError``.
"""

from __future__ import annotations

from imp_core.errors import SparkCompileError
from imp_core.plan.expr import BinaryOp, ColumnRef, Expr, UnaryOp, disjoin
from imp_core.plan.nodes import OuterJoin, SemiJoin, arrow_schema
from imp_core.spark.sql_text import (
    AnnColumn,
    CompilerHost,
    Relation,
    ann_aggregate,
    ann_union_padded,
    quote,
    write_expr,
)

ROW_ID = "__imp_rid"  # the left row's number inside a semi-join's annotated CTEs


class JoinCompilers(CompilerHost):
    """``_SemiJoin`` and ``_OuterJoin`` for a compiler that provides ``compile`` (a node to
    its relation), ``_cte`` (a new CTE) and ``_new_ann`` (a fresh annotation column)."""

    # -- semi-, anti- and null-aware anti-join ---------------------------------------------
    def _SemiJoin(self, node: SemiJoin) -> Relation:
        _check_names(node)
        left, right = self.compile(node.left), self.compile(node.right)
        on = _on(node, node.condition)
        if node.anti:
            if node.null_aware:
                on = _null_aware_on(node)
            return self._cte(f"SELECT * FROM {left.name} LEFT ANTI JOIN {right.name}\n"
                             f"  ON {on}", left.ann)
        if not right.ann:
            return self._cte(f"SELECT * FROM {left.name} LEFT SEMI JOIN {right.name}\n"
                             f"  ON {on}", left.ann)
        # the partners' fragments join the row's: number the left rows, pair them with
        # every partner, one group per left row
        numbered = self._cte(f"SELECT *, monotonically_increasing_id() AS {quote(ROW_ID)}"
                             f"\n  FROM {left.name}", ())
        partners = self._new_ann(True)
        keep = [*node.left.column_names, *(a.name for a in left.ann)]
        cols = [f"first({quote(c)}) AS {quote(c)}" for c in keep]
        cols.append(f"{ann_aggregate(right.ann)} AS {quote(partners.name)}")
        body = (f"SELECT {', '.join(cols)}\n  FROM {numbered.name} JOIN {right.name}\n"
                f"  ON {on}\n  GROUP BY {quote(ROW_ID)}")
        return self._cte(body, left.ann + (partners,))

    # -- LEFT / FULL outer join ---------------------------------------------------------------
    def _OuterJoin(self, node: OuterJoin) -> Relation:
        _check_names(node)
        left, right = self.compile(node.left), self.compile(node.right)
        how = "LEFT OUTER" if node.kind == "left" else "FULL OUTER"
        cols = [quote(c) for c in node.column_names]
        left_ann, la = _padded(self, left.ann) if node.kind == "full" else \
            ([quote(a.name) for a in left.ann], left.ann)
        right_ann, ra = _padded(self, right.ann)
        body = (f"SELECT {', '.join(cols + left_ann + right_ann)}\n"
                f"  FROM {left.name} {how} JOIN {right.name}\n  ON {_on(node, node.condition)}")
        return self._cte(body, la + ra)


def _padded(c: JoinCompilers, anns: tuple[AnnColumn, ...]
            ) -> tuple[list[str], tuple[AnnColumn, ...]]:
    """The select items and annotation columns of a side an outer join may NULL-pad: its
    annotation columns as one ``ARRAY<INT>`` column, empty on a padded row."""
    if not anns:
        return [], ()
    out = c._new_ann(True)
    return [f"{ann_union_padded(anns)} AS {quote(out.name)}"], (out,)


def _check_names(node: SemiJoin | OuterJoin) -> None:
    shared = set(node.left.column_names) & set(node.right.column_names)
    if shared:
        raise SparkCompileError(f"the inputs of {type(node).__name__} share column names "
                                f"{sorted(shared)}; a join's inputs must not")


def _on(node: SemiJoin | OuterJoin, condition: Expr | None) -> str:
    if condition is None:
        return "TRUE"
    schema = arrow_schema(node.left.schema + node.right.schema)
    return write_expr(condition, schema)


def _null_aware_on(node: SemiJoin) -> str:
    """NOT IN's anti-join condition: a right row rules a left row out when they match or
    when a key of either is NULL (so a NULL on the right rules out every left row, and a
    left row with a NULL key is ruled out by any right row)."""
    lk, rk, residual = node.equi_keys()
    if not lk:
        raise SparkCompileError("a null-aware anti-join (NOT IN) needs equi-join keys")
    if len(lk) == 1 and residual is None:
        eq = _on(node, node.condition)
        return f"{eq} OR ({eq} IS NULL)"  # Spark's null-aware anti join pattern
    unknown = disjoin([UnaryOp("is_null", ColumnRef(name)) for name in (*lk, *rk)])
    assert node.condition is not None and unknown is not None
    return _on(node, BinaryOp("or", node.condition, unknown))
