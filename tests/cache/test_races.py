"""`cache clear` and `prune` racing a running install, with the interleaving forced: the install
falls back to the verified archive or a new download, never fails; maintenance leaves no stale
lock files behind."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import filelock
import pytest

from cudaredist.cache import maintenance
from cudaredist.cache.store import Cache
from cudaredist.cache.unpacked import UnpackedCache
from cudaredist.fetch.fetcher import Fetcher
from cudaredist.fetch.transport import Transport
from cudaredist.install import Installer
from cudaredist.plan import Plan, PlannedArchive
from cudaredist.sources.nvidia.index import Index, normalize_base
from tests.archives import resolve_plan
from tests.hosts import posix_only
from tests.invariants import assert_installed


@pytest.fixture
def transport() -> Iterator[Transport]:
    t = Transport()
    yield t
    t.close()


def _plan(transport: Transport, cache: Cache, mirror: Path) -> Plan:
    return resolve_plan(Index(transport, cache), "13.0", bases=[normalize_base(str(mirror))],
                        platform="linux-x86_64", profile="nvcc")


def _install(transport: Transport, cache: Cache, plan: Plan, prefix: Path) -> None:
    Installer(transport, cache, jobs=4, lock_timeout=10).install(plan, prefix)


def _another_process(root: Path, how: Callable[[Cache], object]) -> Callable[[], None]:
    """What a `cudaredist cache clear` (or prune) in another process does to the cache at ``root``."""
    return lambda: how(Cache(root)) and None


@pytest.mark.parametrize("maintain", [
    pytest.param(maintenance.clear, id="clear"),
    pytest.param(lambda c: maintenance.prune(c, older_than_days=0), id="prune"),
])
def test_an_unpacked_entry_removed_before_its_lock_is_taken(
        mirror: Path, transport: Transport, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        maintain: Callable[[Cache], object]) -> None:
    """A warm install found the entries, then a clear removed them (and their archives) before it
    locked the first one: that archive is downloaded and unpacked again."""
    cache = Cache(tmp_path / "cache")
    plan = _plan(transport, cache, mirror)
    _install(transport, cache, plan, tmp_path / "first")
    clear = _another_process(cache.root, maintain)
    real_lock = Cache.lock
    raced: list[str] = []

    @contextlib.contextmanager
    def lock(self: Cache, name: str, **kw: Any) -> Iterator[None]:
        if name.startswith("unpacked-") and not raced:
            raced.append(name)
            clear()  # between the lookup (no lock) and taking the entry's lock
            key = name.removeprefix("unpacked-")
            assert not (cache.root / "unpacked" / key).exists(), "the clear removed this entry"
        with real_lock(self, name, **kw):
            yield

    monkeypatch.setattr(Cache, "lock", lock)
    _install(transport, cache, plan, tmp_path / "second")
    assert raced
    assert_installed(tmp_path / "second", "13.0.1", cache)


@posix_only("a clear deleting archives that other threads of the install are reading (Windows refuses "
            "to delete an open file: the clear says which one is held instead)")
def test_a_cached_archive_removed_between_its_fetch_and_its_read(
        mirror: Path, transport: Transport, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An archive read whole (a wheel, or any archive on a Windows host) is cached, then a clear
    removes it before the extraction opens it: it is fetched again."""
    cache = Cache(tmp_path / "cache")
    plan = _plan(transport, cache, mirror)
    monkeypatch.setattr("cudaredist.install.build.is_streamable", lambda name: False)
    clear = _another_process(cache.root, maintenance.clear)
    real_fetch = Fetcher.fetch
    removed: list[str] = []

    def fetch(self: Fetcher, item: PlannedArchive, follow: Any = None) -> tuple[Path, bool]:
        path, cached = real_fetch(self, item, follow)
        if item.component == "cuda_nvcc" and not removed:
            removed.append(item.archive.sha256)
            clear()
            assert not path.exists(), "the clear removed the archive"
        return path, cached

    monkeypatch.setattr(Fetcher, "fetch", fetch)
    _install(transport, cache, plan, tmp_path / "cuda")
    assert removed
    assert_installed(tmp_path / "cuda", "13.0.1", cache)
    assert cache.lookup(removed[0], next(i.archive.size for i in plan.items
                                         if i.archive.sha256 == removed[0])) is not None


def test_clear_and_prune_remove_lock_files_no_one_holds(mirror: Path, transport: Transport,
                                                        tmp_path: Path) -> None:
    cache = Cache(tmp_path / "cache")
    plan = _plan(transport, cache, mirror)
    _install(transport, cache, plan, tmp_path / "cuda")
    locks = cache.root / "locks"
    for k in range(3):  # what killed runs leave (filelock keeps a POSIX lock file after release)
        (locks / f"{k:064x}.lock").write_bytes(b"")
    held = filelock.FileLock(str(locks / f"{plan.items[0].archive.sha256}.lock"))
    with held:
        maintenance.prune(cache, older_than_days=365)
        assert [p.name for p in locks.glob("*.lock")] == [f"{plan.items[0].archive.sha256}.lock"]
    maintenance.clear(cache)
    assert list(locks.glob("*.lock")) == []
    # a lock taken after its file was removed works as before
    _install(transport, cache, plan, tmp_path / "again")
    assert_installed(tmp_path / "again", "13.0.1", cache)


@pytest.mark.parametrize("streamed", [True, False], ids=["read-along", "read-whole"])
def test_a_cached_archive_removed_between_its_lookup_and_its_hash(
        mirror: Path, transport: Transport, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        streamed: bool) -> None:
    """The fetcher found the archive in the cache, then a clear removed it right before the fetcher
    opened it to hash it (or to feed an extraction reading along): it is downloaded instead."""
    import cudaredist.fetch.fetcher as fetcher_mod
    from cudaredist.fetch.ranges import GrowingFile

    cache = Cache(tmp_path / "cache")
    plan = _plan(transport, cache, mirror)
    Installer(transport, cache, jobs=4).prefetch([plan])  # every archive cached, none unpacked
    clear = _another_process(cache.root, maintenance.clear)
    raced: list[Path] = []

    def first_clears(path: Path) -> None:
        if not raced and path.name == plan.items[0].archive.sha256:
            raced.append(path)
            clear()
            assert not path.exists(), "the clear removed the archive"

    if streamed:
        if os.name == "nt":
            pytest.skip("a Windows host extracts no archive while it downloads (no read-along there)")
        real_attach = GrowingFile.attach

        def attach(self: GrowingFile, path: Path) -> None:
            first_clears(path)
            real_attach(self, path)
        monkeypatch.setattr(GrowingFile, "attach", attach)
    else:
        monkeypatch.setattr("cudaredist.install.build.is_streamable", lambda name: False)

        def opening(path: Path, *args: Any) -> Any:
            first_clears(Path(path))
            return open(path, *args)
        monkeypatch.setattr(fetcher_mod, "open", opening, raising=False)  # the fetcher's only
    _install(transport, cache, plan, tmp_path / "cuda")
    assert raced
    assert_installed(tmp_path / "cuda", "13.0.1", cache)


@pytest.mark.parametrize("clean", [maintenance.clear, maintenance.prune], ids=["clear", "prune"])
def test_a_build_folder_renamed_away_while_the_cache_is_cleaned(
        clean: Callable[[Cache], Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A running build renames its .tmp- folder into place between the listing and the look at it:
    the clean goes on (it was never a leftover), not 'cannot clear the cache: No such file'."""
    cache = Cache(tmp_path / "c")
    cache.prepare()
    gone = UnpackedCache(cache.root).root / ".tmp-renamed-into-place"
    monkeypatch.setattr(UnpackedCache, "leftovers", lambda self: iter([gone]))
    clean(cache)
    assert not gone.exists()
