"""``imp bench tpcds`` end to end at SF 0.01 (Spark local, Delta, delta-rs as the outside
writer): per query its attribute (header or advisor), its batch table (a fact table),
inserts with fresh keys, the report's fields, and every maintained sketch equal to its
recapture; a query refused at registration is listed with its reason, not run."""

from __future__ import annotations

import json

import pytest


@pytest.fixture(scope="module")
def spark():
    from imp_core.spark import SparkConfig, get_spark

    # Java 17+ is required (make test checks it): a missing runtime fails, never skips
    return get_spark(SparkConfig(master="local[2]", driver_memory="2g"))


@pytest.mark.spark
def test_tpcds_bench_tiny(spark, tmp_path):
    from benchmarks.tpcds import FACTS, FRESH, markdown_table, run_tpcds_bench
    from imp_core.workloads.queries import load_query

    out = tmp_path / "tpcds.json"
    # ds03: header store_sales.ss_item_sk; ds22: refused (unsafe on every attribute)
    run_tpcds_bench(sf=0.01, queries=["ds03", "ds22"], delta_sizes=[10], fragments=20,
                    repeats=1, feed_repeats=0, outside_repeats=1, data_root=tmp_path,
                    progress=False, out=out)
    report = json.loads(out.read_text())
    assert report["benchmark"] == "tpcds" and report["parameters"]["sf"] == 0.01
    assert report["failed"] == []
    assert [r["query"] for r in report["refused"]] == ["ds22"]
    assert report["refused"][0]["reason"]
    (q,) = report["queries"]
    assert q["query"] == "ds03" and q["table"] in FACTS
    assert q["sketch_via"] in ("header", "advisor")
    if q["sketch_via"] == "header":
        assert q["sketch"] == "{}.{}".format(*load_query("ds03").sketch[0])
    assert q["fresh_keys"] == FRESH[q["table"]]
    # maintained from the service's commits and from the outside writer's: both checked
    assert q["sketch_ok"] is True and len(q["checks"]) == 2
    assert q["state_bytes"] > 0 and q["bootstrap_s"] > 0 and q["fm_s"] > 0
    assert {(r["mode"], r["kind"]) for r in report["samples"]} == {
        (m, k) for m in ("own", "outside") for k in ("insert", "delete", "mixed")}
    for r in report["results"]:
        assert r["imp_ms"] > 0 and r["imp_outside_ms"] > 0 and r["sketch_ok"] is True
        assert r["fm_over_imp_outside"] > 0
    s = report["summary"]
    assert s["all_sketches_ok"] is True and s["refused_queries"] == ["ds22"]
    assert set(s["fm_over_imp_outside"]) == {"ds03"}
    table = markdown_table(report).splitlines()
    assert len(table) == 4 and table[2].startswith("| ds03 |")
    assert table[3].startswith("| ds22 | refused: ")
    # the inserted copies carry fresh keys above the generated ones, and the batch table
    # has its row count again
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    from benchmarks.paper_common import count_rows, open_store

    store = open_store(tmp_path / "bench" / "paper-tpcds-sf0.01")
    column = FRESH[q["table"]]
    generated = pq.read_table(tmp_path / "data" / "tpcds-sf0.01" / f"{q['table']}.parquet",
                              columns=[column]).column(0)
    now = store.read(q["table"], columns=[column]).column(0)
    assert pc.max(now).as_py() > pc.max(generated).as_py()
    assert count_rows(store, q["table"]) == len(generated)
