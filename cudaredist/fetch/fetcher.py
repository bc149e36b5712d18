"""The concurrent fetcher's unit of work: one planned archive -> verified bytes in the cache.

Cache first (every hit is re-hashed), then each of the archive's URLs in turn (a mirror,
then the base URL); a URL that failed once in a run is not asked again. With a
:class:`GrowingFile`, the bytes are published as they land so an extraction can read along.
"""

from __future__ import annotations

import contextlib
import hashlib
import threading
from collections.abc import Callable
from pathlib import Path

from cudaredist.errors import CacheError, FetchError, IntegrityError, OfflineError
from cudaredist.fetch.cache import CHUNK, Cache, sha256_file
from cudaredist.fetch.growing import GrowingFile
from cudaredist.fetch.transport import Transport
from cudaredist.oserrors import local_error
from cudaredist.plan import PlannedArchive
from cudaredist.progress import Reporter, Silent


class Aborted(Exception):
    pass


class StreamBroken(Exception):
    """A followed download failed on one URL while others remain: rebuild without streaming."""


class Fetcher:
    def __init__(self, transport: Transport, cache: Cache, *, reporter: Reporter | None = None,
                 offline: bool = False, lock_timeout: float = 600.0) -> None:
        self.transport = transport
        self.cache = cache
        self.reporter = reporter or Silent()
        self.offline = offline
        self.lock_timeout = lock_timeout
        self.abort = threading.Event()
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
            except OSError as exc:  # the local side: the network's errors arrive translated
                raise local_error(exc, doing=f"write the download of {item.archive.filename} to",
                                  path=self.cache.tmp, option="--cache-dir",
                                  cls=CacheError) from exc
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
            raise StreamBroken(err) from err
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
                if self.abort.is_set():
                    raise Aborted()
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
                    raise StreamBroken(exc) from exc
                errors.append(exc)
                if url != urls[-1]:
                    self.reporter.message(f"{url} failed ({exc}); trying {urls[urls.index(url) + 1]}")
        if len(errors) == 1:
            raise errors[0]
        if all(isinstance(e, IntegrityError) for e in errors):
            raise errors[-1]
        raise FetchError("; ".join(str(e) for e in errors), url=item.url)
