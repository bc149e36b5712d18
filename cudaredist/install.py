"""The install transaction: fetch (cache first), extract into a staging tree, swap it into place.

A prefix is either as it was or complete: the tree is built beside it and renamed
over it only after every archive verified and extracted; the previous tree is kept
until the new one is in place and restored if the swap fails. A per-prefix file
lock serialises installers; leftovers of a killed run are cleaned by the next one.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import hashlib
import os
import shutil
import stat
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO, cast

from cudaredist.cache import CHUNK, Cache, sha256_file
from cudaredist.errors import (
    BusyError,
    FetchError,
    IntegrityError,
    OfflineError,
    PrefixError,
    UnsafeArchiveError,
)
from cudaredist.extract import FileRecord, Tree, extract, is_streamable, redist_mapper
from cudaredist.growing import DownloadFailed, GrowingFile
from cudaredist.net import Transport
from cudaredist.plan import Plan, PlannedArchive
from cudaredist.profiles import platform_rule
from cudaredist.progress import Reporter, Silent
from cudaredist.record import build_record, canonical_prefix, leftovers, read_record, write_record
from cudaredist.wheels import add_soname_links, member_mapper

ENV_LOCK_TIMEOUT = "CUDAREDIST_LOCK_TIMEOUT"
DEFAULT_LOCK_TIMEOUT = 600.0
# layout name -> factory of member mappers; the PyPI source registers its wheel layouts here
MAPPERS: dict[str, Callable[[PlannedArchive, str], Callable[[str], str | None]]] = {
    "redist": lambda item, platform: redist_mapper(item.component, item.archive.filename),
    "wheel": lambda item, platform: member_mapper(item.component, item.version, platform),
}
# layout name -> step run after one archive of that layout is extracted, given the tree paths it
# wrote: wheels carry no symlinks, so the .so chains are restored from each library's SONAME
AFTER_EXTRACT: dict[str, Callable[[PlannedArchive, str, Tree, list[str]], object]] = {
    "wheel": lambda item, platform, tree, paths: add_soname_links(
        tree, paths, component=item.component, archive=item.archive.filename),
}


@dataclass(frozen=True)
class InstallResult:
    prefix: Path
    plan: Plan
    noop: bool
    downloaded: int = 0
    cached: int = 0
    files: int = 0
    seconds: float = 0.0


class _Aborted(Exception):
    pass


class _StreamBroken(Exception):
    """A followed download failed on one URL while others remain: rebuild without streaming."""


def lock_timeout_default() -> float:
    raw = os.environ.get(ENV_LOCK_TIMEOUT)
    try:
        return float(raw) if raw else DEFAULT_LOCK_TIMEOUT
    except ValueError:
        return DEFAULT_LOCK_TIMEOUT


@contextlib.contextmanager
def prefix_lock(prefix: Path, timeout: float) -> Iterator[None]:
    import filelock

    prefix.parent.mkdir(parents=True, exist_ok=True)
    lock = filelock.FileLock(str(prefix.parent / f".{prefix.name}.cudaredist.lock"), timeout=timeout)
    try:
        with lock:
            yield
    except filelock.Timeout as exc:
        raise BusyError(
            f"{prefix} is busy: another cudaredist process has held its lock for {timeout:g}s. "
            f"Retry later, or wait longer with --lock-timeout / {ENV_LOCK_TIMEOUT}.",
            prefix=str(prefix)) from exc


def _rmtree(path: Path) -> None:
    def retry(func: Any, p: str, _exc: Any) -> None:
        # a read-only directory (as some archives ship them) refuses to lose its entries
        with contextlib.suppress(OSError):
            os.chmod(os.path.dirname(p), stat.S_IRWXU)
            if os.path.isdir(p) and not os.path.islink(p):
                os.chmod(p, stat.S_IRWXU)
            func(p)

    if path.is_symlink() or path.is_file():
        path.unlink()
    elif path.exists():
        if sys.version_info >= (3, 12):
            shutil.rmtree(path, onexc=retry)
        else:
            shutil.rmtree(path, onerror=retry)


def recover(prefix: Path) -> list[str]:
    """Clean what a killed run left beside ``prefix`` (call with the prefix lock held)."""
    actions: list[str] = []
    for p in leftovers(prefix):
        kind = p.name[len(prefix.name) + 1:].split("-")[1]
        if kind == "old" and not os.path.lexists(prefix):
            os.rename(p, prefix)
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
            os.rename(prefix, old)
        except OSError as exc:
            raise PrefixError(f"cannot move the existing {prefix} aside ({exc.strerror}); is a file in "
                              "it open, or is it a mount point?", prefix=str(prefix)) from exc
    try:
        os.rename(staging, prefix)
    except OSError as exc:
        if old is not None:
            os.rename(old, prefix)
        raise PrefixError(f"cannot move the new tree into {prefix} ({exc.strerror}); the previous "
                          "tree was restored", prefix=str(prefix)) from exc
    if old is not None:
        _rmtree(old)


class Installer:
    def __init__(self, transport: Transport, cache: Cache, *, reporter: Reporter | None = None,
                 jobs: int = 8, offline: bool = False, lock_timeout: float | None = None,
                 extract_workers: int | None = None) -> None:
        self.transport = transport
        self.cache = cache
        self.reporter = reporter or Silent()
        self.jobs = max(1, jobs)
        self.offline = offline
        self.lock_timeout = lock_timeout_default() if lock_timeout is None else lock_timeout
        self.extract_workers = extract_workers or max(1, min(4, os.cpu_count() or 1))
        self._abort = threading.Event()
        self._bad_urls: dict[str, FetchError | IntegrityError] = {}  # failed in this run: not asked again

    # -- archives --------------------------------------------------------------------------------
    def fetch(self, item: PlannedArchive, follow: GrowingFile | None = None) -> tuple[Path, bool]:
        """The verified cache path of ``item``'s archive, downloading it if needed; (path, was_cached).

        ``follow`` is fed the bytes as they land, for an extraction running alongside.
        """
        try:
            path, cached = self._fetch(item, follow)
        except BaseException as exc:
            if follow is not None:
                follow.fail(exc)
            raise
        if follow is not None:
            if cached:
                follow.attach(path)
                follow.publish(item.archive.size)
            follow.finish()
        return path, cached

    def _fetch(self, item: PlannedArchive, follow: GrowingFile | None) -> tuple[Path, bool]:
        sha, size = item.archive.sha256, item.archive.size
        hit = self._cached(sha, size) if follow is None else self._cached_followed(item, follow)
        if hit is not None:
            self.reporter.advance(size)
            return hit, True
        if self.offline:
            raise OfflineError(
                f"--offline: {item.archive.filename} ({item.component}, sha256 {sha[:16]}…) is not in "
                f"the cache {self.cache.root}; its URL is {item.url}. Run the same command online once, "
                "or fill the cache from a mirror.", url=item.url)
        with self.cache.lock(sha, timeout=self.lock_timeout):
            # another process may have fetched it meanwhile
            hit = self._cached(sha, size, evict=True)
            if hit is not None:
                self.reporter.advance(size)
                return hit, True
            self.cache.drop_partials(sha[:16])  # what a killed run left for this entry
            tmp = self.cache.new_temp(sha[:16])
            if follow is not None:
                follow.attach(tmp)
            try:
                self._download_any(item, tmp, follow.publish if follow is not None else None)
                return self.cache.commit(tmp, sha, url=item.url, name=item.archive.filename), False
            finally:
                with contextlib.suppress(FileNotFoundError):
                    tmp.unlink()

    def _cached(self, sha: str, size: int, *, evict: bool = False) -> Path | None:
        """The entry if it hashes right; ``evict`` (entry lock held) drops a corrupted one."""
        path = self.cache.lookup(sha, size)
        if path is None:
            return None
        if sha256_file(path) != sha:  # verified on every use
            if evict:
                self.cache.evict(sha)
                self.reporter.message(f"dropped a corrupted cache entry {sha[:16]}…; downloading again")
            return None
        self.cache.touch(sha)
        return path

    def _cached_followed(self, item: PlannedArchive, follow: GrowingFile) -> Path | None:
        """A cache hit hashed while its extraction reads along (no separate pass before it).

        A corrupted entry has then been read into the staging tree: it is dropped and the
        tree is built again, downloading that archive."""
        sha, size = item.archive.sha256, item.archive.size
        path = self.cache.lookup(sha, size)
        if path is None:
            return None
        follow.attach(path)
        h = hashlib.sha256()
        done = 0
        with open(path, "rb") as fh:
            while chunk := fh.read(CHUNK):
                h.update(chunk)
                done += len(chunk)
                follow.publish(done)
        if h.hexdigest() != sha:
            with self.cache.lock(sha, timeout=self.lock_timeout):
                self.cache.evict(sha)
            err = IntegrityError(f"the cache entry for {item.archive.filename} was corrupted; dropped it",
                                 what="sha256", expected=sha, actual=h.hexdigest())
            raise _StreamBroken(err) from err
        self.cache.touch(sha)
        return path

    def _download_any(self, item: PlannedArchive, tmp: Path,
                      watch: Callable[[int], None] | None = None) -> None:
        sent_lock = threading.Lock()  # segmented downloads report from several threads
        urls = [u for u in item.urls if u not in self._bad_urls] or list(item.urls[-1:])
        errors = [self._bad_urls[u] for u in item.urls if u in self._bad_urls and u not in urls]
        for url in urls:
            sent = 0

            def progress(n: int) -> None:
                nonlocal sent
                if self._abort.is_set():
                    raise _Aborted()
                with sent_lock:
                    sent += n
                self.reporter.advance(n)

            try:
                self.transport.download(url, tmp, size=item.archive.size, sha256=item.archive.sha256,
                                        progress=progress, watch=watch)
                return
            except (FetchError, IntegrityError) as exc:  # another URL may serve the right bytes
                self.reporter.advance(-sent)
                self._bad_urls[url] = exc
                if watch is not None and url != urls[-1]:
                    # an extraction already read these bytes: start the tree over, unstreamed
                    raise _StreamBroken(exc) from exc
                errors.append(exc)
                if url != urls[-1]:
                    self.reporter.message(f"{url} failed ({exc}); trying {urls[urls.index(url) + 1]}")
        if len(errors) == 1:
            raise errors[0]
        if all(isinstance(e, IntegrityError) for e in errors):
            raise errors[-1]
        raise FetchError("; ".join(str(e) for e in errors), url=item.url)

    # -- transaction -------------------------------------------------------------------------------
    def install(self, plan: Plan, prefix: Path | str, *, force: bool = False,
                requested: Sequence[str] = ()) -> InstallResult:
        t0 = time.monotonic()
        prefix = canonical_prefix(prefix)
        with prefix_lock(prefix, self.lock_timeout):
            for action in recover(prefix):
                self.reporter.message(action)
            record = None
            if prefix.is_dir():
                try:
                    record = read_record(prefix)
                except PrefixError:
                    if not force:  # its message says to reinstall with --force
                        raise
            if record is not None and record.get("content_key") == plan.content_key() and not force:
                return InstallResult(prefix, plan, noop=True, seconds=time.monotonic() - t0)
            if (record is None and prefix.exists() and not force
                    and (not prefix.is_dir() or any(prefix.iterdir()))):
                raise PrefixError(
                    f"{prefix} exists and does not hold a cudaredist install; refusing to replace "
                    "it. Choose another --prefix, empty it, or pass --force to replace it.",
                    prefix=str(prefix))
            staging = Path(tempfile.mkdtemp(dir=prefix.parent, prefix=f".{prefix.name}.cudaredist-stage-"))
            umask = os.umask(0)
            os.umask(umask)
            os.chmod(staging, 0o777 & ~umask)  # mkdtemp's 0700 would hide the toolkit from other users
            try:
                try:
                    files, downloaded, cached = self._build(plan, staging)
                except _StreamBroken as broken:
                    self.reporter.message(f"{broken.__cause__}; trying the next URL")
                    _rmtree(staging)
                    staging.mkdir()
                    files, downloaded, cached = self._build(plan, staging, stream=False)
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

    def _build(self, plan: Plan, staging: Path, *,
               stream: bool = True) -> tuple[list[FileRecord], int, int]:
        """Download (concurrently) and extract each archive while it downloads (tars and zips; wheels
        once they are there). Biggest first, so the longest extraction starts earliest."""
        self._abort.clear()
        tree = Tree(staging)
        self.reporter.start(plan.total_size, len(plan.items))
        counts = {"downloaded": 0, "cached": 0}
        items = sorted(plan.items, key=lambda it: -it.archive.size)
        # A Windows host cannot rename a file another handle has open: no streaming there.
        streamed = {it for it in items
                    if stream and os.name != "nt" and is_streamable(it.archive.filename)}
        jobs = min(self.jobs, len(items)) or 1
        # A streamed extraction mostly waits for its bytes (a segmented download makes them readable
        # in order late): one thread each, so they never hold the workers a complete archive needs.
        workers = self.extract_workers + len(streamed)
        with ThreadPoolExecutor(jobs, thread_name_prefix="fetch") as fetchers, \
                ThreadPoolExecutor(workers, thread_name_prefix="extract") as extractors:

            def unpack(item: PlannedArchive, path: Path | None, follow: GrowingFile | None) -> None:
                mapper = MAPPERS[item.layout](item, plan.platform)
                after = AFTER_EXTRACT.get(item.layout)
                written: list[str] = []

                def recording(clean: str) -> str | None:
                    rel = mapper(clean)
                    if rel is not None:
                        written.append(rel)
                    return rel

                try:
                    extract(path, tree, component=item.component, archive=item.archive.filename,
                            mapper=recording if after is not None else mapper,
                            fileobj=cast("BinaryIO | None", follow))
                    if follow is not None:
                        # the archive is read; wait for its verdict (size and sha256) before trusting it
                        fetch_of[item].result()
                    if after is not None:
                        after(item, plan.platform, tree, written)
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
                self.reporter.extracted(item.archive.filename)

            fetch_of: dict[PlannedArchive, Future[tuple[Path, bool]]] = {}
            follows = {it: GrowingFile() for it in streamed}
            extractions: set[Future[Any]] = set()
            for it in items:
                fetch_of[it] = fetchers.submit(self.fetch, it, follows.get(it))
                if it in follows:
                    extractions.add(extractors.submit(unpack, it, None, follows[it]))
            by_future = {f: it for it, f in fetch_of.items()}
            pending: set[Future[Any]] = set(fetch_of.values()) | extractions
            try:
                while pending:
                    done, pending = wait(pending, return_when=FIRST_COMPLETED)
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
                self._abort.set()
                for fut in pending:
                    fut.cancel()
                for follow in follows.values():  # unblock extractions following a cancelled download
                    follow.fail(_Aborted())
                if isinstance(exc, DownloadFailed):
                    # an extraction saw its download fail: report the download's own error
                    for f in fetch_of.values():
                        with contextlib.suppress(TimeoutError):
                            err = f.exception(timeout=60)
                            if err is not None and not isinstance(err, _Aborted):
                                raise err  # noqa: B904 - the download error is the real one
                raise
            finally:
                self.reporter.close()
                fetchers.shutdown(wait=True)
                extractors.shutdown(wait=True)
                for follow in follows.values():  # one whose extraction never ran
                    follow.close()
        return tree.finish(), counts["downloaded"], counts["cached"]

    def _complete(self, plan: Plan, staging: Path) -> list[dict[str, str]]:
        """Platform fix-ups from profiles.toml (e.g. ``lib64 -> lib`` on Linux)."""
        made: list[dict[str, str]] = []
        for name, target in platform_rule(plan.platform).links:
            if (staging / target).is_dir() and not os.path.lexists(staging / name):
                try:
                    os.symlink(target, staging / name, target_is_directory=True)
                except OSError:
                    shutil.copytree(staging / target, staging / name, symlinks=True)
                made.append({"path": name, "link": target})
        return made
