"""``imp cluster``: a Ray cluster of several nodes on this machine, started with
``ray start`` (``services.ray_cluster``), for tests, benchmarks and trying the
multi-node service before Kubernetes.

``up`` starts it and prints the address to give the service (``IMP_RAY_ADDRESS``);
``status`` shows the nodes as the cluster sees them; ``add-node`` and ``remove-node``
change it (``remove-node`` kills the node's processes, as a lost machine); ``down``
stops it. ``--json`` prints one JSON document on stdout.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict

from imp_core.process.stdout import json_out
from services import ray_cluster
from services.cli.commands import _at_least_one


def _size(text: str) -> int:
    """``512m``, ``4g``, ``1073741824``: bytes."""
    units = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30}
    raw = text.strip().lower().removesuffix("b").removesuffix("i")
    try:
        if raw and raw[-1] in units:
            value = int(float(raw[:-1]) * units[raw[-1]])
        else:
            value = int(raw)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a size: {text!r} (e.g. 512m, 4g)") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"a size must be positive, not {text!r}")
    return value


def add_cluster_commands(sub: argparse._SubParsersAction) -> None:
    cl = sub.add_parser("cluster", help="a multi-node Ray cluster on this machine, started "
                        "with `ray start` (up, status, add-node, remove-node, down)")
    csub = cl.add_subparsers(dest="action", required=True)
    up = csub.add_parser("up", help="start a head and worker nodes; prints IMP_RAY_ADDRESS")
    up.add_argument("--nodes", type=_at_least_one, default=3, help="nodes, the head included")
    for p in (up, csub.add_parser("add-node", help="start one more worker node")):
        p.add_argument("--cpus-per-node", type=_at_least_one, default=None,
                       help="CPUs each node offers (default 1, or the head's)")
        p.add_argument("--memory-per-node", type=_size, default=None,
                       help="memory each node offers to actors (default 4g)")
        p.add_argument("--object-store-per-node", type=_size, default=None,
                       help="each node's object store (default 256m)")
    rm = csub.add_parser("remove-node", help="kill one worker node's processes")
    rm.add_argument("index", type=int, help="the node's number (see `imp cluster status`)")
    rm.add_argument("--graceful", action="store_true",
                    help="SIGTERM first (default: SIGKILL, as a lost machine)")
    csub.add_parser("status", help="the nodes, as the cluster reports them")
    csub.add_parser("down", help="stop every process of the cluster")
    for p in csub.choices.values():
        p.add_argument("--dir", default=ray_cluster.DEFAULT_DIR,
                       help=f"where the cluster's description and Ray's files live "
                       f"(default {ray_cluster.DEFAULT_DIR})")
        p.add_argument("--json", action="store_true", help="print JSON on stdout")
    cl.set_defaults(func=_cluster)


def _progress(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def _cluster(args: argparse.Namespace) -> int:
    if args.action == "up":
        c = ray_cluster.up(args.nodes, args.dir, args.cpus_per_node or 1,
                           args.memory_per_node or 4 << 30,
                           args.object_store_per_node or 256 << 20, _progress)
        doc = {**c.to_json(), "env": c.env()}
        text = (f"Ray cluster of {len(c.nodes)} nodes at {c.address}; to join it:\n"
                + "".join(f"  export {k}={v}\n" for k, v in c.env().items())
                + "\n".join(_node_line(n) for n in c.nodes))
    elif args.action == "add-node":
        c = ray_cluster.load(args.dir)
        node = ray_cluster.add_node(c, args.cpus_per_node, args.memory_per_node,
                                    args.object_store_per_node, _progress)
        doc, text = {"added": node.index, **c.to_json()}, _node_line(node)
    elif args.action == "remove-node":
        c = ray_cluster.load(args.dir)
        stopped = ray_cluster.remove_node(c, args.index, args.graceful)
        doc = {"removed": args.index, "processes_stopped": stopped, **c.to_json()}
        text = f"node {args.index} removed ({stopped} processes stopped)"
    elif args.action == "status":
        c = ray_cluster.load(args.dir)
        seen = ray_cluster.alive_nodes(c)
        by_port = {n["node_manager_port"]: n for n in seen}
        nodes = [{**asdict(n), "alive": bool(by_port.get(
            n.node_manager_port, {}).get("alive"))} for n in c.nodes]
        doc = {"address": c.address, "nodes": nodes, "reported": seen}
        text = f"Ray cluster at {c.address}\n" + "\n".join(
            _node_line(n) + ("  alive" if d["alive"] else "  NOT ALIVE")
            for n, d in zip(c.nodes, nodes))
    else:
        c = ray_cluster.load(args.dir)
        stopped = ray_cluster.down(c)
        doc, text = {"stopped": stopped, "address": c.address}, \
            f"cluster at {c.address} stopped ({stopped} processes)"
    if args.json:
        print(json.dumps(doc, indent=2), file=json_out())
    else:
        print(text)
    return 0


def _node_line(n: ray_cluster.Node) -> str:
    return (f"  node {n.index} ({n.role}): {n.num_cpus} CPU, memory "
            f"{n.memory_bytes / 2**30:.1f} GiB, object store "
            f"{n.object_store_bytes / 2**20:.0f} MiB, node manager port "
            f"{n.node_manager_port}")
