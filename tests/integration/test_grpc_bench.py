"""``imp bench grpc`` at a tiny scale: a real ``imp serve`` subprocess, clients in their
own processes; the JSON it prints and the report it writes hold the promised keys."""

from __future__ import annotations

import json

import pytest

from services.cli.main import main

pytestmark = [pytest.mark.grpc, pytest.mark.integration]

KEYS = {"clients", "calls", "calls_per_s", "getsketch_p50_ms", "getsketch_p99_ms",
        "failed_calls", "noop_calls_per_s", "ratio_to_noop"}


def test_bench_grpc_json(tmp_path, capsys):
    out = tmp_path / "grpc.json"
    code = main(["bench", "grpc", "--json", "--clients", "1,3", "--seconds", "0.5",
                 "--rounds", "2", "--warmup", "0.2", "--rows", "2000", "--fragments", "16",
                 "--paced-rate", "20", "--processes", "1", "--quiet", "--out", str(out)])
    assert code == 0
    results = json.loads(capsys.readouterr().out)
    assert [r["clients"] for r in results] == [1, 3]
    for r in results:
        assert KEYS <= set(r) and r["mode"] == "back-to-back"
        assert r["calls"] > 0 and r["failed_calls"] == 0
        assert 0 < r["getsketch_p50_ms"] <= r["getsketch_p99_ms"]
        assert r["calls_per_s"] > 0 and r["noop_calls_per_s"] > 0
        # the no-op server of the same run, with the same clients: the ratio of the two
        assert r["rounds"] == 2 and len(r["noop_round_calls_per_s"]) == 2
        assert r["ratio_to_noop"] == pytest.approx(
            r["mean_calls_per_s"] / r["noop_calls_per_s"], abs=1e-3)
        low, high = r["ratio_to_noop_ci90"]  # resampled rounds: around the ratio
        assert low <= r["ratio_to_noop"] + 1e-3 and r["ratio_to_noop"] - 1e-3 <= high
    report = json.loads(out.read_text())
    assert report["bench"] == "grpc" and report["results"] == results
    [paced] = report["paced"]
    assert paced["clients"] == 3 and paced["rate_per_client"] == 20 and paced["calls"] > 0
    summary = report["summary"]
    assert summary["clients"] == 3 and summary["failed_calls"] == 0
    assert {"getsketch_p50_ms_met", "getsketch_p99_ms_met", "calls_per_s", "ratio_to_noop",
            "ratio_to_noop_met"} <= set(summary)
    assert report["server"]["service"]["methods"]["GetSketch"]["calls"] >= sum(
        r["calls"] for r in results)
