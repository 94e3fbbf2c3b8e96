"""Shared pieces of the paper benchmark suites (``imp bench tpch|micro|breakeven|mixed|...``).

Every suite measures the service's own path side by side with its baselines in one
process: an in-process ``Coordinator`` (local backend: the query workers are objects in
this process, no Ray) over a ``DeltaStore``, Spark for full maintenance (FM) and the plain
query (NS). The helpers here build those pieces, draw update batches, time things and
write the report (JSON plus PNG plots).

Invariants: a bench store lives under ``<data_root>/bench/<name>`` and is reused across
runs (created once); a report always carries ``environment`` (machine, versions),
``load`` (1/5/15-minute load average at start and end) and ``parameters``.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from benchmarks.common import environment

# small data files: Delta's MERGE rewrites every file that holds a deleted row, so the
# cost of a delete commit is about (files touched) x (file size)
BENCH_FILE_BYTES = 4 << 20
BENCH_ROW_GROUP_ROWS = 65_536
BENCH_PAGE_ROWS = 2048


def log(progress: bool, text: str) -> None:
    if progress:
        print(text, file=sys.stderr, flush=True)


def bar(progress: bool, total: int, desc: str):
    """A tqdm progress bar on stderr (a no-op object when ``progress`` is off)."""
    from tqdm import tqdm

    return tqdm(total=total, desc=desc, file=sys.stderr, leave=False, dynamic_ncols=True,
                disable=not progress or not sys.stderr.isatty())


# -- machine load ------------------------------------------------------------------------------
def load_average() -> list[float]:
    try:
        return [float(x) for x in Path("/proc/loadavg").read_text().split()[:3]]
    except OSError:  # pragma: no cover - not Linux
        return [float(x) for x in os.getloadavg()]


def wait_quiet(max_load: float | None, progress: bool = True, timeout_s: float = 1800.0,
               ) -> dict[str, Any]:
    """Wait (bounded) while the 1-minute load is above ``max_load``; returns what was seen.
    None: do not wait, only record."""
    start = time.monotonic()
    waited = 0.0
    load = load_average()
    while max_load is not None and load[0] > max_load and waited < timeout_s:
        log(progress, f"  waiting for a quiet machine: load {load[0]:.2f} > {max_load}")
        time.sleep(15)
        waited = time.monotonic() - start
        load = load_average()
    return {"at_start": load, "waited_s": round(waited, 1), "max_load": max_load}


def start_report(benchmark: str, parameters: dict[str, Any], max_load: float | None,
                 progress: bool) -> dict[str, Any]:
    return {"benchmark": benchmark, "environment": environment(),
            "load": wait_quiet(max_load, progress), "parameters": parameters,
            "started": time.time()}


def write_partial(report: dict[str, Any], out: str | Path, **measured: Any) -> Path:
    """``report`` with what is measured so far, as ``<out>-partial.json``: an interrupted
    run keeps it."""
    path = Path(out)
    path = path.with_name(path.stem + "-partial.json")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({**report, "partial": True, **measured}, indent=2, default=str))
    return path


def finish_report(report: dict[str, Any], out: str | Path, plots: Callable[[Path], list[str]]
                  | None = None) -> Path:
    """Record the end load and total time, draw the plots next to the JSON, write it."""
    report["load"]["at_end"] = load_average()
    report["total_s"] = round(time.time() - report.pop("started", time.time()), 1)
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    if plots is not None:
        try:
            report["plots"] = plots(out.with_suffix(""))
        except Exception as exc:  # a plot must never cost the measurements
            report["plots"] = []
            report["plot_error"] = repr(exc)
    out.write_text(json.dumps(report, indent=2, default=str))
    return out


# -- numbers ----------------------------------------------------------------------------------
def median(values: Sequence[float]) -> float:
    return float(statistics.median(values)) if values else float("nan")


def ms(seconds: float) -> float:
    return round(1000.0 * seconds, 3)


def ratio(a: float, b: float) -> float | None:
    return round(a / b, 1) if b and b > 0 and a == a else None


def percent(x: float) -> str:
    return f"{100 * x:.3g}%"


# -- stores, coordinator, Spark ------------------------------------------------------------------
def bench_write_options(file_bytes: int = BENCH_FILE_BYTES):
    from imp_core.storage.delta_store import WriteOptions

    return WriteOptions(max_row_group_size=BENCH_ROW_GROUP_ROWS,
                        target_file_size=file_bytes, page_rows=BENCH_PAGE_ROWS)


def open_store(root: Path, file_bytes: int = BENCH_FILE_BYTES):
    from imp_core.storage import DeltaStore

    return DeltaStore(root, bench_write_options(file_bytes))


def ensure_synthetic(store, name: str, rows: int, seed: int = 0, progress: bool = True,
                     make: Callable[[], pa.Table] | None = None) -> None:
    """Create ``name`` (a ``tNg`` or ``tjoinhelp``) with ``rows`` rows unless present."""
    from imp_core.workloads.schemas import TABLES
    from imp_core.workloads.synthetic import generate_table

    if name in store.tables():
        return
    t0 = time.perf_counter()
    data = make() if make is not None else generate_table(name, rows, seed)
    info = TABLES[name]
    cluster = ("a",) if "a" in data.column_names else ()
    store.create_table(name, data, key=info.key, domains=info.domains, cluster_by=cluster)
    log(progress, f"  created {name} ({data.num_rows:,} rows, "
        f"{time.perf_counter() - t0:.1f} s)")


def make_coordinator(store, root: Path, options=None, versions_kept: int = 64,
                     ray_address: str | None = None, eviction=None):
    """A started in-process coordinator over ``store``: no background polling (every
    commit goes through it), no periodic checkpoints (a query is checkpointed when it is
    registered), no warm actors. Its backend is local, or with ``ray_address`` the Ray
    cluster there (each query an actor on one of its nodes). ``eviction``: the
    service's default policy unless given."""
    import shutil

    from imp_actors.coordinator import Coordinator
    from imp_actors.runtime_config import EvictionPolicy, RuntimeConfig

    # a fresh registry and checkpoints: a killed earlier run must not leave queries behind
    shutil.rmtree(root / "service", ignore_errors=True)
    cfg = RuntimeConfig(root=str(root / "service"), tables_root=str(store.root),
                        backend="ray" if ray_address else "local",
                        ray_address=ray_address, poll_seconds=None,
                        checkpoint_every_batches=None,
                        warm_actors=0, sketch_versions_kept=versions_kept,
                        eviction=eviction or EvictionPolicy())
    # how first states are built is the service's setting (IMP_BOOTSTRAP,
    # IMP_SPARK_BOOTSTRAP_MIN_BYTES), so a run can compare the two ways; the roots and
    # backend above stay the benchmark's whatever the environment says
    tuned = RuntimeConfig.from_env()
    cfg = replace(cfg, bootstrap=tuned.bootstrap,
                  spark_bootstrap_min_bytes=tuned.spark_bootstrap_min_bytes)
    return Coordinator(cfg, store=store, options=options).start()


def get_bench_spark(spark=None):
    from imp_core.spark import get_spark

    return spark or get_spark()


# -- update batches ------------------------------------------------------------------------------
def _path(uri: str) -> str:
    return uri[len("file://"):] if uri.startswith("file://") else uri


@dataclass
class RowSampler:
    """Draws stored rows of a table to delete: from randomly chosen data files of the
    current snapshot (a few files per batch, so a commit rewrites few files), optionally
    only rows satisfying ``predicate`` (the query's pushed-down selection)."""

    store: Any
    table: str
    rng: np.random.Generator
    predicate: Any = None
    exclude: set = field(default_factory=set)  # keys not to draw (e.g. already drawn)

    def draw(self, n: int, key: Sequence[str]) -> pa.Table:
        from imp_core.plan.evaluate import evaluate_predicate

        schema = self.store.schema(self.table)
        uris = list(self.store.file_uris(self.table))
        order = self.rng.permutation(len(uris))
        picked: list[pa.Table] = []
        have = 0
        for i in order:
            data = pq.read_table(_path(uris[i]), columns=schema.names).cast(schema)
            if self.predicate is not None and data.num_rows:
                data = data.filter(pa.array(evaluate_predicate(self.predicate, data)))
            if self.exclude and data.num_rows:
                keys = list(zip(*(data.column(k).to_pylist() for k in key)))
                keep = np.array([k not in self.exclude for k in keys], dtype=bool)
                data = data.filter(pa.array(keep))
            if data.num_rows:
                picked.append(data)
                have += data.num_rows
            if have >= 2 * n:  # some choice within the files, yet few files
                break
        if not picked:
            return schema.empty_table()
        pool = pa.concat_tables(picked)
        take = self.rng.choice(pool.num_rows, size=min(n, pool.num_rows), replace=False)
        return pool.take(pa.array(np.sort(take)))


@dataclass
class SyntheticUpdates:
    """Update batches of a synthetic ``tNg`` table: deletions of stored rows (from a few
    files) and insertions of fresh rows (new ids, same value distribution)."""

    store: Any
    table: str
    groups: int
    rng: np.random.Generator
    next_id: int = 0

    def __post_init__(self) -> None:
        if not self.next_id:
            import pyarrow.compute as pc

            ids = self.store.read(self.table, columns=["id"]).column(0)
            self.next_id = int(pc.max(ids).as_py() or 0) + 1

    def inserts(self, n: int) -> pa.Table:
        from imp_core.workloads.synthetic import generate_groups_table

        schema = self.store.schema(self.table)
        fresh = generate_groups_table(self.groups, n, seed=int(self.rng.integers(1 << 31)))
        ids = np.arange(self.next_id, self.next_id + n, dtype=np.int64)
        self.next_id += n
        fresh = fresh.set_column(0, schema.field("id"), pa.array(ids))
        return fresh.cast(schema)

    def deletes(self, n: int) -> pa.Table:
        return RowSampler(self.store, self.table, self.rng).draw(n, ("id",))

    def batch(self, size: int, kind: str = "mixed") -> tuple[pa.Table | None, pa.Table | None]:
        """(inserts, deletes) of ``size`` changed rows: ``insert``, ``delete`` or ``mixed``
        (half and half)."""
        if kind == "insert":
            return self.inserts(size), None
        if kind == "delete":
            return None, self.deletes(size)
        n_del = size // 2
        return self.inserts(size - n_del), (self.deletes(n_del) if n_del else None)


def count_rows(store, table: str) -> int:
    return sum(pq.ParquetFile(_path(u)).metadata.num_rows for u in store.file_uris(table))


# -- timing the service path -------------------------------------------------------------------
def op_seconds(stats: list[list[dict]]) -> dict[str, float]:
    """Cumulative operator seconds by kind (scan, select, project, join, aggregate, topk),
    summed over the shards of ``Coordinator.operator_stats``."""
    out: dict[str, float] = {}
    for shard in stats:
        for op in shard:
            out[op["kind"]] = out.get(op["kind"], 0.0) + op["seconds"]
    return out


def timed_maintenance(coordinator, name: str, forget_feed: Iterable[str] = ()
                      ) -> dict[str, float]:
    """One ``get_sketch`` (the service's maintenance on request), with its breakdown:
    ``total`` wall time, ``join`` and ``ops`` (all operators) inside the pipeline, and
    ``other`` (delta pull and restriction, routing, sketch out and publish). With
    ``forget_feed`` the coordinator first drops its cached changes of those tables, so the
    delta is read back from the Delta change files."""
    for t in forget_feed:
        coordinator.ctx.feed.forget(t)
    before = op_seconds(coordinator.diagnostics.operator_stats(name))
    pull0 = coordinator.ctx.feed.stats.pull_seconds
    t0 = time.perf_counter()
    coordinator.get_sketch(name)
    total = time.perf_counter() - t0
    after = op_seconds(coordinator.diagnostics.operator_stats(name))
    diff = {k: after.get(k, 0.0) - before.get(k, 0.0) for k in after}
    ops = sum(diff.values())
    return {"total": total, "join": diff.get("join", 0.0), "ops": ops,
            "pull": coordinator.ctx.feed.stats.pull_seconds - pull0,
            "other": max(total - ops, 0.0)}


# -- plots ------------------------------------------------------------------------------------
def pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def save_figure(fig, path: Path) -> str:
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(path, dpi=72)
    pyplot().close(fig)
    return str(path)
