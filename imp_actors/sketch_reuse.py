"""Which registered query's sketch may filter a query run on Spark (``Coordinator.run_query``).

The rule is ``imp_core.sketch.reuse``'s: a sketch answers other SQL only when that is
proven to give the same rows as the plain query. Here: the registered queries it is
asked of, and the errors a refusal raises before any work starts (no maintenance, no
Spark): a named query whose sketch cannot answer the SQL (``UnsafeSketchError``,
FAILED_PRECONDITION), no registered query at all that can (``UnknownQueryError``,
NOT_FOUND), each with the reasons.
"""

from __future__ import annotations

from imp_actors.context import QueryDirectory
from imp_actors.lifecycle import QueryRuntime
from imp_core.errors import UnsafeSketchError
from imp_core.plan.nodes import QueryPlan
from imp_core.sketch.reuse import SAME_PLAN, ReuseDecision, find_reusable, reuse_decision

_REASONS_SHOWN = 3  # refusals quoted when no registered query can answer


def choose_sketch(queries: QueryDirectory, plan: QueryPlan, named: QueryRuntime | None
                  ) -> tuple[QueryRuntime | None, ReuseDecision | None, str]:
    """The registered query whose sketch filters ``plan``'s scans, and why it may: the
    ``named`` one (refused if its sketch cannot answer ``plan``), else a query of the same
    plan, else the first by name whose sketch the reuse rules allow (and that filters a
    table ``plan`` reads). Without ``named`` and with none of those: ``(None, None,
    why)``, and the SQL runs plain (an ad-hoc query needs no sketch)."""
    if named is not None:
        decision = reuse_decision(named.name, named.plan, _sketched(named), plan,
                                  proven_safe=not named.record.force)
        if not decision.allowed:
            raise UnsafeSketchError(f"{decision.reason}; run it without a sketch, or "
                                    "register it to keep a sketch of its own")
        return named, decision, ""
    same = queries.with_plan(plan)  # the common case, without planning anything else
    if same is not None:
        return same, ReuseDecision(same.name, True, (SAME_PLAN,),
                                   f"the plan is {same.name}'s own"), ""
    candidates = sorted(queries.all(), key=lambda q: q.name)
    by_name = {q.name: q for q in candidates}
    chosen, refused = find_reusable(
        [(q.name, q.plan, _sketched(q), not q.record.force) for q in candidates], plan)
    if chosen is None:
        shown = "; ".join(d.reason for d in refused[:_REASONS_SHOWN])
        more = f" (and {len(refused) - _REASONS_SHOWN} more)" \
            if len(refused) > _REASONS_SHOWN else ""
        why = f": {shown}{more}" if shown else ""
        return None, None, ("no registered query has this plan or a sketch proven to "
                            "answer it, so it ran without a sketch (register it to keep "
                            "one)" + why)
    return by_name[chosen.query], chosen, ""


def _sketched(q: QueryRuntime) -> list[str]:
    """The tables whose scans the query's sketch filters."""
    return [p.table for p in q.partitions.partitions]
