"""What the service asks of Spark: queries with or without a sketch, full recaptures
(the paper's FM baseline), first operator states, and large deltas.

Invariants: every run reads the tables exactly at the versions it is given (temp views
named as the tables over that version's Parquet files); one run at a time, because the
views are shared by the session; Spark starts only when something here is first used.
"""

from __future__ import annotations

import threading
import time
from typing import Any, Mapping

import pyarrow as pa

from imp_actors.types import QueryResult
from imp_core.engine.pipeline import EngineOptions
from imp_core.plan.nodes import QueryPlan
from imp_core.query.data_layer import DataLayer, JoinPlacement
from imp_core.query.driver import QueryDriver
from imp_core.sketch.partition import PartitionSet
from imp_core.sketch.sketch import Sketch


class SparkWork:
    def __init__(self, store: Any):
        from imp_core.storage.row_groups import StoreLayout

        self.store = store
        self._lock = threading.Lock()
        self._delta_source: Any = None
        self.layout = StoreLayout(store)

    def session(self) -> Any:
        from imp_core.spark.session import get_spark

        return get_spark()

    def delta_source(self) -> Any:
        """A ``SparkDeltaSource`` over the store (for ranges of large change files)."""
        if self._delta_source is None:
            from imp_core.spark.deltas import SparkDeltaSource

            self._delta_source = SparkDeltaSource(self.store, self.session())
        return self._delta_source

    def run(self, plan: QueryPlan, versions: Mapping[str, int],
            sketch: Sketch | None = None, max_read_share: float = 1.0) -> QueryResult:
        """The query over the tables at ``versions``, scans filtered by ``sketch`` where
        its filter reads at most ``max_read_share`` of a table's rows (otherwise that
        table is read whole, ``imp_core.spark.access``; none filtered: the plain query).
        The result names no sketch version: the caller knows which one it used."""
        from imp_core.spark.access import choose_access
        from imp_core.spark.compile import MAX_PREDICATE_RANGES
        from imp_core.spark.run import run_query
        from imp_core.storage.row_groups import fit_to_layout

        choice = used = None
        layout = fit_to_layout(sketch, versions, self.layout, MAX_PREDICATE_RANGES) \
            if sketch is not None else None
        if layout is not None:
            choice = choose_access(layout.sketch, max_read_share, layout.shares)
            used = choice.sketch
        from imp_core.storage.file_side import scan_counts

        scans = scan_counts(plan.root)
        rows = {t: self.layout.rows(t, v) for t, v in versions.items()}
        sizes = {t: self.layout.bytes(t, v) for t, v in versions.items()}
        with self._lock:
            spark = self.session()
            files = self._table_views(spark, versions, used)
            run = run_query(spark, plan, used)
        # files left out of the views by their statistics count as skipped, too
        skipped = {t: max(files[t] - run.files_read.get(t, 0), 0) for t in files}
        return QueryResult(run.rows, run.seconds, dict(run.rows_read), dict(run.files_read),
                           skipped, access="plain" if used is None else "sketch",
                           access_reason=choice.reason if choice is not None else "",
                           read_share=choice.read_share if choice is not None else {},
                           table_rows=rows, table_bytes=sizes, table_scans=scans,
                           bytes_estimate={t: scans.get(t, 1) * (
                               round(layout.byte_shares.get(t, 1.0) * n)
                               if choice is not None and t in choice.filtered else n)
                               for t, n in sizes.items()})

    def recapture(self, plan: QueryPlan, partitions: PartitionSet,
                  versions: Mapping[str, int]) -> tuple[Sketch, float]:
        """The accurate sketch captured from scratch at ``versions``, and its time."""
        from imp_core.spark.run import capture_run

        with self._lock:
            spark = self.session()
            t0 = time.perf_counter()
            self._table_views(spark, versions)
            run = capture_run(spark, plan, partitions)
        return run.sketch, time.perf_counter() - t0

    def first_state(self, plan: QueryPlan, partitions: PartitionSet, options: EngineOptions,
                    versions: Mapping[str, int], placement: JoinPlacement = frozenset()
                    ) -> dict[str, pa.Table]:
        """Every operator's state at ``versions`` computed on Spark (state tables), in the
        layout of the pipeline wired with ``placement`` (a probed side's state is its
        Bloom filter and versions, whichever data layer later answers its probes; none
        for a side of whole-table keys where the workers read shared indexes)."""
        with self._lock:
            data = DataLayer(self.store, self.session)
            driver = QueryDriver.start(plan, partitions, options, data, placement)
            return driver.spark_state(self.session(), self.store, versions,
                                      index_served=data.index_served)

    def _table_views(self, spark: Any, versions: Mapping[str, int],
                     sketch: Sketch | None = None) -> dict[str, int]:
        """Temp views named as the tables over their files at ``versions`` (for a table
        the sketch filters, only the files its filter may read); returns the number of
        files of each table's snapshot."""
        from imp_core.spark.skipping import sketch_files
        from imp_core.spark.tables import snapshot_frame

        out = {}
        for t, v in versions.items():
            found = sketch.partitions.for_table(t) if sketch is not None else None
            if found is None:
                df, out[t] = snapshot_frame(spark, self.store, t, v)
            else:
                table_id, stats = self.store.file_stats(t, v, found[0].column)
                keep = sketch_files(sketch, t, stats)
                df, _ = snapshot_frame(spark, self.store, t, v, (table_id, keep))
                out[t] = len(stats)
            df.createOrReplaceTempView(t)
        return out
