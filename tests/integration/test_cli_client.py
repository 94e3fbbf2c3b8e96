"""The ``imp`` client commands against a live server (real gRPC on loopback): every
command's ``--json`` output parses and says what happened, the readable output names
what it shows, and failures give clear messages with their exit codes. ``imp serve``
itself runs as a subprocess configured from IMP_* variables."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq
import pytest
from grpc_harness import TOKEN, reference, running_service
from runtime_support import random_batch

from imp_core.workloads.queries import load_query
from services.cli.main import main
from services.client import SketchClient

pytestmark = [pytest.mark.grpc, pytest.mark.integration]


@pytest.fixture(scope="module")
def svc(tmp_path_factory):
    with running_service(tmp_path_factory.mktemp("cli")) as service:
        yield service


@pytest.fixture
def imp(svc, capsys):
    """Runs ``imp ARGS`` in-process against the module's server: (exit code, stdout,
    stderr)."""

    def run(*args: str, token: str | None = TOKEN) -> tuple[int, str, str]:
        conn = ["--target", svc.address] + (["--token", token] if token else [])
        code = main([*args, *conn])
        out = capsys.readouterr()
        return code, out.out, out.err

    return run


def _json(run_result: tuple[int, str, str]):
    code, out, err = run_result
    assert code == 0, err
    return json.loads(out)


def test_register_update_sketch_watch(svc, imp, tmp_path):
    info = _json(imp("register", "g1", "--workload", "q_groups_1000",
                     "--partition", "t1000g.a=16", "--json"))
    assert info["name"] == "g1" and info["total_fragments"] == 16
    assert info["strategy"] == {"kind": "lazy"} and info["sketch_seq"] == 1

    sql = "SELECT a, avg(b) AS ab FROM t1000g GROUP BY a HAVING avg(c) < 300"
    info = _json(imp("register", "b1", "--sql", sql, "--bounds", "t1000g.a=100,250,500",
                     "--eager", "--batch-tuples", "5", "--max-delay", "0", "--json"))
    assert info["partitions"][0]["bounds"] == [100, 250, 500]
    assert info["strategy"] == {"kind": "eager", "batch_tuples": 5, "max_delay_s": None}

    listed = _json(imp("ls", "--json"))
    assert {"g1", "b1"} <= {q["name"] for q in listed["queries"]}
    assert listed["tables"][[t["name"] for t in listed["tables"]].index("t1000g")][
        "columns"]["a"] == "int64"

    before = _json(imp("sketch", "g1", "--json"))
    inserts, deletes = random_batch(svc.coordinator.ctx.store, "t1000g",
                                    np.random.default_rng(1), 12, salt=40_000_000)
    pq.write_table(inserts, tmp_path / "ins.parquet")
    pacsv.write_csv(deletes, tmp_path / "del.csv")
    result = _json(imp("update", "t1000g", "--insert", str(tmp_path / "ins.parquet"),
                       "--delete", str(tmp_path / "del.csv"), "--json"))
    assert result["table"] == "t1000g" and result["version"] == svc.coordinator.ctx.store.version(
        "t1000g")
    assert result["inserted"] == inserts.num_rows and result["deleted"] == deletes.num_rows
    assert "b1" in result["maintained"]

    current = _json(imp("sketch", "g1", "--partitions", "--json"))
    assert current["seq"] == before["seq"] + 1
    assert current["versions"] == {"t1000g": result["version"]}
    record = SketchClient(svc.address, token=TOKEN).sketch("g1", seq=current["seq"],
                                                           include_partitions=True)
    assert list(record.fragments) == current["fragments"]
    assert record.sketch() == reference(svc.coordinator, load_query("q_groups_1000").sql,
                                        record)
    assert current["tables"][0]["bounds"] == list(record.tables[0].bounds)

    lines = imp("watch", "g1", "--after-seq", str(before["seq"]), "--count", "1", "--json")
    assert lines[0] == 0
    assert "g1 is lazy: a new version is made only when its sketch is read" in lines[2]
    [watched] = [json.loads(line) for line in lines[1].splitlines()]
    assert watched["seq"] == current["seq"] and watched["fragments"] == current["fragments"]

    # several queries in one call (GetSketches); an unknown one is reported, exit 2
    both = _json(imp("sketch", "g1", "b1", "--json"))
    assert [x["query"] for x in both["sketches"]] == ["g1", "b1"] and both["errors"] == {}
    assert both["sketches"][0]["seq"] == current["seq"]
    code, out, err = imp("sketch", "g1", "nope", "--json")
    assert code == 2 and json.loads(out)["errors"]["nope"]["code"] == "NOT_FOUND"
    assert "nope: NOT_FOUND" in err

    # an update from JSON lines (old and new values of the same rows)
    old = svc.coordinator.ctx.store.read("t1000g").slice(0, 3)
    new = old.set_column(3, "c", pa.array([1, 2, 3], pa.int64()))
    for name, table in (("old.json", old), ("new.json", new)):
        (tmp_path / name).write_text("".join(json.dumps(r) + "\n" for r in table.to_pylist()))
    result = _json(imp("update", "t1000g", "--update-old", str(tmp_path / "old.json"),
                       "--update-new", str(tmp_path / "new.json"), "--json"))
    assert result["inserted"] == 3 and result["deleted"] == 3


def test_actor_commands_and_stats(svc, imp):
    if "g2" not in {q.name for q in svc.coordinator.queries()}:
        assert imp("register", "g2", "--workload", "q_selpd", "--partition",
                   "t1000g.a=8")[0] == 0
    maintained = _json(imp("maintain", "--table", "t1000g", "--json"))
    assert "g2" in maintained and maintained["g2"]["query"] == "g2"
    points = _json(imp("checkpoint", "g2", "--json"))
    assert points[0]["query"] == "g2" and len(points[0]["sha256"]) == 64
    assert _json(imp("evict", "g2", "--json")) == {"evicted": "g2"}
    assert _json(imp("restore", "g2", "--json"))["state"] == "live"
    assert _json(imp("scale", "g2", "2", "--json"))["shards"] == 2
    stats = _json(imp("stats", "--json"))
    assert stats["coordinator"]["registered_queries"] >= 1
    assert stats["service"]["methods"]["ScaleQuery"]["calls"] >= 1
    assert _json(imp("drop", "g2", "--json")) == {"dropped": "g2"}
    assert "g2" not in {q.name for q in svc.coordinator.queries()}


def test_readable_output(svc, imp):
    if "g3" not in {q.name for q in svc.coordinator.queries()}:
        code, out, _ = imp("register", "g3", "--workload", "q_groups_1000", "--partition",
                           "t1000g.a=4")
        assert code == 0 and out.startswith("registered g3")
    code, out, _ = imp("ls")
    assert code == 0 and "queries (" in out and "g3" in out and "t1000g" in out
    code, out, _ = imp("sketch", "g3", "--partitions")
    assert code == 0 and out.startswith("g3  seq") and "WHERE" in out
    assert "split points:" in out and "t1000g.a (int64)" in out
    code, out, _ = imp("stats")
    assert code == 0 and "coordinator:" in out and "service:" in out


@pytest.mark.parametrize("args,token,code,message", [
    (("sketch", "nope"), TOKEN, 2, "NOT_FOUND"),
    (("register", "x", "--sql", "DELETE FROM t1000g"), TOKEN, 2, "only read-only SELECT"),
    (("register", "x", "--sql", "SELECT a FROM t1000g WHERE"), TOKEN, 2, "malformed SQL"),
    (("register", "x", "--sql", "SELECT a FROM t1000g", "--partition", "t1000g.a=x"),
     TOKEN, 2, "expected a fragment count"),
    (("update", "t1000g", "--insert", "/nonexistent/file.parquet"), TOKEN, 2,
     "no such file"),
    (("update", "t1000g"), TOKEN, 2, "give at least one"),
    (("ls",), "wrong-token", 4, "UNAUTHENTICATED"),
    (("ls",), None, 4, "missing bearer token"),
])
def test_errors_have_messages_and_exit_codes(imp, args, token, code, message):
    got, out, err = imp(*args, "--json", token=token)
    assert got == code and out == ""
    assert err.startswith("error: ") and message in err


def test_unreachable_server_exits_3(capsys):
    code = main(["ls", "--target", "127.0.0.1:1", "--timeout", "3", "--json"])
    err = capsys.readouterr().err
    assert code == 3 and "UNAVAILABLE" in err and "imp serve" in err


def test_ls_json_in_a_subprocess(svc):
    env = {**os.environ, "IMP_TARGET": svc.address, "IMP_TOKEN": TOKEN}
    done = subprocess.run([sys.executable, "-m", "services.cli", "ls", "--json"], env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "t1000g" in {t["name"] for t in json.loads(done.stdout)["tables"]}


def test_serve_from_environment_and_stop_on_sigterm(tmp_path):
    token_file = tmp_path / "tokens"
    token_file.write_text("serve-token\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("IMP_")}
    env.update(IMP_LISTEN="127.0.0.1:0", IMP_ROOT=str(tmp_path / "root"), IMP_BACKEND="local",
               IMP_AUTH_TOKEN_FILE=str(token_file), IMP_MAX_SQL_CHARS="50",
               IMP_METRICS_LISTEN="127.0.0.1:0")
    proc = subprocess.Popen([sys.executable, "-m", "services.cli", "serve"], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = proc.stdout.readline()
        assert line.startswith("imp: serving on 127.0.0.1:"), proc.stderr.read()
        address = line.rsplit(" ", 1)[1].strip()
        with SketchClient(address, token="serve-token") as client:
            assert client.health() == "SERVING"
            assert client.queries() == [] and client.tables() == []
            from services.client import RemoteError

            with pytest.raises(RemoteError) as info:  # IMP_MAX_SQL_CHARS applies
                client.register("q", "SELECT a FROM t WHERE " + "a = 1 OR " * 10 + "a = 2",
                                fragments=2)
            assert info.value.code == "RESOURCE_EXHAUSTED"
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(60) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
