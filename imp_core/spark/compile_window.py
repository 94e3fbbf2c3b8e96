"""Spark SQL of the window node (``imp_core.plan.nodes.Window``).

A mixin of the plan compiler (``imp_core.spark.compile._Compiler``), like
``compile_joins``. One CTE: the input's columns, each call as Spark's own window
function, and (annotated) one ``ARRAY<INT>`` annotation column replacing the input's,
with the semantics and provenance of the engine's ``WindowOp``:

- rank, dense_rank and aggregates over a "range" frame use ``OVER (PARTITION BY p ORDER
  BY o)``, whose default frame is ``RANGE BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW``
  (peers included); "partition" frames ``OVER (PARTITION BY p)``;
- row_number and "rows" frames order by the total order of ``imp_core.engine.ordering``
  (the order keys, every other input column ascending NULLS FIRST, then, annotated, the
  row's annotation array) with ``ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW``;
  rows tied on all of these are identical, so which gets which number does not change
  the result;
- the annotation: the union of the annotation columns of the partition's rows (frame
  "partition"), else of the rows up to the row's last peer: ``collect_set`` over the
  RANGE window of the order keys.
"""

from __future__ import annotations

from imp_core.plan.nodes import Window
from imp_core.spark.sql_text import AnnColumn, CompilerHost, Relation, ann_union, quote


def _item(column: str, descending: bool, nulls_first: bool) -> str:
    return (f"{quote(column)} {'DESC' if descending else 'ASC'} "
            f"NULLS {'FIRST' if nulls_first else 'LAST'}")


class WindowCompiler(CompilerHost):
    """``_Window``, mixed into the compiler (``CompilerHost``)."""

    def _Window(self, node: Window) -> Relation:
        child = self.compile(node.input)
        by = ", ".join(quote(c) for c in node.partition_by)
        part = f"PARTITION BY {by}" if by else ""
        peer_keys = [_item(s.column, s.descending, s.effective_nulls_first)
                     for s in node.order]
        ordered = {s.column for s in node.order}
        total_keys = peer_keys + [_item(c, False, True) for c in node.input.column_names
                                  if c not in ordered]
        if child.ann:
            total_keys.append(f"{ann_union(child.ann)} ASC")
        peers = f"{part} ORDER BY {', '.join(peer_keys)}".strip() if peer_keys else part
        total = (f"{part} ORDER BY {', '.join(total_keys)} ROWS BETWEEN UNBOUNDED "
                 f"PRECEDING AND CURRENT ROW").strip()
        cols = [quote(c) for c in node.input.column_names]
        for call in node.calls:
            if call.ranking:
                spec = total if call.func == "row_number" else peers
                cols.append(f"{call.func.upper()}() OVER ({spec}) AS {quote(call.name)}")
                continue
            arg = None if call.arg is None else quote(call.arg)
            spec = total if node.frame == "rows" else peers
            cols.append(f"{call.function.spark_sql(arg)} OVER ({spec}) AS {quote(call.name)}")
        ann: tuple[AnnColumn, ...] = ()
        if child.ann:
            out = self._new_ann(True)
            parts = [f"flatten(collect_set({quote(a.name)}) OVER ({peers}))" if a.is_set
                     else f"collect_set({quote(a.name)}) OVER ({peers})" for a in child.ann]
            inner = parts[0] if len(parts) == 1 else f"concat({', '.join(parts)})"
            cols.append(f"array_sort(array_distinct({inner})) AS {quote(out.name)}")
            ann = (out,)
        return self._cte(f"SELECT {', '.join(cols)}\n  FROM {child.name}", ann)
