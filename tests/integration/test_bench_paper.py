"""The paper benchmark suites (issue 6) run end to end at a tiny scale and report the
documented keys; the figures themselves come only from the benchmark runs."""

from __future__ import annotations

import json

import pytest

from benchmarks.paper_docs import BEGIN, END, update_doc

REPORT_KEYS = {"benchmark", "environment", "load", "parameters", "results", "summary",
               "total_s", "plots"}


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    return tmp_path_factory.mktemp("bench-results")


@pytest.fixture(scope="module")
def data_root(tmp_path_factory):
    return tmp_path_factory.mktemp("imp-data")


@pytest.fixture(scope="module")
def spark():
    from imp_core.spark import SparkConfig, get_spark

    # Java 17+ is required (make test checks it): a missing runtime fails, never skips
    return get_spark(SparkConfig(master="local[2]", driver_memory="2g"))


def _check_report(path, benchmark):
    report = json.loads(path.read_text())
    assert REPORT_KEYS <= set(report), REPORT_KEYS - set(report)
    assert report["benchmark"] == benchmark
    env = report["environment"]
    for pkg in ("pyarrow", "pyspark", "ray", "deltalake", "matplotlib"):
        assert env["versions"][pkg], pkg
    assert len(report["load"]["at_start"]) == 3 and len(report["load"]["at_end"]) == 3
    assert report["plots"] and all(p.endswith(".png") for p in report["plots"])
    for p in report["plots"]:
        assert (path.parent / p.rsplit("/", 1)[-1]).stat().st_size > 1000
    return report


@pytest.mark.spark
def test_tpch_suite_tiny(spark, results, data_root):
    from benchmarks.tpch import run_tpch_bench

    out = results / "tpch.json"
    run_tpch_bench(sf=0.01, queries=["q14"], delta_sizes=[10, 50], fragments=20,
                   repeats=1, feed_repeats=1, data_root=data_root, progress=False, out=out)
    report = _check_report(out, "tpch")
    rows = report["results"]
    assert {(r["query"], r["delta"], r["kind"]) for r in rows} == {
        (q, d, k) for q in ("q14",) for d in (10, 50)
        for k in ("insert", "delete", "mixed")}
    for r in rows:
        assert {"imp_ms", "imp_ops_ms", "imp_join_ms", "imp_feed_ms", "fm_s", "fm_over_imp",
                "commit_s", "sketch_ok"} <= set(r)
        assert r["imp_ms"] > 0 and r["fm_s"] > 0 and r["sketch_ok"] is True
    for q in report["queries"]:
        assert q["sketch_ok"] is True and q["state_bytes"] > 0 and q["state_by_operator"]
    s = report["summary"]
    assert s["delta"] == 50 and set(s["fm_over_imp_mixed"]) == {"q14"}
    assert s["all_sketches_ok"] is True
    assert {"target_min_100_met", "target_median_500_met"} <= set(s)


@pytest.mark.spark
def test_tpch_suite_standard_query_batches_its_sketched_table(spark, results, data_root):
    """A query of the 22 (``h22``: sketch on ``customer.c_custkey`` by its header) is
    measured with batches of ``customer``, and its sketch checked against FM."""
    from benchmarks.tpch import run_tpch_bench, sketch_attribute

    table, column = sketch_attribute("h22")
    out = results / "tpch22.json"
    run_tpch_bench(sf=0.01, queries=["h22"], delta_sizes=[10], fragments=20, repeats=1,
                   feed_repeats=1, outside_repeats=1, data_root=data_root, progress=False,
                   out=out)
    report = _check_report(out, "tpch")
    assert report["failed"] == []
    (q,) = report["queries"]
    assert q["query"] == "h22" and q["sketch"] == f"{table}.{column}"
    assert q["sketch_ok"] is True
    if table != "lineitem":  # the header names another table (customer, today)
        assert report["setup"][f"{table}_rows"] > 0
    assert {(r["kind"], r["sketch_ok"]) for r in report["results"]} == {
        (k, True) for k in ("insert", "delete", "mixed")}
    assert all(r["imp_feed_ms"] is not None for r in report["results"])
    # batches committed by another writer (delta-rs MERGE / append), read from the feed
    assert all(r["imp_outside_ms"] is not None and r["fm_over_imp_outside"] is not None
               for r in report["results"])
    assert report["summary"]["min_ratio_outside"] > 0


@pytest.mark.spark
def test_micro_suite_tiny(spark, results, data_root):
    from benchmarks.micro import run_micro_bench

    out = results / "micro.json"
    run_micro_bench(rows=4000, experiments=["fragments", "buffers"], fragments=[10, 50],
                    delta_sizes=[10, 40], repeats=1, data_root=data_root, buffer_rows=1000,
                    buffer_updates=6, progress=False, out=out)
    report = _check_report(out, "micro")
    rows = [r for r in report["results"] if r["experiment"] != "buffers"]
    assert {(r["experiment"], r["variant"]) for r in rows} == {
        ("fragments", "10"), ("fragments", "50")}
    for r in rows:
        assert r["imp_ms"] > 0 and r["fm_s"] > 0 and r["per_tuple_us"] > 0
        assert r["sketch_ok"] is True
    buffers = [r for r in report["results"] if r["experiment"] == "buffers"]
    assert {(r["operator"], r["strategy"]) for r in buffers} >= {
        ("topk", s) for s in ("min", "random", "2:1", "4:1")}
    assert all(r["sketch_ok"] for r in buffers)
    assert "per_tuple_cost_ratio_max_vs_min_fragments" in report["summary"]


class _AllHelpers:
    """A store that already holds every join helper table (nothing is generated)."""

    def tables(self):
        from benchmarks.micro import helper_name

        return [helper_name(g, f, s) for g in (50, 5000, 500000) for f in (1, 2, 20, 50)
                for s in (0.01, 0.05, 0.1, 1.0)]


def test_micro_defines_every_experiment():
    from benchmarks.micro import EXPERIMENTS, cases

    store = _AllHelpers()
    got = cases([e for e in EXPERIMENTS if e != "buffers"], 100_000, store, 0, False)
    kinds = {c.experiment for c in got}
    assert kinds == set(EXPERIMENTS) - {"buffers"}
    assert {c.variant for c in got if c.experiment == "groups"} == {"50", "1000", "5000",
                                                                     "500000"}
    assert {c.variant for c in got if c.experiment == "joins"} == {
        "1-2000", "1-20", "1-1", "2-20", "20-20", "50-20"}
    assert sum(c.experiment == "bloom" for c in got) == 6


@pytest.mark.spark
def test_breakeven_suite_tiny(spark, results, data_root):
    from benchmarks.breakeven import run_breakeven_bench

    out = results / "breakeven.json"
    run_breakeven_bench(rows=4000, queries=["q_having_2"], shares=[0.01, 0.5],
                        bisect_steps=1, data_root=data_root, progress=False, out=out)
    report = _check_report(out, "breakeven")
    (r,) = report["results"]
    assert r["query"] == "q_having_2" and r["sketch_ok"] is True and r["points"]
    assert r["breakeven_share"] is not None or r["beyond_largest"]
    assert "target_10pct_single_table_met" in report["summary"]


@pytest.mark.spark
def test_mixed_suite_tiny(spark, results, data_root):
    from benchmarks.mixed import pattern, run_mixed_bench

    assert pattern("1U5Q", 8) == ["U", "Q", "Q", "Q", "Q", "Q", "U", "Q"]
    assert pattern("5U1Q", 7) == ["U"] * 5 + ["Q", "U"]
    out = results / "mixed.json"
    run_mixed_bench(rows=4000, operations=4, ratios=["1U1Q"], delta_sizes=[2],
                    data_root=data_root, progress=False, out=out)
    report = _check_report(out, "mixed")
    (r,) = report["results"]
    assert r["queries"] == 2 and r["updates"] == 2 and r["fm_recaptures"] == 2
    assert r["imp_s"] > 0 and r["fm_s"] > 0 and r["ns_s"] > 0 and r["same_result"] is True
    assert {"imp_capture_s", "imp_maintain_s", "imp_use_s", "fm_capture_s", "commit_s"} <= set(r)
    assert report["summary"]["configurations"] == 1


def test_strategies_suite_tiny_through_the_cli(results, data_root, capsys):
    from services.cli.main import main

    out = results / "strategies.json"
    code = main(["bench", "strategies", "--json", "--quiet", "--rows", "3000", "--updates",
                 "6", "--batch-sizes", "1,3", "--queries", "q_endtoend", "--data-root",
                 str(data_root), "--out", str(out)])
    assert code == 0
    rows = json.loads(capsys.readouterr().out)
    report = _check_report(out, "strategies")
    assert rows == report["results"]
    by = {(r["strategy"], r["batch"]): r for r in rows}
    assert set(by) == {("eager", 1), ("eager", 3), ("lazy", None)}
    assert by[("eager", 1)]["maintenances"] == 6  # one per update
    assert by[("eager", 3)]["maintenances"] == 2
    assert by[("lazy", None)]["maintenances"] == 1  # all updates at the final request


def test_memory_suite_tiny(results, data_root):
    from benchmarks.memory import run_memory_bench

    out = results / "memory.json"
    run_memory_bench(rows=3000, sf=0.01, delta_sizes=[10, 100], topk_buffers=[100, None],
                     sketch_fragments=[100, 1000], data_root=data_root, progress=False,
                     out=out)
    report = _check_report(out, "memory")
    assert {r["query"] for r in report["queries"]} >= {"q_groups_50", "q_joinsel_5pct"}
    for r in report["queries"]:
        assert r["state_bytes"] > 0 and r["operators"]
    joins = [r for r in report["queries"] if r["selectivity"]]
    assert all(any(o["kind"] == "join" and o["state_bytes"] > 0 for o in r["operators"])
               for r in joins)
    assert [r["buffer"] for r in report["topk_space"]] == [100, None]
    assert report["topk_space"][0]["topk_entries"] <= 100
    assert [r["fragments"] for r in report["sketches"]] == [100, 1000]


def test_docs_section_is_regenerated_in_place(results, tmp_path):
    doc = tmp_path / "benchmarks.md"
    doc.write_text("# Benchmark results\n\n## Engine throughput\n\nkept as it is\n")
    found = update_doc(doc, results, tmp_path / "img")
    assert found  # the reports written by the tests above
    text = doc.read_text()
    assert "kept as it is" in text and text.count(BEGIN) == 1 and text.count(END) == 1
    for name in found:
        assert f"imp bench {name}" in text
    update_doc(doc, results, tmp_path / "img")  # again: replaced, not appended
    again = doc.read_text()
    assert again.count(BEGIN) == 1 and "kept as it is" in again
    assert list((tmp_path / "img").glob("*.png"))


@pytest.mark.spark
def test_scale_suite_tiny(spark, results, data_root):
    """All queries in one service, changed together: each maintained on the commits of
    the tables it reads, each sketch equal to a recapture, memory sampled per phase."""
    from benchmarks.scale import markdown_table, run_scale_bench

    out = results / "scale.json"
    queries = ["h03", "h13", "h22"]
    # the page cache stays: emptying it would slow every other test of the run
    report = run_scale_bench(sf=0.01, queries=queries, delta=5, rounds=1, fragments=20,
                             data_root=data_root, progress=False, out=out, drop_cache=False)
    saved = json.loads(out.read_text())
    assert saved["benchmark"] == "scale" and saved["summary"] == report["summary"]
    assert len(saved["load"]["at_start"]) == 3 and len(saved["load"]["at_end"]) == 3
    assert report["failed"] == []
    assert report["spark_warm_up_s"] > 0  # Spark warmed before the first registration
    rows = report["results"]
    assert [r["query"] for r in rows] == queries
    # each query holds operator state, reported in MiB as the coordinator measured it
    state = {r["query"]: r["state_bytes"] for r in report["registered"]}
    assert all(n > 0 for n in state.values()), state
    for r in rows:
        assert r["sketch_ok"] is True and r["fm_s"] > 0
        # each registration is paired with a recapture at its versions
        assert r["fm_at_registration_s"] > 0 and r["registration_over_fm"] == round(
            r["bootstrap_s"] / r["fm_at_registration_s"], 2)
        assert r["state_mib"] == round(state[r["query"]] / 2**20, 1)
        assert r["imp_ms"] > 0 and r["commits_maintained"] > 0
    assert not any(r["page_cache_dropped"] for r in report["registered"])
    assert report["summary"]["registration_within_1_5x_fm"].endswith("of 3")
    # each commit maintained exactly the queries reading its table, nation/region unchanged
    changed = {m["table"] for m in report["maintained"]}
    assert "lineitem" in changed and "customer" in changed
    assert not changed & {"nation", "region"}
    reads = {"h03": {"customer", "orders", "lineitem"}, "h13": {"customer", "orders"},
             "h22": {"customer", "orders"}}
    for m in report["maintained"]:
        assert m["table"] in reads[m["query"]]
    for q, tables in reads.items():
        assert {(m["table"], m["kind"]) for m in report["maintained"] if m["query"] == q} \
            == {(t, k) for t in tables & changed for k in ("delete", "insert")}
    peaks = report["memory"]
    assert {"register", "maintain", "verify"} <= set(peaks)
    assert all(p["tree_rss"] > 0 and p["machine_used"] > 0 for p in peaks.values())
    assert report["summary"]["peak_tree_rss_mib"] >= max(
        r["tree_rss_mib_after"] for r in report["registered"])
    assert report["summary"]["sketches_equal_recapture"] == "3 of 3"
    assert markdown_table(report).count("\n| h") == 3
    # every query stayed live: no batch paid for restoring an evicted one
    assert report["service"]["evictions"] == 0 and report["service"]["restores"] == 0
    # one node (in-process workers) holds every query's state
    place = report["placement"]
    assert [n["node"] for n in place["nodes"]] == ["local"] and place["max_share"] == 1.0
    assert place["nodes"][0]["queries"] == queries
    assert place["total_mib"] == pytest.approx(sum(state.values()) / 2**20, abs=0.1)
