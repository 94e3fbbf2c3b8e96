"""GetSketch answered from the bytes of its request (``services.sketch_responses``): over
random sequences of own commits, another writer's commits, maintenance, requests of
either freshness and drop / re-register, every answer equals what the full path gives at
that moment, and a current answer equals a recapture (the non-incremental oracle)."""

from __future__ import annotations

import random

import numpy as np
import pytest
from deltalake import write_deltalake
from runtime_support import fill_store, make_config, random_batch, reference_sketch, workload_spec

from imp_actors.coordinator import Coordinator
from services.call_metrics import CallMetrics
from services.errors import BadRequestError
from services.guards import Guard
from services.protos import pb
from services.server_config import Limits
from services.servicer import SketchServicer
from services.sketch_responses import SketchResponses

TABLE = "t1000g"


class _Context:
    def is_active(self) -> bool:
        return True


@pytest.fixture
def root(tmp_path):
    fill_store(tmp_path)
    return tmp_path


def _request(freshness: int, **kw) -> bytes:
    return pb.GetSketchRequest(query="g", freshness=freshness, **kw).SerializeToString()


def _servicer(c: Coordinator) -> SketchServicer:
    return SketchServicer(c, Guard(Limits()), CallMetrics())


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_answers_from_request_bytes_equal_the_full_path(root, seed):
    rnd = random.Random(seed)
    rng = np.random.default_rng(seed)
    # fresh_recheck_s=0: a current request looks at the Delta log every time, so another
    # writer's commit must be seen by the very next request
    with Coordinator(make_config(root, poll_seconds=None, fresh_recheck_s=0.0)) as c:
        c.register(workload_spec("g", "q_groups_1000"))
        s = _servicer(c)
        for step in range(14):
            op = rnd.choice(["own", "outside", "current", "current", "latest", "maintain",
                             "reregister"])
            if op == "own":
                ins, dels = random_batch(c.ctx.store, TABLE, rng, 4, salt=10_000_000 * (step + 1))
                c.apply_update(TABLE, inserts=ins, deletes=dels)
            elif op == "outside":
                ins, _ = random_batch(c.ctx.store, TABLE, rng, 4, salt=20_000_000 * (step + 1))
                write_deltalake(c.ctx.store.entry(TABLE).location, ins, mode="append")
            elif op == "maintain":
                c.maintain(queries=["g"])
            elif op == "reregister":
                s.DropQuery(pb.DropQueryRequest(name="g"), _Context())
                c.register(workload_spec("g", "q_groups_1000"))
            else:
                freshness = pb.FRESHNESS_CURRENT if op == "current" else \
                    pb.FRESHNESS_LATEST_MAINTAINED
                data = _request(freshness)
                got = pb.GetSketchResponse.FromString(s.GetSketch(data, _Context())).sketch
                want = c.get_sketch("g", fresh=op == "current")
                assert (got.seq, dict(got.versions)) == (want.seq, dict(want.versions))
                assert sorted(got.fragments) == sorted(want.fragments)
                if op == "current":
                    assert dict(got.versions) == {TABLE: c.ctx.store.version(TABLE)}
                    assert want.sketch == reference_sketch(c, "g", want)
        # and a repeated request is answered from the kept bytes
        data = _request(pb.FRESHNESS_CURRENT)
        s.GetSketch(data, _Context())
        assert s.responses.lookup(data) is not None


def test_only_canonical_requests_without_seq_are_kept_and_the_cache_is_bounded(root):
    with Coordinator(make_config(root, poll_seconds=None)) as c:
        c.register(workload_spec("g", "q_groups_1000"))
        s = _servicer(c)
        seq = c.get_sketch("g").seq
        s.GetSketch(_request(pb.FRESHNESS_CURRENT, seq=seq), _Context())
        assert len(s.responses) == 0  # a past version by number: not kept
        odd = _request(pb.FRESHNESS_CURRENT) + b"\x98\x06\x01"  # an unknown field 99
        answer = pb.GetSketchResponse.FromString(s.GetSketch(odd, _Context()))
        assert answer.sketch.seq == seq and len(s.responses) == 0
        s.GetSketch(_request(57), _Context())  # a freshness number of no known value
        assert len(s.responses) == 0
        for i, freshness in enumerate((pb.FRESHNESS_CURRENT, pb.FRESHNESS_LATEST_MAINTAINED)):
            s.GetSketch(_request(freshness), _Context())
            assert len(s.responses) == i + 1
        with pytest.raises(BadRequestError, match="not a valid message"):
            s.GetSketch(b"\xff\xff\xff", _Context())
        small = SketchResponses(c, limit=2)
        for include in (False, True):
            for freshness in (pb.FRESHNESS_CURRENT, pb.FRESHNESS_LATEST_MAINTAINED):
                request = pb.GetSketchRequest(query="g", freshness=freshness,
                                              include_partitions=include)
                small.keep(request.SerializeToString(), request, c.get_sketch("g"), b"x")
                assert len(small) <= 2


def test_a_dropped_query_is_not_answered_from_kept_bytes(root):
    with Coordinator(make_config(root, poll_seconds=None)) as c:
        c.register(workload_spec("g", "q_groups_1000"))
        s = _servicer(c)
        data = _request(pb.FRESHNESS_CURRENT)
        s.GetSketch(data, _Context())
        check = c.answer_check("g", c.get_sketch("g"))
        assert check()
        c.drop("g")  # behind the servicer's back: the kept entry is still there
        assert not check()
        assert s.responses.lookup(data) is None
        c.register(workload_spec("g", "q_groups_1000", fragments=8))
        fresh = pb.GetSketchResponse.FromString(s.GetSketch(data, _Context())).sketch
        assert fresh.total_fragments == 8 and fresh.seq == c.get_sketch("g").seq
