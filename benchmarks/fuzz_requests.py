"""Random and mutated requests against a live server.

From a few valid requests of every unary method (except RunQuery, which needs Spark),
each round sends one mutated version over a real channel as raw bytes: bytes flipped,
cut off, inserted or appended in the serialized message, fields replaced by hostile
values (huge or negative numbers, NaN, long or odd names, SQL fragments), or the Arrow
payload of an update corrupted. A client mistake must get a status that says so: never
INTERNAL or UNKNOWN; the server must keep serving; and a refused request must change
nothing (the registered queries and the table versions are compared before and after).

Used by ``tests/integration/test_fuzz_requests.py`` (a bounded run) and ``imp bench
fuzz`` (longer).
"""

from __future__ import annotations

import random
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Callable

import grpc
import pyarrow as pa

from services.convert import table_to_ipc
from services.protos import SERVICE_NAME, pb

HOSTILE_STRINGS = ("", " ", "x" * 5000, "../../etc/passwd", "名前", "a\x00b",
                   "SELECT 1; DROP TABLE t1000g", "t1000g", "groups", "%s%n", "\ud7ff")
HOSTILE_INTS = (0, -1, 1, 2**31 - 1, 2**31, 2**32 - 1, 2**63 - 1, -(2**63))


@dataclass
class RequestFuzzReport:
    requests: int = 0
    statuses: Counter = field(default_factory=Counter)
    findings: list[dict[str, Any]] = field(default_factory=list)
    seconds: float = 0.0

    def to_json(self) -> dict[str, Any]:
        return {"requests": self.requests, "statuses": dict(self.statuses.most_common()),
                "findings": self.findings, "seconds": round(self.seconds, 2)}


def base_requests(table: pa.Table, query: str, sql: str) -> list[tuple[str, Any]]:
    """Valid requests of every unary method but RunQuery (``table``: rows of t1000g)."""
    rows = table.slice(0, 2)
    return [
        ("RegisterQuery", pb.RegisterQueryRequest(
            name="fz", sql=sql, partitions=[pb.PartitionSpec(attribute="t1000g.a",
                                                             fragments=4)])),
        ("DropQuery", pb.DropQueryRequest(name="fz")),
        ("ListQueries", pb.ListQueriesRequest()),
        ("ListTables", pb.ListTablesRequest()),
        ("GetSketch", pb.GetSketchRequest(query=query, include_partitions=True)),
        ("Maintain", pb.MaintainRequest(queries=[query])),
        ("ApplyUpdate", pb.ApplyUpdateRequest(table="t1000g", deletes=table_to_ipc(rows),
                                              inserts=table_to_ipc(rows))),
        ("Checkpoint", pb.CheckpointRequest(query=query)),
        ("Evict", pb.EvictRequest(query=query)),
        ("Restore", pb.RestoreRequest(query=query)),
        ("ScaleQuery", pb.ScaleQueryRequest(query=query, shards=1)),
        ("Stats", pb.StatsRequest()),
        ("ExplainSketch", pb.ExplainSketchRequest(query=query)),
        ("LayoutTable", pb.LayoutTableRequest(table="t1000g", dry_run=True)),
    ]


def _mutate_bytes(rng: random.Random, data: bytes) -> bytes:
    buf = bytearray(data)
    kind = rng.randrange(5)
    if kind == 0 and buf:  # flip bytes
        for _ in range(rng.randint(1, 4)):
            i = rng.randrange(len(buf))
            buf[i] ^= 1 << rng.randrange(8)
    elif kind == 1 and buf:  # cut off
        del buf[rng.randrange(len(buf)):]
    elif kind == 2:  # insert garbage
        i = rng.randrange(len(buf) + 1)
        buf[i:i] = bytes(rng.randrange(256) for _ in range(rng.randint(1, 16)))
    elif kind == 3:  # random bytes altogether
        buf = bytearray(rng.randrange(256) for _ in range(rng.randint(0, 64)))
    else:  # duplicated tail
        buf += buf[len(buf) // 2:]
    return bytes(buf)


def _mutate_fields(rng: random.Random, msg: Any) -> Any:
    msg = type(msg).FromString(msg.SerializeToString())
    for fd in msg.DESCRIPTOR.fields:
        if rng.random() > 0.5:
            continue
        if fd.is_repeated:
            continue
        try:
            if fd.type == fd.TYPE_STRING:
                setattr(msg, fd.name, rng.choice(HOSTILE_STRINGS))
            elif fd.type == fd.TYPE_BYTES:
                current = getattr(msg, fd.name)
                setattr(msg, fd.name, _mutate_bytes(rng, current))
            elif fd.type in (fd.TYPE_INT32, fd.TYPE_INT64, fd.TYPE_UINT32, fd.TYPE_UINT64):
                value = rng.choice(HOSTILE_INTS)
                setattr(msg, fd.name, value)
            elif fd.type in (fd.TYPE_DOUBLE, fd.TYPE_FLOAT):
                setattr(msg, fd.name, rng.choice((float("nan"), float("inf"), -1.0, 0.0)))
        except (ValueError, TypeError):  # out of the field's range: a protobuf refusal
            continue
    return msg


def run_request_fuzz(address: str, token: str | None, state: Callable[[], Any],
                     base: list[tuple[str, Any]], rounds: int = 300, seed: int = 0,
                     timeout: float = 30.0, ensure: Callable[[], None] | None = None
                     ) -> RequestFuzzReport:
    """``rounds`` mutated requests to the server at ``address``; ``state()`` returns
    what a refused request must leave unchanged; ``ensure()``, called after each round,
    puts back what an accepted request removed (a mutated DropQuery may drop the query
    the other requests name)."""
    rng = random.Random(seed)
    report = RequestFuzzReport()
    metadata = (("authorization", f"Bearer {token}"),) if token else None
    t0 = time.perf_counter()
    with grpc.insecure_channel(address) as channel:
        calls = {m: channel.unary_unary(f"/{SERVICE_NAME}/{m}") for m, _ in base}
        for i in range(rounds):
            method, msg = base[rng.randrange(len(base))]
            if rng.random() < 0.5:
                payload = _mutate_bytes(rng, msg.SerializeToString())
            else:
                payload = _mutate_fields(rng, msg).SerializeToString()
            before = state()
            try:
                calls[method](payload, metadata=metadata, timeout=timeout)
                code = "OK"
            except grpc.RpcError as error:
                code = error.code().name
                if code in ("INTERNAL", "UNKNOWN"):
                    report.findings.append({"round": i, "method": method, "status": code,
                                            "message": (error.details() or "")[:300],
                                            "payload": payload[:200].hex()})
                elif code not in ("DEADLINE_EXCEEDED", "UNAVAILABLE") and state() != before:
                    report.findings.append({"round": i, "method": method, "status": code,
                                            "message": "refused, but the state changed",
                                            "payload": payload[:200].hex()})
            report.requests += 1
            report.statuses[f"{method} {code}"] += 1
            if ensure is not None and code == "OK":
                ensure()
    report.seconds = time.perf_counter() - t0
    return report
