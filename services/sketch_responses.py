"""GetSketch answered from the bytes of its request: the front end's hot path.

A dashboard asks for the same sketch again and again with the same request. The first
time, the request is parsed and answered as any other (``SketchServicer.GetSketch``);
the answer is kept under the request's bytes, with a check made for it by the
coordinator (``Coordinator.answer_check``). A later request with the same bytes is
answered with the kept bytes as long as that check says the kept version is still what
the coordinator would answer: no message is parsed, built or serialized. On 2 cores,
where the interpreter lock serializes every call's Python, this is what keeps GetSketch
near a no-op server's rate (``imp bench grpc``).

Invariants: an entry is only used after its check confirmed it for this call,
so a kept answer is never staler than the one the full path would give; only requests
whose bytes are the canonical encoding of a request without ``seq`` and with a known
freshness are kept (at most one entry per query, freshness and ``include_partitions``,
whatever bytes a client sends; the answer's bytes are those ``SketchEncoder`` keeps
anyway); at most ``limit`` entries are held.
"""

from __future__ import annotations

from typing import Any, Callable, NamedTuple

from imp_core.errors import ImpError
from services.protos import pb

LIMIT = 4096  # entries; past it the cache starts over (every entry is cheap to rebuild)
# the freshness values a kept request may carry: an unknown number (an open enum keeps
# it) would make one more key per number for the same answer
_FRESHNESS = frozenset({pb.FRESHNESS_UNSPECIFIED, pb.FRESHNESS_CURRENT,
                        pb.FRESHNESS_LATEST_MAINTAINED})


class _Answer(NamedTuple):
    query: str
    unchanged: Callable[[], bool]  # True while ``response`` is still the answer
    response: bytes  # the serialized GetSketchResponse


class SketchResponses:
    """Kept GetSketch answers by request bytes (module docstring)."""

    def __init__(self, coordinator: Any, limit: int = LIMIT):
        self._c = coordinator
        self.limit = limit
        # reads and single writes of a dict are atomic: the hot path takes no lock, and a
        # race between two writers costs at most a miss
        self._answers: dict[bytes, _Answer] = {}

    def lookup(self, data: bytes) -> bytes | None:
        """The kept answer to the request ``data`` if it is still the answer, else None."""
        answer = self._answers.get(data)
        if answer is not None and answer.unchanged():
            return answer.response
        return None

    def keep(self, data: bytes, request: Any, version: Any, response: bytes) -> None:
        """Keep ``response``, the answer to ``request`` (parsed from ``data``)."""
        if request.HasField("seq") or request.freshness not in _FRESHNESS:
            return
        canonical = pb.GetSketchRequest(query=request.query, freshness=request.freshness,
                                        include_partitions=request.include_partitions)
        if canonical.SerializeToString() != data:  # e.g. unknown fields: not kept
            return
        if len(self._answers) >= self.limit:
            self._answers = {}
        fresh = request.freshness != pb.FRESHNESS_LATEST_MAINTAINED
        try:
            check = self._c.answer_check(request.query, version, fresh)
        except ImpError:  # dropped meanwhile: this answer stands, nothing is kept
            return
        self._answers[data] = _Answer(request.query, check, response)

    def forget(self, query: str) -> None:
        """Drop the answers about ``query`` (it was dropped)."""
        self._answers = {k: a for k, a in list(self._answers.items()) if a.query != query}

    def __len__(self) -> int:
        return len(self._answers)
