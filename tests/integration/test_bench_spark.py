"""``imp bench spark`` runs end to end at a tiny scale and reports the documented keys."""

from __future__ import annotations

import json

import pyarrow as pa
import pytest

from benchmarks.spark import summarize
from imp_core.oracle.results import same_rows

pytestmark = pytest.mark.spark

KEYS = {"query", "sketch_attr", "fm_s", "bootstrap_s", "ns_s", "use_s", "rows_read_ns",
        "rows_read_use", "rows_read_share", "same_result", "sketch_matches_capture",
        "delta_ms"}
DELTA_KEYS = {"table", "delta_size", "delta_ms", "delta_ms_spark", "delta_ms_direct"}


@pytest.fixture(scope="module")
def spark():
    from imp_core.spark import SparkConfig, get_spark

    # Java 17+ is required (make test checks it): a missing runtime fails, never skips
    return get_spark(SparkConfig(master="local[2]", driver_memory="2g"))


def test_same_rows_is_a_multiset_comparison_with_float_tolerance():
    a = pa.table({"k": [1, 2, 2], "v": [0.1 + 0.2, 1.0, 1.0]})
    b = pa.table({"k": [2, 1, 2], "v": [1.0, 0.3, 1.0]})
    assert same_rows(a, b)
    assert not same_rows(a, pa.table({"k": [1, 2, 3], "v": [0.3, 1.0, 1.0]}))
    assert not same_rows(a, a.slice(0, 2))


def test_cli_bench_spark_json_tiny(spark, tmp_path, capsys):
    from services.cli.main import main

    out = tmp_path / "spark.json"
    code = main(["bench", "spark", "--json", "--quiet", "--sf", "0.01", "--rows", "5000",
                 "--queries", "q03,q_groups_5000", "--fragments", "20", "--delta-sizes",
                 "10,100", "--repeats", "1", "--bootstrap", "both",
                 "--data-root", str(tmp_path / "imp"),
                 "--out", str(out)])
    assert code == 0
    rows = json.loads(capsys.readouterr().out)
    assert [r["query"] for r in rows] == ["q03", "q_groups_5000"]
    for r in rows:
        assert KEYS <= set(r), KEYS - set(r)
        assert r["same_result"] and r["sketch_matches_capture"]
        assert r["bootstrap"] == "spark" and r["bootstrap_spark_queries"] > 0
        assert r["bootstrap_engine_s"] > 0
        assert r["rows_read_ns"] > 0 and 0 < r["rows_read_share"] <= 1
        assert set(r["delta_ms"]) == {"10", "100"}
        assert set(r["delta_ms"]["10"]) == {"spark", "direct"}
    report = json.loads(out.read_text())
    assert report["results"] == rows
    assert {"environment", "parameters", "results", "deltas", "summary"} <= set(report)
    assert {(d["table"], d["delta_size"]) for d in report["deltas"]} == {
        ("lineitem", 10), ("lineitem", 100), ("t5000g", 10), ("t5000g", 100)}
    for d in report["deltas"]:
        assert DELTA_KEYS <= set(d) and d["delta_ms_spark"] > 0
    summary = summarize(report)
    assert summary == report["summary"]
    assert "q03_rows_read_share" in summary and summary["all_same_result"]
