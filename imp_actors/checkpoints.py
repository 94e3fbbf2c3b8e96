"""Checkpoints of query state: engine snapshots stored per query, generation and shard.

Layout under the checkpoint root: ``<query>/g<generation>/shard-<i>/<seq>.snap`` with
``seq`` increasing. A checkpoint's bytes are an engine snapshot
(``imp_core.engine.snapshot``: checksummed header and payload, plan and partition
fingerprints) whose metadata holds the table versions the state is exact for; it is
written atomically (``BlobStore.write_atomic``). The last ``keep`` checkpoints of a shard
are kept, so that a damaged newest one can fall back to its predecessor.

Beside them, ``<query>/kept.json`` summarises the sketch version the newest complete set
of checkpoints holds (sequence number, fragments, table versions): what ``imp ls`` shows
of a query that is evicted or not restored yet after a restart, without reading a
checkpoint. It is rewritten after each complete set, so it may lag the checkpoints (a
crash in between), never lead them.
"""

from __future__ import annotations

import hashlib
import json
import time
from typing import Any

from imp_actors.storage import BlobStore
from imp_actors.types import CheckpointInfo

SUFFIX = ".snap"
KEPT = "kept.json"


def shard_folder(query: str, generation: int, shard: int) -> str:
    return f"{query}/g{generation}/shard-{shard}"


class CheckpointStore:
    def __init__(self, root: str, keep: int = 2):
        self.blobs = BlobStore(root)
        self.keep = max(keep, 1)

    def names(self, query: str, generation: int, shard: int) -> list[str]:
        """Checkpoint names of a shard, newest first."""
        folder = shard_folder(query, generation, shard)
        files = [f for f in self.blobs.list(folder) if f.endswith(SUFFIX)]
        return [f"{folder}/{f}" for f in sorted(files, reverse=True)]

    def write(self, query: str, generation: int, shard: int, blob: bytes,
              versions: dict[str, int]) -> CheckpointInfo:
        existing = self.names(query, generation, shard)
        seq = int(existing[0].rsplit("/", 1)[1][: -len(SUFFIX)]) + 1 if existing else 1
        name = f"{shard_folder(query, generation, shard)}/{seq:012d}{SUFFIX}"
        uri = self.blobs.write_atomic(name, blob)
        for old in existing[self.keep - 1:]:
            self.blobs.delete(old)
        return CheckpointInfo(query, shard, uri, dict(versions), len(blob),
                              hashlib.sha256(blob).hexdigest(), time.time())

    def read(self, name: str) -> bytes:
        return self.blobs.read(name)

    def write_kept(self, query: str, summary: dict[str, Any]) -> None:
        self.blobs.write_atomic(f"{query}/{KEPT}", json.dumps(summary).encode())

    def read_kept(self, query: str) -> dict[str, Any] | None:
        """The query's kept-version summary; None when there is none or it is damaged
        (it only informs a listing)."""
        name = f"{query}/{KEPT}"
        try:
            if not self.blobs.exists(name):
                return None
            out = json.loads(self.blobs.read(name))
        except (OSError, ValueError):
            return None
        return out if isinstance(out, dict) else None

    def drop(self, query: str, keep_generation: int | None = None) -> None:
        """Delete a query's checkpoints (all, or all but one generation's)."""
        if keep_generation is None:
            self.blobs.delete_dir(query)
            return
        for gen_dir in self._generations(query):
            if gen_dir != f"g{keep_generation}":
                self.blobs.delete_dir(f"{query}/{gen_dir}")

    def _generations(self, query: str) -> list[str]:
        import pyarrow.fs as pafs

        base = self.blobs.path(query)
        found = self.blobs.fs.get_file_info(pafs.FileSelector(base, allow_not_found=True))
        return [i.base_name for i in found if i.type == pafs.FileType.Directory]
