"""A layout that makes a registered query worse says so (issue 50, friction item: ``imp
layout orders`` applied the Z-order best on average and h03 lost its sketch on orders
without a word). The coordinator's advice charges a query pushed past the cut-off the
whole table; LayoutTable names the queries an order makes read more, above all those it
makes lose their sketch; the rewrite logs them; ExplainSketch says when the layout now
leaves a sketch unused; the layout policy applies only what still gains under that
weighting. The local backend on a real Delta store (no Ray, no Spark)."""

from __future__ import annotations

import logging

import numpy as np
import pyarrow as pa
import pytest
from runtime_support import make_config, reference_sketch

from imp_actors.coordinator import Coordinator
from imp_actors.layouts import LAYOUT_GAIN
from imp_actors.types import QuerySpec
from imp_core.storage import DeltaStore, WriteOptions
from services import convert
from services.cli.output import describe_layout

pytestmark = [pytest.mark.integration]

N = 6000
A_RANGES = (100, 400, 800, 1100, 1400, 1800)


def _start(tmp_path) -> Coordinator:
    """t stored in b order (its cluster column), b following a loosely: six queries read
    a narrow a-range each, qb a b-range whose rows spread over most of a's domain."""
    rng = np.random.default_rng(4)
    a = rng.integers(0, 2000, N)
    data = pa.table({"k": np.arange(N), "a": a, "b": a // 20 + rng.integers(0, 90, N)})
    store = DeltaStore(tmp_path / "tables", WriteOptions(max_row_group_size=1000, page_rows=64))
    store.create_table("t", data, key=("k",), cluster_by=("b",))
    config = make_config(tmp_path, poll_seconds=None, recluster_every_s=None,
                         layout_policy="apply")
    c = Coordinator(config, store=store).start()
    for i, lo in enumerate(A_RANGES):
        c.register(QuerySpec(f"qa{i}", f"SELECT a, count(*) AS n FROM t WHERE a >= {lo} "
                             f"AND a < {lo + 50} GROUP BY a", partitions={"t.a": 32}))
    c.register(QuerySpec("qb", "SELECT b, count(*) AS n FROM t WHERE b >= 40 AND b < 60 "
                         "GROUP BY b", partitions={"t.b": 16}))
    return c


def test_layouts_that_cost_a_query_its_sketch_are_weighed_named_and_logged(tmp_path, caplog):
    c = _start(tmp_path)
    try:
        before = c.explain("qb")
        assert before["read_share_now"]["t"] <= 0.5 and before["sketch_unused"] == []
        advice = c.layout("t", dry_run=True)["advice"]
        assert advice["current"] == ["b"]
        assert advice["shares_now"]["qb"] == pytest.approx(before["read_share_now"]["t"], abs=1e-5)
        by = {tuple(o["columns"]): o for o in advice["options"]}
        # a-order: fewest filter rows over all queries, but qb past the cut-off ...
        assert min(by.values(), key=lambda o: o["rows_read"]) is by[("a",)]
        (lost,) = by[("a",)]["warnings"]
        assert lost["query"] == "qb" and lost["loses_sketch"]
        assert lost["share_now"] <= 0.5 < lost["share_after"]
        # ... charged qb's whole table: the Z-order is recommended
        assert by[("a",)]["rows_charged"] > by[("a", "b")]["rows_charged"]
        assert advice["recommended"] == advice["chosen"] == ["a", "b"]
        assert all(not w["loses_sketch"] for w in advice["warnings"])

        # the policy applies the recommendation (it gains counting qb whole) and logs
        # that qb reads more in it
        version = c.ctx.store.version("t")
        with caplog.at_level(logging.WARNING, logger="imp_actors.layouts"):
            assert c.layouts.apply_policy() == ["t"]
        assert c.ctx.store.entry("t").sketch_columns == ("a", "b")
        assert c.ctx.store.version("t") == version + 1
        assert any("laid t out by a, b: qb reads" in r.getMessage() for r in caplog.records)
        assert c.explain("qb")["sketch_unused"] == []

        # asked for by hand: the a-order is written, and the answer, the log, the CLI
        # and explain all say qb lost its sketch on t
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="imp_actors.layouts"):
            done = c.layout("t", ("a",))
        assert done["result"].columns == ("a",)
        (w,) = done["advice"]["warnings"]
        assert w["query"] == "qb" and w["loses_sketch"] and done["advice"]["chosen"] == ["a"]
        assert any("loses its sketch on t" in r.getMessage() for r in caplog.records)
        answer = convert.layout_from_proto(convert.layout_to_proto(done))
        assert answer["advice"]["warnings"] == done["advice"]["warnings"]
        text = "\n".join(describe_layout(answer))
        assert "warning: laid out by a: qb reads" in text and "loses its sketch on t" in text
        after = c.explain("qb")
        assert after["sketch_unused"] == ["t"] and after["read_share_now"]["t"] > 0.5
        assert after["max_read_share"] == 0.5
        assert convert.explanation_from_proto(
            convert.explanation_to_proto(after))["sketch_unused"] == ["t"]
        for name in [f"qa{i}" for i in range(len(A_RANGES))] + ["qb"]:
            sv = c.get_sketch(name)
            assert sv.sketch == reference_sketch(c, name, sv)  # no data changed

        # the policy now: the Z-order would give qb its sketch back, but counting what
        # every query reads it does not gain enough over the a-order: nothing is written
        again = c.layouts.advise("t")
        best = again.option(again.recommended)
        assert best is not None and again.recommended == ("a", "b")
        assert best.rows_charged > LAYOUT_GAIN * again.rows_charged_now
        version = c.ctx.store.version("t")
        assert c.layouts.apply_policy() == []
        assert c.ctx.store.version("t") == version
    finally:
        c.close()
