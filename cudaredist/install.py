"""The install transaction: fetch (cache first), extract into a staging tree, swap it into place.

A prefix is either as it was or complete: the tree is built beside it and renamed
over it only after every archive verified and extracted; the previous tree is kept
until the new one is in place and restored if the swap fails. A per-prefix file
lock serialises installers; leftovers of a killed run are cleaned by the next one.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import io
import os
import shutil
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
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
from cudaredist.tree import links, versionjson
from cudaredist.tree.extract import extract, is_streamable
from cudaredist.tree.implib import add_import_libraries
from cudaredist.tree.staging import FileRecord, Tree, WriterFailed
from cudaredist.tree.unpacked import UnpackedCache, UnpackedEntry, entry_key, materialize
from cudaredist.tree.versionjson import version_json

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
    warnings: tuple[str, ...] = ()  # for stderr even when quiet: e.g. an old tree left behind


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
            path=str(prefix), lock=lock.lock_file) from exc
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
    """Clean what a killed run left beside ``prefix`` (call with the prefix lock held).

    A moved-aside tree is put back when the prefix is missing (a swap cut short). One that
    cannot be deleted yet (a process still holds a file in it) is left for a later run, with
    a note: it is not in the way of anything."""
    actions: list[str] = []
    for p in leftovers(prefix):
        kind = p.name[len(prefix.name) + 1:].split("-")[1]
        if kind == "old" and not os.path.lexists(prefix):
            fsops.rename(p, prefix)
            actions.append(f"restored {prefix} from an interrupted swap")
            continue
        try:
            _rmtree(p)
            actions.append(f"removed leftover {p.name}")
        except OSError as exc:
            actions.append(f"warning: {_not_removed(p, exc)}")
    return actions


def _not_removed(tree: Path, exc: OSError) -> str:
    held = fsops.holder_hint(exc)
    why = held or f"{exc.strerror or exc}: {exc.filename or tree}"
    return (f"the previous tree {tree} could not be removed yet ({why}); the next cudaredist run on "
            f"this prefix removes it, or delete it yourself once nothing uses it")


def swap_into_place(staging: Path, prefix: Path, warn: Callable[[str], None] | None = None) -> None:
    """Rename ``staging`` over ``prefix``, keeping the previous tree until the new one is in place.

    Once it is, the install has succeeded: the previous tree is renamed out of the way of
    :func:`recover`'s restore (``-gone-``) and deleted; a file in it that another process holds
    leaves it behind, with ``warn`` told, for the next run to remove."""
    old: Path | None = None
    if os.path.lexists(prefix):
        old = prefix.parent / f".{prefix.name}.cudaredist-old-{uuid.uuid4().hex[:8]}"
        try:
            fsops.rename(prefix, old)
        except OSError as exc:
            held = fsops.holder_hint(exc)
            if not held and getattr(exc, "winerror", None) == 5:
                # Windows refuses to rename a directory while a file in it is open: which one?
                inside = fsops.find_held(prefix)
                held = f"another process has {inside} open" if inside else ""
            raise PrefixError(
                f"cannot move the existing {prefix} aside: "
                + (f"{held}. Close it and run the install again"
                   if held else f"{exc.strerror}; is a file in it open, or is it a mount point?")
                + "; the prefix was left as it was", prefix=str(prefix)) from exc
    try:
        fsops.rename(staging, prefix)
    except OSError as exc:
        if old is not None:
            fsops.rename(old, prefix)
        raise PrefixError(f"cannot move the new tree into {prefix} ({exc.strerror}); the previous "
                          "tree was restored", prefix=str(prefix)) from exc
    if old is None:
        return
    gone = old.with_name(old.name.replace("-old-", "-gone-"))
    try:
        os.rename(old, gone)  # once: a swap that finished is never undone by recover()
    except OSError:
        gone = old
    try:
        _rmtree(gone)
    except OSError as exc:
        if warn is not None:
            warn(f"warning: {_not_removed(gone, exc)}")


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
        warnings: list[str] = []
        with prefix_lock(prefix, self.lock_timeout):
            for action in recover(prefix):
                (warnings.append if action.startswith("warning: ") else self.reporter.message)(action)
            record = None
            if prefix.is_dir():
                try:
                    record = read_record(prefix)
                except PrefixError:
                    if not reinstall:  # its message says to reinstall with --reinstall
                        raise
            if record is not None and record.get("content_key") == plan.content_key() and not reinstall:
                return InstallResult(prefix, plan, noop=True, seconds=time.monotonic() - t0,
                                     warnings=tuple(warnings))
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
                rec = build_record(plan, files, stamp, served=self.fetcher.served)
                rec["links"] = links
                rec["request"] = {"components": list(requested)}
                write_record(staging, rec)
                swap_into_place(staging, prefix, warn=warnings.append)
            except BaseException:
                _rmtree(staging)
                raise
        return InstallResult(prefix, plan, noop=False, downloaded=downloaded, cached=cached,
                             files=len(files), seconds=time.monotonic() - t0, warnings=tuple(warnings))

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
        """Fill ``staging`` with the plan's archives: see :class:`_Build`."""
        self.fetcher.resume()
        tree = Tree(staging, dest=prefix or staging,
                    case_insensitive=plan.platform.startswith("windows") or is_case_insensitive(staging))
        build = _Build(self, plan, tree, stream=stream)
        build.run()
        if plan.platform.startswith("windows-"):
            # MinGW's ld cannot link 13.x cudart.lib (MSVC objects): GNU import libraries beside it
            add_import_libraries(tree, warn=self.reporter.message)
        # NVIDIA's version.json at the root: in the record, verified and uninstalled like the rest
        tree.add_file(versionjson.PATH, io.BytesIO(version_json(plan)), 0o644, versionjson.COMPONENT,
                      versionjson.PATH)
        return tree.finish(), build.downloaded, build.cached

    def _complete(self, plan: Plan, staging: Path) -> list[dict[str, str]]:
        """Platform fix-ups from profiles.toml (e.g. ``lib64 -> lib`` on Linux)."""
        made: list[dict[str, str]] = []
        for name, target in platform_rule(plan.platform).links:
            if (staging / target).is_dir() and not os.path.lexists(staging / name):
                try:
                    os.symlink(target, staging / name, target_is_directory=True)
                    if not os.path.lexists(staging / name):  # "made" and nothing there (Wine does that)
                        raise FileNotFoundError(staging / name)
                    made.append({"path": name, "link": target})
                except OSError:
                    shutil.copytree(staging / target, staging / name, symlinks=True)
                    # uninstall removes a directory where a link was recorded only when it made it
                    made.append({"path": name, "link": target, "copy": "directory"})
        return made


class _ArchiveGone(Exception):
    """The cached archive an extraction was to read was removed (a ``cache clear`` or ``prune``)."""


class _Build:
    """The archives of one plan, placed into one staging tree.

    Each archive is placed from its unpacked cache entry; an archive without one is fetched (cache
    first, else downloaded) and unpacked into a new entry first, tars and zips while they download.
    Biggest first, so the longest extraction starts earliest. Everything an entry goes through --
    lookup, unpacking, placement -- happens under that entry's lock, which ``cache clear`` and
    ``prune`` respect; an entry or archive that vanished before the lock was taken is made again
    from the archive or a new download, never a failure.

    Two pools: ``fetchers`` download, ``extractors`` unpack and place. Lock order: an entry's lock,
    then its archive's (the fetcher's); never the other way round.
    """

    def __init__(self, installer: Installer, plan: Plan, tree: Tree, *, stream: bool) -> None:
        self.installer = installer
        self.fetcher = installer.fetcher
        self.reporter = installer.reporter
        self.plan = plan
        self.tree = tree
        self.unpacked = UnpackedCache(installer.cache.root)
        self.items = sorted(plan.items, key=lambda it: -it.archive.size)
        # a hint, read without locks: which entries to place rather than fetch (re-checked under the lock)
        self.ready = {it for it in self.items if self.unpacked.lookup(it, plan.platform) is not None}
        # A Windows host cannot rename a file another handle has open: no streaming there.
        self.streamed = {it for it in self.items if it not in self.ready
                         and stream and os.name != "nt" and is_streamable(it.archive.filename)}
        self.downloaded = 0
        self.cached = 0
        self.fetch_of: dict[PlannedArchive, Future[tuple[Path, bool]]] = {}
        self.follows = {it: GrowingFile() for it in self.streamed}

    # -- one archive -------------------------------------------------------------------------------
    def place_cached(self, item: PlannedArchive) -> None:
        """An archive that had an unpacked entry: place it, or make the entry again if it vanished."""
        with self._entry_lock(item):
            entry = self.unpacked.lookup(item, self.plan.platform)
            if entry is None:  # removed since the hint (a clear or prune): from the archive, then
                path, _cached = self.fetcher.fetch(item)
                entry = self._unpack(item, path, None)
            self._place(item, entry)

    def unpack_and_place(self, item: PlannedArchive, path: Path | None, follow: GrowingFile | None) -> None:
        """Extract the archive (a cached file, or ``follow``: a download still landing) into a new
        unpacked entry, then place that into the tree."""
        try:
            with self._entry_lock(item):
                self._place(item, self._unpack(item, path, follow))
        finally:
            if follow is not None:
                follow.close()

    def _entry_lock(self, item: PlannedArchive) -> contextlib.AbstractContextManager[None]:
        installer = self.installer
        return installer.cache.lock(f"unpacked-{entry_key(item, self.plan.platform)}",
                                    timeout=installer.lock_timeout, waiting=self.fetcher.check_abort)

    def _unpack(self, item: PlannedArchive, path: Path | None, follow: GrowingFile | None) -> UnpackedEntry:
        """Make the unpacked entry of ``item`` (call with its lock held)."""
        for _attempt in range(3):
            try:
                return self.unpacked.build(item, self.plan.platform, self._filler(item, path, follow))
            except _ArchiveGone:
                # removed between its fetch and this read: fetched again (a new download if need be)
                path, _cached = self.fetcher.fetch(item)
            except UnsafeArchiveError:
                if follow is not None:
                    # read before it was verified: a bad download explains it better
                    err = self.fetch_of[item].exception()
                    if err is not None:
                        raise err from None
                # hashes right but is hostile or broken: keep no copy to install from later
                cache = self.installer.cache
                with cache.lock(item.archive.sha256, timeout=self.installer.lock_timeout):
                    cache.evict(item.archive.sha256)
                raise
        raise FetchError(f"the cached archive {item.archive.filename} was removed three times while this "
                         "install read it (is a `cudaredist cache clear` running in a loop?); the prefix "
                         "is unchanged", url=item.url)

    def _filler(self, item: PlannedArchive, path: Path | None,
                follow: GrowingFile | None) -> Callable[[Tree], None]:
        """What fills a new entry's tree: the archive's members through its layout's mapper, then
        the layout's after-step (e.g. a wheel's symlink chains) over the paths written."""
        how = layout(item.layout)
        mapper = how.mapper(item, self.plan.platform)
        after = how.after
        written: list[str] = []

        def recording(clean: str) -> str | None:
            rel = mapper(clean)
            if rel is not None:
                written.append(rel)
            return rel

        def fill(entry_tree: Tree) -> None:
            written.clear()
            try:
                extract(path, entry_tree, component=item.component, archive=item.archive.filename,
                        mapper=recording if after is not None else mapper,
                        fileobj=cast("BinaryIO | None", follow))
            except FileNotFoundError as exc:
                if path is None or exc.filename != str(path) or path.exists():
                    raise
                raise _ArchiveGone() from exc
            if follow is not None:
                # the archive is read; wait for its verdict (size and sha256) before trusting it
                self.fetch_of[item].result()
            if after is not None:
                after(item, self.plan.platform, entry_tree, written)

        return fill

    def _place(self, item: PlannedArchive, entry: UnpackedEntry) -> None:
        materialize(entry, self.tree, how=self.installer.link_mode, component=item.component,
                    archive=item.archive.filename)
        self.reporter.extracted(item.archive.filename)

    # -- all of them -------------------------------------------------------------------------------
    def run(self) -> None:
        installer, reporter = self.installer, self.reporter
        reporter.start(self.plan.total_size, len(self.items))
        for it in self.ready:
            self.cached += 1
            reporter.advance(it.archive.size)
            reporter.archive_done(it.archive.filename, it.archive.size, cached=True)
        jobs = min(installer.jobs, len(self.items)) or 1
        # A streamed extraction mostly waits for its bytes (a segmented download makes them readable
        # in order late): one thread each, so they never hold the workers a complete archive needs.
        workers = installer.extract_workers + len(self.streamed)
        with ThreadPoolExecutor(jobs, thread_name_prefix="fetch") as fetchers, \
                ThreadPoolExecutor(workers, thread_name_prefix="extract") as extractors:
            extractions: set[Future[Any]] = set()
            for it in self.items:
                if it in self.ready:  # unpacked before: no archive to read at all
                    extractions.add(extractors.submit(self.place_cached, it))
                    continue
                self.fetch_of[it] = fetchers.submit(self.fetcher.fetch, it, self.follows.get(it))
                if it in self.follows:
                    extractions.add(extractors.submit(self.unpack_and_place, it, None, self.follows[it]))
            try:
                self._wait(extractors, extractions)
            except BaseException as exc:
                self.fetcher.cancel()  # wakes backoff sleeps and lock waits, cuts stalled reads
                for follow in self.follows.values():  # unblock extractions following a cancelled download
                    follow.fail(Aborted())
                if isinstance(exc, (DownloadFailed, WriterFailed)):
                    # an extraction saw its download, or another archive's write of a path they
                    # share, fail: report that failure's own error
                    root = _root_cause([*self.fetch_of.values(), *extractions])
                    if root is not None:
                        raise root from None
                raise
            finally:
                reporter.close()
                fetchers.shutdown(wait=True)
                extractors.shutdown(wait=True)
                for follow in self.follows.values():  # one whose extraction never ran
                    follow.close()

    def _wait(self, extractors: ThreadPoolExecutor, extractions: set[Future[Any]]) -> None:
        """Until every download and extraction is done; a finished download of an archive not
        streamed starts its extraction. The first failure is raised (pending work is cancelled)."""
        by_future = {f: it for it, f in self.fetch_of.items()}
        pending: set[Future[Any]] = set(self.fetch_of.values()) | extractions
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
                    if was_cached:
                        self.cached += 1
                    else:
                        self.downloaded += 1
                    self.reporter.archive_done(item.archive.filename, item.archive.size, cached=was_cached)
                    if item not in self.streamed:
                        future = extractors.submit(self.unpack_and_place, item, path, None)
                        extractions.add(future)
                        pending.add(future)
        except BaseException:
            for fut in pending:
                fut.cancel()
            raise
