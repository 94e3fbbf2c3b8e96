"""Durable blobs through the Arrow filesystem layer: a local folder or an object store.

Invariants: ``write_atomic`` either leaves the complete new content under the name or
leaves the old content (write to a temporary name, then commit by rename; object stores
publish a single PUT atomically, so there the object is written directly); readers never
see a partial blob.
"""

from __future__ import annotations

import os
import uuid
from pathlib import Path

import pyarrow.fs as pafs


class BlobStore:
    """Named byte blobs under a root folder or URI (``file://``, ``s3://``, ``gs://``...)."""

    def __init__(self, root: str):
        if "://" in root:
            self.fs, path = pafs.FileSystem.from_uri(root)
        else:
            self.fs, path = pafs.LocalFileSystem(), str(Path(root).absolute())
        self.root = path.rstrip("/")
        self.uri = root
        self.local = isinstance(self.fs, pafs.LocalFileSystem)
        self.fs.create_dir(self.root, recursive=True)

    def path(self, name: str) -> str:
        return f"{self.root}/{name}"

    def write_atomic(self, name: str, data: bytes) -> str:
        final = self.path(name)
        parent = final.rsplit("/", 1)[0]
        self.fs.create_dir(parent, recursive=True)
        if not self.local:
            with self.fs.open_output_stream(final) as out:
                out.write(data)
            return final
        tmp = f"{parent}/.tmp-{uuid.uuid4().hex}"
        with open(tmp, "wb") as out:
            out.write(data)
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, final)
        return final

    def read(self, name: str) -> bytes:
        with self.fs.open_input_stream(self.path(name)) as src:
            return src.read()

    def exists(self, name: str) -> bool:
        return self.fs.get_file_info(self.path(name)).type != pafs.FileType.NotFound

    def list(self, prefix: str) -> list[str]:
        """Names of the files directly under folder ``prefix`` (temporaries excluded)."""
        base = self.path(prefix)
        info = self.fs.get_file_info(pafs.FileSelector(base, allow_not_found=True))
        return sorted(i.base_name for i in info
                      if i.type == pafs.FileType.File and not i.base_name.startswith(".tmp-"))

    def delete(self, name: str) -> None:
        try:
            self.fs.delete_file(self.path(name))
        except FileNotFoundError:
            pass

    def delete_dir(self, prefix: str) -> None:
        try:
            self.fs.delete_dir(self.path(prefix))
        except FileNotFoundError:
            pass
