"""Configuration of the actor runtime: where state lives, how actors are sized and evicted.

Invariants: every limit is positive (or None for "no limit"); ``root`` is a local folder
or a URI the Arrow filesystem layer understands (``file://``, ``s3://``, ...).
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Literal, get_args

from imp_core.sketch.adaptive import OVERFLOW

# how a query's first state is built (imp_core.query.driver.bootstrap_mode)
BootstrapMode = Literal["auto", "engine", "spark"]

Backend = Literal["ray", "local"]


@dataclass(frozen=True)
class Eager:
    """Maintain proactively once ``batch_tuples`` delta tuples are pending, or when the
    oldest pending change is ``max_delay_s`` old (None: no time limit)."""

    batch_tuples: int = 1000
    max_delay_s: float | None = 1.0
    kind: Literal["eager"] = "eager"

    def __post_init__(self) -> None:
        if self.batch_tuples < 1:
            raise ValueError("eager batch_tuples must be at least 1")
        if self.max_delay_s is not None and not (0 < self.max_delay_s < math.inf):
            raise ValueError(f"eager max_delay_s must be a positive number of seconds, not "
                             f"{self.max_delay_s}")


@dataclass(frozen=True)
class Lazy:
    """Maintain only when a fresh sketch is requested (or on an explicit Maintain)."""

    kind: Literal["lazy"] = "lazy"


Strategy = Eager | Lazy


def strategy_from_json(raw: dict | None) -> Strategy:
    if not raw or raw.get("kind", "lazy") == "lazy":
        return Lazy()
    if raw["kind"] == "eager":
        return Eager(int(raw.get("batch_tuples", 1000)), raw.get("max_delay_s", 1.0))
    raise ValueError(f"unknown maintenance strategy {raw['kind']!r} (eager or lazy)")


def strategy_to_json(s: Strategy) -> dict:
    if isinstance(s, Eager):
        return {"kind": "eager", "batch_tuples": s.batch_tuples, "max_delay_s": s.max_delay_s}
    return {"kind": "lazy"}


@dataclass(frozen=True)
class Autoscaling:
    """A query's shard count follows its maintenance load (``imp_actors.autoscaler``).

    The load is the shard-seconds of maintenance per second of wall time over the last
    ``window_s`` seconds (``telemetry.LoadMeter``); the autoscaler wants
    ``ceil(load / target_load)`` shards within ``[min_shards, max_shards]``, and moves
    there once that wish held for ``upscale_delay_s`` (more shards) or
    ``downscale_delay_s`` (fewer) without a break. Invariant (checked here):
    1 <= min_shards <= max_shards, 0 < target_load <= 1, delays >= 0, window > 0.
    """

    min_shards: int = 1
    max_shards: int = 4
    target_load: float = 0.5      # busy fraction of each shard the autoscaler aims at
    upscale_delay_s: float = 30.0
    downscale_delay_s: float = 300.0
    window_s: float = 30.0        # the load is averaged over this many seconds

    def __post_init__(self) -> None:
        if not 1 <= self.min_shards <= self.max_shards:
            raise ValueError(f"autoscaling needs 1 <= min_shards <= max_shards, not "
                             f"{self.min_shards}..{self.max_shards}")
        if not 0 < self.target_load <= 1:
            raise ValueError(f"autoscaling target_load must be in (0, 1] (a busy fraction "
                             f"per shard), not {self.target_load}")
        for name in ("upscale_delay_s", "downscale_delay_s"):
            if not 0 <= getattr(self, name) < math.inf:
                raise ValueError(f"autoscaling {name} must be a number of seconds >= 0, "
                                 f"not {getattr(self, name)}")
        if not 0 < self.window_s < math.inf:
            raise ValueError(f"autoscaling window_s must be a positive number of seconds, "
                             f"not {self.window_s}")

    def clamp(self, shards: int) -> int:
        return min(max(shards, self.min_shards), self.max_shards)

    def to_json(self) -> dict:
        return {"min_shards": self.min_shards, "max_shards": self.max_shards,
                "target_load": self.target_load, "upscale_delay_s": self.upscale_delay_s,
                "downscale_delay_s": self.downscale_delay_s, "window_s": self.window_s}

    @staticmethod
    def from_json(raw: dict | None) -> Autoscaling | None:
        """None (no autoscaling) for None: records written before autoscaling existed."""
        if raw is None:
            return None
        return Autoscaling(int(raw["min_shards"]), int(raw["max_shards"]),
                           float(raw["target_load"]), float(raw["upscale_delay_s"]),
                           float(raw["downscale_delay_s"]), float(raw["window_s"]))


@dataclass(frozen=True)
class ActorResources:
    """Ray resources of one query actor (fractional CPUs so that many fit on a node)."""

    num_cpus: float = 0.05
    memory_bytes: int | None = None  # Ray's logical memory resource, None: not reserved


@dataclass(frozen=True)
class EvictionPolicy:
    """When live actors are checkpointed and stopped, least recently used first."""

    max_live_actors: int | None = 16
    idle_seconds: float | None = 600.0
    memory_budget_bytes: int | None = None  # sum of the live queries' state sizes


@dataclass(frozen=True)
class RuntimeConfig:
    """Everything the coordinator needs; ``from_env`` reads ``IMP_*`` variables.

    ``root`` holds the table store (``catalog.json`` and ``tables/``, see
    ``imp_core.storage.DeltaStore``), ``checkpoints/`` and ``registry/``, unless
    ``tables_root`` / ``checkpoint_root`` point elsewhere.
    """

    root: str = ".imp/service"
    tables_root: str | None = None
    checkpoint_root: str | None = None
    backend: Backend = "ray"
    ray_address: str | None = None  # None: start (or join) a local Ray
    ray_namespace: str = "imp"
    resources: ActorResources = field(default_factory=ActorResources)
    eviction: EvictionPolicy = field(default_factory=EvictionPolicy)
    default_fragments: int = 64
    sketch_versions_kept: int = 16  # readable past sketch versions per query
    poll_seconds: float | None = 1.0  # how often other writers' commits are looked for
    checkpoint_every_batches: int | None = 50  # also checkpoint on evict and shutdown
    delta_cache_bytes: int = 256 << 20  # per-version change feeds kept for reuse
    spark_delta_min_bytes: int = 16 << 20  # larger change files are read through Spark
    # how a query's first state is built: "spark" computes every operator's state on
    # Spark and ships it as Arrow; "engine" reads the tables and feeds them to the actor;
    # "auto": Spark when the columns the query reads hold more than
    # spark_bootstrap_min_bytes (uncompressed, from the Parquet footers). Measured here:
    # 5M rows x 2 columns (80 MB) took 1.3-2.6 s in the engine and 8 s on Spark; TPC-H
    # q01 at SF 1 (7 lineitem columns, ~370 MB) 108 s in the engine and 93 s on Spark.
    bootstrap: BootstrapMode = "auto"
    spark_bootstrap_min_bytes: int = 256 << 20
    warm_actors: int = 1  # started, empty actors kept ready so a restore skips the start-up
    # per actor: the estimated bytes of join inputs a query may keep in memory; inputs
    # beyond it are probed in the data layer (the table store's files, filtered by the
    # join keys) instead, the fewest lookups per byte saved first
    # (``imp_core.query.data_layer.place_join_sides``). None: every input in memory. Decided
    # once at registration for single-shard queries (a sharded query keeps its inputs).
    join_state_budget_bytes: int | None = 48 << 20
    # a top-k keeps its best this-many entries, not its whole input (at least k; None:
    # all); deletions that empty it refill it from the data layer (imp_core.query.data_layer).
    # Measured at SF 1: TPC-H q10's top 20 of 38k customers held 21.9 MiB whole, 0.6 MiB
    # bounded to 1,000
    topk_buffer: int | None = 1000
    max_shards: int = 16  # shards of one query (each is an actor, ~170 MB of memory)
    # a current sketch request looks for other writers' commits in a table's Delta log at
    # most this often (the service's own commits are always seen at once)
    fresh_recheck_s: float = 0.01
    # RunQuery with a sketch drops the filter of a table it would read more than this
    # share of (``imp_core.spark.access``); no filter left: the plain query
    sketch_max_read_share: float = 0.5
    # the store's lease (``imp_actors.lease``): another coordinator may take the store
    # over only this long after the owner's last heartbeat
    lease_seconds: float = 15.0
    # how often the actor runtime (Ray) is probed for liveness (``runtime_watch.py``)
    runtime_check_s: float = 2.0
    # how often the control loop weighs autoscaled queries' load (``autoscaler.py``)
    autoscale_every_s: float = 1.0
    # how often the control loop looks for tables the queries read that other writers'
    # commits left out of order on their cluster column, and rewrites them in order
    # (``reclustering.py``; a rewrite reads the whole table into memory). None: never
    recluster_every_s: float | None = None
    # "apply": each re-clustering check also lays every sketched table out in the order
    # the layout advice recommends when that reads much less (``layouts.py``); "off": only
    # on request (LayoutTable, ``imp layout``)
    layout_policy: str = "off"
    # keep each sketched table's rows per fragment from the changes and give a query new
    # equi-depth ranges when skewed updates over- or underfill one (``adaptive_ranges.py``)
    adaptive_ranges: bool = True
    # a fragment holding more than this many times the mean rows is split (a selective
    # sketch then reads at most about this many times what fresh ranges would give it)
    adaptive_overflow: float = OVERFLOW

    @property
    def tables_dir(self) -> str:
        return self.tables_root or self.root

    @property
    def checkpoints_dir(self) -> str:
        return self.checkpoint_root or _join(self.root, "checkpoints")

    @property
    def registry_dir(self) -> str:
        return _join(self.root, "registry")

    @property
    def journal_dir(self) -> str:
        """A local folder for what a server process records of its own calls and faults
        (``imp_actors.incidents``): beside the registry on a local store, else under the
        temporary folder, one per store (``IMP_JOURNAL_DIR`` overrides)."""
        given = os.environ.get("IMP_JOURNAL_DIR", "").strip()
        if given:
            return given
        if "://" not in self.root:
            return _join(self.root, "journal")
        import hashlib
        import tempfile

        tag = hashlib.sha256(self.root.encode()).hexdigest()[:12]
        return os.path.join(tempfile.gettempdir(), f"imp-journal-{tag}")

    @staticmethod
    def from_env(base: RuntimeConfig | None = None) -> RuntimeConfig:
        cfg = base or RuntimeConfig()
        env = os.environ
        changes: dict = {}
        if env.get("IMP_ROOT"):
            changes["root"] = env["IMP_ROOT"]
        if env.get("IMP_TABLES"):
            changes["tables_root"] = env["IMP_TABLES"]
        if env.get("IMP_CHECKPOINTS"):
            changes["checkpoint_root"] = env["IMP_CHECKPOINTS"]
        if env.get("IMP_RAY_ADDRESS"):
            changes["ray_address"] = env["IMP_RAY_ADDRESS"]
        if env.get("IMP_BACKEND"):
            changes["backend"] = env["IMP_BACKEND"]
        if env.get("IMP_JOIN_STATE_BUDGET_BYTES"):
            changes["join_state_budget_bytes"] = _budget(env["IMP_JOIN_STATE_BUDGET_BYTES"])
        if env.get("IMP_TOPK_BUFFER"):
            raw = env["IMP_TOPK_BUFFER"].strip().lower()
            changes["topk_buffer"] = None if raw in ("none", "off") else \
                _positive(raw, "IMP_TOPK_BUFFER")
        if env.get("IMP_LEASE_SECONDS"):
            changes["lease_seconds"] = _seconds(env["IMP_LEASE_SECONDS"], "IMP_LEASE_SECONDS")
        if env.get("IMP_FRESH_RECHECK_S"):
            changes["fresh_recheck_s"] = _nonnegative(env["IMP_FRESH_RECHECK_S"],
                                                      "IMP_FRESH_RECHECK_S")
        if env.get("IMP_SKETCH_MAX_READ_SHARE"):
            changes["sketch_max_read_share"] = _share(env["IMP_SKETCH_MAX_READ_SHARE"],
                                                      "IMP_SKETCH_MAX_READ_SHARE")
        if env.get("IMP_RECLUSTER_EVERY_S"):
            raw = env["IMP_RECLUSTER_EVERY_S"].strip().lower()
            changes["recluster_every_s"] = None if raw in ("none", "off") else \
                _seconds(raw, "IMP_RECLUSTER_EVERY_S")
        if env.get("IMP_LAYOUT_POLICY"):
            changes["layout_policy"] = _choice(env["IMP_LAYOUT_POLICY"], "IMP_LAYOUT_POLICY",
                                               LAYOUT_POLICIES)
        if env.get("IMP_ADAPTIVE_RANGES"):
            raw = env["IMP_ADAPTIVE_RANGES"].strip().lower()
            if raw not in ("on", "off"):
                raise ValueError(f"IMP_ADAPTIVE_RANGES must be on or off, not {raw!r}")
            changes["adaptive_ranges"] = raw == "on"
        if env.get("IMP_ADAPTIVE_OVERFLOW"):
            changes["adaptive_overflow"] = _setting(
                env["IMP_ADAPTIVE_OVERFLOW"], "IMP_ADAPTIVE_OVERFLOW", float,
                lambda v: math.isfinite(v) and v > 1.0, "a number above 1")
        if env.get("IMP_BOOTSTRAP"):
            changes["bootstrap"] = _choice(env["IMP_BOOTSTRAP"], "IMP_BOOTSTRAP",
                                           get_args(BootstrapMode))
        if env.get("IMP_SPARK_BOOTSTRAP_MIN_BYTES"):
            changes["spark_bootstrap_min_bytes"] = _setting(
                env["IMP_SPARK_BOOTSTRAP_MIN_BYTES"], "IMP_SPARK_BOOTSTRAP_MIN_BYTES", int,
                lambda v: v >= 0, "a byte count >= 0")
        if env.get("IMP_MAX_SHARDS"):
            changes["max_shards"] = _positive(env["IMP_MAX_SHARDS"], "IMP_MAX_SHARDS")
        if env.get("IMP_MAX_LIVE_ACTORS"):
            changes["eviction"] = replace(cfg.eviction,
                                          max_live_actors=int(env["IMP_MAX_LIVE_ACTORS"]))
        return replace(cfg, **changes) if changes else cfg


LAYOUT_POLICIES = ("off", "apply")


def _budget(raw: str) -> int | None:
    """``IMP_JOIN_STATE_BUDGET_BYTES``: a byte count >= 0, or "none" / "off" (no limit)."""
    text = raw.strip().lower()
    if text in ("none", "off"):
        return None
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise ValueError(f"IMP_JOIN_STATE_BUDGET_BYTES must be a byte count >= 0 or 'none', "
                         f"not {raw!r}")
    return value


def _setting(raw: str, name: str, conv: type, valid: Callable[[Any], bool],
             expected: str) -> Any:
    """``raw`` read by ``conv`` and accepted by ``valid``, else a ValueError naming the
    variable and what it expects."""
    try:
        value = conv(raw.strip())
    except ValueError:
        value = None
    if value is None or not valid(value):
        raise ValueError(f"{name} must be {expected}, not {raw!r}")
    return value


def _choice(raw: str, name: str, choices: tuple[str, ...]) -> str:
    """``raw`` (case and surrounding blanks ignored) if one of ``choices``, else a
    ValueError naming the variable and the choices."""
    value = raw.strip().lower()
    if value not in choices:
        raise ValueError(f"{name} must be one of {', '.join(choices)}, not {raw.strip()!r}")
    return value


def _seconds(raw: str, name: str) -> float:
    return _setting(raw, name, float, lambda v: 0 < v < math.inf,
                    "a positive number of seconds")


def _nonnegative(raw: str, name: str) -> float:
    return _setting(raw, name, float, lambda v: 0 <= v < math.inf,
                    "a number of seconds >= 0")


def _share(raw: str, name: str) -> float:
    return _setting(raw, name, float, lambda v: 0 <= v <= 1, "a number from 0 to 1")


def _positive(raw: str, name: str) -> int:
    return _setting(raw, name, int, lambda v: v >= 1, "an integer >= 1")


def _join(root: str, name: str) -> str:
    return root.rstrip("/") + "/" + name
