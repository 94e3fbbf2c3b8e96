"""``imp data``: workload tables and Parquet files loaded into a service's table store."""

from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.parquet as pq

from imp_core.storage import DeltaStore
from services.cli.main import main


def test_imp_data_loads_tables_and_refuses_to_overwrite(tmp_path, capsys):
    root = tmp_path / "store"
    assert main(["data", "synthetic", "t5000g", "crimes", "--rows", "2000", "--root",
                 str(root), "--quiet", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert [t["table"] for t in out["tables"]] == ["t5000g", "crimes"]
    # version 0 holds the rows, version 1 adds the declared domains as CHECK constraints
    assert all(t["rows"] == 2000 and t["version"] == 1 for t in out["tables"])
    store = DeltaStore(root)
    sorted_a = store.read("t5000g").column("a").to_pylist()
    assert sorted_a == sorted(sorted_a)  # clustered on the sketch attribute

    pq.write_table(pa.table({"k": [3, 1, 2], "v": ["c", "a", "b"]}), tmp_path / "t.parquet")
    assert main(["data", "load", "kv", str(tmp_path / "t.parquet"), "--key", "k",
                 "--cluster-by", "k", "--root", str(root), "--quiet"]) == 0
    assert store.read("kv").column("k").to_pylist() == [1, 2, 3]
    assert store.entry("kv").key == ("k",)

    capsys.readouterr()
    assert main(["data", "synthetic", "t5000g", "--rows", "10", "--root", str(root),
                 "--quiet"]) == 2
    assert "already in the store" in capsys.readouterr().err
    assert store.version("t5000g") == 1 and store.read("t5000g").num_rows == 2000
