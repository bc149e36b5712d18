"""The ``pypi`` source: NVIDIA's wheels, through the ``cuda-toolkit`` metapackage on a package index.

A train resolves on the index (I/O through the :class:`~cudaredist.sources.pypi.index.WheelIndex`)
to the wheels for one platform: the metapackage's requirements for a profile, and library products
(``--source pypi --with cudnn``): NVIDIA's wheel of each product for the toolkit's CUDA major
(``nvidia-cudnn-cu13``, ``nvidia-cudss-cu12``, ...; names in ``[products.*]`` of profiles.toml),
mapped into the same tree as the toolkit's wheels."""

from __future__ import annotations

import functools
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from cudaredist import interrupts
from cudaredist.cache.store import Cache
from cudaredist.errors import FetchError, PlanError, ResolveError
from cudaredist.fetch.transport import Transport
from cudaredist.plan import Plan, PlannedArchive, ProductRelease
from cudaredist.profiles import (
    ProductRequest,
    Spec,
    parse_product_requests,
    wanted_specs,
)
from cudaredist.sources.base import Layout, ProductPlan, Where, patch, toolkit_components, with_products
from cudaredist.sources.nvidia.releases import train_rows
from cudaredist.sources.pypi.index import Release, WheelIndex
from cudaredist.sources.pypi.wheels import (
    choose_version,
    component_for,
    marker_env,
    member_mapper,
    pep440,
    pick_wheel,
    record_digests,
    wheel_platforms,
)
from cudaredist.tree.sonames import add_soname_links
from cudaredist.trust import Trust

if TYPE_CHECKING:  # what a mirror holds: imported by the mirror command alone (~2 ms of start-up)
    from cudaredist.sources.mirroring import BuiltArchive, MirrorContent

LAYOUT = Layout(
    mapper=lambda item, platform: member_mapper(item.component, item.version, platform),
    # wheels carry no symlinks: the .so chains are restored from each library's SONAME
    after=lambda item, platform, tree, paths: add_soname_links(
        tree, paths, component=item.component, archive=item.archive.filename),
    digests=record_digests,
)


def plan_product(index: WheelIndex, request: ProductRequest, *, platform: str, cuda_release: str,
                 name: str = "") -> ProductPlan:
    """The newest wheel of the product (project ``name``, else its own for ``cuda_release``'s major)
    that ``request`` allows and that fits ``platform``; else a :class:`ResolveError` naming what the
    index has for that platform."""
    product, major = request.product, cuda_release.split(".")[0]
    name = name or product.wheel_name(major)
    try:
        files = index.files(name)
    except FetchError as exc:
        if exc.status != 404 or index.pages_from_the_mirror_only:  # the mirror lacks it: its own error
            raise
        raise ResolveError(
            f"{product.title} for CUDA {major} is not on {index.index_url}: the index has no project "
            f"{name} (NVIDIA's {product.title} wheel for CUDA {major}); use --source nvidia, or another "
            "CUDA train", requested=str(request), where=index.index_url) from exc
    found = {v: fs for v, fs in files.items() if not v.is_prerelease}
    plat = index.data.platform(platform)
    allowed = [v for v in sorted(found, reverse=True) if request.matches(str(v))]
    for version in allowed:
        if (chosen := pick_wheel([f for f in found[version] if not f.yanked], plat)) is None:
            continue
        item = index.planned(name, chosen, product.specs[0].names[0], str(version),
                             f"{product.title} {version}", release=cuda_release, platform=platform,
                             product=request.name)
        label = ".".join(str(p) for p in (*version.release, 0, 0)[:3])  # 9.28.1.4 -> 9.28.1, as the redist
        return ProductPlan(ProductRelease(request.name, label, str(request), chosen.upload_time[:10],
                                          index.served.get(name, index.index_url), f"cuda{major}"), (item,))
    asked = f" {request.spec}" if request.spec else ""
    if not allowed:
        raise ResolveError(
            f"{product.title}{asked} has no wheel {name} on {index.index_url} for CUDA {major}; its "
            f"releases there: {', '.join(str(v) for v in sorted(found, reverse=True)[:12]) or 'none'}",
            requested=str(request), where=index.index_url)
    fits = [f"{v} ({wheel_platforms(found[v])})" for v in sorted(found)[-8:]]  # the 8 newest, all it shows
    raise PlanError(
        f"{product.title}{asked} has no wheel {name} for {platform} on {index.index_url} (its wheels: "
        f"{'; '.join(fits) or 'none'})", component=name, release=cuda_release, platform=platform)


def _patch(index: WheelIndex, request: ProductRequest, release: Release, platform: str) -> ProductPlan:
    """A product that ``replaces`` a toolkit wheel (cuBLAS): the index holds NVIDIA's patch releases as
    later versions of the toolkit's own project (``nvidia-cublas`` 13.4.3.11 beside the 13.4.1.3 that
    cuda-toolkit 13.2.2 pins), so the newest of the pinned major.minor takes its place where newer."""
    [req, *_] = _requirements_for(index, Spec((request.product.replaces,)), release, platform)
    shipped, _notes = _plan_item(index, req.name, [str(req.specifier)], release, platform)
    own = ProductRelease(request.name, shipped.version, str(request), release.date, index.index_url)
    return patch(request, own, platform, functools.partial(
        plan_product, index, platform=platform, cuda_release=release.label, name=req.name))


def _requirements_for(index: WheelIndex, spec: Spec, release: Release, platform: str) -> list[Requirement]:
    """The wheels one profile entry or ``--component`` asks for: an extra, a component or a package."""
    data, meta = index.data, index.metadata(release)
    env = marker_env(data.platform(platform))
    for alt in spec.names:
        extra = canonicalize_name(alt)
        if extra in meta.extras:
            reqs = meta.wanted(extra, env)
            if reqs:
                return reqs
            continue
        # a wheel or component by name: the extras that add it (only its requirements' markers asked)
        named = [r for r in meta.requirements
                 if r.name == extra or component_for(r.name, release.label) == alt]
        found: dict[str, Requirement] = {}
        for e in meta.extras if named else ():
            for r in meta.wanted(e, env, among=named):
                found.setdefault(r.name, r)
        if found:
            return list(found.values())
    offered = [e for e in meta.extras if meta.wanted(e, env)]
    if not offered:
        msg = (f"{data.metapackage} {release.label} lists no wheels for {platform} at all (its "
               "Requires-Dist markers leave that platform out); try a newer release")
    elif any(canonicalize_name(a) in meta.extras for a in spec.names):
        msg = (f"the extra {spec} of {data.metapackage} {release.label} names no wheel for {platform}; "
               f"extras with wheels for {platform}: {', '.join(offered)}")
    else:
        msg = (f"{data.metapackage} {release.label} has no extra, component or wheel {spec} for {platform}; "
               f"its extras: {', '.join(offered)}")
    raise PlanError(msg, component=str(spec), release=release.label, platform=platform)


def _plan_item(index: WheelIndex, name: str, specs: list[str], release: Release,
               platform: str) -> tuple[PlannedArchive, list[str]]:
    data = index.data
    plat = data.platform(platform)
    versions = {str(v): fs for v, fs in index.files(name).items()}
    version = choose_version(specs, versions)
    shown = " and ".join(s for s in specs if s) or "any version"
    if version is None:
        raise PlanError(f"no wheel of {name} on {index.index_url} matches {shown} (needed by "
                        f"{data.metapackage} {release.label})", component=name, release=release.label,
                        platform=platform)
    candidates = versions[version]
    notes: list[str] = []
    chosen = pick_wheel([f for f in candidates if not f.yanked], plat)
    if chosen is None and (chosen := pick_wheel(candidates, plat)) is not None:
        notes.append(f"{chosen.filename} is yanked on the index; no other wheel of {name} {version} fits")
    if chosen is None:
        raise PlanError(
            f"{name} {version} has no wheel for {platform} on {index.index_url} (its wheels are for: "
            f"{wheel_platforms(candidates) or 'no known platform'})", component=name, release=release.label,
            platform=platform)
    item = index.planned(name, chosen, component_for(name, release.label), version,
                         f"{data.metapackage} {release.label}", release=release.label, platform=platform)
    return item, notes


def resolve_plan(index: WheelIndex, train: str, *, platform: str, profile: str | None = "nvcc",
                 components: Sequence[str] = (), products: Sequence[str] = ()) -> Plan:
    """Resolve ``train`` on the index; select the wheels of ``profile`` (+ ``components``) for ``platform``.

    ``profile=None`` installs exactly ``components`` (extras, component names or wheel
    names). Every failure happens here, before any wheel is downloaded.
    """
    data = index.data
    data.platform(platform)
    requests = parse_product_requests(products)
    for r in requests:  # a product with no wheel is refused before any network
        if not r.product.replaces:
            r.product.wheel_name("")
    release = index.resolve(train)
    label = release.label
    picked = [_patch(index, r, release, platform) if r.product.replaces
              else plan_product(index, r, platform=platform, cuda_release=label) for r in requests]
    components = toolkit_components(requests, picked, components)
    prof = data.profile(profile) if profile is not None else None
    if prof is not None and prof.since and pep440(label) < pep440(prof.since):
        raise PlanError(f"profile {profile} cannot be built from CUDA {label}'s wheels: {prof.before}. "
                        f"Use --source nvidia, or a release from {prof.since} on", release=label,
                        platform=platform)
    own = prof.specs if prof is not None else ()
    notes = [s.missing for s in own if s.missing and not s.applies_to(label)]
    specs = wanted_specs([s for s in own if s.applies_to(label)], components)
    wanted: dict[str, dict[str, None]] = {}  # wheel -> its specifiers, each once, in order
    for spec in specs:
        for req in _requirements_for(index, spec, release, platform):
            wanted.setdefault(req.name, {})[str(req.specifier)] = None
    with ThreadPoolExecutor(min(8, len(wanted))) as pool:
        results = interrupts.results([pool.submit(_plan_item, index, name, list(specs), release,
                                                  platform) for name, specs in wanted.items()])
    notes.extend(n for _item, item_notes in results for n in item_notes)
    served = index.served.get(canonicalize_name(data.metapackage), index.index_url)
    plan = with_products(Plan(release=label, release_date=release.date, platform=platform, base_url=served,
                              profile=profile or "custom", items=tuple(item for item, _n in results),
                              source="pypi"), requests, picked)
    present = {i.component for i in plan.items}
    notes.extend(n.text for n in data.notes if n.component in present and platform in n.platforms)
    notes.extend(dict.fromkeys(index.notes))
    # the URL that answered for the metapackage's page, when it was redirected (fetched or cached)
    came = index.transport.moved.get(f"{served}{canonicalize_name(data.metapackage)}/", (served,))[-1]
    return replace(plan, notes=tuple(notes),
                   hashes_from=f"{came} ({index.trust.reason(came) or 'trusted by the caller'})")


class PypiSource:
    name = "pypi"

    def __init__(self, transport: Transport, cache: Cache, where: Where) -> None:
        self.transport = transport
        self.index = WheelIndex(transport, cache, index_url=where.index_url, offline=where.offline,
                                mirror=where.mirror, no_fallback=where.no_fallback,
                                trust=Trust.of(where.trusted_hosts))
        transport.trust = self.index.trust

    def location(self) -> str:
        return self.index.index_url

    def trains(self) -> list[dict[str, Any]]:
        rels = [r for r in self.index.releases() if not r.version.is_prerelease]  # newest first
        return train_rows([r.label for r in rels], {r.label: r.date for r in reversed(rels)}.__getitem__)

    def resolve(self, train: str, platforms: Sequence[str], *, profile: str | None,
                components: Sequence[str], products: Sequence[str] = ()) -> list[Plan]:
        # one index object: its project pages are read once, so every platform sees the same release
        return [resolve_plan(self.index, train, platform=p, profile=profile, components=components,
                             products=products) for p in platforms]

    def relocate(self, plan: Plan) -> Plan:
        return plan  # a wheel is fetched from the URL the lock pins: no index, no base

    def mirror_content(self, trains: Sequence[str], platforms: Sequence[str], *, profile: str | None,
                       components: Sequence[str], xz_preset: int | str | None,
                       products: Sequence[str] = ()) -> MirrorContent:
        """A redist archive built from each wheel (:mod:`.repack`), listed in manifests written from
        what was built; each ``--with`` product's wheels the same, in its own folder, named and
        listed as NVIDIA lays a product out (per CUDA variant: ``_cuda13`` archives, ``cuda13`` keys)."""
        from cudaredist.sources import mirroring
        from cudaredist.sources.pypi.repack import relative_path

        requests = parse_product_requests(products)
        preset = 6 if xz_preset is None else xz_preset
        notes: list[str] = []
        # (product, release) -> (release date, builds), in the order met; product "cuda": the toolkit
        groups: dict[tuple[str, str], tuple[str, list[BuiltArchive]]] = {}
        for train in trains:
            plans = self.resolve(train, platforms, profile=profile, components=components, products=products)
            if ("cuda", plans[0].release) in groups:
                continue
            groups[("cuda", plans[0].release)] = (plans[0].release_date, [])
            for plan in plans:
                notes.extend(n for n in plan.notes if n not in notes)
                made = {p.name: p for p in plan.products}
                for item in plan.items:
                    p = made.get(item.product)
                    key, label, date, variant = ((p.name, p.release, p.release_date, p.cuda_variant) if p
                                                 else ("cuda", plan.release, plan.release_date, ""))
                    rel = relative_path(item.component, plan.platform, item.version, variant)
                    groups.setdefault((key, label), (date, []))[1].append(
                        mirroring.BuiltArchive(item, plan.platform, rel, variant))

        def content(product: str, **more: Any) -> MirrorContent:
            manifests = tuple(mirroring.BuiltManifest(label, date, tuple(builds), product=product)
                              for (name, label), (date, builds) in groups.items() if name == product)
            builds = mirroring.unique_builds([b for m in manifests for b in m.archives])
            return mirroring.MirrorContent(manifests=manifests, builds=builds, xz_preset=preset, **more)

        return content("cuda", notes=tuple(notes), products={r.name: content(r.name) for r in requests})
