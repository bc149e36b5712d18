"""The concurrent fetcher's unit of work: one planned archive -> verified bytes in the cache.

Cache first (every hit is re-hashed), then each of the archive's URLs in turn (a mirror,
then the base URL); a URL that failed once in a run is not asked again, and one that does not
answer at all is given up within seconds while another remains. With a :class:`GrowingFile`,
the bytes are published as they land so an extraction can read along.

A download is written to ``tmp/<sha256>.part`` in the cache. When a run is killed, the next
one resumes it with Range (the whole sha256 is still checked; a mismatch starts over from
zero); a partial older than :data:`PARTIAL_DAYS` is dropped. A cancelled run (Ctrl-C)
and a download that fails its checks leave no partial.
"""

from __future__ import annotations

import hashlib
import threading
import time
from pathlib import Path

from cudaredist.cache.store import PARTIAL_DAYS, Cache, evict
from cudaredist.errors import FetchError, IntegrityError, OfflineError
from cudaredist.fetch.ranges import GrowingFile, discard_partial, resume_point
from cudaredist.fetch.transport import Aborted, Transport
from cudaredist.hashing import CHUNK
from cudaredist.localfs import disk_error
from cudaredist.plan import PlannedArchive
from cudaredist.progress import Reporter


class StreamBroken(Exception):
    """A download an extraction read along failed (on one URL while others remain, or a resumed
    start that did not verify): rebuild without streaming. ``args[0]``: the failure."""


class Fetcher:
    def __init__(self, transport: Transport, cache: Cache, *, reporter: Reporter | None = None,
                 offline: bool = False, lock_timeout: float | None = None) -> None:
        self.transport = transport
        self.cache = cache
        self.reporter = reporter or Reporter()
        self.offline = offline
        self.lock_timeout = lock_timeout  # None: the wait its cache was made with (--lock-timeout)
        self._bad_urls: dict[str, FetchError | IntegrityError] = {}  # failed in this run: not asked again
        self.served: dict[str, str] = {}  # sha256 -> the URL whose bytes verified (this run's downloads)

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
        if cached:
            self.reporter.advance(item.archive.size)
        if follow is not None:
            if cached:
                follow.attach(path)
                follow.publish(item.archive.size)
            follow.finish()
        return path, cached

    def _fetch(self, item: PlannedArchive, follow: GrowingFile | None) -> tuple[Path, bool]:
        sha, size = item.archive.sha256, item.archive.size
        hit = self._cached(sha, size, item.archive.filename, follow=follow)
        if hit is not None:
            return hit, True
        if self.offline:
            raise OfflineError(
                f"--offline: {item.archive.filename} ({item.component}, sha256 {sha[:16]}…) is not in "
                f"the cache {self.cache.root}; its URL is {item.url}. Run the same command online once, "
                "or fill the cache from a mirror.", url=item.url)
        with self.cache.lock(sha, timeout=self.lock_timeout, waiting=self.transport.check):
            # another process may have fetched it meanwhile
            hit = self._cached(sha, size, item.archive.filename, drop=True)
            if hit is not None:
                return hit, True
            part = self.cache.partial(sha)  # (a .meta beside it that a killed commit left is rewritten)
            try:
                offset = self._resumable(part, size)
                if follow is not None:
                    part.touch()
                    follow.attach(part)
                self._download_any(item, part, follow, offset)
                committed = self.cache.commit(part, sha, url=self.served.get(sha, item.url),
                                              name=item.archive.filename)
                discard_partial(part)  # its marker
                return committed, False
            except (Aborted, KeyboardInterrupt, IntegrityError):
                discard_partial(part)  # cancelled, or bytes that fail their checks: nothing to resume
                raise
            except OSError as exc:
                # the transport translates every network and source-file failure; an OSError left
                # is a write into the cache (disk full, read-only, no permission), not another URL's
                # business: no fallback, nothing to resume, and the message names the cache
                discard_partial(part)
                part.with_suffix(".meta").unlink(missing_ok=True)  # commit() writes the .meta first
                raise disk_error(exc, path=part, where=self.cache.root, cache=True,
                                 needs=item.archive.size) from exc
            except BaseException:
                if resume_point(part, size) == 0:
                    discard_partial(part)
                raise  # a network failure: the next run resumes from what arrived

    def _resumable(self, part: Path, size: int) -> int:
        """Bytes of an earlier run's partial download to keep (0: start afresh)."""
        try:
            age = time.time() - part.stat().st_mtime
        except OSError:
            return 0
        offset = resume_point(part, size) if age < PARTIAL_DAYS * 86400 else 0
        if offset == 0:
            discard_partial(part)
        else:
            self.reporter.message(f"resuming {part.name[:16]}… from byte {offset} of {size}")
        return offset

    def _cached(self, sha: str, size: int, name: str, *, follow: GrowingFile | None = None,
                drop: bool = False) -> Path | None:
        """The entry if it hashes right (verified on every use); ``drop`` (entry lock held) drops a
        corrupted one. ``follow`` reads the entry along as it is hashed: a corrupted one has then
        been read into the staging tree, so it is dropped and the tree is built again."""
        path = self.cache.lookup(sha, size)
        if path is None:
            return None
        h = hashlib.sha256()
        try:
            if follow is not None:
                follow.attach(path)
            with open(path, "rb") as fh:
                while chunk := fh.read(CHUNK):
                    h.update(chunk)
                    if follow is not None:
                        follow.publish(fh.tell())
        except FileNotFoundError:  # removed since the lookup (a cache clear or prune): not cached
            return None
        if h.hexdigest() != sha:
            if follow is not None:
                with self.cache.lock(sha, timeout=self.lock_timeout):
                    evict(path)
                err = IntegrityError(f"the cache entry for {name} was corrupted; dropped it",
                                     what="sha256", expected=sha, actual=h.hexdigest())
                raise StreamBroken(err) from err
            if drop:
                evict(path)
                self.reporter.message(f"dropped a corrupted cache entry {sha[:16]}…; downloading again")
            return None
        self.cache.touch(sha)
        return path

    def _download_any(self, item: PlannedArchive, tmp: Path, follow: GrowingFile | None,
                      offset: int) -> None:
        sent_lock = threading.Lock()  # segmented downloads report from several threads
        attempts = [u for u in item.urls if u not in self._bad_urls] or list(item.urls[-1:])
        errors = [self._bad_urls[u] for u in item.urls if u in self._bad_urls and u not in attempts]
        while attempts:
            url = attempts.pop(0)
            sent = 0

            def progress(n: int) -> None:
                nonlocal sent
                self.transport.check()
                with sent_lock:
                    sent += n
                self.reporter.advance(n)

            try:
                self.transport.download(url, tmp, size=item.archive.size, sha256=item.archive.sha256,
                                        progress=progress, watch=follow.publish if follow else None,
                                        offset=offset, quick=bool(attempts))
                self.served[item.archive.sha256] = url
                return
            except (FetchError, IntegrityError) as exc:  # another URL may serve the right bytes
                self.reporter.advance(-sent)
                resumed = offset > 0 and isinstance(exc, IntegrityError) and exc.what == "sha256"
                if resumed:
                    # the kept prefix of an earlier run may be what is wrong: start over from zero
                    self.reporter.message(f"a resumed download of {item.archive.filename} did not "
                                          "verify; downloading it again from the start")
                    discard_partial(tmp)
                    offset = 0
                    attempts.insert(0, url)
                else:
                    self._bad_urls[url] = exc
                    errors.append(exc)
                if isinstance(exc, FetchError):
                    offset = resume_point(tmp, item.archive.size)  # what arrived is kept
                if follow is not None and follow.available and attempts:
                    # an extraction already read these bytes: start the tree over, unstreamed
                    raise StreamBroken(exc) from exc
                if attempts and not resumed:
                    self.reporter.message(f"{url} failed ({exc}); trying {attempts[0]}")
        if len(errors) == 1:
            raise errors[0]
        if all(isinstance(e, IntegrityError) for e in errors):
            raise errors[-1]
        raise FetchError("; ".join(str(e) for e in errors), url=item.url)
