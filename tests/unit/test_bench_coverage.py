"""``imp bench coverage`` (``benchmarks.coverage``): counts registered and refused query
files by construct, through the embedded engine (no Spark, no Ray)."""

from __future__ import annotations

import json
import time
from pathlib import Path

from workload_data import tpch_tables

from benchmarks.coverage import UNSAFE, format_table, run_coverage
from imp_core.workloads.queries import list_queries
from services.cli.main import main

FILES = {
    "a_good.sql": "-- sketch: lineitem.l_orderkey\n"
                  "SELECT l_returnflag, sum(l_quantity) AS q FROM lineitem "
                  "GROUP BY l_returnflag",
    "b_window.sql": "-- sketch: lineitem.l_orderkey\n"
                    "SELECT l_orderkey, lag(l_orderkey) OVER (ORDER BY l_orderkey) AS r "
                    "FROM lineitem",
    "c_unsafe.sql": "-- sketch: lineitem.l_orderkey\n"
                    "SELECT l_returnflag, sum(l_quantity) AS q FROM lineitem "
                    "GROUP BY l_returnflag HAVING sum(l_quantity) < 100000",
}


def _folder(tmp_path: Path) -> Path:
    for name, sql in FILES.items():
        (tmp_path / name).write_text(sql + "\n")
    (tmp_path / "notes.txt").write_text("not a query")
    return tmp_path


def test_coverage_counts_registered_and_refused_by_construct(tmp_path):
    folder = _folder(tmp_path)
    t0 = time.perf_counter()
    report = run_coverage(folder=folder, tables=tpch_tables(), progress=False)
    wall = time.perf_counter() - t0
    rows = {r["name"]: r for r in report["results"]}
    assert list(rows) == ["a_good", "b_window", "c_unsafe"]
    assert rows["a_good"]["status"] == "registered" and rows["a_good"]["error"] is None
    assert rows["a_good"]["sketch"] == ["lineitem.l_orderkey"]
    assert rows["b_window"]["status"] == "refused"
    assert rows["b_window"]["error"] == "UnsupportedSqlError"
    assert rows["b_window"]["construct"] == "window function lag"
    assert rows["c_unsafe"]["status"] == "refused"
    assert rows["c_unsafe"]["error"] == "UnsafeSketchError"
    assert rows["c_unsafe"]["construct"] == UNSAFE
    assert "HAVING" in rows["c_unsafe"]["reason"]
    # each file timed: a positive duration (a registration parses and plans SQL, far
    # above the 0.1 ms the report rounds to), all of them within the run's wall time
    assert all(r["seconds"] > 0 for r in rows.values()), rows
    assert sum(r["seconds"] for r in rows.values()) <= wall
    assert report["summary"] == {"total": 3, "registered": 1, "refused": 2, "errors": 0,
                                 "refused_by_construct": {UNSAFE: 1,
                                                          "window function lag": 1},
                                 "errors_by_construct": {}}
    text = format_table(report)
    assert "1 of 3 registered" in text and "window function" in text


def test_coverage_over_the_tpch22_suite_counts_22_files():
    report = run_coverage(tables=tpch_tables(), progress=False)
    rows = report["results"]
    assert [r["name"] for r in rows] == [q.name for q in list_queries("tpch22")]
    # all 22 TPC-H queries register as written (README), counted row by row
    assert [r["status"] for r in rows] == ["registered"] * 22, \
        [(r["name"], r["status"], r["construct"]) for r in rows]
    assert all(r["error"] is None and r["sketch"] for r in rows)
    assert report["summary"] == {"total": 22, "registered": 22, "refused": 0, "errors": 0,
                                 "refused_by_construct": {}, "errors_by_construct": {}}
    assert report["parameters"]["suite"] == "tpch22"


def test_cli_bench_coverage_json_prints_only_json(tmp_path, capsys, monkeypatch):
    import benchmarks.coverage as coverage

    monkeypatch.setattr(coverage, "tpch_tables", lambda *a, **k: tpch_tables())
    out = tmp_path / "coverage.json"
    folder = tmp_path / "queries"
    folder.mkdir()
    code = main(["bench", "coverage", "--folder", str(_folder(folder)), "--json",
                 "--out", str(out)])
    assert code == 0
    printed = json.loads(capsys.readouterr().out)  # stdout is JSON only
    assert printed["summary"]["total"] == 3 and printed["summary"]["registered"] == 1
    assert json.loads(out.read_text())["summary"] == printed["summary"]
