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
import re
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

from cudaredist.errors import CudaRedistError, FetchError, PlanError, ResolveError
from cudaredist.plan import Archive, PlannedArchive, ProductRelease, archive_url, join_url, version_key
from cudaredist.profiles import ProductRequest, parse_spec
from cudaredist.sources.nvidia.index import Bases, Index, normalize_base
from cudaredist.sources.nvidia.manifest import Component, Manifest
from cudaredist.sources.nvidia.releases import sort_labels
from cudaredist.trust import Trust, refuse

SOURCE_PLATFORM = "source"
_TAG = re.compile(r"_cuda([0-9]{1,4}(?:\.[0-9]{1,4})?)-archive\.", re.A)
_SUBKEY = re.compile(r"cuda([0-9]{1,4}(?:\.[0-9]{1,4})?)", re.A)


def env_base(product: str) -> str:
    """The variable that overrides one product's base URL: ``CUDAREDIST_CUDNN_BASE_URL``."""
    return f"CUDAREDIST_{product.upper()}_BASE_URL"


def product_base(base: str, product: str, *, override: bool = False) -> str:
    """Where ``product``'s redist folder is for the CUDA base ``base``, as NVIDIA lays them out:
    ``.../compute/cuda/redist/`` -> ``.../compute/<product>/redist/``; any other base (a mirror
    directory ``cudaredist mirror`` wrote) holds it inside, ``<base>/<product>/redist/``.
    ``override``: ``base`` is the base URL (not a mirror), which ``CUDAREDIST_<PRODUCT>_BASE_URL``
    replaces."""
    if override and (given := os.environ.get(env_base(product), "").strip()):
        return normalize_base(given)
    parts = urlsplit(base)
    segs = parts.path.rstrip("/").split("/")
    if len(segs) >= 2 and segs[-2:] == ["cuda", "redist"]:
        path = "/".join([*segs[:-2], product, "redist"]) + "/"
        return urlunsplit((parts.scheme, parts.netloc, path, parts.query, parts.fragment))
    return join_url(base, f"{product}/redist/")


def product_dir(out: Path, product: str) -> Path:
    """Where a mirror directory ``out`` keeps ``product`` so that :func:`product_base` finds it:
    beside ``.../cuda/redist`` as NVIDIA lays it out, else inside, ``out/<product>/redist``."""
    if out.parts[-2:] == ("cuda", "redist"):
        return out.parent.parent / product / "redist"
    return out / product / "redist"


def pick_archive(comp: Component, platform: str, cuda_release: str, *,
                 explicit: bool = False) -> tuple[Archive, str] | None:
    """The archive of ``comp`` for ``platform`` built for the toolkit's CUDA, and its variant
    (``cuda13``, ``cuda13.4``; "" for a build that names none), or None. Preferred: a build for
    the toolkit's exact major.minor, the major's ``cudaNN`` subkey, a build for an older minor of the
    major, then an untagged flat entry; ``explicit`` (asked for by --component) also takes a
    ``source`` archive (samples)."""
    have = version_key(cuda_release)
    major, minor = have[0], (have[1] if len(have) > 1 else 0)
    ranks = {(major, minor): (0, 0), (major,): (1, 0), (): (3, 0)}  # an older minor: 2, the newest first
    ranks |= {(major, m): (2, -m) for m in range(minor)}
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


def cuda_majors(comp: Component, platform: str) -> list[str]:
    """The CUDA majors ``comp`` has builds of for ``platform`` (what a message lists)."""
    return sorted({str(tag[0]) for tag, _a, _n in _builds(comp, platform) if tag}, key=int)


@dataclass(frozen=True)
class ProductPlan:
    """One product resolved for one platform: its release and the archives to install."""

    release: ProductRelease
    items: tuple[PlannedArchive, ...]
    claimed: tuple[str, ...]   # the --component values it took


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
        chosen = manifest.first(spec.names, functools.partial(pick_archive, platform=platform,
                                                              cuda_release=cuda_release, explicit=explicit))
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
            product=request.name))
    release = ProductRelease(request.name, manifest.label, str(request), manifest.release_date, base_url,
                             variant)
    return ProductPlan(release, tuple(items), tuple(str(s) for s in routed))


def _coverage(manifests: Sequence[Manifest], request: ProductRequest, platform: str, major: str) -> str:
    """What the product publishes for ``platform`` and for CUDA ``major`` (for the error)."""
    names = [n for s in request.product.specs for n in s.names]
    for_platform, for_major = [], []
    for m in manifests:
        if (comp := next((m.components[n] for n in names if n in m.components), None)) is None:
            continue
        majors = cuda_majors(comp, platform)
        if majors or platform in comp.platforms:
            for_platform.append(f"{m.label} (CUDA {', '.join(majors) or 'any'})")
        if plats := [p for p in comp.platforms if major in cuda_majors(comp, p)]:
            for_major.append(f"{m.label} ({', '.join(plats)})")
    return (f"releases for {platform}: {', '.join(for_platform[:8]) or 'none'}; "
            f"releases for CUDA {major}: {', '.join(for_major[:8]) or 'none'}")


def choose_release(request: ProductRequest, labels: Sequence[str], load: Callable[[str], Manifest], *,
                   platform: str, cuda_release: str, base_url: str, archive_bases: Sequence[str],
                   components: Sequence[str] = ()) -> ProductPlan:
    """The newest release of ``labels`` (that ``request``'s spec allows) whose default components have
    builds for the toolkit's CUDA major on ``platform``; else a :class:`ResolveError` that lists what
    the product publishes for that platform and that major. Nothing is downloaded but manifests."""
    title, major = request.product.title, cuda_release.split(".")[0]
    ordered = [lbl for lbl in sort_labels(labels) if request.matches(lbl)]
    if not ordered:
        shown = ", ".join(sort_labels(labels)[:12]) or "none"
        what = f"release {request.spec}" if request.spec else "release"
        raise ResolveError(f"{title} has no {what} at {base_url}; its releases there: {shown}",
                           requested=str(request), where=base_url, available=tuple(sort_labels(labels)))
    seen: list[Manifest] = []

    def quiet(label: str) -> Manifest | None:
        try:
            return load(label)
        except CudaRedistError:  # a manifest that does not answer is left out of the listing
            return None

    def attempt(manifest: Manifest) -> ProductPlan | None:
        seen.append(manifest)
        return plan_product(manifest, request, platform=platform, cuda_release=cuda_release,
                            base_url=base_url, archive_bases=archive_bases, components=components)

    found = attempt(load(ordered[0]))
    if found is None and ordered[1:]:
        with ThreadPoolExecutor(8) as pool:  # the rest at once: read them all to say what exists
            rest = list(pool.map(quiet, ordered[1:]))
        for manifest in rest:
            if manifest is not None and (found := attempt(manifest)) is not None:
                break
    if found is not None:
        return found
    asked = f" {request.spec}" if request.spec else ""
    raise ResolveError(
        f"{title}{asked} has no release with archives for CUDA {major} on {platform} at {base_url} "
        f"({_coverage(seen, request, platform, major)}); pick another --with {request.name}=VERSION, "
        "another CUDA train or another --platform", requested=str(request), where=base_url)


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
    title, tried = request.product.title, "; ".join(map(str, failures))
    raise FetchError(
        f"cannot list the {title} releases ({tried}). NVIDIA publishes {title} beside "
        f"the toolkit's redist folder (.../compute/{request.name}/redist/ next to .../compute/cuda/redist/; "
        f"a mirror written by `cudaredist mirror --with {request.name}` holds it there too); point "
        f"{env_base(request.name)} at its folder if yours is elsewhere",
        url=failures[-1].url if failures else "", status=failures[-1].status if failures else None)
