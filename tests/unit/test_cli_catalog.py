"""``imp workloads`` and ``imp data`` (issue 28, part 5): the shipped queries can be
found without reading an error message, and a loaded table's key and domains are
declared with flags (or read from Delta CHECK constraints) and shown by ``imp data ls``.
No server, Spark or Ray: these commands work on the files."""

from __future__ import annotations

import datetime as dt
import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable, write_deltalake

from imp_core.storage import DeltaStore
from imp_core.workloads.queries import SUITES, list_queries
from services.cli.main import main


def _run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


# -- imp workloads ------------------------------------------------------------------------------


def test_workloads_lists_every_suite_and_query(capsys):
    code, out, err = _run(capsys, "workloads")
    assert code == 0, err
    for suite in SUITES:
        assert f"{suite}: " in out
        for q in list_queries(suite):
            assert f"  {q.name} " in out
    assert "h03              sketch lineitem.l_orderkey" in out
    assert "imp register NAME --workload QUERY" in out


def test_workloads_json_names_suites_queries_and_sketch_attributes(capsys):
    code, out, _ = _run(capsys, "workloads", "--json")
    doc = json.loads(out)
    assert code == 0
    suites = {s["suite"]: s for s in doc["suites"]}
    assert set(suites) == set(SUITES)
    h = {q["name"]: q["sketch"] for q in suites["tpch22"]["queries"]}
    assert sorted(h) == [f"h{i:02d}" for i in range(1, 23)]
    assert h["h03"] == ["lineitem.l_orderkey"]
    assert suites["tpch22"]["data"] == "imp data tpch"


def test_workloads_of_one_suite_and_one_query(capsys):
    code, out, _ = _run(capsys, "workloads", "crimes")
    assert code == 0 and "crimes: " in out and "tpch22" not in out and "  cq1 " in out
    code, out, _ = _run(capsys, "workloads", "h03")
    assert code == 0
    assert out.startswith("-- sketch: lineitem.l_orderkey\n") and "select" in out.lower()
    code, out, _ = _run(capsys, "workloads", "h03", "--json")
    assert json.loads(out)["sketch"] == ["lineitem.l_orderkey"]


def test_an_unknown_workload_points_at_imp_workloads(capsys):
    code, _, err = _run(capsys, "workloads", "h3")
    assert code == 2 and "did you mean" in err and "`imp workloads` lists them" in err
    code, _, err = _run(capsys, "register", "x", "--workload", "h3", "--target", "127.0.0.1:9")
    assert code == 2 and "unknown workload query 'h3'" in err
    assert "`imp workloads` lists them" in err and err.count("\n") == 1


# -- imp data load / ls ----------------------------------------------------------------------


@pytest.fixture
def sales(tmp_path):
    path = tmp_path / "sales.parquet"
    pq.write_table(pa.table({
        "id": [1, 2, 3], "amount": [5.0, 10.5, 99.0],
        "day": [dt.date(2020, 1, 1), dt.date(2021, 6, 1), dt.date(2022, 1, 1)],
        "name": ["a", "b", "c"]}), path)
    return path


def test_load_declares_key_and_domains_and_ls_shows_them(capsys, tmp_path, sales):
    root = str(tmp_path / "store")
    code, out, err = _run(capsys, "data", "load", "sales", str(sales), "--root", root,
                          "--quiet", "--key", "id", "--domain", "amount=0..",
                          "--domain", "day=2020-01-01..2030-12-31", "--domain", "id=1..100")
    assert code == 0, err
    entry = DeltaStore(root).entry("sales")
    assert entry.key == ("id",)
    assert entry.domains == {"amount": (0.0, None), "id": (1, 100),
                             "day": (dt.date(2020, 1, 1), dt.date(2030, 12, 31))}
    code, out, _ = _run(capsys, "data", "ls", "--root", root)
    assert "key (id)" in out
    assert "domains amount [0.0, +inf), day [2020-01-01, 2030-12-31], id [1, 100]" in out
    code, out, _ = _run(capsys, "data", "ls", "--root", root, "--json")
    [table] = json.loads(out)["tables"]
    assert table["key"] == ["id"]
    assert table["domains"] == {"amount": [0.0, None], "day": ["2020-01-01", "2030-12-31"],
                                "id": [1, 100]}


@pytest.mark.parametrize("flags,message", [
    (["--domain", "amount"], "expected COL=LO..HI"),
    (["--domain", "nope=1..2"], "no column 'nope'"),
    (["--domain", "amount=9..1"], "above the high bound"),
    (["--domain", "day=2020-13-01..2030-01-01"], "is not a date (YYYY-MM-DD)"),
    (["--domain", "id=1.5..3"], "is not an integer"),
    (["--domain", "amount=0..1", "--domain", "amount=0..2"], "given twice"),
    (["--key", "idd"], "no column 'idd'"),
    (["--domain", "amount=0..50"], "outside its declared domain"),  # the rows break it
])
def test_a_bad_declaration_is_one_error_line_and_writes_nothing(capsys, tmp_path, sales,
                                                                  flags, message):
    root = tmp_path / "store"
    code, _, err = _run(capsys, "data", "load", "sales", str(sales), "--root", str(root),
                        "--quiet", *flags)
    assert code == 2 and err.startswith("error: ") and message in err, err
    assert "Traceback" not in err and err.count("\n") == 1
    assert DeltaStore(root).tables() == []
    assert not (root / "tables").exists() or not any((root / "tables").iterdir())


def test_a_missing_input_is_one_error_line(capsys, tmp_path):
    code, _, err = _run(capsys, "data", "load", "t", str(tmp_path / "nope.parquet"),
                        "--root", str(tmp_path / "store"), "--quiet")
    assert code == 2 and "does not exist" in err and err.count("\n") == 1


def test_a_delta_tables_check_constraints_become_domains(capsys, tmp_path):
    source = str(tmp_path / "source")
    write_deltalake(source, pa.table({"x": [1, 5, 50], "p": [0.5, 1.0, 2.0],
                                      "d": [dt.date(2000, 1, 1)] * 3}))
    DeltaTable(source).alter.add_constraint({
        "x_range": "x >= 0 AND x <= 100", "d_range": "d BETWEEN '1990-01-01' AND '2010-12-31'",
        "p_pos": "p > 0 OR p IS NULL",  # a bound of the values (NULL is none)
        "p_or": "p > 1 OR x < 10"})  # not a simple bound: ignored
    root = str(tmp_path / "store")
    code, out, err = _run(capsys, "data", "load", "copy", source, "--root", root,
                          "--domain", "x=1..60")  # a flag wins over the constraint
    assert code == 0, err
    assert "domains from the CHECK constraints" in err
    entry = DeltaStore(root).entry("copy")
    assert entry.domains == {"x": (1, 60), "d": (dt.date(1990, 1, 1), dt.date(2010, 12, 31)),
                             "p": (0.0, None)}
    assert DeltaStore(root).read("copy").num_rows == 3
