"""Autoscaling end to end on the in-process backend: a query registered over gRPC with an
autoscaling policy rises to its maximum under a stream of ApplyUpdate batches and falls
back to its minimum once the stream stops, its sketch equal to a recapture by the
reference evaluator throughout; the policy is checked at registration, survives a
restart and bounds ScaleQuery. (The decision function alone, with a fake clock:
``tests/unit/test_autoscaler.py``.)"""

from __future__ import annotations

import time

import numpy as np
import pytest
from grpc_harness import reference, running_service
from runtime_support import fill_store, make_config, random_batch, reference_sketch, workload_spec
from waiting import wait_until

from imp_actors.coordinator import Coordinator
from imp_actors.runtime_config import Autoscaling, Eager
from imp_core.errors import PartitionError, RequestLimitError, UnshardableQueryError
from imp_core.workloads.queries import load_query
from services.client import RemoteError

pytestmark = pytest.mark.integration

SQL = load_query("q_having_2").sql  # t5000g grouped by a: its state splits by a


@pytest.mark.grpc
def test_shards_follow_the_load_and_the_sketch_stays_exact(tmp_path, monkeypatch):
    # a tiny target: a few milliseconds of maintenance per second already ask for the
    # maximum, so the test does not depend on how fast this machine is
    policy = Autoscaling(min_shards=1, max_shards=3, target_load=0.001, upscale_delay_s=0.5,
                         downscale_delay_s=1.5, window_s=1.0)
    with running_service(tmp_path / "svc", autoscale_every_s=0.1) as svc:
        client = svc.client()
        info = client.register("h", SQL, partitions={"t5000g.a": 16},
                               strategy=Eager(batch_tuples=1, max_delay_s=None),
                               autoscaling=policy)
        assert info.shards == 1 and info.autoscaling == policy
        rng = np.random.default_rng(17)

        def exact() -> None:
            got = client.sketch("h", include_partitions=True)
            assert got.sketch() == reference(svc.coordinator, SQL, got)

        # under load: a stream of small update batches, each maintained eagerly
        seen = [1]
        deadline = time.monotonic() + 120
        step = 0
        while seen[-1] < policy.max_shards and time.monotonic() < deadline:
            ins, dels = random_batch(svc.coordinator.ctx.store, "t5000g", rng, 12,
                                     salt=30_000_000 + 1000 * step)
            client.apply_update("t5000g", inserts=ins, deletes=dels)
            assert svc.coordinator.wait_idle(["h"], timeout=60)  # maintained, eagerly
            step += 1
            shards = client.info("h").shards
            if shards != seen[-1] or step % 10 == 0:
                exact()  # after every rescale, and every tenth batch
            if shards != seen[-1]:
                seen.append(shards)
        assert seen[-1] == policy.max_shards, seen
        assert seen == sorted(seen), f"shards fell while under load: {seen}"
        assert client.info("h").load > 0
        exact()

        # idle: no more updates; the load decays and the query shrinks to its minimum
        def at_the_minimum() -> bool:
            shards = client.info("h").shards
            if shards != seen[-1]:
                seen.append(shards)
                exact()
            return shards == policy.min_shards

        wait_until(at_the_minimum, timeout=60, interval=0.1,
                   what="the idle query to shrink to its minimum")
        assert seen[-1] == policy.min_shards, seen
        assert min(seen) >= policy.min_shards and max(seen) <= policy.max_shards
        exact()
        counters = svc.coordinator.ctx.counters
        assert counters["autoscale_rescales"] >= 2 and counters["autoscale_errors"] == 0
        # once idle at the minimum, it stays there (no flapping): the autoscaler weighs
        # the query again and again for four downscale delays and leaves it as it is
        rescales = counters["autoscale_rescales"]
        loop, weighed = svc.coordinator.loop, []
        autoscale = loop.autoscale
        monkeypatch.setattr(loop, "autoscale",
                            lambda: (weighed.append(time.monotonic()), autoscale())[1])
        wait_until(lambda: len(weighed) > 10
                   and weighed[-1] - weighed[0] >= 4 * policy.downscale_delay_s,
                   timeout=60, what="the autoscaler to weigh the idle query")
        assert client.info("h").shards == policy.min_shards
        assert counters["autoscale_rescales"] == rescales

        # the policy is reported and bounds ScaleQuery
        with pytest.raises(RemoteError) as err:
            client.scale("h", 4)
        assert err.value.code == "INVALID_ARGUMENT" and "autoscaled" in err.value.message


def test_autoscaling_is_checked_kept_across_restarts_and_bounds_scale(tmp_path):
    root = tmp_path / "svc"
    fill_store(root, ("synthetic",))
    slow = Autoscaling(min_shards=2, max_shards=3, upscale_delay_s=3600,
                       downscale_delay_s=3600)
    rng = np.random.default_rng(23)
    cfg = make_config(root, max_shards=4)
    with Coordinator(cfg) as c:
        # shards moved into the bounds: one asked for, two started
        info = c.register(workload_spec("h", "q_having_2", autoscaling=slow))
        assert info.shards == 2 and info.autoscaling == slow
        assert len(c.diagnostics.nodes("h")) == 2
        assert c.scale("h", 3).shards == 3
        with pytest.raises(PartitionError, match="autoscaled between 2 and 3"):
            c.scale("h", 1)
        # refusals, before anything starts: a plan that cannot be split, a maximum beyond
        # IMP_MAX_SHARDS
        with pytest.raises(UnshardableQueryError):
            c.register(workload_spec("top", "q_topk", autoscaling=Autoscaling(max_shards=2)))
        with pytest.raises(RequestLimitError, match="IMP_MAX_SHARDS"):
            c.register(workload_spec("wide", "q_having_2",
                                     autoscaling=Autoscaling(max_shards=5)))
        assert [i.name for i in c.queries()] == ["h"]
        ins, dels = random_batch(c.ctx.store, "t5000g", rng, 15, 40_000_000)
        c.apply_update("t5000g", inserts=ins, deletes=dels)
        sv = c.get_sketch("h")
        assert sv.sketch == reference_sketch(c, "h", sv)
    with Coordinator(cfg) as c:  # the policy is in the registry record
        info = c.info("h")
        assert info.autoscaling == slow and info.shards == 3
        sv = c.get_sketch("h")
        assert sv.sketch == reference_sketch(c, "h", sv)


def test_an_autoscaled_query_keeps_its_join_sides_so_it_can_be_resplit(tmp_path):
    """Join sides probed in the data layer hold no rows to re-split: a query that may get
    more than one shard keeps them in its actors, whatever the join-state budget."""
    root = tmp_path / "svc"
    fill_store(root, ("synthetic",))
    with Coordinator(make_config(root, join_state_budget_bytes=0)) as c:
        c.register(workload_spec("fixed", "q_joinsel"))
        c.register(workload_spec("auto", "q_joinsel", autoscaling=Autoscaling(max_shards=2)))
        assert len(c.info("fixed").probed_join_sides) == 2
        assert c.info("auto").probed_join_sides == ()
        assert c.scale("auto", 2).shards == 2
        with pytest.raises(UnshardableQueryError, match="probes join sides"):
            c.scale("fixed", 2)
        ins, dels = random_batch(c.ctx.store, "tjoinhelp", rng=np.random.default_rng(5),
                                 size=6, salt=0)
        c.apply_update("tjoinhelp", inserts=ins, deletes=dels)
        for name in ("fixed", "auto"):
            sv = c.get_sketch(name)
            assert sv.sketch == reference_sketch(c, name, sv), name
