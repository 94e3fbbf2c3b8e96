"""Registering and dropping queries: from a ``QuerySpec`` to a live, routed query.

Invariants:
- ``imp_core.query.prepare.prepare_query`` (shared with the embedded paths) is the one place
  that turns SQL into a plan and partitions and checks the sketch is safe; nothing is
  registered unless it passes;
- the join sides probed in the data layer (the placement) are decided once, here, and
  kept in the record with the plan's fingerprint, so every later wiring of the query
  builds the same operators; a recovered query whose plan no longer fits its placement
  (``imp_actors.placement.stale``) is placed again, in a new generation, with a warning;
- a query is in the durable registry iff its first state was built and checkpointed
  (a failed registration leaves no record, no route and no running actor);
- a query's scan specs are ``scan_specs`` of its plan, with every selection dropped when
  its record says ``pushdown`` is off;
- a query that may ever have more than one shard (``shards > 1``, or autoscaling up to
  ``max_shards > 1``) has a plan that can be split and probes no join side in the data
  layer, so every later rescale can re-split its state; an autoscaled query starts with
  ``shards`` moved into its bounds.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import re
import time
from typing import Callable, Mapping

from imp_actors.context import RuntimeContext
from imp_actors.history import SketchHistory
from imp_actors.lifecycle import QueryRuntime, QueryState
from imp_actors.placement import place, stale
from imp_actors.placement import replace as replace_placement
from imp_actors.registry import (
    SEQ_BLOCK,
    CallRecord,
    QueryRecord,
    partitions_from_records,
    partitions_to_records,
)
from imp_actors.runtime_config import RuntimeConfig, strategy_to_json
from imp_actors.sharding import shard_key
from imp_actors.shards import ShardManager
from imp_actors.state_manager import StateManager
from imp_actors.types import QuerySpec
from imp_core.errors import (
    InvalidNameError,
    PartitionError,
    RequestLimitError,
    UnknownQueryError,
)
from imp_core.estimate.budget import AUTO, BUDGET_FRACTION, ENV_BUDGET
from imp_core.plan.nodes import QueryPlan
from imp_core.process.failpoints import failpoint
from imp_core.query.data_layer import DataLayer
from imp_core.query.prepare import PreparedQuery, StoreTables, prepare_query
from imp_core.sketch.partition import PartitionSet
from imp_core.sketch.sketch import Sketch
from imp_core.storage.calls import CallTag
from imp_core.storage.row_groups import StoreLayout
from imp_core.storage.scan_spec import scan_specs

log = logging.getLogger(__name__)
_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_.-]{0,63}$")


def prepare(spec: QuerySpec, ctx: RuntimeContext, catalog: dict,
            room: int | None = None) -> PreparedQuery:
    """``spec`` prepared by the one shared path (``imp_core.query.prepare``) on the tables'
    latest versions, with the fragments of the SQL header defaulting to the runtime's.

    ``room``: on a cluster, the most state its nodes could give the query
    (``ShardManager.room``); with no ``IMP_REGISTRATION_MEMORY_BYTES`` set, the memory
    check refuses only a plan beyond half of it, not one beyond this machine's memory
    (the query's actors run on the cluster's nodes)."""
    tables = StoreTables(ctx.store, latest=ctx.probe.latest, catalog=catalog)
    # join sides beyond the actor's budget are probed in the data layer (single-shard
    # queries only, see ``place_join_sides``), so the memory estimate leaves them out
    budget = ctx.config.join_state_budget_bytes if most_shards(spec) == 1 else None
    # the workers' data layer: its files say which lookups are clustered, which columns
    # are never NULL and which keyed reads a shared index serves
    files = DataLayer(ctx.store).files

    def capture(plan: QueryPlan, pset: PartitionSet, versions: Mapping[str, int]) -> Sketch:
        return ctx.spark.recapture(plan, pset, versions)[0]

    return prepare_query(spec.sql, tables, spec.partitions,
                         spec.fragments or ctx.config.default_fragments, spec.force,
                         pushdown=spec.pushdown, join_state_budget_bytes=budget,
                         clustered=files.clustered, not_null=files.not_null,
                         indexed=files.indexed,
                         capture=capture, layout=StoreLayout(ctx.store),
                         memory_budget_bytes=_budget(room),
                         progress=lambda line: log.info("%s: %s", spec.name, line))


def _budget(room: int | None) -> int | str:
    """The registration memory budget: the setting when there is one, else half the
    cluster's room (as on one machine: half its available memory), else "auto"."""
    if room is None or os.environ.get(ENV_BUDGET, "").strip():
        return AUTO
    return max(1, int(BUDGET_FRACTION * room))


def call_record(call: CallTag | None, query: str) -> CallRecord | None:
    """The registry's record of the keyed ``call`` naming ``query`` (None: no key)."""
    if call is None:
        return None
    return CallRecord(call.key, call.method, call.digest, query, time.time())


def first_shards(spec: QuerySpec) -> int:
    """The shards a new query starts with: ``shards``, moved into its autoscaling bounds."""
    return spec.autoscaling.clamp(spec.shards) if spec.autoscaling else spec.shards


def most_shards(spec: QuerySpec) -> int:
    """The most shards the query may ever have (its autoscaling maximum)."""
    return max(first_shards(spec), spec.autoscaling.max_shards if spec.autoscaling else 1)


def check_request(spec: QuerySpec, config: RuntimeConfig) -> None:
    if not _NAME.match(spec.name or ""):
        raise InvalidNameError(f"query name {spec.name!r} must start with a letter and hold "
                               "only letters, digits, '_', '.', '-' (at most 64)")
    check_shards(spec.shards, config)
    check_shards(most_shards(spec), config)  # an autoscaling maximum within the limits too


def check_shards(shards: int, config: RuntimeConfig) -> None:
    """A shard count the runtime can hold: at least one, at most ``max_shards``, and no
    more than the live actors allowed (a query's shards are live together)."""
    if shards < 1:
        raise PartitionError("a query needs at least one shard")
    if shards > config.max_shards:
        raise RequestLimitError(f"{shards:,} shards asked for, the limit per query is "
                                f"{config.max_shards} (IMP_MAX_SHARDS)")
    live = config.eviction.max_live_actors
    if live is not None and shards > live:
        raise RequestLimitError(f"{shards:,} shards asked for, more than the {live} live "
                                "actors allowed (IMP_MAX_LIVE_ACTORS): the query could "
                                "never be live")


class Registration:
    def __init__(self, ctx: RuntimeContext, shards: ShardManager, state: StateManager,
                 catalog: Callable[[], dict]):
        self.ctx = ctx
        self.shards = shards
        self.state = state
        self.catalog = catalog

    def register(self, spec: QuerySpec, call: CallTag | None = None) -> QueryRuntime:
        """Register ``spec``; ``call``: its idempotency key, kept in the registry in the
        same write as the record (``Registry.call``)."""
        ctx = self.ctx
        failpoint("registration.sql", spec.sql)  # a crash while a registration runs
        check_request(spec, ctx.config)
        ctx.queries.check_free(spec.name)
        t0 = time.perf_counter()
        prepared = prepare(spec, ctx, self.catalog(), self.shards.room(first_shards(spec)))
        plan, pset = prepared.plan, prepared.partitions
        if most_shards(spec) > 1:
            shard_key(plan)  # raises with the reason when the plan cannot be split
        shards = first_shards(spec)
        t1 = time.perf_counter()
        placement = place(prepared, most_shards(spec), ctx)
        ctx.time("register_prepare_s", t1 - t0)  # plan, checks, estimate, partitions
        ctx.time("register_place_s", time.perf_counter() - t1)
        record = QueryRecord(spec.name, spec.sql, partitions_to_records(pset),
                             strategy_to_json(spec.strategy), spec.force, shards,
                             pushdown=spec.pushdown,
                             placement=placement,
                             plan_fingerprint=plan.fingerprint(),
                             seq_reserved=SEQ_BLOCK,
                             autoscaling=spec.autoscaling.to_json() if spec.autoscaling
                             else None,
                             advice=prepared.advice.to_json() if prepared.advice else None)
        q = self.runtime(record, plan, pset, QueryState.REGISTERING, restarted=False)
        ctx.queries.add(q)
        try:
            with q.lock:
                self.state.bootstrap(q)
                ctx.registry.put(q.record, call_record(call, spec.name))
        except BaseException:
            ctx.queries.remove(q.name)
            with q.lock:
                if q.state is not QueryState.DROPPED:  # not dropped meanwhile by name
                    self.shards.stop(q, QueryState.DROPPED)
            raise
        ctx.queries.route(q)
        ctx.counters["registered"] += 1
        return q

    def recover(self, record: QueryRecord) -> QueryRuntime:
        """The runtime record of a query registered before this coordinator started, its
        SQL planned again; a placement that does not fit the new plan (``stale``) is
        decided again and written to the registry, with a warning naming the reason.
        Raises ``ImpError`` when the SQL cannot be planned any more."""
        from imp_core.sql import plan_sql

        plan = plan_sql(record.sql, self.catalog())
        pset = partitions_from_records(list(record.partitions))
        reason = stale(record, plan)
        if reason is not None:
            placed = replace_placement(record, plan, pset, self.ctx)
            log.warning("registered query %s is placed again: %s; it probed [%s], it probes "
                        "[%s] from generation %d on", record.name, reason,
                        ", ".join(record.placement), ", ".join(placed.placement),
                        placed.generation)
            self.ctx.registry.put(placed)
            record = placed
        return self.runtime(record, plan, pset)

    def runtime(self, record: QueryRecord, plan: QueryPlan | None = None,
                pset: PartitionSet | None = None,
                state: QueryState = QueryState.EVICTED,
                restarted: bool = True) -> QueryRuntime:
        """The runtime record of a registered query (planned again when no plan is given);
        ``restarted``: of a query registered before this coordinator started, whose
        sketch versions continue after those its predecessor may have published."""
        from imp_core.sql import plan_sql

        if plan is None:
            plan = plan_sql(record.sql, self.catalog())
        if pset is None:
            pset = partitions_from_records(list(record.partitions))
        specs = scan_specs(plan.root, pset)
        if not record.pushdown:
            specs = {t: dataclasses.replace(s, predicate=None) for t, s in specs.items()}
        key = shard_key(plan) if record.shards > 1 else None
        return QueryRuntime(record, plan, pset, specs, key,
                            SketchHistory(record.name, self.ctx.config.sketch_versions_kept),
                            state=state, seq_floor=record.seq_reserved if restarted else 0)

    def drop(self, q: QueryRuntime, call: CallTag | None = None) -> None:
        with q.lock:
            if q.state is QueryState.DROPPED:
                raise UnknownQueryError(f"no registered query {q.name!r}")
            self.ctx.registry.remove(q.name, call_record(call, q.name))
            self.ctx.queries.remove(q.name)
            self.shards.stop(q, QueryState.DROPPED)
            self.ctx.checkpoints.drop(q.name)
            q.history.close()
        self.ctx.counters["dropped"] += 1

    def drop_record(self, name: str, call: CallTag | None = None) -> None:
        """Drop a registered query that has no runtime here (it was not recovered)."""
        self.ctx.registry.remove(name, call_record(call, name))
        self.ctx.checkpoints.drop(name)
        self.ctx.counters["dropped"] += 1
