"""HTTP and file transport: one client, retries with backoff, resumable and segmented downloads.

Everything that touches the network lives here. Foreign exceptions are translated
into :class:`FetchError` / :class:`IntegrityError` at this boundary.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import threading
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO, TypeVar

from cudaredist.errors import FetchError, IntegrityError
from cudaredist.fetch.client import (
    UNREACHABLE_HINT,
    RangeIgnored,
    Retryable,
    RetryPolicy,
    check_content_range,
    check_size,
    check_status,
    host_of,
    is_local,
    local_path,
    make_client,
    raise_if_untrusted,
)
from cudaredist.fetch.ranges import Marker, OrderedHasher, Progress, hash_prefix, marker_path
from cudaredist.hashing import CHUNK
from cudaredist.trust import Trust, redirected

if TYPE_CHECKING:
    import socket

    import httpx

_T = TypeVar("_T")


class Aborted(Exception):
    """The run was cancelled (Ctrl-C, or another download failed): stop, keep nothing."""


class Transport(contextlib.AbstractContextManager["Transport"]):
    """Fetches URLs (http, https, file) with retries; thread-safe."""

    def __init__(self, client: httpx.Client | None = None, *, retry: RetryPolicy | None = None,
                 connections: int = 8, segment_size: int = 4 << 20,
                 sleep: Callable[[float], None] | None = None) -> None:
        self._client = client
        self._client_lock = threading.Lock()
        self.retry = retry or RetryPolicy()
        self.segment_size = segment_size
        # cancel(): every attempt, backoff and open socket of this transport stops at once
        self.cancelled = threading.Event()
        self.sleep: Callable[[float], object] = self.cancelled.wait if sleep is None else sleep
        self._sockets: set[socket.socket] = set()
        self._unreachable: set[str] = set()  # hosts that refused or never answered, in this run
        # bounds the open connections of all downloads together (--jobs)
        self.slots = threading.BoundedSemaphore(max(1, connections))
        self.connections = max(1, connections)
        # who may supply hashes (the source sets the user's --trusted-host); judged on every hop
        self.trust: Trust | None = None
        # a document's URL -> the URLs it was redirected through, the last the one that answered
        # (fetched in this run, or read from the cache's copy: sources/nvidia/index.py index_file)
        self.moved: dict[str, tuple[str, ...]] = {}

    @property
    def client(self) -> httpx.Client:
        with self._client_lock:
            if self._client is None:
                self._client = make_client(connections=self.connections * 2)
            return self._client

    def close(self) -> None:
        if self._client is not None:
            self._client.close()

    # -- cancelling ------------------------------------------------------------------------------
    def cancel(self) -> None:
        """Stop every request of this transport now: backoff sleeps wake, and reads blocked on a
        silent server are cut (their sockets shut down), so worker threads finish within moments."""
        self.cancelled.set()
        with self._client_lock:
            sockets = list(self._sockets)
            self._sockets.clear()
        if sockets:  # (socket is imported with httpx, by the connection that opened them)
            import socket

            for sock in sockets:
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)

    def resume(self) -> None:
        """Accept requests again after :meth:`cancel` (cut connections are not reused)."""
        self.cancelled.clear()

    def check(self) -> None:
        if self.cancelled.is_set():
            raise Aborted()

    def _trace(self, event: str, info: dict[str, object]) -> None:
        # httpcore reports each new connection: keep its socket so cancel() can cut a blocked read
        if event == "connection.connect_tcp.complete":
            import socket

            stream = info.get("return_value")
            get = getattr(stream, "get_extra_info", None)
            sock = get("socket") if get is not None else None
            if isinstance(sock, socket.socket):
                with self._client_lock:
                    self._sockets = {s for s in self._sockets if s.fileno() != -1}
                    self._sockets.add(sock)
                if self.cancelled.is_set():
                    self.cancel()  # connected as the run was cancelled: cut it as cancel() cut the rest

    def _request_options(self, url: str, quick: bool) -> dict[str, Any]:
        """Per-request options: the connection tracer, and short timeouts when a fallback waits."""
        import httpx

        self.check()
        opts: dict[str, Any] = {"extensions": {"trace": self._trace}}
        if quick:
            if host_of(url) in self._unreachable:
                raise FetchError(f"{host_of(url)} did not answer earlier in this run; not asking it again",
                                 url=url)
            t = self.client.timeout
            short = self.retry.fallback_after
            opts["timeout"] = httpx.Timeout(
                connect=min(t.connect or short, short), read=min(t.read or short, short),
                write=t.write, pool=t.pool)
        return opts

    def _retryable(self, url: str, exc: Exception, answered: bool = True, quick: bool = False) -> Retryable:
        """``exc`` of one request as a reason to try again, or raised as it stands (one that is not
        transient; with a fallback waiting, a request that got no response at all)."""
        import httpx

        if isinstance(exc, Retryable):
            return exc
        raise_if_untrusted(url, exc)
        self.check()
        if quick and not answered:
            if isinstance(exc, (httpx.ConnectError, httpx.TimeoutException)):
                self._unreachable.add(host_of(url))
            raise FetchError(f"{url} did not answer ({type(exc).__name__}: {exc or 'no response'}); "
                             "trying the next base", url=url) from exc
        return Retryable(f"{type(exc).__name__}: {exc}",
                         unreachable=isinstance(exc, (httpx.ConnectError, httpx.ConnectTimeout)))

    def __exit__(self, *_: object) -> None:
        self.close()

    # -- small documents -------------------------------------------------------------------------
    def get_bytes(self, url: str, *, limit: int = 64 << 20,
                  headers: Mapping[str, str] | None = None, quick: bool = False) -> bytes:
        """A whole small document (index page, manifest), retried like archives.

        ``quick``: another base can serve it, so a host that does not answer is given up fast."""
        if is_local(url):
            try:
                return local_path(url).read_bytes()
            except OSError as exc:
                raise FetchError(f"cannot read {url}: {exc.strerror or exc}", url=url) from exc
        return self._with_retries(url, lambda: self._get_small(url, limit, headers, quick))

    def _get_small(self, url: str, limit: int, headers: Mapping[str, str] | None = None,
                   quick: bool = False) -> bytes:
        import httpx

        answered = False
        try:
            with self.client.stream("GET", url, headers=headers, **self._request_options(url, quick)) as r:
                answered = True
                self._check_hops(url, [str(h.url) for h in r.history[1:]] + [str(r.url)])
                check_status(r, url)
                buf = bytearray()
                for chunk in r.iter_bytes():
                    buf += chunk
                    if len(buf) > limit:
                        raise FetchError(f"{url} is larger than {limit} bytes; refusing it", url=url)
                return bytes(buf)
        except (httpx.RequestError, httpx.InvalidURL) as exc:
            raise self._retryable(url, exc, answered, quick) from exc  # retried by _with_retries

    def _check_hops(self, url: str, hops: list[str]) -> None:
        """A manifest or index page carries the hashes: a URL that may supply them must not be
        redirected to one that may not (a loopback base to a plain-HTTP host, https to http)."""
        if hops == [url]:
            return
        hop = (self.trust or Trust()).refused_hop(url, hops)
        if hop is not None:
            raise redirected(url, hop)
        self.moved[url] = tuple(hops)

    def content_length(self, url: str) -> int:
        return self._with_retries(url, lambda: self._head_length(url))

    def _head_length(self, url: str) -> int:
        r = self.client.head(url, **self._request_options(url, False))
        check_status(r, url)
        length = r.headers.get("content-length", "")
        if not length.isdigit():
            raise FetchError(f"cannot get the size of {url} (HTTP {r.status_code}, no Content-Length)",
                             url=url, status=r.status_code)
        return int(length)

    # -- archives --------------------------------------------------------------------------------
    def download(self, url: str, dest: Path, *, size: int, sha256: str,
                 progress: Progress = lambda _n: None, watch: Progress | None = None,
                 offset: int = 0, quick: bool = False) -> None:
        """Fetch ``url`` into ``dest``, checking size and sha256 as the bytes arrive.

        ``watch(n)`` is told whenever the first ``n`` bytes of ``dest`` are in place (n only
        grows), so a reader can follow the download. ``offset``: the first bytes of ``dest``
        already hold that many bytes of the file (a partial download of an earlier run, see
        :func:`resume_point`); they are hashed and the rest is asked for with Range. ``quick``:
        another URL can serve the file, so one that does not answer is given up within seconds.
        On return ``dest`` holds exactly the expected bytes; on error it holds a prefix that
        :func:`resume_point` measures, or anything after an :class:`IntegrityError`.
        """
        offset = 0 if is_local(url) else min(max(offset, 0), size)  # a local copy starts afresh
        h, offset = hash_prefix(dest, offset)
        if offset:
            progress(offset)
            if watch is not None:
                watch(offset)
        if is_local(url):
            self._copy_local(url, dest, size, h, progress, watch)
        elif size - offset >= 2 * self.segment_size and self.connections > 1:
            h = self._segmented(url, dest, size, progress, watch, start=offset, seed=h, quick=quick)
        elif offset < size:
            marker_path(dest).unlink(missing_ok=True)  # one stream: the file's length is its valid prefix
            with open(dest, "r+b" if offset else "wb") as fh:
                fh.seek(offset)
                fh.truncate()
                self._stream_range(url, fh, offset, size, size, progress, h, on_write=watch, quick=quick)
        actual = h.hexdigest()
        if actual != sha256:
            raise IntegrityError(
                f"sha256 mismatch for {url}: expected {sha256}, got {actual}. The download was "
                "discarded; the server or a proxy served different bytes than the manifest lists.",
                url=url, what="sha256", expected=sha256, actual=actual)

    def _copy_local(self, url: str, dest: Path, size: int, h: hashlib._Hash, progress: Progress,
                    watch: Progress | None) -> None:
        n = 0

        def read(fi: BinaryIO) -> bytes:
            try:
                return fi.read(CHUNK)
            except OSError as exc:
                raise FetchError(f"cannot read {url}: {exc.strerror or exc}", url=url) from exc

        try:
            fi = open(local_path(url), "rb")  # noqa: SIM115 - closed below; its errors are the source's
        except FileNotFoundError as exc:
            raise FetchError(f"{url} does not exist (404)", url=url, status=404) from exc
        except OSError as exc:
            raise FetchError(f"cannot read {url}: {exc.strerror or exc}", url=url) from exc
        # a failed write to ``dest`` stays an OSError: the caller reports it as a local disk error
        # buffered: a short write of a full disk is written on, or raises, never dropped
        with fi, open(dest, "wb") as fo:
            while (chunk := read(fi)) and (n := n + len(chunk)) <= size:
                h.update(chunk)
                fo.write(chunk)
                progress(len(chunk))
                if watch is not None:
                    fo.flush()  # a reader follows through another handle
                    watch(n)
        check_size(url, size, n)

    def _segmented(self, url: str, dest: Path, size: int, progress: Progress,
                   watch: Progress | None = None, *, start: int = 0,
                   seed: hashlib._Hash, quick: bool = False) -> hashlib._Hash:
        """Fetch bytes [start, size) as concurrent byte ranges (``seed`` has hashed the ones before);
        falls back to one stream without Range. A marker beside ``dest`` keeps the length of the
        prefix in place, for a later run to resume from if this one is killed. Returns the file's hash."""
        n = min(self.connections, max(2, (size - start) // self.segment_size))
        bounds = [(start + i * (size - start) // n, start + (i + 1) * (size - start) // n)
                  for i in range(n)]
        with contextlib.closing(Marker(dest, start)) as mark:  # closed however this ends: see Marker
            with open(dest, "r+b" if start else "wb") as fh:
                fh.truncate(size)
            hasher = OrderedHasher(dest, bounds, (mark.update, *([watch] if watch else [])), seed)
            errors: list[BaseException] = []

            def run(idx: int) -> None:
                start, end = bounds[idx]
                try:
                    with open(dest, "r+b") as fh:
                        fh.seek(start)
                        self._stream_range(url, fh, start, end, size, progress, None,
                                           on_write=functools.partial(hasher.advance, idx),
                                           ranged=True, quick=quick)
                except BaseException as exc:  # re-raised in the caller's thread
                    errors.append(exc)
                finally:
                    hasher.finish(idx)

            # The first range tells whether the server honours Range at all.
            first = threading.Thread(target=run, args=(0,), daemon=True)
            first.start()
            if not hasher.first_response.wait(timeout=self.client.timeout.read or 60):
                first.join()
            if hasher.range_ok:
                threads = [threading.Thread(target=run, args=(i,), daemon=True) for i in range(1, n)]
                for t in threads:
                    t.start()
                for t in threads:
                    t.join()
            first.join()
            hasher.join()  # h has hashed every range
        real = [e for e in errors if not isinstance(e, RangeIgnored)]
        if real:
            raise next((e for e in real if not isinstance(e, Aborted)), real[0])
        if errors or not hasher.range_ok:
            # The server answered a ranged request with the whole body: use one plain stream.
            # "r+b", not "wb": a reader following ``watch`` may already hold the first bytes.
            h = hashlib.sha256()
            marker_path(dest).unlink(missing_ok=True)
            with open(dest, "r+b") as out:
                self._stream_range(url, out, 0, size, size, progress, h, on_write=watch, quick=quick)
            return h
        return seed

    def _stream_range(self, url: str, fh: BinaryIO, start: int, end: int, total: int,
                      progress: Progress, h: hashlib._Hash | None, *,
                      on_write: Callable[[int], None] | None = None, ranged: bool = False,
                      quick: bool = False) -> None:
        """Write bytes [start, end) of ``url`` to ``fh`` (positioned at ``start``), resuming with Range.

        ``on_write(pos)`` is told where the bytes in place end, first when a response starts.
        ``ranged`` marks one segment of a segmented download: it always asks for a range and
        raises :class:`RangeIgnored` when the server answers with the whole body instead.
        Failures count toward the retry budget only while no bytes arrive.
        """
        import httpx

        pos = start
        failures = 0
        while True:
            headers = {}
            want_range = ranged or pos > 0
            if want_range:
                headers["Range"] = f"bytes={pos}-{end - 1}" if end < total or ranged else f"bytes={pos}-"
            got = skip = 0
            answered = False
            try:
                with self.slots, self.client.stream("GET", url, headers=headers,
                                                    **self._request_options(url, quick)) as r:
                    answered = True
                    check_status(r, url, total)
                    if r.status_code == 200:
                        declared = r.headers.get("content-length", "")
                        if declared.isdigit():  # the whole file, and the server says how long it is
                            check_size(url, total, int(declared))
                        if want_range:
                            if ranged:
                                raise RangeIgnored()
                            # Resume refused: the whole body again. Skip the bytes already in place
                            # (and hashed) rather than start over, so a reader following the file
                            # never sees it shrink; changed content still fails the final sha256.
                            skip = pos
                    elif want_range:
                        check_content_range(r.headers.get("content-range", ""), pos, total, url)
                    else:
                        raise Retryable(f"HTTP 206 to a request without Range from {url}")
                    if on_write is not None:
                        on_write(pos)
                    # Unsized iteration: every byte that arrived is kept when the connection breaks.
                    for chunk in r.iter_bytes():
                        if skip:
                            chunk, skip = chunk[skip:], max(0, skip - len(chunk))
                            if not chunk:
                                continue
                        if pos + len(chunk) > end:
                            if end == total:
                                raise IntegrityError(
                                    f"{url} sent more than the {total} bytes the manifest declares; "
                                    "refusing it", url=url, what="size", expected=total,
                                    actual=f">{total}")
                            chunk = chunk[: end - pos]
                        fh.write(chunk)
                        if h is not None:
                            h.update(chunk)
                        pos += len(chunk)
                        got += len(chunk)
                        progress(len(chunk))
                        if on_write is not None:
                            fh.flush()  # the hasher reads these bytes back through another handle
                            on_write(pos)
                        if pos >= end and end < total:
                            break  # a segment is complete; the last one reads on to catch extra bytes
                if pos >= end:
                    return
                raise Retryable(f"connection closed after {pos} of {total} bytes")
            except (Retryable, httpx.RequestError, httpx.InvalidURL) as exc:
                failures = 1 if got else failures + 1
                self._backoff(url, failures, self._retryable(url, exc, answered, quick))

    def _backoff(self, url: str, failures: int, exc: Retryable) -> None:
        self.check()
        if failures >= self.retry.attempts:
            hint = f". {UNREACHABLE_HINT}" if exc.unreachable else ""
            raise FetchError(f"giving up on {url} after {failures} attempts: {exc}{hint}", url=url) from exc
        self.sleep(self.retry.delay(failures - 1, exc.retry_after))
        self.check()

    def _with_retries(self, url: str, fn: Callable[[], _T]) -> _T:
        """``fn()`` (one small request) again after a dropped connection, 429 or 5xx, with backoff."""
        import httpx

        failures = 0
        while True:
            try:
                return fn()
            except (Retryable, httpx.RequestError, httpx.InvalidURL) as exc:
                failures += 1
                self._backoff(url, failures, self._retryable(url, exc))

