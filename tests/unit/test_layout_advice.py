"""The layout advice weighs what each registered query would really read (issue 50,
friction item): a query whose fitted filter would read more than the cut-off
(IMP_SKETCH_MAX_READ_SHARE) runs plain and reads the whole table, so an order that is
best on average but pushes a query past the cut-off is charged for it; every order names
the queries it makes read more (above all those it makes lose their sketch), and the
LayoutTable answer and ``imp layout`` / ``imp explain`` say so. No server: the advice on
in-memory columns, the answer through the proto conversion, the CLI on a fake client."""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pytest

from imp_core.advice.layouts import advise_layout, charged
from imp_core.sketch.partition import PartitionSet, RangePartition
from imp_core.sketch.sketch import Sketch
from imp_core.storage.layout import LayoutResult
from services import convert
from services.cli import commands
from services.cli.main import main
from services.cli.output import describe_explanation

N = 6000
QA = (2, 7, 12, 17, 22, 28)  # the a-fragments of six queries on t.a


def _workload() -> tuple[pa.Table, dict[str, Sketch]]:
    """t stored in b order, b following a loosely (b = a // 20 + noise): six queries
    each read one a-fragment of 32, one query (qb) one b-fragment of 16. In a-order the
    six read least and qb more than half of t; in Z-order of (a, b) all read some."""
    rng = np.random.default_rng(4)
    a = rng.integers(0, 2000, N)
    data = pa.table({"k": np.arange(N), "a": a, "b": a // 20 + rng.integers(0, 60, N)})
    data = data.sort_by("b")
    by_a = RangePartition.equi_depth("t", "a", data.column("a"), 32)
    by_b = RangePartition.equi_depth("t", "b", data.column("b"), 16)
    sketches = {f"qa{f}": Sketch(PartitionSet((by_a,)), [f]) for f in QA}
    sketches["qb"] = Sketch(PartitionSet((by_b,)), [3])
    return data, sketches


def _advise(**kw):
    data, sketches = _workload()
    return advise_layout("t", sketches, data, ("b",), page_rows=64, max_group_rows=1000, **kw)


def test_an_order_best_on_average_that_costs_a_query_its_sketch_is_not_recommended():
    advice = _advise()
    by = {o.columns: o for o in advice.options}
    assert set(by) == {("a",), ("b",), ("a", "b")}
    cheapest = min(advice.options, key=lambda o: o.rows_read)
    # a-order has the fewest filter rows over all queries, but pushes qb past the cut-off
    assert cheapest.columns == ("a",)
    assert by[("a",)].shares["qb"] > 0.5 >= advice.shares_now["qb"]
    assert by[("a",)].loses_sketch == ("qb",)
    (lost,) = by[("a",)].warnings
    assert lost.query == "qb" and lost.loses_sketch
    assert lost.share_now == pytest.approx(advice.shares_now["qb"])
    assert lost.share_after == pytest.approx(by[("a",)].shares["qb"])
    # ... charged qb's whole table, it reads more than the Z-order, which is recommended
    for o in advice.options:
        assert o.rows_charged == charged(o.shares, N, 0.5)
    assert by[("a",)].rows_charged == pytest.approx(
        N + sum(s * N for q, s in by[("a",)].shares.items() if q != "qb"), abs=1)
    assert by[("a",)].rows_charged > by[("a", "b")].rows_charged
    assert advice.recommended == advice.chosen == ("a", "b")
    assert advice.rows_charged_now > by[("a", "b")].rows_charged
    # the recommendation's own warnings: qb reads more, but keeps its sketch
    assert [w.query for w in advice.warnings] == ["qb"] and not advice.warnings[0].loses_sketch
    assert "reads" in advice.warning_lines()[0] and "up from" in advice.warning_lines()[0]
    # without a cut-off (every filter kept) the same figures recommend the a-order
    assert _advise(max_read_share=1.0).recommended == ("a",)


def test_an_order_asked_for_carries_its_warnings():
    advice = _advise(asked=("a",))
    assert advice.chosen == ("a",) and advice.recommended == ("a", "b")
    (w,) = advice.warnings
    assert w.query == "qb" and w.loses_sketch
    line = advice.warning_lines()[0]
    assert line.startswith(f"qb reads {100 * w.share_after:.1f}% of t in this order, up "
                           f"from {100 * w.share_now:.1f}%")
    assert "past the 50% cut-off it loses its sketch on t" in line
    doc = advice.to_json()
    assert doc["warnings"] == [w.to_json()] and doc["chosen"] == ["a"]
    assert doc["max_read_share"] == 0.5 and doc["rows_charged_now"] > 0


def test_shares_measured_now_are_the_baseline():
    """What each query reads now comes from the table's pages when the caller measured
    them (ExplainSketch's ``read_share_now``); a query past the cut-off now already runs
    plain, so the a-order costs it no sketch (it still reads more, and says so)."""
    measured = {f"qa{f}": 0.9 for f in QA} | {"qb": 0.51}
    advice = _advise(shares_now=measured)
    assert dict(advice.shares_now) == measured and advice.rows_charged_now == 7 * N
    a_order = advice.option(("a",))
    assert a_order is not None and a_order.loses_sketch == ()
    (w,) = a_order.warnings
    assert w.query == "qb" and w.share_now == 0.51 and not w.loses_sketch
    # the ranking is the options' own: the baseline only decides whether any beats it
    assert advice.recommended == ("a", "b")


def test_nothing_is_recommended_that_reads_more_than_the_table_as_stored():
    data, sketches = _workload()
    data = data.sort_by("a")  # already in the order the a-queries want
    only_a = {q: s for q, s in sketches.items() if q != "qb"}
    kept = advise_layout("t", only_a, data, (), page_rows=64, max_group_rows=1000)
    assert kept.recommended == () and "no order would be read less" in kept.why
    assert "keep the table as is" in kept.why
    same = advise_layout("t", only_a, data, ("a",), page_rows=64, max_group_rows=1000)
    assert same.recommended == ("a",) and "(the current order)" in same.why


class _LayoutClient:
    """``SketchClient.layout`` and ``explain`` answered from a coordinator-shaped
    document, through the proto messages as the server sends them."""

    def __init__(self):
        self.calls = []

    def layout(self, table, columns=(), rows_per_group=0, dry_run=False):
        self.calls.append((table, tuple(columns), dry_run))
        advice = _advise(asked=tuple(columns)).to_json()
        result = None if dry_run else LayoutResult(
            table, 7, tuple(columns) or tuple(advice["recommended"]), "range", N, 6, 1000,
            0.5)
        return convert.layout_from_proto(convert.layout_to_proto(
            {"result": result, "advice": advice}))

    def explain(self, name, fresh=True):
        doc = {"query": name, "mode": "given", "chosen": ["t.b"], "why": "named",
               "read_share_now": {"t": 0.649}, "max_read_share": 0.5,
               "sketch_unused": ["t"]}
        return convert.explanation_from_proto(convert.explanation_to_proto(doc))

    def close(self):
        pass


@pytest.fixture
def client(monkeypatch):
    fake = _LayoutClient()
    monkeypatch.setattr(commands, "_client", lambda args: fake)
    return fake


def test_the_answer_and_imp_layout_name_the_queries_an_order_makes_worse(client, capsys):
    assert main(["layout", "t", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "recommended order: a, b" in out and "now (as stored)" in out
    # the a-order's line names qb losing its sketch; the Z-order's, qb reading more
    assert "reads more: qb reads" in out and "loses its sketch on t" in out
    assert "warning: in a, b: qb reads" in out
    assert main(["layout", "t", "--by", "a"]) == 0
    out = capsys.readouterr().out
    assert "t: laid out by a (range) as version 7" in out
    warned = [line for line in out.splitlines() if line.startswith("warning:")]
    assert len(warned) == 1 and warned[0].startswith("warning: laid out by a: qb reads")
    assert "past the 50% cut-off it loses its sketch on t (runs plain there)" in warned[0]
    assert main(["layout", "t", "--by", "a", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    (w,) = doc["advice"]["warnings"]
    assert w["query"] == "qb" and w["loses_sketch"] and w["share_after"] > 0.5 >= w["share_now"]
    assert doc["advice"]["chosen"] == ["a"] and doc["applied"]
    by = {tuple(o["columns"]): o for o in doc["advice"]["options"]}
    assert by[("a",)]["rows_charged"] > by[("a", "b")]["rows_charged"]
    assert by[("a",)]["warnings"][0]["loses_sketch"]
    assert client.calls[-1] == ("t", ("a",), False)


def test_imp_explain_says_when_the_layout_leaves_the_sketch_unused(client, capsys):
    assert main(["explain", "qb"]) == 0
    out = capsys.readouterr().out
    assert "warning: the sketch is unused on t: its filter would read 64.9% of the rows" in out
    assert "past the 50% cut-off" in out
    assert main(["explain", "qb", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["sketch_unused"] == ["t"] and doc["max_read_share"] == 0.5
    used = describe_explanation({"query": "q", "chosen": ["t.b"], "read_share_now": {"t": 0.2},
                                 "sketch_unused": [], "max_read_share": 0.5})
    assert not any("unused" in line for line in used)
