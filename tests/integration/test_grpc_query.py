"""RunQuery over a real gRPC channel: a registered query run on Spark with its current
sketch filtering the scans returns the same rows as without it, reading no more rows;
results too large for one message are refused with RESOURCE_EXHAUSTED."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from grpc_harness import running_service
from runtime_support import random_batch

from imp_core.workloads.queries import load_query
from services.client import RemoteError
from services.server_config import Limits

pytestmark = [pytest.mark.grpc, pytest.mark.spark, pytest.mark.integration]

QUERIES = {"groups": "q_groups_1000", "having": "q_having_2", "join": "q_join"}


@pytest.fixture(scope="module")
def spark():
    from imp_core.spark import SparkConfig, get_spark

    # the session is cached per process and shared with the other Spark test modules;
    # the coordinator's run_query uses whichever session runs
    yield get_spark(SparkConfig(master="local[2]", driver_memory="2g"))


@pytest.fixture(scope="module")
def svc(spark, tmp_path_factory):
    root = tmp_path_factory.mktemp("grpc-query")
    limits = Limits(max_message_bytes=256 * 1024, max_batch_bytes=128 * 1024)
    with running_service(root, limits=limits) as service:
        client = service.client()
        for name, wq in QUERIES.items():
            (table, column), = load_query(wq).sketch
            client.register(name, load_query(wq).sql, partitions={f"{table}.{column}": 32})
        for table in ("t1000g", "t5000g"):  # laid out so that sketches on a can skip
            client.layout(table, ["a"])
        rng = np.random.default_rng(5)
        for step in range(2):
            for table in ("t1000g", "t5000g"):
                inserts, deletes = random_batch(service.coordinator.ctx.store, table, rng, 20,
                                                salt=20_000_000 + 1000 * step)
                client.apply_update(table, inserts=inserts, deletes=deletes)
        yield service


def _same_rows(a: pa.Table, b: pa.Table) -> bool:
    if a.schema.names != b.schema.names or a.num_rows != b.num_rows:
        return False
    exact = [f.name for f in a.schema if not pa.types.is_floating(f.type)]
    keys = [(n, "ascending") for n in exact]
    a, b = a.sort_by(keys), b.sort_by(keys)
    for name in a.schema.names:
        x, y = a.column(name), b.column(name)
        if name in exact:
            if not x.equals(y):
                return False
        elif not np.allclose(x.to_numpy(), y.to_numpy(), rtol=1e-9, equal_nan=True):
            return False
    return True


@pytest.mark.parametrize("name", list(QUERIES))
def test_query_with_sketch_equals_without(svc, name):
    client = svc.client()
    current = client.sketch(name)
    with_sketch = client.run_query(query=name, use_sketch=True)
    without = client.run_query(query=name, use_sketch=False)
    assert with_sketch.sketch is not None and without.sketch is None
    assert with_sketch.sketch.seq == current.seq
    assert with_sketch.sketch.fragments == current.fragments
    assert _same_rows(with_sketch.rows, without.rows)
    assert with_sketch.rows.num_rows > 0
    table = load_query(QUERIES[name]).sketch[0][0]
    assert 0 < with_sketch.rows_read[table] <= without.rows_read[table]
    assert with_sketch.seconds > 0 and without.seconds > 0
    assert set(with_sketch.files_skipped) >= {table}


def test_the_sketch_is_used_only_where_it_reads_less(svc):
    """Issue 14: a sketch whose filter keeps most of a table costs the user time (its
    predicate on every row, little skipped). RunQuery then reads the table without it and
    says so; a selective sketch still filters; the rows are the plain query's either way."""
    client = svc.client()
    client.register("broad", "SELECT count(*) AS n, sum(b) AS s FROM t1000g",
                    partitions={"t1000g.a": 32})
    broad = client.run_query(query="broad", use_sketch=True)
    plain = client.run_query(query="broad", use_sketch=False)
    assert broad.sketch is not None and broad.access == "plain"
    assert broad.read_share == {"t1000g": 1.0} and "plain query" in broad.access_reason
    assert _same_rows(broad.rows, plain.rows)
    assert broad.rows_read["t1000g"] == plain.rows_read["t1000g"]
    for name, wq in QUERIES.items():
        table = load_query(wq).sketch[0][0]
        used = client.run_query(query=name, use_sketch=True)
        # 3,000 rows are two pages: no sketch of these tables skips a page
        assert used.access == ("sketch" if used.read_share[table] <= 0.5 else "plain")
    # a table of many pages laid out by the sketched column: the selective sketch filters
    rng = np.random.default_rng(9)
    n = 60_000
    svc.coordinator.ctx.store.create_table("wide", pa.table({
        "id": np.arange(n), "a": rng.integers(0, 6000, n), "b": rng.integers(0, 100, n)}),
        key=("id",), domains={"b": (0, 99)})
    client.layout("wide", ["a"])
    client.register("selective", "SELECT a, sum(b) AS s FROM wide GROUP BY a "
                    "ORDER BY a DESC LIMIT 10", partitions={"wide.a": 64})
    used = client.run_query(query="selective", use_sketch=True)
    plain = client.run_query(query="selective", use_sketch=False)
    assert used.access == "sketch" and used.read_share["wide"] <= 0.5
    assert _same_rows(used.rows, plain.rows) and used.rows.num_rows > 0
    assert used.rows_read["wide"] < plain.rows_read["wide"] == n
    for name in ("broad", "selective"):
        client.drop(name)


def test_sql_of_a_registered_query_uses_its_sketch(svc):
    client = svc.client()
    sql = load_query(QUERIES["groups"]).sql
    by_sql = client.run_query(sql=sql, use_sketch=True)
    by_name = client.run_query(query="groups", use_sketch=True)
    assert by_sql.sketch is not None and by_sql.sketch.query == "groups"
    assert _same_rows(by_sql.rows, by_name.rows)
    plain = client.run_query(sql="SELECT a, count(*) AS n FROM t1000g WHERE a < 10 GROUP BY a",
                             use_sketch=False)
    assert plain.sketch is None
    assert pc.sum(plain.rows.column("n")).as_py() == pc.sum(pc.less(
        svc.coordinator.ctx.store.read("t1000g").column("a"), 10)).as_py()


def test_result_larger_than_a_message_is_refused(svc):
    client = svc.client()
    before = svc.state()
    with pytest.raises(RemoteError) as info:
        client.run_query(sql="SELECT id, a, b, c, d, e, f, g, h, i, j, k FROM t5000g",
                         use_sketch=False)
    assert info.value.code == "RESOURCE_EXHAUSTED" and "LIMIT" in info.value.message
    assert svc.state() == before


def test_cli_query_json(svc, capsys, tmp_path):
    import json

    import pyarrow.parquet as pq
    from grpc_harness import TOKEN

    from services.cli.main import main

    conn = ["--target", svc.address, "--token", TOKEN]
    assert main(["query", "--query", "groups", "--json", *conn]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["sketch"]["query"] == "groups" and out["rows"]
    assert set(out["rows"][0]) == {"a", "ab"} and out["rows_read"]["t1000g"] > 0
    path = tmp_path / "rows.parquet"
    assert main(["query", "--sql", "SELECT a, b FROM t1000g WHERE a < 5", "--no-sketch",
                 "--out", str(path), "--json", *conn]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["sketch"] is None and out["rows"] == f"written to {path}"
    assert pq.read_table(path).num_rows == pc.sum(pc.less(
        svc.coordinator.ctx.store.read("t1000g").column("a"), 5)).as_py()
    assert main(["query", "--query", "groups", *conn]) == 0
    text = capsys.readouterr().out
    assert "rows in" in text and "the sketch of groups" in text and "Spark read" in text


def test_run_query_reports_what_spark_read(svc):
    """Issue 27: the read share shown is what Spark's scans returned, beside the
    estimate, with the table's rows and bytes and the bytes of the pages read."""
    client = svc.client()
    for name, wq in QUERIES.items():
        table = load_query(wq).sketch[0][0]
        used = client.run_query(query=name, use_sketch=True)
        plain = client.run_query(query=name, use_sketch=False)
        rows = svc.coordinator.ctx.store.read(table).num_rows
        assert used.table_rows[table] == plain.table_rows[table] == rows
        # the plain query's own filters may skip pages too (q_join's b < 1000)
        assert 0 < used.rows_read_share()[table] <= plain.rows_read_share()[table] <= 1.0
        assert plain.table_bytes[table] > 0 and plain.table_scans[table] == 1
        assert plain.bytes_estimate[table] == plain.table_bytes[table]
        assert 0 < used.bytes_estimate[table] <= used.table_bytes[table]
        if used.access == "sketch":
            # the estimate counts whole pages the filter meets, as the reader skips them
            assert used.rows_read[table] <= used.read_share[table] * rows * 1.05 + 4096


def test_registration_without_attribute_chooses_one_and_explains(svc):
    """Issue 27: RegisterQuery with auto_partitions (and without partitions or header)
    chooses safe attributes by what the filtered query reads; ExplainSketch lists every
    candidate with its verdict and figures; the chosen sketch is exact."""
    client = svc.client()
    sql = ("SELECT a, sum(b) AS s FROM t1000g GROUP BY a "
           "HAVING sum(b) > 0 ORDER BY s DESC LIMIT 5")
    info, explained = client.register_explained("advised", sql, partitions="auto")
    assert explained["mode"] == "auto" and explained["chosen"]
    assert [f"{p['table']}.{p['column']}" for p in info.partitions] == explained["chosen"]
    by = {c["attribute"]: c for c in explained["candidates"]}
    assert "t1000g.a" in by and "group-by" in by["t1000g.a"]["roles"]
    for attr in explained["chosen"]:
        assert by[attr]["safe"] and by[attr]["evaluated"]
        assert 0 <= by[attr]["read_share"] <= 1 and by[attr]["size"] >= 1
    again = client.explain("advised")
    assert again["chosen"] == explained["chosen"] and again["why"] == explained["why"]
    assert again["sketch_fragments"] == len(client.sketch("advised").fragments)
    sketch, _ = svc.coordinator.recapture("advised")
    assert set(sketch.fragments) == set(client.sketch("advised").fragments)
    # no header and no partitions: the advisor chooses too; a global sum says why
    info, explained = client.register_explained("advised_sum",
                                                "SELECT sum(b) AS s FROM t1000g")
    assert explained["chosen"] and "global aggregate" in explained["why"]
    assert "every range" in client.explain("advised_sum")["coverage"]
    with pytest.raises(RemoteError) as refused:
        client.explain("no_such_query")
    assert refused.value.code == "NOT_FOUND"
    for name in ("advised", "advised_sum"):
        client.drop(name)


def test_cli_register_auto_and_explain(svc, capsys):
    import json

    from grpc_harness import TOKEN

    from services.cli.main import main

    conn = ["--target", svc.address, "--token", TOKEN]
    assert main(["register", "cli_auto", "--sql",
                 "SELECT a, count(*) AS n FROM t1000g WHERE a < 40 GROUP BY a",
                 "--partition", "auto", *conn]) == 0
    text = capsys.readouterr().out
    assert "registered cli_auto" in text and "why:" in text
    assert main(["explain", "cli_auto", "--json", *conn]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["query"] == "cli_auto" and doc["mode"] == "auto"
    assert {c["attribute"] for c in doc["candidates"]} >= {"t1000g.a"}
    assert main(["explain", "cli_auto", *conn]) == 0
    text = capsys.readouterr().out
    assert "sketched on" in text and "candidate" in text
    assert main(["register", "cli_bad", "--sql", "SELECT a FROM t1000g",
                 "--partition", "auto", "--partition", "t1000g.a=8", *conn]) != 0
    assert "--partition auto" in capsys.readouterr().err
    client = svc.client()
    client.drop("cli_auto")


def test_a_sketch_answers_other_sql_only_where_proven(svc, capsys):
    """Issue 28: ``imp query --sql "select count(*) ..." --with q3`` answered with q3's
    sketch, silently wrong. Another query's sketch is now used only where it provably
    gives the plain query's rows; otherwise the call is refused, with the reason, before
    anything runs or changes."""
    from grpc_harness import TOKEN

    from imp_core.oracle.reference import restrict_to_sketch
    from services.cli.main import main

    client, table = svc.client(), "t1000g"
    count = f"SELECT count(*) AS n FROM {table}"
    rows = svc.coordinator.ctx.store.read(table)
    sketch = svc.coordinator.get_sketch("groups").sketch
    # what the sketch's rows would have answered: fewer than the table holds
    wrong = restrict_to_sketch({table: rows}, sketch)[table].num_rows
    assert wrong < rows.num_rows
    before = svc.state()
    with pytest.raises(RemoteError) as refused:
        client.run_query(sql=count, query="groups")
    assert refused.value.code == "FAILED_PRECONDITION"
    assert f"{table} is read outside groups's plan" in refused.value.message
    # no name and no registered sketch answers it: an ad-hoc query runs plain, saying why
    ad_hoc = client.run_query(sql=count)
    assert ad_hoc.rows.column("n").to_pylist() == [rows.num_rows]
    assert ad_hoc.access == "plain" and ad_hoc.sketch is None
    assert "ran without a sketch" in ad_hoc.access_reason and "groups" in ad_hoc.access_reason
    assert svc.state() == before
    plain = client.run_query(sql=count, use_sketch=False)
    assert plain.rows.column("n").to_pylist() == [rows.num_rows]
    # the query's result used as a subquery, or filtered further: the sketch answers
    sql = load_query(QUERIES["groups"]).sql
    for other, rule, name in ((f"SELECT count(*) AS n FROM ({sql}) x", "subquery", "groups"),
                              (f"SELECT * FROM ({sql}) x WHERE x.ab > 0",
                               "stronger-selection", None)):
        used = client.run_query(sql=other, query=name)
        assert used.sketch is not None and used.sketch.query == "groups"
        assert used.reuse == rule and "groups" in used.reuse_reason
        assert _same_rows(used.rows, client.run_query(sql=other, use_sketch=False).rows)
    conn = ["--target", svc.address, "--token", TOKEN]
    assert main(["query", "--sql", count, "--with", "groups", *conn]) != 0
    out = capsys.readouterr()
    assert "read outside groups's plan" in out.err and str(wrong) not in out.out
