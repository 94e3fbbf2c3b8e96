"""Shared covering indexes (``imp_core.storage.table_index``): under random commits to a
keyed and a keyless Delta table, every read by random keys at any version a reader holds
equals the table's snapshot at that version filtered by those keys (as a multiset); and
queries maintained through indexes shared between them, one of them lagging, equal the
reference evaluator after every batch."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from probed_runs import CHAIN_SQL, JOIN_SQL, ProbedRun, random_change, store_of, tables_for

from imp_core.engine.pipeline import EngineOptions
from imp_core.query.data_layer import DataLayer
from imp_core.storage import DeltaStore, index_bases
from imp_core.storage.file_side import FileJoinSide
from imp_core.storage.index_catalog import (
    IndexCatalog,
    builds_in_background,
    shared_indexes_enabled,
)
from imp_core.storage.indexed_files import IndexedTableFiles
from imp_core.storage.table_index import IndexVersionError, TableIndex


def _rows(table: pa.Table, columns: list[str]) -> Counter:
    return Counter(tuple(r[c] for c in columns) for r in table.to_pylist())


def _expected(store: DeltaStore, table: str, version: int, key: str, keys: list | None,
              columns: list[str]) -> Counter:
    data = store.read(table, version, columns=columns)
    if keys is not None:
        data = data.filter(pc.is_in(data.column(key), value_set=pa.array(
            [k for k in keys if k is not None], data.schema.field(key).type)))
    return _rows(data, columns)


# 30 examples (each 0.2-0.6 s here: a few Delta commits and reads); no health check
# suppressed: the draws are a seed, a step count and two choices
@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 10**6), steps=st.integers(1, 6),
       index=st.sampled_from([("facts", "k"), ("dims", "dk"), ("dims", "label")]),
       fold=st.booleans(), on_disk=st.booleans())
def test_reads_at_every_held_version_equal_the_snapshot(tmp_path_factory, seed, steps, index,
                                                        fold, on_disk):
    rng = np.random.default_rng(seed)
    root = tmp_path_factory.mktemp("ti")
    store = store_of(root, tables_for(rng))
    table, key = index
    columns = store.schema(table).names
    with pytest.MonkeyPatch.context() as patch:
        # small record batches, so that probes take rows from several
        patch.setattr(index_bases, "CHUNK_ROWS", 7)
        _check_reads(store, table, key, columns, rng, steps, fold,
                     directory=root / "idx" if on_disk else None)


def _check_reads(store, table, key, columns, rng, steps, fold, directory):
    idx = TableIndex(store, table, key, columns, store.version(table),
                     directory=directory, memory_bytes=0)
    assert idx.describe()["where"] == ("disk" if directory is not None else "memory")
    first = store.version(table)
    idx.pin("lagging", first)  # a lazy reader that stays at the first version
    versions = [first]
    for step in range(steps):
        random_change(store, rng, 10_000 + 100 * step)
        versions.append(store.version(table))
        if fold:
            idx.advance()
            idx.compact()  # folds only up to the lagging reader's version
    domain = store.read(table, columns=[key]).column(key).to_pylist() + [None, "zz", 99]
    for v in sorted(set(versions)):
        for _ in range(3):
            keys = [x for x in rng.choice(np.array(domain, dtype=object),
                                          size=int(rng.integers(1, 6)))
                    if x is None or isinstance(x, type(domain[0]))]
            got = idx.read(v, pa.array(keys, store.schema(table).field(key).type))
            assert _rows(got, columns) == _expected(store, table, v, key, keys, columns), v
        assert _rows(idx.read(v), columns) == _expected(store, table, v, key, None, columns)
    assert idx.floor == first  # the pinned reader kept its version
    idx.unpin("lagging")
    idx.compact()
    assert idx.floor == idx.current == versions[-1]
    if versions[-1] > first:
        with pytest.raises(IndexVersionError, match="below the oldest"):
            idx.read(first, pa.array([1]))


def test_the_catalog_shares_widens_and_drops(tmp_path):
    store = store_of(tmp_path, tables_for(np.random.default_rng(3)))
    catalog = IndexCatalog(store)
    v = store.version("dims")
    a = catalog.acquire("q1", "dims", "dk", ["dk", "w"], v)
    assert catalog.acquire("q2", "dims", "dk", ["w"], v) is a and catalog.builds == 1
    wide = catalog.acquire("q3", "dims", "dk", ["dk", "label"], v)  # more columns
    assert wide is not a and catalog.builds == 2 and wide.covers(["dk", "w", "label"])
    assert catalog.find("dims", "dk") is wide
    assert [d["users"] for d in catalog.describe()] == [["q1", "q2", "q3"]]
    random_change(store, np.random.default_rng(4), 500)
    catalog.advance("dims")
    assert wide.current == store.version("dims") and wide.commits_applied >= 1
    for user in ("q1", "q2"):
        catalog.release(user)
    assert catalog.find("dims", "dk") is wide
    catalog.release("q3")
    assert catalog.find("dims", "dk") is None and catalog.nbytes() == 0


def _damage(directory) -> None:
    """Replace each index file by bytes that are no index (a new file: files are never
    changed in place, and a mapped file cut short under its reader is not a case)."""
    for path in directory.rglob("v*.arrow"):
        tmp = path.with_name("garbage")
        tmp.write_bytes(b"not an index")
        tmp.replace(path)


def test_a_disk_base_touches_only_the_rows_of_the_asked_keys_and_is_reused(tmp_path):
    store = store_of(tmp_path, tables_for(np.random.default_rng(5), 400))
    directory = tmp_path / "idx"
    v = store.version("facts")
    idx = TableIndex(store, "facts", "k", ["k", "v"], v, directory=directory,
                     memory_bytes=0)
    base = idx._base
    assert isinstance(base, index_bases.DiskBase) and idx.nbytes() == 0
    keys = store.read("facts", v, columns=["k"]).column("k").unique()[:2]
    got = idx.read(v, keys, columns=["k", "v"])
    expected = _expected(store, "facts", v, "k", keys.to_pylist(), ["k", "v"])
    assert _rows(got, ["k", "v"]) == expected
    assert base.rows_read == sum(expected.values())  # the asked keys' rows, no others
    # another process of the store (here: another index object) finds the files
    random_change(store, np.random.default_rng(6), 900)
    later = store.version("facts")
    again = TableIndex(store, "facts", "k", ["k"], later, directory=directory,
                       memory_bytes=0)  # fewer columns than the file: it holds them all
    assert again.reused and again.floor == v and again.current == later
    assert again.columns == ["k", "v"]
    assert _rows(again.read(later), ["k", "v"]) == _expected(store, "facts", later, "k",
                                                             None, ["k", "v"])
    assert _rows(again.read(later, keys, columns=["k"]), ["k"]) == _expected(
        store, "facts", later, "k", keys.to_pylist(), ["k"])
    # a damaged file is passed over: the index is built from the table
    _damage(directory)
    rebuilt = TableIndex(store, "facts", "k", ["v"], later, directory=directory,
                         memory_bytes=0)
    assert not rebuilt.reused
    assert _rows(rebuilt.read(later), ["k", "v"]) == _expected(store, "facts", later, "k",
                                                               None, ["k", "v"])


def test_the_catalog_keeps_indexes_in_memory_up_to_its_budget(tmp_path, monkeypatch):
    store = store_of(tmp_path, tables_for(np.random.default_rng(7)))
    v = store.version("dims")
    monkeypatch.setenv("IMP_INDEX_MEMORY_MIB", "0")
    on_disk = IndexCatalog(store).acquire("q", "dims", "dk", ["w"], v)
    assert on_disk.describe()["where"] == "disk" and on_disk.describe()["disk_bytes"] > 0
    monkeypatch.setenv("IMP_INDEX_MEMORY_MIB", "64")
    in_memory = IndexCatalog(store).acquire("q", "dims", "dk", ["w"], v)
    # the file the first catalog wrote is reused, loaded into memory as it fits
    assert in_memory.describe()["where"] == "memory" and in_memory.reused
    assert _rows(in_memory.read(v), ["dk", "w"]) == _rows(on_disk.read(v), ["dk", "w"])
    monkeypatch.setenv("IMP_INDEX_MEMORY_MIB", "-1")
    with pytest.raises(ValueError, match="IMP_INDEX_MEMORY_MIB"):
        IndexCatalog(store).acquire("q", "dims", "w", ["dk"], v)


def test_the_settings(monkeypatch):
    monkeypatch.delenv("IMP_SHARED_INDEXES", raising=False)
    assert shared_indexes_enabled() is True
    monkeypatch.setenv("IMP_SHARED_INDEXES", "off")
    assert shared_indexes_enabled() is False
    assert shared_indexes_enabled(True) is True
    monkeypatch.setenv("IMP_SHARED_INDEXES", "maybe")
    with pytest.raises(ValueError, match="IMP_SHARED_INDEXES='maybe': expected one of"):
        shared_indexes_enabled()
    monkeypatch.delenv("IMP_INDEX_BUILD", raising=False)
    assert builds_in_background() is True
    monkeypatch.setenv("IMP_INDEX_BUILD", "inline")
    assert builds_in_background() is False
    monkeypatch.setenv("IMP_INDEX_BUILD", "later")
    with pytest.raises(ValueError, match="IMP_INDEX_BUILD"):
        builds_in_background()


def test_background_builds_serve_once_built_and_drop_what_nobody_wants(tmp_path,
                                                                       monkeypatch):
    store = store_of(tmp_path, tables_for(np.random.default_rng(11)))
    catalog = IndexCatalog(store, background=True)
    v = store.version("dims")
    assert catalog.acquire("q1", "dims", "dk", ["w"], v) is None  # asked for, not built
    assert catalog.wait_idle(30) and catalog.builds == 1
    index = catalog.acquire("q1", "dims", "dk", ["w"], v)
    assert index is not None and index.covers(["dk", "w"])
    # a wider reader: the narrow index serves what it covers until the wide one is built
    assert catalog.acquire("q2", "dims", "dk", ["label"], v) is None
    assert catalog.acquire("q1", "dims", "dk", ["w"], v) in (index, catalog.find("dims",
                                                                                  "dk"))
    assert catalog.wait_idle(30)
    wide = catalog.acquire("q2", "dims", "dk", ["label", "w"], v)
    assert wide is not None and wide is not index and catalog.builds == 2
    # prepared before any read (at the table's latest version), then served
    catalog.prepare("q3", "facts", "k", ["k", "v"])
    assert catalog.wait_idle(30) and catalog.find("facts", "k") is not None
    assert catalog.acquire("q3", "facts", "k", ["v"], store.version("facts")) is not None
    # asked for by a reader released before the build ran: not kept
    catalog.prepare("gone", "dims", "w", ["w"])
    catalog.release("gone")
    assert catalog.wait_idle(30) and catalog.find("dims", "w") is None

    def broken(*args, **kwargs):
        raise OSError(28, "No space left on device")

    # a failed build: reads go on from the files, and it is not retried at once
    monkeypatch.setattr(index_bases.DiskBase, "write", broken)
    monkeypatch.setattr(index_bases.DiskBase, "write_columns", broken)
    monkeypatch.setenv("IMP_INDEX_MEMORY_MIB", "0")
    assert catalog.acquire("q4", "facts", "v", ["k"], store.version("facts")) is None
    assert catalog.wait_idle(30) and catalog.find("facts", "v") is None
    assert catalog.acquire("q4", "facts", "v", ["k"], store.version("facts")) is None
    assert catalog.building() == 0


# 10 examples (each 1-3 s here: two queries registered and maintained over several commits)
@settings(max_examples=10, deadline=None)
@given(seed=st.integers(0, 10**6), steps=st.integers(2, 5), on_disk=st.booleans())
def test_queries_sharing_indexes_equal_the_reference_at_their_own_versions(
        tmp_path_factory, seed, steps, on_disk):
    with pytest.MonkeyPatch.context() as patch:
        if on_disk:  # every index on disk, in record batches of a few rows
            patch.setenv("IMP_INDEX_MEMORY_MIB", "0")
            patch.setattr(index_bases, "CHUNK_ROWS", 5)
        _check_shared(tmp_path_factory, seed, steps, on_disk)


def _check_shared(tmp_path_factory, seed, steps, on_disk):
    rng = np.random.default_rng(seed)
    store = store_of(tmp_path_factory.mktemp("shared"), tables_for(rng, 120))
    catalog = IndexCatalog(store)
    layer = DataLayer(store)
    layer.files = IndexedTableFiles(store, catalog)
    eager = ProbedRun(store, JOIN_SQL, EngineOptions(minmax_buffer=1), layer=layer)
    lazy = ProbedRun(store, CHAIN_SQL, EngineOptions(minmax_buffer=1), layer=layer)
    sides = [s for run in (eager, lazy) for op in run.wiring.pipeline.operators
             if op.kind == "join" for s in (op.left, op.right)]
    assert sides and all(isinstance(s, FileJoinSide) for s in sides)
    for step in range(steps):
        random_change(store, rng, 40_000 + 100 * step)
        eager.maintain()
        eager.check()
        if step % 2 == 1 or step == steps - 1:  # the lazy query catches up now and then
            lazy.maintain()
            lazy.check()
    report = layer.files.index_report()
    assert report["index_reads"] > 0
    assert {d["where"] for d in report["indexes"]} == {"disk" if on_disk else "memory"}
    shared = [d for d in report["indexes"] if len(d["users"]) > 1]
    assert shared, report  # both queries probe dims by its key: one index serves both
    assert report["builds"] <= 2 * len(report["indexes"])


def test_a_full_disk_sends_reads_to_the_table_files_and_keeps_folds_exact(tmp_path,
                                                                          monkeypatch):
    monkeypatch.setenv("IMP_INDEX_MEMORY_MIB", "0")
    store = store_of(tmp_path, tables_for(np.random.default_rng(8)))
    files = IndexedTableFiles(store, IndexCatalog(store))
    v = store.version("dims")
    keys = {"dk": store.read("dims", v, columns=["dk"]).column("dk").unique()[:3]}
    expected = _expected(store, "dims", v, "dk", keys["dk"].to_pylist(), ["dk", "w"])
    real_write = index_bases.DiskBase.write
    real_columns = index_bases.DiskBase.write_columns

    def full(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(index_bases.DiskBase, "write", full)
    monkeypatch.setattr(index_bases.DiskBase, "write_columns", full)
    got = files.read("dims", v, ["dk", "w"], keys=keys, reader="r1")
    assert _rows(got, ["dk", "w"]) == expected
    assert files.file_reads == 1 and files.catalog.find("dims", "dk") is None
    # with room again the index is built; a fold that cannot write keeps base and log
    monkeypatch.setattr(index_bases.DiskBase, "write", real_write)
    monkeypatch.setattr(index_bases.DiskBase, "write_columns", real_columns)
    assert _rows(files.read("dims", v, ["dk", "w"], keys=keys, reader="r1"),
                 ["dk", "w"]) == expected and files.index_reads == 1
    index = files.catalog.find("dims", "dk")
    random_change(store, np.random.default_rng(9), 700)
    later = store.version("dims")
    index.advance()
    monkeypatch.setattr(index_bases.DiskBase, "write", full)
    monkeypatch.setattr(index_bases.DiskBase, "write_columns", full)
    index.unpin("r1")
    index.compact()
    assert index.floor == v and index.current == later  # nothing folded, nothing lost
    assert _rows(index.read(later), ["dk", "w"]) == _expected(store, "dims", later, "dk",
                                                              None, ["dk", "w"])


@pytest.mark.parametrize("rows", [0, 1, 50])
def test_a_base_written_a_column_at_a_time_equals_one_written_whole(tmp_path, monkeypatch,
                                                                     rows):
    """``DiskBase.write_columns`` (a table larger than the memory budget, one column in
    memory at a time) writes the same rows and hashes, in the same order, as ``write``
    of the whole sorted part, over several record batches."""
    monkeypatch.setattr(index_bases, "CHUNK_ROWS", 7)
    rng = np.random.default_rng(rows)
    data = pa.table({
        "k": pa.array(rng.integers(0, 10, rows), pa.int64()),
        "s": pa.array([None if i % 5 == 0 else f"s{i}" * (i % 4) for i in range(rows)]),
        "f": pa.array(rng.random(rows)),
        index_bases.COUNT: pa.array(np.ones(rows, np.int64))})
    hashes = rng.integers(-1000, 1000, rows).astype(np.int64)
    whole = index_bases.DiskBase.write(tmp_path / "whole", 3, index_bases.sorted_part(
        data, hashes), ["k", "s", "f"])
    order = np.argsort(hashes, kind="stable")
    parts = index_bases.DiskBase.write_columns(
        tmp_path / "columns", 3, data.schema, hashes[order], order,
        lambda name: data.column(name), ["k", "s", "f"])
    assert parts.rows_for(None).equals(whole.rows_for(None))
    assert np.array_equal(parts.part().hashes, whole.part().hashes)
    assert len(parts._batches) == -(-rows // 7)  # noqa: SLF001 - the batches it wrote
    assert sorted(p.name for p in (tmp_path / "columns").iterdir()) == sorted(
        p.name for p in (tmp_path / "whole").iterdir())  # no piece left behind


def test_a_joined_side_asks_at_wiring_for_the_indexes_its_joins_reach(tmp_path):
    """A side over dims ⋈ tags probed by dims.dk asks for dims' index on dk and for tags'
    on tk (the join passes dims' w values to it), so neither table's first lookup reads
    its files."""
    from test_keyed_join_layers import _dims, _eq, _tags

    from imp_core.engine.probed_side import VersionContext
    from imp_core.plan.nodes import Join
    from imp_core.sketch.partition import PartitionSet

    store = store_of(tmp_path, tables_for(np.random.default_rng(12)))
    catalog = IndexCatalog(store, background=True)
    files = IndexedTableFiles(store, catalog)
    context = VersionContext()
    side = FileJoinSide(Join(_dims(), _tags(), _eq("dims.w", "tags.tk")), ("dims.dk",),
                        PartitionSet(()), files, context)
    assert catalog.wait_idle(30)
    assert catalog.find("dims", "dk") is not None and catalog.find("tags", "tk") is not None
    assert {(d["table"], d["key"]) for d in catalog.describe(side.reader)} == {
        ("dims", "dk"), ("tags", "tk")}


_BUILDER = """
import sys
from imp_core.storage import DeltaStore
from imp_core.storage.index_catalog import IndexCatalog
store = DeltaStore(sys.argv[1])
print("ready", flush=True)
index = IndexCatalog(store).acquire("q", "facts", "k", ["v"], store.version("facts"))
print("reused" if index.reused else "built", flush=True)
"""


def test_processes_asking_for_one_index_at_once_build_it_once(tmp_path):
    """Query actors are processes of their own, each with its catalog: two asking for
    the same index together wait on the folder's build lock, and the second maps the
    file the first wrote instead of reading the table again."""
    import fcntl
    import os
    import subprocess
    import sys

    from waiting import wait_until

    from imp_core.storage.index_catalog import catalog_for

    store = store_of(tmp_path / "store", tables_for(np.random.default_rng(13), 3000))
    folder = catalog_for(store)._directory("facts", "k")
    folder.mkdir(parents=True)
    env = {**os.environ, "IMP_INDEX_MEMORY_MIB": "0", "IMP_INDEX_BUILD": "inline"}
    with open(folder / ".build.lock", "a+b") as held:
        fcntl.flock(held.fileno(), fcntl.LOCK_EX)  # both must find the lock taken
        procs = [subprocess.Popen([sys.executable, "-c", _BUILDER, str(store.root)],
                                  stdout=subprocess.PIPE, text=True, env=env)
                 for _ in range(2)]
        assert all(p.stdout.readline().strip() == "ready" for p in procs)
        # both blocked on the lock: /proc/locks lists a waiter as "->" on the inode
        inode = f":{os.stat(folder / '.build.lock').st_ino} "

        def waiting() -> int:
            with open("/proc/locks") as locks:
                return sum(1 for line in locks if "->" in line and inode in line)

        wait_until(lambda: waiting() == 2, timeout=60, what="two builders waiting")
        assert all(p.poll() is None for p in procs)  # neither got past the lock
        fcntl.flock(held.fileno(), fcntl.LOCK_UN)
    answers = sorted(p.communicate(timeout=120)[0].strip() for p in procs)
    assert [p.returncode for p in procs] == [0, 0]
    assert answers == ["built", "reused"]
    assert len(list(folder.glob("v*.arrow"))) == 1


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 10**6), fence=st.sampled_from([1, 2, 3, 8, 512]),
       chunk=st.sampled_from([5, 64, 1 << 22]), stale=st.sampled_from(["ok", "gone", "other"]))
def test_probes_through_the_fence_equal_binary_search(tmp_path_factory, seed, fence, chunk,
                                                      stale):
    """A disk base's probes of few keys (the fence's page, pages asked for together)
    return exactly what the plain binary search over the mapped hashes returns, for
    strings, NULLs and repeated hashes, over several record batches; with the fence file
    missing or written for another fence width it is read from the hashes again."""
    rng = np.random.default_rng(seed)
    n = int(rng.integers(0, 300))
    hashes = np.sort(rng.integers(-50, 50, n)).astype(np.int64)
    text = [None if rng.random() < 0.2 else "x" * int(rng.integers(0, 9)) + str(i)
            for i in range(n)]
    rows = pa.table({"k": pa.array(hashes), "s": pa.array(text, pa.string()),
                     "b": pa.array(rng.random(n) < 0.5),
                     index_bases.COUNT: pa.array(np.ones(n, np.int64))})
    directory = tmp_path_factory.mktemp("fence")
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(index_bases, "CHUNK_ROWS", chunk)
        patch.setattr(index_bases, "FENCE", fence)
        base = index_bases.DiskBase.write(directory, 1, index_bases.Part(rows, hashes),
                                          ["k", "s", "b"])
        fence_file = base.path.with_suffix(".fence")
        if stale == "gone":
            fence_file.unlink()
        elif stale == "other":
            patch.setattr(index_bases, "FENCE", fence + 1)
        reopened = index_bases.DiskBase(base.path, ["k", "s", "b"])
        wanted = np.unique(rng.integers(-60, 60, int(rng.integers(1, 40)))).astype(np.int64)
        got = reopened.rows_for(wanted)
        patch.setattr(index_bases, "ADVISED_KEYS", 0)  # the plain binary search
        plain = index_bases.DiskBase(base.path, ["k", "s", "b"]).rows_for(wanted)
    assert got.to_pylist() == plain.to_pylist()
    assert Counter(got.column("k").to_pylist()) == Counter(
        h for h in hashes.tolist() if h in set(wanted.tolist()))
    if stale != "ok" and n:  # read again from the hashes, and written for the next reader
        assert np.array_equal(np.fromfile(fence_file, dtype=np.int64),
                              hashes[::fence if stale == "gone" else fence + 1])
