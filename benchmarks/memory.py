"""``imp bench memory``: state sizes per operator and per query, sketch and range sizes
(paper 8.4.3, 8.6: Fig. 13e/f, 15, 17, 18). In-process engine only (no Spark, no Ray).

- ``queries``: ``q_groups_*`` and ``q_joinsel`` (1/5/10%) bootstrapped on ``rows`` rows,
  then mixed batches of each delta size: the query's state bytes (and per operator: group
  tables with F_g, join sides, top-k buffers, μ counts) and the delta's own bytes;
- ``topk_space``: TPC-H Q10 (the paper's Q_space) at scale ``sf`` with the top-k buffer
  holding l entries (1K, 5K, 10K, 20K, all): state bytes;
- ``sketches``: for n fragments (100 .. 100,000), the bytes of a sketch (a roaring bitmap,
  serialized; half of the fragments set, alternating, and all set) and of the ranges
  (n - 1 split points as int64, and as the partition's JSON).
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any, Iterable

import numpy as np
import pyarrow as pa

from benchmarks.paper_common import (
    finish_report,
    log,
    pyplot,
    save_figure,
    start_report,
)

GROUP_QUERIES = ("q_groups_50", "q_groups_1000", "q_groups_5000", "q_groups_500000")
SELECTIVITY = (0.01, 0.05, 0.10)
DELTA_SIZES = (10, 100, 1000, 10000)
SKETCH_SIZES = (100, 200, 500, 1000, 2000, 5000, 10000, 20000, 100000)
TOPK_BUFFERS = (1000, 5000, 10000, 20000, None)


def _pipeline(sql: str, tables: dict[str, pa.Table], attr: str, fragments: int,
              options=None):
    from imp_core.engine.operators.base import TableDelta
    from imp_core.engine.pipeline import EngineOptions, IncrementalQuery
    from imp_core.sketch.partition import build_partition_set
    from imp_core.sql import plan_sql

    plan = plan_sql(sql, {t: d.schema for t, d in tables.items()})
    pset = build_partition_set({attr: fragments}, lambda t: tables[t].schema,
                               lambda t, c: tables[t].column(c))
    pipe = IncrementalQuery(plan, pset, options or EngineOptions(keep_result=False))
    pipe.apply({t: TableDelta.inserts(d) for t, d in tables.items()
                if t in plan.root.tables()})
    return pipe


def _by_operator(pipe) -> list[dict[str, Any]]:
    return [{"op": s["op"], "kind": s["kind"], "state_bytes": s["state_bytes"]}
            for s in pipe.stats()] + [{"op": "merge", "kind": "merge",
                                       "state_bytes": int(pipe.merge.counts.nbytes)}]


def query_states(rows: int, sizes: list[int], seed: int, progress: bool
                 ) -> list[dict[str, Any]]:
    from benchmarks.micro import JOINSEL_SQL
    from imp_core.engine.operators.base import TableDelta
    from imp_core.workloads.queries import load_query
    from imp_core.workloads.synthetic import generate_groups_table, generate_joinhelp

    out = []
    rng = np.random.default_rng(seed)
    cases = [(q, load_query(q).sql, int(q.rsplit("_", 1)[1]), None) for q in GROUP_QUERIES]
    cases += [(f"q_joinsel_{int(100 * s)}pct", JOINSEL_SQL.format(h="tjoinhelp"), 5000, s)
              for s in SELECTIVITY]
    for name, sql, groups, sel in cases:
        table = f"t{groups}g"
        base = generate_groups_table(groups, rows, seed=seed)
        tables = {table: base}
        if sel is not None:
            present = max(1, round(sel * groups))
            tables["tjoinhelp"] = generate_joinhelp(present, groups=groups, selectivity=sel,
                                                    seed=seed)
        t0 = time.perf_counter()
        pipe = _pipeline(sql, tables, f"{table}.a", 1000)
        boot = time.perf_counter() - t0
        next_id = rows + 1
        for n in sizes:
            dels = base.take(pa.array(rng.choice(base.num_rows, n // 2, replace=False)))
            base = base.filter(pa.array(~np.isin(base.column("id").to_numpy(),
                                                 dels.column("id").to_numpy())))
            fresh = generate_groups_table(groups, n - n // 2, seed=int(rng.integers(1 << 30)))
            ids = np.arange(next_id, next_id + fresh.num_rows, dtype=np.int64)
            next_id += fresh.num_rows
            fresh = fresh.set_column(0, base.schema.field("id"), pa.array(ids))
            base = pa.concat_tables([base, fresh])
            rows_ = pa.concat_tables([dels, fresh])
            w = np.concatenate([-np.ones(dels.num_rows, np.int64),
                                np.ones(fresh.num_rows, np.int64)])
            pipe.apply({table: TableDelta(rows_, w)})
            out.append({"query": name, "groups": groups, "selectivity": sel, "rows": rows,
                        "delta": n, "delta_bytes": int(rows_.nbytes + w.nbytes),
                        "state_bytes": pipe.state_bytes(), "operators": _by_operator(pipe),
                        "bootstrap_s": round(boot, 3)})
        log(progress, f"  memory {name:18s} state {pipe.state_bytes() / 2**20:8.2f} MiB")
    return out


def topk_space(sf: float, data_root: Path, buffers: Iterable[int | None], progress: bool
               ) -> list[dict[str, Any]]:
    from imp_core.engine.pipeline import EngineOptions
    from imp_core.workloads.queries import load_query
    from imp_core.workloads.tpch import generate_tpch, load_tpch_tables

    label = f"{sf:g}"
    folder = data_root / "data" / f"tpch-sf{label}"
    paths = generate_tpch(sf, folder, progress=progress,
                          tables=["customer", "orders", "lineitem", "nation"])
    tables = load_tpch_tables(paths)
    sql = load_query("q10").sql
    out = []
    for buf in buffers:
        t0 = time.perf_counter()
        pipe = _pipeline(sql, tables, "lineitem.l_orderkey", 1000,
                         EngineOptions(topk_buffer=buf, keep_result=False))
        ops = _by_operator(pipe)
        topk = next((o for o in ops if o["kind"] == "topk"), None)
        out.append({"query": "q10", "sf": sf, "buffer": buf,
                    "state_bytes": pipe.state_bytes(),
                    "topk_bytes": topk["state_bytes"] if topk else None,
                    "topk_entries": _topk_entries(pipe), "operators": ops,
                    "bootstrap_s": round(time.perf_counter() - t0, 2)})
        log(progress, f"  memory q10 SF {label} top-k buffer {buf!s:6s}: state "
            f"{pipe.state_bytes() / 2**20:8.2f} MiB, top-k {out[-1]['topk_bytes']} B")
    return out


def _topk_entries(pipe) -> int | None:
    for op in pipe.operators:
        if op.kind == "topk":
            return int(op.snapshot()[op.ENTRIES.name].num_rows)
    return None


def sketch_sizes(sizes: Iterable[int]) -> list[dict[str, Any]]:
    from pyroaring import BitMap

    from imp_core.sketch.partition import RangePartition

    out = []
    for n in sizes:
        part = RangePartition("t", "a", pa.int64(), tuple(range(1, n)))
        half = BitMap(range(0, n, 2))
        full = BitMap(range(n))
        bounds = np.asarray(part.bounds, dtype=np.int64)
        out.append({"fragments": n, "sketch_bytes_half": len(half.serialize()),
                    "sketch_bytes_full": len(full.serialize()),
                    "bitvector_bytes": (n + 7) // 8,
                    "ranges_bytes": int(bounds.nbytes),
                    "ranges_json_bytes": len(json.dumps(part.to_json()))})
    return out


def run_memory_bench(rows: int = 1_000_000, sf: float = 1.0,
                     delta_sizes: Iterable[int] = DELTA_SIZES,
                     topk_buffers: Iterable[int | None] = TOPK_BUFFERS,
                     sketch_fragments: Iterable[int] = SKETCH_SIZES, seed: int = 0,
                     data_root: str | Path = ".imp", max_load: float | None = None,
                     progress: bool = True, out: str | Path = "bench-results/memory.json"
                     ) -> dict[str, Any]:
    sizes, buffers = list(delta_sizes), list(topk_buffers)
    params = {"rows": rows, "sf": sf, "delta_sizes": sizes, "topk_buffers": buffers,
              "sketch_fragments": list(sketch_fragments), "seed": seed, "fragments": 1000}
    report = start_report("memory", params, max_load, progress)
    report["queries"] = query_states(rows, sizes, seed, progress)
    report["topk_space"] = topk_space(sf, Path(data_root), buffers, progress) if sf else []
    report["sketches"] = sketch_sizes(sketch_fragments)
    report["results"] = report["queries"]
    report["summary"] = summarize(report)
    finish_report(report, out, lambda base: plot(report, base))
    return report


def summarize(report: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {"state_mib_at_largest_delta": {}}
    for r in report["queries"]:
        out["state_mib_at_largest_delta"][r["query"]] = round(r["state_bytes"] / 2**20, 3)
    if report["topk_space"]:
        out["q10_state_mib_by_buffer"] = {str(r["buffer"]): round(r["state_bytes"] / 2**20, 3)
                                          for r in report["topk_space"]}
    big = report["sketches"][-1] if report["sketches"] else None
    if big:
        out["sketch_bytes_at_max_fragments"] = big["sketch_bytes_half"]
        out["ranges_bytes_at_max_fragments"] = big["ranges_bytes"]
    return out


def plot(report: dict[str, Any], base: Path) -> list[str]:
    plt = pyplot()
    fig, axes = plt.subplots(1, 3, figsize=(13, 3.5))
    ax = axes[0]
    for q in dict.fromkeys(r["query"] for r in report["queries"]):
        pts = sorted((r["delta"], r["state_bytes"] / 2**20) for r in report["queries"]
                     if r["query"] == q)
        ax.plot(*zip(*pts), marker="o", label=q)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("delta size")
    ax.set_ylabel("state MiB")
    ax.set_title("state per query (Fig. 17)", fontsize=9)
    ax.legend(fontsize=6)
    ax = axes[1]
    if report["topk_space"]:
        labels = [str(r["buffer"]) for r in report["topk_space"]]
        ax.bar(labels, [r["state_bytes"] / 2**20 for r in report["topk_space"]])
        ax.set_xlabel("top-k buffer entries")
        ax.set_ylabel("state MiB")
        ax.set_title(f"Q10 at SF {report['parameters']['sf']:g} (Fig. 13e)", fontsize=9)
    ax = axes[2]
    sk = report["sketches"]
    if sk:
        n = [r["fragments"] for r in sk]
        ax.plot(n, [r["sketch_bytes_half"] for r in sk], marker="o", label="sketch (roaring)")
        ax.plot(n, [r["ranges_bytes"] for r in sk], marker="o", label="ranges (int64)")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("fragments")
        ax.set_ylabel("bytes")
        ax.set_title("sketch and range sizes (Fig. 18)", fontsize=9)
        ax.legend(fontsize=7)
    return [save_figure(fig, base.with_name(base.name + ".png"))]
