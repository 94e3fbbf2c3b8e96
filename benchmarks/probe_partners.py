"""Maintenance when a probed join side's partner changes (``python -m
benchmarks.probe_partners``): the cost ``imp bench tpch`` does not show, since its
deltas touch only ``lineitem``.

On the SF 1 store that ``imp bench tpch`` leaves in ``<data-root>/bench/paper-tpch-sf1``,
each query is registered with the default join-state budget (its ``lineitem`` sides are
probed from the Delta files), then 100 rows of a partner table (``orders``, ``supplier``)
are updated per round; the fresh sketch's time is set against a Spark recapture (FM) at
the same versions in the same run, and the two sketches must be equal.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
import pyarrow as pa

from imp_core.process.stdout import json_out

CASES = (("q03", "orders", "o_shippriority"), ("q05", "orders", "o_comment"),
         ("q07", "supplier", "s_acctbal"), ("q09", "supplier", "s_acctbal"))


def run(data_root: Path, rounds: int = 3, seed: int = 0) -> list[dict]:
    from benchmarks.paper_common import make_coordinator
    from imp_actors.types import QuerySpec
    from imp_core.storage import DeltaStore
    from imp_core.workloads.queries import load_query

    store = DeltaStore(data_root / "bench" / "paper-tpch-sf1")
    c = make_coordinator(store, data_root / "probe-partners")
    rng = np.random.default_rng(seed)
    out = []
    try:
        for qn, table, col in CASES:
            c.register(QuerySpec(qn, load_query(qn).sql, force=True,
                                 partitions={"lineitem.l_orderkey": 1000}))
            info = c.info(qn)
            for rep in range(rounds):
                data = store.read(table)
                old = data.take(pa.array(rng.choice(data.num_rows, 100, replace=False)))
                i = old.schema.get_field_index(col)
                new = old.set_column(i, old.schema.field(col), old.column(col).take(
                    pa.array(rng.permutation(old.num_rows))))
                c.apply_update(table, updates=(old, new))
                t0 = time.perf_counter()
                sv = c.get_sketch(qn)
                imp_s = time.perf_counter() - t0
                fm, fm_s = c.recapture(qn, dict(sv.versions), sv.sketch.partitions)
                out.append({"query": qn, "table": table, "round": rep,
                            "imp_ms": round(1000 * imp_s, 1), "fm_s": round(fm_s, 2),
                            "sketch_ok": fm == sv.sketch,
                            "probed_join_sides": len(info.probed_join_sides),
                            "state_mib": round(info.state_bytes / 2**20, 1)})
                print(out[-1], file=sys.stderr)
            c.drop(qn)
    finally:
        c.close()
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data-root", default=".imp", type=Path)
    p.add_argument("--rounds", type=int, default=3)
    args = p.parse_args(argv)
    print(json.dumps(run(args.data_root, args.rounds), indent=2), file=json_out())
    return 0


if __name__ == "__main__":
    sys.exit(main())
