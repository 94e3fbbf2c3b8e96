"""Workload queries, schemas and data generators (imp_core.workloads)."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from imp_core.workloads import queries, schemas, synthetic, tpch

# ---------------------------------------------------------------------------- queries


def test_every_query_file_loads_with_a_sketch_header():
    all_queries = [q for s in queries.SUITES for q in queries.list_queries(s)]
    by_suite = {s: [q.name for q in queries.list_queries(s)] for s in queries.SUITES}
    assert len(by_suite["tpch"]) == 12
    assert by_suite["crimes"] == ["cq1", "cq2"]
    assert by_suite["tpch22"] == [f"h{i:02d}" for i in range(1, 23)]
    assert "q_having_2" in by_suite["synthetic"]
    assert by_suite["synthetic"].index("q_having_2") < by_suite["synthetic"].index("q_having_10")
    assert len(queries.list_queries()) == sum(len(by_suite[s]) for s in queries.DEFAULT_SUITES)
    assert len({q.name for q in all_queries}) == len(all_queries), "names must be unique"
    for q in all_queries:
        assert q.sketch, q.name
        assert q.sql and not q.sql.lstrip().lower().startswith("-- sketch"), q.name
        for table, column in q.sketch:
            info = queries.suite_tables(q.suite)[table]
            assert column in info.schema.names, (q.name, table, column)
            assert table in q.sql, q.name
        assert queries.load_query(q.name) == q
        assert queries.load_query(q.qualified_name) == q


def test_tpch_queries_sketch_on_l_orderkey():
    for q in queries.list_queries("tpch"):
        assert q.sketch == (("lineitem", "l_orderkey"),)
    assert queries.load_query("q01").sql.upper().startswith("SELECT")


def test_query_errors():
    with pytest.raises(KeyError, match="q99"):
        queries.load_query("q99")
    with pytest.raises(ValueError, match="suite"):
        queries.list_queries("tpcds")
    with pytest.raises(ValueError, match="sketch"):
        queries.parse_query_file("tpch", "x", "SELECT 1\n")
    q = queries.parse_query_file("tpch", "x", "-- sketch: a.b, c.d\nSELECT 1\n")
    assert q.sketch == (("a", "b"), ("c", "d")) and q.sql == "SELECT 1"


def test_queries_reference_only_catalog_tables():
    sqlglot = pytest.importorskip("sqlglot")
    names = set(schemas.catalog())
    for q in queries.list_queries():
        tree = sqlglot.parse_one(q.sql, read="spark")
        used = {t.name for t in tree.find_all(sqlglot.exp.Table)}
        assert used <= names, (q.name, used - names)


# ---------------------------------------------------------------------------- schemas


def test_tables_catalog_and_keys():
    cat = schemas.catalog()
    expected = {*schemas.TPCH_TABLES, "t50g", "t1000g", "t5000g", "t500000g", "tjoinhelp",
                "crimes"}
    assert set(cat) == expected
    assert schemas.TABLES["lineitem"].key == ("l_orderkey", "l_linenumber")
    assert schemas.TABLES["orders"].key == ("o_orderkey",)
    assert schemas.TABLES["t5000g"].key == ("id",)
    assert schemas.TABLES["tjoinhelp"].key is None
    assert schemas.TABLES["crimes"].key == ("id",)
    assert schemas.TABLES["lineitem"].domains["l_discount"] == (Decimal("0.00"), Decimal("0.10"))
    assert cat["tjoinhelp"].names == ["ttid", "aa", "bb", "cc", "dd", "ee", "ff", "gg", "hh",
                                      "ii", "jj", "kk"]
    assert cat["t50g"].names == ["id", *"abcdefghijk"]
    with pytest.raises(ValueError):
        schemas.TableInfo("x", pa.schema([("a", pa.int64())]), key=("b",))


# ---------------------------------------------------------------------------- synthetic


def _no_nulls(table: pa.Table) -> bool:
    return all(col.null_count == 0 for col in table.columns)


def _assert_in_domains(table: pa.Table, name: str) -> None:
    for col, (low, high) in schemas.TABLES[name].domains.items():
        lo, hi = pc.min_max(table[col]).values()
        if low is not None:
            assert lo.as_py() >= low, (name, col, lo)
        if high is not None:
            assert hi.as_py() <= high, (name, col, hi)


@pytest.mark.parametrize("groups", [50, 1000, 5000, 500000])
def test_groups_table_shape_and_ranges(groups):
    rows = 20_000
    t = synthetic.generate_groups_table(groups, rows, seed=1)
    name = f"t{groups}g"
    assert t.schema == schemas.TABLES[name].schema
    assert t.num_rows == rows and _no_nulls(t)
    assert t["id"].to_pylist() == list(range(1, rows + 1))
    a = t["a"].to_numpy()
    assert a.min() >= 1 and a.max() <= groups
    if groups <= 1000:
        assert len(np.unique(a)) == groups  # every group is hit at this size
    _assert_in_domains(t, name)
    # Each column is k*a plus noise with sd 100*0.3 = 30 (300 for k).
    for col, k in {**synthetic.INT_FACTORS, **synthetic.FLOAT_FACTORS}.items():
        resid = t[col].to_numpy() - k * a
        assert abs(resid.mean()) < 1.5 and 28 < resid.std() < 32, col
    resid_k = t["k"].to_numpy() - 3 * a
    assert 280 < resid_k.std() < 320
    assert t["b"].type == pa.int64() and t["f"].type == pa.float64()


def test_generators_are_deterministic_by_seed():
    assert synthetic.generate_groups_table(50, 500, seed=3).equals(
        synthetic.generate_groups_table(50, 500, seed=3))
    assert not synthetic.generate_groups_table(50, 500, seed=3).equals(
        synthetic.generate_groups_table(50, 500, seed=4))
    assert synthetic.generate_crimes(500, seed=3).equals(synthetic.generate_crimes(500, seed=3))
    assert not synthetic.generate_crimes(500, seed=3).equals(synthetic.generate_crimes(500, 4))
    j = dict(groups=100, fanout=3, selectivity=0.5)
    assert synthetic.generate_joinhelp(150, seed=3, **j).equals(
        synthetic.generate_joinhelp(150, seed=3, **j))
    assert synthetic.generate_groups_table(50, 0).num_rows == 0


@pytest.mark.parametrize("fanout,selectivity", [(1, 1.0), (4, 1.0), (2, 0.1), (20, 0.05)])
def test_joinhelp_fanout_and_selectivity(fanout, selectivity):
    groups = 1000
    present = round(selectivity * groups)
    t = synthetic.generate_joinhelp(present * fanout, groups=groups, fanout=fanout,
                                    selectivity=selectivity, seed=2)
    assert t.schema == schemas.TABLES["tjoinhelp"].schema
    assert t.num_rows == present * fanout and _no_nulls(t)
    ids, counts = np.unique(t["ttid"].to_numpy(), return_counts=True)
    assert len(ids) == present and (counts == fanout).all()
    assert ids.min() >= 1 and ids.max() <= groups
    aa = t["aa"].to_numpy()
    assert aa.min() >= 1 and aa.max() <= groups
    assert 28 < (t["bb"].to_numpy() - 2 * aa).std() < 32


def test_joinhelp_partial_and_invalid():
    t = synthetic.generate_joinhelp(7, groups=100, fanout=3)
    _, counts = np.unique(t["ttid"].to_numpy(), return_counts=True)
    assert sorted(counts.tolist()) == [1, 3, 3]
    with pytest.raises(ValueError, match="rows <= 50"):
        synthetic.generate_joinhelp(51, groups=100, selectivity=0.5)
    with pytest.raises(ValueError):
        synthetic.generate_joinhelp(10, selectivity=0.0)
    with pytest.raises(ValueError):
        synthetic.generate_joinhelp(10, fanout=0)
    assert synthetic.generate_table("tjoinhelp", 12_000).num_rows == 12_000


def test_crimes_shape_ranges_and_skew():
    rows = 100_000
    t = synthetic.generate_crimes(rows, seed=5)
    assert t.schema == schemas.TABLES["crimes"].schema
    assert t.num_rows == rows and _no_nulls(t)
    assert t["id"].to_pylist() == list(range(1, rows + 1))
    _assert_in_domains(t, "crimes")
    beats, counts = np.unique(t["beat"].to_numpy(), return_counts=True)
    assert 250 <= len(beats) <= 300
    assert ((beats >= 100) & (beats <= 9999)).all()
    counts.sort()
    assert counts[-1] > 10 * counts[0], "beats should be skewed"
    assert (t["district"].to_numpy() == t["beat"].to_numpy() // 100).all()
    years = np.unique(t["year"].to_numpy())
    assert years.min() == 2001 and years.max() == 2025
    assert len(np.unique(t["ward"].to_numpy())) == 50
    assert len(np.unique(t["community_area"].to_numpy())) == 77


def test_generate_table_dispatch_and_speed():
    import time

    for name in ("t50g", "t500000g", "crimes", "tjoinhelp"):
        assert synthetic.generate_table(name, 100).schema == schemas.TABLES[name].schema
    with pytest.raises(KeyError):
        synthetic.generate_table("lineitem", 10)
    start = time.perf_counter()
    synthetic.generate_groups_table(5000, 1_000_000)
    assert time.perf_counter() - start < 3.0  # about 0.15 s on the reference machine


# ---------------------------------------------------------------------------- TPC-H


@pytest.fixture(scope="module")
def tpch_sf001(tmp_path_factory) -> dict[str, Path]:
    out = tmp_path_factory.mktemp("tpch-sf0.01")
    return tpch.generate_tpch(0.01, out, progress=False)


@pytest.mark.tpch
def test_tpchgen_parquet_matches_schemas(tpch_sf001):
    assert set(tpch_sf001) == set(schemas.TPCH_TABLES)
    for name, path in tpch_sf001.items():
        assert path == path.parent / f"{name}.parquet" and path.is_file()
        info = schemas.TABLES[name]
        # As written: same names, order, nullability; strings as string_view.
        written = pq.read_schema(path).remove_metadata()
        as_string = pa.schema(
            [f.with_type(pa.string()) if f.type == pa.string_view() else f for f in written]
        )
        assert as_string.equals(info.schema), name
    loaded = tpch.load_tpch_tables(tpch_sf001)
    for name, table in loaded.items():
        assert table.schema.equals(schemas.TABLES[name].schema, check_metadata=True), name
    assert loaded["lineitem"].num_rows == 60_175
    assert loaded["orders"].num_rows == 15_000
    assert loaded["nation"].num_rows == 25


@pytest.mark.tpch
def test_tpch_keys_unique_and_values_in_declared_domains(tpch_sf001):
    loaded = tpch.load_tpch_tables(tpch_sf001)
    for name, table in loaded.items():
        info = schemas.TABLES[name]
        assert table.group_by(list(info.key)).aggregate([]).num_rows == table.num_rows, name
        _assert_in_domains(table, name)
    # Bounds have the column's Python type.
    assert isinstance(schemas.TABLES["lineitem"].domains["l_shipdate"][0], dt.date)
    assert isinstance(schemas.TABLES["lineitem"].domains["l_tax"][1], Decimal)


@pytest.mark.tpch
def test_tpch_existing_output_is_kept(tpch_sf001, tmp_path):
    # Already present: nothing is run again (files untouched).
    before = {n: p.stat().st_mtime_ns for n, p in tpch_sf001.items()}
    again = tpch.generate_tpch(0.01, next(iter(tpch_sf001.values())).parent, progress=False)
    assert again == tpch_sf001
    assert {n: p.stat().st_mtime_ns for n, p in again.items()} == before
    # A part-file directory counts as present and loads like a single file.
    parts = tmp_path / "region"
    parts.mkdir()
    pq.write_table(pq.read_table(tpch_sf001["region"]), parts / "region.1.parquet")
    assert tpch.existing_table_path(tmp_path, "region") == parts
    got = tpch.generate_tpch(0.01, tmp_path, progress=False, tables=["region", "nation"])
    assert got["region"] == parts and got["nation"] == tmp_path / "nation.parquet"
    assert tpch.load_tpch_tables(got)["region"].num_rows == 5
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")], "scratch left over"


_SLOW_GENERATOR = """
import sys, time
from pathlib import Path
import pyarrow as pa, pyarrow.parquet as pq
args = dict(a.split("=", 1) for a in sys.argv[1:] if "=" in a)
with open(sys.argv[1], "a") as log:
    log.write("run\\n")
time.sleep(0.5)
for t in args["--tables"].split(","):
    pq.write_table(pa.table({"x": [1]}), Path(args["--output-dir"]) / f"{t}.parquet")
"""


def test_two_generations_into_one_folder_take_turns(tmp_path):
    """Two runs filling one folder at once (two ``imp data`` commands): the second waits
    for the first and finds its tables, so the generator runs once."""
    import sys
    import threading

    script, runs, out = tmp_path / "gen.py", tmp_path / "runs.log", tmp_path / "data"
    script.write_text(_SLOW_GENERATOR)
    got: list[dict] = []

    def generate() -> None:
        got.append(tpch.generate_tables([sys.executable, str(script), str(runs)], 0.01, out,
                                        ["region", "nation"], ["region", "nation"], "test",
                                        lambda t: 1, progress=False))

    threads = [threading.Thread(target=generate) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert runs.read_text().splitlines() == ["run"]
    assert got[0] == got[1] == {t: out / f"{t}.parquet" for t in ("region", "nation")}
    assert sorted(p.name for p in out.iterdir()) == ["nation.parquet", "region.parquet"]


def test_tpch_argument_errors(tmp_path):
    with pytest.raises(ValueError):
        tpch.generate_tpch(0, tmp_path)
    with pytest.raises(ValueError, match="unknown"):
        tpch.generate_tpch(0.01, tmp_path, tables=["lineitems"])
    assert Path(tpch.tpchgen_executable()).name == "tpchgen-cli"
