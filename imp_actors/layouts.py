"""Table layouts for the registered workload: advice, rewrites and the opt-in policy.

``Layouts.advise(table)`` weighs the orders the registered queries' sketches on the
table suggest (``imp_core.advice.layouts``) on the table's latest version;
``Layouts.apply`` rewrites the table in the order given or recommended
(``DeltaStore.layout``: one commit that changes no data, so no query has anything to
maintain and every sketch stays exact; the service's own commits wait for it). With
``layout_policy`` "apply" (IMP_LAYOUT_POLICY, off by default) the re-clustering check
(``imp_actors.reclustering``) applies each recommendation that reads at most
``LAYOUT_GAIN`` of what the current order reads.

Invariants: advice reads and writes nothing but the table's columns the sketches and
orders use; a refused or failed rewrite leaves the table and its catalog entry as they
were.
"""

from __future__ import annotations

import logging
from typing import Any

from imp_actors.context import RuntimeContext
from imp_actors.lifecycle import QueryRuntime
from imp_actors.table_writes import TableWriter
from imp_actors.types import SketchVersion
from imp_core.advice.layouts import LayoutAdvice, advise_layout
from imp_core.storage.clustering import cluster_column

log = logging.getLogger(__name__)
LAYOUT_GAIN = 0.8  # the policy rewrites only for at most this share of the current reads


class Layouts:
    def __init__(self, ctx: RuntimeContext, writer: TableWriter):
        self.ctx = ctx
        self.writer = writer

    def explain(self, q: QueryRuntime, sv: SketchVersion) -> dict[str, Any]:
        """Why ``q`` is sketched on its attributes (``imp_core.advice.attributes.explanation`` of
        its registration's advice and ``sv``), with the share of each sketched table
        its filter reads under the layout now (``read_share_now``)."""
        from imp_core.advice.attributes import Advice, explanation
        from imp_core.spark.compile import MAX_PREDICATE_RANGES
        from imp_core.storage.row_groups import fit_to_layout

        raw = q.record.advice
        out = explanation(Advice.from_json(raw) if raw else None, q.plan, sv.sketch)
        fit = fit_to_layout(sv.sketch, dict(sv.versions), self.ctx.spark.layout,
                            MAX_PREDICATE_RANGES)
        out.update(query=q.name, sketch_seq=sv.seq, read_share_now=fit.shares)
        return out

    def advise(self, table: str) -> LayoutAdvice:
        """The recommended order of ``table`` for the sketches of the queries on it."""
        store = self.ctx.store
        entry = store.entry(table)
        sketches = {}
        for q in self.ctx.queries.reading([entry.name]):
            latest = q.history.latest
            if latest is not None and latest.sketch.partitions.for_table(entry.name):
                sketches[q.name] = latest.sketch
        current = tuple(entry.sketch_columns) or \
            ((cluster_column(store, entry.name),) if cluster_column(store, entry.name)
             else ())
        columns = {s.partitions.for_table(entry.name)[0].column for s in sketches.values()}
        columns.update(current)
        version = store.version(entry.name)
        data = store.read(entry.name, version, columns=sorted(columns)) if columns \
            else None
        if data is None:
            return advise_layout(entry.name, {}, store.schema(entry.name).empty_table(),
                                 current)
        return advise_layout(entry.name, sketches, data, current,
                             page_rows=store.options.page_rows or 2048,
                             max_group_rows=store.options.max_row_group_size)

    def apply(self, table: str, columns: tuple[str, ...] = (),
              rows_per_group: int | None = None) -> tuple[Any, LayoutAdvice | None]:
        """Rewrite ``table`` in the order of ``columns`` (none: the recommendation);
        returns the rewrite (``LayoutResult``) and the advice it followed, if any."""
        advice = None
        if not columns:
            advice = self.advise(table)
            columns = advice.recommended
            if not columns:
                raise ValueError(f"no order to lay {table} out in: {advice.why}; name "
                                 "the columns")
        result = self.writer.rewrite(
            table, lambda: self.ctx.store.layout(table, columns, rows_per_group))
        self.ctx.counters["layout_rewrites"] += 1
        log.info("laid %s out by %s (%s): version %d, %d row groups in %.1f s", table,
                 ", ".join(result.columns), result.order, result.version,
                 result.row_groups, result.seconds)
        return result, advice

    def apply_policy(self) -> list[str]:
        """The policy's pass: every table a registered query sketches, rewritten where its
        recommendation reads at most ``LAYOUT_GAIN`` of the current order's rows."""
        done = []
        for table in self.ctx.queries.tables():
            try:
                advice = self.advise(table)
                best = advice.option(advice.recommended)
                now = advice.option(advice.current)
                if best is None or advice.recommended == advice.current or (
                        now is not None and best.rows_read > LAYOUT_GAIN * now.rows_read):
                    continue
                self.apply(table, advice.recommended)
                done.append(table)
            except Exception as exc:  # noqa: BLE001 - one table's failure stops no other
                log.error("laying %s out failed: %s", table, exc)
                self.ctx.counters["layout_errors"] += 1
        return done
