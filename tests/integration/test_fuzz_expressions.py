"""Wide and deep expressions against a real ``imp serve`` in a process of its own (issue
50): one registration of an IN list of 15,000 values killed the server with signal 11.

The server runs as a subprocess (``benchmarks.fuzz_expressions.ServerProcess``: local
backend, a fresh root with a small ``lineitem``), so a crash ends that process, not the
test, and is seen. Each case is registered through ``SketchClient``, run with RunQuery
with and without its sketch, and checked against DuckDB; every call must succeed or end
with INVALID_ARGUMENT, RESOURCE_EXHAUSTED or UNIMPLEMENTED and a message, and the same
server process (same pid) must still answer at the end.
"""

from __future__ import annotations

import json

import pytest

from benchmarks.fuzz_expressions import expression_cases, run_expression_fuzz

pytestmark = [pytest.mark.grpc, pytest.mark.spark, pytest.mark.integration]

# the fixed shapes (the list with the attribute named and advised, IN / NOT IN
# lists up to 100,000 values, OR / AND chains, CASE, arithmetic, parentheses, function
# calls, NOTs), and random draws of lists and chains
_REFUSED = {"arith_3000": "RESOURCE_EXHAUSTED", "parens_500": "INVALID_ARGUMENT",
            "functions_300": "INVALID_ARGUMENT"}


def test_wide_and_deep_expressions_never_take_the_server_down(tmp_path):
    cases = expression_cases(seed=50, max_in=100_000, draws=3)
    report = run_expression_fuzz(cases, rows=20_000, root=tmp_path / "root")
    summary = json.dumps(report.to_json(), indent=1)
    assert report.crashes == 0 and report.server_starts == 1, summary
    assert report.same_server, summary
    assert report.findings == [], summary
    # the request registers, named and advised, and so does 100,000 values
    assert report.largest_in_registered == 100_000, summary
    assert {"issue_named", "issue_advisor", "in_100000", "or_3000", "and_3000",
            "case_3000", "not_in_5000_nulls"} <= set(report.registered_cases), summary
    for name, status in _REFUSED.items():
        assert report.refused_cases.get(name) == status, summary
    assert report.results_checked == 2 * report.registered, summary
