"""Probes of a disk index with its pages cold: the plain binary search over the mapped
files against the fence and page advice (``imp_core.storage.page_advice``), side by side.

    python -m benchmarks.cold_probes DIR [--keys 100] [--trials 3] [--json]

``DIR`` is one index's folder (``<store>/_imp_indexes/<table>-<id>/<key>-h1``). Each trial
draws keys present in the base, empties the page cache (``benchmarks.scale``'s
``drop_page_cache``: root only; otherwise the rows say ``cold: false``), maps the base
anew and times the first probe (cold) and a second one of the same keys (warm), once
per mode, with fresh keys for each.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

from imp_core.storage import index_bases


def run(directory: Path, keys: int = 100, trials: int = 3, seed: int = 0) -> list[dict]:
    """One row per trial and mode: keys, rows found, whether the cache was emptied, the
    first (cold) and second (warm) probe's milliseconds, and whether the rows equal the
    plain search's."""
    from benchmarks.scale import drop_page_cache

    found = index_bases.DiskBase.find(directory, [], 2**62)
    if found is None:
        raise ValueError(f"no disk index base in {directory}")
    found._fence_of()  # the fence file, as a base written by this build has it
    hashes = np.asarray(found._hashes)
    rng = np.random.default_rng(seed)
    rows = []
    saved = index_bases.ADVISED_KEYS
    try:
        for trial in range(trials):
            for mode in ("plain", "advised"):
                wanted = np.unique(hashes[rng.integers(0, len(hashes), keys)])
                index_bases.ADVISED_KEYS = 0 if mode == "plain" else saved
                cold = drop_page_cache()
                base = index_bases.DiskBase(found.path, found.columns)
                t0 = time.perf_counter()
                out = base.rows_for(wanted)
                first = time.perf_counter() - t0
                t0 = time.perf_counter()
                base.rows_for(wanted)
                warm = time.perf_counter() - t0
                index_bases.ADVISED_KEYS = 0
                same = out.equals(base.rows_for(wanted))  # what the plain search finds
                rows.append({"trial": trial, "mode": mode, "keys": len(wanted),
                             "rows": out.num_rows, "cold": cold, "same_rows": same,
                             "first_ms": round(1000 * first, 2),
                             "warm_ms": round(1000 * warm, 2)})
    finally:
        index_bases.ADVISED_KEYS = saved
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.cold_probes",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("directory", type=Path, help="one index's folder")
    parser.add_argument("--keys", type=int, default=100)
    parser.add_argument("--trials", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", action="store_true", help="print the rows as JSON")
    args = parser.parse_args(argv)
    try:
        rows = run(args.directory, args.keys, args.trials, args.seed)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(rows))
    else:
        for r in rows:
            print(f"{r['mode']:8s} {r['keys']} keys, {r['rows']} rows: first "
                  f"{r['first_ms']} ms ({'cold' if r['cold'] else 'cache kept'}), "
                  f"warm {r['warm_ms']} ms")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
