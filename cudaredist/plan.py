"""The install plan: which archive of which component, from where (pure)."""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any
from urllib.parse import urljoin, urlsplit

from cudaredist.errors import ManifestError


def version_key(text: str) -> tuple[int, ...]:
    """Numeric sort key for dotted versions: 13.10.0 > 13.9.1 > 13.2.2."""
    # bounded runs of ASCII digits: int() of a 5000-digit run from a hostile listing raises
    return tuple(int(p) for p in re.findall(r"[0-9]{1,18}", text))


def matches(train: str, release: str) -> bool:
    """``13.4`` matches 13.4.x, ``13`` matches 13.x.y, ``13.4.1`` only itself."""
    want = version_key(train)
    return bool(want) and version_key(release)[: len(want)] == want


@dataclass(frozen=True)
class Archive:
    relative_path: str
    sha256: str
    size: int
    md5: str = ""

    @property
    def filename(self) -> str:
        return self.relative_path.rsplit("/", 1)[-1]


@dataclass(frozen=True)
class PlannedArchive:
    component: str
    version: str
    archive: Archive
    url: str
    # How members map into the tree: "redist" strips the archive's single top folder.
    layout: str = "redist"
    # Other places with the same bytes (mirror first, then NVIDIA), tried in order.
    fallback_urls: tuple[str, ...] = ()
    # the library product it belongs to ("cudnn", ...; see ``--with``), "" for the toolkit's own
    product: str = ""
    # a cross tree's archive: the platform it is built for ("": the plan's) and where its folders
    # go in the tree ((folder, destination), "" = every path; a destination of "" drops it)
    platform: str = ""
    place: tuple[tuple[str, str], ...] = ()
    license: str = ""  # the manifest's license name (for the SBOM)

    @property
    def urls(self) -> tuple[str, ...]:
        return (self.url, *self.fallback_urls)


@dataclass(frozen=True)
class ProductRelease:
    """A library product installed into the toolkit's tree (``--with cudnn``): which release of it,
    what the user asked for (``cudnn``, ``cudnn=9.20``), and the base its manifest came from."""

    name: str
    release: str
    requested: str
    release_date: str = ""
    base_url: str = ""
    cuda_variant: str = ""   # the variant its archives were built for ("cuda13"; "13.5": a compat driver's)
    note: str = ""           # what it did to the toolkit ("replaces the toolkit's libcublas 13.4.1.3")


@dataclass(frozen=True)
class Plan:
    release: str
    release_date: str
    platform: str
    base_url: str
    profile: str
    items: tuple[PlannedArchive, ...]
    source: str = "nvidia"
    notes: tuple[str, ...] = field(default=())
    # why the archives' hashes are believed: "<url> (HTTPS)", "the lock file <path>" (cudaredist.trust)
    hashes_from: str = ""
    products: tuple[ProductRelease, ...] = ()
    channel: str = ""   # --channel that served it ("": not given, NVIDIA's release index or --base-url)
    host: str = ""      # a cross tree: the platform its tools run on ("": ``platform`` itself)

    @property
    def total_size(self) -> int:
        return sum(i.archive.size for i in self.items)

    @property
    def components(self) -> tuple[str, ...]:
        return tuple(i.component for i in self.items)

    def product_base(self, name: str) -> str:
        """The base URL the product's archives' relative paths are under (the toolkit's for "")."""
        return next((p.base_url for p in self.products if p.name == name and p.base_url), self.base_url)

    def archive_platform(self, item: PlannedArchive) -> str:
        """The platform ``item``'s archive is built for (a cross tree's tools: its host's)."""
        return item.platform or self.platform

    def content_key(self) -> str:
        """Identifies what the tree holds: platform + archives' hashes (not where they came from)."""
        rows: list[Any] = [[i.component, i.archive.sha256, i.layout]
                           + ([i.platform, [list(p) for p in i.place]] if i.platform or i.place else [])
                           for i in self.items]
        body = json.dumps([self.platform, *([self.host] if self.host else []), sorted(rows)])
        return hashlib.sha256(body.encode()).hexdigest()

    def to_json(self) -> dict[str, Any]:
        fields = ("release", "release_date", "platform", "base_url", "source", "profile", "total_size")
        components = [{"name": i.component, "version": i.version, "url": i.url,
                       "relative_path": i.archive.relative_path, "sha256": i.archive.sha256,
                       "size": i.archive.size, "layout": i.layout}
                      | ({"product": i.product} if i.product else {})
                      | ({"platform": i.platform} if i.platform else {})
                      | ({"place": [list(p) for p in i.place]} if i.place else {})
                      | ({"license": i.license} if i.license else {}) for i in self.items]
        products = [{k: v for k, v in asdict(p).items() if v or k != "note"} for p in self.products]
        optional = (("hashes_from", self.hashes_from), ("products", products), ("channel", self.channel),
                    ("host", self.host))
        return ({f: getattr(self, f) for f in fields} | {"components": components, "notes": list(self.notes)}
                | {k: v for k, v in optional if v})


def placed(rel: str, place: Sequence[tuple[str, str]]) -> str | None:
    """Where a tree path of a cross tree's archive goes: the first ``(folder, destination)`` of
    ``place`` that holds it ("" holds every path), None where its destination is "" (dropped)."""
    for folder, dest in place:
        if not folder:
            return f"{dest}/{rel}" if dest else None
        if rel == folder or rel.startswith(folder + "/"):
            return dest + rel[len(folder):] if dest else None
    return rel


def join_url(base: str, relative: str) -> str:
    return base.rstrip("/") + "/" + relative


def climb(relative_path: str) -> int:
    """How many folders above its base a relative path reaches (``../../../pool/x`` -> 3)."""
    depth = low = 0
    for part in relative_path.split("/")[:-1]:
        depth += -1 if part == ".." else 0 if part == "." else 1
        low = min(low, depth)
    return -low


def archive_url(base: str, relative_path: str, component: str = "") -> str:
    """An archive's URL: ``relative_path`` (checked by the manifest parser) joined to the manifest's
    folder ``base`` as RFC 3986 says, ``..`` included; a path that climbs past the site root
    (``scheme://host:port/``, or ``/`` of a directory) is a :class:`ManifestError` naming it."""
    parts = urlsplit(base)
    depth = parts.path.rstrip("/").count("/")   # "/bin-archive/release/cuda/redist/" -> 4
    url = urljoin(base if base.endswith("/") else base + "/", relative_path)
    if climb(relative_path) > depth or urlsplit(url)[:2] != parts[:2]:
        raise ManifestError(
            f"{component + ': ' if component else ''}relative_path {relative_path!r} climbs "
            f"{climb(relative_path)} folder(s) above {base}, past its site root "
            f"{parts.scheme}://{parts.netloc}/: refused, archives stay on the manifest's server (a mirror "
            "of such a release keeps its manifests that many folders deep, as `cudaredist mirror` does)",
            source=base, entry=component)
    return url


def plan_from_json(obj: dict[str, Any]) -> Plan:
    """Inverse of :meth:`Plan.to_json` (lock files, records)."""
    items = tuple(
        PlannedArchive(
            component=c["name"], version=c.get("version", ""),
            archive=Archive(c["relative_path"], c["sha256"], int(c["size"])),
            url=c["url"], layout=c.get("layout", "redist"), product=str(c.get("product", "")),
            platform=str(c.get("platform", "")),
            place=tuple((str(a), str(b)) for a, b in c.get("place", ())), license=str(c.get("license", "")))
        for c in obj["components"])
    products = tuple(
        ProductRelease(str(p["name"]), str(p["release"]), str(p.get("requested", p["name"])),
                       str(p.get("release_date", "")), str(p.get("base_url", "")),
                       str(p.get("cuda_variant", "")), str(p.get("note", "")))
        for p in obj.get("products", ()))
    return Plan(obj["release"], obj.get("release_date", ""), obj["platform"], obj["base_url"],
                obj.get("profile", "custom"), items, obj.get("source", "nvidia"),
                tuple(obj.get("notes", ())), str(obj.get("hashes_from", "")), products,
                str(obj.get("channel", "")), str(obj.get("host", "")))


def with_bases(plan: Plan, bases: Sequence[str],
               product_base: Callable[[str, str], str] | None = None) -> Plan:
    """The plan fetching each archive from ``bases`` in order (mirror first; never empty: a release's
    archive bases hold the base its manifest came from), same bytes; a product's archives from
    ``product_base(base, product)`` of each."""

    def under(base: str, item: PlannedArchive) -> str:
        root = product_base(base, item.product) if item.product and product_base else base
        return archive_url(root, item.archive.relative_path, item.component)

    items = tuple(replace(i, url=under(bases[0], i), fallback_urls=tuple(under(b, i) for b in bases[1:]))
                  for i in plan.items)
    return replace(plan, items=items)
