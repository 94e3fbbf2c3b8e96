"""The engine benchmark and the demo run end to end at a tiny scale."""

from __future__ import annotations

import json

from benchmarks.engine import run_engine_bench, summarize
from services.cli.main import main

KEYS = {"query", "delta_size", "fragments", "tuples_per_s", "batch_ms_p50", "batch_ms_p95",
        "batches", "bootstrap_s", "state_bytes", "sketch_fragments"}


def test_engine_bench_reports_documented_keys():
    report = run_engine_bench(rows=3000, delta_sizes=[10, 100], fragments=[10, 50],
                              min_seconds=0.0, min_batches=2, max_batches=2, progress=False)
    assert {"environment", "parameters", "results"} <= set(report)
    assert report["environment"]["versions"]["pyarrow"]
    rows = report["results"]
    assert len(rows) == 2 * 2 * 2  # queries x fragments x delta sizes
    for r in rows:
        assert KEYS <= set(r)
        assert r["tuples_per_s"] > 0 and r["batch_ms_p50"] > 0 and r["batches"] == 2
    assert {r["query"] for r in rows} == {"q_having_2", "q_joinsel"}
    summary = summarize(report)
    assert "max_batch_ms_p50_at_delta_10" in summary


def test_cli_bench_engine_json(capsys, tmp_path):
    out = tmp_path / "engine.json"
    code = main(["bench", "engine", "--json", "--quiet", "--rows", "2000", "--queries",
                 "q_having_2", "--delta-sizes", "10", "--fragments", "10",
                 "--min-seconds", "0", "--out", str(out)])
    assert code == 0
    rows = json.loads(capsys.readouterr().out)
    assert isinstance(rows, list) and rows[0]["query"] == "q_having_2"
    assert KEYS <= set(rows[0])
    assert json.loads(out.read_text())["results"] == rows


def test_demo_runs_and_all_sketches_are_exact(tmp_path, capsys):
    from services.demo_engine import run_demo

    assert run_demo(rows=4000, batches=2, tpch_scale=0.01, data_dir=tmp_path, batch_size=20)
    out = capsys.readouterr().out
    assert "all sketches exact" in out
    assert "q_having_2" in out and "q03" in out
