"""Cache maintenance: list, prune and clear archives and unpacked entries without breaking a running
install (an entry is removed only while holding its lock) or touching what cudaredist did not write."""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

from cudaredist import fsops
from cudaredist.cache.store import ARCHIVE_NAME, INDEX_KEY, OURS, PARTIAL_DAYS, PARTIAL_NAME, Cache, evict
from cudaredist.cache.unpacked import UnpackedCache, UnpackedEntry
from cudaredist.errors import CacheError, UsageError
from cudaredist.localfs import CACHE_OPTION, local_error


def parse_size(text: str) -> int:
    """``5G``, ``800M``, ``1.5GB``, ``4096`` -> bytes (decimal units, as disk vendors and df -H count)."""
    m = re.fullmatch(r"\s*([0-9]+(?:\.[0-9]+)?)\s*([kKmMgGtT]?)[bB]?\s*", text)
    if m is None:
        raise UsageError(f"--max-size {text!r} is not a size; write it like 5G, 800M or 1048576")
    return int(float(m.group(1)) * 1000 ** " KMGT".index((m.group(2) or " ").upper()))


@dataclass
class Cleaned:
    """What a ``clear`` or ``prune`` did: files and bytes removed, entries skipped as in use by a
    running cudaredist, and top-level names left alone because cudaredist did not write them."""

    files: int = 0
    freed: int = 0
    busy: int = 0
    foreign: tuple[str, ...] = ()

    def removed(self, size: int = 0) -> None:
        self.files, self.freed = self.files + 1, self.freed + size


def unpacked_entries(cache: Cache) -> list[UnpackedEntry]:
    return sorted(UnpackedCache(cache.root).entries(), key=lambda e: e.last_used)


def prune(cache: Cache, *, older_than_days: float = 30.0, max_size: int | None = None) -> Cleaned:
    """Drop partial downloads of no running install (older than an hour), archives and unpacked
    entries unused for ``older_than_days``, then the least recently used until both kinds
    together take at most ``max_size`` bytes."""
    return _clean(cache, "prune", archive_cutoff=time.time() - older_than_days * 86400,
                       partial_cutoff=time.time() - 3600, index=False, max_size=max_size)

def clear(cache: Cache) -> Cleaned:
    """Delete every entry (archives, unpacked entries, partial downloads, index pages) no running
    install holds."""
    return _clean(cache, "clear", archive_cutoff=float("inf"), partial_cutoff=float("inf"), index=True)

def _drop(cache: Cache, lock: str, entry: Path) -> bool:
    """Evict an archive or unpacked ``entry`` unless an install holds its ``lock`` (fetching, making or
    placing it) or has it open."""
    with cache.try_lock(lock) as got:
        return got and evict(entry)


def _drop_lock_files(cache: Cache) -> None:
    """Remove the lock files no process holds (one is left behind by every entry ever written).

    Each is unlinked while held: a process that opened it before and waits for it finds its inode
    gone once it gets the lock and takes the new file instead (filelock >= 4 checks the link count)."""
    locks = cache.root / "locks"
    for p in sorted(locks.glob("*.lock")) if locks.is_dir() else []:
        if p.is_symlink() or not p.is_file():
            continue
        with cache.try_lock(p.name[:-len(".lock")]) as got:
            if got:
                with contextlib.suppress(OSError):  # Windows: another process has it open
                    p.unlink()


def _clean(cache: Cache, doing: str, *, archive_cutoff: float, partial_cutoff: float, index: bool,
           max_size: int | None = None) -> Cleaned:
    done = Cleaned()  # each sweep adds to it
    if not cache.maintainable(doing):
        return done
    try:
        _least_used(cache, done, archive_cutoff, max_size)
        _leftovers(cache, done)
        _sidecars(cache)
        _partials(cache, done, partial_cutoff)
        if index:
            _index_pages(cache, done)
        _drop_lock_files(cache)  # bookkeeping, not counted as what was freed
        done.foreign = tuple(sorted(n for n in os.listdir(cache.root) if n not in OURS))
    except OSError as exc:
        raise local_error(exc, doing=f"{doing} the cache in", path=exc.filename or cache.root,
                          option=CACHE_OPTION, cls=CacheError) from exc
    return done


def _least_used(cache: Cache, done: Cleaned, cutoff: float, max_size: int | None) -> None:
    """Archives and unpacked entries, least recently used first: those unused since ``cutoff`` go,
    then more until both kinds together fit in ``max_size``."""
    drops = sorted([(e.last_used, e.size, e.sha256, e.path) for e in cache.entries()] + [
        (u.last_used, u.size, f"unpacked-{u.key}", u.path) for u in UnpackedCache(cache.root).entries()])
    total = sum(size for _t, size, _l, _p in drops)
    for used, size, lock, entry in drops:
        if used >= cutoff and (max_size is None or total <= max_size):
            break
        if _drop(cache, lock, entry):
            total -= size
            done.removed(size)
        else:
            done.busy += 1


def _leftovers(cache: Cache, done: Cleaned) -> None:
    """What a killed build or removal left (a running build is younger than an hour, and may rename
    its folder into place between the listing and this look: then it is not ours)."""
    for d in UnpackedCache(cache.root).leftovers():
        with contextlib.suppress(FileNotFoundError):
            if d.stat().st_mtime < time.time() - 3600:
                fsops.rmtree(d)
                done.removed()


def _sidecars(cache: Cache) -> None:
    """A .json without its archive (a kill between the two renames of a commit; not counted)."""
    for n in os.listdir(cache.archives) if cache.archives.is_dir() else []:
        if n.endswith(".json") and ARCHIVE_NAME.fullmatch(n) and not (cache.archives / n[:64]).exists():
            _drop(cache, n[:64], cache.archives / n[:64])


def _partials(cache: Cache, done: Cleaned, cutoff: float) -> None:
    """Partial downloads no running download holds, older than ``cutoff``; a resumable one
    (<sha256>.part) is kept PARTIAL_DAYS for the next run to resume."""
    for p in sorted(cache.tmp.iterdir()) if cache.tmp.is_dir() else []:
        m = PARTIAL_NAME.fullmatch(p.name)
        if m is None or not p.is_file() or p.is_symlink():
            continue
        # the lock of the entry this partial belongs to: held while its download runs
        owners = [q.name[:-5] for q in (cache.root / "locks").glob(f"{m.group(1)}*.lock")]
        with cache.try_lock(*owners) as got, contextlib.suppress(FileNotFoundError):
            if not got:
                done.busy += 1
                continue
            st = p.stat()
            resumable = len(m.group(1)) == 64 and cutoff != float("inf")
            if st.st_mtime < (time.time() - PARTIAL_DAYS * 86400 if resumable else cutoff):
                p.unlink()
                done.removed(st.st_size)


def _index_pages(cache: Cache, done: Cleaned) -> None:
    """Every folder of stored index pages that no run is writing (each of its files counted)."""
    index_root = cache.root / "index"
    for d in sorted(index_root.iterdir()) if index_root.is_dir() else []:
        if not (INDEX_KEY.fullmatch(d.name) and d.is_dir() and not d.is_symlink()):
            continue
        with cache.try_lock(f"index-{d.name}") as got:
            if not got:
                done.busy += 1
                continue
            done.files += sum(1 for q in d.iterdir())
            shutil.rmtree(d)
    if (cache.root / "sbom").is_dir():  # rendered SBOMs (cudaredist.sbom): made again at will
        done.files += len(os.listdir(cache.root / "sbom"))
        shutil.rmtree(cache.root / "sbom", ignore_errors=True)
