"""The scale model (``benchmarks.scale_model``): power laws and lines fitted to ``imp
bench scale`` reports recover the parameters they were made with, the largest scale
factor is predicted from the others, the nodes of a projection follow the projected
memory, and bad input is refused with a clear error."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from benchmarks.scale_model import fit, load_reports, markdown, scale_model


def _report(sf: float, noise: float = 1.0) -> dict:
    """A report whose times are exact powers of ``sf`` (times ``noise``), its sizes
    exact lines."""
    results = [{"query": "h01", "imp_ms": 2.0 * sf ** 0.5 * noise, "fm_s": 3.0 * sf,
                "state_mib": 0.1, "bootstrap_s": 5.0 * sf},
               {"query": "h02", "imp_ms": 10.0 * sf * noise, "fm_s": 1.0 * sf,
                "state_mib": 4.0 * sf, "bootstrap_s": None}]
    return {"benchmark": "scale", "parameters": {"sf": sf}, "results": results,
            "summary": {"state_total_mib": 4.1 * sf, "shared_indexes_mib": 100.0,
                        "shared_indexes_disk_mib": 1500.0 * sf,
                        "peak_machine_used_mib": 1000.0 + 2000.0 * sf,
                        "registration_total_s": 60.0 * sf ** 1.3},
            "memory": {"maintain": {"machine_used": 800.0 + 1500.0 * sf}}}


def test_power_laws_are_recovered_and_the_largest_predicted(tmp_path):
    model = scale_model([_report(1), _report(3), _report(10)], node_memory_gib=24)
    rows = {(r["quantity"], r["name"]): r for r in model["rows"]}
    assert rows[("imp_ms", "h01")]["b"] == pytest.approx(0.5)
    assert rows[("imp_ms", "h02")]["b"] == pytest.approx(1.0)
    assert rows[("registration_total_s", "service")]["b"] == pytest.approx(1.3)
    peak = rows[("peak_machine_mib", "service")]
    assert peak["form"] == "c + a*SF" and peak["b"] is None
    assert (peak["c"], peak["a"]) == (pytest.approx(1000.0), pytest.approx(2000.0))
    assert peak["check_predicted"] == pytest.approx(21000.0)  # from SF 1 and 3
    assert rows[("indexes_memory_mib", "service")]["b"] == pytest.approx(0.0, abs=1e-9)
    # SF 10 predicted from SF 1 and 3 alone: exact for exact powers
    assert rows[("imp_ms", "h02")]["check_predicted"] == pytest.approx(100.0)
    assert rows[("imp_ms", "h02")]["check_error"] == pytest.approx(0.0, abs=1e-9)
    # a quantity absent everywhere is not fitted, never extrapolated from nothing
    assert rows[("bootstrap_s", "h02")]["b"] is None
    assert rows[("bootstrap_s", "h02")]["projected"][100.0] is None
    # SF 1000: 1000 + 2000 * 1000 MiB over 24 GiB * 0.75 per node
    assert model["nodes"][1000.0] == -(-(1000.0 + 2000.0 * 1000) // (24 * 1024 * 0.75))
    text = markdown(model)
    assert "| h02 | 10.0 | 30.0 | 100.0 | 1.00 | 100.0 (+0%) |" in text
    assert "nodes of 24 GiB" in text and "| 1,000 + 2,000.0 SF |" in text


def test_noise_shows_in_the_check():
    model = scale_model([_report(1), _report(3), _report(10, noise=1.5)])
    row = next(r for r in model["rows"] if (r["quantity"], r["name"]) == ("imp_ms", "h02"))
    assert row["check_error"] == pytest.approx(1 / 1.5 - 1.0)


def test_fit_needs_two_scale_factors():
    assert fit([1.0], [5.0]) is None
    assert fit([1.0, 1.0], [5.0, 6.0]) is None
    assert fit([1.0, 10.0], [5.0, 0.0]) is None  # a zero has no logarithm
    a, b = fit([1.0, 10.0], [5.0, 50.0])
    assert a == pytest.approx(5.0) and b == pytest.approx(1.0)


def test_reports_are_checked_and_the_cli_prints_json(tmp_path):
    paths = []
    for sf in (1, 10):
        path = tmp_path / f"sf{sf}.json"
        path.write_text(json.dumps(_report(sf)))
        paths.append(str(path))
    assert [r["parameters"]["sf"] for r in load_reports(reversed(paths))] == [1, 10]
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"benchmark": "tpch", "results": []}))
    with pytest.raises(ValueError, match="not an `imp bench scale` report"):
        load_reports([bad])
    with pytest.raises(ValueError, match="same scale factor"):
        load_reports([paths[0], paths[0]])
    with pytest.raises(ValueError, match="two scale factors"):
        scale_model(load_reports(paths[:1]))
    run = subprocess.run([sys.executable, "-m", "services.cli", "bench", "scale-model",
                          *paths, "--json"], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    model = json.loads(run.stdout)
    assert model["scale_factors"] == [1, 10] and model["nodes"]["100.0"] >= 1
    refused = subprocess.run([sys.executable, "-m", "services.cli", "bench", "scale-model",
                              str(bad)], capture_output=True, text=True, timeout=120)
    assert refused.returncode == 2 and "not an `imp bench scale` report" in refused.stderr
