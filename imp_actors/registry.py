"""The durable registry of queries: what a restarted coordinator needs to recover them.

One JSON document (``registry.json``) rewritten atomically on every change. A record
holds the query's SQL, its exact partitions (split points as Arrow IPC, so fragment ids
are identical after recovery), strategy, shard count and the generation of its
checkpoints (bumped whenever the state is re-split or re-placed, so stale checkpoints are
never read), the join sides probed in the data layer with the fingerprint of the plan they
were placed on and, for an autoscaled query, its autoscaling bounds.
Invariant: a query is in the registry iff its registration completed and it was not
dropped. A file of an older ``FORMAT`` is read through ``UPGRADES`` (one step per
version) and written in the current one on its next change.

The document also keeps the idempotency keys of the registrations and drops of the last
``CALL_RETENTION_S`` (at most ``MAX_CALLS``): a key is written in the same atomic write as
the change it made, so a retry after a crash between that write and the reply finds it
(``call``) and is answered with the first outcome instead of being applied again.
"""

from __future__ import annotations

import base64
import io
import json
import threading
import time
from dataclasses import asdict, dataclass, field, replace
from typing import Any, Callable

import pyarrow as pa
import pyarrow.ipc as ipc

from imp_actors.storage import BlobStore
from imp_core.errors import SnapshotError
from imp_core.plan.paths import OperatorPath, parse_paths
from imp_core.sketch.partition import PartitionSet, RangePartition

FORMAT = 2
_NAME = "registry.json"
CALL_RETENTION_S = 24 * 3600.0  # as long as a table remembers its calls' keys
MAX_CALLS = 10_000


@dataclass(frozen=True)
class CallRecord:
    """A keyed call that changed the registry: ``method`` (RegisterQuery, DropQuery),
    the digest of its request, the query it named, when."""

    key: str
    method: str
    digest: str
    query: str
    at: float


def partition_to_record(p: RangePartition) -> dict[str, Any]:
    sink = io.BytesIO()
    arr = pa.array(list(p.bounds), type=p.dtype)
    batch = pa.record_batch([arr], names=["bounds"])
    with ipc.new_stream(sink, batch.schema) as w:
        w.write_batch(batch)
    return {"table": p.table, "column": p.column, "type": str(p.dtype),
            "bounds_ipc": base64.b64encode(sink.getvalue()).decode()}


def partition_from_record(raw: dict[str, Any]) -> RangePartition:
    data = base64.b64decode(raw["bounds_ipc"])
    table = ipc.open_stream(pa.BufferReader(data)).read_all()
    col = table.column("bounds")
    return RangePartition(raw["table"], raw["column"], col.type, tuple(col.to_pylist()))


def partitions_to_records(pset: PartitionSet) -> tuple[dict[str, Any], ...]:
    return tuple(partition_to_record(p) for p in pset.partitions)


def partitions_from_records(raw: list[dict[str, Any]]) -> PartitionSet:
    return PartitionSet(tuple(partition_from_record(r) for r in raw))


SEQ_BLOCK = 1024  # sketch sequence numbers reserved in the registry per write


@dataclass(frozen=True)
class QueryRecord:
    name: str
    sql: str
    partitions: tuple[dict[str, Any], ...]
    strategy: dict[str, Any]
    force: bool = False
    shards: int = 1
    generation: int = 1
    created_at: float = field(default_factory=time.time)
    pushdown: bool = True
    # join sides probed in the data layer as text (``OperatorPath`` of a side, sorted;
    # ``probed_sides``), decided at registration on the plan ``plan_fingerprint`` names
    placement: tuple[str, ...] = ()
    # sketch versions up to this sequence number may have been published: a restarted
    # coordinator continues after it, so a (query, seq) never names two sketches
    # (reserved ``SEQ_BLOCK`` at a time)
    seq_reserved: int = 0
    # ``config.Autoscaling.to_json()`` of an autoscaled query; None: its shard count
    # changes only when asked (ScaleQuery)
    autoscaling: dict[str, Any] | None = None
    # ``imp_core.advice.attributes.Advice.to_json()``: the attributes considered at registration
    # and why these were chosen (None: named by the user)
    advice: dict[str, Any] | None = None
    # ``QueryPlan.fingerprint()`` of the plan the placement was decided on; None: not
    # known (a record upgraded from format 1), recovery checks the placement alone
    plan_fingerprint: str | None = None

    @property
    def probed_sides(self) -> frozenset[OperatorPath]:
        """``placement`` as paths (``imp_core.query.data_layer.JoinPlacement``)."""
        return parse_paths(self.placement)

    def with_shards(self, shards: int) -> QueryRecord:
        return replace(self, shards=shards, generation=self.generation + 1)

    def reserving(self, seq: int) -> QueryRecord:
        """This record with sequence numbers reserved through ``seq`` and a block more."""
        return replace(self, seq_reserved=seq + SEQ_BLOCK - 1)


def upgrade_1(raw: dict[str, Any]) -> dict[str, Any]:
    """A format 1 record as format 2: the fields added during format 1 at the values
    older records meant (selections pushed down, every join side in memory, no sequence
    numbers reserved, no autoscaling, attributes named by the user), and no plan
    fingerprint."""
    return {"pushdown": True, "placement": [], "seq_reserved": 0, "autoscaling": None,
            "advice": None, **raw, "plan_fingerprint": None}


# format N -> the function turning a record of format N into one of format N + 1
UPGRADES: dict[int, Callable[[dict[str, Any]], dict[str, Any]]] = {1: upgrade_1}


class Registry:
    """Thread-safe; every mutation is written through before it returns."""

    def __init__(self, blobs: BlobStore, fence: Callable[[], None] | None = None):
        self.blobs = blobs
        # called before every write: raises when this process may not write any more
        # (its store lease was taken over, ``imp_actors.lease``)
        self.fence = fence
        self._lock = threading.Lock()
        self._records: dict[str, QueryRecord] = {}
        self._calls: dict[str, CallRecord] = {}
        self._load()

    def reload(self) -> None:
        """Read the registry again (a coordinator that just took the store's lease: what
        its predecessor wrote while this one waited)."""
        with self._lock:
            self._records, self._calls = {}, {}
            self._load()

    def _load(self) -> None:
        if not self.blobs.exists(_NAME):
            return
        try:
            doc = json.loads(self.blobs.read(_NAME))
        except ValueError as exc:
            raise SnapshotError(f"the query registry {self.blobs.path(_NAME)} is damaged: "
                                f"{exc}") from None
        version = doc.get("format")
        if not isinstance(version, int) or not 1 <= version <= FORMAT:
            raise SnapshotError(f"query registry format {version} is not "
                                f"supported (this build reads 1 to {FORMAT})")
        for name, raw in doc.get("queries", {}).items():
            raw = dict(raw)
            for step in range(version, FORMAT):
                raw = UPGRADES[step](raw)
            raw["partitions"] = tuple(raw["partitions"])
            raw["placement"] = tuple(raw.get("placement", ()))
            self._records[name] = QueryRecord(**raw)
        for key, raw in doc.get("calls", {}).items():
            try:
                self._calls[key] = CallRecord(key=key, **raw)
            except TypeError:  # a record this build does not know: the key is forgotten
                continue

    def _save(self) -> None:
        if self.fence is not None:
            self.fence()
        self._prune_calls()
        doc = {"format": FORMAT, "saved_at": time.time(),
               "queries": {n: asdict(r) for n, r in sorted(self._records.items())},
               "calls": {k: {f: v for f, v in asdict(c).items() if f != "key"}
                         for k, c in self._calls.items()}}
        self.blobs.write_atomic(_NAME, json.dumps(doc, indent=1).encode())

    def _prune_calls(self) -> None:
        cutoff = time.time() - CALL_RETENTION_S
        old = [k for k, c in self._calls.items() if c.at < cutoff]
        for k in old:
            del self._calls[k]
        if len(self._calls) > MAX_CALLS:
            for k in sorted(self._calls, key=lambda k: self._calls[k].at)[
                    :len(self._calls) - MAX_CALLS]:
                del self._calls[k]

    def call(self, key: str) -> CallRecord | None:
        """The keyed call ``key`` that changed the registry, or None (module docstring)."""
        with self._lock:
            found = self._calls.get(key)
            return found if found is not None and \
                found.at >= time.time() - CALL_RETENTION_S else None

    def records(self) -> dict[str, QueryRecord]:
        with self._lock:
            return dict(self._records)

    def get(self, name: str) -> QueryRecord | None:
        with self._lock:
            return self._records.get(name)

    def put(self, record: QueryRecord, call: CallRecord | None = None) -> None:
        """Write ``record`` (and the keyed ``call`` that made it, in the same write)."""
        with self._lock:
            self._records[record.name] = record
            if call is not None:
                self._calls[call.key] = call
            self._save()

    def remove(self, name: str, call: CallRecord | None = None) -> None:
        """Remove the record of ``name`` (and keep the keyed ``call`` that removed it, in
        the same write)."""
        with self._lock:
            if self._records.pop(name, None) is not None or call is not None:
                if call is not None:
                    self._calls[call.key] = call
                self._save()
