"""``imp demo``: the whole service on the embedded defaults, driven through gRPC.

It sets up a fresh service root (a local folder), generates TPC-H at a small scale
(``tpchgen-cli``, progress bar) and a synthetic table into Delta tables, starts the
coordinator (local Ray actors, local Spark) behind the gRPC server on a loopback port,
and then, as a client would: registers workload queries, follows their sketches with
``WatchSketch``, streams update batches with ``ApplyUpdate``, asks for fresh sketches and
compares each maintenance with a full recapture on Spark, runs every query with and
without its sketch, and ends with a summary. Every maintained sketch is checked against
the recapture; the demo fails (exit status 1) if one differs.

Its report is the only thing on standard output: Ray's and Spark's own messages (the
JVM's warnings, worker logs) go to standard error (``imp_core.process.stdout``), and progress
is one line per step when standard error is not a terminal (``imp_core.process.progress``).
"""

from __future__ import annotations

import shutil
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa

from imp_core.advice.layouts import LayoutWarning
from imp_core.process.stdout import json_only_stdout, json_out

# query name -> (workload query, fragments, eager batch size or None for lazy, attributes
# chosen by the advisor (True) or the query's header)
DEMO_QUERIES = {
    "top_orders": ("q03", 64, None, True),
    "returned_items": ("q10", 64, None, True),
    "cheap_groups": ("q_having_2", 200, None, True),
    "group_band": ("q_endtoend", 200, 300, False),
}
# table updated -> the column whose values the modified rows exchange (stays in its domain)
UPDATED = {"lineitem": "l_quantity", "t5000g": "c"}


def _say(text: str = "") -> None:
    # the report's stream: stdout as it was when run_demo began (the rest goes to stderr)
    print(text, file=json_out(), flush=True)


@dataclass
class _Stats:
    maintain_ms: list[float] = field(default_factory=list)
    recapture_ms: list[float] = field(default_factory=list)
    exact: bool = True
    versions_seen: int = 0


def _modified_batch(store, table: str, column: str, size: int, rng: np.random.Generator
                    ) -> tuple[pa.Table, pa.Table]:
    """Delete ``size`` stored rows and insert them back with ``column``'s values
    exchanged among them (one version, keys kept, values inside their domains)."""
    data = store.read(table)
    rows = data.take(pa.array(rng.choice(data.num_rows, size, replace=False), pa.int64()))
    i = rows.schema.get_field_index(column)
    moved = rows.column(column).take(pa.array(rng.permutation(size), pa.int64()))
    return rows.set_column(i, rows.schema.field(column), moved), rows


def _load(store, root: Path, scale: float, rows: int, seed: int) -> None:
    from imp_core.workloads.schemas import TABLES
    from imp_core.workloads.synthetic import generate_groups_table
    from imp_core.workloads.tpch import generate_tpch

    _say(f"• generating TPC-H at scale factor {scale} with tpchgen-cli")
    paths = generate_tpch(scale, root / "generated" / f"tpch-sf{scale:g}", progress=True)
    _say("• loading it into Delta tables (change data feed on)")
    cluster = {"lineitem": ("l_orderkey",), "orders": ("o_orderkey",)}
    for name, path in paths.items():
        info = TABLES[name]
        store.create_table_from_parquet(name, path, key=info.key, domains=info.domains,
                                        cluster_by=cluster.get(name, ()), progress=False)
    _say(f"• generating the synthetic table t5000g ({rows:,} rows)")
    store.create_table("t5000g", generate_groups_table(5000, rows, seed), key=("id",),
                       domains=TABLES["t5000g"].domains, cluster_by=("a",))


def _watch(client, name: str, stats: _Stats, stop: threading.Event) -> None:
    """Print every new sketch version of ``name`` as the service streams it."""
    last = None
    try:
        for v in client.watch(name, after_seq=0):
            if stop.is_set():
                return
            frags = set(v.fragments)
            change = "" if last is None else \
                f" (+{len(frags - last)} −{len(last - frags)})"
            versions = ", ".join(f"{t}@{n}" for t, n in sorted(v.versions.items()))
            _say(f"    ◆ {name} v{v.seq}: {len(frags)} fragments{change} at {versions}")
            stats.versions_seen += 1
            last = frags
    except Exception as exc:  # the stream ends when the server stops
        if not stop.is_set():
            _say(f"    (watch of {name} ended: {exc})")


def run_demo(root: str = ".imp/demo", tpch_scale: float = 0.05, rows: int = 200_000,
             batches: int = 4, batch_size: int = 200, seed: int = 7,
             backend: str = "ray") -> int:
    """The demo; its exit status. Standard output holds its report and nothing else."""
    with json_only_stdout():  # Ray and Spark write to fd 1 whenever they like
        return _run_demo(root, tpch_scale, rows, batches, batch_size, seed, backend)


def _run_demo(root: str, tpch_scale: float, rows: int, batches: int, batch_size: int,
              seed: int, backend: str) -> int:
    from imp_actors.coordinator import Coordinator
    from imp_actors.runtime_config import Eager, EvictionPolicy, Lazy, RuntimeConfig
    from imp_core.spark.session import get_spark
    from imp_core.storage import DeltaStore
    from imp_core.workloads.queries import load_query
    from services.client import SketchClient
    from services.server import SketchServer
    from services.server_config import ServerConfig

    t_start = time.perf_counter()
    base = Path(root)
    shutil.rmtree(base, ignore_errors=True)
    svc = base / "service"
    _say(f"IMP demo — service root {svc} (tables, checkpoints, registry)")
    store = DeltaStore(svc)
    _load(store, base, tpch_scale, rows, seed)

    _say(f"• starting the service: coordinator ({backend} actors), Spark (local), gRPC")
    config = RuntimeConfig(root=str(svc), backend=backend, poll_seconds=0.5,
                           eviction=EvictionPolicy(max_live_actors=16, idle_seconds=None))
    coordinator = Coordinator(config, store=store).start()
    get_spark()
    server = SketchServer(ServerConfig(listen="127.0.0.1:0"), coordinator).start()
    _say(f"  SketchService on {server.address}")
    client = SketchClient(server.address)
    stop = threading.Event()
    stats = {name: _Stats() for name in DEMO_QUERIES}
    rng = np.random.default_rng(seed)
    ok = True
    try:
        _say("• registering queries through gRPC (the advisor chooses the sketch attributes "
             "by what the filtered query would read; first capture of each sketch)")
        sketched: dict[str, list[str]] = {}
        for name, (wq_name, fragments, eager, auto) in DEMO_QUERIES.items():
            wq = load_query(wq_name)
            strategy = Eager(batch_tuples=eager, max_delay_s=2.0) if eager else Lazy()
            t0 = time.perf_counter()
            info, why = client.register_explained(
                name, wq.sql, partitions="auto" if auto else
                {f"{t}.{c}": fragments for t, c in wq.sketch},
                fragments=fragments, strategy=strategy)
            sketched[name] = [p["table"] for p in info.partitions]
            attrs = ", ".join(f"{p['table']}.{p['column']}" for p in info.partitions)
            _say(f"  {name:15s} {wq_name:11s} sketch on {attrs}, {info.total_fragments} "
                 f"fragments, {info.strategy.kind}, registered in "
                 f"{time.perf_counter() - t0:.1f} s")
            _say(f"  {'':15s} why: {why['why']}")
        _say("• laying lineitem out for the sketches on it (a commit that changes no data)")
        done = client.layout("lineitem")
        if done.get("advice"):
            _say(f"  advice: {done['advice']['why']}")
            for w in done["advice"].get("warnings", ()):  # whom the order makes read more
                _say("  warning: " + LayoutWarning(**w).line(
                    "lineitem", done["advice"]["max_read_share"]))
        if done["applied"]:
            _say(f"  lineitem version {done['version']}: {done['row_groups']} row groups of "
                 f"{done['row_group_rows']:,} rows, {done['order']} order on "
                 f"{', '.join(done['columns'])}, in {done['seconds']:.1f} s")
        watchers = [threading.Thread(target=_watch, args=(client, n, stats[n], stop),
                                     daemon=True) for n in DEMO_QUERIES]
        for w in watchers:
            w.start()

        _say(f"• streaming {batches} update batches of {batch_size} changed rows per table")
        for b in range(batches):
            for table, column in UPDATED.items():
                ins, dels = _modified_batch(store, table, column, batch_size // 2, rng)
                res = client.apply_update(table, inserts=ins, deletes=dels)
                _say(f"  batch {b + 1}: {table} version {res.version} "
                     f"(−{res.deleted} +{res.inserted})")
            time.sleep(0.3)  # let the watch streams print the eager query's versions
            for name in DEMO_QUERIES:
                t0 = time.perf_counter()
                v = client.sketch(name, fresh=True)
                rpc_ms = 1000 * (time.perf_counter() - t0)
                # on the version's own ranges: adaptive ranges may have changed them since
                own = coordinator.sketch_version(name, v.seq).sketch.partitions
                fm, fm_s = coordinator.recapture(name, v.versions, own)
                exact = sorted(fm.fragments) == sorted(v.fragments)
                s = stats[name]
                s.maintain_ms.append(rpc_ms)
                s.recapture_ms.append(1000 * fm_s)
                s.exact &= exact
                ok &= exact
                _say(f"    {name:15s} fresh sketch v{v.seq} in {rpc_ms:7.1f} ms "
                     f"(full recapture on Spark {1000 * fm_s:8.1f} ms) "
                     f"{'= recapture' if exact else '≠ RECAPTURE'}")

        _say("• running each query on Spark without and with its sketch")
        runs = {}
        for name in DEMO_QUERIES:
            plain = client.run_query(query=name, use_sketch=False)
            used = client.run_query(query=name, use_sketch=True)
            same = _same(plain.rows, used.rows)
            ok &= same
            runs[name] = (plain, used, same)
            _say(f"  {name:15s} time {plain.seconds:5.2f} s → {used.seconds:5.2f} s  "
                 f"same result: {same}")
            for table in sketched[name]:
                _say(f"  {'':15s} {table}: Spark read {_read(plain, table)} → "
                     f"{_read(used, table)}")
            if used.access != "sketch":  # the sketch keeps most rows: it was not used
                _say(f"  {'':15s} plain query: {used.access_reason}")
    finally:
        stop.set()
        client.close()
        server.stop(0)
        coordinator.close()

    _say()
    _say("Summary")
    _say(f"  {'query':15s} {'maintain ms':>12s} {'recapture ms':>13s} {'speed-up':>9s} "
         f"{'exact':>6s}  share of each sketched table Spark read with the sketch")
    for name, s in stats.items():
        plain, used, same = runs[name]
        m, r = float(np.median(s.maintain_ms)), float(np.median(s.recapture_ms))
        shares = used.rows_read_share()
        read = ", ".join(f"{t} {100 * shares[t]:.1f}%" if t in shares else f"{t} -"
                         for t in sketched[name])
        _say(f"  {name:15s} {m:12.1f} {r:13.1f} {r / max(m, 1e-9):8.0f}x "
             f"{str(s.exact and same):>6s}  {read}")
    total = time.perf_counter() - t_start
    _say(f"  fresh-sketch time is the whole gRPC call (maintenance included); medians over "
         f"{batches} batches; demo took {total:.0f} s")
    _say("  a sketch whose filter would read most of its table is not used (RunQuery's "
         "access path): such a query reads all rows, as without it")
    _say("  every maintained sketch equals a full recapture" if ok else
         "  MISMATCH: a maintained sketch or a sketch-filtered result differs")
    return 0 if ok else 1


def _read(run, table: str) -> str:
    """Rows Spark's scans of ``table`` returned, and their share of the table."""
    n, share = run.rows_read.get(table, 0), run.rows_read_share().get(table)
    return f"{n:,} rows ({100 * share:.1f}%)" if share is not None else f"{n:,} rows"


def _same(a: pa.Table, b: pa.Table) -> bool:
    from imp_core.oracle.results import same_rows

    return a.num_rows == b.num_rows and same_rows(a, b)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(run_demo())
