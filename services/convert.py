"""Conversions between protobuf messages (``imp.v1``) and the domain's records.

Server side: requests to ``QuerySpec`` / strategies / Arrow tables, and coordinator
records to responses. Client side: responses back to records (``imp_actors.types`` and
``services.records``). Nothing here talks to the coordinator or the network.

Invariants: a typed value survives a round trip exactly (decimals as text, dates as days,
timestamps as microseconds); Arrow data crosses as IPC stream bytes and empty bytes mean
"no table"; malformed input raises ``BadRequestError`` (INVALID_ARGUMENT), never a raw
Arrow or protobuf exception.
"""

from __future__ import annotations

import datetime as dt
import decimal
import re
import threading
from typing import Any, Iterable, Mapping

import pyarrow as pa

from imp_actors.runtime_config import Autoscaling, Eager, Lazy, Strategy
from imp_actors.types import (
    CheckpointInfo,
    IndexUse,
    QueryInfo,
    QueryResult,
    QuerySpec,
    SketchVersion,
    UpdateResult,
)
from imp_core.sketch.partition import _json_value  # bounds as RangePartition.to_json writes them
from imp_core.sketch.sketch import Range
from services.errors import BadRequestError
from services.protos import pb
from services.records import RunResult, SketchRecord, TableRecord, TableSketchRecord

EPOCH_DATE = dt.date(1970, 1, 1)
EPOCH = dt.datetime(1970, 1, 1)
_MICRO = dt.timedelta(microseconds=1)

# -- Arrow types as text ---------------------------------------------------------------

_SIMPLE_TYPES = {
    "bool": pa.bool_(), "int8": pa.int8(), "int16": pa.int16(), "int32": pa.int32(),
    "int64": pa.int64(), "uint8": pa.uint8(), "uint16": pa.uint16(), "uint32": pa.uint32(),
    "uint64": pa.uint64(), "halffloat": pa.float16(), "float": pa.float32(),
    "double": pa.float64(), "string": pa.string(), "large_string": pa.large_string(),
    "string_view": pa.string_view(), "date32[day]": pa.date32(), "date64[ms]": pa.date64(),
}
_TIMESTAMP = re.compile(r"^timestamp\[(s|ms|us|ns)(?:, tz=(.+))?\]$")
_DECIMAL = re.compile(r"^decimal(32|64|128|256)\((\d+), (-?\d+)\)$")
_DECIMALS = {"32": "decimal32", "64": "decimal64", "128": "decimal128", "256": "decimal256"}


def arrow_type(text: str) -> pa.DataType:
    """The Arrow type whose ``str()`` is ``text`` (the types a partition can have).

    >>> arrow_type("decimal128(15, 2)")
    Decimal128Type(decimal128(15, 2))
    """
    if text in _SIMPLE_TYPES:
        return _SIMPLE_TYPES[text]
    if m := _TIMESTAMP.match(text):
        return pa.timestamp(m.group(1), tz=m.group(2))
    if m := _DECIMAL.match(text):
        return getattr(pa, _DECIMALS[m.group(1)])(int(m.group(2)), int(m.group(3)))
    raise BadRequestError(f"unsupported attribute type {text!r}")


# -- typed values ----------------------------------------------------------------------


def to_value(v: Any, dtype: pa.DataType | None = None) -> pb.Value | None:
    """``v`` as a ``Value`` (None for None); ``dtype`` picks the field, else ``v``'s type."""
    if v is None:
        return None
    if dtype is None:
        return _infer_value(v)
    if pa.types.is_boolean(dtype):
        return pb.Value(bool_value=bool(v))
    if pa.types.is_integer(dtype):
        return pb.Value(int64_value=int(v))
    if pa.types.is_floating(dtype):
        return pb.Value(double_value=float(v))
    if pa.types.is_decimal(dtype):
        return pb.Value(decimal_value=str(v))
    if pa.types.is_date(dtype):
        day = v.date() if isinstance(v, dt.datetime) else v
        return pb.Value(date_value=(day - EPOCH_DATE).days)
    if pa.types.is_timestamp(dtype):
        return pb.Value(timestamp_micros=_micros(v))
    return pb.Value(string_value=str(v))


def _infer_value(v: Any) -> pb.Value:
    if isinstance(v, bool):
        return pb.Value(bool_value=v)
    if isinstance(v, int):
        return pb.Value(int64_value=v)
    if isinstance(v, float):
        return pb.Value(double_value=v)
    if isinstance(v, decimal.Decimal):
        return pb.Value(decimal_value=str(v))
    if isinstance(v, dt.datetime):
        return pb.Value(timestamp_micros=_micros(v))
    if isinstance(v, dt.date):
        return pb.Value(date_value=(v - EPOCH_DATE).days)
    if isinstance(v, str):
        return pb.Value(string_value=v)
    raise BadRequestError(f"cannot send a value of type {type(v).__name__}: {v!r}")


def _micros(v: dt.datetime) -> int:
    if v.tzinfo is not None:
        v = v.astimezone(dt.UTC).replace(tzinfo=None)
    return (v - EPOCH) // _MICRO


def from_value(v: pb.Value | None) -> Any:
    """The Python value of a ``Value`` (None when unset)."""
    if v is None:
        return None
    kind = v.WhichOneof("kind")
    if kind is None:
        return None
    if kind == "decimal_value":
        try:
            return decimal.Decimal(v.decimal_value)
        except decimal.InvalidOperation:
            raise BadRequestError(f"not a decimal number: {v.decimal_value!r}") from None
    if kind == "date_value":
        return EPOCH_DATE + dt.timedelta(days=v.date_value)
    if kind == "timestamp_micros":
        return EPOCH + v.timestamp_micros * _MICRO
    return getattr(v, kind)


def _field_value(msg: Any, name: str) -> Any:
    return from_value(getattr(msg, name)) if msg.HasField(name) else None


def _from_json_value(v: Any, dtype: pa.DataType) -> Any:
    if v is None:
        return None
    if pa.types.is_timestamp(dtype):
        return dt.datetime.fromisoformat(v)
    if pa.types.is_date(dtype):
        return dt.date.fromisoformat(v)
    if pa.types.is_decimal(dtype):
        return decimal.Decimal(v)
    return v


# -- Arrow IPC --------------------------------------------------------------------------


def table_to_ipc(table: pa.Table | None) -> bytes:
    if table is None:
        return b""
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return sink.getvalue().to_pybytes()


def ipc_to_table(data: bytes, what: str = "batch") -> pa.Table | None:
    if not data:
        return None
    source = pa.BufferReader(pa.py_buffer(data))
    try:
        with pa.ipc.open_stream(source) as reader:
            table = reader.read_all()
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError, OSError) as exc:
        raise BadRequestError(f"{what} is not an Arrow IPC stream: {exc}") from None
    extra = len(data) - source.tell()
    if extra:  # a second stream or garbage appended: not what the client meant to send
        raise BadRequestError(f"{what}: {extra:,} bytes after the end of the Arrow IPC "
                              "stream")
    return table


def schema_to_bytes(schema: pa.Schema) -> bytes:
    return schema.serialize().to_pybytes()


def schema_from_bytes(data: bytes) -> pa.Schema:
    return pa.ipc.read_schema(pa.py_buffer(data))


# -- strategies -------------------------------------------------------------------------


def strategy_to_proto(s: Strategy) -> pb.Strategy:
    if isinstance(s, Eager):
        eager = pb.Eager(batch_tuples=s.batch_tuples)
        if s.max_delay_s is not None:
            eager.max_delay_s = s.max_delay_s
        return pb.Strategy(eager=eager)
    return pb.Strategy(lazy=pb.Lazy())


def strategy_from_proto(msg: pb.Strategy) -> Strategy:
    if msg.WhichOneof("kind") == "eager":
        e = msg.eager
        delay = e.max_delay_s if e.HasField("max_delay_s") else None
        try:
            return Eager(e.batch_tuples or 1000, delay)
        except ValueError as exc:
            raise BadRequestError(str(exc)) from None
    return Lazy()


def autoscaling_to_proto(a: Autoscaling | None) -> pb.Autoscaling | None:
    if a is None:
        return None
    return pb.Autoscaling(min_shards=a.min_shards, max_shards=a.max_shards,
                          target_load=a.target_load, upscale_delay_s=a.upscale_delay_s,
                          downscale_delay_s=a.downscale_delay_s, window_s=a.window_s)


def autoscaling_from_proto(msg: pb.Autoscaling) -> Autoscaling:
    """An ``Autoscaling`` message as the policy: unset fields take their defaults, and a
    policy that makes no sense is INVALID_ARGUMENT."""
    default = Autoscaling()

    def seconds(name: str) -> float:
        return getattr(msg, name) if msg.HasField(name) else getattr(default, name)

    try:
        return Autoscaling(msg.min_shards or 1, msg.max_shards,
                           msg.target_load or default.target_load,
                           seconds("upscale_delay_s"), seconds("downscale_delay_s"),
                           seconds("window_s"))
    except ValueError as exc:
        raise BadRequestError(str(exc)) from None


# -- requests (server side) -------------------------------------------------------------


def partition_specs(specs: Iterable[pb.PartitionSpec]) -> dict[str, Any] | None:
    """``{"table.column": fragments or [bounds]}`` in the request's order."""
    out: dict[str, Any] = {}
    for spec in specs:
        attr = spec.attribute.strip()
        if attr.count(".") != 1 or not all(attr.split(".")):
            raise BadRequestError(f"partition attribute {spec.attribute!r} is not table.column")
        if attr.lower() in (a.lower() for a in out):
            raise BadRequestError(f"partition attribute {attr} is given twice")
        kind = spec.WhichOneof("spec")
        if kind == "fragments":
            out[attr] = spec.fragments
        elif kind == "bounds":
            out[attr] = [from_value(v) for v in spec.bounds.values]
        else:
            raise BadRequestError(f"partition {attr}: give a fragment count or bounds")
    return out or None


def query_spec(req: pb.RegisterQueryRequest) -> QuerySpec:
    if req.auto_partitions and len(req.partitions):
        raise BadRequestError("give partitions or auto_partitions, not both")
    return QuerySpec(
        name=req.name, sql=req.sql,
        partitions="auto" if req.auto_partitions else partition_specs(req.partitions),
        fragments=req.fragments or None, strategy=strategy_from_proto(req.strategy),
        force=req.force, shards=req.shards or 1,
        autoscaling=autoscaling_from_proto(req.autoscaling)
        if req.HasField("autoscaling") else None)


# -- records to messages (server side) -------------------------------------------------


def partition_to_proto(part: Mapping[str, Any]) -> pb.Partition:
    """A ``RangePartition.to_json()`` dict as a ``Partition``."""
    dtype = arrow_type(part["type"])
    return pb.Partition(table=part["table"], column=part["column"], type=part["type"],
                        bounds=[to_value(_from_json_value(b, dtype), dtype)
                                for b in part["bounds"]])


def query_info_to_proto(info: QueryInfo) -> pb.QueryInfo:
    return pb.QueryInfo(
        name=info.name, sql=info.sql, tables=list(info.tables),
        partitions=[partition_to_proto(p) for p in info.partitions],
        strategy=strategy_to_proto(info.strategy), shards=info.shards, state=info.state,
        versions=dict(info.versions), sketch_seq=info.sketch_seq,
        sketch_fragments=info.sketch_fragments, total_fragments=info.total_fragments,
        state_bytes=info.state_bytes, pending_tuples=info.pending_tuples,
        last_used=info.last_used, probed_join_sides=list(info.probed_join_sides),
        autoscaling=autoscaling_to_proto(info.autoscaling), load=info.load,
        indexes=[pb.SharedIndex(table=i.table, key=i.key, columns=list(i.columns),
                                where=i.where, bytes=i.bytes, disk_bytes=i.disk_bytes,
                                users=i.users) for i in info.indexes])


_CANDIDATE_NUMBERS = ("fragments", "size", "provenance_share", "read_share", "read_rows",
                      "read_bytes", "table_rows", "table_bytes", "pages", "table_pages")
_EXPLANATION_FIELDS = ("mode", "why", "sketch_seq", "sketch_fragments", "total_fragments",
                       "coverage", "max_read_share")


def explanation_to_proto(doc: Mapping[str, Any]) -> pb.SketchExplanation:
    """An explanation (``Coordinator.explain``: ``Advice.to_json`` and the sketch's
    coverage) as a ``SketchExplanation``."""
    out = pb.SketchExplanation(query=doc.get("query", ""), chosen=list(doc.get("chosen", ())),
                               read_share_now=dict(doc.get("read_share_now", {})),
                               sketch_unused=list(doc.get("sketch_unused", ())),
                               probed_join_sides=list(doc.get("probed_join_sides", ())),
                               indexes=[pb.SharedIndex(**{**i, "columns": list(i["columns"])})
                                        for i in doc.get("indexes", ())],
                               **{k: doc[k] for k in _EXPLANATION_FIELDS if k in doc})
    for c in doc.get("candidates", ()):
        out.candidates.add(attribute=c["attribute"], roles=list(c.get("roles", ())),
                           safe=bool(c.get("safe")), reason=c.get("reason", ""),
                           evaluated="read_rows" in c,
                           **{k: c[k] for k in _CANDIDATE_NUMBERS if k in c})
    return out


def explanation_from_proto(msg: pb.SketchExplanation) -> dict[str, Any]:
    """The inverse of ``explanation_to_proto`` (figures of unevaluated candidates
    left out)."""
    out: dict[str, Any] = {"query": msg.query, "chosen": list(msg.chosen),
                           "read_share_now": dict(msg.read_share_now),
                           "sketch_unused": list(msg.sketch_unused),
                           "probed_join_sides": list(msg.probed_join_sides),
                           "indexes": [{"table": i.table, "key": i.key,
                                        "columns": list(i.columns), "where": i.where,
                                        "bytes": i.bytes, "disk_bytes": i.disk_bytes,
                                        "users": i.users} for i in msg.indexes]}
    out.update({k: getattr(msg, k) for k in _EXPLANATION_FIELDS})
    cands = []
    for c in msg.candidates:
        item: dict[str, Any] = {"attribute": c.attribute, "roles": list(c.roles),
                                "safe": c.safe, "reason": c.reason, "evaluated": c.evaluated}
        if c.evaluated:
            item.update({k: getattr(c, k) for k in _CANDIDATE_NUMBERS})
        elif c.size:
            item["size"] = c.size
        cands.append(item)
    out["candidates"] = cands
    return out


_WARNING_FIELDS = ("query", "share_now", "share_after", "loses_sketch")


def _warnings_to_proto(items: Any) -> list[pb.LayoutWarning]:
    return [pb.LayoutWarning(**{k: w[k] for k in _WARNING_FIELDS}) for w in items or ()]


def _warnings_from_proto(items: Any) -> list[dict[str, Any]]:
    return [{k: getattr(w, k) for k in _WARNING_FIELDS} for w in items]


def layout_to_proto(doc: Mapping[str, Any]) -> pb.LayoutTableResponse:
    """``Coordinator.layout``'s answer as a ``LayoutTableResponse``."""
    out = pb.LayoutTableResponse(applied=doc.get("result") is not None)
    r = doc.get("result")
    if r is not None:
        out.MergeFrom(pb.LayoutTableResponse(
            table=r.table, version=r.version, columns=list(r.columns), order=r.order,
            rows=r.rows, row_groups=r.row_groups, row_group_rows=r.row_group_rows,
            seconds=r.seconds))
    a = doc.get("advice")
    if a:
        out.advice.CopyFrom(pb.LayoutAdvice(
            table=a["table"], rows=a["rows"], current=a["current"],
            recommended=a["recommended"], why=a["why"], queries=a["queries"],
            options=[pb.LayoutOption(columns=o["columns"], order=o["order"],
                                     rows_read=o["rows_read"], shares=o["shares"],
                                     rows_charged=o.get("rows_charged", 0),
                                     warnings=_warnings_to_proto(o.get("warnings")))
                     for o in a["options"]],
            max_read_share=a.get("max_read_share", 0.0),
            shares_now=a.get("shares_now", {}),
            rows_charged_now=a.get("rows_charged_now", 0), chosen=a.get("chosen", ()),
            warnings=_warnings_to_proto(a.get("warnings"))))
        if not out.table:
            out.table = a["table"]
    return out


def layout_from_proto(msg: pb.LayoutTableResponse) -> dict[str, Any]:
    out: dict[str, Any] = {"applied": msg.applied, "table": msg.table}
    if msg.applied:
        out.update(version=msg.version, columns=list(msg.columns), order=msg.order,
                   rows=msg.rows, row_groups=msg.row_groups,
                   row_group_rows=msg.row_group_rows, seconds=msg.seconds)
    if msg.HasField("advice"):
        a = msg.advice
        out["advice"] = {"table": a.table, "rows": a.rows, "current": list(a.current),
                         "recommended": list(a.recommended), "why": a.why,
                         "queries": list(a.queries),
                         "options": [{"columns": list(o.columns), "order": o.order,
                                      "rows_read": o.rows_read,
                                      "rows_charged": o.rows_charged, "shares": dict(o.shares),
                                      "warnings": _warnings_from_proto(o.warnings)}
                                     for o in a.options],
                         "max_read_share": a.max_read_share,
                         "shares_now": dict(a.shares_now),
                         "rows_charged_now": a.rows_charged_now, "chosen": list(a.chosen),
                         "warnings": _warnings_from_proto(a.warnings)}
    return out


def _range_to_proto(r: Range, dtype: pa.DataType) -> pb.Range:
    return pb.Range(lo=to_value(r.lo, dtype), hi=to_value(r.hi, dtype),
                    includes_null=r.includes_null)


def sketch_to_proto(sv: SketchVersion, include_partitions: bool = False) -> pb.SketchVersion:
    sketch = sv.sketch
    pset = sketch.partitions
    tables = []
    for part, offset in zip(pset.partitions, pset.offsets):
        ranges = sketch.ranges(part.table)
        tables.append(pb.TableSketch(
            table=part.table, column=part.column, type=str(part.dtype),
            first_fragment=offset, fragment_count=part.size,
            fragments=sketch.table_fragments(part.table),
            ranges=[_range_to_proto(r, part.dtype) for r in ranges],
            predicate=sketch.predicate(part.table),
            bounds=[to_value(b, part.dtype) for b in part.bounds] if include_partitions
            else ()))
    return pb.SketchVersion(
        query=sv.query, seq=sv.seq, versions=dict(sv.versions), tables=tables,
        where=sv.where(), fragments=list(sketch.fragments), total_fragments=pset.size,
        created_at=sv.created_at, maintain_seconds=sv.maintain_seconds,
        has_partitions=include_partitions)


class SketchEncoder:
    """``sketch_to_proto`` with the last message of each query kept: a sketch version is
    immutable, so while it stays the latest (the common case of a current sketch read
    many times) it is converted once. A hit needs the very same ``SketchVersion`` object,
    never just an equal name and seq (a dropped and re-registered query restarts at 1).
    Conversions are single-flight: when many watchers receive a new version at once, one
    of them converts it and the others wait for that message, so a large message (one
    with partitions) is built once, not once per stream."""

    def __init__(self) -> None:
        self._last: dict[tuple[str, bool], tuple[SketchVersion, pb.SketchVersion]] = {}
        self._building: dict[tuple[str, bool], _Build] = {}
        self._responses: dict[tuple[str, bool], tuple[SketchVersion, Any]] = {}
        self._lock = threading.Lock()

    def response(self, sv: SketchVersion, include_partitions: bool = False) -> bytes:
        """The serialized ``GetSketchResponse{sketch}`` of ``sv``, made once while ``sv``
        is the latest: the hot path of GetSketch (the same immutable version read again
        and again) builds and serializes no message and takes no lock (a dict read is
        atomic). The call's serializer sends bytes as they are (``services.handlers``)."""
        key = (sv.query, include_partitions)
        hit = self._responses.get(key)
        if hit is not None and hit[0] is sv:
            return hit[1]
        out = pb.GetSketchResponse(
            sketch=self.encode(sv, include_partitions)).SerializeToString()
        self._responses[key] = (sv, out)
        return out

    def encode(self, sv: SketchVersion, include_partitions: bool = False) -> pb.SketchVersion:
        key = (sv.query, include_partitions)
        with self._lock:
            hit = self._last.get(key)
            if hit is not None and hit[0] is sv:
                return hit[1]
            build = self._building.get(key)
            mine = build is None or build.version is not sv
            if mine:
                build = self._building[key] = _Build(sv)
        assert build is not None
        if not mine:
            build.done.wait()
            if build.message is not None:
                return build.message
            return sketch_to_proto(sv, include_partitions)  # the builder failed
        try:
            build.message = sketch_to_proto(sv, include_partitions)
            with self._lock:
                self._last[key] = (sv, build.message)
            return build.message
        finally:
            with self._lock:
                if self._building.get(key) is build:
                    del self._building[key]
            build.done.set()

    def forget(self, query: str) -> None:
        with self._lock:
            for key in [k for k in self._last if k[0] == query]:
                del self._last[key]
            for key in [k for k in list(self._responses) if k[0] == query]:
                self._responses.pop(key, None)


class _Build:
    """One conversion in progress, which other callers may wait for."""

    def __init__(self, version: SketchVersion):
        self.version = version
        self.message: pb.SketchVersion | None = None
        self.done = threading.Event()


def checkpoint_to_proto(c: CheckpointInfo) -> pb.CheckpointInfo:
    return pb.CheckpointInfo(query=c.query, shard=c.shard, uri=c.uri, versions=dict(c.versions),
                             size_bytes=c.bytes, sha256=c.sha256, created_at=c.created_at)


def update_to_proto(u: UpdateResult) -> pb.ApplyUpdateResponse:
    return pb.ApplyUpdateResponse(table=u.table, version=u.version, inserted=u.inserted,
                                  deleted=u.deleted, maintained=list(u.maintained),
                                  replayed=u.replayed)


def query_result_to_proto(r: QueryResult, rows: bytes) -> pb.RunQueryResponse:
    out = pb.RunQueryResponse(
        rows=rows, row_count=r.rows.num_rows, seconds=r.seconds, rows_read=dict(r.rows_read),
        files_read=dict(r.files_read), files_skipped=dict(r.files_skipped),
        access=r.access, access_reason=r.access_reason, read_share=dict(r.read_share),
        table_rows=dict(r.table_rows), table_scans=dict(r.table_scans),
        table_bytes=dict(r.table_bytes), bytes_estimate=dict(r.bytes_estimate),
        reuse=r.reuse, reuse_reason=r.reuse_reason)
    if r.sketch is not None:
        out.sketch.CopyFrom(sketch_to_proto(r.sketch))
    return out


# -- messages to records (client side) -------------------------------------------------


def partition_from_proto(msg: pb.Partition) -> dict[str, Any]:
    return {"table": msg.table, "column": msg.column, "type": msg.type,
            "bounds": [_json_value(from_value(v)) for v in msg.bounds]}


def query_info_from_proto(msg: pb.QueryInfo) -> QueryInfo:
    return QueryInfo(
        name=msg.name, sql=msg.sql, tables=tuple(msg.tables),
        partitions=tuple(partition_from_proto(p) for p in msg.partitions),
        strategy=strategy_from_proto(msg.strategy), shards=msg.shards, state=msg.state,
        versions=dict(msg.versions), sketch_seq=msg.sketch_seq,
        sketch_fragments=msg.sketch_fragments, total_fragments=msg.total_fragments,
        state_bytes=msg.state_bytes, pending_tuples=msg.pending_tuples,
        last_used=msg.last_used, probed_join_sides=tuple(msg.probed_join_sides),
        autoscaling=autoscaling_from_proto(msg.autoscaling)
        if msg.HasField("autoscaling") else None, load=msg.load,
        indexes=tuple(IndexUse(i.table, i.key, tuple(i.columns), i.where, i.bytes,
                               i.disk_bytes, i.users) for i in msg.indexes))


def sketch_from_proto(msg: pb.SketchVersion) -> SketchRecord:
    tables = []
    for t in msg.tables:
        dtype = arrow_type(t.type)
        tables.append(TableSketchRecord(
            table=t.table, column=t.column, type=dtype, first_fragment=t.first_fragment,
            fragment_count=t.fragment_count, fragments=tuple(t.fragments),
            ranges=tuple(Range(_field_value(r, "lo"), _field_value(r, "hi"), r.includes_null)
                         for r in t.ranges),
            predicate=t.predicate,
            bounds=tuple(_cast(from_value(b), dtype) for b in t.bounds)
            if msg.has_partitions else None))
    return SketchRecord(
        query=msg.query, seq=msg.seq, versions=dict(msg.versions), tables=tuple(tables),
        where=msg.where, fragments=tuple(msg.fragments), total_fragments=msg.total_fragments,
        created_at=msg.created_at, maintain_seconds=msg.maintain_seconds)


def _cast(v: Any, dtype: pa.DataType) -> Any:
    """A bound as Arrow gives it back for ``dtype`` (e.g. int for a float column's 1.0)."""
    return pa.scalar(v, type=dtype).as_py()


def checkpoint_from_proto(msg: pb.CheckpointInfo) -> CheckpointInfo:
    return CheckpointInfo(query=msg.query, shard=msg.shard, uri=msg.uri,
                          versions=dict(msg.versions), bytes=msg.size_bytes, sha256=msg.sha256,
                          created_at=msg.created_at)


def update_from_proto(msg: pb.ApplyUpdateResponse) -> UpdateResult:
    return UpdateResult(table=msg.table, version=msg.version, inserted=msg.inserted,
                        deleted=msg.deleted, maintained=tuple(msg.maintained),
                        replayed=msg.replayed)


def run_result_from_proto(msg: pb.RunQueryResponse) -> RunResult:
    rows = ipc_to_table(msg.rows, "rows")
    return RunResult(
        rows=rows if rows is not None else pa.table({}), seconds=msg.seconds,
        rows_read=dict(msg.rows_read), files_read=dict(msg.files_read),
        files_skipped=dict(msg.files_skipped),
        sketch=sketch_from_proto(msg.sketch) if msg.HasField("sketch") else None,
        access=msg.access or "plain", access_reason=msg.access_reason,
        read_share=dict(msg.read_share), table_rows=dict(msg.table_rows),
        table_scans=dict(msg.table_scans), table_bytes=dict(msg.table_bytes),
        bytes_estimate=dict(msg.bytes_estimate), reuse=msg.reuse,
        reuse_reason=msg.reuse_reason)


def table_from_proto(msg: pb.TableInfo) -> TableRecord:
    return TableRecord(name=msg.name, version=msg.version,
                       schema=schema_from_bytes(msg.arrow_schema))
