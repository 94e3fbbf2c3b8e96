"""``benchmarks.cold_probes``: both modes over one disk base, timed and checked against
the plain search (the page cache is left alone here: dropping it is for benchmark runs)."""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pytest

from benchmarks import cold_probes, scale
from imp_core.storage import index_bases


def test_both_modes_find_the_same_rows(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(scale, "drop_page_cache", lambda: False)
    monkeypatch.setattr(index_bases, "FENCE", 4)
    hashes = np.sort(np.random.default_rng(1).integers(0, 300, 5000)).astype(np.int64)
    rows = pa.table({"k": hashes, "s": pa.array([f"v{i % 7}" for i in range(5000)]),
                     index_bases.COUNT: np.ones(5000, np.int64)})
    index_bases.DiskBase.write(tmp_path, 3, index_bases.Part(rows, hashes), ["k", "s"])
    assert cold_probes.main([str(tmp_path), "--keys", "20", "--trials", "2", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert [r["mode"] for r in report] == ["plain", "advised"] * 2
    assert all(r["same_rows"] and r["rows"] > 0 and not r["cold"] for r in report)
    assert all(r["first_ms"] > 0 and r["warm_ms"] > 0 for r in report)


def test_a_folder_without_a_base_is_a_clear_error(tmp_path, capsys):
    assert cold_probes.main([str(tmp_path)]) == 2
    assert "no disk index base" in capsys.readouterr().err
    with pytest.raises(ValueError):
        cold_probes.run(tmp_path)
