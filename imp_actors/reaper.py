"""Ends the processes a server left behind when it was killed outright (SIGKILL, OOM).

A local Ray started by the server (``RayBackend``) runs its own processes: GCS, raylet,
and the raylet's agents and workers. On a clean stop ``ray.shutdown()`` ends them; when
the server is killed, GCS and raylet follow it, but Ray's dashboard and runtime-env
agents stay behind (their parent check logs "Raylet is dead! Exiting" and does not
exit). ``python -m imp_actors.reaper PID`` watches the server ``PID`` from a process of
its own: while the server lives it records the server's descendants (pid and start
time, from ``/proc``), and once the server is gone it gives them ``grace`` seconds to end
by themselves, then kills those still running, and exits.

Invariant: the reaper only ever signals a process it recorded as a descendant of the
watched server, and only while that pid still has the recorded start time (a reused pid
is never hit). Linux only (``/proc``); elsewhere ``start_reaper`` does nothing.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

PROC = Path("/proc")


def _stat(pid: int) -> tuple[int, int, str] | None:
    """(parent pid, start time in clock ticks, state letter) of ``pid``, or None if it
    is gone."""
    try:
        text = (PROC / str(pid) / "stat").read_text()
    except OSError:
        return None
    # the command name (field 2) may hold spaces and parentheses: split after its end
    fields = text[text.rindex(")") + 2:].split()
    return int(fields[1]), int(fields[19]), fields[0]


def running(pid: int) -> bool:
    """Whether ``pid`` exists and has not ended (a zombie has ended, unreaped)."""
    info = _stat(pid)
    return info is not None and info[2] != "Z"


def descendants(root: int) -> dict[int, int]:
    """Every live descendant of ``root``: pid to start time."""
    children: dict[int, list[int]] = {}
    started: dict[int, int] = {}
    for entry in PROC.iterdir():
        if not entry.name.isdigit():
            continue
        info = _stat(int(entry.name))
        if info is not None:
            children.setdefault(info[0], []).append(int(entry.name))
            started[int(entry.name)] = info[1]
    out: dict[int, int] = {}
    todo = list(children.get(root, ()))
    while todo:
        pid = todo.pop()
        if pid in out or pid not in started:
            continue
        out[pid] = started[pid]
        todo.extend(children.get(pid, ()))
    return out


def _alive(pid: int, started: int) -> bool:
    info = _stat(pid)
    return info is not None and info[1] == started


def watch(pid: int, interval: float = 1.0, grace: float = 5.0) -> int:
    """Runs until ``pid`` is gone and its recorded descendants have ended; returns how
    many of them it had to kill."""
    me = os.getpid()
    seen: dict[int, int] = {}
    while _stat(pid) is not None:
        seen.update({p: t for p, t in descendants(pid).items() if p != me})
        seen = {p: t for p, t in seen.items() if _alive(p, t)}
        time.sleep(interval)
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline and any(_alive(p, t) for p, t in seen.items()):
        time.sleep(0.2)
    killed = 0
    for p, t in seen.items():
        if _alive(p, t):
            try:
                os.kill(p, signal.SIGKILL)
                killed += 1
            except OSError:
                pass
    return killed


def start_reaper(pid: int | None = None) -> subprocess.Popen | None:
    """A reaper process watching ``pid`` (default: this process), in a session of its own
    so that the signals meant for the server's process group do not end it first."""
    if not sys.platform.startswith("linux") or not PROC.is_dir():
        return None
    return subprocess.Popen(
        [sys.executable, "-m", "imp_actors.reaper", str(pid or os.getpid())],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        start_new_session=True, close_fds=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m imp_actors.reaper",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("pid", type=int, help="the server process to watch")
    parser.add_argument("--grace", type=float, default=5.0,
                        help="seconds the leftovers get to end by themselves")
    args = parser.parse_args(argv)
    watch(args.pid, grace=args.grace)
    return 0


if __name__ == "__main__":
    sys.exit(main())
