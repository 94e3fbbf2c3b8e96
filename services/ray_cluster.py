"""A Ray cluster of several nodes on one machine, started as a cluster is: ``ray start``.

``up`` starts a head (``ray start --head``) and worker nodes (``ray start --address``) as
separate process trees on loopback, each node with its own raylet, object store and
caps (CPUs, memory, object store), and writes the cluster's description to
``<dir>/cluster.json``; the service joins it with the environment ``Cluster.env``
gives (``IMP_RAY_ADDRESS`` and the token: Ray's token authentication is on for every
node, with the machine's Ray token, ``~/.ray/auth_token`` unless
``RAY_AUTH_TOKEN_PATH`` names another). ``remove_node`` kills one
worker node's processes, as a lost machine would be lost; ``add_node`` starts another;
``down`` stops every process of the cluster.

Every process of the cluster carries the cluster's own temporary folder in its command
line (``--temp-dir``, under ``<dir>``), and each node its own node-manager port, so
``down`` and ``remove_node`` stop exactly this cluster's processes, never another Ray
on the machine (``ray stop`` would stop them all). On Kubernetes the same topology is a
KubeRay ``RayCluster`` (docs/operations.md): a head group and a worker group of N
replicas whose ``rayStartParams`` carry the same caps.

Invariant: ``cluster.json`` names every node ``up``/``add_node`` started and not yet
removed, with the ports that identify its processes.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from imp_actors.reaper import descendants, running
from imp_core.errors import ImpError

STATE_FILE = "cluster.json"
DEFAULT_DIR = "/tmp/imp-cluster"  # short: Ray's Unix socket paths live under it


class ClusterError(ImpError):
    """The cluster could not be started, found or changed as asked."""


@dataclass
class Node:
    """One Ray node: its role, caps and the ports that identify its processes."""

    index: int
    role: str  # "head" | "worker"
    node_manager_port: int
    num_cpus: int
    memory_bytes: int
    object_store_bytes: int
    ports: dict[str, int] = field(default_factory=dict)


@dataclass
class Cluster:
    directory: str
    address: str  # the GCS address: IMP_RAY_ADDRESS
    temp_dir: str
    nodes: list[Node]
    started_at: float
    token_path: str = ""  # the cluster's token (Ray's token authentication)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    def env(self) -> dict[str, str]:
        """What a process joining the cluster needs in its environment: the address and
        the cluster's token (Ray's token authentication, on for every node)."""
        return {"IMP_RAY_ADDRESS": self.address, "RAY_AUTH_MODE": "token",
                "RAY_AUTH_TOKEN_PATH": self.token_path}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Cluster:
        return cls(d["directory"], d["address"], d["temp_dir"],
                   [Node(**n) for n in d["nodes"]], d["started_at"],
                   d.get("token_path", ""))

    def save(self) -> None:
        path = Path(self.directory) / STATE_FILE
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.to_json(), indent=1))
        tmp.replace(path)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _token_file() -> Path:
    """The machine's Ray token (``RAY_AUTH_TOKEN_PATH``, else Ray's default
    ``~/.ray/auth_token``), made as Ray makes one when missing. One token for every
    cluster of the machine: a process's Ray keeps the first token it read, so a test
    process that ran a local Ray before joins this cluster with the same token."""
    path = Path(os.environ.get("RAY_AUTH_TOKEN_PATH") or Path.home() / ".ray" / "auth_token")
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(secrets.token_hex(32))
        path.chmod(0o600)
    return path


def _ray() -> str:
    found = shutil.which("ray", path=str(Path(sys.executable).parent)) or shutil.which("ray")
    if found is None:
        raise ClusterError("the `ray` command is not installed beside this Python")
    return found


def _start(cluster: Cluster, args: list[str], what: str) -> None:
    env = {**os.environ, **cluster.env(), "RAY_USAGE_STATS_ENABLED": "0"}
    done = subprocess.run([_ray(), "start", *args], capture_output=True, text=True,
                          env=env, timeout=180)
    if done.returncode != 0:
        raise ClusterError(f"`ray start` of the {what} failed (exit {done.returncode}): "
                           f"{(done.stderr or done.stdout).strip()[-1500:]}")


def _node_args(node: Node) -> list[str]:
    ports = node.ports
    return ["--node-ip-address=127.0.0.1", f"--num-cpus={node.num_cpus}",
            f"--memory={node.memory_bytes}",
            f"--object-store-memory={node.object_store_bytes}",
            f"--node-manager-port={node.node_manager_port}",
            f"--object-manager-port={ports['object_manager']}",
            f"--dashboard-agent-listen-port={ports['agent_listen']}",
            f"--dashboard-agent-grpc-port={ports['agent_grpc']}",
            f"--metrics-export-port={ports['metrics']}",
            f"--runtime-env-agent-port={ports['runtime_env']}",
            "--disable-usage-stats"]


def _new_node(index: int, role: str, num_cpus: int, memory_bytes: int,
              object_store_bytes: int) -> Node:
    ports = {k: _free_port() for k in ("object_manager", "agent_listen", "agent_grpc",
                                       "metrics", "runtime_env")}
    return Node(index, role, _free_port(), num_cpus, memory_bytes, object_store_bytes,
                ports)


def up(nodes: int = 3, directory: str | Path = DEFAULT_DIR, num_cpus: int = 1,
       memory_bytes: int = 4 << 30, object_store_bytes: int = 256 << 20,
       progress: Any = None) -> Cluster:
    """Start a head and ``nodes - 1`` worker nodes; the cluster's description."""
    if nodes < 1:
        raise ClusterError("a cluster has at least 1 node (the head)")
    root = Path(directory)
    if (root / STATE_FILE).exists():
        raise ClusterError(f"a cluster is already described in {root / STATE_FILE}; "
                           f"`imp cluster down --dir {root}` first")
    root.mkdir(parents=True, exist_ok=True)
    temp_dir = root / "ray"
    gcs_port = _free_port()
    head = _new_node(0, "head", num_cpus, memory_bytes, object_store_bytes)
    cluster = Cluster(str(root), f"127.0.0.1:{gcs_port}", str(temp_dir), [head], time.time())
    say = progress or (lambda _msg: None)
    say(f"starting the head node (GCS 127.0.0.1:{gcs_port})")
    cluster.token_path = str(_token_file())
    try:
        _start(cluster, ["--head", f"--port={gcs_port}", f"--temp-dir={temp_dir}",
                "--include-dashboard=false", *_node_args(head)], "head node")
        cluster.save()
        for _ in range(1, nodes):
            add_node(cluster, num_cpus, memory_bytes, object_store_bytes, progress)
    except BaseException:
        down(cluster)
        raise
    return cluster


def add_node(cluster: Cluster, num_cpus: int | None = None, memory_bytes: int | None = None,
             object_store_bytes: int | None = None, progress: Any = None) -> Node:
    """Start one more worker node (caps default to the head's)."""
    head = cluster.nodes[0]
    index = max(n.index for n in cluster.nodes) + 1
    node = _new_node(index, "worker", num_cpus or head.num_cpus,
                     memory_bytes or head.memory_bytes,
                     object_store_bytes or head.object_store_bytes)
    if progress:
        progress(f"starting worker node {index}")
    _start(cluster, [f"--address={cluster.address}", *_node_args(node)],
           f"worker node {index}")
    cluster.nodes.append(node)
    cluster.save()
    return node


def load(directory: str | Path = DEFAULT_DIR) -> Cluster:
    path = Path(directory) / STATE_FILE
    try:
        return Cluster.from_json(json.loads(path.read_text()))
    except FileNotFoundError:
        raise ClusterError(f"no cluster is described in {path} "
                           f"(start one with `imp cluster up`)") from None
    except (ValueError, KeyError, TypeError) as exc:
        raise ClusterError(f"{path} is not a cluster description: {exc}") from None


def _processes(marker: str) -> list[int]:
    """Processes whose command line holds ``marker``, with all their descendants."""
    found: set[int] = set()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ")
        except OSError:
            continue  # gone meanwhile
        if marker.encode() in cmdline:
            found.add(int(entry.name))
            found.update(descendants(int(entry.name)))
    found.discard(os.getpid())
    return sorted(found)


def _signal(pids: list[int], sig: int) -> None:
    for pid in pids:
        try:
            os.kill(pid, sig)
        except (ProcessLookupError, PermissionError):
            pass


def _wait(pids: list[int], timeout_s: float) -> list[int]:
    deadline = time.monotonic() + timeout_s
    alive = [p for p in pids if running(p)]
    while alive and time.monotonic() < deadline:
        time.sleep(0.05)  # polling /proc: there is no wait on processes we did not start
        alive = [p for p in alive if running(p)]
    return alive


def _kill(pids: list[int], grace_s: float = 3.0) -> int:
    """SIGTERM, then SIGKILL to what is left after ``grace_s``."""
    _signal(pids, signal.SIGTERM)
    left = _wait(pids, grace_s)
    _signal(left, signal.SIGKILL)
    _wait(left, grace_s)
    return len(pids)


def remove_node(cluster: Cluster, index: int, graceful: bool = False) -> int:
    """Stop worker node ``index``'s processes (its raylet and everything under it):
    SIGKILL at once, as a lost machine, unless ``graceful``. Returns how many."""
    node = next((n for n in cluster.nodes if n.index == index), None)
    if node is None:
        raise ClusterError(f"the cluster has no node {index} "
                           f"(nodes: {[n.index for n in cluster.nodes]})")
    if node.role == "head":
        raise ClusterError("the head node cannot be removed; `imp cluster down` stops all")
    procs = _processes(f"--node_manager_port={node.node_manager_port}")
    if graceful:
        stopped = _kill(procs)
    else:
        _signal(procs, signal.SIGKILL)
        _wait(procs, 5.0)
        stopped = len(procs)
    cluster.nodes = [n for n in cluster.nodes if n.index != index]
    cluster.save()
    return stopped


def down(cluster: Cluster) -> int:
    """Stop every process of the cluster and forget it. Returns how many stopped."""
    pids = set(_processes(cluster.temp_dir))
    for n in cluster.nodes:
        pids.update(_processes(f"--node_manager_port={n.node_manager_port}"))
    stopped = _kill(sorted(pids))
    (Path(cluster.directory) / STATE_FILE).unlink(missing_ok=True)
    shutil.rmtree(cluster.temp_dir, ignore_errors=True)
    return stopped


_NODES_SCRIPT = """
import json, sys, ray
ray.init(address=sys.argv[1], logging_level="ERROR", log_to_driver=False)
print("IMP-NODES " + json.dumps([{"node_id": n["NodeID"], "alive": n["Alive"],
                   "node_manager_port": n["NodeManagerPort"],
                   "resources": n["Resources"]} for n in ray.nodes()]))
"""


def wait_for_loss(cluster: Cluster, port: int, timeout_s: float = 120.0) -> float:
    """Seconds until the cluster reports the node of node-manager ``port`` dead (its
    GCS notices a lost node by missed health checks)."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout_s:
        if not any(n["alive"] and n["node_manager_port"] == port
                   for n in alive_nodes(cluster)):
            return time.monotonic() - t0
        time.sleep(1.0)  # each look is a short-lived driver process
    raise ClusterError(f"the node at port {port} is still reported alive after "
                       f"{timeout_s:.0f} s")


def alive_nodes(cluster: Cluster, timeout_s: float = 60.0) -> list[dict[str, Any]]:
    """The cluster's nodes as its GCS reports them (a separate process: this one's Ray
    state is left alone), each ``{"node_id", "alive", "node_manager_port", "resources"}``."""
    done = subprocess.run([sys.executable, "-c", _NODES_SCRIPT, cluster.address],
                          capture_output=True, text=True,
                          timeout=timeout_s, env={**os.environ, **cluster.env(),
                                                  "RAY_USAGE_STATS_ENABLED": "0"})
    if done.returncode != 0:
        raise ClusterError(f"the cluster at {cluster.address} does not answer: "
                           f"{done.stderr.strip()[-800:]}")
    # Ray may print its own lines (a node marked dead) on the same stream
    found = [line for line in done.stdout.splitlines() if line.startswith("IMP-NODES ")]
    if not found:
        raise ClusterError(f"the cluster at {cluster.address} gave no node list: "
                           f"{(done.stdout + done.stderr).strip()[-800:]}")
    return json.loads(found[-1].removeprefix("IMP-NODES "))
