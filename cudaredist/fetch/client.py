"""The HTTP client and the rules around it: pooled connections with the OS trust store, the retry
policy, Retry-After, file:// and directory URLs, what an untrusted certificate means, and what a
response's status, length and Content-Range mean (go on, try again, or fail)."""

from __future__ import annotations

import contextlib
import os
import random
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlparse

from cudaredist import __version__
from cudaredist.errors import FetchError, IntegrityError, UsageError

if TYPE_CHECKING:
    import httpx


@dataclass(frozen=True)
class RetryPolicy:
    attempts: int = 5          # tries per URL for one request (not counting resumed progress)
    backoff: float = 0.5       # first sleep; doubles per try, with full jitter
    max_backoff: float = 20.0
    max_retry_after: float = 60.0
    # connect / first-byte timeout of a URL that has a fallback: a mirror that refuses or never
    # answers costs seconds, not attempts x the full timeout
    fallback_after: float = 5.0

    def delay(self, attempt: int, retry_after: float | None = None) -> float:
        if retry_after is not None:
            return min(max(retry_after, 0.0), self.max_retry_after)
        cap = min(self.max_backoff, self.backoff * (2 ** attempt))
        return random.uniform(cap / 2, cap)


def is_local(url: str) -> bool:
    return url.startswith("file:") or "://" not in url


def local_path(url: str) -> Path:
    """The file a ``file://`` URL (or a plain path) names, by this OS's rules: ``file:///C:/x/`` is
    ``C:\\x\\`` on Windows, ``file://server/share/x`` a UNC path; the reverse of ``Path.as_uri``."""
    if url.startswith("file:"):
        from urllib.request import url2pathname  # imported here: 15 ms of every start-up otherwise

        p = urlparse(url)
        local = not p.netloc or p.netloc.lower() == "localhost"
        return Path(url2pathname(p.path if local else f"//{p.netloc}{p.path}"))
    return Path(url)


def make_client(*, timeout: float = 30.0, connections: int = 16) -> httpx.Client:
    """A pooled client: HTTP keep-alive, proxies from the environment, OS trust store."""
    import ssl

    import httpcore
    import httpx
    import truststore

    from cudaredist.trust import LOOPBACK, is_loopback, loopback_name

    ctx = truststore.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    cafile = os.environ.get("SSL_CERT_FILE")
    if cafile:
        try:
            ctx.load_verify_locations(cafile=cafile)
        except (ssl.SSLError, OSError) as exc:
            why = (f"no PEM certificate could be read from it: {exc.reason or exc}"
                   if isinstance(exc, ssl.SSLError) else exc.strerror or str(exc))
            raise UsageError(f"SSL_CERT_FILE={cafile} cannot be used as a CA bundle ({why}); point "
                             "SSL_CERT_FILE at a PEM file of CA certificates, or unset it to use the "
                             "system's trust store only") from exc
    limits = httpx.Limits(max_connections=connections, max_keepalive_connections=connections)

    class Client(httpx.Client):
        """Loopback (trust.is_loopback: 127.0.0.0/8, ``localhost``, ``*.localhost``, ::1) never goes
        through a proxy, whatever NO_PROXY says: the record calls it "a loopback address", so nothing
        else may answer for it. A mount cannot say "any 127.x", so the choice is made per request."""

        def _transport_for_url(self, url: httpx.URL) -> httpx.BaseTransport:
            return self._transport if is_loopback(url.host) else \
                super()._transport_for_url(url)

    class Loopback(httpcore.SyncBackend):
        """``localhost`` and ``*.localhost`` connect to 127.0.0.1 (else ::1), whatever DNS or a hosts
        file says (glibc asks DNS for ``*.localhost``): loopback is what was connected to."""

        def connect_tcp(self, host: str, port: int, *args: Any, **kw: Any) -> httpcore.NetworkStream:
            if not loopback_name(host):
                return super().connect_tcp(host, port, *args, **kw)
            try:
                return super().connect_tcp(LOOPBACK[0], port, *args, **kw)
            except httpcore.ConnectError:
                return super().connect_tcp(LOOPBACK[1], port, *args, **kw)

    client = Client(
        verify=ctx,
        trust_env=True,  # HTTPS_PROXY, HTTP_PROXY, ALL_PROXY, NO_PROXY
        follow_redirects=True,
        timeout=httpx.Timeout(timeout, connect=timeout),
        limits=limits,
        headers={"User-Agent": f"cudaredist/{__version__}", "Accept-Encoding": "identity"},
    )
    # the direct transport (every loopback URL takes it); httpx names no public way to its connections
    client._transport._pool._network_backend = Loopback()  # type: ignore[attr-defined]
    return client


def retry_after_seconds(value: str | None) -> float | None:
    if not value:
        return None
    value = value.strip()
    if value.isdigit():
        return float(value)
    import email.utils  # only for a server that says when to come back (5 ms of start-up otherwise)

    with contextlib.suppress(TypeError, ValueError):
        when = email.utils.parsedate_to_datetime(value)
        return max(0.0, when.timestamp() - time.time())
    return None


def raise_if_untrusted(url: str, exc: Exception) -> None:
    """A certificate the trust store rejects is not transient: fail at once, saying what to do.
    So are a redirect loop, a malformed URL and a scheme httpx does not speak."""
    import ssl

    import httpx

    if isinstance(exc, httpx.TooManyRedirects):
        why = str(exc).rstrip(".")
        raise FetchError(f"{url} redirects too often (a redirect loop?): {why}. Check --base-url and "
                         "--mirror, or the proxy between you and the server.", url=url) from exc
    if isinstance(exc, (httpx.InvalidURL, httpx.UnsupportedProtocol)):
        went = url
        with contextlib.suppress(AttributeError, RuntimeError):  # the URL asked last: a redirect's target
            went = str(exc.request.url)  # type: ignore[union-attr]
        via = f" (it redirects to {went})" if went != url else ""
        raise FetchError(f"cannot fetch {url}{via}: {str(exc).rstrip('.')}. Use an http://, https:// or "
                         "file:// URL, or a directory.", url=url) from exc
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


def host_of(url: str) -> str:
    p = urlparse(url)
    return f"{p.scheme}://{p.netloc}"


class Retryable(Exception):
    """A failure worth another try (after a backoff): a dropped connection, 429, 5xx."""

    def __init__(self, reason: str, retry_after: float | None = None, *, unreachable: bool = False) -> None:
        super().__init__(reason)
        self.retry_after = retry_after
        self.unreachable = unreachable  # no connection could be made: the network, not the server


# said when a host could not be reached at all, as "Name or service not known" alone helps nobody
UNREACHABLE_HINT = ("If this network cannot reach that host, use a mirror (--mirror or CUDAREDIST_MIRROR), "
                    "NVIDIA's wheels from a package index (--source pypi), or --offline with a filled "
                    "cache; behind a proxy, set HTTPS_PROXY.")


def check_status(r: httpx.Response, url: str, total: int | None = None) -> None:
    """Go on (200, 206), try again (429, 5xx, 416 of a file no shorter than declared), or fail."""
    code = r.status_code
    if code in (200, 206):
        return
    if code == 429 or code >= 500:
        raise Retryable(f"HTTP {code}", retry_after_seconds(r.headers.get("retry-after")))
    if code == 416:
        # "bytes */N": the server's file has N bytes; a resume past its end means it is short
        length = r.headers.get("content-range", "").rpartition("/")[2]
        if total is not None and length.isdigit():
            check_size(url, total, int(length))
        raise Retryable("HTTP 416 (range not satisfiable)")
    raise FetchError(f"HTTP {code} for {url}" + (
        " (not found: the mirror or base URL lacks this file)" if code == 404 else ""),
        url=url, status=code)


class RangeIgnored(Exception):
    """A ranged request of a segment was answered with the whole body: the server ignores Range."""


def check_size(url: str, expected: int, actual: int) -> None:
    if actual != expected:
        raise IntegrityError(
            f"size mismatch for {url}: the manifest declares {expected} bytes, got "
            f"{'more than ' + str(expected) if actual > expected else actual}",
            url=url, what="size", expected=expected, actual=actual)


def check_content_range(value: str, pos: int, total: int, url: str) -> None:
    """``value`` ("bytes 100-199/1000") starts at ``pos`` and names the size the manifest declares."""
    m = re.fullmatch(r"bytes ([0-9]{1,20})-[0-9]{1,20}/([0-9]{1,20}|\*)", value.strip())
    if m is None:
        raise Retryable(f"bad Content-Range {value!r} from {url}")
    if int(m[1]) != pos:
        raise Retryable(f"Content-Range {value!r} does not start at {pos}")
    if m[2] != "*":
        check_size(url, total, int(m[2]))
