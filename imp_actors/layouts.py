"""Table layouts for the registered workload: advice, rewrites and the opt-in policy.

``Layouts.advise(table)`` weighs the orders the registered queries' sketches on the
table suggest (``imp_core.advice.layouts``) on the table's latest version, against what
each query's filter reads of the table as it is stored now (its pages, as ExplainSketch
measures ``read_share_now``), charging a query pushed past the cut-off
(``sketch_max_read_share``, IMP_SKETCH_MAX_READ_SHARE) the whole table;
``Layouts.apply`` rewrites the table in the order given or recommended
(``DeltaStore.layout``: one commit that changes no data, so no query has anything to
maintain and every sketch stays exact; the service's own commits wait for it), with the
advice of that order: the queries it makes read more, and those it makes lose their
sketch, are named in the answer and logged. With ``layout_policy`` "apply"
(IMP_LAYOUT_POLICY, off by default) the re-clustering check (``imp_actors.reclustering``)
applies each recommendation whose charged rows are at most ``LAYOUT_GAIN`` of what the
queries read now, so an order that makes a query lose its sketch is applied only when the
total still gains that much counting that query's whole table.

Invariants: advice reads and writes nothing but the table's columns the sketches and
orders use (and their files' footers); a refused or failed rewrite leaves the table and
its catalog entry as they were.
"""

from __future__ import annotations

import logging
from dataclasses import asdict
from typing import Any

from imp_actors.context import RuntimeContext
from imp_actors.lifecycle import QueryRuntime
from imp_actors.table_writes import TableWriter
from imp_actors.types import SketchVersion
from imp_core.advice.layouts import LayoutAdvice, advise_layout
from imp_core.storage.clustering import cluster_column
from imp_core.storage.layout import check_columns

log = logging.getLogger(__name__)
# the policy rewrites only for at most this share of the rows the queries read now
LAYOUT_GAIN = 0.8


class Layouts:
    def __init__(self, ctx: RuntimeContext, writer: TableWriter):
        self.ctx = ctx
        self.writer = writer

    def explain(self, q: QueryRuntime, sv: SketchVersion) -> dict[str, Any]:
        """Why ``q`` is sketched on its attributes (``imp_core.advice.attributes.explanation`` of
        its registration's advice and ``sv``), with the share of each sketched table
        its filter reads under the layout now (``read_share_now``) and the tables where
        that share is over the cut-off, so queries run plain there and the sketch saves
        nothing (``sketch_unused``, under ``max_read_share``)."""
        from imp_core.advice.attributes import Advice, explanation
        from imp_core.spark.compile import MAX_PREDICATE_RANGES
        from imp_core.storage.row_groups import fit_to_layout

        raw = q.record.advice
        out = explanation(Advice.from_json(raw) if raw else None, q.plan, sv.sketch)
        fit = fit_to_layout(sv.sketch, dict(sv.versions), self.ctx.spark.layout,
                            MAX_PREDICATE_RANGES)
        cut = self.ctx.config.sketch_max_read_share
        out.update(query=q.name, sketch_seq=sv.seq, read_share_now=fit.shares,
                   max_read_share=cut,
                   sketch_unused=sorted(t for t, s in fit.shares.items() if s > cut),
                   probed_join_sides=sorted(q.record.placement),
                   indexes=[asdict(i) for i in q.indexes])
        return out

    def advise(self, table: str, columns: tuple[str, ...] = ()) -> LayoutAdvice:
        """The recommended order of ``table`` for the sketches of the queries on it,
        weighed against what they read as it is stored now; ``columns``: an order asked
        for, weighed too, whose warnings the advice carries (``UnknownColumnError`` for
        a column the table lacks)."""
        from imp_core.spark.compile import MAX_PREDICATE_RANGES
        from imp_core.storage.row_groups import fit_to_layout

        store = self.ctx.store
        entry = store.entry(table)
        asked = check_columns(store.schema(entry.name), columns, entry.name) if columns \
            else ()
        sketches = {}
        for q in self.ctx.queries.reading([entry.name]):
            latest = q.history.latest
            if latest is not None and latest.sketch.partitions.for_table(entry.name):
                sketches[q.name] = latest.sketch
        clustered = cluster_column(store, entry.name)
        current = tuple(entry.sketch_columns) or ((clustered,) if clustered else ())
        cut = self.ctx.config.sketch_max_read_share
        if not sketches:  # nothing to weigh: read nothing
            return advise_layout(entry.name, {}, store.schema(entry.name).empty_table(),
                                 current, max_read_share=cut, asked=asked)
        columns_read = {s.partitions.for_table(entry.name)[0].column
                        for s in sketches.values()}
        columns_read.update(current)
        columns_read.update(asked)
        version = store.version(entry.name)
        data = store.read(entry.name, version, columns=sorted(columns_read))
        now = {}
        for name, sketch in sketches.items():  # what each reads of the pages as they are
            share = fit_to_layout(sketch, {entry.name: version}, self.ctx.spark.layout,
                                  MAX_PREDICATE_RANGES).shares.get(entry.name)
            if share is not None:
                now[name] = share
        return advise_layout(entry.name, sketches, data, current,
                             page_rows=store.options.page_rows or 2048,
                             max_group_rows=store.options.max_row_group_size,
                             max_read_share=cut, shares_now=now, asked=asked)

    def apply(self, table: str, columns: tuple[str, ...] = (),
              rows_per_group: int | None = None) -> tuple[Any, LayoutAdvice]:
        """Rewrite ``table`` in the order of ``columns`` (none: the recommendation);
        returns the rewrite (``LayoutResult``) and the advice of the order written (its
        ``warnings``: the queries it makes read more, each also logged). Nothing is
        written when the advice cannot be made or no order is recommended."""
        advice = self.advise(table, tuple(columns))
        if not advice.chosen:
            raise ValueError(f"no order to lay {table} out in: {advice.why}; name the "
                             "columns")
        return self._rewrite(table, advice, rows_per_group), advice

    def _rewrite(self, table: str, advice: LayoutAdvice, rows_per_group: int | None) -> Any:
        """Rewrite ``table`` in ``advice.chosen``, logging the queries it makes worse."""
        columns = advice.chosen
        result = self.writer.rewrite(
            table, lambda: self.ctx.store.layout(table, columns, rows_per_group))
        self.ctx.counters["layout_rewrites"] += 1
        log.info("laid %s out by %s (%s): version %d, %d row groups in %.1f s", table,
                 ", ".join(result.columns), result.order, result.version,
                 result.row_groups, result.seconds)
        for line in advice.warning_lines():
            log.warning("laid %s out by %s: %s", table, ", ".join(result.columns), line)
        return result

    def apply_policy(self) -> list[str]:
        """The policy's pass: every table a registered query sketches, rewritten where its
        recommendation is charged at most ``LAYOUT_GAIN`` of the rows the queries read
        now (a query past the cut-off counting the whole table, now and after)."""
        done = []
        for table in self.ctx.queries.tables():
            try:
                advice = self.advise(table)
                best = advice.option(advice.recommended)
                if best is None or advice.recommended == advice.current or \
                        best.rows_charged > LAYOUT_GAIN * advice.rows_charged_now:
                    continue
                self._rewrite(table, advice, None)  # logs the queries it makes worse
                done.append(table)
            except Exception as exc:  # noqa: BLE001 - one table's failure stops no other
                log.error("laying %s out failed: %s", table, exc)
                self.ctx.counters["layout_errors"] += 1
        return done
