"""Library products beside the toolkit (``--with cudnn``): where NVIDIA lays them out, which
release fits the toolkit's CUDA major on a platform, and which archive of each component (I/O at
the edges: the listing and manifests come through :class:`~cudaredist.sources.nvidia.index.Index`).

NVIDIA publishes cuDNN, cuTENSOR, cuSPARSELt and cuDSS like the toolkit, one redist folder per
product beside CUDA's (``.../compute/cuda/redist/`` and ``.../compute/cudnn/redist/``), each
``redistrib_<version>.json`` of the same shape plus ``cuda_variant`` and per-platform
``cudaNN`` subkeys. A platform's entry may be flat, subkeyed, or both (cuDNN 9.27.0's
``windows-arm64``: a ``cuda13`` subkey and a flat ``_cuda13.4`` build); samples have only a
``source`` platform.
"""

from __future__ import annotations

import functools
import os
import posixpath
import re
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from urllib.parse import urlsplit, urlunsplit

from cudaredist.errors import CudaRedistError, FetchError, ManifestError, PlanError, ResolveError
from cudaredist.plan import Archive, PlannedArchive, ProductRelease, archive_url, join_url, version_key
from cudaredist.profiles import ProductRequest, get_product, parse_spec
from cudaredist.sources.base import ProductPlan, patch
from cudaredist.sources.nvidia.index import Bases, Index, Release, normalize_base
from cudaredist.sources.nvidia.manifest import Component, Manifest
from cudaredist.sources.nvidia.releases import sort_labels
from cudaredist.trust import Trust, refuse

SOURCE_PLATFORM = "source"
_TAG = re.compile(r"_cuda([0-9]{1,4}(?:\.[0-9]{1,4})?)-archive\.", re.A)
_SUBKEY = re.compile(r"cuda([0-9]{1,4}(?:\.[0-9]{1,4})?)", re.A)


def env_base(product: str) -> str:
    """The variable that overrides one product's base URL, named after its folder:
    ``CUDAREDIST_CUDNN_BASE_URL``, ``CUDAREDIST_NVIDIA_DRIVER_BASE_URL`` (a shell name)."""
    return f"CUDAREDIST_{re.sub(r'[^A-Z0-9]', '_', get_product(product).folder.upper())}_BASE_URL"


def product_base(base: str, product: str, *, override: bool = False) -> str:
    """Where ``product``'s redist folder is for the CUDA base ``base``, as NVIDIA lays them out:
    ``.../compute/cuda/redist/`` -> ``.../compute/<product>/redist/``; any other base (a mirror
    directory ``cudaredist mirror`` wrote) holds it inside, ``<base>/<product>/redist/`` (where the
    mirror writes it).
    ``override``: ``base`` is the base URL (not a mirror), which ``CUDAREDIST_<PRODUCT>_BASE_URL``
    replaces."""
    if override and (given := os.environ.get(env_base(product), "").strip()):
        return normalize_base(given)
    parts, folder = urlsplit(base), get_product(product).folder
    segs = parts.path.rstrip("/").split("/")
    if len(segs) >= 2 and segs[-2:] == ["cuda", "redist"]:
        path = "/".join([*segs[:-2], folder, "redist"]) + "/"
        return urlunsplit((parts.scheme, parts.netloc, path, parts.query, parts.fragment))
    return join_url(base, f"{folder}/redist/")


def pick_archive(comp: Component, platform: str, cuda_release: str, *, explicit: bool = False,
                 per_minor: bool = False) -> tuple[Archive, str] | None:
    """The archive of ``comp`` for ``platform`` built for the toolkit's CUDA, and its variant
    (``cuda13``, ``cuda13.4``; "" for a build that names none), or None. Preferred: a build for
    the toolkit's exact major.minor, the major's ``cudaNN`` subkey, a build for an older minor of the
    major, then an untagged flat entry (``per_minor``: only the first); ``explicit`` (asked for by
    --component) also takes a ``source`` archive (samples)."""
    have = version_key(cuda_release)
    major, minor = have[0], (have[1] if len(have) > 1 else 0)
    ranks: dict[tuple[int, ...], tuple[int, int]] = {(major, minor): (0, 0)}
    if not per_minor:  # an older minor: 2, the newest first
        ranks |= {(major,): (1, 0), (): (3, 0)} | {(major, m): (2, -m) for m in range(minor)}
    ranked = [(ranks[tag], archive, name) for tag, archive, name in _builds(comp, platform) if tag in ranks]
    if ranked:
        _rank, archive, name = min(ranked, key=lambda r: r[0])
        return archive, name
    if explicit and platform != SOURCE_PLATFORM and SOURCE_PLATFORM in comp.platforms:
        return pick_archive(comp, SOURCE_PLATFORM, cuda_release, explicit=False)
    return None


def _builds(comp: Component, platform: str) -> list[tuple[tuple[int, ...], Archive, str]]:
    """(the CUDA it was built for, () if it names none; the archive; its variant) of each build."""
    out = [(version_key(m[1]), archive, name) for name, archive in comp.variants.get(platform, {}).items()
           if (m := _SUBKEY.fullmatch(name))]
    if (flat := comp.archives.get(platform)) is not None:
        m = _TAG.search(flat.filename)
        out.append((version_key(m[1]) if m else (), flat, f"cuda{m[1]}" if m else ""))
    return out


def cuda_majors(comp: Component, platform: str, depth: int = 1) -> list[str]:
    """The CUDA majors (``depth`` 2: major.minors) ``comp`` has builds of for ``platform`` (what a
    message lists)."""
    return sorted({".".join(map(str, tag[:depth])) for tag, _a, _n in _builds(comp, platform) if tag},
                  key=version_key)


def plan_product(manifest: Manifest, request: ProductRequest, *, platform: str, cuda_release: str,
                 base_url: str, archive_bases: Sequence[str],
                 components: Sequence[str] = ()) -> ProductPlan | None:
    """The product's archives from ``manifest`` for ``platform``: its default components, and those
    of ``components`` the manifest has (one missing: an error). None when a default is missing."""
    title = request.product.title
    routed = [s for s in (parse_spec(c, "--component") for c in components)
              if any(n in manifest.components for n in s.names)]
    specs = [*request.product.specs, *routed]
    items: list[PlannedArchive] = []
    variant = ""
    bases = tuple(archive_bases) or (base_url,)
    for spec in specs:
        explicit = spec in routed
        chosen = manifest.first(spec.names, functools.partial(
            pick_archive, platform=platform, cuda_release=cuda_release, explicit=explicit,
            per_minor=request.product.per_minor))
        if chosen is None:
            if not explicit:
                return None
            has = next(manifest.components[n].platforms for n in spec.names if n in manifest.components)
            raise PlanError(
                f"{title} {manifest.label} has no archive of {spec} for {platform} built for CUDA "
                f"{cuda_release.split('.')[0]} (it has: {', '.join(has)})", component=str(spec),
                release=manifest.label, platform=platform)
        comp, (archive, tag) = chosen
        if any(i.component == comp.key for i in items):
            continue
        variant = variant or tag
        items.append(PlannedArchive(
            comp.key, comp.version, archive, archive_url(bases[0], archive.relative_path, comp.key),
            fallback_urls=tuple(archive_url(b, archive.relative_path, comp.key) for b in bases[1:]),
            product=request.name, license=comp.license))
    release = ProductRelease(request.name, manifest.label, str(request), manifest.release_date, base_url,
                             variant)
    if request.product.per_minor and items:  # named by what it is (a driver), for the CUDA it serves
        release = replace(release, release=items[0].version, cuda_variant=variant.removeprefix("cuda"))
    return ProductPlan(release, tuple(items), tuple(str(s) for s in routed))


def _coverage(manifests: Sequence[Manifest], request: ProductRequest, platform: str, major: str) -> str:
    """What the product publishes for ``platform`` and for CUDA ``major`` (a major.minor for a
    ``per_minor`` product; for the error)."""
    names = [n for s in request.product.specs for n in s.names]
    depth = major.count(".") + 1
    for_platform, for_major = [], []
    for m in manifests:
        if (comp := next((m.components[n] for n in names if n in m.components), None)) is None:
            continue
        majors = cuda_majors(comp, platform, depth)
        if majors or platform in comp.platforms:
            shown = comp.version if depth > 1 else m.label  # a driver's version; a product's label
            for_platform.append(f"{shown} (CUDA {', '.join(majors) or 'any'})")
        if plats := [p for p in comp.platforms if major in cuda_majors(comp, p, depth)]:
            for_major.append(f"{m.label} ({', '.join(plats)})")
    return (f"releases for {platform}: {', '.join(for_platform[:8]) or 'none'}; "
            f"releases for CUDA {major}: {', '.join(for_major[:8]) or 'none'}")


def choose_release(request: ProductRequest, labels: Sequence[str], load: Callable[[str], Manifest], *,
                   platform: str, cuda_release: str, base_url: str, archive_bases: Sequence[str],
                   components: Sequence[str] = ()) -> ProductPlan:
    """The newest release of ``labels`` (that ``request``'s spec allows) whose default components have
    builds for the toolkit's CUDA major on ``platform``; else a :class:`ResolveError` that lists what
    the product publishes for that platform and that major. Nothing is downloaded but manifests."""
    title = request.product.title
    major = ".".join(cuda_release.split(".")[:2 if request.product.per_minor else 1])
    ordered = [lbl for lbl in sort_labels(labels) if request.matches(lbl)]
    if not ordered:
        shown = ", ".join(sort_labels(labels)[:12]) or "none"
        what = f"release {request.spec}" if request.spec else "release"
        raise ResolveError(f"{title} has no {what} at {base_url}; its releases there: {shown}",
                           requested=str(request), where=base_url, available=tuple(sort_labels(labels)))

    def quiet(label: str) -> Manifest | None:
        try:
            return load(label)
        except CudaRedistError:  # a manifest that does not answer is left out of the listing
            return None

    def attempt(manifest: Manifest) -> ProductPlan | None:
        found = plan_product(manifest, request, platform=platform, cuda_release=cuda_release,
                             base_url=base_url, archive_bases=archive_bases, components=components)
        for item in found.items if found else ():  # NVIDIA keeps a product's archives in its folder
            if posixpath.normpath(item.archive.relative_path).startswith("../"):
                raise ManifestError(
                    f"{title} {manifest.label}: {item.component}.{platform}: relative_path "
                    f"{item.archive.relative_path!r} climbs out of the {title} folder {base_url}; a "
                    "product's archives are under its own folder", source=base_url, entry=item.component)
        return found

    seen = [load(ordered[0])]
    found = attempt(seen[0])
    if found is None and ordered[1:]:
        with ThreadPoolExecutor(8) as pool:  # the rest at once: read them all to say what exists
            seen += [m for m in pool.map(quiet, ordered[1:]) if m is not None]
        for manifest in seen[1:]:
            if (found := attempt(manifest)) is not None:
                break
    if found is not None:
        return found
    asked = f" {request.spec}" if request.spec else ""
    raise ResolveError(
        f"{title}{asked} has no release with archives for CUDA {major} on {platform} at {base_url} "
        f"({_coverage(seen, request, platform, major)}); pick another --with {request.name}=VERSION, "
        "another CUDA train or another --platform", requested=str(request), where=base_url)


def resolve_with(index: Index, request: ProductRequest, bases: Bases, release: Release, *, platform: str,
                 components: Sequence[str]) -> ProductPlan:
    """One ``--with`` request against the toolkit ``release``: a product that ``replaces`` a toolkit
    component picks among the releases of the major.minor the toolkit ships (and keeps the toolkit's
    own where none is newer); a ``per_minor`` one also takes the CUDA manifest's own entry."""
    product = request.product
    product.check_platform(platform)
    find = functools.partial(resolve_product, index, bases=bases, platform=platform,
                             cuda_release=release.label, components=components)
    if not product.per_minor:
        shipped = release.manifest.components.get(product.replaces) if product.replaces else None
        if shipped is None:
            return find(request)
        return patch(request, ProductRelease(request.name, shipped.version, str(request),
                                             release.manifest.release_date, release.base), platform, find)
    # per_minor: the newest release for the train's major.minor, from the CUDA manifest's own entry
    # (13.1-13.3: the toolkit's archive, mirrored and locked with it) or the product's folder (13.4 on)
    own = plan_product(release.manifest, request, platform=platform, cuda_release=release.label,
                       base_url=release.base, archive_bases=release.archive_bases)
    if own is not None and not request.matches(own.release.release):
        own = None
    if own is not None:  # a toolkit archive: mirrored and locked with the toolkit's
        own = replace(own, items=tuple(replace(i, product="") for i in own.items))
    try:
        found = find(request)
    except (ResolveError, FetchError) as exc:  # none in the folder, or no folder: the manifest's own
        if own is not None:
            return own
        if not isinstance(exc, ResolveError):
            raise
        mm = ".".join(release.label.split(".")[:2])
        raise ResolveError(f"NVIDIA publishes no {request.product.title} package for CUDA {mm}: the CUDA "
                           f"{release.label} manifest has none, and {exc}", requested=str(request)) from exc
    if own is not None and version_key(own.release.release) >= version_key(found.release.release):
        return own
    return found


def product_bases(bases: Bases, product: str, *, base_url: str, trust: Trust) -> Bases:
    """``bases`` (the toolkit's, mirror first) mapped to ``product``'s folders; manifests only
    from authenticated ones, as for the toolkit."""
    def at(b: str) -> str:
        return product_base(b, product, override=b == base_url)

    archives = tuple(dict.fromkeys(at(b) for b in bases.archives))
    readers = tuple(dict.fromkeys(u for b in bases.manifests if trust.trusted(u := at(b))))
    if not readers:
        raise refuse([("the base URL", at(base_url))], what=f"the {product} manifest")
    return Bases(readers, archives, ())


def resolve_product(index: Index, request: ProductRequest, bases: Bases, *, platform: str,
                    cuda_release: str, components: Sequence[str]) -> ProductPlan:
    """One ``--with`` request for ``platform``, from the first base in ``bases`` (the product's)
    that lists the product's releases."""
    failures: list[FetchError] = []
    for i, base in enumerate(bases.manifests):
        try:
            labels = index.labels(base, quick=i < len(bases.manifests) - 1)
        except FetchError as exc:
            failures.append(exc)
            continue
        failed = set(bases.manifests[:i])
        archive_bases = [b for b in bases.archives if b not in failed]
        return choose_release(request, labels, functools.partial(index.manifest, base),
                              platform=platform, cuda_release=cuda_release, base_url=base,
                              archive_bases=archive_bases, components=components)
    title, tried, folder = request.product.title, "; ".join(map(str, failures)), request.product.folder
    raise FetchError(
        f"cannot list the {title} releases ({tried}). NVIDIA publishes {title} beside "
        f"the toolkit's redist folder (.../compute/{folder}/redist/ next to .../compute/cuda/redist/; "
        f"a mirror written by `cudaredist mirror --with {request.name}` holds it there too); point "
        f"{env_base(request.name)} at its folder if yours is elsewhere",
        url=failures[-1].url if failures else "", status=failures[-1].status if failures else None)
