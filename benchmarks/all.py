"""``imp bench all``: every paper suite in turn, then the issue-6 sections of
``docs/benchmarks.md`` regenerated from their reports (``benchmarks.paper_docs``).

Each suite writes ``<results>/<suite>.json`` and its plots; a suite that fails is
recorded (``failed``) and the others still run.
"""

from __future__ import annotations

import sys
import traceback
from pathlib import Path
from typing import Any

from benchmarks.paper_common import log
from benchmarks.paper_docs import SUITES, update_doc


def run_all(suites: list[str] | None = None, results_dir: str | Path = "bench-results",
            doc: str | Path = "docs/benchmarks.md", img_dir: str | Path = "docs/img",
            docs_only: bool = False, progress: bool = True, **params: Any
            ) -> dict[str, Any]:
    """``params``: ``sf``, ``rows``, ``mixed_rows``, ``operations``, ``updates``,
    ``strategies_rows``, ``repeats``, ``data_root``, ``max_load``."""
    from benchmarks.breakeven import run_breakeven_bench
    from benchmarks.memory import run_memory_bench
    from benchmarks.micro import run_micro_bench
    from benchmarks.mixed import run_mixed_bench
    from benchmarks.strategies import run_strategies_bench
    from benchmarks.tpch import run_tpch_bench

    results_dir = Path(results_dir)
    common = {"data_root": params.get("data_root", ".imp"),
              "max_load": params.get("max_load"), "progress": progress}
    rows = params.get("rows", 1_000_000)
    runners = {
        "tpch": lambda out: run_tpch_bench(sf=params.get("sf", 1.0),
                                           repeats=params.get("repeats", 3), out=out,
                                           **common),
        "micro": lambda out: run_micro_bench(rows=rows, repeats=params.get("repeats", 3),
                                             out=out, **common),
        "breakeven": lambda out: run_breakeven_bench(rows=rows, out=out, **common),
        "mixed": lambda out: run_mixed_bench(rows=params.get("mixed_rows", 10_000_000),
                                             operations=params.get("operations", 1000),
                                             out=out, **common),
        "strategies": lambda out: run_strategies_bench(
            rows=params.get("strategies_rows", rows), updates=params.get("updates", 1000),
            out=out, **common),
        "memory": lambda out: run_memory_bench(rows=rows, sf=params.get("sf", 1.0), out=out,
                                               **common),
    }
    done, failed = [], {}
    if not docs_only:
        for name in suites or list(SUITES):
            log(progress, f"== imp bench {name}")
            try:
                runners[name](results_dir / f"{name}.json")
                done.append(name)
            except Exception as exc:  # one suite's failure must not lose the others
                failed[name] = repr(exc)
                traceback.print_exc(file=sys.stderr)
    found = update_doc(Path(doc), results_dir, Path(img_dir))
    return {"ran": done, "failed": failed, "documented": found, "doc": str(doc)}
