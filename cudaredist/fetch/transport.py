"""HTTP and file transport: one client, retries with backoff, resumable and segmented downloads.

Everything that touches the network lives here. Foreign exceptions are translated
into :class:`FetchError` / :class:`IntegrityError` at this boundary.
"""

from __future__ import annotations

import contextlib
import email.utils
import functools
import hashlib
import os
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO
from urllib.parse import unquote, urlparse

from cudaredist import __version__
from cudaredist.errors import FetchError, IntegrityError

if TYPE_CHECKING:
    import httpx

CHUNK = 1 << 20
Progress = Callable[[int], None]


def _noop(_: int) -> None:
    pass


@dataclass(frozen=True)
class RetryPolicy:
    attempts: int = 5          # tries per URL for one request (not counting resumed progress)
    backoff: float = 0.5       # first sleep; doubles per try, with full jitter
    max_backoff: float = 20.0
    max_retry_after: float = 60.0

    def delay(self, attempt: int, retry_after: float | None = None) -> float:
        if retry_after is not None:
            return min(max(retry_after, 0.0), self.max_retry_after)
        cap = min(self.max_backoff, self.backoff * (2 ** attempt))
        return random.uniform(cap / 2, cap)


class _Retryable(Exception):
    def __init__(self, reason: str, retry_after: float | None = None, *, unreachable: bool = False) -> None:
        super().__init__(reason)
        self.retry_after = retry_after
        self.unreachable = unreachable  # no connection could be made: the network, not the server


# said when a host could not be reached at all, as "Name or service not known" alone helps nobody
UNREACHABLE_HINT = ("If this network cannot reach that host, use a mirror (--mirror or CUDAREDIST_MIRROR), "
                    "NVIDIA's wheels from a package index (--source pypi), or --offline with a filled "
                    "cache; behind a proxy, set HTTPS_PROXY.")


def is_local(url: str) -> bool:
    return url.startswith("file:") or "://" not in url


def local_path(url: str) -> Path:
    if url.startswith("file:"):
        p = urlparse(url)
        return Path(unquote(p.path if not p.netloc else f"//{p.netloc}{p.path}"))
    return Path(url)


def make_client(*, timeout: float = 30.0, connections: int = 16) -> httpx.Client:
    """A pooled client: HTTP keep-alive, proxies from the environment, OS trust store."""
    import ssl

    import httpx
    import truststore

    ctx = truststore.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    cafile = os.environ.get("SSL_CERT_FILE")
    if cafile:
        ctx.load_verify_locations(cafile=cafile)
    return httpx.Client(
        verify=ctx,
        trust_env=True,  # HTTPS_PROXY, HTTP_PROXY, ALL_PROXY, NO_PROXY
        follow_redirects=True,
        timeout=httpx.Timeout(timeout, connect=timeout),
        limits=httpx.Limits(max_connections=connections, max_keepalive_connections=connections),
        headers={"User-Agent": f"cudaredist/{__version__}", "Accept-Encoding": "identity"},
    )


def _retry_after(value: str | None) -> float | None:
    if not value:
        return None
    value = value.strip()
    if value.isdigit():
        return float(value)
    with contextlib.suppress(TypeError, ValueError):
        when = email.utils.parsedate_to_datetime(value)
        return max(0.0, when.timestamp() - time.time())
    return None


class Transport:
    """Fetches URLs (http, https, file) with retries; thread-safe."""

    def __init__(self, client: httpx.Client | None = None, *, retry: RetryPolicy | None = None,
                 connections: int = 8, segment_size: int = 4 << 20,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        self._client = client
        self._client_lock = threading.Lock()
        self.retry = retry or RetryPolicy()
        self.segment_size = segment_size
        self.sleep = sleep
        # bounds the open connections of all downloads together (--jobs)
        self.slots = threading.BoundedSemaphore(max(1, connections))
        self.connections = max(1, connections)

    @property
    def client(self) -> httpx.Client:
        with self._client_lock:
            if self._client is None:
                self._client = make_client(connections=self.connections * 2)
            return self._client

    def close(self) -> None:
        if self._client is not None:
            self._client.close()

    def __enter__(self) -> Transport:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    # -- small documents -------------------------------------------------------------------------
    def get_bytes(self, url: str, *, limit: int = 64 << 20) -> bytes:
        """A whole small document (index page, manifest), retried like archives."""
        if is_local(url):
            try:
                return local_path(url).read_bytes()
            except OSError as exc:
                raise FetchError(f"cannot read {url}: {exc.strerror or exc}", url=url) from exc
        return self._with_retries(url, lambda: self._get_small(url, limit))

    def _get_small(self, url: str, limit: int) -> bytes:
        import httpx

        try:
            with self.client.stream("GET", url) as r:
                self._check_status(r, url)
                buf = bytearray()
                for chunk in r.iter_bytes():
                    buf += chunk
                    if len(buf) > limit:
                        raise FetchError(f"{url} is larger than {limit} bytes; refusing it", url=url)
                return bytes(buf)
        except (httpx.RequestError, httpx.InvalidURL) as exc:
            _raise_if_untrusted(url, exc)
            raise _Retryable(f"{type(exc).__name__}: {exc}", unreachable=_unreachable(exc)) from exc

    # -- archives --------------------------------------------------------------------------------
    def download(self, url: str, dest: Path, *, size: int, sha256: str,
                 progress: Progress = _noop, watch: Progress | None = None) -> None:
        """Fetch ``url`` into ``dest``, checking size and sha256 as the bytes arrive.

        ``watch(n)`` is told whenever the first ``n`` bytes of ``dest`` are in place (n only
        grows), so a reader can follow the download. On return ``dest`` holds exactly the
        expected bytes; on error its content is undefined and the caller deletes it.
        """
        if is_local(url):
            self._copy_local(url, dest, size=size, sha256=sha256, progress=progress, watch=watch)
            return
        if size >= 2 * self.segment_size and self.connections > 1:
            actual = self._segmented(url, dest, size, progress, watch)
        else:
            h = hashlib.sha256()
            with open(dest, "wb", buffering=0) as fh:
                self._stream_range(url, fh, 0, size, size, progress, h,
                                   on_write=_follower(watch, 0) if watch else None)
            actual = h.hexdigest()
        if actual != sha256:
            raise IntegrityError(
                f"sha256 mismatch for {url}: expected {sha256}, got {actual}. The download was "
                "discarded; the server or a proxy served different bytes than the manifest lists.",
                url=url, what="sha256", expected=sha256, actual=actual)

    def _copy_local(self, url: str, dest: Path, *, size: int, sha256: str, progress: Progress,
                    watch: Progress | None = None) -> None:
        src = local_path(url)
        h = hashlib.sha256()
        n = 0
        try:
            fi = open(src, "rb")  # noqa: SIM115 - closed below
        except FileNotFoundError as exc:
            raise FetchError(f"{url} does not exist (404)", url=url, status=404) from exc
        except OSError as exc:
            raise FetchError(f"cannot read {url}: {exc.strerror or exc}", url=url) from exc
        # an OSError writing ``dest`` is this machine's, not the mirror's: it goes up as it is
        with fi, open(dest, "wb", buffering=0) as fo:
            while True:
                try:
                    chunk = fi.read(CHUNK)
                except OSError as exc:
                    raise FetchError(f"cannot read {url}: {exc.strerror or exc}", url=url) from exc
                if not chunk:
                    break
                n += len(chunk)
                if n > size:
                    break
                h.update(chunk)
                fo.write(chunk)
                progress(len(chunk))
                if watch is not None:
                    watch(n)
        _check_size(url, size, n)
        if h.hexdigest() != sha256:
            raise IntegrityError(f"sha256 mismatch for {url}: expected {sha256}, got {h.hexdigest()}",
                                 url=url, what="sha256", expected=sha256, actual=h.hexdigest())

    def _segmented(self, url: str, dest: Path, size: int, progress: Progress,
                   watch: Progress | None = None) -> str:
        """Fetch ``size`` bytes as concurrent byte ranges; falls back to one stream without Range."""
        n = min(self.connections, max(2, size // self.segment_size))
        bounds = [(i * size // n, (i + 1) * size // n) for i in range(n)]
        with open(dest, "wb") as fh:
            fh.truncate(size)
        hasher = _OrderedHasher(dest, bounds, watch)
        errors: list[BaseException] = []

        def run(idx: int) -> None:
            start, end = bounds[idx]
            try:
                with open(dest, "r+b") as fh:
                    fh.seek(start)
                    self._stream_range(url, fh, start, end, size, progress, None,
                                       on_write=functools.partial(hasher.advance, idx),
                                       ranged=True)
            except BaseException as exc:  # re-raised in the caller's thread
                errors.append(exc)
            finally:
                hasher.finish(idx)

        # The first range tells whether the server honours Range at all.
        first = threading.Thread(target=run, args=(0,), daemon=True)
        first.start()
        if not hasher.wait_for_first_response(timeout=self.client.timeout.read or 60):
            first.join()
        if hasher.range_ok():
            threads = [threading.Thread(target=run, args=(i,), daemon=True) for i in range(1, n)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
        first.join()
        hashing = hasher.result()
        real = [e for e in errors if not isinstance(e, _RangeIgnored)]
        if real:
            raise real[0]
        if errors or not hasher.range_ok():
            # The server answered a ranged request with the whole body: use one plain stream.
            # "r+b", not "wb": a reader following ``watch`` may already hold the first bytes.
            h = hashlib.sha256()
            with open(dest, "r+b", buffering=0) as out:
                self._stream_range(url, out, 0, size, size, progress, h,
                                   on_write=_follower(watch, 0) if watch else None)
            return h.hexdigest()
        return hashing

    def _stream_range(self, url: str, fh: BinaryIO, start: int, end: int, total: int,
                      progress: Progress, h: hashlib._Hash | None, *,
                      on_write: Callable[[int], None] | None = None, ranged: bool = False) -> None:
        """Write bytes [start, end) of ``url`` to ``fh`` (positioned at ``start``), resuming with Range.

        ``ranged`` marks one segment of a segmented download: it always asks for a range and
        raises :class:`_RangeIgnored` when the server answers with the whole body instead.
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
            got = 0
            skip = 0
            try:
                with self.slots, self.client.stream("GET", url, headers=headers) as r:
                    self._check_status(r, url, total)
                    if r.status_code == 200:
                        declared = r.headers.get("content-length", "")
                        if declared.isdigit():  # the whole file, and the server says how long it is
                            _check_size(url, total, int(declared))
                        if want_range:
                            if ranged:
                                raise _RangeIgnored()
                            # Resume refused: the whole body again. Skip the bytes already in place
                            # (and hashed) rather than start over, so a reader following the file
                            # never sees it shrink; changed content still fails the final sha256.
                            skip = pos
                    elif want_range:
                        _check_content_range(r.headers.get("content-range", ""), pos, total, url)
                    else:
                        raise _Retryable(f"HTTP 206 to a request without Range from {url}")
                    if on_write is not None:
                        on_write(0)
                    # Unsized iteration: every byte that arrived is kept when the connection breaks.
                    for chunk in r.iter_bytes():
                        if skip:
                            dropped = min(skip, len(chunk))
                            skip -= dropped
                            chunk = chunk[dropped:]
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
                            on_write(len(chunk))
                        if pos >= end and end < total:
                            break  # a segment is complete; the last one reads on to catch extra bytes
                if pos >= end:
                    return
                raise _Retryable(f"connection closed after {pos} of {total} bytes")
            except _Retryable as exc:
                failures = 1 if got else failures + 1
                self._backoff(url, failures, exc)
            except (httpx.RequestError, httpx.InvalidURL) as exc:
                _raise_if_untrusted(url, exc)
                failures = 1 if got else failures + 1
                self._backoff(url, failures, _Retryable(f"{type(exc).__name__}: {exc}",
                                                        unreachable=_unreachable(exc)))

    def _backoff(self, url: str, failures: int, exc: _Retryable) -> None:
        if failures >= self.retry.attempts:
            hint = f". {UNREACHABLE_HINT}" if exc.unreachable else ""
            raise FetchError(f"giving up on {url} after {failures} attempts: {exc}{hint}", url=url) from exc
        self.sleep(self.retry.delay(failures - 1, exc.retry_after))

    def _with_retries(self, url: str, fn: Callable[[], bytes]) -> bytes:
        failures = 0
        while True:
            try:
                return fn()
            except _Retryable as exc:
                failures += 1
                self._backoff(url, failures, exc)

    @staticmethod
    def _check_status(r: httpx.Response, url: str, total: int | None = None) -> None:
        code = r.status_code
        if code in (200, 206):
            return
        if code == 429 or code >= 500:
            raise _Retryable(f"HTTP {code}", _retry_after(r.headers.get("retry-after")))
        if code == 416:
            # "bytes */N": the server's file has N bytes; a resume past its end means it is short
            length = r.headers.get("content-range", "").rpartition("/")[2]
            if total is not None and length.isdigit():
                _check_size(url, total, int(length))
            raise _Retryable("HTTP 416 (range not satisfiable)")
        raise FetchError(f"HTTP {code} for {url}" + (
            " (not found: the mirror or base URL lacks this file)" if code == 404 else ""),
            url=url, status=code)


class _RangeIgnored(Exception):
    pass


def _unreachable(exc: Exception) -> bool:
    import httpx

    return isinstance(exc, (httpx.ConnectError, httpx.ConnectTimeout))


def _raise_if_untrusted(url: str, exc: Exception) -> None:
    """A certificate the trust store rejects is not transient: fail at once, saying what to do.
    So are a redirect loop, a malformed URL and a scheme httpx does not speak."""
    import ssl

    import httpx

    if isinstance(exc, httpx.TooManyRedirects):
        why = str(exc).rstrip(".")
        raise FetchError(f"{url} redirects too often (a redirect loop?): {why}. Check --base-url and "
                         "--mirror, or the proxy between you and the server.", url=url) from exc
    if isinstance(exc, (httpx.InvalidURL, httpx.UnsupportedProtocol)):
        raise FetchError(f"cannot fetch {url}: {exc}. Use an http://, https:// or file:// URL, or a "
                         "directory.", url=url) from exc
    if not isinstance(exc, httpx.TransportError):  # e.g. a body that cannot be decoded
        raise FetchError(f"cannot fetch {url}: {type(exc).__name__}: {exc}", url=url) from exc
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, ssl.SSLCertVerificationError):
            raise FetchError(
                f"the TLS certificate of {url} is not trusted ({seen.verify_message or seen}). Behind a "
                "TLS-inspecting proxy, point SSL_CERT_FILE at a PEM bundle holding its CA.",
                url=url) from exc
        seen = seen.__cause__ or seen.__context__


def _check_size(url: str, expected: int, actual: int) -> None:
    if actual != expected:
        raise IntegrityError(
            f"size mismatch for {url}: the manifest declares {expected} bytes, got "
            f"{'more than ' + str(expected) if actual > expected else actual}",
            url=url, what="size", expected=expected, actual=actual)


def _check_content_range(value: str, pos: int, total: int, url: str) -> None:
    # "bytes 100-199/1000"
    try:
        unit, rest = value.split(" ", 1)
        first = int(rest.split("-", 1)[0])
        length = rest.rsplit("/", 1)[1]
    except (ValueError, IndexError):
        raise _Retryable(f"bad Content-Range {value!r} from {url}") from None
    if unit != "bytes" or first != pos:
        raise _Retryable(f"Content-Range {value!r} does not start at {pos}")
    if length.isdigit() and int(length) != total:
        _check_size(url, total, int(length))


class _OrderedHasher:
    """Hashes a file being written by several ranges, in order, while they download.

    The bytes are read back from the page cache right behind the writers, so no
    second pass over the file is needed once the last range arrives.
    """

    def __init__(self, path: Path, bounds: list[tuple[int, int]],
                 watch: Progress | None = None) -> None:
        self.path = path
        self.bounds = bounds
        self.watch = watch
        self.written = [0] * len(bounds)
        self.finished = [False] * len(bounds)
        self.cond = threading.Condition()
        self.first_response = threading.Event()
        self._range_ok: bool | None = None
        self._digest: str | None = None
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def advance(self, idx: int, n: int) -> None:
        if idx == 0 and not self.first_response.is_set():
            self._range_ok = True
            self.first_response.set()
        with self.cond:
            self.written[idx] += n
            self.cond.notify_all()

    def finish(self, idx: int) -> None:
        if idx == 0 and not self.first_response.is_set():
            self._range_ok = False
            self.first_response.set()
        with self.cond:
            self.finished[idx] = True
            self.cond.notify_all()

    def wait_for_first_response(self, timeout: float) -> bool:
        return self.first_response.wait(timeout)

    def range_ok(self) -> bool:
        return bool(self._range_ok)

    def _run(self) -> None:
        h = hashlib.sha256()
        # Unbuffered: read-ahead would keep bytes of the pre-sized file that are not written yet.
        with open(self.path, "rb", buffering=0) as fh:
            for idx, (start, end) in enumerate(self.bounds):
                done = 0
                while start + done < end:
                    with self.cond:
                        while self.written[idx] <= done and not self.finished[idx]:
                            self.cond.wait()
                        avail = self.written[idx]
                        if avail <= done and self.finished[idx]:
                            self._digest = ""  # range failed; caller reports its error
                            return
                    fh.seek(start + done)
                    todo = avail - done
                    while todo:
                        data = fh.read(min(todo, CHUNK))
                        if not data:
                            break
                        h.update(data)
                        todo -= len(data)
                        done += len(data)
                    if self.watch is not None:
                        self.watch(start + done)
        self._digest = h.hexdigest()

    def result(self) -> str:
        with self.cond:
            for i in range(len(self.finished)):
                self.finished[i] = True
            self.cond.notify_all()
        self._thread.join()
        return self._digest or ""


def _follower(watch: Progress, start: int) -> Callable[[int], None]:
    """Turns per-write byte counts of one in-order stream into "first n bytes are in place"."""
    pos = start

    def on_write(n: int) -> None:
        nonlocal pos
        pos += n
        watch(pos)

    return on_write
