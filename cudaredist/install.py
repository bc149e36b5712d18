"""The install transaction: fetch (cache first), extract into a staging tree, swap it into place.

A prefix is either as it was or complete: the tree is built beside it and renamed
over it only after every archive verified and extracted; the previous tree is kept
until the new one is in place and restored if the swap fails. A per-prefix file
lock serialises installers; leftovers of a killed run are cleaned by the next one.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import os
import shutil
import stat
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO, cast

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
from cudaredist.oserrors import local_error
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
from cudaredist.tree.extract import FileRecord, Tree, extract, is_streamable

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
        self.cache = cache
        self.reporter = reporter or Silent()
        self.jobs = max(1, jobs)
        self.lock_timeout = lock_timeout_default() if lock_timeout is None else lock_timeout
        self.extract_workers = extract_workers or max(1, min(4, os.cpu_count() or 1))
        self.fetcher = Fetcher(transport, cache, reporter=self.reporter, offline=offline,
                               lock_timeout=self.lock_timeout)

    # -- transaction -------------------------------------------------------------------------------
    def install(self, plan: Plan, prefix: Path | str, *, reinstall: bool = False,
                replace_foreign: bool = False, requested: Sequence[str] = ()) -> InstallResult:
        """``reinstall``: build the tree again even if the prefix holds this plan (or its record is
        unreadable); ``replace_foreign``: replace a prefix that holds no cudaredist install."""
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
                raise local_error(exc, doing="create the staging tree in", path=prefix.parent,
                                  option="--prefix") from exc
            umask = os.umask(0)
            os.umask(umask)
            os.chmod(staging, 0o777 & ~umask)  # mkdtemp's 0700 would hide the toolkit from other users
            try:
                try:
                    files, downloaded, cached = self._build(plan, staging)
                except StreamBroken as broken:
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
        """Download (concurrently) and extract each archive while it downloads (tar) or once it is
        there (zip). Biggest first, so the longest extraction starts earliest."""
        self.fetcher.abort.clear()
        tree = Tree(staging)
        self.reporter.start(plan.total_size, len(plan.items))
        counts = {"downloaded": 0, "cached": 0}
        items = sorted(plan.items, key=lambda it: -it.archive.size)
        # A Windows host cannot rename a file another handle has open: no streaming there.
        streamed = {it for it in items
                    if stream and os.name != "nt" and is_streamable(it.archive.filename)}
        jobs = min(self.jobs, len(items)) or 1
        with ThreadPoolExecutor(jobs, thread_name_prefix="fetch") as fetchers, \
                ThreadPoolExecutor(self.extract_workers, thread_name_prefix="extract") as extractors:

            def unpack(item: PlannedArchive, path: Path | None, follow: GrowingFile | None) -> None:
                how = layout(item.layout)
                mapper = how.mapper(item, plan.platform)
                after = how.after
                written: list[str] = []

                def recording(clean: str) -> str | None:
                    rel = mapper(clean)
                    if rel is not None:
                        written.append(rel)
                    return rel

                try:
                    try:
                        extract(path, tree, component=item.component, archive=item.archive.filename,
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
                fetch_of[it] = fetchers.submit(self.fetcher.fetch, it, follows.get(it))
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
                self.fetcher.abort.set()
                for fut in pending:
                    fut.cancel()
                for follow in follows.values():  # unblock extractions following a cancelled download
                    follow.fail(Aborted())
                if isinstance(exc, DownloadFailed):
                    # an extraction saw its download fail: report the download's own error
                    for f in fetch_of.values():
                        with contextlib.suppress(TimeoutError):
                            err = f.exception(timeout=60)
                            if err is not None and not isinstance(err, Aborted):
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
                    made.append({"path": name, "link": target})
                except OSError:
                    shutil.copytree(staging / target, staging / name, symlinks=True)
                    # uninstall removes a directory where a link was recorded only when it made it
                    made.append({"path": name, "link": target, "copy": "directory"})
        return made
