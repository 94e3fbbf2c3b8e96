"""A query's placement: the join sides (and groups) probed in the data layer.

Decided once at registration (``place``) and kept in the registry record as the text of
its ``OperatorPath``s, with the fingerprint of the plan it was decided on. A restarted
coordinator plans the SQL again with the current planner; ``stale`` tells when the kept
placement does not fit that plan (the plan's fingerprint changed, or a path names no side
of it) and ``replace`` decides it again by the driver's rule without an estimate,
so that no wiring ever looks up a side the plan does not have.

Invariants: a record's ``placement`` names only sides ``placeable`` in the plan its
``plan_fingerprint`` names; a query that may have more than one shard probes nothing.
"""

from __future__ import annotations

import dataclasses

from imp_actors.context import RuntimeContext
from imp_actors.registry import QueryRecord
from imp_core.plan.nodes import QueryPlan
from imp_core.query.data_layer import DataLayer, JoinPlacement, placeable
from imp_core.query.driver import place_sides
from imp_core.query.prepare import PreparedQuery
from imp_core.sketch.partition import PartitionSet


def as_text(placement: JoinPlacement) -> tuple[str, ...]:
    """``placement`` as stored in a record: the paths' text, sorted."""
    return tuple(sorted(str(p) for p in placement))


def place(prepared: PreparedQuery, shards: int, ctx: RuntimeContext) -> tuple[str, ...]:
    """The join sides of a new query to probe in the data layer, by the driver's rule
    (``imp_core.query.driver.place_sides``; ``shards``: the most it may ever have), sized
    by the registration's memory estimate (the one the memory check used) or, without
    one (the check is off), by the tables' Parquet footers."""
    estimated = prepared.estimate.probed if prepared.estimate is not None else None
    return as_text(place_sides(prepared.plan, prepared.partitions, prepared.versions,
                               DataLayer(ctx.store), shards=shards,
                               budget_bytes=ctx.config.join_state_budget_bytes,
                               estimated=estimated))


def most_shards(record: QueryRecord) -> int:
    """The most shards the recorded query may ever have (its autoscaling maximum)."""
    auto = record.autoscaling or {}
    return max(record.shards, int(auto.get("max_shards", 1)))


def stale(record: QueryRecord, plan: QueryPlan) -> str | None:
    """Why ``record``'s placement may not be used to wire ``plan`` (None: it may): the
    plan is not the one the placement was decided on (by fingerprint, when the record
    has one), or a stored path is no text of an ``OperatorPath`` or names no side of
    ``plan`` that may be probed."""
    now = plan.fingerprint()
    if record.plan_fingerprint is not None and record.plan_fingerprint != now:
        return (f"its plan changed since registration (fingerprint "
                f"{record.plan_fingerprint}, now {now})")
    try:
        sides = record.probed_sides
    except ValueError as exc:
        return f"its placement cannot be read: {exc}"
    unknown = sorted(str(s) for s in sides - placeable(plan.root))
    if unknown:
        return f"its placement names {', '.join(unknown)}, no side of its plan"
    return None


def replace(record: QueryRecord, plan: QueryPlan, pset: PartitionSet,
            ctx: RuntimeContext) -> QueryRecord:
    """``record`` placed again on ``plan`` (sized by the tables' Parquet footers at their
    latest versions) and stamped with its fingerprint, in a new generation (the
    checkpoints of the old placement hold state of other operators and are never
    read)."""
    versions = {t: ctx.probe.latest(t) for t in sorted(plan.root.tables())}
    placement = as_text(place_sides(plan, pset, versions, DataLayer(ctx.store),
                                    shards=most_shards(record),
                                    budget_bytes=ctx.config.join_state_budget_bytes))
    return dataclasses.replace(record, placement=placement,
                               plan_fingerprint=plan.fingerprint(),
                               generation=record.generation + 1)


__all__ = ["as_text", "most_shards", "place", "replace", "stale"]
