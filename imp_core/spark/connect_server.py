"""A local Spark Connect server: an embedded Spark session with the Connect plugin.

``python -m imp_core.spark.connect_server --port 15002`` serves ``sc://127.0.0.1:15002``
until its standard input closes (or it is interrupted), then stops Spark. It prints one
line ``READY <port>`` once clients can connect. ``--port 0`` picks a free port, and picks
another when a different process binds it first (a port found free can be taken in the
seconds the JVM needs to start), so callers read the port from that line.

Meant for development and tests: a real deployment points ``IMP_SPARK_CONNECT`` at a
cluster's Connect endpoint instead. pyspark's wheel ships the server
(``jars/spark-connect_*.jar``), so nothing else is needed.
"""

from __future__ import annotations

import argparse
import logging
import signal
import socket
import sys

from imp_core.spark.session import SparkConfig, get_spark, stop_spark

log = logging.getLogger(__name__)

PLUGIN = "org.apache.spark.sql.connect.SparkConnectPlugin"
PORT_ATTEMPTS = 5


def server_config(port: int, host: str = "127.0.0.1", master: str = "local[2]",
                  driver_memory: str = "1g") -> SparkConfig:
    """The embedded session that hosts the Connect service on ``host:port``."""
    return SparkConfig(master=master, driver_memory=driver_memory, app_name="imp-connect",
                       extra_conf={"spark.plugins": PLUGIN,
                                   "spark.connect.grpc.binding.address": host,
                                   "spark.connect.grpc.binding.port": str(port)})


def _free_port(host: str) -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def _port_taken(exc: BaseException) -> bool:
    text = str(exc)
    return "BindException" in text or "Address already in use" in text


def start(port: int, host: str = "127.0.0.1", master: str = "local[2]",
          driver_memory: str = "1g") -> int:
    """Start the Connect service and return its port: ``port``, or with ``port`` 0 a free
    one (another one when a different process binds it before the JVM does)."""
    attempts = PORT_ATTEMPTS if port == 0 else 1
    for attempt in range(1, attempts + 1):
        chosen = port or _free_port(host)
        try:
            get_spark(server_config(chosen, host, master, driver_memory))
            return chosen
        except Exception as exc:
            if attempt == attempts or not _port_taken(exc):
                raise
            log.warning("port %d was taken before Spark bound it; trying another", chosen)
    raise AssertionError("unreachable")  # pragma: no cover


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=15002,
                        help="the port to serve on; 0 picks a free one")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--driver-memory", default="1g")
    args = parser.parse_args(argv)
    port = start(args.port, args.host, args.master, args.driver_memory)
    print(f"READY {port}", flush=True)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    try:
        sys.stdin.read()  # returns when the parent closes our stdin (or exits)
    except KeyboardInterrupt:
        pass
    finally:
        stop_spark()
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
