"""Plans to Spark SQL text: the plain query (NS), the capture query (FM) and the use query.

Every plan node becomes one common table expression ``n<i>`` whose columns are the
node's schema (names back-quoted, so ``lineitem.l_orderkey`` is one column) plus, in a
capture query, its *annotation columns*:

- a base row of a partitioned table carries one ``INT`` column, its global fragment id
  (offset + local id found by binary search over the split points, NULL -> fragment 0);
- selection and projection pass annotation columns through unchanged; a join keeps both
  sides' (one column per partitioned ``Scan`` occurrence below it);
- semi-, anti- (also NOT IN) and outer joins are compiled by ``imp_core.spark.compile_joins``
  (a semi-join's row adds its partners' fragments, an anti-join's keeps its own, an outer
  join's NULL-padded row only its own side's);
- aggregation and DISTINCT replace them with one ``ARRAY<INT>`` column per group: the
  sorted, duplicate-free union of the group's fragments (``collect_set``);
- set operations are compiled by ``imp_core.spark.compile_set_ops`` (Spark's own UNION,
  INTERSECT, EXCEPT without annotations; with them, UNION ALL keeps each row's, the
  others count both inputs per row value and union the equal rows' fragments, of the
  left input only for EXCEPT);
- a window (``imp_core.spark.compile_window``) adds Spark's window functions and one
  ``ARRAY<INT>`` column: the union over the partition, or over the rows up to the row's
  last peer;
- top-k orders by its keys, then every other column ascending NULLS FIRST, then the
  annotation as a sorted array (Spark compares arrays like Python tuples), then LIMIT k:
  the total order of ``imp_core.engine.ordering``, so result and sketch are the reference's.

The annotation of a row is the union of its annotation columns; the capture query ends in
one aggregate that unions them over all result rows. Expressions keep the semantics of
``imp_core.plan.evaluate``: ``/`` divides doubles and yields NULL for a zero divisor,
literals keep their exact types (integer literals stay bare so Spark types them in decimal
arithmetic as we do), and a global aggregate over no rows yields no row.

Fragment ids are computed either inside the SQL text (``fragment_ids="case"``: a balanced
tree of CASE comparisons, self-contained text) or by Spark's JVM binary search
(``fragment_ids="view"``: ``array_binary_search``, reachable only through the DataFrame
API, so the capture SQL then reads temp views ``fragment_view_name(...)`` that
``imp_core.spark.run.prepare_fragment_views`` creates; any number of split points).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Sequence
from typing import Literal as TypingLiteral

from imp_core.errors import SparkCompileError
from imp_core.plan.nodes import (
    Aggregate,
    Distinct,
    Join,
    PlanNode,
    Project,
    QueryPlan,
    Scan,
    Select,
    SortKey,
    TopK,
    arrow_schema,
)
from imp_core.sketch.partition import PartitionSet, RangePartition
from imp_core.sketch.sketch import Range, Sketch
from imp_core.spark.compile_expand import ExpandCompiler
from imp_core.spark.compile_joins import JoinCompilers
from imp_core.spark.compile_set_ops import SetOpCompilers
from imp_core.spark.compile_window import WindowCompiler
from imp_core.spark.sql_text import (
    EMPTY_ANNOTATION,
    AnnColumn,
    Relation,
    ann_aggregate,
    ann_union,
    quote,
    spark_type,
    sql_literal,
    string_literal,
    write_expr,
)

# re-exported: the SQL text helpers other modules take from here
__all__ = [
    "ANNOTATION_COLUMN", "ANN_PREFIX", "EMPTY_ANNOTATION", "FID_COLUMN", "FRAGMENTS_COLUMN",
    "MAX_PREDICATE_RANGES", "AnnotatedRelation", "FragmentIds",
    "annotated_relation", "annotated_sql", "bounds_array_sql", "capture_sql",
    "fragment_case", "fragment_view_name", "plain_sql", "predicate_ranges", "quote",
    "sketch_predicate", "spark_type", "sql_literal", "string_literal", "total_order_sql",
    "use_sql", "write_expr",
]

FragmentIds = TypingLiteral["case", "view"]

ANN_PREFIX = "__imp_a"
FID_COLUMN = "__imp_fid"
FRAGMENTS_COLUMN = "fragments"
ANNOTATION_COLUMN = "__imp_ann"


# -- fragment ids ---------------------------------------------------------------------------
def fragment_case(part: RangePartition, offset: int, column_sql: str) -> str:
    """Global fragment id of ``column_sql`` as a balanced CASE tree over the split points."""
    lits = [sql_literal(b, part.dtype) for b in part.bounds]

    def tree(lo: int, hi: int) -> str:
        # ids lo..hi; bounds[lo..hi-1] separate them (id i starts at bounds[i - 1])
        if lo == hi:
            return str(lo + offset)
        mid = (lo + hi + 1) // 2  # id mid starts at bounds[mid - 1]
        return (f"CASE WHEN {column_sql} < {lits[mid - 1]} THEN {tree(lo, mid - 1)} "
                f"ELSE {tree(mid, hi)} END")

    body = tree(0, part.size - 1)
    if part.size == 1:
        return str(offset)
    return f"(CASE WHEN {column_sql} IS NULL THEN {offset} ELSE {body} END)"


def fragment_view_name(part: RangePartition, offset: int) -> str:
    """Temp view of ``part.table`` plus its rows' global fragment ids (``__imp_fid``)."""
    return f"__imp_frag_{part.table}_{part.fingerprint()[:12]}_{offset}"


def bounds_array_sql(part: RangePartition, bounds: Sequence[Any] | None = None) -> str:
    """``array(b1, ..., bn)`` of the split points (or of ``bounds``), typed as the
    partition column."""
    values = part.bounds if bounds is None else bounds
    return "array(" + ", ".join(sql_literal(b, part.dtype) for b in values) + ")"



def _order_item(column: str, descending: bool, nulls_first: bool) -> str:
    return (f"{quote(column)} {'DESC' if descending else 'ASC'} "
            f"NULLS {'FIRST' if nulls_first else 'LAST'}")


class _Compiler(JoinCompilers, SetOpCompilers, ExpandCompiler, WindowCompiler):
    """One compilation: a CTE per plan node (``compile`` dispatches on the node's type to
    ``_<NodeType>``), with annotation columns when ``partitions`` is given and scans
    filtered by ``sketch`` when that is given."""

    def __init__(self, partitions: PartitionSet | None = None, sketch: Sketch | None = None,
                 fragment_ids: FragmentIds = "case", views: Mapping[str, str] | None = None,
                 fragment_views: Mapping[str, str] | None = None,
                 substitutes: Mapping[PlanNode, Relation] | None = None):
        self.partitions = partitions
        self.sketch = sketch
        self.fragment_ids = fragment_ids
        self.views = dict(views or {})  # table -> the view a scan of it reads
        # table -> its view with fragment ids (``fragment_ids="view"``); by default the view
        # ``prepare_fragment_views`` makes over the table's registered name
        self.fragment_views = dict(fragment_views or {})
        # subtree -> a view of its rows already computed (with their annotation columns),
        # read instead of compiling the subtree (``imp_core.spark.driver_views``)
        self.substitutes = substitutes or {}
        self.ctes: list[tuple[str, str]] = []
        self._anns = 0

    def _cte(self, body: str, ann: tuple[AnnColumn, ...]) -> Relation:
        name = f"n{len(self.ctes)}"
        self.ctes.append((name, body))
        return Relation(name, ann)

    def _new_ann(self, is_set: bool) -> AnnColumn:
        self._anns += 1
        return AnnColumn(f"{ANN_PREFIX}{self._anns}", is_set)

    def compile(self, node: PlanNode) -> Relation:
        view = self.substitutes.get(node) if self.substitutes else None
        if view is not None:
            cols = [quote(c) for c in node.column_names] + [quote(a.name) for a in view.ann]
            return self._cte(f"SELECT {', '.join(cols)}\n  FROM {quote(view.name)}", view.ann)
        method = getattr(self, "_" + type(node).__name__, None)
        if method is None:
            raise SparkCompileError(f"no Spark SQL translation for {type(node).__name__}")
        return method(node)

    def with_clause(self) -> str:
        parts = [f"{name} AS (\n  {body}\n)" for name, body in self.ctes]
        return "WITH " + ",\n".join(parts) + "\n"

    # -- operators ----------------------------------------------------------------------
    def _Scan(self, node: Scan) -> Relation:
        cols = [f"{quote(src)} AS {quote(f.name)}"
                for src, f in zip(node.source_columns, node.fields)]
        source = quote(self.views.get(node.table, node.table))
        ann: tuple[AnnColumn, ...] = ()
        found = self.partitions.for_table(node.table) if self.partitions else None
        if found is not None:
            part, offset = found
            a = self._new_ann(False)
            if self.fragment_ids == "view":
                source = quote(self.fragment_views.get(node.table)
                               or fragment_view_name(part, offset))
                cols.append(f"{quote(FID_COLUMN)} AS {quote(a.name)}")
            else:
                cols.append(f"{fragment_case(part, offset, quote(part.column))} "
                            f"AS {quote(a.name)}")
            ann = (a,)
        where = ""
        if self.sketch is not None and self.sketch.partitions.for_table(node.table):
            where = f"\n  WHERE {sketch_predicate(self.sketch, node.table)}"
        return self._cte(f"SELECT {', '.join(cols)}\n  FROM {source}{where}", ann)

    def _Select(self, node: Select) -> Relation:
        child = self.compile(node.input)
        pred = write_expr(node.predicate, arrow_schema(node.input.schema))
        return self._cte(f"SELECT * FROM {child.name}\n  WHERE {pred}", child.ann)

    def _Project(self, node: Project) -> Relation:
        child = self.compile(node.input)
        schema = arrow_schema(node.input.schema)
        cols = [f"{write_expr(e.expr, schema)} AS {quote(e.name)}" for e in node.exprs]
        cols += [quote(a.name) for a in child.ann]
        return self._cte(f"SELECT {', '.join(cols)}\n  FROM {child.name}", child.ann)

    def _Join(self, node: Join) -> Relation:
        left, right = self.compile(node.left), self.compile(node.right)
        if node.condition is None:
            body = f"SELECT * FROM {left.name} CROSS JOIN {right.name}"
        else:
            schema = arrow_schema(node.schema)
            body = (f"SELECT * FROM {left.name} JOIN {right.name}\n"
                    f"  ON {write_expr(node.condition, schema)}")
        return self._cte(body, left.ann + right.ann)

    def _Aggregate(self, node: Aggregate) -> Relation:
        child = self.compile(node.input)
        cols = [quote(g) for g in node.group_by]
        for a in node.aggregates:
            arg = None if a.arg is None else quote(a.arg)
            cols.append(f"{a.function.spark_sql(arg)} AS {quote(a.name)}")
        ann: tuple[AnnColumn, ...] = ()
        if child.ann:
            out = self._new_ann(True)
            cols.append(f"{ann_aggregate(child.ann)} AS {quote(out.name)}")
            ann = (out,)
        body = f"SELECT {', '.join(cols)}\n  FROM {child.name}"
        if node.group_by:
            body += f"\n  GROUP BY {', '.join(quote(g) for g in node.group_by)}"
        else:
            body += "\n  HAVING COUNT(1) > 0"  # like the paper: no input rows, no group
        return self._cte(body, ann)

    def _Distinct(self, node: Distinct) -> Relation:
        child = self.compile(node.input)
        names = [quote(c) for c in node.input.column_names]
        if not child.ann:
            return self._cte(f"SELECT DISTINCT {', '.join(names)}\n  FROM {child.name}", ())
        out = self._new_ann(True)
        body = (f"SELECT {', '.join(names)}, {ann_aggregate(child.ann)} AS {quote(out.name)}"
                f"\n  FROM {child.name}\n  GROUP BY {', '.join(names)}")
        return self._cte(body, (out,))

    def _TopK(self, node: TopK) -> Relation:
        child = self.compile(node.input)
        order = total_order_sql(node, ann_union(child.ann) if child.ann else None)
        body = f"SELECT * FROM {child.name}\n  ORDER BY {order}\n  LIMIT {int(node.k)}"
        return self._cte(body, child.ann)


def total_order_sql(node: TopK, annotation: str | None) -> str:
    """ORDER BY items of top-k's total order (``imp_core.engine.ordering``): the order keys,
    every other input column ascending NULLS FIRST, then the annotation array (Spark
    compares arrays like Python tuples)."""
    keys = [_order_item(s.column, s.descending, s.effective_nulls_first) for s in node.order]
    ordered = {s.column for s in node.order}
    keys += [_order_item(c, False, True) for c in node.input.column_names if c not in ordered]
    if annotation is not None:
        keys.append(f"{annotation} ASC")
    return ", ".join(keys)


def _root(plan: QueryPlan | PlanNode) -> tuple[PlanNode, tuple[SortKey, ...]]:
    if isinstance(plan, QueryPlan):
        return plan.root, plan.order_by
    return plan, ()


def _final_select(root: PlanNode, rel: Relation, order_by: tuple[SortKey, ...],
                  extra: str = "") -> str:
    cols = ", ".join(quote(c) for c in root.column_names) + extra
    out = f"SELECT {cols}\nFROM {rel.name}"
    if order_by:
        out += "\nORDER BY " + ", ".join(_order_item(s.column, s.descending,
                                                     s.effective_nulls_first)
                                          for s in order_by)
    return out


def plain_sql(plan: QueryPlan | PlanNode) -> str:
    """The query itself in Spark SQL (the no-sketch baseline), with its ORDER BY."""
    root, order_by = _root(plan)
    c = _Compiler()
    rel = c.compile(root)
    return c.with_clause() + _final_select(root, rel, order_by)


def use_sql(plan: QueryPlan | PlanNode, sketch: Sketch) -> str:
    """The query reading only the sketch's fragments of each sketched table.

    Each scan of a sketched table gets the sketch's ranges (adjacent fragments merged) as
    a WHERE on the base table's own column, so Spark pushes it into the Parquet reader.
    """
    root, order_by = _root(plan)
    c = _Compiler(sketch=sketch)
    rel = c.compile(root)
    return c.with_clause() + _final_select(root, rel, order_by)


def annotated_sql(plan: QueryPlan | PlanNode, partitions: PartitionSet,
                  fragment_ids: FragmentIds = "case",
                  views: Mapping[str, str] | None = None,
                  fragment_views: Mapping[str, str] | None = None) -> str:
    """The annotated result: the query's rows plus ``__imp_ann``, each row's fragments.

    ``views`` maps a table to the view its scans read instead (e.g. one table version);
    with ``fragment_ids="view"`` scans of partitioned tables read the fragment views
    (``fragment_views``: table -> view, else those of ``prepare_fragment_views``).
    """
    root, _ = _root(plan)
    c = _Compiler(partitions=partitions, fragment_ids=fragment_ids, views=views,
                  fragment_views=fragment_views)
    rel = c.compile(root)
    ann = ann_union(rel.ann) if rel.ann else EMPTY_ANNOTATION
    return c.with_clause() + _final_select(root, rel, (), f", {ann} AS {quote(ANNOTATION_COLUMN)}")


@dataclass(frozen=True)
class AnnotatedRelation:
    """A plan subtree compiled to CTEs: ``with_clause`` defines ``name``, whose columns are
    the subtree's (``columns``) plus its annotation columns ``ann`` (name, is an
    ``ARRAY<INT>``); a row's fragments are the union of its annotation columns."""

    with_clause: str
    name: str
    columns: tuple[str, ...]
    ann: tuple[tuple[str, bool], ...]

    @property
    def annotation_sql(self) -> str:
        """The row's fragments as one sorted, duplicate-free ``ARRAY<INT>`` expression."""
        if not self.ann:
            return EMPTY_ANNOTATION
        return ann_union(tuple(AnnColumn(n, s) for n, s in self.ann))


def annotated_relation(node: PlanNode, partitions: PartitionSet,
                       fragment_ids: FragmentIds = "case",
                       views: Mapping[str, str] | None = None,
                       fragment_views: Mapping[str, str] | None = None,
                       substitutes: Mapping[PlanNode, Relation] | None = None
                       ) -> AnnotatedRelation:
    """``node`` compiled with annotation columns, for callers that aggregate over it (the
    state bootstrap); ``views`` / ``fragment_views`` as in ``annotated_sql``;
    ``substitutes``: subtrees read from views of their rows (each a ``Relation`` naming
    the view and its annotation columns) instead of compiled."""
    c = _Compiler(partitions=partitions, fragment_ids=fragment_ids, views=views,
                  fragment_views=fragment_views, substitutes=substitutes)
    rel = c.compile(node)
    return AnnotatedRelation(c.with_clause(), rel.name, tuple(node.column_names),
                             tuple((a.name, a.is_set) for a in rel.ann))


def capture_sql(plan: QueryPlan | PlanNode, partitions: PartitionSet,
                fragment_ids: FragmentIds = "case") -> str:
    """The capture query: one row, ``fragments``, the accurate sketch's global ids."""
    root, _ = _root(plan)
    c = _Compiler(partitions=partitions, fragment_ids=fragment_ids)
    rel = c.compile(root)
    if not rel.ann:  # no partitioned table in the query: the sketch is empty
        return f"SELECT CAST(array() AS ARRAY<INT>) AS {FRAGMENTS_COLUMN}"
    return (c.with_clause() + f"SELECT {ann_aggregate(rel.ann)} AS {FRAGMENTS_COLUMN}\n"
            f"FROM {rel.name}")


MAX_PREDICATE_RANGES = 16


def predicate_ranges(sketch: Sketch, table: str) -> list[Range]:
    """The ranges of ``table`` that the sketch's query filter keeps.

    Spark evaluates a long OR of ranges row by row outside generated code: at SF 1, 94
    ranges made q19 take 10.5 s against 0.6 s unfiltered, 16 ranges 1.4 s. A coarser
    superset of the sketch (still safe: same result) keeps the predicate short. Whatever
    skips data for the filter (file pruning) must use these same ranges: a safe sketch
    needs whole fragments, so keeping only part of a fragment the filter admits is wrong.
    """
    return sketch.coarsened(MAX_PREDICATE_RANGES).ranges(table)


def sketch_predicate(sketch: Sketch, table: str, column: str | None = None) -> str:
    """The sketch's condition on ``table`` with literals typed as the partition column.

    Same ranges as ``Sketch.predicate`` (adjacent fragments merged, NULLs with fragment 0),
    but written with exactly typed Spark literals (e.g. ``5L`` for BIGINT, ``12.50BD``).
    """
    found = sketch.partitions.for_table(table)
    if found is None:
        return "TRUE"
    part = found[0]
    col = quote(column or part.column)
    ranges = predicate_ranges(sketch, table)
    if not ranges:
        return "FALSE"
    conds = []
    for r in ranges:
        parts = []
        if r.lo is not None:
            parts.append(f"{col} >= {sql_literal(r.lo, part.dtype)}")
        if r.hi is not None:
            parts.append(f"{col} < {sql_literal(r.hi, part.dtype)}")
        cond = " AND ".join(parts) if parts else "TRUE"
        if r.includes_null and r.lo is None and parts:
            cond = f"({cond} OR {col} IS NULL)"
        conds.append(cond)
    return conds[0] if len(conds) == 1 else "(" + " OR ".join(f"({c})" for c in conds) + ")"
