"""Local disk faults end to end: a full, read-only or forbidden disk is the user's to fix, not the
archive's. The error says what, where and what to do; verified cache entries stay; the prefix
stays as it was. Faults are injected at the tree's write call, and made real with small tmpfs
mounts (a disk that really fills up)."""

from __future__ import annotations

import errno
import os
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from cudaredist.cache.store import Cache
from cudaredist.errors import LocalDiskError
from cudaredist.fetch.transport import Transport
from cudaredist.install import Installer
from cudaredist.sources.nvidia.index import Index, normalize_base
from tests.archives import NVCC_12, Exe, MirrorArchive, build_mirror, resolve_plan, toolkit
from tests.hosts import assert_mode, fd_paths
from tests.invariants import assert_installed, cache_problems, leftovers, snapshot
from tests.mounts import read_only_view, tmpfs

LINUX = "linux-x86_64"


@pytest.fixture
def transport() -> Iterator[Transport]:
    t = Transport()
    yield t
    t.close()


def _mirror(root: Path, extra: dict[str, Any] | None = None) -> Path:
    """12.9.1 and 13.0.1 of the small toolkit; ``extra`` members go into 13.0.1's cuda_nvcc."""
    old = NVCC_12
    build_mirror(root, "12.9.1", [MirrorArchive(a.component, a.platform, a.version.replace("13.0.", "12.9."),
                                                a.members)
                                  for a in toolkit(LINUX) if a.component in old])
    new = toolkit(LINUX)
    new[0].members = {**new[0].members, **(extra or {})}
    build_mirror(root, "13.0.1", new)
    return root


def _install(transport: Transport, cache: Cache, base: str, train: str, prefix: Path) -> None:
    plan = resolve_plan(Index(transport, cache), train, bases=[normalize_base(base)], platform=LINUX,
                        profile="nvcc")
    Installer(transport, cache, jobs=4, lock_timeout=10).install(plan, prefix)


def _entries(cache: Cache) -> set[str]:
    return {e.sha256 for e in cache.entries()}


def _plan_shas(transport: Transport, cache: Cache, base: str, train: str) -> set[str]:
    plan = resolve_plan(Index(transport, cache), train, bases=[normalize_base(base)], platform=LINUX,
                        profile="nvcc")
    return {i.archive.sha256 for i in plan.items}


# -- injected at the one write call of the tree ------------------------------------------------------
@pytest.mark.parametrize(("code", "says"), [
    pytest.param(errno.ENOSPC, "no space left on the device holding", id="ENOSPC"),
    pytest.param(errno.EACCES, "a --prefix you own", id="EACCES"),
    pytest.param(errno.EROFS, "read-only filesystem", id="EROFS"),
    pytest.param(errno.ENAMETOOLONG, "shorter --prefix", id="ENAMETOOLONG"),
])
def test_disk_error_while_extracting_keeps_cache_and_prefix(tmp_path: Path, transport: Transport,
                                                            monkeypatch: pytest.MonkeyPatch, code: int,
                                                            says: str) -> None:
    base = str(_mirror(tmp_path / "mirror", {"lib/big": os.urandom(200_000)}))
    cache, prefix = Cache(tmp_path / "cache"), tmp_path / "world" / "cuda"
    _install(transport, cache, base, "13.0", tmp_path / "elsewhere" / "cuda")  # every archive cached
    _install(transport, cache, base, "12.9", prefix)
    before = snapshot(prefix)
    import cudaredist.tree.staging as staging_mod

    real_write, real_copy = os.write, getattr(os, "copy_file_range", None)
    path_of = fd_paths(monkeypatch)

    def refuse(fd: int) -> None:
        target = path_of(fd)
        if ".cuda.cudaredist-stage-" in target and target.endswith("/lib/big"):
            raise OSError(code, os.strerror(code))

    def write(fd: int, data: Any) -> int:
        refuse(fd)
        return real_write(fd, data)

    def copy_file_range(src: int, dst: int, count: int, *args: Any) -> int:
        refuse(dst)
        assert real_copy is not None
        return real_copy(src, dst, count, *args)

    # the tree's writes: extraction (os.write) and placement from the unpacked cache (in the kernel)
    monkeypatch.setattr(staging_mod.os, "write", write)
    if real_copy is not None:  # Linux; elsewhere placement copies with os.write
        monkeypatch.setattr(staging_mod.os, "copy_file_range", copy_file_range)
    with pytest.raises(LocalDiskError) as info:
        _install(transport, cache, base, "13.0", prefix)
    monkeypatch.undo()
    err = info.value
    assert err.errno == code and says in str(err)
    assert err.where == str(prefix.parent)
    assert "corrupt" not in str(err)
    assert snapshot(prefix) == before and leftovers(prefix) == []
    # the cached archives verified, so none is dropped, the one being extracted included
    assert _plan_shas(transport, cache, base, "13.0") <= _entries(cache)
    assert cache_problems(cache) == []


# -- real disks that fill up -----------------------------------------------------------------------------
def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("CUDA_PATH", "CUDA_HOME")}
    return subprocess.run([sys.executable, "-m", "cudaredist", *args], capture_output=True, text=True,
                          timeout=120, env=env, check=False)


def test_real_enospc_while_extracting(tmp_path: Path) -> None:
    """2 MB of disk; the archives are tiny (zeros compress) but unpack to 6 MB."""
    base = str(_mirror(tmp_path / "mirror", {"lib/zeros": bytes(6 << 20)}))
    cache_dir = tmp_path / "cache"  # another filesystem: the downloads fit
    warm = _cli("install", "13.0", "--base-url", base, "--prefix", str(tmp_path / "warm"), "--cache-dir",
                str(cache_dir), "--quiet", "--platform", LINUX)
    assert warm.returncode == 0, warm.stderr
    with tmpfs(tmp_path / "disk", "2m") as disk:
        p = _cli("install", "13.0", "--base-url", base, "--prefix", str(disk / "cuda"), "--cache-dir",
                 str(cache_dir), "--quiet", "--platform", LINUX)
        assert p.returncode == 1, p.stderr
        assert "Traceback" not in p.stderr
        assert p.stderr.startswith("error: no space left on the device holding ")
        assert str(disk) in p.stderr and "the tree needs more than" in p.stderr
        assert len(p.stderr.strip().splitlines()) == 1
        assert "corrupt" not in p.stderr
        assert not (disk / "cuda").exists()
        assert [n.name for n in disk.iterdir() if "cudaredist-stage" in n.name] == []
    cache = Cache(cache_dir)
    with Transport() as t:
        assert _plan_shas(t, cache, base, "13.0") <= _entries(cache)  # none dropped, and they verify:
    assert cache_problems(cache) == []


def test_free_space_is_checked_before_downloading(tmp_path: Path) -> None:
    """1 MB of disk and 1.5 MB of (incompressible) archives: refused before a byte is fetched."""
    base = str(_mirror(tmp_path / "mirror", {"lib/noise": os.urandom(1_500_000)}))
    with tmpfs(tmp_path / "disk", "1m") as disk:
        p = _cli("install", "13.0", "--base-url", base, "--prefix", str(disk / "cuda"), "--cache-dir",
                 str(tmp_path / "cache"), "--quiet", "--platform", LINUX)
        assert p.returncode == 1, p.stderr
        assert "Traceback" not in p.stderr
        assert p.stderr.startswith(f"error: not enough space on the device holding {disk}:"), p.stderr
        assert "nothing was downloaded" in p.stderr
        assert not (disk / "cuda").exists()
    assert _entries(Cache(tmp_path / "cache")) == set()


def test_the_cache_disk_is_checked_too_when_it_is_not_the_prefix_s(tmp_path: Path) -> None:
    """The prefix has room; the cache, on a 1 MB disk of its own, cannot take 1.5 MB of downloads:
    refused before a byte is fetched, naming the cache's disk and --cache-dir."""
    base = str(_mirror(tmp_path / "mirror", {"lib/noise": os.urandom(1_500_000)}))
    with tmpfs(tmp_path / "disk", "1m") as disk:
        p = _cli("install", "13.0", "--base-url", base, "--prefix", str(tmp_path / "cuda"), "--cache-dir",
                 str(disk / "cache"), "--quiet", "--platform", LINUX)
        assert p.returncode == 1, p.stderr
        assert "Traceback" not in p.stderr
        cache = disk / "cache"
        assert p.stderr.startswith(f"error: not enough space on the device holding {cache}:"), p.stderr
        assert "the download of 7 archives into the cache needs at least 1." in p.stderr
        assert "choose a --cache-dir on another filesystem; nothing was downloaded" in p.stderr
        assert not (tmp_path / "cuda").exists()
        assert _entries(Cache(disk / "cache")) == set()


@pytest.mark.parametrize("via", ["http", "file"])
def test_real_enospc_while_downloading_into_the_cache(tmp_path: Path, transport: Transport, serve: Any,
                                                      via: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The disk fills during the download (the early check of the cache's disk left out: it would
    refuse these 600 kB on a 400 kB disk before the first byte, as the test above shows)."""
    from cudaredist.install import transaction

    mirror = _mirror(tmp_path / "mirror", {"bin/ptxas": Exe(os.urandom(600_000))})
    base = serve(mirror) if via == "http" else str(mirror)
    prefix = tmp_path / "world" / "cuda"
    with tmpfs(tmp_path / "cachedisk", "400k") as disk:
        cache = Cache(disk / "cache")
        real = transaction.check_free_space
        monkeypatch.setattr(transaction, "check_free_space", lambda directory, *a, **k: None
                            if directory == cache.root else real(directory, *a, **k))
        _install(transport, cache, base, "12.9", prefix)
        before = snapshot(prefix)
        with pytest.raises(LocalDiskError) as info:
            _install(transport, cache, base, "13.0", prefix)
        err = info.value
        assert err.errno == errno.ENOSPC
        assert err.where == str(cache.root)
        assert str(err).startswith(f"no space left on the device holding {cache.root}")
        # the download, or its extraction into the unpacked cache (the same disk) filled it first
        assert "--cache-dir" in str(err)
        assert "partial download was removed" in str(err) or "partial unpacked copy was removed" in str(err)
        assert not list((cache.root / "unpacked").glob(".tmp-*"))
        assert list(cache.tmp.iterdir()) == []  # the partial file is gone
        assert snapshot(prefix) == before and leftovers(prefix) == []
        assert cache_problems(cache) == []


# -- 11. no process-wide state from threads ----------------------------------------------------------------
def test_no_umask_calls_while_installing_or_mirroring(tmp_path: Path, transport: Transport,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    from cudaredist.publish.mirrorfiles import world_readable

    calls: list[str] = []
    real: Callable[[int], int] = os.umask

    def umask(mask: int) -> int:
        calls.append(threading.current_thread().name)
        return real(mask)

    monkeypatch.setattr(os, "umask", umask)
    base = str(_mirror(tmp_path / "mirror"))
    prefix = tmp_path / "world" / "cuda"
    _install(transport, Cache(tmp_path / "cache"), base, "13.0", prefix)
    assert_installed(prefix, "13.0.1")
    made = tmp_path / "f"
    made.write_bytes(b"x")
    os.chmod(made, 0o600)
    worker = threading.Thread(target=world_readable, args=(made,), name="mirror-worker")
    worker.start()
    worker.join()
    assert calls == []
    mask = real(0o022)
    real(mask)
    assert_mode(made, 0o644 & ~mask)
    assert_mode(prefix, 0o777 & ~mask)  # the staging dir's 0700 was widened


# -- a lock file that cannot be made ------------------------------------------------------------------------
def _refuse_creating(mp: pytest.MonkeyPatch, lock: Path) -> None:
    """Creating ``lock`` fails with ENOENT though its folder exists, as in /proc: filelock reads that as a
    holder's race and keeps trying."""
    real = os.open

    def refuse(path: Any, flags: int, *a: Any, **k: Any) -> int:
        if os.fspath(path) == str(lock) and flags & os.O_CREAT:
            raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), str(path))
        return real(path, flags, *a, **k)
    mp.setattr(os, "open", refuse)


@pytest.mark.parametrize("where", ["injected", "proc"])
def test_a_lock_file_that_cannot_be_made_fails_at_once_with_the_disk_s_reason(
        tmp_path: Path, mirror: Path, monkeypatch: pytest.MonkeyPatch, where: str) -> None:
    """Not "busy" after the whole --lock-timeout: nobody holds a lock whose file is not there."""
    import time

    from typer.testing import CliRunner

    from cudaredist.cli import app

    if where == "proc":
        if sys.platform != "linux":  # Wine maps /proc to Z:\\proc, a folder where files can be made
            pytest.skip("no procfs on this host (Linux only)")
        prefix = Path("/proc/x")
    else:
        if os.name == "nt":
            pytest.skip("POSIX: the injected ENOENT is filelock's Unix lock (os.open); Windows' lock "
                        "opens the file its own way, and the Linux stage runs this case")
        prefix = tmp_path / "cuda"
        _refuse_creating(monkeypatch, tmp_path / ".cuda.cudaredist.lock")
    started = time.monotonic()
    r = CliRunner().invoke(app, ["install", "13.0", "--prefix", str(prefix), "--base-url", str(mirror),
                                 "--platform", LINUX, "--lock-timeout", "60", "-q"])
    assert time.monotonic() - started < 20, r.stderr
    assert r.exit_code == 1, r.stderr
    assert r.stderr == (f"error: cannot create the lock file of the prefix in {prefix.parent}: No such file "
                        "or directory; check that it exists, or choose another --prefix.\n")


# -- a read-only cache -------------------------------------------------------------------------------------
def test_a_read_only_cache_serves_offline_and_warm_installs(tmp_path: Path, serve: Any) -> None:
    """A cache others filled, mounted read-only: --offline and a warm install (index pages within the
    TTL) read it as it is, with no lock, marker or temporary file written; the trees verify."""
    base = serve(_mirror(tmp_path / "mirror"))
    filled = tmp_path / "filled"
    warm = _cli("install", "13.0", "--base-url", base, "--prefix", str(tmp_path / "first"), "--cache-dir",
                str(filled), "--quiet", "--platform", LINUX)
    assert warm.returncode == 0, warm.stderr
    before = snapshot(filled)
    with read_only_view(filled, tmp_path / "ro") as ro:
        for name, extra in (("offline", ["--offline"]), ("warm", [])):
            prefix = tmp_path / name
            p = _cli("install", "13.0", "--base-url", base, "--prefix", str(prefix), "--cache-dir", str(ro),
                     "--quiet", "--platform", LINUX, *extra)
            assert p.returncode == 0, (name, p.stderr)
            assert _cli("verify", "--prefix", str(prefix)).returncode == 0
            assert snapshot(ro) == before
