"""Versioned, self-checking container for operator state (no pickle).

Layout: MAGIC | u32 header length | header JSON | payload, where the payload is a
sequence of (u64 length, Arrow IPC stream) entries, one per named table, in the order
listed in the header. The header holds the format version, the caller's identity
fields (plan and partition fingerprints), a SHA-256 of the payload and a SHA-256 of
the header itself (its canonical JSON without that field); reading checks all of them
before any state is touched.
"""

from __future__ import annotations

import hashlib
import io
import json
import struct
from typing import Any, Mapping

import pyarrow as pa
import pyarrow.ipc as ipc

from imp_core.errors import SnapshotError

MAGIC = b"IMPSNAP\x00"
FORMAT_VERSION = 1


def write_snapshot(meta: Mapping[str, Any], tables: Mapping[str, pa.Table]) -> bytes:
    payload = io.BytesIO()
    names = []
    for name, table in tables.items():
        sink = io.BytesIO()
        with ipc.new_stream(sink, table.schema) as writer:
            writer.write_table(table)
        data = sink.getvalue()
        payload.write(struct.pack("<Q", len(data)))
        payload.write(data)
        names.append(name)
    body = payload.getvalue()
    header = {"format": FORMAT_VERSION, "meta": dict(meta), "tables": names,
              "sha256": hashlib.sha256(body).hexdigest()}
    header["header_sha256"] = _header_digest(header)
    hbytes = json.dumps(header, sort_keys=True).encode()
    return MAGIC + struct.pack("<I", len(hbytes)) + hbytes + body


def _header_digest(header: Mapping[str, Any]) -> str:
    """SHA-256 of the header's canonical JSON without its own digest field."""
    rest = {k: v for k, v in header.items() if k != "header_sha256"}
    return hashlib.sha256(json.dumps(rest, sort_keys=True).encode()).hexdigest()


def read_snapshot(blob: bytes, expect: Mapping[str, Any] | None = None
                  ) -> tuple[dict[str, Any], dict[str, pa.Table]]:
    """(meta, tables); raises SnapshotError if damaged, of another version or identity."""
    if not isinstance(blob, (bytes, bytearray, memoryview)) or blob[:len(MAGIC)] != MAGIC:
        raise SnapshotError("not an IMP state snapshot (bad magic)")
    try:
        (hlen,) = struct.unpack_from("<I", blob, len(MAGIC))
        start = len(MAGIC) + 4
        header = json.loads(bytes(blob[start:start + hlen]))
    except (struct.error, ValueError) as exc:
        raise SnapshotError(f"damaged snapshot header: {exc}") from None
    if not isinstance(header, dict):
        raise SnapshotError("damaged snapshot header: not a JSON object")
    if header.get("format") != FORMAT_VERSION:
        raise SnapshotError(f"snapshot format {header.get('format')} is not supported "
                            f"(this build reads {FORMAT_VERSION})")
    if header.get("header_sha256") != _header_digest(header):
        raise SnapshotError("snapshot header checksum mismatch: the header is damaged")
    body = bytes(blob[start + hlen:])
    if hashlib.sha256(body).hexdigest() != header.get("sha256"):
        raise SnapshotError("snapshot checksum mismatch: the state is damaged")
    meta = header.get("meta", {})
    for key, want in (expect or {}).items():
        if meta.get(key) != want:
            raise SnapshotError(f"snapshot is for another {key}: {meta.get(key)!r} "
                                f"!= {want!r}")
    tables: dict[str, pa.Table] = {}
    pos = 0
    try:
        for name in header["tables"]:
            (n,) = struct.unpack_from("<Q", body, pos)
            pos += 8
            tables[name] = ipc.open_stream(pa.BufferReader(body[pos:pos + n])).read_all()
            pos += n
    except (struct.error, pa.ArrowInvalid, KeyError) as exc:
        raise SnapshotError(f"damaged snapshot payload: {exc}") from None
    return meta, tables
