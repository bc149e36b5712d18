"""What every source shares: where it looks (:class:`Where`, checked by :func:`check_where`), the
:class:`Source` protocol, how an archive's members land in the tree (:class:`Layout`), and how the
``--with`` products a source picked join the toolkit's plan (:func:`with_products`, :func:`patch`).
Each source imports these from here; the package's face (:mod:`cudaredist.sources`) opens a source
by name."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Protocol

from cudaredist.errors import ResolveError, UsageError
from cudaredist.plan import Plan, PlannedArchive, ProductRelease, version_key

if TYPE_CHECKING:
    from cudaredist.fetch.transport import Transport
    from cudaredist.profiles import ProductRequest
    from cudaredist.sources.mirroring import MirrorContent
    from cudaredist.tree.extract import Digests
    from cudaredist.tree.staging import Mapper, Tree

_URL_OPTIONS = (("base_url", "--base-url (or CUDAREDIST_BASE_URL)"),
                ("mirror", "--mirror (or CUDAREDIST_MIRROR)"),
                ("index_url", "--index-url (or PIP_INDEX_URL)"))


def check_where(where: Where, source: str | None = None) -> Where:
    """``where`` if each URL in it parses and has a scheme cudaredist speaks (a directory needs no
    scheme) and, for ``source`` (a :func:`check_source` name), its options fit together; else a
    :class:`UsageError` naming the option. No network: the install checks this before its no-op.
    For nvidia, a ``--channel`` comes back as the base URL it means (the channel's name kept)."""
    from urllib.parse import urlsplit

    for field, option in _URL_OPTIONS:
        value = getattr(where, field)
        if not value or "://" not in value:
            continue
        try:
            parts = urlsplit(value.strip())
            parts.port  # noqa: B018 - parsing the port is what rejects "http://host:x/"
        except ValueError as exc:
            raise UsageError(f"{option} {value!r} is not a valid URL ({exc}); write it like "
                             "https://host/path/, file:///path/ or a directory") from exc
        if parts.scheme.lower() not in ("http", "https", "file"):
            raise UsageError(f"{option} {value!r}: unsupported URL scheme {parts.scheme!r}; use http://, "
                             "https://, file:// or a directory")
    if where.channel and source == "pypi":
        raise UsageError("--channel names one of NVIDIA's redist indexes: it needs --source nvidia")
    if source == "nvidia" and where.channel:  # one base URL from here on, as if given
        from cudaredist.sources.nvidia.index import channel_base

        where = replace(where, base_url=channel_base(where.channel, where.base_url),
                        channel=where.channel.strip().lower())
    if source == "nvidia" and where.no_fallback and not where.mirror:
        raise UsageError("--no-fallback needs --mirror (or CUDAREDIST_MIRROR)")
    return where


@dataclass(frozen=True)
class Where:
    base_url: str | None = None     # nvidia: the redist base URL (default NVIDIA's)
    mirror: str | None = None       # nvidia: tried before the base URL
    no_fallback: bool = False       # nvidia: the mirror only
    index_url: str | None = None    # pypi: the package index
    offline: bool = False           # only what the cache holds
    # --trusted-host HOST[:PORT] values (None: CUDAREDIST_TRUSTED_HOST); see cudaredist.trust
    trusted_hosts: tuple[str, ...] | None = None
    channel: str | None = None      # nvidia: --channel (release, preview), the base URL it means


class Source(Protocol):
    name: str
    transport: Transport  # what its archives are fetched over (the fetcher and the installer use it)

    def location(self) -> str:
        """The URL trains are listed from."""
        ...

    def trains(self) -> list[dict[str, Any]]:
        """Published trains, oldest first: {train, release, release_date, releases}."""
        ...

    def resolve(self, train: str, platforms: Sequence[str], *, profile: str | None,
                components: Sequence[str], products: Sequence[str] = ()) -> list[Plan]:
        """One plan per platform, all of the one release ``train`` means; checked before any download.
        ``products``: ``--with`` values (``cudnn``, ``cudnn=9.20``), each product's archives added to
        the plan of every platform (the newest release built for the toolkit's CUDA major there)."""
        ...

    def relocate(self, plan: Plan) -> Plan:
        """A plan read from a lock file, fetched from where this run says (mirror first)."""
        ...

    def mirror_content(self, trains: Sequence[str], platforms: Sequence[str], *, profile: str | None,
                       components: Sequence[str], xz_preset: int | str | None,
                       products: Sequence[str] = ()) -> MirrorContent:
        """What a redist-shaped mirror of ``trains`` holds (:mod:`cudaredist.publish.mirror` writes it)."""
        ...


@dataclass(frozen=True)
class Layout:
    """How an archive's members land in the tree, and what runs once it is extracted."""

    mapper: Callable[[PlannedArchive, str], Mapper]
    # given the tree paths the archive wrote (e.g. wheels: restore .so symlink chains)
    after: Callable[[PlannedArchive, str, Tree, list[str]], object] | None = None
    # a zip's own record of its members' sha256 (wheels: RECORD), believed once the archive verified
    digests: Digests | None = None


@dataclass(frozen=True)
class ProductPlan:
    """One ``--with`` product resolved for one platform: its release and the archives to install."""

    release: ProductRelease
    items: tuple[PlannedArchive, ...]
    claimed: tuple[str, ...] = ()   # the --component values it took


def patch(request: ProductRequest, own: ProductRelease, platform: str,
          find: Callable[[ProductRequest], ProductPlan]) -> ProductPlan:
    """For a product that ``replaces`` a toolkit component (``own``: that component as the toolkit
    ships it): what ``find`` gives for the newest release of ``request``'s spec, else of the shipped
    major.minor, when it is newer; else ``own`` with no archives (the toolkit's own stays). Either
    way with the note saying which."""
    title, shipped = request.product.title, own.release
    asked = replace(request, spec=request.spec or ".".join(shipped.split(".")[:2]))
    try:
        found = find(asked)
    except ResolveError:
        if request.spec:
            raise
        note = f"the toolkit's own: NVIDIA publishes no {title} {asked.spec} patch for {platform}"
        return ProductPlan(replace(own, note=note), ())
    version = found.items[0].version
    if version_key(version) > version_key(shipped):
        note = f"replaces the toolkit's {request.product.replaces} {shipped}"
        return replace(found, release=replace(found.release, requested=str(request), note=note))
    note = (f"the toolkit's own: no {title} {asked.spec} patch is newer (the newest, "
            f"{found.release.release}, is {version})")
    return ProductPlan(replace(own, note=note), ())


def toolkit_components(requests: Sequence[ProductRequest], picked: Sequence[ProductPlan],
                       components: Sequence[str]) -> list[str]:
    """What the toolkit's plan asks for beside the products ``picked`` (per request), each once:
    ``components`` less the ``--component`` values a product took, the component a product that
    ``replaces`` one keeps (no newer patch: the toolkit's own, planned with it), and the toolkit
    components the products need."""
    releases = {p.release.name: p.release.release for p in picked}
    claimed = {c for p in picked for c in p.claimed}
    kept = [r.product.replaces for r, p in zip(requests, picked, strict=True)
            if r.product.replaces and not p.items]
    needed = [n for r in requests for n in r.product.needs_for(releases.get(r.name, ""))]
    return list(dict.fromkeys([*(c for c in components if c not in claimed), *kept, *needed]))


def with_products(plan: Plan, requests: Sequence[ProductRequest], picked: Sequence[ProductPlan]) -> Plan:
    """The toolkit's ``plan`` with each product's archives and release added; a product that
    ``replaces`` a toolkit component takes its place where it brought a newer one."""
    replaced = {r.product.replaces for r, p in zip(requests, picked, strict=True)
                if r.product.replaces and p.items}
    items = tuple(i for i in plan.items if i.component not in replaced)
    return replace(plan, items=items + tuple(i for p in picked for i in p.items),
                   products=tuple(p.release for p in picked))
