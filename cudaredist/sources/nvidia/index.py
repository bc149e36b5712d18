"""NVIDIA's redist server or a mirror of it: base URLs, the index listing, manifests, releases (I/O)."""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlparse

from cudaredist.cache.store import Cache
from cudaredist.errors import CudaRedistError, FetchError, OfflineError, ResolveError, UsageError
from cudaredist.fetch.client import UNREACHABLE_HINT, is_local, local_path
from cudaredist.fetch.transport import Transport
from cudaredist.plan import archive_url, join_url, version_key
from cudaredist.sources.nvidia.manifest import Manifest, parse_manifest
from cudaredist.sources.nvidia.releases import (
    labels_from_listing,
    labels_from_names,
    manifests_link,
    pick_release,
    sort_labels,
)
from cudaredist.trust import Trust, redirected, refuse, unreachable

NVIDIA_BASE_URL = "https://developer.download.nvidia.com/compute/cuda/redist/"
# --channel: NVIDIA's index of each. The preview one holds early-access releases (archives in a pool
# beside it, ../../../pool/...), read only when asked for, as uv treats pre-releases.
CHANNELS = {"release": NVIDIA_BASE_URL,
            "preview": "https://packages.nvidia.com/bin-archive/release/cuda/redist/"}
ENV_BASE_URL = "CUDAREDIST_BASE_URL"
ENV_MIRROR = "CUDAREDIST_MIRROR"
LISTING = "listing.html"


def normalize_base(url: str) -> str:
    """http(s) URLs get a trailing slash; local directories become file:// URLs."""
    url = url.strip()
    if not url:
        raise ResolveError("the base URL is empty")
    scheme = urlparse(url).scheme.lower()
    if scheme in ("http", "https", "file"):
        return url if url.endswith("/") else url + "/"
    if "://" in url:
        raise ResolveError(f"unsupported base URL {url!r}: use http://, https://, file:// or a directory")
    return Path(url).expanduser().absolute().as_uri() + "/"


def channel_base(channel: str, base_url: str | None) -> str:
    """The base URL ``--channel`` means; with ``--base-url`` too, a :class:`UsageError`."""
    name = channel.strip().lower()
    if name not in CHANNELS:
        raise UsageError(f"unknown channel {channel!r}: use {' or '.join(CHANNELS)} (--channel or "
                         "CUDAREDIST_CHANNEL)")
    if base_url:
        raise UsageError(f"--channel {name} and --base-url {base_url} both say which index to read: give "
                         "one (a mirror of the channel goes in --mirror)")
    return CHANNELS[name]


def base_and_mirror(base_url: str | None, mirror: str | None) -> tuple[str, str | None]:
    mirror = mirror or os.environ.get(ENV_MIRROR)
    return (normalize_base(base_url or os.environ.get(ENV_BASE_URL) or CHANNELS["release"]),
            normalize_base(mirror) if mirror else None)


def default_bases(base_url: str | None = None, mirror: str | None = None, *,
                  fallback: bool = True) -> list[str]:
    """Bases to try in order: the mirror (--mirror / CUDAREDIST_MIRROR), then the base URL."""
    base, mirror = base_and_mirror(base_url, mirror)
    return list(dict.fromkeys([mirror, base] if mirror and fallback else [mirror or base]))


@dataclass(frozen=True)
class Bases:
    """Where a run reads the listing and manifests (authenticated bases only) and fetches archives."""

    manifests: tuple[str, ...]   # trusted bases, mirror first
    archives: tuple[str, ...]    # every base, mirror first (its bytes are checked against the manifest)
    # plain-HTTP bases that give archives only, with their role ("the mirror", "the base URL")
    untrusted: tuple[tuple[str, str], ...] = ()


def trusted_bases(base_url: str | None, mirror: str | None, *, fallback: bool, trust: Trust) -> Bases:
    """The mirror and the base URL split by :mod:`cudaredist.trust`: a plain-HTTP mirror serves
    archives, never the manifest; with ``fallback`` off it still serves archives alone, and the
    manifest comes from the base. Nothing authenticated at all is refused here, before any request."""
    base, mirror_url = base_and_mirror(base_url, mirror)
    archives = default_bases(base, mirror_url, fallback=fallback)
    named = [("the mirror", mirror_url)] if mirror_url else []
    if mirror_url != base and (not mirror_url or fallback or not trust.trusted(mirror_url)):
        named.append(("the base URL", base))
    readers = tuple(u for _r, u in named if trust.trusted(u))
    if not readers:
        raise refuse(named, what="the manifest")
    return Bases(readers, tuple(archives), tuple((r, u) for r, u in named if not trust.trusted(u)))


class Index:
    """Lists releases and reads manifests of one or more bases, caching both for --offline."""

    def __init__(self, transport: Transport, cache: Cache, *, offline: bool = False) -> None:
        self.transport = transport
        self.cache = cache
        self.offline = offline
        self._labels: dict[str, list[str]] = {}  # one listing per base and run
        self._manifests: dict[tuple[str, str], Manifest] = {}  # one parse per manifest and run

    def labels(self, base: str, *, quick: bool = False) -> list[str]:
        """Release labels at ``base`` (listed once per run); ``quick``: another base follows, so
        give up on one that does not answer within seconds."""
        if base not in self._labels:
            self._labels[base] = self._list(base, quick)
        return self._labels[base]

    def _list(self, base: str, quick: bool) -> list[str]:
        local = local_path(base) if is_local(base) else None
        if self.offline:  # what the cache holds of the listing and the manifests, and a local base
            found = set(labels_from_names(self.cache.cached_index_names(base)))
            if (listing := stored_index(self.cache, self.transport, base, LISTING, base)) is not None:
                found |= set(labels_from_listing(listing.decode("utf-8", "replace")))
            if local is not None and local.is_dir():
                found |= set(labels_from_names(os.listdir(local)))
            if not found:
                raise OfflineError(
                    f"--offline: no index of {base} is cached in {self.cache.root}; run once online "
                    "(e.g. `cudaredist resolve TRAIN`) to fill the cache", url=base)
            return sort_labels(found)  # highest first, like the online listing
        if local is not None:
            if not local.is_dir():
                raise FetchError(f"the base directory {local} does not exist", url=base)
            return labels_from_names(os.listdir(local))
        data = index_file(self.cache, self.transport, base, LISTING, base,
                          lambda: self.transport.get_bytes(base, quick=quick), offline=False)
        return labels_from_listing(data.decode("utf-8", "replace"))

    def _pick(self, train: str, base: str, quick: bool) -> tuple[str, str]:
        """(the release ``train`` means at ``base``, the base that has it): at the top of a cudaredist
        mirror whose manifests sit deeper (a channel whose archives climb: ``release/cuda/redist/``),
        the folder its top page names, as ``mirror --out DIR`` made it (one level, never a chain)."""
        labels = self.labels(base, quick=quick)
        if not labels and (inner := manifests_link(self._top_page(base))):
            base = join_url(base, inner)
            labels = self.labels(base, quick=quick)
        return pick_release(train, labels, base), base

    def _top_page(self, base: str) -> str:
        if not is_local(base):
            return (self.cache.load_index(base, LISTING) or b"").decode("utf-8", "replace")
        try:
            return (local_path(base) / "index.html").read_text("utf-8", "replace")
        except OSError:
            return ""

    def manifest_bytes(self, base: str, label: str, *, quick: bool = False) -> bytes:
        """``redistrib_<label>.json`` from ``base`` as served (cached for --offline)."""
        name = f"redistrib_{label}.json"
        url = join_url(base, name)
        return index_file(self.cache, self.transport, base, name, url,
                          lambda: self.transport.get_bytes(url, quick=quick), offline=self.offline,
                          check=lambda data: read_manifest(base, label, data))

    def manifest(self, base: str, label: str) -> Manifest:
        """A product's manifest, read once per run however many platforms ask for it."""
        if (base, label) not in self._manifests:
            self._manifests[base, label] = read_manifest(base, label, self.manifest_bytes(base, label))
        return self._manifests[base, label]

    def release(self, train: str, bases: Sequence[str] | Bases) -> Release:
        """Resolve ``train`` against the first authenticated base that has it; archives come from
        every base in order (a plain-HTTP mirror first), less the trusted ones that failed."""
        if not isinstance(bases, Bases):
            bases = Bases(tuple(bases), tuple(bases), ())
        readers = bases.manifests
        errors: list[CudaRedistError] = []
        for i, base in enumerate(readers):
            quick = i < len(readers) - 1
            try:
                label, at = self._pick(train, base, quick)
                data = self.manifest_bytes(at, label, quick=quick)
            except (FetchError, ResolveError) as exc:
                errors.append(exc)
                continue
            archives = tuple(at if b == base else b for b in bases.archives if b not in set(readers[:i]))
            return Release(label, at, archives, read_manifest(at, label, data), data)
        fetches = [e for e in errors if isinstance(e, FetchError)]
        if bases.untrusted and fetches and not all(isinstance(e, OfflineError) for e in fetches):
            # no authenticated answer, and the place left is plain HTTP: say how to get out
            cause = "; ".join(str(e).replace(" " + UNREACHABLE_HINT, "") for e in errors)
            raise unreachable(bases.untrusted[0], readers, cause, what="the manifest") from fetches[0]
        if len(errors) == 1:
            raise errors[0]
        detail = "; ".join(str(e) for e in errors)
        resolves = [e for e in errors if isinstance(e, ResolveError)]
        if not fetches:  # every base answered, none has the train: keep what they publish
            available = sorted({t for e in resolves for t in e.available}, key=version_key)
            raise ResolveError(detail, requested=train, where=", ".join(readers), available=tuple(available))
        if len(fetches) == len(errors) and all(isinstance(e, OfflineError) for e in fetches):
            raise OfflineError(detail, url=fetches[0].url)
        raise FetchError(detail, url=fetches[0].url)


def index_file(cache: Cache, transport: Transport, base: str, name: str, url: str, get: Callable[[], bytes],
               *, offline: bool, check: Callable[[bytes], object] | None = None) -> bytes:
    """A file of an index (a manifest, a project page) at ``url``, ``name`` in ``base``'s cache: under
    --offline the cached copy, else through the cache's index TTL; a local base is read as it is.

    The URLs a copy was redirected through are stored with it and judged by this run's trust
    (:mod:`cudaredist.trust`) on each use: one that only an earlier run trusted (its
    ``--trusted-host``) is asked again, refused under --offline. ``transport.moved`` then says
    which URL answered, fetched or cached, for the record."""
    trust = transport.trust or Trust()
    if offline:
        data = stored_index(cache, transport, base, name, url)
        if data is None and not is_local(url):
            raise OfflineError(f"--offline: {url} is not in the cache {cache.root}; run the same command "
                               "online once", url=url)
        return get() if data is None else data
    if is_local(url):
        return get()
    data, hops = cache.index_page(base, name, lambda: (get(), transport.moved.get(url, ())), check=check,
                                  usable=lambda hops: trust.refused_hop(url, hops) is None)
    _answered(transport, url, hops)
    return data


def stored_index(cache: Cache, transport: Transport, base: str, name: str, url: str) -> bytes | None:
    """The cached copy of ``url`` (``name`` in ``base``'s cache) for --offline, or None; refused
    when a URL it came through may not supply hashes in this run."""
    data = cache.load_index(base, name)
    if data is None:
        return None
    hops = cache.index_hops(base, name) or ()  # not kept (an older cudaredist's copy): asked directly
    if (hop := (transport.trust or Trust()).refused_hop(url, hops)) is not None:
        raise redirected(url, hop, cached=str(cache.index_dir(base)))
    _answered(transport, url, hops)
    return data


def _answered(transport: Transport, url: str, hops: tuple[str, ...]) -> None:
    if hops:
        transport.moved[url] = hops
    else:
        transport.moved.pop(url, None)


def read_manifest(base: str, label: str, data: bytes) -> Manifest:
    """``redistrib_<label>.json`` of ``base`` parsed, each archive's path joined onto ``base``: a
    path that leaves its server refuses the whole manifest, before any download."""
    manifest = parse_manifest(data, label=label, source=join_url(base, f"redistrib_{label}.json"))
    for c in manifest.components.values():
        for a in (*c.archives.values(), *(a for v in c.variants.values() for a in v.values())):
            archive_url(base, a.relative_path, c.key)
    return manifest


@dataclass(frozen=True)
class Release:
    """One resolved release: the base its manifest was read from (an authenticated one), the bases
    its archives are fetched from in order, and the manifest bytes."""

    label: str
    base: str
    archive_bases: tuple[str, ...]
    manifest: Manifest
    data: bytes
