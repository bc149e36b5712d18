"""The PyPI source: a train resolves through NVIDIA's ``cuda-toolkit`` metapackage to a plan of wheels (I/O).

The plan's items are wheels (``layout="wheel"``): the installer downloads, verifies,
caches and extracts them like redist archives, and :mod:`cudaredist.sources.pypi.wheels` maps their
members into the same tree. Works with any index that speaks the Simple API (PEP 691
JSON, or PEP 503 HTML), so a PyPI proxy or a local ``file://`` index works too.
"""

from __future__ import annotations

import contextlib
import os
import zipfile
from dataclasses import dataclass
from functools import partial

from packaging.utils import canonicalize_name
from packaging.version import Version

from cudaredist.cache.store import Cache
from cudaredist.errors import FetchError, IntegrityError, ManifestError, OfflineError, PlanError, ResolveError
from cudaredist.fetch.client import UNREACHABLE_HINT, is_local, local_path
from cudaredist.fetch.transport import Transport
from cudaredist.plan import Archive, PlannedArchive
from cudaredist.sources.nvidia.index import index_file, normalize_base
from cudaredist.sources.nvidia.releases import check_train, pick_release
from cudaredist.sources.pypi.simple import IndexFile, parse_simple_page
from cudaredist.sources.pypi.wheels import (
    Metadata,
    parse_version,
    parse_wheel_name,
    release_label,
    wheel_data,
    wheel_metadata,
)
from cudaredist.trust import Trust, refuse, unreachable

LAYOUT = "wheel"
# PEP 691 content negotiation: JSON (it carries sizes) before HTML.
ACCEPT = ("application/vnd.pypi.simple.v1+json, application/vnd.pypi.simple.v1+html;q=0.2, "
          "text/html;q=0.1")
PAGE_LIMIT = 32 << 20


def default_index_url(url: str | None = None) -> str:
    """``--index-url`` > ``PIP_INDEX_URL`` > PyPI; always with a trailing slash."""
    return normalize_base(url or os.environ.get("PIP_INDEX_URL") or "https://pypi.org/simple/")


@dataclass(frozen=True)
class Release:
    version: Version
    file: IndexFile

    @property
    def label(self) -> str:
        return release_label(str(self.version))

    @property
    def date(self) -> str:
        return self.file.upload_time[:10]


class WheelIndex:
    """Project pages and small files of one package index, cached for ``--offline``.

    The pages carry the sha256 every wheel is checked against, so they are read only from an
    authenticated index (:mod:`cudaredist.trust`). A ``mirror`` is another Simple-API index with the
    same wheels (a PyPI proxy, a cache): when it is plain HTTP its pages only say where each wheel
    is, fetched from there first and checked against the index's hashes; an authenticated mirror
    also answers for the pages when the index does not (``no_fallback``: instead of it).
    """

    def __init__(self, transport: Transport, cache: Cache, *, index_url: str | None = None,
                 offline: bool = False, mirror: str | None = None, no_fallback: bool = False,
                 trust: Trust | None = None) -> None:
        self.transport = transport
        self.cache = cache
        self.index_url = default_index_url(index_url)
        self.mirror_url = normalize_base(mirror) if mirror and mirror.strip() else None
        self.no_fallback = no_fallback and self.mirror_url is not None
        self.trust = trust or Trust.of()
        self.offline = offline
        self.data = wheel_data()
        self._pages: dict[str, dict[Version, list[IndexFile]]] = {}
        self.served: dict[str, str] = {}  # project -> the index whose page (hashes) was used
        self._mirror_pages: dict[str, dict[str, str]] = {}
        self._metadata: dict[str, Metadata] = {}  # metapackage wheel -> its METADATA, read once
        self.notes: list[str] = []

    # -- project pages -----------------------------------------------------------------------------
    def readers(self) -> list[str]:
        """The indexes whose pages (hashes) are believed, in order; refused when there is none."""
        mirror = self.mirror_url
        if mirror is not None and self.no_fallback and self.trust.trusted(mirror):
            return [mirror]
        out = [u for u in (self.index_url, mirror) if u is not None and self.trust.trusted(u)]
        if not out:
            named = [("the package index", self.index_url)]
            if mirror is not None and mirror != self.index_url:
                named.append(("the mirror", mirror))
            raise refuse(named, what="the index pages")
        return list(dict.fromkeys(out))

    @property
    def pages_from_the_mirror_only(self) -> bool:
        """--no-fallback with an authenticated mirror: its pages stand in for the index's."""
        return self.no_fallback and self.readers() == [self.mirror_url]

    def files(self, project: str) -> dict[Version, list[IndexFile]]:
        """The wheels of ``project`` on its page, by version (other files of the page left out)."""
        name = canonicalize_name(project)
        if name in self._pages:
            return self._pages[name]
        readers = self.readers()
        errors: list[FetchError] = []
        for i, root in enumerate(readers):
            url, quick = f"{root}{name}/", i < len(readers) - 1
            try:
                data = index_file(self.cache, self.transport, root, f"simple-{name}", url,
                                  partial(self._get_page, root, url, name, quick=quick), offline=self.offline)
            except FetchError as exc:
                errors.append(exc)
                continue
            found: dict[Version, list[IndexFile]] = {}
            for f in parse_simple_page(data, url):
                if (parsed := parse_wheel_name(f.filename)) is not None and parsed[0] == name:
                    found.setdefault(parsed[1], []).append(f)
            self._pages[name] = found
            self.served[name] = root
            return found
        if self.pages_from_the_mirror_only and errors[0].status == 404:
            raise FetchError(f"the mirror {self.mirror_url} has no project {name}, and --no-fallback forbids "
                             f"its page at the package index {self.index_url}: add the project to the "
                             "mirror, or drop --no-fallback", url=errors[0].url, status=404) from errors[0]
        mirror = self.mirror_url
        if mirror is not None and not self.trust.trusted(mirror) and not all(
                e.status == 404 or isinstance(e, OfflineError) for e in errors):
            cause = "; ".join(str(e).replace(" " + UNREACHABLE_HINT, "") for e in errors)
            raise unreachable(("the mirror", mirror), readers, cause, what="the index pages") from errors[0]
        if len(errors) == 1:
            raise errors[0]
        raise FetchError("; ".join(map(str, errors)), url=errors[0].url, status=errors[-1].status)

    def _get_page(self, root: str, url: str, name: str, *, quick: bool = False) -> bytes:
        local = is_local(url)
        try:
            if local:
                return self.transport.get_bytes(url + "index.html")
            return self.transport.get_bytes(url, limit=PAGE_LIMIT, headers={"Accept": ACCEPT}, quick=quick)
        except FetchError as exc:
            if not (isinstance(exc.__cause__, FileNotFoundError) if local else exc.status == 404):
                raise
            why = f"no {url}index.html" if local else f"HTTP 404 for {url}"
            raise FetchError(f"the index {root} has no project {name} ({why})", url=url, status=404) from exc

    def planned(self, project: str, chosen: IndexFile, component: str, version: str, needed_by: str, *,
                release: str, platform: str, product: str = "") -> PlannedArchive:
        """``chosen`` as a planned wheel, its published sha256 required. Fetched from the mirror's copy
        first (its bytes are checked against the index's sha256), the index's URL after it unless
        --no-fallback, which refuses a wheel the mirror does not list."""
        if len(chosen.sha256) != 64 or any(c not in "0123456789abcdef" for c in chosen.sha256):
            raise IntegrityError(
                f"the index lists no sha256 for {chosen.filename} ({chosen.url}); cudaredist installs only "
                "files whose digest the index publishes", url=chosen.url, what="sha256",
                expected="a published sha256", actual=chosen.sha256 or "none")
        name, mirror = canonicalize_name(project), self.mirror_url
        served = self.served.get(name)
        # where the plain-HTTP mirror serves the wheel (its page gives URLs only), read once per project
        if mirror is not None and not self.offline and served != mirror and name not in self._mirror_pages:
            page_url = f"{mirror}{name}/"
            try:
                data = self._get_page(mirror, page_url, name, quick=not self.no_fallback)
                self._mirror_pages[name] = {f.filename: f.url for f in parse_simple_page(data, page_url)}
            except (FetchError, ManifestError) as exc:
                self._mirror_pages[name] = {}
                self.notes.append(f"the mirror {mirror} gave no page for {name} ({exc}); its wheels "
                                  f"come from {self.index_url}")
        at_mirror = self._mirror_pages.get(name, {}).get(chosen.filename)
        if at_mirror is None and self.no_fallback and served != mirror:
            raise PlanError(f"the mirror {mirror} does not list {chosen.filename} (needed by "
                            f"{needed_by}), and --no-fallback forbids {chosen.url}",
                            component=project, release=release, platform=platform)
        fallbacks = (chosen.url,) if at_mirror is not None and not self.no_fallback else ()
        archive = Archive(chosen.filename, chosen.sha256, self.size(chosen))
        return PlannedArchive(component, version, archive, at_mirror or chosen.url, layout=LAYOUT,
                              fallback_urls=fallbacks, product=product)

    def size(self, f: IndexFile) -> int:
        """A file's size: from the JSON page, the file system, the cache (verified against the
        page's sha256 when used), or a HEAD request (HTML pages)."""
        if f.size is not None:
            return f.size
        with contextlib.suppress(OSError):
            return self.cache.archive_path(f.sha256).stat().st_size
        if is_local(f.url):
            try:
                return local_path(f.url).stat().st_size
            except OSError as exc:
                raise FetchError(f"{f.url} does not exist", url=f.url, status=404) from exc
        if self.offline:
            raise OfflineError(f"--offline: the size of {f.filename} is unknown (the cached index page "
                               "is HTML)", url=f.url)
        return self.transport.content_length(f.url)

    # -- the metapackage ---------------------------------------------------------------------------
    def releases(self) -> list[Release]:
        """Every wheel release of the metapackage, newest first (yanked ones only if nothing else)."""
        best = [Release(v, ([f for f in fs if not f.yanked] or fs)[0])
                for v, fs in self.files(self.data.metapackage).items()]
        return sorted(best, key=lambda r: r.version, reverse=True)

    def resolve(self, train: str) -> Release:
        """``13.4`` -> newest 13.4.x; ``13.4.1`` -> that release; ``13.4.0rc1`` -> that pre-release."""
        where = f"{self.index_url} ({self.data.metapackage})"
        text = train.strip().removeprefix("v")
        asked = parse_version(text)
        rels = self.releases()
        if asked is not None and asked.is_prerelease:
            if exact := [r for r in rels if r.version == asked]:
                return exact[0]
            raise ResolveError(f"CUDA pre-release {text} has no {self.data.metapackage} release at {where}",
                               requested=text, where=where)
        want = tuple(int(p) for p in check_train(text).split("."))
        hits = [r for r in rels if r.version.release[: len(want)] == want and not r.version.is_prerelease]
        if live := [r for r in hits if not r.file.yanked] or hits:
            return max(live, key=lambda r: r.version)
        # the same message and fields as the redist route, from the final releases
        pick_release(text, [r.label for r in rels if not r.version.is_prerelease], where)
        raise AssertionError("unreachable")  # pragma: no cover

    def metadata(self, release: Release) -> Metadata:
        """The metapackage release's METADATA, its wheel fetched into the cache and verified first;
        read once per index, however many platforms and products ask."""
        from cudaredist.fetch.fetcher import Fetcher

        if release.file.filename in self._metadata:
            return self._metadata[release.file.filename]
        meta = self.data.metapackage
        item = self.planned(meta, release.file, meta, "", f"CUDA {release.label}'s requirements",
                            release=release.label, platform="")
        path = Fetcher(self.transport, self.cache, offline=self.offline).fetch(item)[0]
        try:
            with zipfile.ZipFile(path) as zf:
                found = self._metadata[release.file.filename] = wheel_metadata(zf, release.file.filename)
        except zipfile.BadZipFile as exc:
            raise PlanError(f"{release.file.filename} is not a readable wheel: {exc}") from exc
        return found

