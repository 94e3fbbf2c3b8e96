"""The shared indexes of one store in one process (``IndexCatalog``), and the settings
that govern them.

One index per (table, key column) (``table_index.TableIndex``), reference-counted by
its *users* (query pipelines' readers). ``acquire`` returns the index when it can serve
a read (it holds the columns and the version), else asks for one to be built: inline,
or in the background (``IMP_INDEX_BUILD``, default ``background``), where a single
builder thread per catalog builds one index at a time, outside the catalog's lock,
while reads it cannot serve yet go to the table's files. A wider index (more columns)
replaces a narrower one when built; the narrower one serves what it covers meanwhile.
``prepare`` asks for an index before any read needs it (a probed side at wiring), so
the build runs while the query registers and settles, not in its first batch.

Invariants: an entry's index covers every column of every read it served; a build
asked for by users who all released it before it finished is dropped; a failed build is
not tried again for ``_RETRY_S`` seconds (reads go to the files meanwhile).
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Iterator

from imp_core.errors import ImpError
from imp_core.settings import int_setting
from imp_core.storage.index_bases import index_directory
from imp_core.storage.table_index import TableIndex

log = logging.getLogger(__name__)

_RETRY_S = 60.0  # a failed build (a full disk, a table gone) is not retried sooner


@dataclass
class _Entry:
    index: TableIndex
    users: set[str] = field(default_factory=set)


@dataclass
class _Build:
    """An index asked for: its columns, the oldest version asked for (None: the table's
    latest when the build starts) and who asked."""

    table: str
    key: str
    columns: set[str]
    version: int | None
    users: set[str] = field(default_factory=set)


class IndexCatalog:
    """The shared indexes of one store (see the module docstring)."""

    def __init__(self, store: Any, background: bool = False):
        self.store = store
        self.background = background
        self._lock = threading.RLock()
        self._changed = threading.Condition(self._lock)
        self._entries: dict[tuple[str, str], _Entry] = {}
        self._pending: dict[tuple[str, str], _Build] = {}
        self._building: _Build | None = None
        self._failed: dict[tuple[str, str], float] = {}
        self._builder: threading.Thread | None = None
        self.builds = 0
        self.build_seconds = 0.0

    # -- serving ----------------------------------------------------------------------
    def acquire(self, user: str, table: str, key: str, columns: Iterable[str],
                version: int) -> TableIndex | None:
        """The index of ``table`` on ``key`` holding ``columns``, for ``user``, able to
        serve ``version``: the existing one when it can, else one built (or rebuilt
        wider, at the oldest version its users read); in the background, None until
        it is built (the caller reads the files)."""
        cols = set(columns) | {key}
        with self._lock:
            entry = self._entries.get((table, key))
            if entry is not None and entry.index.covers(cols) \
                    and entry.index.floor <= version:
                entry.users.add(user)
                return entry.index
            if self.background:
                self._ask(user, table, key, cols, version)
                return None
            build = self._widened(_Build(table, key, cols, version, {user}))
            index = self._build(build)
            self._install(build, index)
            return index

    def prepare(self, user: str, table: str, key: str, columns: Iterable[str]) -> None:
        """Ask for the index of ``table`` on ``key`` with ``columns`` before a read needs
        it (built in the background at the table's latest version; nothing inline)."""
        with self._lock:
            entry = self._entries.get((table, key))
            if not self.background or entry is not None and entry.index.covers(columns):
                return
            self._ask(user, table, key, set(columns) | {key}, None)

    def _widened(self, build: _Build) -> _Build:
        """``build`` with the columns and users of the index it replaces, at a version
        that index's readers can still read."""
        entry = self._entries.get((build.table, build.key))
        if entry is not None:
            build.columns |= set(entry.index.columns)
            build.version = entry.index.floor if build.version is None \
                else min(build.version, entry.index.floor)
        return build

    def _build(self, build: _Build) -> TableIndex:
        others = sum(e.index.nbytes() for k, e in self._entries.items()
                     if k != (build.table, build.key))
        version = self.store.version(build.table) if build.version is None \
            else build.version
        t0 = time.perf_counter()
        directory = self._directory(build.table, build.key)
        with _one_builder(directory):
            index = TableIndex(self.store, build.table, build.key, build.columns, version,
                               directory=directory,
                               memory_bytes=max(0, index_memory_bytes() - others))
        self.build_seconds += time.perf_counter() - t0
        self.builds += 1
        return index

    def _install(self, build: _Build, index: TableIndex) -> None:
        """Make ``index`` the entry of its table and key (taking over the pins and the
        version of the one it replaces); dropped when nobody who asked is left."""
        k = (build.table, build.key)
        entry = self._entries.get(k)
        if entry is not None:
            index.pins.update(entry.index.pins)
            index.advance(entry.index.current)
            entry.index = index
        else:
            entry = self._entries[k] = _Entry(index)
        entry.users |= build.users
        if not entry.users:
            del self._entries[k]

    # -- building in the background ---------------------------------------------------
    def _ask(self, user: str, table: str, key: str, cols: set[str],
             version: int | None) -> None:
        k = (table, key)
        if time.monotonic() - self._failed.get(k, -_RETRY_S) < _RETRY_S:
            return
        building = self._building
        if building is not None and (building.table, building.key) == k \
                and cols <= building.columns:
            building.users.add(user)  # on its way
            return
        asked = self._pending.get(k)
        if asked is None:
            self._pending[k] = _Build(table, key, cols, version, {user})
        else:
            asked.columns |= cols
            if version is not None:  # the oldest version asked for (None: the latest)
                asked.version = version if asked.version is None \
                    else min(asked.version, version)
            asked.users.add(user)
        if self._builder is None or not self._builder.is_alive():
            self._builder = threading.Thread(target=self._run, name="imp-index-builder",
                                             daemon=True)
            self._builder.start()
        self._changed.notify_all()

    def _run(self) -> None:
        while True:
            with self._lock:
                if not self._pending:
                    self._builder = None
                    self._changed.notify_all()
                    return
                k = next(iter(self._pending))
                build = self._widened(self._pending.pop(k))
                self._building = build
            try:
                index = self._build(build)
            except (ImpError, OSError, ValueError, KeyError) as exc:
                # the reads go on from the files; no retry storm
                log.warning("index of %s on %s: build failed (%s); reads use the table's "
                            "files", build.table, build.key, exc)
                with self._lock:
                    self._failed[k] = time.monotonic()
                    self._building = None
                continue
            with self._lock:
                self._building = None
                self._install(build, index)
                asked = self._pending.get(k)
                if asked is not None and index.covers(asked.columns) and (
                        asked.version is None or index.floor <= asked.version):
                    del self._pending[k]  # this build answers it too
                self._changed.notify_all()

    def wait_idle(self, timeout_s: float) -> bool:
        """Wait until no build is asked for or running; whether that happened."""
        deadline = time.monotonic() + timeout_s
        with self._lock:
            while self._pending or self._building is not None:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._changed.wait(left)
            return True

    def _directory(self, table: str, key: str) -> Path | None:
        """Where disk bases of ``table`` on ``key`` go: under the store's root (None for
        a store without one: its indexes stay in memory)."""
        root = getattr(self.store, "root", None)
        table_id = getattr(self.store, "table_id", None)
        if root is None or table_id is None:
            return None
        return index_directory(Path(root), table, table_id(table), key)

    # -- users ------------------------------------------------------------------------
    def release(self, user: str) -> None:
        """``user`` no longer reads any index; indexes (and builds) left without users
        are dropped."""
        with self._lock:
            for k, entry in list(self._entries.items()):
                entry.users.discard(user)
                entry.index.unpin(user)
                if not entry.users:
                    del self._entries[k]
            for k, build in list(self._pending.items()):
                build.users.discard(user)
                if not build.users:
                    del self._pending[k]
            if self._building is not None:
                self._building.users.discard(user)

    def discard(self, table: str, key: str) -> None:
        """Forget the index of ``table`` on ``key`` (unreadable): the next read that
        needs it builds another."""
        with self._lock:
            self._entries.pop((table, key), None)

    # -- looking ----------------------------------------------------------------------
    def find(self, table: str, key: str) -> TableIndex | None:
        with self._lock:
            entry = self._entries.get((table, key))
            return entry.index if entry is not None else None

    def for_table(self, table: str) -> list[TableIndex]:
        with self._lock:
            return [e.index for (t, _), e in self._entries.items() if t == table]

    def advance(self, table: str, version: int | None = None) -> None:
        """Apply ``table``'s commits up to ``version`` to each of its indexes (once)."""
        for index in self.for_table(table):
            index.advance(version)

    def nbytes(self) -> int:
        with self._lock:
            return sum(e.index.nbytes() for e in self._entries.values())

    def describe(self, user: str | None = None) -> list[dict[str, Any]]:
        """Each index's ``describe()`` with its users (only those ``user`` reads)."""
        with self._lock:
            return [{**e.index.describe(), "users": sorted(e.users)}
                    for e in self._entries.values() if user is None or user in e.users]

    def building(self) -> int:
        """Builds asked for or running."""
        with self._lock:
            return len(self._pending) + (self._building is not None)


ENV_SHARED_INDEXES = "IMP_SHARED_INDEXES"
ENV_INDEX_MEMORY = "IMP_INDEX_MEMORY_MIB"
ENV_INDEX_BUILD = "IMP_INDEX_BUILD"
DEFAULT_INDEX_MEMORY_MIB = 128


def index_memory_bytes() -> int:
    """The bytes a store's shared indexes may hold in memory in one process
    (``IMP_INDEX_MEMORY_MIB``, default 128): an index whose base would pass it is kept
    on disk, clustered by its key (0: every index on disk). Small indexes stay in memory
    (a probe is a binary search); large ones are mapped files whose pages the OS shares
    between the processes of a machine, measured nearly as fast (docs/benchmarks.md)."""
    return int_setting(ENV_INDEX_MEMORY, DEFAULT_INDEX_MEMORY_MIB, 0) << 20


def _switch(name: str, default: str, choices: dict[str, bool]) -> bool:
    raw = os.environ.get(name, "").strip().lower() or default
    if raw not in choices:
        raise ValueError(f"{name}={raw!r}: expected one of {', '.join(sorted(choices))}")
    return choices[raw]


def shared_indexes_enabled(value: bool | None = None) -> bool:
    """``value``, else ``IMP_SHARED_INDEXES`` (``on``/``off``; default on)."""
    if value is not None:
        return value
    return _switch(ENV_SHARED_INDEXES, "on", {"on": True, "1": True, "true": True,
                                              "off": False, "0": False, "false": False})


def builds_in_background() -> bool:
    """``IMP_INDEX_BUILD``: ``background`` (default; reads use the files until an index
    is built) or ``inline`` (the first read that needs an index waits for its build)."""
    return _switch(ENV_INDEX_BUILD, "background", {"background": True, "inline": False})


_catalogs: dict[str, IndexCatalog] = {}
_catalogs_lock = threading.Lock()


@contextlib.contextmanager
def _one_builder(directory: Path | None) -> Iterator[None]:
    """Hold the index folder's build lock (an exclusive ``flock`` of ``.build.lock`` in
    it): the query actors of a node are processes of their own, each with its catalog,
    and several may ask for the same index at once. The second waits, then finds the
    first one's disk base (``TableIndex`` reuses a file that covers its columns and
    version) instead of reading the table again. Without a folder, nothing to share."""
    if directory is None:
        yield
        return
    directory.mkdir(parents=True, exist_ok=True)
    with open(directory / ".build.lock", "a+b") as lock:
        fcntl.flock(lock.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock.fileno(), fcntl.LOCK_UN)


def catalog_for(store: Any) -> IndexCatalog:
    """The process's index catalog of ``store`` (by its root): every pipeline of this
    process over that store shares its indexes."""
    root = str(getattr(store, "root", id(store)))
    with _catalogs_lock:
        found = _catalogs.get(root)
        if found is None or found.store is not store and not _same_root(found.store, store):
            found = _catalogs[root] = IndexCatalog(store, builds_in_background())
        return found


def _same_root(a: Any, b: Any) -> bool:
    return getattr(a, "root", None) is not None and getattr(a, "root", None) == \
        getattr(b, "root", None)


def process_indexes() -> dict[str, Any]:
    """Every shared index of this process (all stores): their total bytes and each
    one's ``describe()``, for reports."""
    with _catalogs_lock:
        catalogs = list(_catalogs.values())
    indexes = [d for c in catalogs for d in c.describe()]
    return {"enabled": shared_indexes_enabled(), "count": len(indexes),
            "bytes": sum(d["bytes"] for d in indexes),
            "disk_bytes": sum(d["disk_bytes"] for d in indexes),
            "builds": sum(c.builds for c in catalogs),
            "build_seconds": round(sum(c.build_seconds for c in catalogs), 3),
            "indexes": indexes}


def wait_for_indexes(timeout_s: float) -> bool:
    """Wait until no catalog of this process has a build asked for or running."""
    deadline = time.monotonic() + timeout_s
    with _catalogs_lock:
        catalogs = list(_catalogs.values())
    return all(c.wait_idle(max(0.0, deadline - time.monotonic())) for c in catalogs)
