"""Is a sketch version current? The checks behind every GetSketch, kept off the
coordinator's front.

A version is current when every table its query reads is at the version the sketch was
maintained to, as the ``VersionProbe`` found at most ``fresh_recheck_s`` ago (the
service's own commits are seen at once). ``answer_check`` builds, once per answer, the
closure a front end calls on every repeated request; it runs thousands of times a
second, so it looks everything up when it is built.
"""

from __future__ import annotations

import time
from typing import Callable

from imp_actors.context import RuntimeContext
from imp_actors.lifecycle import QueryRuntime
from imp_actors.types import SketchVersion

Expected = tuple[tuple[str, int | None], ...]


def expected_versions(q: QueryRuntime, sv: SketchVersion) -> Expected | None:
    """(table, version of ``sv``) for every table ``q`` reads; None when ``sv`` is for
    another set of tables."""
    if len(sv.versions) != len(q.tables):
        return None
    return tuple((t, sv.versions.get(t)) for t in q.tables)


class Freshness:
    def __init__(self, ctx: RuntimeContext):
        self.ctx = ctx

    def current(self, q: QueryRuntime, sv: SketchVersion) -> bool:
        """``sv`` is exact for the newest committed version of every table ``q`` reads
        (as found at most ``fresh_recheck_s`` ago)."""
        expected = expected_versions(q, sv)
        return expected is not None and self.versions_hold(expected)

    def versions_hold(self, expected: Expected) -> bool:
        """Every (table, version) of ``expected`` is the table's newest committed version
        (as found at most ``fresh_recheck_s`` ago)."""
        probe, max_age = self.ctx.probe, self.ctx.config.fresh_recheck_s
        for table, version in expected:  # a loop, not all(...): this runs on every request
            if probe.latest(table, max_age) != version:
                return False
        return True

    def answer_check(self, q: QueryRuntime, sv: SketchVersion, fresh: bool = True
                     ) -> Callable[[], bool]:
        """A check, made once and called on every repeated request, that says whether
        ``get_sketch(q.name, fresh)`` would still answer ``sv`` without any work: the
        name is still this registration, ``sv`` its latest version and, with ``fresh``,
        no table it reads has a newer committed version. A passed check counts as a use
        and a hit, as ``get_sketch`` counts them."""
        name, ctx = q.name, self.ctx
        directory, history, counters = ctx.queries, q.history, ctx.counters
        probe, expected = ctx.probe, expected_versions(q, sv)
        if expected is None:
            return lambda: False

        def unchanged() -> bool:
            if directory.get_or_none(name) is not q or history.latest is not sv:
                return False
            if fresh:  # ``versions_hold``, inline: one frame less on the hot path
                max_age = ctx.config.fresh_recheck_s
                for table, version in expected:
                    if probe.latest(table, max_age) != version:
                        return False
            q.last_used = time.time()
            counters["sketch_hits"] += 1
            return True

        return unchanged
