"""Scheduled re-clustering (``imp_actors/reclustering.py``): a table a registered query
reads, left out of order on its cluster column by another writer's appends, is
rewritten in order by the coordinator's control loop; the rewrite's change feed is
empty, sketches stay equal to a recapture, tables no query reads are left alone, and a
failed rewrite is counted and retried at the next check. A real Delta store, written to
by delta-rs as the other writer; the local backend (no Ray or Spark needed)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pyarrow as pa
import pytest
from deltalake import write_deltalake
from runtime_support import make_config, reference_sketch
from waiting import wait_until

from imp_actors.coordinator import Coordinator
from imp_actors.types import QuerySpec
from imp_core.storage import DeltaStore, WriteOptions
from imp_core.storage.clustering import decayed

pytestmark = [pytest.mark.integration]

SQL = ("-- sketch: t.k\n"
       "SELECT g, sum(v) AS s FROM t GROUP BY g HAVING sum(v) > 1000")
SMALL = WriteOptions(max_row_group_size=50, target_file_size=8192)
DOMAINS = {"v": (0, 100)}  # sums of values >= 0: the HAVING is safe on t.k


def _rows(keys: np.ndarray) -> pa.Table:
    return pa.table({"k": pa.array(keys, pa.int64()), "g": pa.array(keys % 7, pa.int64()),
                     "v": pa.array((keys * 37) % 101, pa.int64())})


def _decay(store: DeltaStore, table: str, rng: np.random.Generator) -> None:
    """Another writer appends three files of rows whose keys span the table's whole
    range: a lookup of one key then reads each of them besides its own row group."""
    odd = rng.choice(np.arange(1, 4000, 2), 120, replace=False)
    for part in np.split(odd, 3):
        write_deltalake(store.entry(table).location, _rows(np.sort(part)), mode="append")


def test_decayed_tables_are_reclustered_and_sketches_stay_exact(tmp_path):
    store = DeltaStore(tmp_path, SMALL)
    for name in ("t", "u"):  # u: read by no query
        store.create_table(name, _rows(np.arange(0, 4000, 2)), key=("k",), cluster_by=("k",),
                           domains=DOMAINS)
    rng = np.random.default_rng(3)
    # the scheduled checks start once the tables have decayed (a check between the
    # decay and the reading of its version would rewrite t too early for the test)
    config = make_config(tmp_path, poll_seconds=None, recluster_every_s=None)
    c = Coordinator(config).start()
    try:
        c.register(QuerySpec("q", SQL, partitions={"t.k": 16}))
        assert decayed(c.ctx.store, ["t", "u"]) == []
        for name in ("t", "u"):
            _decay(c.ctx.store, name, rng)
        assert decayed(c.ctx.store, ["t", "u"]) == ["t", "u"]
        appended = c.ctx.store.version("t")
        sv = c.get_sketch("q")
        assert sv.sketch == reference_sketch(c, "q", sv)
        c.ctx.config = replace(c.config, recluster_every_s=0.2)

        wait_until(lambda: c.ctx.counters["reclustered_tables"] >= 1, timeout=60,
                   interval=0.1, what="a table to be reclustered")
        rewritten = c.ctx.store.version("t")
        assert rewritten == appended + 1
        assert c.ctx.store.version("u") == appended  # both had the same commits
        assert c.ctx.store.changes("t", appended, rewritten).num_rows == 0
        assert decayed(c.ctx.store, ["t", "u"]) == ["u"]  # no query reads u
        sv = c.get_sketch("q")
        assert sv.versions["t"] == rewritten
        assert sv.sketch == reference_sketch(c, "q", sv)
        # the table stays in order across the next commits of the service itself
        c.apply_update("t", inserts=_rows(np.array([4001, 4003])),
                       deletes=_rows(np.array([0, 2])))
        sv = c.get_sketch("q")
        assert sv.sketch == reference_sketch(c, "q", sv)
    finally:
        c.close(checkpoint=False)


def test_a_failed_rewrite_is_counted_and_retried(tmp_path):
    store = DeltaStore(tmp_path, SMALL)
    store.create_table("t", _rows(np.arange(0, 4000, 2)), key=("k",), cluster_by=("k",),
                       domains=DOMAINS)
    config = make_config(tmp_path, poll_seconds=None)  # checks only when asked here
    c = Coordinator(config).start()
    try:
        c.register(QuerySpec("q", SQL, partitions={"t.k": 16}))
        _decay(c.ctx.store, "t", np.random.default_rng(5))
        before = c.ctx.store.version("t")
        optimize = c.ctx.store.optimize

        def refuse(table: str) -> int:
            raise OSError("disk full")

        c.ctx.store.optimize = refuse
        assert c.loop.reclustering.run() == []
        assert c.ctx.counters["recluster_errors"] == 1
        assert c.ctx.store.version("t") == before  # nothing written
        c.ctx.store.optimize = optimize
        assert c.loop.reclustering.run() == [("t", before + 1)]
        assert decayed(c.ctx.store, ["t"]) == []
        sv = c.get_sketch("q")
        assert sv.sketch == reference_sketch(c, "q", sv)
    finally:
        c.close(checkpoint=False)


def test_layout_policy_lays_sketched_tables_out_for_their_sketches(tmp_path):
    """Issue 27: with IMP_LAYOUT_POLICY=apply the re-clustering check lays a sketched
    table out in the recommended order (here by the sketched column, not the key) as a
    commit without data change; sketches stay exact, what the filter reads falls."""
    store = DeltaStore(tmp_path)
    keys = np.arange(0, 20000)
    rng = np.random.default_rng(5)
    store.create_table("t", pa.table({"k": keys, "g": rng.permutation(keys) % 500,
                                      "v": (keys * 37) % 101}),
                       key=("k",), cluster_by=("k",), domains=DOMAINS)
    sql = "SELECT g, sum(v) AS s FROM t WHERE g < 20 GROUP BY g"
    config = make_config(tmp_path, poll_seconds=None, recluster_every_s=0.2,
                         layout_policy="apply")
    c = Coordinator(config).start()
    try:
        c.register(QuerySpec("q", sql, partitions={"t.g": 32}))
        before = c.explain("q")["read_share_now"]["t"]
        advice = c.layout("t", dry_run=True)["advice"]
        assert advice["recommended"] == ["g"] and advice["current"] == ["k"]
        wait_until(lambda: c.ctx.counters["layout_rewrites"] >= 1, timeout=60,
                   interval=0.1, what="a layout rewrite")
        assert c.ctx.store.entry("t").sketch_columns == ("g",)
        sv = c.get_sketch("q")
        assert sv.sketch == reference_sketch(c, "q", sv)
        after = c.explain("q")["read_share_now"]["t"]
        assert before > 0.9 and after < 0.2
        # asked for by hand: a named order, refused columns change nothing
        version = c.ctx.store.version("t")
        with pytest.raises(Exception, match="no column"):
            c.layout("t", ("nope",))
        assert c.ctx.store.version("t") == version
        done = c.layout("t", ("g", "k"))["result"]
        assert done.order == "z-order" and c.ctx.store.version("t") == version + 1
        sv = c.get_sketch("q")
        assert sv.sketch == reference_sketch(c, "q", sv)
    finally:
        c.close()
