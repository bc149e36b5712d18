"""NVIDIA's redist server or a mirror of it: base URLs, the index listing, manifests, releases (I/O)."""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from urllib.parse import urlparse

from cudaredist.errors import CudaRedistError, FetchError, OfflineError, ResolveError
from cudaredist.fetch.cache import Cache
from cudaredist.fetch.client import is_local, local_path
from cudaredist.fetch.transport import Transport
from cudaredist.plan import Plan, join_url, version_key
from cudaredist.sources.nvidia.manifest import Manifest, parse_manifest
from cudaredist.sources.nvidia.planner import make_plan
from cudaredist.sources.nvidia.releases import (
    check_train,
    labels_from_listing,
    labels_from_names,
    pick_release,
    sort_labels,
)

NVIDIA_BASE_URL = "https://developer.download.nvidia.com/compute/cuda/redist/"
ENV_BASE_URL = "CUDAREDIST_BASE_URL"
ENV_MIRROR = "CUDAREDIST_MIRROR"
LISTING = "listing.html"


def normalize_base(url: str) -> str:
    """http(s) URLs get a trailing slash; local directories become file:// URLs."""
    url = url.strip()
    if not url:
        raise ResolveError("the base URL is empty")
    scheme = urlparse(url).scheme.lower()
    if scheme in ("http", "https"):
        return url if url.endswith("/") else url + "/"
    if scheme == "file":
        return url if url.endswith("/") else url + "/"
    if "://" in url:
        raise ResolveError(f"unsupported base URL {url!r}: use http://, https://, file:// or a directory")
    return Path(url).expanduser().absolute().as_uri() + "/"


def default_bases(base_url: str | None = None, mirror: str | None = None, *,
                  fallback: bool = True) -> list[str]:
    """Bases to try in order: the mirror (--mirror / CUDAREDIST_MIRROR), then the base URL."""
    base = normalize_base(base_url or os.environ.get(ENV_BASE_URL) or NVIDIA_BASE_URL)
    mirror = mirror or os.environ.get(ENV_MIRROR) or None
    bases = [normalize_base(mirror)] if mirror else []
    if not bases or fallback:
        bases.append(base)
    return list(dict.fromkeys(bases))


class Index:
    """Lists releases and reads manifests of one or more bases, caching both for --offline."""

    def __init__(self, transport: Transport, cache: Cache, *, offline: bool = False) -> None:
        self.transport = transport
        self.cache = cache
        self.offline = offline
        self._labels: dict[str, list[str]] = {}  # one listing per base and run

    def labels(self, base: str, *, quick: bool = False) -> list[str]:
        """Release labels at ``base`` (listed once per run); ``quick``: another base follows, so
        give up on one that does not answer within seconds."""
        if base not in self._labels:
            self._labels[base] = self._list(base, quick)
        return self._labels[base]

    def _list(self, base: str, quick: bool) -> list[str]:
        if self.offline:
            return self._cached_labels(base)
        if is_local(base):
            d = local_path(base)
            if not d.is_dir():
                raise FetchError(f"the base directory {d} does not exist", url=base)
            return labels_from_names(os.listdir(d))
        data = self.transport.get_bytes(base, quick=quick)
        self.cache.store_index(base, LISTING, data)
        return labels_from_listing(data.decode("utf-8", "replace"))

    def _cached_labels(self, base: str) -> list[str]:
        listing = self.cache.load_index(base, LISTING)
        names = self.cache.cached_index_names(base)
        found = set(labels_from_names(names))
        if listing is not None:
            found |= set(labels_from_listing(listing.decode("utf-8", "replace")))
        if is_local(base) and local_path(base).is_dir():
            found |= set(labels_from_names(os.listdir(local_path(base))))
        if not found:
            raise OfflineError(
                f"--offline: no index of {base} is cached in {self.cache.root}; run once online "
                "(e.g. `cudaredist resolve TRAIN`) to fill the cache", url=base)
        return sort_labels(found)  # highest first, like the online listing

    def manifest_bytes(self, base: str, label: str, *, quick: bool = False) -> bytes:
        """``redistrib_<label>.json`` from ``base`` as served (cached for --offline)."""
        name = f"redistrib_{label}.json"
        url = join_url(base, name)
        if self.offline:
            data = self.cache.load_index(base, name)
            if data is None and is_local(base):
                data = self.transport.get_bytes(url)
            if data is None:
                raise OfflineError(
                    f"--offline: {name} ({url}) is not in the cache {self.cache.root}", url=url)
            return data
        data = self.transport.get_bytes(url, quick=quick)
        if not is_local(base):
            self.cache.store_index(base, name, data)
        return data

    def manifest(self, base: str, label: str) -> Manifest:
        return parse_manifest(self.manifest_bytes(base, label), label=label,
                              source=join_url(base, f"redistrib_{label}.json"))

    def release(self, train: str, bases: Sequence[str]) -> Release:
        """Resolve ``train`` against the first base that has it; the others become fallbacks."""
        errors: list[CudaRedistError] = []
        for i, base in enumerate(bases):
            quick = i < len(bases) - 1
            try:
                label = pick_release(check_train(train), self.labels(base, quick=quick), base)
                data = self.manifest_bytes(base, label, quick=quick)
            except (FetchError, ResolveError) as exc:
                if isinstance(exc, OfflineError) and len(bases) == 1:
                    raise
                errors.append(exc)
                continue
            manifest = parse_manifest(data, label=label, source=join_url(base, f"redistrib_{label}.json"))
            others = tuple(b for b in bases if b != base) if i == 0 else ()
            return Release(label, base, others, manifest, data)
        if len(errors) == 1:
            raise errors[0]
        detail = "; ".join(str(e) for e in errors)
        resolves = [e for e in errors if isinstance(e, ResolveError)]
        fetches = [e for e in errors if isinstance(e, FetchError)]
        if not fetches:  # every base answered, none has the train: keep what they publish
            available = sorted({t for e in resolves for t in e.available}, key=version_key)
            raise ResolveError(detail, requested=train, where=", ".join(bases), available=tuple(available))
        if len(fetches) == len(errors) and all(isinstance(e, OfflineError) for e in fetches):
            raise OfflineError(detail, url=fetches[0].url)
        raise FetchError(detail, url=fetches[0].url)


@dataclass(frozen=True)
class Release:
    """One resolved release: where its manifest was read, the other bases, and the manifest bytes."""

    label: str
    base: str
    fallbacks: tuple[str, ...]
    manifest: Manifest
    data: bytes


def plan_release(release: Release, platforms: Sequence[str], *, profile: str | None,
                 components: Sequence[str]) -> list[Plan]:
    """One plan per platform, the other bases as fallback URLs; every plan is checked before
    anything is fetched."""
    plans = []
    for platform in platforms:
        plan = make_plan(release.manifest, platform=platform, base_url=release.base, profile=profile,
                         components=components)
        if release.fallbacks:
            plan = replace(plan, items=tuple(
                replace(i, fallback_urls=tuple(join_url(b, i.archive.relative_path)
                                               for b in release.fallbacks))
                for i in plan.items))
        plans.append(plan)
    return plans


def resolve_plan(index: Index, train: str, *, bases: Sequence[str], platform: str, profile: str | None,
                 components: Sequence[str] = ()) -> Plan:
    """The plan of ``train`` for one platform, from the first base that has it."""
    return plan_release(index.release(train, bases), [platform], profile=profile, components=components)[0]
