"""Python stubs of ``protos/`` generated with grpcio-tools, never checked in.

The stubs live in ``services/_generated/`` (git-ignored), one Python package per proto
package (``imp/v1/sketch_service_pb2.py`` ...). They are made by ``make venv`` (``python
-m services.protogen``), by the package build (``setup.py``'s build step) and, as a
fallback, on import by ``services.protos`` when they are missing or stale.

Invariants: ``_generated/STAMP`` holds the fingerprint (the .proto sources, the
grpcio-tools and protobuf versions) of exactly the stubs beside it; a reader never sees a
half-written tree (stubs are written to a temporary folder and swapped in under a lock).
Imports between generated modules are relative, so they never resolve to the standard
library's ``imp`` module (proto package ``imp.v1``).
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import re
import shutil
import sys
import tempfile
from importlib import metadata
from pathlib import Path

HERE = Path(__file__).resolve().parent
PROTO_ROOT = HERE.parent / "protos"
OUT_DIR = HERE / "_generated"
STAMP = "STAMP"

_ABS_IMPORT = re.compile(r"^from ((?:\w+\.)*\w+) import (\w+_pb2)\b", re.MULTILINE)


def proto_files(root: Path = PROTO_ROOT) -> list[Path]:
    return sorted(root.rglob("*.proto"))


def fingerprint(root: Path = PROTO_ROOT) -> str:
    """What the stubs depend on: the .proto texts and the generator/runtime versions."""
    h = hashlib.sha256()
    for pkg in ("grpcio-tools", "protobuf"):
        h.update(f"{pkg}={metadata.version(pkg)}\n".encode())
    for path in proto_files(root):
        h.update(path.relative_to(root).as_posix().encode() + b"\0")
        h.update(path.read_bytes() + b"\0")
    return h.hexdigest()


def is_current(out_dir: Path = OUT_DIR, root: Path = PROTO_ROOT) -> bool:
    stamp = out_dir / STAMP
    return stamp.is_file() and stamp.read_text().strip() == fingerprint(root)


def _relative_imports(tree: Path) -> None:
    """``from imp.v1 import x_pb2`` -> ``from . import x_pb2`` (relative to each file)."""
    for path in tree.rglob("*.py"):
        depth = len(path.relative_to(tree).parts) - 1  # folders between tree and file

        def fix(m: re.Match[str], path: Path = path, depth: int = depth) -> str:
            target = m.group(1).split(".")
            if not (tree.joinpath(*target)).is_dir():
                return m.group(0)  # google.protobuf and other installed packages
            here = list(path.relative_to(tree).parts[:-1])
            common = 0
            while common < min(len(here), len(target)) and here[common] == target[common]:
                common += 1
            dots = "." * (1 + depth - common)
            rest = ".".join(target[common:])
            return f"from {dots}{rest} import {m.group(2)}"

        text = path.read_text()
        fixed = _ABS_IMPORT.sub(fix, text)
        if fixed != text:
            path.write_text(fixed)


def _run_protoc(root: Path, out: Path) -> None:
    import grpc_tools
    from grpc_tools import protoc

    include = Path(grpc_tools.__file__).parent / "_proto"
    files = [str(p.relative_to(root)) for p in proto_files(root)]
    if not files:
        raise RuntimeError(f"no .proto files under {root}")
    args = ["grpc_tools.protoc", f"-I{root}", f"-I{include}", f"--python_out={out}",
            f"--pyi_out={out}", f"--grpc_python_out={out}", *files]
    cwd = os.getcwd()
    try:
        os.chdir(root)  # protoc resolves the relative file names against -I and the cwd
        status = protoc.main(args)
    finally:
        os.chdir(cwd)
    if status != 0:
        raise RuntimeError(f"protoc failed (exit {status}) on {files}")


def generate(out_dir: Path = OUT_DIR, root: Path = PROTO_ROOT) -> Path:
    """(Re)generate the stubs into ``out_dir`` unless they are current; returns it."""
    out_dir, root = out_dir.resolve(), root.resolve()
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    # the lock lives outside the package so that a wheel never ships it
    key = hashlib.sha256(str(out_dir).encode()).hexdigest()[:16]
    lock_path = Path(tempfile.gettempdir()) / f"imp-protogen-{key}.lock"
    with open(lock_path, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # concurrent importers: one generates, others wait
        if is_current(out_dir, root):
            return out_dir
        tmp = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}-", dir=out_dir.parent))
        try:
            _run_protoc(root, tmp)
            _relative_imports(tmp)
            for folder in [tmp, *[p for p in tmp.rglob("*") if p.is_dir()]]:
                (folder / "__init__.py").touch()
            (tmp / STAMP).write_text(fingerprint(root) + "\n")
            old = out_dir.with_name(out_dir.name + ".old")
            if out_dir.exists():
                shutil.rmtree(old, ignore_errors=True)
                out_dir.rename(old)
            tmp.rename(out_dir)
            shutil.rmtree(old, ignore_errors=True)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return out_dir


def ensure() -> Path:
    """The stubs' folder, regenerated first when the .proto sources are at hand and the
    stubs are missing or stale (an installed wheel ships its stubs and no sources)."""
    if PROTO_ROOT.is_dir() and proto_files(PROTO_ROOT):
        if not is_current():
            generate()
    elif not (OUT_DIR / STAMP).is_file():
        raise ImportError(f"no generated gRPC stubs in {OUT_DIR} and no .proto sources at "
                          f"{PROTO_ROOT} to make them from")
    return OUT_DIR


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    out = Path(args[0]) if args else OUT_DIR
    generate(out)
    print(f"gRPC stubs in {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
