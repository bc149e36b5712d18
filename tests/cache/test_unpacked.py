"""The unpacked cache (cache/unpacked.py) and the ways a cached file lands in a tree (tree/links.py)."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

from cudaredist.cache.unpacked import UnpackedCache, entry_key, materialize
from cudaredist.errors import ConflictError, LocalDiskError, UsageError
from cudaredist.plan import Archive, PlannedArchive
from cudaredist.tree import links
from cudaredist.tree.extract import extract, redist_mapper
from cudaredist.tree.links import link_mode, place
from cudaredist.tree.staging import Tree
from tests.archives import Exe, Link, make_tar_xz
from tests.hosts import assert_link

TOP = "comp-linux-x86_64-1.0-archive"


def _item(path: Path, component: str = "comp") -> PlannedArchive:
    import hashlib

    data = path.read_bytes()
    return PlannedArchive(component, "1.0", Archive(f"{component}/linux-x86_64/{path.name}",
                                                    hashlib.sha256(data).hexdigest(), len(data)),
                          "http://127.0.0.1/x")


@pytest.fixture
def archive(tmp_path: Path) -> Path:
    return make_tar_xz(tmp_path / f"{TOP}.tar.xz", {
        f"{TOP}/bin/tool": Exe(b"#!/bin/sh\necho tool\n"), f"{TOP}/lib/libx.so.1.2": b"\x7fELF" + b"x" * 5000,
        f"{TOP}/lib/libx.so.1": Link("libx.so.1.2"), f"{TOP}/include/x.h": b"// x"})


def _fill(path: Path, item: PlannedArchive):  # type: ignore[no-untyped-def]
    return lambda tree: extract(path, tree, component=item.component, archive=path.name,
                                mapper=redist_mapper(item.component, path.name))


@pytest.mark.parametrize("mode", ["clone", "hardlink", "copy"])
def test_an_entry_is_made_once_and_materialized_in_each_mode(tmp_path: Path, archive: Path,
                                                             mode: str) -> None:
    cache = UnpackedCache(tmp_path / "cache")
    item = _item(archive)
    assert cache.lookup(item, "linux-x86_64") is None
    entry = cache.build(item, "linux-x86_64", _fill(archive, item))
    assert {r.path for r in entry.records} == {"bin/tool", "lib/libx.so.1.2", "lib/libx.so.1", "include/x.h"}
    again = cache.lookup(item, "linux-x86_64")
    assert again is not None and again.key == entry.key == entry_key(item, "linux-x86_64")

    tree = Tree(tmp_path / "stage")
    (tmp_path / "stage").mkdir()
    materialize(again, tree, how=mode, component="comp", archive=archive.name)
    recs = {r.path: r for r in tree.finish()}
    stage = tmp_path / "stage"
    assert (stage / "bin/tool").read_bytes() == b"#!/bin/sh\necho tool\n"
    assert os.access(stage / "bin/tool", os.X_OK) and recs["bin/tool"].mode == 0o755
    assert_link(stage / "lib/libx.so.1", "libx.so.1.2")
    shared = os.stat(stage / "lib/libx.so.1.2").st_ino == os.stat(entry.tree / "lib/libx.so.1.2").st_ino
    assert shared == (mode == "hardlink")
    # the records are the entry's: the tree's files hash as recorded
    import hashlib

    assert hashlib.sha256((stage / "include/x.h").read_bytes()).hexdigest() == recs["include/x.h"].sha256


def test_an_entry_edited_through_a_hard_link_is_dropped(tmp_path: Path, archive: Path) -> None:
    cache = UnpackedCache(tmp_path / "cache")
    item = _item(archive)
    entry = cache.build(item, "linux-x86_64", _fill(archive, item))
    (tmp_path / "stage").mkdir()
    materialize(entry, Tree(tmp_path / "stage"), how="hardlink", component="comp", archive=archive.name)
    with open(tmp_path / "stage" / "include/x.h", "ab") as fh:  # e.g. a tool patching the prefix
        fh.write(b"// patched")
    assert cache.lookup(item, "linux-x86_64") is None
    assert not entry.path.exists()  # gone: the next install extracts the archive again


def test_a_half_built_entry_is_not_an_entry(tmp_path: Path, archive: Path) -> None:
    cache = UnpackedCache(tmp_path / "cache")
    item = _item(archive)

    def broken(tree: Tree) -> None:
        _fill(archive, item)(tree)
        raise OSError(errno.ENOSPC, "No space left on device")

    with pytest.raises(LocalDiskError, match="no space left on the device holding .*--cache-dir"):
        cache.build(item, "linux-x86_64", broken)
    assert cache.lookup(item, "linux-x86_64") is None
    assert list(cache.leftovers()) == [] and cache.entries() == []


def test_two_entries_writing_one_path_differently_conflict(tmp_path: Path) -> None:
    a = make_tar_xz(tmp_path / f"{TOP}.tar.xz", {f"{TOP}/include/x.h": b"one"})
    other_top = "other-linux-x86_64-1.0-archive"
    b = make_tar_xz(tmp_path / f"{other_top}.tar.xz", {f"{other_top}/include/x.h": b"two"})
    cache = UnpackedCache(tmp_path / "cache")
    ia, ib = _item(a, "comp"), _item(b, "other")
    ea = cache.build(ia, "linux-x86_64", _fill(a, ia))
    eb = cache.build(ib, "linux-x86_64", _fill(b, ib))
    (tmp_path / "stage").mkdir()
    tree = Tree(tmp_path / "stage")
    materialize(ea, tree, how="copy", component="comp", archive=a.name)
    with pytest.raises(ConflictError, match="include/x.h"):
        materialize(eb, tree, how="copy", component="other", archive=b.name)


def test_link_mode_comes_from_the_option_then_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    assert link_mode(None) == "clone"
    monkeypatch.setenv("CUDAREDIST_LINK_MODE", "hardlink")
    assert link_mode(None) == "hardlink"
    assert link_mode("copy") == "copy"
    with pytest.raises(UsageError, match="symlink"):
        link_mode("symlink")


def test_clone_falls_back_to_a_copy_and_a_full_disk_is_an_error(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    src = tmp_path / "src"
    src.write_bytes(os.urandom(300_000))
    how = place(src, tmp_path / "a", "clone", 0o644)
    assert how in ("clone", "copy") and (tmp_path / "a").read_bytes() == src.read_bytes()

    def no_kernel_copy(fi: int, fo: int, count: int) -> int:
        raise OSError(errno.EXDEV, "cross-device")

    monkeypatch.setattr(links, "_copy_file_range", no_kernel_copy)
    assert place(src, tmp_path / "b", "copy", 0o755) == "copy"  # sendfile or plain reads take over
    assert (tmp_path / "b").read_bytes() == src.read_bytes() and os.access(tmp_path / "b", os.X_OK)

    def full(fi: int, fo: int, count: int) -> int:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(links, "_copy_file_range", full)
    with pytest.raises(OSError) as info:
        place(src, tmp_path / "c", "copy", 0o644)
    assert info.value.errno == errno.ENOSPC


def test_a_kernel_copy_that_stops_early_is_finished_by_plain_reads(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """copy_file_range may copy less than asked and then 0 (a file that some filesystems report short):
    the rest comes through read and write from where the kernel stopped, not from the start."""
    src = tmp_path / "src"
    src.write_bytes(os.urandom(300_000))
    calls: list[int] = []

    def short(fi: int, fo: int, count: int) -> int:  # copies 70,000 bytes, leaving fi's offset alone
        calls.append(count)
        if len(calls) > 1:
            return 0
        at = os.lseek(fi, 0, os.SEEK_CUR)
        data = os.read(fi, 70_000)  # not os.pread: Windows has none
        os.lseek(fi, at, os.SEEK_SET)
        return os.write(fo, data)

    monkeypatch.setattr(links, "_copy_file_range", short)
    assert place(src, tmp_path / "a", "copy", 0o644) == "copy"
    assert calls == [300_000, 230_000] and (tmp_path / "a").read_bytes() == src.read_bytes()


@pytest.mark.parametrize(("code", "words"), [
    pytest.param(errno.EPERM, None, id="unsupported-copies"),  # link(2): the filesystem has no hard links
    pytest.param(errno.EACCES, "permission denied", id="eacces-fails"),
    pytest.param(errno.EDQUOT, "no space left", id="edquot-fails")])  # worded as a full disk, as staging does
def test_a_refused_hard_link_copies_only_where_the_filesystem_cannot_link(
        tmp_path: Path, archive: Path, monkeypatch: pytest.MonkeyPatch, code: int, words: str | None) -> None:
    """`--link-mode hardlink` where os.link fails: an errno that means "no hard links here" copies
    instead; any other is one local-disk error naming the file, and the cache entry stays whole."""
    cache = UnpackedCache(tmp_path / "cache")
    item = _item(archive)
    entry = cache.build(item, "linux-x86_64", _fill(archive, item))

    def refuse(src: object, dest: object) -> None:
        raise OSError(code, os.strerror(code), str(src), None, str(dest))

    monkeypatch.setattr(os, "link", refuse)
    stage = tmp_path / "stage"
    stage.mkdir()
    tree = Tree(stage)
    if words is None:
        materialize(entry, tree, how="hardlink", component="comp", archive=archive.name)
        assert {r.path for r in tree.finish()} == {r.path for r in entry.records}
        assert os.stat(stage / "include/x.h").st_ino != os.stat(entry.tree / "include/x.h").st_ino
        assert (stage / "include/x.h").read_bytes() == b"// x"
    else:
        with pytest.raises(LocalDiskError) as info:
            materialize(entry, tree, how="hardlink", component="comp", archive=archive.name)
        said = str(info.value)
        assert "\n" not in said and words in said.lower() and str(tmp_path) in said, said
    again = cache.lookup(item, "linux-x86_64")  # not poisoned: the entry is found and its bytes intact
    assert again is not None and (again.tree / "include/x.h").read_bytes() == b"// x"


@pytest.mark.parametrize("how", ["copy", "hardlink"])
def test_a_big_entry_is_placed_by_several_threads_and_a_conflict_still_stops_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, how: str) -> None:
    """Each thread places its share as one batch: hard links too (a batch takes one lock, not one a
    file, so two threads beat one)."""
    import dataclasses
    import threading

    from cudaredist.cache import unpacked

    monkeypatch.setattr(unpacked, "PARALLEL_FILES", 8)
    monkeypatch.setattr(unpacked.os, "cpu_count", lambda: 4)
    members: dict[str, object] = {f"{TOP}/include/d{i % 5}/h{i}.h": f"// {i}\n".encode() for i in range(60)}
    members[f"{TOP}/lib/liby.so.1"] = Link("liby.so.1.0")
    members[f"{TOP}/lib/liby.so.1.0"] = b"\x7fELF" + b"y" * 100
    path = make_tar_xz(tmp_path / f"{TOP}.tar.xz", members)
    item = _item(path)
    entry = UnpackedCache(tmp_path / "cache").build(item, "linux-x86_64", _fill(path, item))
    placers: set[str] = set()
    real = Tree.add_placed
    seen = threading.Lock()
    # the first two threads meet before placing anything: a placement done by one thread alone
    # breaks the barrier (and fails the test) whatever the machine's load
    meet = threading.Barrier(2, timeout=20)

    def spy(self: Tree, *args: object, **kwargs: object) -> None:
        name = threading.current_thread().name
        with seen:
            first = name not in placers
            placers.add(name)
            count = len(placers)
        if first and count <= 2:
            meet.wait()
        real(self, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(Tree, "add_placed", spy)
    (tmp_path / "stage").mkdir()
    tree = Tree(tmp_path / "stage")
    materialize(entry, tree, how=how, component="comp", archive=path.name)
    recs = {r.path: r for r in tree.finish()}
    # every file and link, with the entry's record
    assert recs == {r.path: dataclasses.replace(r, component="comp") for r in entry.records}
    assert (tmp_path / "stage/include/d3/h13.h").read_bytes() == b"// 13\n"
    assert_link(tmp_path / "stage/lib/liby.so.1", "liby.so.1.0")
    assert len(placers) > 1 and all(n.startswith("place") for n in placers)
    inodes = {(p / "include/d3/h13.h").stat().st_ino for p in (tmp_path / "stage", entry.tree)}
    assert len(inodes) == (1 if how == "hardlink" else 2)

    # a second entry whose one file differs: the conflict is raised, not lost in a thread
    members[f"{TOP}/include/d3/h13.h"] = b"// other\n"
    other = make_tar_xz(tmp_path / "other" / f"{TOP}.tar.xz", members)
    item2 = _item(other, "comp2")
    entry2 = UnpackedCache(tmp_path / "cache2").build(item2, "linux-x86_64", _fill(other, item2))
    with pytest.raises(ConflictError, match="h13.h"):
        materialize(entry2, tree, how=how, component="comp2", archive=other.name)


def test_a_full_disk_writing_the_entry_record_is_a_local_error(tmp_path: Path, archive: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """The entry's own files (its files.json), not only the tree's: the cache's disk, named."""
    cache = UnpackedCache(tmp_path / "cache")
    item = _item(archive)
    real = Path.write_text

    def write_text(self: Path, data: str, *args: object, **kw: object) -> int:
        if self.name == "files.json":
            raise OSError(errno.ENOSPC, "No space left on device", str(self))
        return real(self, data, *args, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(Path, "write_text", write_text)
    with pytest.raises(LocalDiskError) as info:
        cache.build(item, "linux-x86_64", _fill(archive, item))
    assert info.value.where == str(tmp_path / "cache") and "--cache-dir" in str(info.value)
    assert cache.entries() == [] and list(cache.leftovers()) == []
