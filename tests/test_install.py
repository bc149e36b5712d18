"""The install transaction: atomic swap and rollback, recovery of killed runs, locks, the cache,
and hostile archives refused end to end with nothing written outside the prefix or the cache."""

from __future__ import annotations

import json
import os
import shutil
import tarfile
import time
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import filelock
import pytest

from cudaredist.cache.store import Cache
from cudaredist.errors import (
    BusyError,
    IntegrityError,
    LocalDiskError,
    PrefixError,
    UnsafeArchiveError,
    UsageError,
)
from cudaredist.fetch.transport import Transport
from cudaredist.install import Installer, InstallResult
from cudaredist.plan import Plan
from cudaredist.record import read_record, record_path
from cudaredist.sbom import sbom_path
from cudaredist.sources.nvidia.index import Index, normalize_base
from tests.archives import (
    Dir,
    Exe,
    Link,
    Members,
    MirrorArchive,
    archive_name,
    build_mirror,
    digest,
    make_tar_xz,
    make_zip,
    resolve_plan,
    toolkit,
)
from tests.hosts import assert_mode, posix_only
from tests.invariants import assert_installed, assert_intact, leftovers, snapshot

LINUX = "linux-x86_64"
WINDOWS = "windows-x86_64"


@pytest.fixture
def transport() -> Iterator[Transport]:
    t = Transport()
    yield t
    t.close()


@pytest.fixture
def cache(tmp_path: Path) -> Cache:
    return Cache(tmp_path / "cache")


def plan_for(transport: Transport, cache: Cache, mirror: Path, train: str, *, platform: str = LINUX,
             components: tuple[str, ...] = ()) -> Plan:
    return resolve_plan(Index(transport, cache), train, bases=[normalize_base(str(mirror))],
                        platform=platform, profile=None if components else "nvcc", components=components)


def install(transport: Transport, cache: Cache, mirror: Path, train: str, prefix: Path, *,
            reinstall: bool = False, replace_foreign: bool = False, lock_timeout: float = 10,
            link_mode: str | None = None, cache_unpacked: bool = True, **kw: object) -> InstallResult:
    plan = plan_for(transport, cache, mirror, train, **kw)  # type: ignore[arg-type]
    return Installer(transport, cache, lock_timeout=lock_timeout, jobs=4, link_mode=link_mode,
                     cache_unpacked=cache_unpacked).install(
        plan, prefix, reinstall=reinstall, replace_foreign=replace_foreign)


@pytest.fixture
def prefix(tmp_path: Path) -> Path:
    return tmp_path / "world" / "inst" / "cuda"


def sha_of(transport: Transport, cache: Cache, mirror: Path, train: str, component: str, **kw: object) -> str:
    plan = plan_for(transport, cache, mirror, train, **kw)  # type: ignore[arg-type]
    return next(i.archive.sha256 for i in plan.items if i.component == component)


# -- the transaction ----------------------------------------------------------------------------------
def test_upgrade_replaces_the_tree_and_noop_when_satisfied(mirror: Path, transport: Transport, cache: Cache,
                                                           prefix: Path) -> None:
    first = install(transport, cache, mirror, "12.9", prefix)
    assert not first.noop and first.downloaded == 5
    assert_installed(prefix, "12.9.1", cache)
    (prefix / "include" / "crt").mkdir(parents=True, exist_ok=True)
    second = install(transport, cache, mirror, "13.0", prefix)
    assert_installed(prefix, "13.0.1", cache)
    assert second.cached == 5 and second.downloaded == 2  # 12.9.1 and 13.0.1 share five archives
    assert install(transport, cache, mirror, "13.0", prefix).noop


def test_failed_swap_restores_the_previous_tree(mirror: Path, transport: Transport, cache: Cache,
                                                prefix: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    install(transport, cache, mirror, "12.9", prefix)
    before = snapshot(prefix)
    real_rename = os.rename

    def rename(src: os.PathLike[str] | str, dst: os.PathLike[str] | str) -> None:
        if "cudaredist-stage-" in str(src) and str(dst) == str(prefix):
            raise OSError(16, "Device or resource busy")
        real_rename(src, dst)

    monkeypatch.setattr(os, "rename", rename)
    with pytest.raises(PrefixError, match="previous tree was restored"):
        install(transport, cache, mirror, "13.0", prefix)
    monkeypatch.undo()
    assert_intact(prefix, before, cache)


def test_prefix_that_cannot_be_moved_aside_is_left_alone(mirror: Path, transport: Transport, cache: Cache,
                                                         prefix: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    install(transport, cache, mirror, "12.9", prefix)
    before = snapshot(prefix)
    real_rename = os.rename

    def rename(src: os.PathLike[str] | str, dst: os.PathLike[str] | str) -> None:
        if str(src) == str(prefix):
            raise OSError(16, "Device or resource busy")
        real_rename(src, dst)

    monkeypatch.setattr(os, "rename", rename)
    with pytest.raises(PrefixError, match="cannot move the existing"):
        install(transport, cache, mirror, "13.0", prefix)
    monkeypatch.undo()
    assert_intact(prefix, before, cache)


def test_failure_while_extracting_removes_the_staging_tree(mirror: Path, transport: Transport, cache: Cache,
                                                           prefix: Path,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    import cudaredist.install.build as inst
    from cudaredist.tree.extract import extract as real_extract
    from cudaredist.tree.staging import Tree

    install(transport, cache, mirror, "12.9", prefix)
    before = snapshot(prefix)
    calls = []

    def extract(path: Path, tree: Tree, **kw: Any) -> None:
        calls.append(kw["component"])
        if len(calls) == 2:  # 12.9 left three unpacked: after them and one archive more
            raise OSError(28, "No space left on device")
        real_extract(path, tree, **kw)

    monkeypatch.setattr(inst, "extract", extract)
    with pytest.raises(LocalDiskError, match="no space left on the device holding"):
        install(transport, cache, mirror, "13.0", prefix)
    assert_intact(prefix, before, cache)


@pytest.mark.parametrize("name", ["cuda", pytest.param("cuda[13]*?", marks=posix_only(
    "'*' and '?' in a file name (Windows refuses them)"))])
def test_killed_between_the_two_renames_is_restored(mirror: Path, transport: Transport, cache: Cache,
                                                    tmp_path: Path, name: str) -> None:
    """Killed after the old tree moved aside, before the new one moved in: the old one comes back."""
    prefix = tmp_path / "inst" / name
    install(transport, cache, mirror, "12.9", prefix)
    before = snapshot(prefix)
    os.rename(prefix, prefix.parent / f".{name}.cudaredist-old-1a2b3c4d")
    stage = prefix.parent / f".{name}.cudaredist-stage-x8y9"
    (stage / "bin").mkdir(parents=True)
    (stage / "bin" / "nvcc").write_bytes(b"half")
    result = install(transport, cache, mirror, "12.9", prefix)
    assert result.noop  # the restored tree already is 12.9.1
    assert_intact(prefix, before, cache)


def test_killed_before_the_old_tree_was_deleted_is_cleaned(mirror: Path, transport: Transport, cache: Cache,
                                                           prefix: Path) -> None:
    install(transport, cache, mirror, "13.0", prefix)
    before = snapshot(prefix)
    old = prefix.parent / ".cuda.cudaredist-old-0000ffff"
    (old / "lib").mkdir(parents=True)
    (old / "lib" / "libcudart.so.12").write_bytes(b"old")
    os.chmod(old / "lib", 0o500)  # a read-only leftover is still removed
    assert install(transport, cache, mirror, "13.0", prefix).noop
    assert_intact(prefix, before, cache)


def test_foreign_prefix_is_refused_unless_replace_foreign(mirror: Path, transport: Transport,
                                                          cache: Cache, prefix: Path) -> None:
    prefix.mkdir(parents=True)
    (prefix / "mine.txt").write_text("user data")
    before = snapshot(prefix)
    with pytest.raises(PrefixError, match="--replace-foreign"):
        install(transport, cache, mirror, "13.0", prefix)
    assert_intact(prefix, before, cache)
    # --reinstall is about cudaredist's own trees: it does not replace someone else's directory
    with pytest.raises(PrefixError, match="--replace-foreign"):
        install(transport, cache, mirror, "13.0", prefix, reinstall=True)
    assert_intact(prefix, before, cache)
    install(transport, cache, mirror, "13.0", prefix, replace_foreign=True)
    assert_installed(prefix, "13.0.1", cache)


def test_empty_prefix_directory_is_used(mirror: Path, transport: Transport, cache: Cache,
                                        prefix: Path) -> None:
    prefix.mkdir(parents=True)
    install(transport, cache, mirror, "13.0", prefix)
    assert_installed(prefix, "13.0.1", cache)


def test_unreadable_record_needs_reinstall_and_reinstall_works(mirror: Path, transport: Transport,
                                                               cache: Cache, prefix: Path) -> None:
    install(transport, cache, mirror, "12.9", prefix)
    record_path(prefix).write_text("{not json")
    before = snapshot(prefix)
    with pytest.raises(PrefixError, match="--reinstall"):
        install(transport, cache, mirror, "13.0", prefix)
    assert_intact(prefix, before, cache)
    install(transport, cache, mirror, "13.0", prefix, reinstall=True)
    assert_installed(prefix, "13.0.1", cache)


# -- locks -----------------------------------------------------------------------------------------
def test_busy_prefix_fails_after_the_lock_timeout(mirror: Path, transport: Transport, cache: Cache,
                                                  prefix: Path) -> None:
    install(transport, cache, mirror, "12.9", prefix)
    before = snapshot(prefix)
    with filelock.FileLock(str(prefix.parent / ".cuda.cudaredist.lock")):
        t0 = time.monotonic()
        with pytest.raises(BusyError, match="--lock-timeout") as exc:
            install(transport, cache, mirror, "13.0", prefix, lock_timeout=0.3)
        assert 0.3 <= time.monotonic() - t0 < 3
    assert exc.value.exit_code == 75 and exc.value.path == str(prefix)
    assert_intact(prefix, before, cache)


def test_lock_timeout_comes_from_the_environment(mirror: Path, transport: Transport, cache: Cache,
                                                 prefix: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CUDAREDIST_LOCK_TIMEOUT", "0.2")
    plan = plan_for(transport, cache, mirror, "13.0")
    with filelock.FileLock(str(prefix.parent / ".cuda.cudaredist.lock")), pytest.raises(BusyError):
        Installer(transport, cache).install(plan, prefix)
    assert not os.path.lexists(prefix) and leftovers(prefix) == []


def test_a_lock_timeout_that_is_no_number_is_a_usage_error(monkeypatch: pytest.MonkeyPatch) -> None:
    """The one reading of the wait (store.lock_wait): an option wins, a bad variable is refused
    (it was ignored by uninstall and the library, refused by install's option parser)."""
    from cudaredist.cache.store import lock_wait

    monkeypatch.setenv("CUDAREDIST_LOCK_TIMEOUT", "soon")
    assert lock_wait(3.0) == 3.0
    with pytest.raises(UsageError, match="CUDAREDIST_LOCK_TIMEOUT='soon' is not a number of seconds") as exc:
        lock_wait()
    assert exc.value.exit_code == 2
    monkeypatch.setenv("CUDAREDIST_LOCK_TIMEOUT", "12.5")
    assert lock_wait() == 12.5


def test_busy_cache_entry_fails_after_the_lock_timeout(mirror: Path, transport: Transport, cache: Cache,
                                                       prefix: Path) -> None:
    sha = sha_of(transport, cache, mirror, "13.0", "cuda_crt")
    (cache.root / "locks").mkdir(parents=True, exist_ok=True)
    with filelock.FileLock(str(cache.root / "locks" / f"{sha}.lock")):
        with pytest.raises(BusyError, match="cache entry") as exc:
            install(transport, cache, mirror, "13.0", prefix, lock_timeout=0.3)
        # busy is its own kind: the cache root is not a prefix
        assert exc.value.exit_code == 75 and not isinstance(exc.value, PrefixError)
        assert exc.value.path == str(cache.root)
        assert exc.value.lock == str(cache.root / "locks" / f"{sha}.lock")
    assert not os.path.lexists(prefix) and leftovers(prefix) == []
    install(transport, cache, mirror, "13.0", prefix)
    assert_installed(prefix, "13.0.1", cache)


# -- the cache ----------------------------------------------------------------------------------------
def test_corrupted_cache_entry_is_dropped_and_fetched_again(mirror: Path, transport: Transport, cache: Cache,
                                                            tmp_path: Path) -> None:
    install(transport, cache, mirror, "13.0", tmp_path / "a")
    sha = sha_of(transport, cache, mirror, "13.0", "cuda_nvcc")
    entry = cache.archive_path(sha)
    entry.write_bytes(bytes(len(entry.read_bytes())))  # same size, wrong bytes
    shutil.rmtree(cache.root / "unpacked")  # else the archive is not read at all
    result = install(transport, cache, mirror, "13.0", tmp_path / "b")
    assert (result.downloaded, result.cached) == (1, 6)
    assert_installed(tmp_path / "b", "13.0.1", cache)


def test_an_edited_unpacked_entry_is_unpacked_again(mirror: Path, transport: Transport, cache: Cache,
                                                     tmp_path: Path) -> None:
    install(transport, cache, mirror, "13.0", tmp_path / "a", link_mode="hardlink")
    with open(tmp_path / "a" / "include" / "cuda_runtime.h", "ab") as fh:  # edits the shared inode
        fh.write(b"// patched in place")
    result = install(transport, cache, mirror, "13.0", tmp_path / "b")
    assert (result.downloaded, result.cached) == (0, 7)
    assert (tmp_path / "b" / "include" / "cuda_runtime.h").read_bytes() == b"// rt"  # from the archive
    assert_installed(tmp_path / "b", "13.0.1", cache)


def test_an_edited_entry_whose_archive_is_gone_counts_as_downloaded(mirror: Path, transport: Transport,
                                                                    cache: Cache, tmp_path: Path) -> None:
    """The entry is only looked at closely under its lock: one found changed there, with its archive
    no longer cached, is downloaded again, and the result says so (not "from cache")."""
    install(transport, cache, mirror, "13.0", tmp_path / "a", link_mode="hardlink")
    with open(tmp_path / "a" / "include" / "cuda_runtime.h", "ab") as fh:  # edits the shared inode
        fh.write(b"// patched in place")
    sha = sha_of(transport, cache, mirror, "13.0", "cuda_cudart")
    cache.archive_path(sha).unlink()
    result = install(transport, cache, mirror, "13.0", tmp_path / "b")
    assert (result.downloaded, result.cached) == (1, 6)
    assert (tmp_path / "b" / "include" / "cuda_runtime.h").read_bytes() == b"// rt"
    assert_installed(tmp_path / "b", "13.0.1", cache)


@pytest.mark.parametrize("mode", ["clone", "hardlink", "copy"])
def test_warm_installs_come_from_the_unpacked_cache_in_every_link_mode(
        mirror: Path, transport: Transport, cache: Cache, tmp_path: Path, mode: str,
        monkeypatch: pytest.MonkeyPatch) -> None:
    import cudaredist.install.build as inst

    install(transport, cache, mirror, "13.0", tmp_path / "cold")
    for p in cache.archives.glob("*"):  # no archive left: only the unpacked entries can serve
        p.unlink()
    monkeypatch.setattr(inst, "extract", lambda *a, **k: pytest.fail("an archive was extracted"))
    result = install(transport, cache, mirror, "13.0", tmp_path / mode, link_mode=mode)
    assert (result.downloaded, result.cached) == (0, 7)
    assert_installed(tmp_path / mode, "13.0.1", cache)
    nvcc, cached = tmp_path / mode / "bin" / "nvcc", list((cache.root / "unpacked").glob("*/tree/bin/nvcc"))
    assert len(cached) == 1 and (nvcc.stat().st_ino == cached[0].stat().st_ino) == (mode == "hardlink")


def _entries(cache: Cache) -> list[Path]:
    return [p for p in (cache.root / "unpacked").glob("*") if not p.name.startswith(".")]


@pytest.mark.parametrize("platform", [LINUX, WINDOWS])
def test_without_unpacked_copies_the_tree_is_the_same_and_each_file_is_written_once(
        mirror: Path, transport: Transport, tmp_path: Path, platform: str,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """--no-cache-unpacked: the archives are extracted straight into the staging tree (no entry
    built, nothing copied from one), and the tree and its record are those of an install through
    the unpacked cache; the archives are cached as always."""
    import cudaredist.install.build as inst

    through, direct = Cache(tmp_path / "c1"), Cache(tmp_path / "c2")
    install(transport, through, mirror, "13.0", tmp_path / "through", platform=platform)
    monkeypatch.setattr(inst, "materialize", lambda *a, **k: pytest.fail("placed from an unpacked entry"))
    result = install(transport, direct, mirror, "13.0", tmp_path / "direct", platform=platform,
                     cache_unpacked=False)
    assert result.downloaded == len(plan_for(transport, direct, mirror, "13.0", platform=platform).items)
    trees = [snapshot(p, skip=(record_path(p), sbom_path(p)))  # (an SBOM's timestamp and serial are its own)
             for p in (tmp_path / "through", tmp_path / "direct")]
    assert trees[0] == trees[1] and trees[0]
    records = [read_record(p) or {} for p in (tmp_path / "through", tmp_path / "direct")]
    assert records[0]["files"] == records[1]["files"] and records[0]["files"]
    assert_installed(tmp_path / "direct", "13.0.1", direct)
    assert _entries(through) and not _entries(direct) and any(direct.archives.iterdir())
    assert not list((direct.root / "unpacked").glob(".tmp-*"))


def test_without_unpacked_copies_an_entry_made_before_is_still_used(
        mirror: Path, transport: Transport, cache: Cache, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    import cudaredist.install.build as inst

    install(transport, cache, mirror, "13.0", tmp_path / "cold")
    entries = _entries(cache)
    monkeypatch.setattr(inst, "extract", lambda *a, **k: pytest.fail("an archive was extracted"))
    result = install(transport, cache, mirror, "13.0", tmp_path / "warm", cache_unpacked=False)
    assert (result.downloaded, result.cached) == (0, 7) and _entries(cache) == entries
    trees = [snapshot(p, skip=(record_path(p), sbom_path(p))) for p in (tmp_path / "cold", tmp_path / "warm")]
    assert trees[0] == trees[1] and trees[0]


def test_partials_of_a_killed_download_are_removed_by_the_next_fetch(mirror: Path, transport: Transport,
                                                                     cache: Cache, prefix: Path) -> None:
    sha = sha_of(transport, cache, mirror, "13.0", "cuda_nvcc")
    cache.tmp.mkdir(parents=True)
    (cache.tmp / f"{sha[:16]}.k1ll3d.part").write_bytes(b"half an archive")
    (cache.tmp / f"{sha[:16]}.k1ll3d.meta").write_text("{}")
    other = cache.tmp / f"{'f' * 16}.live.part"  # another entry's download: not ours to touch
    other.write_bytes(b"busy")
    install(transport, cache, mirror, "13.0", prefix)
    assert sorted(p.name for p in cache.tmp.iterdir()) == [other.name]


# -- hostile input ------------------------------------------------------------------------------------
def publish(root: Path, label: str, platform: str, members: Members) -> tuple[str, str]:
    """Make ``members`` (full names, top folder included) cuda_nvcc's archive of ``label``."""
    build_mirror(root, label, [MirrorArchive("cuda_nvcc", platform, "13.0.88", {"README": b"x"})])
    name = archive_name("cuda_nvcc", platform, "13.0.88")
    path = root / "cuda_nvcc" / platform / name
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # zipfile warns about the duplicate entry we want
        (make_zip if platform.startswith("windows") else make_tar_xz)(path, members)
    sha, size = digest(path)
    manifest_path = root / f"redistrib_{label}.json"
    manifest = json.loads(manifest_path.read_text())
    manifest["cuda_nvcc"][platform].update({"sha256": sha, "size": str(size)})
    manifest_path.write_text(json.dumps(manifest))
    return name, sha


TOP = "cuda_nvcc-linux-x86_64-13.0.88-archive"
WTOP = "cuda_nvcc-windows-x86_64-13.0.88-archive"
OUT = "@OUT@"  # replaced by an absolute path outside the prefix

HOSTILE = [
    pytest.param(LINUX, {f"{TOP}/../../outside/x.txt": b"evil"}, "..", id="tar-dotdot"),
    pytest.param(LINUX, {f"{TOP}/bin/../../../x.txt": b"evil"}, "..", id="tar-dotdot-inside"),
    pytest.param(LINUX, {f"{OUT}/abs.txt": b"evil"}, "absolute", id="tar-absolute"),
    pytest.param(LINUX, {f"{TOP}/lib/esc": Link("../../../outside")}, "leaves", id="tar-symlink-escapes"),
    pytest.param(LINUX, {f"{TOP}/lib/abs": Link(OUT)}, "absolute", id="tar-symlink-absolute"),
    pytest.param(LINUX, {f"{TOP}/lib/": Dir(), f"{TOP}/lib/up": Link(".."), f"{TOP}/lib/up/x.txt": b"evil"},
                 "symlink", id="tar-member-through-symlink"),
    pytest.param(LINUX, {f"{TOP}/lib/hl": Link("../../outside/x", hard=True)}, "..",
                 id="tar-hardlink-dotdot"),
    pytest.param(LINUX, {f"{TOP}/lib/hl": Link(f"{OUT}/x", hard=True)}, "absolute",
                 id="tar-hardlink-absolute"),
    pytest.param(LINUX, {f"{TOP}/lib/hl": Link(f"{TOP}/lib/never", hard=True)}, "hard link",
                 id="tar-hardlink-to-nothing"),
    pytest.param(LINUX, {f"{TOP}/dev/null": "CHR"}, "device", id="tar-char-device"),
    pytest.param(LINUX, {f"{TOP}/dev/sda": "BLK"}, "device", id="tar-block-device"),
    pytest.param(LINUX, {f"{TOP}/bin/pipe": "FIFO"}, "fifo", id="tar-fifo"),
    pytest.param(WINDOWS, {f"{WTOP}/../x.txt": b"evil"}, "..", id="zip-dotdot"),
    pytest.param(WINDOWS, {"/x.txt": b"evil"}, "absolute", id="zip-absolute"),
    pytest.param(WINDOWS, {"C:/x.txt": b"evil"}, "absolute", id="zip-drive-letter"),
    pytest.param(WINDOWS, {f"{WTOP}/bin/C:/x.txt": b"evil"}, "", id="zip-drive-letter-inside"),
    pytest.param(WINDOWS, {f"{WTOP}\\bin\\nvcc.exe": b"MZ"}, "backslash", id="zip-backslashes"),
    # (names differing only in case are the target's to judge: tests/test_case_targets.py)
    pytest.param(WINDOWS, {f"{WTOP}/bin/nvcc.exe": b"MZ", f"{WTOP}/./bin/nvcc.exe": b"MZ2"}, "twice",
                 id="zip-duplicate-name"),
    pytest.param(WINDOWS, {f"{WTOP}/bin/x": Link("../../outside")}, "symlink", id="zip-symlink"),
]


def _materialise(members: dict[str, object], out: Path) -> Members:
    specials = {"CHR": tarfile.CHRTYPE, "BLK": tarfile.BLKTYPE, "FIFO": tarfile.FIFOTYPE}
    from tests.archives import Special

    result: Members = {}
    where = out.as_posix()  # an absolute path as an archive spells it (on Windows too)
    for name, spec in members.items():
        name = name.replace(OUT, where)
        if isinstance(spec, Link):
            spec = Link(spec.target.replace(OUT, where), spec.hard)
        if isinstance(spec, str):
            spec = Special(specials[spec])
        result[name] = spec  # type: ignore[assignment]
    return result


@pytest.fixture
def hostile_world(tmp_path: Path, transport: Transport, cache: Cache) -> tuple[Path, Path, Path]:
    """(mirror, prefix, world): 12.9.1 (cudart) installed in world/inst/cuda; world/outside exists."""
    mirror = tmp_path / "mirror"
    build_mirror(mirror, "12.9.1", [a for a in toolkit(LINUX) if a.component == "cuda_cudart"])
    world = tmp_path / "world"
    (world / "outside").mkdir(parents=True)
    prefix = world / "inst" / "cuda"
    install(transport, cache, mirror, "12.9", prefix, components=("cuda_cudart",))
    return mirror, prefix, world


# straight into the staging tree (--no-cache-unpacked), the same extraction: one case of each kind
_DIRECT = {"tar-dotdot", "tar-symlink-escapes", "tar-member-through-symlink", "tar-hardlink-to-nothing",
           "tar-fifo", "zip-dotdot", "zip-duplicate-name", "zip-symlink"}


@pytest.mark.parametrize(("platform", "members", "says", "cache_unpacked"), [
    *(pytest.param(*p.values, True, id=p.id) for p in HOSTILE),
    *(pytest.param(*p.values, False, id=f"{p.id}-direct") for p in HOSTILE if p.id in _DIRECT)])
def test_hostile_archive_is_refused_and_nothing_is_written(
        hostile_world: tuple[Path, Path, Path], transport: Transport, cache: Cache, platform: str,
        members: dict[str, object], says: str, cache_unpacked: bool) -> None:
    mirror, prefix, world = hostile_world
    top = WTOP if platform == WINDOWS else TOP
    good: Members = {f"{top}/": Dir(), f"{top}/bin/": Dir(), f"{top}/bin/ok": b"fine",
                     f"{top}/LICENSE": b"eula"}
    name, sha = publish(mirror, "13.0.1", platform, good | _materialise(members, world / "outside"))
    before_world = snapshot(world)
    before = snapshot(prefix)
    with pytest.raises(UnsafeArchiveError) as exc:
        install(transport, cache, mirror, "13.0", prefix, platform=platform, components=("cuda_nvcc",),
                cache_unpacked=cache_unpacked)
    assert exc.value.archive == name
    assert says in str(exc.value)
    assert_intact(prefix, before, cache, sha)
    assert snapshot(world) == before_world  # nothing beside the prefix, nothing outside it


def test_setuid_and_world_writable_bits_are_dropped(hostile_world: tuple[Path, Path, Path],
                                                    transport: Transport, cache: Cache) -> None:
    mirror, prefix, _ = hostile_world
    publish(mirror, "13.0.1", LINUX, {f"{TOP}/": Dir(), f"{TOP}/bin/": Dir(),
                                      f"{TOP}/bin/nvcc": Exe(b"#!/bin/sh\n", 0o6777),
                                      f"{TOP}/bin/data": Exe(b"x", 0o1666)})
    install(transport, cache, mirror, "13.0", prefix, components=("cuda_nvcc",))
    assert_mode(prefix / "bin" / "nvcc", 0o755)
    assert_mode(prefix / "bin" / "data", 0o644)
    assert_installed(prefix, "13.0.1", cache)


@pytest.mark.parametrize(("field", "value", "what"), [
    pytest.param("sha256", "ab" * 32, "sha256", id="wrong-sha256"),
    pytest.param("size", "+1", "size", id="size-too-large"),
    pytest.param("size", "-1", "size", id="size-too-small"),
])
@pytest.mark.parametrize("over", ["dir", "http"])
def test_manifest_that_lies_about_an_archive_is_refused(
        tmp_path: Path, transport: Transport, cache: Cache, serve: Callable[[Path], str], field: str,
        value: str, what: str, over: str) -> None:
    mirror = tmp_path / "mirror"
    build_mirror(mirror, "12.9.1", [a for a in toolkit(LINUX) if a.component == "cuda_cudart"])
    build_mirror(mirror, "13.0.1", [a for a in toolkit(LINUX) if a.component == "cuda_nvcc"])
    manifest_path = mirror / "redistrib_13.0.1.json"
    manifest = json.loads(manifest_path.read_text())
    entry = manifest["cuda_nvcc"][LINUX]
    entry[field] = value if field == "sha256" else str(int(entry["size"]) + int(value))
    manifest_path.write_text(json.dumps(manifest))
    base = serve(mirror) if over == "http" else normalize_base(str(mirror))
    prefix = tmp_path / "inst" / "cuda"

    def run(train: str, component: str) -> None:
        plan = resolve_plan(Index(transport, cache), train, bases=[base], platform=LINUX, profile=None,
                            components=(component,))
        Installer(transport, cache, lock_timeout=10).install(plan, prefix)

    run("12.9", "cuda_cudart")
    before = snapshot(prefix)
    with pytest.raises(IntegrityError) as exc:
        run("13.0", "cuda_nvcc")
    assert exc.value.what == what
    assert "cuda_nvcc-linux-x86_64-13.0.88-archive.tar.xz" in str(exc.value)
    assert_intact(prefix, before, cache, entry["sha256"])
    assert read_record(prefix)["plan"]["release"] == "12.9.1"  # type: ignore[index]


# -- version.json -------------------------------------------------------------------------------------
def test_version_json_is_nvidias_format_and_an_installed_file(mirror: Path, transport: Transport,
                                                               cache: Cache, prefix: Path) -> None:
    """A runtime-only tree (no nvcc to ask) carries its version too; verify and uninstall treat it
    like any other file of the tree."""
    install(transport, cache, mirror, "13.0", prefix, components=["cuda_cudart", "cuda_crt"])
    text = (prefix / "version.json").read_text()
    body = json.loads(text)
    assert body == {"cuda": {"name": "CUDA SDK", "version": "13.0.1"},
                    "cuda_crt": {"name": "CUDA CRT", "version": "13.0.88"},
                    "cuda_cudart": {"name": "CUDA Runtime (cudart)", "version": "13.0.96"}}
    assert text == json.dumps(body, indent=3) + "\n"  # NVIDIA's installer: 3-space indent
    assert_installed(prefix, "13.0.1", cache)
    from cudaredist.prefixes import uninstall, verify

    (prefix / "version.json").write_text(text.replace("13.0.1", "13.9.9"))
    report = verify(prefix)
    assert report.changed == ["version.json"] and not report.missing
    (prefix / "version.json").unlink()
    assert verify(prefix).missing == ["version.json"]
    install(transport, cache, mirror, "13.0", prefix, components=["cuda_cudart", "cuda_crt"], reinstall=True)
    assert verify(prefix).ok
    uninstall(prefix)
    assert not (prefix / "version.json").exists()


# -- Windows trees --------------------------------------------------------------------------------------
@pytest.mark.parametrize(("platform", "arch"), [pytest.param(WINDOWS, "x64", id="x64"),
                                                pytest.param("windows-arm64", "arm64", id="arm64")])
def test_windows_tree_has_the_msbuild_files_and_its_arch_libraries(
        tmp_path: Path, transport: Transport, cache: Cache, prefix: Path, platform: str, arch: str) -> None:
    """NVIDIA's MSBuild files under extras/ (where CMake's -T cuda=<tree> looks) with the nvcc profile,
    and the GNU import library of cudart beside its .lib in lib/<arch> (bin/arm64, lib/arm64 on Arm)."""
    from cudaredist.tree.implib import MACHINE_AMD64, MACHINE_ARM64, import_library, read_exports

    mirror = tmp_path / "winmirror"
    build_mirror(mirror, "13.4.1", toolkit(platform, "13.4.1"))
    install(transport, cache, mirror, "13.4", prefix, platform=platform)
    assert_installed(prefix, "13.4.1", cache)
    ext = prefix / "extras" / "visual_studio_integration" / "MSBuildExtensions"
    assert sorted(p.name for p in ext.iterdir()) == [
        "CUDA 13.4.Version.props", "CUDA 13.4.props", "CUDA 13.4.targets", "CUDA 13.4.xml",
        "Nvda.Build.CudaTasks.v13.4.dll"]
    assert not (prefix / "visual_studio_integration").exists()
    assert (prefix / "licenses" / "visual_studio_integration" / "LICENSE").is_file()
    files = {f["path"]: f for f in read_record(prefix)["files"]}  # type: ignore[index]
    assert files["extras/visual_studio_integration/MSBuildExtensions/CUDA 13.4.props"][
        "component"] == "visual_studio_integration"
    dll = read_exports((prefix / "bin" / arch / "cudart64_13.dll").read_bytes())
    assert dll.machine == (MACHINE_ARM64 if arch == "arm64" else MACHINE_AMD64)
    assert (prefix / "lib" / arch / "libcudart.dll.a").read_bytes() == import_library(dll)
    assert files[f"lib/{arch}/libcudart.dll.a"]["component"] == "cuda_cudart"
    assert sorted(p.name for p in (prefix / "lib").iterdir()) == [arch]
    body = json.loads((prefix / "version.json").read_text())
    assert body["visual_studio_integration"] == {"name": "CUDA Visual Studio Integration",
                                                 "version": "13.4.85"}


def test_a_release_without_msbuild_files_installs_with_a_note(tmp_path: Path, transport: Transport,
                                                              cache: Cache, prefix: Path) -> None:
    """A mirror built from NVIDIA's wheels has no visual_studio_integration: the tree still installs,
    and the plan says what is missing and what it means."""
    mirror = tmp_path / "wheelmirror"
    build_mirror(mirror, "13.4.1", [a for a in toolkit(WINDOWS, "13.4.1")
                                    if a.component != "visual_studio_integration"])
    plan = plan_for(transport, cache, mirror, "13.4", platform=WINDOWS)
    assert "visual_studio_integration" not in plan.components
    assert len(plan.notes) == 1
    assert plan.notes[0].startswith("CUDA 13.4.1 has no visual_studio_integration for windows-x86_64: "
                                    "CMake's Visual Studio generator (-T cuda=<tree>) finds no CUDA toolset")
    install(transport, cache, mirror, "13.4", prefix, platform=WINDOWS)
    assert not (prefix / "extras").exists()
