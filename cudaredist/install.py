"""The install transaction: fetch (cache first), extract into a staging tree, swap it into place.

A prefix is either as it was or complete: the tree is built beside it and renamed
over it only after every archive verified and extracted; the previous tree is kept
until the new one is in place and restored if the swap fails. A per-prefix file
lock serialises installers; leftovers of a killed run are cleaned by the next one.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import errno
import os
import shutil
import tempfile
import time
import uuid
from collections.abc import Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, CancelledError, Future, ThreadPoolExecutor, wait
from concurrent.futures import TimeoutError as FutureTimeout  # not the builtin before 3.11
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO, cast

from cudaredist import fsops
from cudaredist.errors import (
    BusyError,
    FetchError,
    PrefixError,
    UnsafeArchiveError,
)
from cudaredist.fetch.cache import Cache
from cudaredist.fetch.fetcher import Aborted, Fetcher, StreamBroken
from cudaredist.fetch.growing import DownloadFailed, GrowingFile
from cudaredist.fetch.transport import Transport
from cudaredist.localfs import UMASK, check_free_space, disk_error, is_case_insensitive, local_error, mb
from cudaredist.plan import Plan, PlannedArchive
from cudaredist.profiles import platform_rule
from cudaredist.progress import Reporter, Silent
from cudaredist.record import (
    RECORD_DIR,
    build_record,
    canonical_prefix,
    leftovers,
    read_record,
    write_record,
)
from cudaredist.sources import layout
from cudaredist.tree import links
from cudaredist.tree.extract import extract, is_streamable
from cudaredist.tree.implib import add_import_libraries
from cudaredist.tree.staging import FileRecord, Tree, WriterFailed
from cudaredist.tree.unpacked import UnpackedCache, UnpackedEntry, materialize

ENV_LOCK_TIMEOUT = "CUDAREDIST_LOCK_TIMEOUT"
DEFAULT_LOCK_TIMEOUT = 600.0

@dataclass(frozen=True)
class InstallResult:
    prefix: Path
    plan: Plan
    noop: bool
    downloaded: int = 0
    cached: int = 0
    files: int = 0
    seconds: float = 0.0


def lock_timeout_default() -> float:
    raw = os.environ.get(ENV_LOCK_TIMEOUT)
    try:
        return float(raw) if raw else DEFAULT_LOCK_TIMEOUT
    except ValueError:
        return DEFAULT_LOCK_TIMEOUT


@contextlib.contextmanager
def prefix_lock(prefix: Path, timeout: float) -> Iterator[None]:
    import filelock

    lock = filelock.FileLock(str(prefix.parent / f".{prefix.name}.cudaredist.lock"), timeout=timeout)
    try:
        prefix.parent.mkdir(parents=True, exist_ok=True)
        lock.acquire()
    except filelock.Timeout as exc:
        raise BusyError(
            f"{prefix} is busy: another cudaredist process has held its lock for {timeout:g}s. "
            f"Retry later, or wait longer with --lock-timeout / {ENV_LOCK_TIMEOUT}.",
            prefix=str(prefix)) from exc
    except OSError as exc:
        raise local_error(exc, doing="create the lock file of the prefix in", path=prefix.parent,
                          option="--prefix") from exc
    try:
        yield
    finally:
        lock.release()


def _rmtree(path: Path) -> None:
    fsops.rmtree(path)


def recover(prefix: Path) -> list[str]:
    """Clean what a killed run left beside ``prefix`` (call with the prefix lock held)."""
    actions: list[str] = []
    for p in leftovers(prefix):
        kind = p.name[len(prefix.name) + 1:].split("-")[1]
        if kind == "old" and not os.path.lexists(prefix):
            fsops.rename(p, prefix)
            actions.append(f"restored {prefix} from an interrupted swap")
        else:
            _rmtree(p)
            actions.append(f"removed leftover {p.name}")
    return actions


def swap_into_place(staging: Path, prefix: Path) -> None:
    old: Path | None = None
    if os.path.lexists(prefix):
        old = prefix.parent / f".{prefix.name}.cudaredist-old-{uuid.uuid4().hex[:8]}"
        try:
            fsops.rename(prefix, old)
        except OSError as exc:
            raise PrefixError(f"cannot move the existing {prefix} aside ({exc.strerror}); is a file in "
                              "it open, or is it a mount point?", prefix=str(prefix)) from exc
    try:
        fsops.rename(staging, prefix)
    except OSError as exc:
        if old is not None:
            fsops.rename(old, prefix)
        raise PrefixError(f"cannot move the new tree into {prefix} ({exc.strerror}); the previous "
                          "tree was restored", prefix=str(prefix)) from exc
    if old is not None:
        _rmtree(old)


def _root_cause(futures: Sequence[Future[Any]]) -> BaseException | None:
    """The first real failure among ``futures`` (downloads first), skipping the ones that only
    report another's: an aborted download, a reader whose download failed, a waiter whose
    writer failed."""
    for f in futures:
        with contextlib.suppress(FutureTimeout, CancelledError):
            err = f.exception(timeout=60)
            if err is not None and not isinstance(err, (Aborted, DownloadFailed, WriterFailed)):
                return err
    return None


class Installer:
    def __init__(self, transport: Transport, cache: Cache, *, reporter: Reporter | None = None,
                 jobs: int = 8, offline: bool = False, lock_timeout: float | None = None,
                 extract_workers: int | None = None, link_mode: str | None = None) -> None:
        self.cache = cache
        self.link_mode = links.link_mode(link_mode)
        self.reporter = reporter or Silent()
        self.jobs = max(1, jobs)
        self.lock_timeout = lock_timeout_default() if lock_timeout is None else lock_timeout
        self.extract_workers = extract_workers or max(1, min(4, os.cpu_count() or 1))
        self.fetcher = Fetcher(transport, cache, reporter=self.reporter, offline=offline,
                               lock_timeout=self.lock_timeout)

    def prefetch(self, plans: Sequence[Plan]) -> None:
        """Fetch every archive of ``plans`` into the cache with one pool (several trains at once),
        so the installs that follow extract from the cache."""
        items = list({i.archive.sha256: i for p in plans for i in p.items}.values())
        items.sort(key=lambda it: -it.archive.size)
        self.reporter.start(sum(i.archive.size for i in items), len(items))
        self.fetcher.resume()
        try:
            with ThreadPoolExecutor(min(self.jobs, len(items)) or 1, thread_name_prefix="fetch") as pool:
                try:
                    for item, (_path, cached) in zip(items, pool.map(self.fetcher.fetch, items),
                                                     strict=True):
                        self.reporter.archive_done(item.archive.filename, item.archive.size,
                                                   cached=cached)
                except BaseException:
                    self.fetcher.cancel()  # before the pool joins its workers: none stays stuck
                    raise
        finally:
            self.reporter.close()

    # -- transaction -------------------------------------------------------------------------------
    def install(self, plan: Plan, prefix: Path | str, *, reinstall: bool = False,
                replace_foreign: bool = False, requested: Sequence[str] = ()) -> InstallResult:
        """``reinstall``: build the tree again even if the prefix holds this plan (or its record is
        unreadable); ``replace_foreign``: replace a prefix that holds no cudaredist install."""
        t0 = time.monotonic()
        prefix = canonical_prefix(prefix)
        self.cache.prepare()  # a --cache-dir that is not a cache is refused before anything is written
        with prefix_lock(prefix, self.lock_timeout):
            for action in recover(prefix):
                self.reporter.message(action)
            record = None
            if prefix.is_dir():
                try:
                    record = read_record(prefix)
                except PrefixError:
                    if not reinstall:  # its message says to reinstall with --reinstall
                        raise
            if record is not None and record.get("content_key") == plan.content_key() and not reinstall:
                return InstallResult(prefix, plan, noop=True, seconds=time.monotonic() - t0)
            ours = record is not None or (prefix / RECORD_DIR).is_dir()
            if (not ours and prefix.exists() and not replace_foreign
                    and (not prefix.is_dir() or any(prefix.iterdir()))):
                what = "is a file, not a directory" if not prefix.is_dir() else \
                    "exists and does not hold a cudaredist install"
                raise PrefixError(
                    f"{prefix} {what}; refusing to replace it. Choose another --prefix, empty it, or "
                    "pass --replace-foreign to replace it (everything in it is deleted).",
                    prefix=str(prefix))
            try:
                staging = Path(tempfile.mkdtemp(dir=prefix.parent,
                                                prefix=f".{prefix.name}.cudaredist-stage-"))
            except OSError as exc:
                raise disk_error(exc, path=prefix.parent / f".{prefix.name}.cudaredist-stage-*",
                                 where=prefix.parent) from exc
            try:
                # mkdtemp's 0700 would hide the toolkit from other users; the umask was read at start-up
                os.chmod(staging, 0o777 & ~UMASK)
                self._check_space(plan, staging)
                try:
                    files, downloaded, cached = self._build(plan, staging, prefix=prefix)
                except StreamBroken as broken:
                    self.reporter.message(f"{broken.__cause__}; trying the next URL")
                    _rmtree(staging)
                    staging.mkdir()
                    files, downloaded, cached = self._build(plan, staging, prefix=prefix,
                                                             stream=False)
                links = self._complete(plan, staging)
                stamp = _dt.datetime.now(_dt.timezone.utc).replace(microsecond=0).isoformat()
                rec = build_record(plan, files, stamp)
                rec["links"] = links
                rec["request"] = {"components": list(requested)}
                write_record(staging, rec)
                swap_into_place(staging, prefix)
            except BaseException:
                _rmtree(staging)
                raise
        return InstallResult(prefix, plan, noop=False, downloaded=downloaded, cached=cached,
                             files=len(files), seconds=time.monotonic() - t0)

    def _check_space(self, plan: Plan, staging: Path) -> None:
        """Refuse before downloading when the disk clearly cannot hold the tree.

        The estimate is a lower bound, so the check never refuses an install that would fit: an
        unpacked tree is at least as big as its compressed archives (2-4 times for CUDA's), and
        archives not cached yet also land on this disk first when the cache shares it.
        """
        needed = plan.total_size
        cache_disk = self.cache.root
        while not cache_disk.exists() and cache_disk.parent != cache_disk:
            cache_disk = cache_disk.parent
        try:
            same_disk = os.stat(staging).st_dev == os.stat(cache_disk).st_dev
        except OSError:
            same_disk = False
        if same_disk:
            needed += sum(it.archive.size for it in plan.items
                          if self.cache.lookup(it.archive.sha256, it.archive.size) is None)
        check_free_space(staging.parent, needed,
                         what=f"the tree of {len(plan.items)} archives ({mb(plan.total_size)} compressed"
                              + (", plus their downloads into the cache on the same disk)" if same_disk
                                 and needed > plan.total_size else ")"))

    def _build(self, plan: Plan, staging: Path, *, prefix: Path | None = None,
               stream: bool = True) -> tuple[list[FileRecord], int, int]:
        """Download (concurrently) and extract each archive while it downloads (tars and zips; wheels
        once they are there). Biggest first, so the longest extraction starts earliest."""
        self.fetcher.resume()
        tree = Tree(staging, dest=prefix or staging,
                    case_insensitive=plan.platform.startswith("windows") or is_case_insensitive(staging),
                    size_hint=plan.total_size)
        self.reporter.start(plan.total_size, len(plan.items))
        counts = {"downloaded": 0, "cached": 0}
        items = sorted(plan.items, key=lambda it: -it.archive.size)
        unpacked = UnpackedCache(self.cache.root)
        ready = {it: e for it in items if (e := unpacked.lookup(it, plan.platform)) is not None}
        for it in ready:
            counts["cached"] += 1
            self.reporter.advance(it.archive.size)
            self.reporter.archive_done(it.archive.filename, it.archive.size, cached=True)
        # A Windows host cannot rename a file another handle has open: no streaming there.
        streamed = {it for it in items if it not in ready
                    and stream and os.name != "nt" and is_streamable(it.archive.filename)}
        jobs = min(self.jobs, len(items)) or 1
        # A streamed extraction mostly waits for its bytes (a segmented download makes them readable
        # in order late): one thread each, so they never hold the workers a complete archive needs.
        workers = self.extract_workers + len(streamed)
        with ThreadPoolExecutor(jobs, thread_name_prefix="fetch") as fetchers, \
                ThreadPoolExecutor(workers, thread_name_prefix="extract") as extractors:

            def unpack(item: PlannedArchive, path: Path | None, follow: GrowingFile | None) -> None:
                """Extract the archive once into the unpacked cache, then place it into the tree."""
                how = layout(item.layout)
                mapper = how.mapper(item, plan.platform)
                after = how.after

                def fill(entry_tree: Tree) -> None:
                    written: list[str] = []

                    def recording(clean: str) -> str | None:
                        rel = mapper(clean)
                        if rel is not None:
                            written.append(rel)
                        return rel

                    try:
                        extract(path, entry_tree, component=item.component, archive=item.archive.filename,
                                mapper=recording if after is not None else mapper,
                                fileobj=cast("BinaryIO | None", follow))
                    except FileNotFoundError as exc:
                        if path is None or exc.filename != str(path) or path.exists():
                            raise
                        raise FetchError(
                            f"the cached archive {item.archive.filename} ({path}) was removed while this "
                            "install read it (a `cudaredist cache clear` or `prune` at the same time?); "
                            "the prefix is unchanged: run the install again", url=item.url) from exc
                    if follow is not None:
                        # the archive is read; wait for its verdict (size and sha256) before trusting it
                        fetch_of[item].result()
                    if after is not None:
                        after(item, plan.platform, entry_tree, written)

                try:
                    entry = unpacked.build(item, plan.platform, fill)
                except UnsafeArchiveError:
                    if follow is not None:
                        # read before it was verified: a bad download explains it better
                        err = fetch_of[item].exception()
                        if err is not None:
                            raise err from None
                    # hashes right but is hostile or broken: keep no copy to install from later
                    with self.cache.lock(item.archive.sha256, timeout=self.lock_timeout):
                        self.cache.evict(item.archive.sha256)
                    raise
                finally:
                    if follow is not None:
                        follow.close()
                place(item, entry)

            def place(item: PlannedArchive, entry: UnpackedEntry) -> None:
                # under the entry's lock: `cache clear`/`prune` skip an entry being placed from
                with self.cache.lock(f"unpacked-{entry.key}", timeout=self.lock_timeout,
                                     waiting=self.fetcher.check_abort):
                    if not (entry.path / "files.json").is_file():
                        raise FetchError(
                            f"the unpacked cache entry of {item.archive.filename} was removed while this "
                            "install used it (a `cudaredist cache clear` or `prune` at the same time?); "
                            "the prefix is unchanged: run the install again", url=item.url)
                    materialize(entry, tree, how=self.link_mode, component=item.component,
                                archive=item.archive.filename)
                self.reporter.extracted(item.archive.filename)

            fetch_of: dict[PlannedArchive, Future[tuple[Path, bool]]] = {}
            follows = {it: GrowingFile() for it in streamed}
            extractions: set[Future[Any]] = set()
            for it in items:
                if it in ready:  # unpacked before: no archive to read at all
                    extractions.add(extractors.submit(place, it, ready[it]))
                    continue
                fetch_of[it] = fetchers.submit(self.fetcher.fetch, it, follows.get(it))
                if it in follows:
                    extractions.add(extractors.submit(unpack, it, None, follows[it]))
            by_future = {f: it for it, f in fetch_of.items()}
            pending: set[Future[Any]] = set(fetch_of.values()) | extractions
            try:
                while pending:
                    # with a timeout: Ctrl-C reaches a main thread that waits (Windows included)
                    done, pending = wait(pending, timeout=0.2, return_when=FIRST_COMPLETED)
                    for fut in done:
                        item = by_future.get(fut)
                        if item is None:
                            fut.result()  # an extraction: raises its failure
                            continue
                        path, was_cached = fut.result()
                        counts["cached" if was_cached else "downloaded"] += 1
                        self.reporter.archive_done(item.archive.filename, item.archive.size,
                                                   cached=was_cached)
                        if item not in streamed:
                            pending.add(extractors.submit(unpack, item, path, None))
            except BaseException as exc:
                self.fetcher.cancel()  # wakes backoff sleeps and lock waits, cuts stalled reads
                for fut in pending:
                    fut.cancel()
                for follow in follows.values():  # unblock extractions following a cancelled download
                    follow.fail(Aborted())
                if isinstance(exc, (DownloadFailed, WriterFailed)):
                    # an extraction saw its download, or another archive's write of a path they
                    # share, fail: report that failure's own error
                    root = _root_cause([*fetch_of.values(), *extractions])
                    if root is not None:
                        raise root from None
                raise
            finally:
                self.reporter.close()
                fetchers.shutdown(wait=True)
                extractors.shutdown(wait=True)
                for follow in follows.values():  # one whose extraction never ran
                    follow.close()
        if plan.platform.startswith("windows-"):
            # MinGW's ld cannot link 13.x cudart.lib (MSVC objects): GNU import libraries beside it
            add_import_libraries(tree, warn=self.reporter.message)
        return tree.finish(), counts["downloaded"], counts["cached"]

    def _complete(self, plan: Plan, staging: Path) -> list[dict[str, str]]:
        """Platform fix-ups from profiles.toml (e.g. ``lib64 -> lib`` on Linux)."""
        made: list[dict[str, str]] = []
        for name, target in platform_rule(plan.platform).links:
            if (staging / target).is_dir() and not os.path.lexists(staging / name):
                try:
                    os.symlink(target, staging / name, target_is_directory=True)
                    if not os.path.lexists(staging / name):  # a host that says yes and makes nothing
                        raise OSError(errno.ENOSYS, "symlink made nothing", str(staging / name))
                    made.append({"path": name, "link": target})
                except OSError:
                    shutil.copytree(staging / target, staging / name, symlinks=True)
                    # uninstall removes a directory where a link was recorded only when it made it
                    made.append({"path": name, "link": target, "copy": "directory"})
        return made
