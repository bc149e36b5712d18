"""Safe extraction into a shared staging tree (cudaredist.tree.extract), with real tiny archives."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tarfile
import warnings
import zipfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from cudaredist.errors import ConflictError, UnsafeArchiveError
from cudaredist.localfs import is_case_insensitive
from cudaredist.tree.extract import extract, redist_mapper
from cudaredist.tree.staging import Tree
from tests.archives import Dir, Exe, Link, Members, Special, cut_inside_a_member, make_tar_xz, make_zip
from tests.hosts import assert_link, assert_mode, skip_on_windows

TOP = "comp-linux-x86_64-1.0-archive"


def _tar(tmp_path: Path, members: Members, name: str = f"{TOP}.tar.xz") -> Path:
    return make_tar_xz(tmp_path / "in" / name, members)


def _zip(tmp_path: Path, members: Members, name: str = "comp-windows-x86_64-1.0-archive.zip") -> Path:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # zipfile warns about the duplicate names some tests need
        return make_zip(tmp_path / "in" / name, members)


def _extract(path: Path, tree: Tree, component: str = "comp") -> None:
    extract(path, tree, component=component, archive=path.name, mapper=redist_mapper(component, path.name))


@pytest.fixture
def tree(tmp_path: Path) -> Tree:
    root = tmp_path / "stage" / "tree"
    root.mkdir(parents=True)
    return Tree(root)


def _outside(tmp_path: Path, tree: Tree) -> set[str]:
    """Everything under tmp_path that is not the input archives or the tree itself."""
    return {str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*")
            if not p.is_relative_to(tree.root) and not p.is_relative_to(tmp_path / "in")}


# -- what must survive ------------------------------------------------------------------------------
def test_symlink_chain_exec_bits_and_records(tmp_path: Path, tree: Tree) -> None:
    so = b"\x7fELF cudart"
    path = _tar(tmp_path, {
        f"{TOP}": Dir(), f"{TOP}/bin": Dir(), f"{TOP}/bin/nvcc": Exe(b"#!/bin/sh\n"),
        f"{TOP}/lib/libcudart.so.13.0.96": so,
        f"{TOP}/lib/libcudart.so.13": Link("libcudart.so.13.0.96"),
        f"{TOP}/lib/libcudart.so": Link("libcudart.so.13"),
        f"{TOP}/LICENSE": b"eula",
    })
    _extract(path, tree)
    records = {r.path: r for r in tree.finish()}
    root = tree.root
    assert_link(root / "lib/libcudart.so", "libcudart.so.13")
    assert_link(root / "lib/libcudart.so.13", "libcudart.so.13.0.96")
    assert (root / "lib/libcudart.so").read_bytes() == so  # the chain resolves
    assert_mode(root / "bin/nvcc", 0o755)
    assert_mode(root / "lib/libcudart.so.13.0.96", 0o644)
    assert (root / "licenses/comp/LICENSE").read_bytes() == b"eula"
    assert not (root / "LICENSE").exists()
    assert set(records) == {"bin/nvcc", "lib/libcudart.so.13.0.96", "lib/libcudart.so.13",
                            "lib/libcudart.so", "licenses/comp/LICENSE"}
    assert records["lib/libcudart.so"].link == "libcudart.so.13"
    assert records["lib/libcudart.so.13.0.96"].sha256 == hashlib.sha256(so).hexdigest()
    assert records["lib/libcudart.so.13.0.96"].size == len(so)
    assert records["bin/nvcc"].mode == 0o755
    assert {r.component for r in records.values()} == {"comp"}


@pytest.mark.parametrize(("mode", "expected"), [
    pytest.param(0o4755, 0o755, id="setuid"),
    pytest.param(0o2755, 0o755, id="setgid"),
    pytest.param(0o1777, 0o755, id="sticky-world-writable"),
    pytest.param(0o6711, 0o755, id="setuid-setgid-exec-only"),
    pytest.param(0o666, 0o644, id="world-writable"),
    pytest.param(0o600, 0o644, id="private"),
    pytest.param(0o100, 0o755, id="owner-exec-only"),
])
def test_modes_are_normalised(tmp_path: Path, tree: Tree, mode: int, expected: int) -> None:
    _extract(_tar(tmp_path, {f"{TOP}/bin/tool": Exe(b"x", mode)}), tree)
    assert_mode(tree.root / "bin/tool", expected)
    assert {r.mode for r in tree.finish()} == {expected}


@pytest.mark.parametrize(("umask", "fchmods"), [pytest.param(0o022, 0, id="022-created-exact"),
                                                pytest.param(0o077, 2, id="077-set-after")])
def test_modes_do_not_depend_on_the_umask(tmp_path: Path, tree: Tree, monkeypatch: pytest.MonkeyPatch,
                                          umask: int, fchmods: int) -> None:
    """A file is created with its mode where the umask leaves it whole (no fchmod, one system call
    fewer for each of a tree's files), and set after creation where the umask takes bits away."""
    from cudaredist import localfs

    skip_on_windows("modes and the umask")
    calls: list[int] = []
    real = os.fchmod
    monkeypatch.setattr(localfs, "UMASK", umask)
    monkeypatch.setattr(os, "fchmod", lambda fd, mode: (calls.append(mode), real(fd, mode))[1])
    old = os.umask(umask)
    try:
        _extract(_tar(tmp_path, {f"{TOP}/bin/tool": Exe(b"x", 0o755), f"{TOP}/include/a.h": b"//"}), tree)
    finally:
        os.umask(old)
    assert_mode(tree.root / "bin/tool", 0o755)
    assert_mode(tree.root / "include/a.h", 0o644)
    assert len(calls) == fchmods


def test_hardlink_inside_archive_becomes_a_copy(tmp_path: Path, tree: Tree) -> None:
    members: Members = {f"{TOP}/bin/a": Exe(b"same bytes"), f"{TOP}/bin/b": Link(f"{TOP}/bin/a", hard=True)}
    _extract(_tar(tmp_path, members), tree)
    a, b = tree.root / "bin/a", tree.root / "bin/b"
    assert b.read_bytes() == b"same bytes"
    assert not b.is_symlink()
    assert a.stat().st_ino != b.stat().st_ino
    assert b.stat().st_nlink == 1
    assert_mode(b, 0o755)
    records = {r.path: r for r in tree.finish()}
    assert records["bin/b"].sha256 == records["bin/a"].sha256 == hashlib.sha256(b"same bytes").hexdigest()


@pytest.mark.parametrize("members", [
    pytest.param({f"{TOP}/b": Link(f"{TOP}/a", hard=True), f"{TOP}/a": b"x"}, id="target-comes-later"),
    pytest.param({f"{TOP}/b": Link(f"{TOP}/missing", hard=True)}, id="target-missing"),
    pytest.param({f"{TOP}/a": Link("x"), f"{TOP}/x": b"x", f"{TOP}/b": Link(f"{TOP}/a", hard=True)},
                 id="target-is-a-symlink"),
    pytest.param({f"{TOP}/a": b"x", f"{TOP}/b": Link("other/a", hard=True)}, id="target-outside-top"),
    pytest.param({f"{TOP}/a": b"x", f"{TOP}/b": Link(f"{TOP}/../../etc/passwd", hard=True)},
                 id="target-dotdot"),
    pytest.param({f"{TOP}/a": b"x", f"{TOP}/b": Link("/etc/passwd", hard=True)}, id="target-absolute"),
    pytest.param({f"{TOP}/a": b"x", f"{TOP}/b": Link(TOP, hard=True)}, id="target-top-folder"),
])
def test_bad_hardlinks_are_refused(tmp_path: Path, tree: Tree, members: Members) -> None:
    with pytest.raises(UnsafeArchiveError) as info:
        _extract(_tar(tmp_path, members), tree)
    assert info.value.archive == f"{TOP}.tar.xz"
    assert not (tree.root / "b").exists()


# -- hostile tar members -------------------------------------------------------------------------------
@pytest.mark.parametrize(("members", "member", "reason"), [
    pytest.param({f"{TOP}/a": b"x", f"{TOP}/../../evil": b"x"}, f"{TOP}/../../evil", "'..'", id="traversal"),
    pytest.param({"../evil": b"x"}, "../evil", "'..'", id="traversal-first"),
    pytest.param({f"{TOP}/a": b"x", "/tmp/evil-cudaredist": b"x"}, "/tmp/evil-cudaredist", "absolute",
                 id="absolute"),
    pytest.param({f"{TOP}/lib/x": Link("/etc/passwd")}, "lib/x", "absolute", id="symlink-absolute"),
    pytest.param({f"{TOP}/lib/x": Link("../../evil")}, "lib/x", "leaves the prefix", id="symlink-dotdot"),
    pytest.param({f"{TOP}/x": Link("..")}, "x", "leaves the prefix", id="symlink-parent-of-root"),
    pytest.param({f"{TOP}/x": Dir(), f"{TOP}/x/y": Link(".."), f"{TOP}/w": Link("x/y/../..")}, "w",
                 "climbs with '..'", id="symlink-escape-through-another-link"),
    pytest.param({f"{TOP}/lib/e": Link("")}, "lib/e", "empty target", id="symlink-empty-target"),
    pytest.param({f"{TOP}/lib/sub": Dir(), f"{TOP}/lib/d": Link("sub"), f"{TOP}/lib/d/evil": b"x"},
                 "lib/d/evil", "under the symlink 'lib/d'", id="member-under-symlink"),
    pytest.param({f"{TOP}/up": Link("."), f"{TOP}/up/evil": b"x"}, "up/evil", "under the symlink 'up'",
                 id="member-under-symlink-to-root"),
    pytest.param({f"{TOP}/dev/null": Special(tarfile.CHRTYPE)}, f"{TOP}/dev/null", "character device",
                 id="char-device"),
    pytest.param({f"{TOP}/dev/sda": Special(tarfile.BLKTYPE)}, f"{TOP}/dev/sda", "block device",
                 id="block-device"),
    pytest.param({f"{TOP}/fifo": Special(tarfile.FIFOTYPE)}, f"{TOP}/fifo", "fifo", id="fifo"),
    pytest.param({f"{TOP}/a": b"x", "other-top/b": b"x"}, "other-top/b", "top folder", id="two-top-folders"),
    pytest.param({f"{TOP}/C:/evil": b"x"}, f"{TOP}/C:/evil", "drive letter", id="drive-letter-part"),
])
def test_hostile_tar_is_refused(tmp_path: Path, tree: Tree, members: Members, member: str,
                                reason: str) -> None:
    path = _tar(tmp_path, members)
    with pytest.raises(UnsafeArchiveError) as info:
        _extract(path, tree)
    assert info.value.member == member
    assert info.value.archive == path.name
    assert reason in str(info.value)
    assert _outside(tmp_path, tree) <= {"stage"}
    assert not Path("/tmp/evil-cudaredist").exists()


def test_member_under_another_archives_symlink(tmp_path: Path, tree: Tree) -> None:
    _extract(_tar(tmp_path, {f"{TOP}/lib": Dir(), f"{TOP}/lib64": Link("lib")}), tree, "first")
    other = "second-linux-x86_64-1.0-archive"
    with pytest.raises(UnsafeArchiveError, match="under the symlink 'lib64'"):
        _extract(_tar(tmp_path, {f"{other}/lib64/libx.so": b"x"}, name=f"{other}.tar.xz"), tree, "second")
    assert list((tree.root / "lib").iterdir()) == []


@pytest.mark.parametrize("data", [
    pytest.param(b"", id="empty"),
    pytest.param(b"not a tar at all" * 100, id="garbage"),
])
def test_unreadable_tar(tmp_path: Path, tree: Tree, data: bytes) -> None:
    path = tmp_path / f"{TOP}.tar.xz"
    path.write_bytes(data)
    with pytest.raises(UnsafeArchiveError) as info:
        _extract(path, tree)
    assert info.value.archive == path.name


def test_truncated_tar(tmp_path: Path, tree: Tree) -> None:
    path = _tar(tmp_path, {f"{TOP}/a": os.urandom(200_000)})
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    with pytest.raises(UnsafeArchiveError, match="corrupt or truncated|not a readable"):
        _extract(path, tree)


def test_tar_stream_ending_inside_a_member(tmp_path: Path, tree: Tree) -> None:
    """The compression is sound but the tar stops inside a member: refused as a damaged archive,
    naming it, with nothing written outside the staging tree (whose owner throws it away)."""
    path = _tar(tmp_path, {f"{TOP}/": Dir(), f"{TOP}/bin/": Dir(), f"{TOP}/bin/a": os.urandom(300_000)})
    cut_inside_a_member(path)
    with pytest.raises(UnsafeArchiveError) as info:
        _extract(path, tree)
    assert info.value.archive == path.name and path.name in str(info.value)
    assert "truncated" in str(info.value)
    assert _outside(tmp_path, tree) <= {"stage"}


@pytest.mark.parametrize("fmt", ["gnu", "posix"])
def test_sparse_members_are_written_whole(tmp_path: Path, tree: Tree, fmt: str) -> None:
    """A sparse member (GNU tar's old format, and pax's) is read through tarfile, holes as zeros,
    not from the raw stream (whose bytes there are the sparse map's data only)."""
    tar = shutil.which("tar")
    if tar is None or "GNU tar" not in subprocess.run([tar, "--version"], capture_output=True,
                                                      text=True).stdout:
        pytest.skip("GNU tar makes the sparse members (tarfile cannot write them)")
    src = tmp_path / "src" / TOP / "lib"
    src.mkdir(parents=True)
    head, tail = os.urandom(5000), os.urandom(7000)
    with open(src / "libsparse.a", "wb") as fh:
        fh.write(head)
        fh.seek(1 << 20)
        fh.write(tail)
    path = tmp_path / "in" / f"{TOP}.tar.xz"
    path.parent.mkdir()
    subprocess.run([tar, "--sparse", f"--format={fmt}", "-cJf", str(path), "-C", str(tmp_path / "src"), TOP],
                   check=True)
    with tarfile.open(path) as tf:
        assert any(m.sparse for m in tf.getmembers())  # else this tests nothing
    _extract(path, tree)
    records = {r.path: r for r in tree.finish()}
    whole = head + bytes((1 << 20) - len(head)) + tail
    assert (tree.root / "lib" / "libsparse.a").read_bytes() == whole
    assert records["lib/libsparse.a"].sha256 == hashlib.sha256(whole).hexdigest()


# -- zips ---------------------------------------------------------------------------------------------
ZTOP = "comp-windows-x86_64-1.0-archive"


def test_msbuild_files_go_where_nvidias_installer_and_cmake_put_them(tmp_path: Path, tree: Tree) -> None:
    """NVIDIA's visual_studio_integration zip holds <top>/visual_studio_integration/MSBuildExtensions/;
    CMake's -T cuda=<tree> looks in <tree>/extras/visual_studio_integration/MSBuildExtensions/."""
    from cudaredist.plan import Archive, PlannedArchive
    from cudaredist.sources.nvidia.source import LAYOUT
    from tests.archives import msbuild_members

    name = "visual_studio_integration-windows-arm64-13.4.49-archive.zip"
    top = name.removesuffix(".zip")
    path = _zip(tmp_path, {f"{top}/{k}": v for k, v in msbuild_members("13.4").items()}, name)
    item = PlannedArchive("visual_studio_integration", "13.4.49", Archive(f"x/{name}", "0" * 64, 1), "u")
    extract(path, tree, component=item.component, archive=name, mapper=LAYOUT.mapper(item, "windows-arm64"))
    ext = "extras/visual_studio_integration/MSBuildExtensions"
    assert sorted(r.path for r in tree.finish()) == [
        f"{ext}/CUDA 13.4.Version.props", f"{ext}/CUDA 13.4.props", f"{ext}/CUDA 13.4.targets",
        f"{ext}/CUDA 13.4.xml", f"{ext}/Nvda.Build.CudaTasks.v13.4.dll",
        "licenses/visual_studio_integration/LICENSE"]


def test_zip_extracts_files_and_dirs(tmp_path: Path, tree: Tree) -> None:
    _extract(_zip(tmp_path, {f"{ZTOP}/": Dir(), f"{ZTOP}/bin/x64/cudart64_13.dll": b"MZ",
                             f"{ZTOP}/lib/x64/": Dir(), f"{ZTOP}/LICENSE": b"eula"}), tree)
    assert (tree.root / "bin/x64/cudart64_13.dll").read_bytes() == b"MZ"
    assert (tree.root / "lib/x64").is_dir()
    assert (tree.root / "licenses/comp/LICENSE").read_bytes() == b"eula"
    assert_mode(tree.root / "bin/x64/cudart64_13.dll", 0o644)
    assert [r.path for r in tree.finish()] == ["bin/x64/cudart64_13.dll", "licenses/comp/LICENSE"]


@pytest.mark.parametrize(("members", "member", "reason"), [
    pytest.param({f"{ZTOP}/a": b"x", f"{ZTOP}/../evil": b"x"}, f"{ZTOP}/../evil", "'..'", id="dotdot"),
    pytest.param({f"{ZTOP}/a": b"x", "/abs/evil": b"x"}, "/abs/evil", "absolute", id="absolute"),
    pytest.param({f"{ZTOP}/a": b"x", "C:/evil": b"x"}, "C:/evil", "absolute", id="drive-letter"),
    pytest.param({f"{ZTOP}/a": b"x", f"{ZTOP}/./C:/evil": b"x"}, f"{ZTOP}/./C:/evil", "drive letter",
                 id="drive-letter-inside"),
    pytest.param({f"{ZTOP}\\..\\..\\evil": b"x"}, f"{ZTOP}\\..\\..\\evil", "backslashes",
                 id="backslash-dotdot"),
    pytest.param({f"{ZTOP}\\bin\\x.dll": b"x"}, f"{ZTOP}\\bin\\x.dll", "backslashes", id="backslash"),
])
def test_hostile_zip_is_refused(tmp_path: Path, tree: Tree, members: Members, member: str,
                                reason: str) -> None:
    path = _zip(tmp_path, members)
    with pytest.raises(UnsafeArchiveError) as info:
        _extract(path, tree)
    assert info.value.member == member
    assert reason in str(info.value)
    # every entry is checked before the first byte is written
    assert list(tree.root.iterdir()) == []
    assert _outside(tmp_path, tree) <= {"stage"}


@pytest.mark.parametrize(("first", "second"), [
    pytest.param(f"{ZTOP}/include/a.h", f"{ZTOP}/include/a.h", id="same-name"),
    pytest.param(f"{ZTOP}/include/a.h", f"{ZTOP}/./include//a.h", id="same-after-cleaning"),
])
def test_zip_duplicate_names(tmp_path: Path, tree: Tree, first: str, second: str) -> None:
    path = tmp_path / "in" / "dup.zip"
    path.parent.mkdir(parents=True)
    with warnings.catch_warnings(), zipfile.ZipFile(path, "w") as zf:
        warnings.simplefilter("ignore")
        zf.writestr(first, b"harmless")
        zf.writestr(second, b"evil")
    with pytest.raises(UnsafeArchiveError, match="appears twice") as info:
        _extract(path, tree)
    assert info.value.member == second
    assert list(tree.root.iterdir()) == []


@pytest.mark.parametrize("kind", ["tar", "zip", "wheel"])
@pytest.mark.parametrize("folds", [False, True], ids=["case-sensitive-target", "case-folding-target"])
def test_case_variants_are_judged_by_the_target(tmp_path: Path, kind: str, folds: bool) -> None:
    """include/Foo.h beside include/foo.h: two files for a Linux target, one path (a conflict) where
    the target folds case; a tar, a zip and a wheel alike."""
    top = {"tar": TOP, "zip": ZTOP, "wheel": ZTOP}[kind]
    members: Members = {f"{top}/include/Foo.h": b"// upper", f"{top}/include/foo.h": b"// lower"}
    name = {"tar": f"{TOP}.tar.xz", "wheel": "comp-1.0-py3-none-manylinux_2_28_x86_64.whl"}.get(
        kind, f"{ZTOP}.zip")
    path = _tar(tmp_path, members, name) if kind == "tar" else _zip(tmp_path, members, name)
    root = tmp_path / "stage"
    root.mkdir()
    if not folds and is_case_insensitive(root):
        skip_on_windows("a case-sensitive filesystem (a Linux target's case variants are two files)")
    tree = Tree(root, case_insensitive=folds)

    def run() -> None:
        extract(path, tree, component="comp", archive=name,
                mapper=lambda clean: clean.split("/", 1)[1] if "/" in clean else None)

    if folds:
        with pytest.raises(ConflictError, match="case-insensitive"):
            run()
    else:
        run()
        assert {r.path for r in tree.finish()} == {"include/Foo.h", "include/foo.h"}
        assert (root / "include/Foo.h").read_bytes() == b"// upper"
        assert (root / "include/foo.h").read_bytes() == b"// lower"


def test_zip_symlink_entry_is_refused(tmp_path: Path, tree: Tree) -> None:
    path = _zip(tmp_path, {f"{ZTOP}/a": b"x", f"{ZTOP}/lib/link": Link("../../../etc/passwd")})
    with pytest.raises(UnsafeArchiveError, match="is a symlink") as info:
        _extract(path, tree)
    assert info.value.member == f"{ZTOP}/lib/link"
    assert not (tree.root / "lib/link").exists()


def test_corrupt_zip(tmp_path: Path, tree: Tree) -> None:
    path = tmp_path / "bad.zip"
    path.write_bytes(b"PK\x03\x04 but not really")
    with pytest.raises(UnsafeArchiveError, match="not a readable zip"):
        _extract(path, tree)


# -- several archives, one tree -------------------------------------------------------------------------
def _two(tmp_path: Path, a: Members, b: Members) -> tuple[Path, Path]:
    return (_tar(tmp_path, {f"a-1-archive/{k}": v for k, v in a.items()}, "a-1-archive.tar.xz"),
            _tar(tmp_path, {f"b-1-archive/{k}": v for k, v in b.items()}, "b-1-archive.tar.xz"))


@pytest.mark.parametrize(("a", "b"), [
    pytest.param({"include/common.h": b"same"}, {"include/common.h": b"same"}, id="same-file"),
    pytest.param({"lib/x": Link("y")}, {"lib/x": Link("y")}, id="same-link"),
    pytest.param({"include": Dir(), "include/a.h": b"a"}, {"include": Dir(), "include/b.h": b"b"},
                 id="shared-directory"),
])
def test_identical_content_from_two_archives_is_fine(tmp_path: Path, tree: Tree, a: Members,
                                                     b: Members) -> None:
    pa, pb = _two(tmp_path, a, b)
    _extract(pa, tree, "comp_a")
    _extract(pb, tree, "comp_b")
    records = tree.finish()
    # every path is recorded once, for the archive that wrote it first
    assert len({r.path for r in records}) == len(records)
    assert all(r.component == "comp_a" for r in records if r.path in {k for k in a if k != "include"})


@pytest.mark.parametrize(("a", "b", "what"), [
    pytest.param({"include/common.h": b"one"}, {"include/common.h": b"two"}, "different content",
                 id="different-content"),
    pytest.param({"lib/x": Link("y")}, {"lib/x": Link("z")}, "different content", id="different-link-target"),
    pytest.param({"lib/x": b"file"}, {"lib/x": Link("y")}, "type (file vs link)", id="file-vs-link"),
    pytest.param({"include/x": b"file"}, {"include/x/y.h": b"header"}, "to be a directory",
                 id="file-then-directory"),
    pytest.param({"include/x/y.h": b"header"}, {"include/x": b"file"}, "type (dir vs file)",
                 id="directory-then-file"),
    pytest.param({"include/x/y.h": b"header"}, {"include/x": Link("y")}, "type (dir vs link)",
                 id="directory-then-link"),
    pytest.param({"include/x": b"file"}, {"include/x": Dir()}, "to be a directory",
                 id="file-then-dir-member"),
])
def test_conflicts_name_both_components(tmp_path: Path, tree: Tree, a: Members, b: Members,
                                        what: str) -> None:
    pa, pb = _two(tmp_path, a, b)
    _extract(pa, tree, "comp_a")
    with pytest.raises(ConflictError) as info:
        _extract(pb, tree, "comp_b")
    err = info.value
    assert what in str(err)
    assert "comp_a" in str(err) and "comp_b" in str(err)
    assert (err.first, err.second) == ("comp_a", "comp_b")
    assert err.path == next(iter(b)).removesuffix("/")


def test_conflict_detected_when_extracting_concurrently(tmp_path: Path, tree: Tree) -> None:
    big_a, big_b = os.urandom(3_000_000), os.urandom(3_000_000)
    pa, pb = _two(tmp_path, {"lib/big": big_a, "lib/same": b"s"}, {"lib/big": big_b, "lib/same": b"s"})
    with ThreadPoolExecutor(2) as pool:
        futures = [pool.submit(_extract, pa, tree, "comp_a"), pool.submit(_extract, pb, tree, "comp_b")]
        errors = [f.exception() for f in futures]
    conflicts = [e for e in errors if e is not None]
    assert len(conflicts) == 1 and isinstance(conflicts[0], ConflictError)
    assert {conflicts[0].first, conflicts[0].second} == {"comp_a", "comp_b"}
    assert (tree.root / "lib/big").read_bytes() in (big_a, big_b)


# -- a big complete zip is inflated by several threads ------------------------------------------------
class _Threads(Tree):
    """A tree that notes which thread wrote each file."""

    def __init__(self, root: Path) -> None:
        super().__init__(root)
        self.writers: dict[str, str] = {}

    def add_file(self, rel: str, src: object, mode: int, component: str, archive: str,  # type: ignore[override]
                 digest: str = "") -> None:
        import threading

        self.writers[rel] = threading.current_thread().name
        super().add_file(rel, src, mode, component, archive, digest)  # type: ignore[arg-type]


def _big_zip(tmp_path: Path, n: int = 6) -> tuple[Path, dict[str, bytes]]:
    body = {f"bin/tool{i}": os.urandom(3 << 20) for i in range(n)}  # incompressible: 18 MB of deflate
    return _zip(tmp_path, {f"{ZTOP}/bin/": Dir(), **{f"{ZTOP}/{k}": v for k, v in body.items()}}), body


def test_a_big_zip_is_inflated_by_several_threads(tmp_path: Path) -> None:
    path, body = _big_zip(tmp_path)
    tree = _Threads(tmp_path / "t")
    tree.root.mkdir()
    _extract(path, tree)
    records = {r.path: r for r in tree.finish()}
    assert set(records) == set(body)
    for rel, data in body.items():
        assert (tree.root / rel).read_bytes() == data
        assert records[rel].sha256 == hashlib.sha256(data).hexdigest()
    if (os.cpu_count() or 1) > 1:
        assert {name.rsplit("_", 1)[0] for name in tree.writers.values()} == {"inflate"}
        assert len(set(tree.writers.values())) > 1


def test_a_corrupt_member_of_a_big_zip_fails_the_whole_archive(tmp_path: Path) -> None:
    path, body = _big_zip(tmp_path)
    data = bytearray(path.read_bytes())
    victim = next(iter(body.values()))
    at = bytes(data).index(victim[:64])  # stored as is (incompressible): flip a byte of its data
    data[at + 1000] ^= 0xFF
    path.write_bytes(bytes(data))
    tree = Tree(tmp_path / "t")
    tree.root.mkdir()
    with pytest.raises(UnsafeArchiveError, match="corrupt"):
        _extract(path, tree)


@pytest.mark.parametrize("big", [False, True])
def test_a_local_header_naming_another_file_is_refused(tmp_path: Path, big: bool) -> None:
    """The central directory names the member; a local header that says otherwise (another file's
    bytes reached under this name) is a corrupt zip, whichever thread inflates it."""
    if big:
        path, _body = _big_zip(tmp_path)
    else:
        path = _zip(tmp_path, {f"{ZTOP}/bin/": Dir(), f"{ZTOP}/bin/tool0": b"x" * 5000})
    data = path.read_bytes()
    name = f"{ZTOP}/bin/tool0".encode()
    path.write_bytes(data.replace(name, f"{ZTOP}/bin/toolZ".encode(), 1))  # the local header comes first
    tree = Tree(tmp_path / "t")
    tree.root.mkdir()
    with pytest.raises(UnsafeArchiveError, match="corrupt.*differ"):
        _extract(path, tree)


def test_a_tree_tries_one_clone_where_the_filesystem_cannot(tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                                                            ) -> None:
    """A clone that comes back as a copy (ext4, tmpfs, NTFS) is not tried again for the tree's other
    files: they are copied straight away, with the same bytes and modes."""
    from cudaredist.tree import links
    from cudaredist.tree.staging import FileRecord

    tries: list[int] = []

    def no_clone(fd_in: int, fd_out: int) -> bool:
        tries.append(fd_out)
        return False

    monkeypatch.setattr(links, "_clone_fd", no_clone)
    src = tmp_path / "entry"
    src.mkdir()
    tree = Tree(tmp_path / "t")
    tree.root.mkdir()
    for i, mode in enumerate((0o644, 0o755, 0o644)):
        data = f"file {i}".encode() * 100
        (src / f"f{i}").write_bytes(data)
        rec = FileRecord(f"bin/f{i}", len(data), hashlib.sha256(data).hexdigest(), mode)
        tree.add_placed([rec], lambda _r, i=i: str(src / f"f{i}"), "clone", "comp", "a.zip")
        assert (tree.root / f"bin/f{i}").read_bytes() == data
        assert_mode(tree.root / f"bin/f{i}", mode)
    assert len(tries) == 1
