"""The staging tree under local faults: a writer that dies, a disk that refuses a write, and
filesystems that do not tell names apart by case (simulated, and a real exFAT)."""

from __future__ import annotations

import errno
import hashlib
import io
import os
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from cudaredist.errors import ConflictError, LocalDiskError, UnsafeArchiveError
from cudaredist.localfs import fold, is_case_insensitive
from cudaredist.tree import staging as staging_mod
from cudaredist.tree.extract import extract, redist_mapper
from cudaredist.tree.staging import Tree, WriterFailed
from tests.archives import Dir, Link, Members, make_tar_xz, make_zip
from tests.hosts import fd_paths, needs_symlinks, skip_on_windows
from tests.mounts import exfat

TOP = "comp-linux-x86_64-1.0-archive"


def _extract(path: Path, tree: Tree, component: str = "comp") -> None:
    extract(path, tree, component=component, archive=path.name, mapper=redist_mapper(component, path.name))


def _tar(tmp_path: Path, members: Members, top: str = TOP) -> Path:
    return make_tar_xz(tmp_path / "in" / f"{top}.tar.xz", {f"{top}/{k}": v for k, v in members.items()})


def _outside(tmp_path: Path, tree: Tree) -> set[str]:
    return {str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*")
            if not p.is_relative_to(tree.root) and not p.is_relative_to(tmp_path / "in")}


@pytest.fixture
def root(tmp_path: Path) -> Path:
    r = tmp_path / "stage" / "tree"
    r.mkdir(parents=True)
    return r


# -- 1. a writer that dies wakes whoever waits for it ------------------------------------------------
class _Breaks(io.RawIOBase):
    """``first`` bytes, then the error a broken download raises in its reader."""

    def __init__(self, first: bytes, error: BaseException, reached: threading.Event) -> None:
        super().__init__()
        self.data, self.error, self.reached = first, error, reached
        self.release = threading.Event()

    def readable(self) -> bool:
        return True

    def readinto(self, buf: Any) -> int:
        if self.data:
            n = min(len(buf), len(self.data))
            buf[:n], self.data = self.data[:n], self.data[n:]
            return n
        self.reached.set()
        self.release.wait(10)  # mid-file until the other archive waits on this path
        raise self.error


def test_waiter_wakes_when_the_writer_fails_mid_file(root: Path) -> None:
    tree = Tree(root)
    reached = threading.Event()
    src = _Breaks(b"x" * 1000, OSError("connection closed after 1000 of 5000 bytes"), reached)
    results: dict[str, BaseException | None] = {}

    def run(name: str, fn: Any) -> None:
        try:
            fn()
            results[name] = None
        except BaseException as exc:
            results[name] = exc

    writer = threading.Thread(target=run, args=("writer", lambda: tree.add_file(
        "lib/shared", src, 0o644, "first", "first.tar.xz")), daemon=True)
    writer.start()
    assert reached.wait(10)
    waiter = threading.Thread(target=run, args=("waiter", lambda: tree.add_file(
        "lib/shared", io.BytesIO(b"x" * 5000), 0o644, "second", "second.tar.xz")), daemon=True)
    waiter.start()
    time.sleep(0.2)  # the waiter reads its copy, then waits for the writer's digest
    src.release.set()
    t0 = time.monotonic()
    writer.join(10)
    waiter.join(10)  # daemon threads: a hang fails here instead of blocking the run
    assert not waiter.is_alive(), "the waiter hangs although the writer failed"
    assert time.monotonic() - t0 < 5
    assert isinstance(results["writer"], OSError)
    err = results["waiter"]
    assert isinstance(err, WriterFailed), err
    assert (err.path, err.first, err.second) == ("lib/shared", "first", "second")
    assert "first failed" in str(err)


# -- 2. the disk refuses a write: injected at the tree's one write call ---------------------------------
def _failing_write(errno_: int, under: Path, mp: pytest.MonkeyPatch, after: int = 0) -> Any:
    """os.write that fails with ``errno_`` for files under ``under`` once ``after`` bytes went in."""
    real = os.write
    done = [0]
    path_of = fd_paths(mp)

    def write(fd: int, data: Any) -> int:
        if path_of(fd).startswith(under.as_posix()):
            if done[0] >= after:
                raise OSError(errno_, os.strerror(errno_))
            n = real(fd, data)
            done[0] += n
            return n
        return real(fd, data)

    return write


@pytest.mark.parametrize(("code", "says"), [
    pytest.param(errno.ENOSPC, "no space left on the device holding", id="ENOSPC"),
    pytest.param(errno.EDQUOT, "no space left on the device holding", id="EDQUOT"),
    pytest.param(errno.EACCES, "a --prefix you own", id="EACCES"),
    pytest.param(errno.EROFS, "read-only filesystem", id="EROFS"),
    pytest.param(errno.ENAMETOOLONG, "too long", id="ENAMETOOLONG"),
    pytest.param(errno.EIO, "the local disk refused it, not the archive", id="EIO"),
])
@pytest.mark.parametrize("kind", ["tar", "zip"])
def test_write_error_is_a_local_disk_error(tmp_path: Path, root: Path, monkeypatch: pytest.MonkeyPatch,
                                           code: int, says: str, kind: str) -> None:
    big = os.urandom(3 << 20)  # three chunks: the fault hits the second
    if kind == "tar":
        path = _tar(tmp_path, {"lib/a.so": b"small", "lib/big.so": big})
    else:
        ztop = "comp-windows-x86_64-1.0-archive"
        path = make_zip(tmp_path / "in" / f"{ztop}.zip",
                        {f"{ztop}/lib/a.dll": b"small", f"{ztop}/lib/big.dll": big})
    tree = Tree(root, dest=tmp_path / "stage" / "cuda")
    monkeypatch.setattr(staging_mod.os, "write", _failing_write(code, root, monkeypatch, after=(1 << 20) + 5))
    with pytest.raises(LocalDiskError) as info:
        _extract(path, tree)
    err = info.value
    assert err.errno == code
    assert says in str(err)
    assert "corrupt" not in str(err) and "truncated" not in str(err)
    assert err.path.endswith(("big.so", "big.dll"))
    assert err.where == str(tmp_path / "stage")  # the directory the user chose, not the hidden staging
    if code in (errno.ENOSPC, errno.EDQUOT):
        assert "more than 1.0 MB (written when it filled up)" in str(err)
        assert "MB free now" in str(err)


def test_placing_from_the_unpacked_cache_fails_as_a_local_error(tmp_path: Path, root: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    import cudaredist.tree.links as links
    from cudaredist.tree.staging import FileRecord

    def place(*_: Any) -> str:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(links, "place", place)
    src = tmp_path / "unpacked" / "lib" / "a.so"
    src.parent.mkdir(parents=True)
    src.write_bytes(b"a")
    tree = Tree(root)
    rec = FileRecord("lib/a.so", 1, hashlib.sha256(b"a").hexdigest(), 0o644)
    with pytest.raises(LocalDiskError, match="no space left"):
        tree.add_placed([rec], lambda _r: str(src), "copy", "first", "first.tar.xz")
    with pytest.raises(WriterFailed):  # the claim was given up: no one waits for it
        tree.add_file("lib/a.so", io.BytesIO(b"a"), 0o644, "second", "second.tar.xz")


def test_a_batch_that_fails_midway_keeps_what_it_placed_and_gives_back_the_rest(
        tmp_path: Path, root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Placed files are the tree's (another archive with the same bytes compares equal); the claims
    not placed are given up, so that no one waits for them."""
    import cudaredist.tree.links as links
    from cudaredist.tree.staging import FileRecord

    real = links.place

    def place(src: Any, dest: Any, *args: Any) -> str:
        if str(dest).endswith("b.h"):
            raise OSError(errno.EIO, "Input/output error")
        return real(src, dest, *args)

    monkeypatch.setattr(links, "place", place)
    src = tmp_path / "unpacked"
    src.mkdir()
    recs = []
    for name in ("a.h", "b.h", "c.h"):
        (src / name).write_bytes(name.encode())
        recs.append(FileRecord(f"include/{name}", 3, hashlib.sha256(name.encode()).hexdigest(), 0o644))
    tree = Tree(root)
    with pytest.raises(LocalDiskError, match="b.h"):
        tree.add_placed(recs, lambda r: str(src / r.path.rpartition("/")[2]), "copy", "first", "first.tar.xz")
    tree.add_file("include/a.h", io.BytesIO(b"a.h"), 0o644, "second", "second.tar.xz")  # equal: fine
    for name in ("b.h", "c.h"):
        with pytest.raises(WriterFailed):
            tree.add_file(f"include/{name}", io.BytesIO(name.encode()), 0o644, "second", "second.tar.xz")
    assert [r.path for r in tree.finish()] == ["include/a.h"]


@pytest.mark.timeout(60)
def test_two_batches_that_share_paths_both_finish(tmp_path: Path, root: Path) -> None:
    """Two batches on two threads with the same paths in opposite orders: each path placed once, by
    one of them, and compared by the other; neither waits for ever."""
    from cudaredist.tree.staging import FileRecord

    src = tmp_path / "unpacked"
    src.mkdir()
    recs = []
    for i in range(400):
        data = f"// {i}\n".encode()
        (src / f"h{i}.h").write_bytes(data)
        digest = hashlib.sha256(data).hexdigest()
        recs.append(FileRecord(f"include/d{i % 7}/h{i}.h", len(data), digest, 0o644))
    tree = Tree(root)
    for rel in {r.path.rpartition("/")[0] for r in recs}:
        tree.add_dir(rel, "first", "first.tar.xz")
    errors: list[BaseException] = []
    start = threading.Barrier(2, timeout=20)

    def batch(records: list[Any], component: str) -> None:
        try:
            start.wait()
            tree.add_placed(records, lambda r: str(src / r.path.rpartition("/")[2]), "copy", component,
                            f"{component}.tar.xz")
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=batch, args=(recs, "first")),
               threading.Thread(target=batch, args=(recs[::-1], "second"))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(40)
    assert not any(t.is_alive() for t in threads), "a batch waits for the other forever"
    assert not errors
    assert sorted(r.path for r in tree.finish()) == sorted(r.path for r in recs)


def test_disk_errors_creating_directories_and_links(tmp_path: Path, root: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    real_mkdir = os.mkdir

    def mkdir(path: Any, mode: int = 0o777) -> None:
        if str(path).endswith("include"):
            raise PermissionError(errno.EACCES, "Permission denied", str(path))
        real_mkdir(path, mode)

    monkeypatch.setattr(staging_mod.os, "mkdir", mkdir)
    with pytest.raises(LocalDiskError, match="permission denied") as info:
        _extract(_tar(tmp_path, {"include/a.h": b"a"}), Tree(root))
    assert info.value.errno == errno.EACCES

    skip_on_windows("a failed symlink() is a disk error (a Windows host copies the target instead)")

    def symlink(*_: Any, **__: Any) -> None:
        raise OSError(errno.ENOSYS, "Function not implemented")

    monkeypatch.setattr(staging_mod.os, "symlink", symlink)
    root2 = tmp_path / "stage2"
    root2.mkdir()
    with pytest.raises(LocalDiskError, match="does not support symbolic links") as info:
        _extract(_tar(tmp_path, {"lib/x.so.1": b"x", "lib/x.so": Link("x.so.1")}), Tree(root2))
    assert info.value.path.endswith("lib/x.so")


def test_a_file_where_a_directory_should_be(tmp_path: Path, root: Path) -> None:
    (root / "include").write_bytes(b"not a directory")  # put there by something else
    with pytest.raises(LocalDiskError, match="a file stands where a directory should be") as info:
        _extract(_tar(tmp_path, {"include/a.h": b"a"}), Tree(root))
    assert info.value.errno == errno.ENOTDIR


# -- 3. case-insensitive filesystems --------------------------------------------------------------------
EVIL: Members = {"X": Link("."), "x/a": Dir(), "x/a/y": Link("../.."), "x/a/Y/evil": b"pwned"}


def test_fold() -> None:
    assert fold("Include/CUDA.h") == fold("include/cuda.h")
    assert fold("straße") == fold("STRASSE")
    assert fold("caf\u00e9") == fold("cafe\u0301")  # NFC and NFD spell one name on APFS
    assert fold("a/b") != fold("a/c")


def test_escape_through_case_folding_is_refused(tmp_path: Path, root: Path) -> None:
    tree = Tree(root, case_insensitive=True)
    with pytest.raises(UnsafeArchiveError, match="under the symlink 'x'") as info:
        _extract(_tar(tmp_path, EVIL), tree)
    assert info.value.member == "x/a"
    assert _outside(tmp_path, tree) <= {"stage"}
    assert not (tmp_path / "stage" / "evil").exists() and not (tmp_path / "evil").exists()


@pytest.mark.parametrize(("a", "b", "error"), [
    pytest.param({"include/a.h": b"one"}, {"INCLUDE/A.H": b"two"}, ConflictError, id="two-archives-differ"),
    pytest.param({"lib/x": Link("y")}, {"lib/X": Link("z")}, ConflictError, id="links-differ"),
    pytest.param({"lib/x": b"file"}, {"Lib/X/y.h": b"header"}, ConflictError, id="file-vs-directory"),
    pytest.param({"lib/x": Link("y")}, {"LIB/X/evil": b"x"}, UnsafeArchiveError, id="under-a-link"),
])
def test_case_only_differences_collide(tmp_path: Path, root: Path, a: Members, b: Members,
                                       error: type[Exception]) -> None:
    tree = Tree(root, case_insensitive=True)
    _extract(_tar(tmp_path, a, "a-1-archive"), tree, "comp_a")
    with pytest.raises(error) as info:
        _extract(_tar(tmp_path, b, "b-1-archive"), tree, "comp_b")
    if isinstance(info.value, ConflictError) and "directory" not in str(info.value):
        assert "case-insensitive" in str(info.value)
        assert (info.value.first, info.value.second) == ("comp_a", "comp_b")
    # the same archives side by side are fine where case matters
    if is_case_insensitive(tmp_path):
        skip_on_windows("a case-sensitive filesystem for the side-by-side half (the rest passed)")
    plain = tmp_path / "plain"
    plain.mkdir()
    case_sensitive = Tree(plain)
    _extract(_tar(tmp_path, a, "a-1-archive"), case_sensitive, "comp_a")
    _extract(_tar(tmp_path, b, "b-1-archive"), case_sensitive, "comp_b")


def test_case_only_difference_inside_one_archive(tmp_path: Path, root: Path) -> None:
    with pytest.raises(ConflictError, match="'include/a.h' and 'include/A.h'"):
        _extract(_tar(tmp_path, {"include/a.h": b"one", "include/A.h": b"two"}),
                 Tree(root, case_insensitive=True))


def test_identical_bytes_under_case_variants_are_fine(tmp_path: Path, root: Path) -> None:
    tree = Tree(root, case_insensitive=True)
    _extract(_tar(tmp_path, {"include/a.h": b"same"}, "a-1-archive"), tree, "comp_a")
    _extract(_tar(tmp_path, {"Include/A.h": b"same"}, "b-1-archive"), tree, "comp_b")
    assert [(r.path, r.component) for r in tree.finish()] == [("include/a.h", "comp_a")]


def test_case_variants_of_a_directory_are_one_directory(tmp_path: Path, root: Path) -> None:
    """'include' and 'INCLUDE' are one directory on the target: the first spelling is kept, on disk
    (even a case-sensitive one, for a Windows tree built on Linux) and in the record."""
    tree = Tree(root, case_insensitive=True)
    _extract(_tar(tmp_path, {"include/a.h": b"a"}, "a-1-archive"), tree, "comp_a")
    _extract(_tar(tmp_path, {"INCLUDE/b.h": b"b", "Include/Sub/c.h": b"c", "INCLUDE/SUB/d.h": Link("c.h")},
                  "b-1-archive"), tree, "comp_b")
    assert [r.path for r in tree.finish()] == ["include/Sub/c.h", "include/Sub/d.h", "include/a.h",
                                               "include/b.h"]
    assert sorted(p.name for p in root.iterdir()) == ["include"]
    assert (root / "include/b.h").read_bytes() == b"b"


@needs_symlinks
def test_real_parent_is_checked_before_a_file_is_opened(tmp_path: Path, root: Path) -> None:
    """Whatever the names say, a file is only created in a directory that resolves inside the tree
    (here a link the archive did not make: the check does not rely on the claims)."""
    outside = tmp_path / "outside"
    outside.mkdir()
    os.symlink(outside, root / "lib")
    with pytest.raises(UnsafeArchiveError, match="outside the tree"):
        _extract(_tar(tmp_path, {"lib/evil.so": b"x"}), Tree(root))
    assert list(outside.iterdir()) == []
    with pytest.raises(UnsafeArchiveError, match="outside the tree"):
        _extract(_tar(tmp_path, {"lib/sub/evil.so": b"x"}), Tree(root))
    assert list(outside.iterdir()) == []  # not even a directory was made there


# -- the same on a real case-insensitive filesystem (exFAT) ---------------------------------------------
@pytest.fixture(scope="module")
def exfat_dir(tmp_path_factory: pytest.TempPathFactory) -> Any:
    base = tmp_path_factory.mktemp("exfat")
    with exfat(base / "mnt", base / "exfat.img") as mnt:
        yield mnt


def test_probe_tells_case_insensitive_filesystems(tmp_path: Path, exfat_dir: Path) -> None:
    assert is_case_insensitive(exfat_dir) is True
    assert is_case_insensitive(tmp_path) is False
    assert [p for p in exfat_dir.iterdir() if p.name.startswith(".case-probe")] == []


def test_on_exfat_case_variants_collide(tmp_path: Path, exfat_dir: Path) -> None:
    root = exfat_dir / "case-variants"
    root.mkdir()
    tree = Tree(root, case_insensitive=is_case_insensitive(root))
    _extract(_tar(tmp_path, {"include/cuda.h": b"one"}, "a-1-archive"), tree, "comp_a")
    with pytest.raises(ConflictError, match="case-insensitive"):
        _extract(_tar(tmp_path, {"INCLUDE/CUDA.H": b"two"}, "b-1-archive"), tree, "comp_b")
    assert (root / "include/cuda.h").read_bytes() == b"one"  # not overwritten


def test_on_exfat_the_evil_member_set_writes_nothing_outside(tmp_path: Path, exfat_dir: Path) -> None:
    """exFAT has no symlinks, so ``X -> .`` already fails, as a clear local error; then the same set
    with the links left out must still stay inside."""
    root = exfat_dir / "evil" / "tree"
    root.mkdir(parents=True)
    tree = Tree(root, case_insensitive=is_case_insensitive(root))
    with pytest.raises((LocalDiskError, UnsafeArchiveError)) as info:
        _extract(_tar(tmp_path, EVIL), tree)
    if isinstance(info.value, LocalDiskError):
        assert "does not support symbolic links" in str(info.value)
    no_links = {k: v for k, v in EVIL.items() if not isinstance(v, Link)}
    _extract(_tar(tmp_path, no_links, "b-1-archive"), Tree(root, case_insensitive=True), "comp_b")
    assert sorted(p.name for p in (exfat_dir / "evil").iterdir()) == ["tree"]
    assert (root / "x/a/Y/evil").read_bytes() == b"pwned"  # inside


def test_on_exfat_records_name_what_is_on_disk(tmp_path: Path, exfat_dir: Path) -> None:
    """The record must spell paths as the filesystem kept them, or verify and uninstall miss them."""
    root = exfat_dir / "spelling"
    root.mkdir()
    tree = Tree(root, case_insensitive=is_case_insensitive(root))
    _extract(_tar(tmp_path, {"include/a.h": b"a"}, "a-1-archive"), tree, "comp_a")
    _extract(_tar(tmp_path, {"INCLUDE/CUDA.H": b"c", "Include/Sub/d.h": b"d"}, "b-1-archive"), tree, "comp_b")
    for rec in tree.finish():
        parent = root
        for name in rec.path.split("/"):
            assert name in os.listdir(parent), (rec.path, name, os.listdir(parent))
            parent = parent / name
