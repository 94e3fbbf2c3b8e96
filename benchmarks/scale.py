"""``imp bench scale``: every TPC-H query registered at once in one service, at a scale
factor chosen for the machine (issue 14: SF 10 within 24 GiB), maintained together.

One in-process coordinator (the embedded service: the same path from a registered query
to its sketch as the gRPC server's) over the TPC-H Delta store at ``sf``:

1. ``register``: the queries one after another, each on its workload header's sketch
   attribute, all kept; per query its registration seconds, state bytes and probed join
   sides, and the memory of the process tree after it. With ``paired_fm`` (default),
   each registration is followed by a recapture of the query at the versions it was
   registered at (FM at registration); with ``drop_cache`` (default) the kernel's page
   cache is emptied before both where this process may (Linux, as root): the two then
   read the tables alike (from disk), so their ratio compares the work, not which one
   found the files cached. The report says per query whether the cache was emptied;
2. ``maintain``: ``rounds`` rounds; in each, for every table some query sketches or joins
   (``tables``: those with a key and at least 100 rows per changed row, so not nation
   or region), a commit deleting ``delta`` rows drawn from a few random data files, then
   every query reading that table brings its sketch up to date (timed); then the rows
   are put back (a second commit, also maintained);
3. ``verify``: with the tables changed (the last round's deletions committed), every
   query's sketch against a recapture of the query on Spark at the same versions (the FM
   time of each query comes from these runs); then the rows are put back.

Memory is sampled every half second throughout: the resident set of this process and
all its descendants (the Spark JVM among them), and the machine's used memory (total
minus available), each with its peak per phase.

Every query stays live: the service's cap on live actors (16 by default) and its idle
eviction are lifted, as an operator sizing a service for these queries would, so a
batch never pays for restoring an evicted query (the report counts evictions and
restores, which must be 0).

With ``cluster`` (the directory of an ``imp cluster up``), the queries are actors on
that Ray cluster's nodes, each a process of its own started by a node's raylet, and the
report gives the state each node holds. With ``remove_node`` too, that worker node is
killed (SIGKILL, as a machine is lost) after the first table's deletion was maintained:
the next batch of every query whose actor was there recovers it on another node from its
registration checkpoint and the change feed; the report gives the seconds from the kill
until every query answers again, and the run goes on to its verification.
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path
from statistics import median
from typing import Any, Callable, Iterable, TypeVar

__all__ = ["MemorySampler", "markdown_table", "run_scale_bench"]

import numpy as np

from benchmarks.paper_common import (
    RowSampler,
    count_rows,
    finish_report,
    log,
    make_coordinator,
    start_report,
    timed_maintenance,
    write_partial,
)
from benchmarks.tpch import (
    _register,
    expand_queries,
    prepare_tpch_store,
    sketch_attribute,
    table_key,
)
from imp_core.errors import WorkerLostError
from imp_core.storage.index_catalog import process_indexes, wait_for_indexes

MiB = 1 << 20
MIN_ROWS_PER_DELTA_ROW = 100  # smaller tables (nation, region) are not changed
PAGE = 4096

INDEX_BUILD_TIMEOUT_S = 1800.0  # the longest wait for the shared indexes' builds
# where a registration's seconds go (``Coordinator.ctx.timings``): planning, checks and
# partitions; join placement; the first state (Spark's part of it apart); checkpoint
REGISTRATION_PHASES = ("register_prepare_s", "register_place_s", "register_first_state_s",
                       "first_state_spark_s", "register_checkpoint_s")
RECOVERY_TIMEOUT_S = 600.0  # the longest wait for the queries of a removed node
T = TypeVar("T")


def _tree_rss(root: int) -> int:
    """Resident bytes of process ``root`` and all its descendants (Linux /proc)."""
    parents: dict[int, int] = {}
    rss: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            fields = stat[stat.rindex(")") + 2:].split()
            parents[int(entry.name)] = int(fields[1])
            rss[int(entry.name)] = int(fields[21]) * PAGE
        except (OSError, ValueError, IndexError):
            continue  # gone between listing and reading
    total, todo = 0, [root]
    children: dict[int, list[int]] = {}
    for pid, ppid in parents.items():
        children.setdefault(ppid, []).append(pid)
    while todo:
        pid = todo.pop()
        total += rss.get(pid, 0)
        todo.extend(children.get(pid, ()))
    return total


def _machine_used() -> int:
    info = {}
    for line in Path("/proc/meminfo").read_text().splitlines():
        name, value = line.split(":", 1)
        info[name] = int(value.split()[0]) * 1024
    return info["MemTotal"] - info["MemAvailable"]


class MemorySampler:
    """Peaks of the process tree's resident set and of the machine's used memory, per
    phase, sampled every ``interval`` seconds on a daemon thread."""

    def __init__(self, interval: float = 0.5) -> None:
        import os

        self.pid, self.interval = os.getpid(), interval
        self.phase = "start"
        self.peaks: dict[str, dict[str, int]] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="memory-sampler", daemon=True)

    def __enter__(self) -> MemorySampler:
        self.sample()
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        self._thread.join()
        self.sample()

    def sample(self) -> tuple[int, int]:
        tree, machine = _tree_rss(self.pid), _machine_used()
        peak = self.peaks.setdefault(self.phase, {"tree_rss": 0, "machine_used": 0})
        peak["tree_rss"] = max(peak["tree_rss"], tree)
        peak["machine_used"] = max(peak["machine_used"], machine)
        return tree, machine

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self.sample()

    def overall(self) -> dict[str, int]:
        return {k: max(p[k] for p in self.peaks.values()) for k in ("tree_rss", "machine_used")}


def _mib(n: float) -> float:
    return round(n / MiB, 1)


def run_scale_bench(sf: float = 10.0, queries: Iterable[str] = ("all22",), delta: int = 100,
                    rounds: int = 2, fragments: int = 1000, seed: int = 0,
                    data_root: str | Path = ".imp", max_load: float | None = None,
                    progress: bool = True, out: str | Path = "bench-results/scale.json",
                    cluster: str | Path | None = None, remove_node: int | None = None,
                    paired_fm: bool = True, drop_cache: bool = True) -> dict[str, Any]:
    """Run the experiment of the module docstring; the report (also written to ``out``,
    and after every step to ``<out>-partial.json``)."""
    from imp_actors.runtime_config import EvictionPolicy

    queries = expand_queries(queries)
    attributes = {q: sketch_attribute(q) for q in queries}
    ray_cluster, ray_address = join_cluster(cluster, remove_node)
    params = {"sf": sf, "queries": queries, "delta": delta, "rounds": rounds,
              "fragments": fragments, "seed": seed, "paired_fm": paired_fm,
              "drop_cache": drop_cache,
              "backend": "local (in-process coordinator, one for all queries)"
              if ray_cluster is None else
              f"ray: a cluster of {len(ray_cluster.nodes)} nodes started with `ray start` "
              f"at {ray_address} (one actor per query)", "remove_node": remove_node}
    report = start_report("scale", params, max_load, progress)
    if ray_cluster is not None:
        report["cluster"] = [{"index": n.index, "role": n.role, "num_cpus": n.num_cpus,
                              "memory_mib": _mib(n.memory_bytes),
                              "object_store_mib": _mib(n.object_store_bytes)}
                             for n in ray_cluster.nodes]
    removal: dict[str, Any] | None = None
    lost: list[str] = []  # calls that found a query's worker lost, retried (``_retrying``)
    data_root = Path(data_root)
    log(progress, f"preparing TPC-H SF {sf:g}")
    store, root = prepare_tpch_store(sf, data_root, progress, changed=())
    from imp_core.spark import get_spark

    rng = np.random.default_rng(seed)
    registered: list[dict[str, Any]] = []
    failed: list[dict[str, Any]] = []
    maintained: list[dict[str, Any]] = []
    verified: list[dict[str, Any]] = []
    with MemorySampler() as memory:
        report["environment"]["spark"] = get_spark().version
        report["spark_warm_up_s"] = round(warm_spark(store), 2)
        coordinator = make_coordinator(
            store, root, ray_address=ray_address,
            eviction=EvictionPolicy(max_live_actors=None, idle_seconds=None))
        try:
            memory.phase = "register"
            for q in queries:
                table, column = attributes[q]
                for k in REGISTRATION_PHASES:  # this registration's, alone
                    coordinator.ctx.timings.pop(k, None)
                cold = paired_fm and drop_cache and drop_page_cache()
                t0 = time.perf_counter()
                try:
                    reg = _register(coordinator, q, fragments)  # on the header's attribute
                    boot_s, note = reg.seconds, reg.note
                except Exception as exc:  # noqa: BLE001 - recorded; the others go on
                    failed.append({"query": q, "phase": "register",
                                   "error": f"{type(exc).__name__}: {exc}"[:2000]})
                    log(progress, f"  {q}: FAILED to register: {type(exc).__name__}: {exc}")
                    continue
                state = coordinator.info(q)
                wall = time.perf_counter() - t0
                fm_s = _paired_recapture(coordinator, q, cold) if paired_fm else None
                largest = sorted(((op["kind"], op["op"], op["state_bytes"])
                                  for shard in coordinator.diagnostics.operator_stats(q)
                                  for op in shard), key=lambda o: -o[2])[:3]
                tree, machine = memory.sample()
                registered.append({
                    "query": q, "sketch": f"{table}.{column}", "bootstrap_s": round(boot_s, 2),
                    "wall_s": round(wall, 2), "forced": note is not None,
                    "page_cache_dropped": cold,
                    "fm_at_registration_s": None if fm_s is None else round(fm_s, 2),
                    "state_mib": _mib(state.state_bytes), "state_bytes": state.state_bytes,
                    "probed_join_sides": list(state.probed_join_sides),
                    "largest_state": [{"kind": k, "op": op, "mib": _mib(n)}
                                      for k, op, n in largest if n],
                    "phases_s": {k.removeprefix("register_"): round(sum(v), 2)
                                 for k in REGISTRATION_PHASES
                                 if (v := coordinator.ctx.timings.get(k))},
                    "tree_rss_mib_after": _mib(tree), "machine_used_mib_after": _mib(machine)})
                log(progress, f"  {q}: registered in {boot_s:.1f} s"
                    + ("" if fm_s is None else f" (FM {fm_s:.1f} s, ratio "
                       f"{boot_s / fm_s:.2f}{'' if cold else ', page cache kept'})")
                    + ", state "
                    f"{_mib(state.state_bytes)} MiB; process tree {_mib(tree)} MiB, machine "
                    f"{_mib(machine)} MiB used")
                write_partial(report, out, registered=registered, failed=failed,
                              memory=memory.peaks)
            names = [r["query"] for r in registered]
            # the shared indexes the probed sides asked for at wiring are built in the
            # background after registration; the timed batches start once they are,
            # as a user's would some time after registering (the wait is reported)
            t0 = time.perf_counter()
            ready = wait_for_indexes(INDEX_BUILD_TIMEOUT_S) and \
                coordinator.diagnostics.wait_for_indexes(INDEX_BUILD_TIMEOUT_S)
            report["index_builds_after_registration"] = {
                "seconds": round(time.perf_counter() - t0, 3), "ready": ready}
            log(progress, f"  shared indexes built {time.perf_counter() - t0:.1f} s after "
                f"the registrations" + ("" if ready else " (not all: timed out)"))
            report["placement"] = placement(coordinator)
            log(progress, "  state per node: " + ", ".join(
                f"{n['node']} {n['state_mib']} MiB ({n['share']:.0%}, {len(n['queries'])} "
                f"queries)" for n in report["placement"]["nodes"]))
            readers = {q: set(coordinator.scan_specs(q)) for q in names}
            tables = sorted(t for t in {t for ts in readers.values() for t in ts}
                            if table_key_or_none(t)
                            and count_rows(store, t) >= MIN_ROWS_PER_DELTA_ROW * delta)
            memory.phase = "maintain"
            for r in range(rounds):
                last = r == rounds - 1
                for t in tables:
                    key = table_key(t)
                    rows = RowSampler(store, t, rng).draw(delta, key)
                    for kind, ins, dels in (("delete", None, rows), ("insert", rows, None)):
                        coordinator.apply_update(t, inserts=ins, deletes=dels)
                        for q in names:
                            if t not in readers[q]:
                                continue
                            ms = 1000 * _retrying(f"{t} {kind} -> {q}", lost,
                                                  timed_maintenance, coordinator, q)["total"]
                            tree, machine = memory.sample()
                            maintained.append({"round": r, "table": t, "kind": kind,
                                               "rows": rows.num_rows, "query": q,
                                               "ms": round(ms, 3),
                                               "tree_rss_mib_after": _mib(tree)})
                            log(progress, f"    {t} {kind} -> {q}: {ms:.1f} ms, process "
                                f"tree {_mib(tree)} MiB, machine {_mib(machine)} MiB")
                        write_partial(report, out, registered=registered, failed=failed,
                                      maintained=maintained, verified=verified,
                                      memory=memory.peaks)
                        if ray_cluster is not None and remove_node is not None and \
                                removal is None:
                            removal = _remove_node(coordinator, ray_cluster, remove_node,
                                                   names, lost, progress)
                            report["node_removal"] = removal
                        if last and kind == "delete" and t == tables[-1]:
                            memory.phase = "verify"
                            verified = _verify(coordinator, names, progress)
                            memory.phase = "maintain"
                    log(progress, f"  round {r + 1}/{rounds}: {t} -{rows.num_rows} "
                        f"+{rows.num_rows} maintained")
                write_partial(report, out, registered=registered, failed=failed,
                              maintained=maintained, verified=verified, memory=memory.peaks)
            indexes = process_indexes() if ray_cluster is None else \
                actor_indexes(coordinator, names)
            counters = coordinator.ctx.counters
            report["service"] = {k: int(counters.get(k, 0)) for k in (
                "evictions", "restores", "actor_recoveries", "actor_failures", "updates")}
            report["workers_lost"] = {"calls_retried": len(lost), "errors": lost[:50]}
            if ray_cluster is not None:
                report["placement_after"] = placement(coordinator)
        finally:
            coordinator.close(checkpoint=False)
    # the shared join indexes (IMP_SHARED_INDEXES=on): state kept once for all queries,
    # outside the queries' own state_mib
    report["shared_indexes"] = {**indexes, "bytes_mib": _mib(indexes["bytes"]),
                                "disk_mib": _mib(indexes["disk_bytes"])}
    report.update(registered=registered, failed=failed, verified=verified,
                  maintained=maintained, memory={k: {m: _mib(v) for m, v in p.items()}
                                                 for k, p in memory.peaks.items()})
    report["results"] = _results(registered, maintained, verified)
    report["summary"] = _summary(report, memory.overall())
    finish_report(report, out)
    return report


def join_cluster(cluster: str | Path | None, remove_node: int | None):
    """The ``imp cluster`` described in ``cluster`` and its address, this process's
    environment set to join it (its token); (None, None) for the local backend."""
    if cluster is None:
        if remove_node is not None:
            raise ValueError("removing a node needs a cluster (--cluster DIR)")
        return None, None
    from services import ray_cluster

    found = ray_cluster.load(cluster)
    if remove_node is not None and not any(n.index == remove_node and n.role == "worker"
                                           for n in found.nodes):
        raise ValueError(f"the cluster in {cluster} has no worker node {remove_node} "
                         f"(nodes: {[(n.index, n.role) for n in found.nodes]})")
    os.environ.update(found.env())
    return found, found.address


def placement(coordinator) -> dict[str, Any]:
    """Where the live queries' state is: per node its bytes, share and queries, largest
    first; ``max_share`` the largest node's share of the total."""
    spread = coordinator.diagnostics.state_by_node()
    total = sum(sum(per.values()) for per in spread.values())
    nodes = sorted(({"node": node[:12], "state_mib": _mib(sum(per.values())),
                     "share": round(sum(per.values()) / total, 4) if total else 0.0,
                     "queries": sorted(per)} for node, per in spread.items()),
                   key=lambda n: -n["state_mib"])
    return {"nodes": nodes, "total_mib": _mib(total),
            "max_share": max((n["share"] for n in nodes), default=0.0)}


def _remove_node(coordinator, cluster, index: int, names: list[str], lost: list[str],
                 progress: bool) -> dict[str, Any]:
    """Kill worker node ``index`` (SIGKILL of its raylet and actors); then ask every
    query for its sketch until each answers. The recovery seconds count from the kill,
    the cluster's detection of the loss included."""
    from services import ray_cluster as rc

    on_node = {n["node"]: n["queries"] for n in placement(coordinator)["nodes"]}
    port = next(n.node_manager_port for n in cluster.nodes if n.index == index)
    before = {q: _nodes_of(coordinator, q, lost) for q in names}
    log(progress, f"  removing worker node {index} (node manager port {port})")
    t0 = time.perf_counter()
    rc.remove_node(cluster, index)
    detected = rc.wait_for_loss(cluster, port)
    answered: dict[str, float] = {}
    errors: list[str] = []
    for q in names:
        while True:
            try:
                coordinator.get_sketch(q)
                break
            except Exception as exc:  # noqa: BLE001 - the recovery may take a few asks
                errors.append(f"{q}: {type(exc).__name__}: {str(exc)[:200]}")
                if time.perf_counter() - t0 > RECOVERY_TIMEOUT_S:
                    raise
                time.sleep(1.0)  # the cluster is still noticing the loss
        answered[q] = round(time.perf_counter() - t0, 2)
    recovery = time.perf_counter() - t0
    after = {q: _nodes_of(coordinator, q, lost) for q in names}
    moved = sorted(q for q in names if after[q] != before[q])
    log(progress, f"  node {index} removed: lost {detected:.1f} s after the kill; every "
        f"query answered {recovery:.1f} s after it ({len(moved)} moved: {', '.join(moved)})")
    return {"node": index, "detected_s": round(detected, 2),
            "recovery_s": round(recovery, 2), "queries_moved": moved,
            "answered_s": answered, "errors_while_recovering": errors[:20],
            "state_by_node_before": on_node}


def actor_indexes(coordinator, names: list[str]) -> dict[str, Any]:
    """The shared indexes of the queries' actors, as ``process_indexes`` gives them for
    this process: each actor is a process with its own catalog, so memory counts per
    query; the disk files are shared by the actors (one per table, key and columns)."""
    uses = [(q, use) for q in names for use in coordinator.info(q).indexes]
    files: dict[tuple[str, str, tuple[str, ...]], int] = {}
    for _, use in uses:
        k = (use.table, use.key, use.columns)
        files[k] = max(files.get(k, 0), use.disk_bytes)
    return {"enabled": True, "count": len(uses), "bytes": sum(u.bytes for _, u in uses),
            "disk_bytes": sum(files.values()), "builds": None,
            "indexes": [{"query": q, "table": u.table, "key": u.key,
                         "columns": list(u.columns), "where": u.where, "bytes": u.bytes,
                         "disk_bytes": u.disk_bytes} for q, u in uses]}


def _nodes_of(coordinator, name: str, lost: list[str]) -> set[str]:
    """The nodes of ``name``'s shards; an actor lost meanwhile (its node, or Ray's
    memory monitor) is recovered by a sketch request, and asked again until it answers
    (``_retrying``)."""
    def look() -> set[str]:
        try:
            return set(coordinator.diagnostics.nodes(name))
        except WorkerLostError:
            coordinator.get_sketch(name)  # the lost shards are restored by this call
            return set(coordinator.diagnostics.nodes(name))

    return _retrying(f"{name} nodes", lost, look)


def _retrying(what: str, lost: list[str], call: Callable[..., T], *args: Any) -> T:
    """``call(*args)``, again while it fails with ``WorkerLostError``, as a client retries
    UNAVAILABLE: the service restores a lost worker on the call after it learns of the
    loss, so a worker lost after a node removal (a recovered shard on a node not yet
    known dead, or one Ray's memory monitor killed) costs a retry, not the run. Each
    failure is appended to ``lost``; past ``RECOVERY_TIMEOUT_S`` the last one is raised."""
    t0 = time.perf_counter()
    while True:
        try:
            return call(*args)
        except WorkerLostError as exc:
            lost.append(f"{what}: {exc}"[:300])
            if time.perf_counter() - t0 > RECOVERY_TIMEOUT_S:
                raise
            time.sleep(1.0)  # the service is still learning of the loss


def table_key_or_none(table: str) -> tuple[str, ...] | None:
    """The table's key (None for one without: its rows cannot be drawn and put back)."""
    try:
        return table_key(table)
    except ValueError:
        return None


def warm_spark(store) -> float:
    """Seconds of one small aggregation over the Parquet files of the store's smallest
    table: the JVM loads Spark's scan and aggregation classes and compiles their code
    here, as a running service's Spark has, not in the first registration (whose paired
    recapture runs after it, warm)."""
    from imp_core.spark import get_spark

    t0 = time.perf_counter()
    smallest = min(store.tables(), key=lambda t: (len(store.file_uris(t)), t))
    spark = get_spark()
    df = spark.read.parquet(*store.file_uris(smallest))
    df.groupBy(df.columns[0]).count().collect()
    return time.perf_counter() - t0


def drop_page_cache() -> bool:
    """Empty the kernel's page cache so the next reads come from disk (Linux, as root);
    False where this process may not."""
    try:
        os.sync()
        Path("/proc/sys/vm/drop_caches").write_text("3\n")
        return True
    except OSError:
        return False


def _paired_recapture(coordinator, q: str, cold: bool) -> float | None:
    """Seconds of a recapture of ``q`` at the versions it was registered at, the page
    cache emptied first where ``cold`` (as before its registration); None where it
    failed (the verification step reports recaptures' failures)."""
    try:
        sv = coordinator.get_sketch(q)
        if cold:
            drop_page_cache()
        return coordinator.recapture(q, dict(sv.versions), sv.sketch.partitions)[1]
    except Exception:  # noqa: BLE001 - the ratio is then not given
        return None


def _verify(coordinator, names: list[str], progress: bool) -> list[dict[str, Any]]:
    out = []
    for q in names:
        try:
            sv = coordinator.get_sketch(q)
            sketch, fm_s = coordinator.recapture(q, dict(sv.versions), sv.sketch.partitions)
        except Exception as exc:  # noqa: BLE001 - recorded; the other queries are checked
            out.append({"query": q, "sketch_ok": None,
                        "error": f"{type(exc).__name__}: {exc}"[:2000]})
            log(progress, f"  {q}: FAILED to check: {type(exc).__name__}: {exc}")
            continue
        ok = set(sketch.fragments) == set(sv.sketch.fragments)
        out.append({"query": q, "sketch_ok": ok, "fm_s": round(fm_s, 2),
                    "sketch_fragments": len(sv.sketch.fragments),
                    "fm_sketch_fragments": len(sketch.fragments)})
        log(progress, f"  {q}: recapture {fm_s:.1f} s, sketch "
            f"{'equal' if ok else 'DIFFERENT'} ({len(sv.sketch.fragments)} fragments)")
    return out


def _results(registered: list[dict[str, Any]], maintained: list[dict[str, Any]],
             verified: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per registered query: registration, state, maintenance median, FM, ok."""
    check = {v["query"]: v for v in verified}
    rows = []
    for r in registered:
        q = r["query"]
        times = [m["ms"] for m in maintained if m["query"] == q]
        imp = round(median(times), 1) if times else None
        fm = check.get(q, {}).get("fm_s")
        paired = r.get("fm_at_registration_s")
        rows.append({"query": q, "bootstrap_s": r["bootstrap_s"], "state_mib": r["state_mib"],
                     "fm_at_registration_s": paired,
                     "registration_over_fm": round(r["bootstrap_s"] / paired, 2)
                     if paired else None,
                     "probed_join_sides": len(r["probed_join_sides"]),
                     "imp_ms": imp, "commits_maintained": len(times), "fm_s": fm,
                     "fm_over_imp": round(1000 * fm / imp, 1) if imp and fm else None,
                     "sketch_ok": check.get(q, {}).get("sketch_ok")})
    return rows


def _summary(report: dict[str, Any], peaks: dict[str, int]) -> dict[str, Any]:
    rows = report["results"]
    ok = [r["sketch_ok"] for r in rows]
    ratios = [r["registration_over_fm"] for r in rows if r["registration_over_fm"]]
    return {"registered": f"{len(rows)} of {len(report['parameters']['queries'])}",
            "state_total_mib": round(sum(r["state_mib"] for r in rows), 1),
            "shared_indexes_mib": report.get("shared_indexes", {}).get("bytes_mib", 0.0),
            "shared_indexes_disk_mib": report.get("shared_indexes", {}).get("disk_mib", 0.0),
            "index_builds_after_registration_s": report.get(
                "index_builds_after_registration", {}).get("seconds", 0.0),
            "peak_tree_rss_mib": _mib(peaks["tree_rss"]),
            "peak_machine_used_mib": _mib(peaks["machine_used"]),
            "registration_total_s": round(sum(r["bootstrap_s"] for r in rows), 1),
            "registration_within_1_5x_fm": None if not ratios else
            f"{sum(1 for x in ratios if x <= 1.5)} of {len(ratios)}",
            "registration_over_fm_median": round(median(ratios), 2) if ratios else None,
            "sketches_equal_recapture": f"{sum(1 for x in ok if x)} of {len(ok)}",
            "maintenance_median_ms": round(median(
                [r["imp_ms"] for r in rows if r["imp_ms"] is not None] or [0.0]), 1),
            "failed": [f["query"] for f in report["failed"]],
            "evictions": report.get("service", {}).get("evictions"),
            "restores": report.get("service", {}).get("restores"),
            "max_node_share": report.get("placement", {}).get("max_share"),
            "node_removal_recovery_s": report.get("node_removal", {}).get("recovery_s"),
            "calls_retried_on_lost_workers": report.get("workers_lost", {}).get(
                "calls_retried", 0),
            "not_verified": [v["query"] for v in report["verified"]
                             if v.get("sketch_ok") is None]}


def markdown_table(report: dict[str, Any]) -> str:
    head = "| query | registration s | FM at registration s | registration / FM | " \
           "state MiB | probed sides | IMP ms (median) | FM s | FM/IMP | " \
           "sketch = recapture |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|---|"
    lines = [head]
    errors = {v["query"]: v.get("error", "") for v in report["verified"]}
    for r in report["results"]:
        reason = (errors.get(r["query"]) or "not reached").splitlines()[0][:60]
        ok = r["sketch_ok"] if r["sketch_ok"] is not None else f"not checked ({reason})"
        lines.append(f"| {r['query']} | {r['bootstrap_s']} | "
                     f"{r.get('fm_at_registration_s')} | {r.get('registration_over_fm')} | "
                     f"{r['state_mib']} | "
                     f"{r['probed_join_sides']} | {r['imp_ms']} | {r['fm_s']} | "
                     f"{r['fm_over_imp']} | {ok} |")
    return "\n".join(lines)


