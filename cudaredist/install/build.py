"""Building one staging tree: each archive of a plan placed from its unpacked cache entry, made
from the archive (cached, or downloaded while it is extracted) when there is none."""

from __future__ import annotations

import contextlib
import os
import queue
import sys
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import CancelledError, Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout  # not the builtin before 3.11
from pathlib import Path
from typing import Any, BinaryIO, TypeVar, cast

from cudaredist import interrupts
from cudaredist.cache.store import Cache, evict, lock_wait
from cudaredist.cache.unpacked import UnpackedCache, entry_key, materialize
from cudaredist.errors import FetchError, UnsafeArchiveError
from cudaredist.fetch.fetcher import Fetcher
from cudaredist.fetch.ranges import DownloadFailed, GrowingFile
from cudaredist.fetch.transport import Aborted, Transport
from cudaredist.fsops import WINDOWS
from cudaredist.interrupts import wait_first
from cudaredist.plan import Plan, PlannedArchive, placed
from cudaredist.progress import Reporter
from cudaredist.sources import layout
from cudaredist.tree import links
from cudaredist.tree.extract import extract, is_streamable
from cudaredist.tree.staging import Tree, WriterFailed


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


_T = TypeVar("_T")


class _ArchiveGone(Exception):
    """The cached archive an extraction was to read was removed (a ``cache clear`` or ``prune``)."""


class Build:
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

    def __init__(self, installer: Builder, plan: Plan, tree: Tree, *, stream: bool) -> None:
        self.installer = installer
        self.fetcher = installer.fetcher
        self.reporter = installer.reporter
        self.plan = plan
        self.tree = tree
        self.unpacked = UnpackedCache(installer.cache.root)
        self.items = list(plan.items)
        # a hint, read without locks: which entries to place rather than fetch (checked under the lock,
        # where a changed or vanished entry is made again)
        placing = {it: self.unpacked.record_size(it, plan.archive_platform(it)) for it in self.items}
        self.ready = {it for it in self.items if placing[it]}
        # the entries with the most files first (cccl's 1,708 headers in 3 MB; each file costs the
        # same to place), then the archives biggest first: the longest work starts earliest
        self.items.sort(key=lambda it: (-placing[it], -it.archive.size))
        # A Windows host cannot rename a file another handle has open: no streaming there.
        self.follows = {it: GrowingFile() for it in self.items if it not in self.ready
                        and stream and not WINDOWS and is_streamable(it.archive.filename)}
        self.downloaded = self.cached = 0
        self._counting = threading.Lock()
        self.fetch_of: dict[PlannedArchive, Future[tuple[Path, bool]]] = {}
        # the longest extraction, the critical path where cores are few: its own thread, at the
        # priority the others give up (_give_way)
        unpack = [it for it in self.items if it not in self.ready]
        self.lead = max(unpack, key=lambda it: it.archive.size) if len(unpack) > 1 else None

    # -- one archive -------------------------------------------------------------------------------
    def place(self, item: PlannedArchive, path: Path | None = None,
              follow: GrowingFile | None = None) -> None:
        """Place ``item`` from its unpacked entry. An entry made before (``self.ready``) is looked up
        again under its lock, and made again if it vanished; otherwise the archive (a cached file, or
        ``follow``: a download still landing) is extracted into a new entry first -- or, where the
        installer keeps no unpacked copies (``cache_unpacked`` off), straight into the tree."""
        try:
            installer, platform = self.installer, self.plan.archive_platform(item)
            with installer.cache.lock(f"unpacked-{entry_key(item, platform)}",
                                      timeout=installer.lock_timeout, waiting=self.fetcher.transport.check):
                entry = self.unpacked.lookup(item, platform) if item in self.ready else None
                if entry is None and item in self.ready:  # removed or changed since the hint
                    path, cached = self.fetcher.fetch(item)
                    if not cached:  # counted as cached at the start
                        with self._counting:
                            self.cached -= 1
                            self.downloaded += 1
                if entry is None and not installer.cache_unpacked:
                    self._extract(item, path, follow, into=lambda fill: fill(self.tree))
                else:
                    entry = entry or self._extract(  # a new entry, made under its lock
                        item, path, follow, into=lambda fill: self.unpacked.build(item, platform, fill))
                    materialize(entry, self.tree, how=installer.link_mode, component=item.component,
                                archive=item.archive.filename)
                self.reporter.extracted(item.archive.filename)
        finally:
            if follow is not None:
                follow.close()

    def _extract(self, item: PlannedArchive, path: Path | None, follow: GrowingFile | None,
                 into: Callable[[Callable[[Tree], None]], _T]) -> _T:
        """``into(fill)``: ``fill`` extracts the archive into the tree it is given (a new unpacked
        entry's, or the staging tree). The archive is fetched again if it vanished before it was
        opened; one that hashes right but is hostile or broken is evicted from the cache."""
        # what fills a new entry's tree: the archive's members through its layout's mapper, then
        # the layout's after-step (e.g. a wheel's symlink chains) over the paths written
        how, platform = layout(item.layout), self.plan.archive_platform(item)
        mapper, after = how.mapper(item, platform), how.after
        written: list[str] = []

        def mapped(clean: str) -> str | None:
            rel = mapper(clean)
            if rel is not None and item.place:  # a cross tree: the target's files under targets/<dir>/, ...
                rel = placed(rel, item.place)
            if rel is not None and after is not None:
                written.append(rel)
            return rel

        def fill(entry_tree: Tree) -> None:
            written.clear()
            try:
                extract(path, entry_tree, component=item.component, archive=item.archive.filename,
                        mapper=mapped, fileobj=cast("BinaryIO | None", follow), digests=how.digests)
            except FileNotFoundError as exc:
                if path is None or exc.filename != str(path) or path.exists():
                    raise
                raise _ArchiveGone() from exc
            if follow is not None:
                # the archive is read; wait for its verdict (size and sha256) before trusting it
                self.fetch_of[item].result()
            if after is not None:
                after(item, platform, entry_tree, written)

        for _attempt in range(3):
            try:
                return into(fill)
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
                    evict(cache.archive_path(item.archive.sha256))
                raise
        raise FetchError(f"the cached archive {item.archive.filename} was removed three times while this "
                         "install read it (is a `cudaredist cache clear` running in a loop?); the prefix "
                         "is unchanged", url=item.url)

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
        workers = installer.extract_workers + len(self.follows)
        with ThreadPoolExecutor(jobs, thread_name_prefix="fetch") as fetchers, \
                ThreadPoolExecutor(1, thread_name_prefix="extract-lead") as leader, \
                ThreadPoolExecutor(workers, thread_name_prefix="extract",
                                   initializer=_give_way if self.lead else None) as extractors:
            extractions: set[Future[Any]] = set()
            for it in self.items:
                if it in self.ready:  # unpacked before: no archive to read at all
                    extractions.add(extractors.submit(self.place, it))
                    continue
                self.fetch_of[it] = fetchers.submit(self.fetcher.fetch, it, self.follows.get(it))
                if it in self.follows:
                    pool = leader if it is self.lead else extractors
                    extractions.add(pool.submit(self.place, it, None, self.follows[it]))
            # until every download and extraction is done; a finished download of an archive not
            # streamed starts its extraction. The first failure is raised (pending work is cancelled).
            by_future = {f: it for it, f in self.fetch_of.items()}
            pending: set[Future[Any]] = set(self.fetch_of.values()) | extractions
            # complete archives waiting for an extraction worker: (-size, arrival, item, path)
            waiting: queue.PriorityQueue[tuple[int, int, PlannedArchive, Path]] = queue.PriorityQueue()
            try:
                while pending:
                    # returns within 0.2 s: Ctrl-C reaches a main thread that waits (Windows included),
                    # raised once the wait has returned (interrupts.wait_first)
                    done, pending = wait_first(pending)
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
                        reporter.archive_done(item.archive.filename, item.archive.size, cached=was_cached)
                        if item in self.follows:  # extracted while it downloaded
                            continue
                        if item is self.lead:
                            future = leader.submit(self.place, item, path)
                        else:
                            # a worker places the biggest archive downloaded and not placed yet: small
                            # archives download first, and in arrival order they would keep the workers
                            # from the longest extraction (stop 39: the Windows tree's libnvvm zip waited
                            # 0.26 s behind cccl's and cudart's)
                            waiting.put((-item.archive.size, len(extractions), item, path))
                            future = extractors.submit(lambda: self.place(*waiting.get_nowait()[2:]))
                        extractions.add(future)
                        pending.add(future)
            except BaseException as exc:
                for fut in pending:
                    fut.cancel()
                self.fetcher.transport.cancel()  # wakes backoff sleeps and lock waits, cuts stalled reads
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
                leader.shutdown(wait=True)
                extractors.shutdown(wait=True)
                for follow in self.follows.values():  # one whose extraction never ran
                    follow.close()


# How far the threads that extract all but the longest archive give way: CFS weighs nice 0 against
# nice 10 as 1024 to 110, so the longest decode keeps ~90% of a core it shares with them.
GIVE_WAY = 10


class Builder:
    """What builds trees: the cache, its fetcher, the download and extraction pools' sizes, how
    entries are placed (:class:`Build` takes them from here); several trains' archives fetched with
    one pool (:meth:`prefetch`)."""

    def __init__(self, transport: Transport, cache: Cache, *, reporter: Reporter | None = None,
                 jobs: int = 8, offline: bool = False, lock_timeout: float | None = None,
                 link_mode: str | None = None, cache_unpacked: bool = True) -> None:
        self.cache = cache
        self.link_mode = links.link_mode(link_mode)
        # keep each new archive unpacked in the cache (later installs place it without decoding);
        # off, it is extracted straight into the tree: each file created once (a runner whose cache
        # does not outlive the job)
        self.cache_unpacked = cache_unpacked
        self.reporter = reporter or Reporter()
        self.jobs = max(1, jobs)
        self.lock_timeout = lock_wait(lock_timeout)
        self.extract_workers = max(1, min(4, os.cpu_count() or 1))
        self.fetcher = Fetcher(transport, cache, reporter=self.reporter, offline=offline,
                               lock_timeout=self.lock_timeout)

    def prefetch(self, plans: Sequence[Plan]) -> None:
        """Fetch every archive of ``plans`` into the cache with one pool (several trains at once),
        so the installs that follow extract from the cache."""
        items = sorted({i.archive.sha256: i for p in plans for i in p.items}.values(),
                       key=lambda it: -it.archive.size)
        self.reporter.start(sum(i.archive.size for i in items), len(items))
        self.fetcher.transport.resume()
        try:
            with ThreadPoolExecutor(min(self.jobs, len(items)) or 1, thread_name_prefix="fetch") as pool:
                try:
                    fetching = {pool.submit(self.fetcher.fetch, item): item for item in items}
                    for fut in interrupts.as_done(fetching):
                        item, (_path, cached) = fetching[fut], fut.result()
                        self.reporter.archive_done(item.archive.filename, item.archive.size,
                                                   cached=cached)
                except BaseException:
                    self.fetcher.transport.cancel()  # before the pool joins its workers: none stays stuck
                    raise
        finally:
            self.reporter.close()


def _give_way() -> None:
    """This thread runs at a lower priority than the one extracting the longest archive: on few
    cores that archive's decode is the install's critical path (libnvvm's: 2.1 s, where everything
    else fits beside it), and an even share of the CPU would stretch it (stop 40: 2.82 s against
    2.65 s for the Linux redist tree, 2 cores). Linux, where a thread's nice value is its own; a
    no-op elsewhere, and for a thread already at the lowest priority."""
    if sys.platform.startswith("linux"):
        with contextlib.suppress(OSError):
            tid = threading.get_native_id()
            os.setpriority(os.PRIO_PROCESS, tid, min(19, os.getpriority(os.PRIO_PROCESS, tid) + GIVE_WAY))
