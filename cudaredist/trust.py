"""Which origins may supply the hashes an install is checked against (pure): pip's secure-origin rule.

Every archive is verified against a sha256 that a manifest (``redistrib_X.Y.Z.json``) or a package
index page lists, so whoever serves that document chooses what runs on the machine. NVIDIA does not
sign its manifests: their authenticity is TLS to NVIDIA's server. A document is believed only from

- an ``https://`` URL (its certificate checked against the OS trust store or ``SSL_CERT_FILE``),
- a local file or directory (``file://`` or a path),
- a loopback address (``localhost`` and ``*.localhost``, connected to loopback whatever they
  resolve to; 127.0.0.0/8, ``::1``): nothing crosses a network,
- a host the user names: ``--trusted-host HOST[:PORT]`` (repeatable) or ``CUDAREDIST_TRUSTED_HOST``
  (space-separated), as pip does; a HOST without a port trusts every port of it.

A lock file is trusted by construction: its hashes were written where the index was trusted, and
an install from it reads no manifest. Archives themselves may come from anywhere (a plain-HTTP
cache): their bytes are checked against the trusted hashes before they are used.
"""

from __future__ import annotations

import ipaddress
import os
from collections.abc import Sequence
from dataclasses import dataclass
from urllib.parse import urlsplit

from cudaredist.errors import TrustError, UsageError

ENV_TRUSTED_HOST = "CUDAREDIST_TRUSTED_HOST"


def _host_port(netloc: str) -> tuple[str, int | None]:
    parts = urlsplit("//" + netloc)
    try:
        port = parts.port
    except ValueError as exc:
        raise UsageError(f"--trusted-host {netloc!r}: the port is not a number (HOST or HOST:PORT)") from exc
    return (parts.hostname or "").lower().rstrip("."), port


LOOPBACK = ("127.0.0.1", "::1")  # what a loopback name is connected to, in this order


def loopback_name(host: str) -> bool:
    """``localhost`` or a name under it: this machine (RFC 6761) by its spelling alone, because the HTTP
    client connects such a name to loopback itself, as curl does (fetch/client.py), never asking DNS
    or a hosts file, which could send it to another machine."""
    host = host.lower().rstrip(".")
    return host == "localhost" or host.endswith(".localhost")


def is_loopback(host: str) -> bool:
    """The one loopback predicate: what the trust rule calls "a loopback address" and what the HTTP
    client (fetch/client.py) sends past any proxy. ``host`` as a URL carries it, any case, a trailing
    dot or IPv6 brackets allowed."""
    if loopback_name(host):
        return True
    try:
        return ipaddress.ip_address(host.lower().removeprefix("[").removesuffix("]")).is_loopback
    except ValueError:
        return False


@dataclass(frozen=True)
class Trust:
    """The user's trusted hosts, and the rule that says whether a URL may supply hashes."""

    hosts: tuple[tuple[str, int | None], ...] = ()

    @classmethod
    def of(cls, hosts: Sequence[str] | None = None) -> Trust:
        """``--trusted-host`` values; when none are given, ``CUDAREDIST_TRUSTED_HOST``."""
        values = list(hosts) if hosts else os.environ.get(ENV_TRUSTED_HOST, "").split()
        out: list[tuple[str, int | None]] = []
        for raw in values:
            value = raw.strip()
            if "://" in value:  # pip takes a bare HOST[:PORT]; a pasted URL means its host
                value = urlsplit(value).netloc
            if not value:
                continue
            if "/" in value or "@" in value:
                raise UsageError(f"--trusted-host {raw!r}: give HOST or HOST:PORT (e.g. "
                                 "cuda-cache.internal:8080), not a URL path")
            host, port = _host_port(value)
            if not host:
                raise UsageError(f"--trusted-host {raw!r} names no host: give HOST or HOST:PORT")
            out.append((host, port))
        return cls(tuple(dict.fromkeys(out)))

    def reason(self, url: str) -> str | None:
        """Why ``url`` may supply hashes (for the record), or None: it may not."""
        if url.startswith("file:") or "://" not in url:
            return "a local directory"
        parts = urlsplit(url)
        scheme = parts.scheme.lower()
        if scheme == "https":
            return "HTTPS"
        host, port = _host_port(parts.netloc)
        if is_loopback(host):
            return "a loopback address"
        port = port or (80 if scheme == "http" else None)
        for h, p in self.hosts:
            if h == host and (p is None or p == port):
                return f"--trusted-host {h}" + (f":{p}" if p is not None else "")
        return None

    def trusted(self, url: str) -> bool:
        return self.reason(url) is not None

    def refused_hop(self, url: str, hops: Sequence[str]) -> str | None:
        """The first URL that a manifest or index page asked at ``url`` was redirected through
        (``hops``, the last one the URL that answered) which may not supply hashes, or None. Judged
        on every use, a cached copy's hops too: what an earlier run trusted is not trusted here."""
        if not self.trusted(url):  # nothing it says is believed anyway (archives only)
            return None
        return next((h for h in hops if not self.trusted(h)), None)


def host_label(url: str) -> str:
    """``HOST:PORT`` as ``--trusted-host`` takes it."""
    parts = urlsplit(url)
    return parts.netloc.rsplit("@", 1)[-1].lower()


def redirected(url: str, hop: str, *, cached: str | None = None) -> TrustError:
    """``url`` (a place that may supply hashes) redirected to ``hop``, which may not; ``cached``: the
    cache folder whose copy came that way (under --offline, where the server is not asked again)."""
    host = host_label(hop)
    what = (f"refusing to use the copy of {url} cached in {cached}: when it was fetched, {url} "
            f"redirected to {hop}" if cached else
            f"refusing to read a manifest or index page through {url}: it redirects to {hop}")
    return TrustError(
        f"{what}, which may not supply hashes (plain HTTP, not a loopback address, not named by "
        f"--trusted-host), so whoever answers for {host} could choose what runs here. Nothing was "
        f"downloaded. Name an https:// URL of that place instead, or pass --trusted-host {host} if "
        "that host and the network to it are yours" + ("; run online to ask the server again." if cached
                                                        else "."), url=hop, host=host)


def refuse(untrusted: Sequence[tuple[str, str]], *, what: str) -> TrustError:
    """Nothing authenticated: every place (``(role, url)``) that could give hashes is plain HTTP."""
    names = " and ".join(f"{role} {url}" for role, url in untrusted)
    labels = list(dict.fromkeys(host_label(u) for _r, u in untrusted))
    hosts, verb = " and ".join(labels), "is" if len(labels) == 1 else "are"
    return TrustError(
        f"refusing to read {what} from {names}: {hosts} {verb} plain HTTP (not a loopback address, not "
        f"named by --trusted-host), and {what} {'list' if what.endswith('s') else 'lists'} the sha256 "
        f"every archive is checked against, so "
        f"whoever can answer for {hosts} could choose what runs here. Nothing was downloaded. Use an "
        "https:// URL instead (certificates are checked against the OS trust store or SSL_CERT_FILE); "
        f"{' '.join(f'--trusted-host {h}' for h in labels)} (or CUDAREDIST_TRUSTED_HOST) if you trust the "
        "host and every network between you and it; or a lock file written where an authenticated place "
        "is reachable (`cudaredist lock TRAIN -o cuda.lock`, then `install --lock cuda.lock`: no manifest "
        "or index page is read, and archives from that host are checked against the lock).",
        url=untrusted[0][1], host=labels[0])


def unreachable(untrusted: tuple[str, str], trusted: Sequence[str], cause: str, *,
                what: str) -> TrustError:
    """The authenticated places gave no answer, and the one left (``(role, url)``) is plain HTTP."""
    role, url = untrusted
    host = host_label(url)
    flag = "--mirror" if role == "the mirror" else ("--index-url" if "index" in role else "--base-url")
    return TrustError(
        f"cannot read {what} from an authenticated place: {', '.join(trusted)} failed ({cause.rstrip('.')}). "
        f"{role[0].upper()}{role[1:]} {url} is plain HTTP, so {what} is not read from it (whoever can "
        f"answer for {host} could choose what runs here); its archives are used only when checked "
        f"against hashes from an authenticated place. Three ways out: serve it over HTTPS ({flag} "
        f"https://...); trust it with --trusted-host {host} (or CUDAREDIST_TRUSTED_HOST) if the host and "
        "the network to it are yours; or install from a lock file written where an authenticated place "
        f"is reachable (`cudaredist lock TRAIN -o cuda.lock`, then `install --lock cuda.lock {flag} "
        f"{url}`: archives from there, hashes from the lock).",
        url=url, host=host)
