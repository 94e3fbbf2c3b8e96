"""The gRPC stubs are generated from protos/, never stored: generation makes the modules
with relative imports (the proto package ``imp`` must not resolve to anything else), a
stamp ties them to their sources, and a changed .proto makes them stale and regenerated."""

from __future__ import annotations

import shutil
import subprocess

from services import protogen


def test_generate_then_stale_after_a_change(tmp_path):
    root, out = tmp_path / "protos", tmp_path / "gen"
    shutil.copytree(protogen.PROTO_ROOT, root)
    assert not protogen.is_current(out, root)
    protogen.generate(out, root)
    assert protogen.is_current(out, root)
    grpc_module = (out / "imp" / "v1" / "sketch_service_pb2_grpc.py").read_text()
    assert "from . import sketch_service_pb2" in grpc_module
    assert "from imp." not in grpc_module
    assert (out / "imp" / "v1" / "sketch_service_pb2.pyi").is_file()
    assert all((d / "__init__.py").is_file() for d in (out, out / "imp", out / "imp" / "v1"))

    proto = root / "imp" / "v1" / "sketch_service.proto"
    proto.write_text(proto.read_text() + "\nmessage AddedForTheTest {}\n")
    assert not protogen.is_current(out, root)
    protogen.generate(out, root)
    assert protogen.is_current(out, root)
    assert "AddedForTheTest" in (out / "imp" / "v1" / "sketch_service_pb2.pyi").read_text()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["gen", "protos"]  # no leftovers


def test_stubs_are_not_tracked_by_git():
    tracked = subprocess.run(["git", "ls-files", "services", "protos"], capture_output=True,
                             text=True, cwd=protogen.HERE.parent, check=True).stdout.split()
    assert "protos/imp/v1/sketch_service.proto" in tracked
    assert not [f for f in tracked if "_pb2" in f or "_generated" in f]


def test_the_package_stubs_are_current():
    from services.protos import SERVICE_NAME, pb

    assert protogen.is_current()
    assert SERVICE_NAME == "imp.v1.SketchService"
    assert pb.DESCRIPTOR.name == "imp/v1/sketch_service.proto"
