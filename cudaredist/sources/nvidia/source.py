"""The ``nvidia`` source: NVIDIA's redist server, a mirror of it, or a directory laid out like it."""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from cudaredist.cache.store import Cache
from cudaredist.errors import CudaRedistError, ManifestError, PlanError, UsageError
from cudaredist.fetch.transport import Transport
from cudaredist.plan import Plan, PlannedArchive, archive_url, join_url, with_bases
from cudaredist.profiles import (
    ProductRequest,
    component_root,
    get_profile,
    needs_notes,
    parse_product_requests,
)
from cudaredist.sources.base import Layout, Where, toolkit_components, with_products
from cudaredist.sources.nvidia.index import (
    Bases,
    Index,
    Release,
    base_and_mirror,
    default_bases,
    trusted_bases,
)
from cudaredist.sources.nvidia.manifest import check_relative_path, make_plan
from cudaredist.sources.nvidia.products import env_base, product_base, product_bases, resolve_with
from cudaredist.sources.nvidia.releases import train_rows
from cudaredist.tree.extract import redist_mapper
from cudaredist.trust import Trust

if TYPE_CHECKING:  # what a mirror holds: imported by the mirror command alone (~2 ms of start-up)
    from cudaredist.sources.mirroring import Document, MirrorContent


LAYOUT = Layout(mapper=lambda item, platform: redist_mapper(item.component, item.archive.filename,
                                                           component_root(item.component)))


class NvidiaSource:
    name = "nvidia"

    def __init__(self, transport: Transport, cache: Cache, where: Where) -> None:
        self.transport = transport
        self.where = where  # checked by open_source: a --channel is its base URL already
        self.index = Index(transport, cache, offline=where.offline)
        self.trust = transport.trust = Trust.of(where.trusted_hosts)

    def trusted(self) -> Bases:
        """The bases split by trust: manifests only from authenticated ones (refused if none)."""
        return trusted_bases(self.where.base_url, self.where.mirror, fallback=not self.where.no_fallback,
                             trust=self.trust)

    def location(self) -> str:
        return self.trusted().manifests[0]

    def trains(self) -> list[dict[str, Any]]:
        base = self.location()

        def date(label: str) -> str:
            try:
                return str(self.index.manifest(base, label).release_date)
            except CudaRedistError:
                return ""

        return train_rows(self.index.labels(base), date)

    def resolve(self, train: str, platforms: Sequence[str], *, profile: str | None,
                components: Sequence[str], products: Sequence[str] = ()) -> list[Plan]:
        requests = parse_product_requests(products)  # a bad --with fails before any network
        release = self.index.release(train, self.trusted())
        url = join_url(release.base, f"redistrib_{release.label}.json")
        came = self.transport.moved.get(url, (release.base,))[-1]  # the URL that answered, if redirected
        why = f"{came} ({self.trust.reason(came) or 'trusted by the caller'})"
        return [replace(p, hashes_from=why, channel=self.where.channel or "")
                for p in self._plans(release, platforms, profile, components, requests)]

    def _plans(self, release: Release, platforms: Sequence[str], profile: str | None,
               components: Sequence[str], requests: Sequence[ProductRequest]) -> list[Plan]:
        """The toolkit's plan per platform, with each product's archives and release added; the
        ``--component`` values a product's manifest has are the product's."""
        trusted, base_url = self.trusted(), self._base_url()
        mapped = {r.name: product_bases(trusted, r.name, base_url=base_url, trust=self.trust)
                  for r in requests}
        # what the profile itself asks for, when it is not there for the product
        own = [n for s in get_profile(profile).specs for n in s.names] if profile is not None else []

        plans = []
        for platform in platforms:
            picked = [resolve_with(self.index, r, mapped[r.name], release, platform=platform,
                                   components=components) for r in requests]
            releases = {p.release.name: p.release.release for p in picked}
            try:
                # the manifest's base for the plan, the archive bases in order for its archives
                plan = with_bases(make_plan(release.manifest, platform=platform, base_url=release.base,
                                            profile=profile,
                                            components=toolkit_components(requests, picked, components)),
                                  release.archive_bases)
            except PlanError as exc:
                needing = [r.product.title for r in requests
                           if exc.component in r.product.needs_for(releases.get(r.name, ""))]
                if not needing:
                    raise
                raise PlanError(f"{exc}; {' and '.join(needing)} cannot work without it (its libraries "
                                "load it)", component=exc.component, release=exc.release,
                                platform=exc.platform) from exc
            notes = needs_notes(requests, [*components, *own], plan.components, releases)
            plans.append(with_products(replace(plan, notes=(*plan.notes, *notes)), requests, picked))
        return plans

    def _base_url(self) -> str:
        return base_and_mirror(self.where.base_url, None)[0]

    def relocate(self, plan: Plan) -> Plan:
        # archives from the mirror first (unless none), then the base URL (this run's, else the lock's)
        bases = default_bases(self.where.base_url or plan.base_url, self.where.mirror,
                              fallback=not self.where.no_fallback)

        def at(base: str, product: str) -> str:
            # the lock's own base: the product folder it was locked from (an override then included)
            if base == plan.base_url and not os.environ.get(env_base(product)):
                return plan.product_base(product)
            return product_base(base, product, override=base == self._base_url())

        return with_bases(plan, bases, at)

    def mirror_content(self, trains: Sequence[str], platforms: Sequence[str], *, profile: str | None,
                       components: Sequence[str], xz_preset: int | str | None,
                       products: Sequence[str] = ()) -> MirrorContent:
        """The archives as served, each release's manifest bytes, and (online) the licence files;
        each ``--with`` product's the same, for its own folder."""
        if xz_preset is not None:
            raise UsageError("--xz-preset needs --source pypi: NVIDIA's archives are mirrored as served")
        requests = parse_product_requests(products)
        releases: dict[str, tuple[Release, list[Plan]]] = {}
        for train in trains:
            release = self.index.release(train, self.trusted())
            if release.label not in releases:
                releases[release.label] = (release, self._plans(release, platforms, profile, components,
                                                                requests))
        plans = [p for _r, ps in releases.values() for p in ps]
        content = self._content([r for r, _p in releases.values()],
                                [i for p in plans for i in p.items if not i.product])
        return replace(content, products={r.name: self._content(
            self._product_releases(r, plans), [i for p in plans for i in p.items if i.product == r.name])
            for r in requests})

    def _content(self, releases: Sequence[Release], items: Sequence[PlannedArchive]) -> MirrorContent:
        from cudaredist.sources.mirroring import MirrorContent, manifest_folder, unique_copies

        folder = manifest_folder(releases[0].base if releases else "",
                                 [i.archive.relative_path for i in items])
        copies = unique_copies(items, folder)
        documents, notes = ([], []) if self.where.offline else _licenses(
            releases, {c.item.component for c in copies}, folder)
        return MirrorContent(copies=copies, documents=tuple(documents), manifests=tuple(releases),
                             notes=tuple(notes), folder=folder)

    def _product_releases(self, request: ProductRequest, plans: Sequence[Plan]) -> list[Release]:
        """The releases of one product the plans picked, as served (one per label)."""
        mapped = product_bases(self.trusted(), request.name, base_url=self._base_url(), trust=self.trust)
        found: dict[str, Release] = {}
        for plan in plans:
            for p in plan.products:
                # a product from the CUDA manifest's own entry (compat of 13.1-13.3) is the toolkit's
                if p.name == request.name and p.release not in found and any(
                        i.product == p.name for i in plan.items):
                    manifest = self.index.manifest(p.base_url, p.release)
                    found[p.release] = Release(p.release, p.base_url, mapped.archives, manifest,
                                               self.index.manifest_bytes(p.base_url, p.release))
        return list(found.values())


def _licenses(releases: Sequence[Release], wanted: set[str],
              folder: str) -> tuple[list[Document], list[str]]:
    """Each mirrored component's license_path file, from the release's base and then its fallbacks;
    a path the manifest gets wrong is a note."""
    from cudaredist.sources.mirroring import Document, in_mirror

    documents: dict[str, Document] = {}  # by the license_path each mirrors
    notes: list[str] = []
    for release in releases:
        for key in sorted(wanted):
            comp = release.manifest.components.get(key)
            if comp is None or not comp.license_path or comp.license_path in documents:
                continue
            try:
                rel = check_relative_path(comp.license_path, f"{key}.license_path", release.label)
                bases = dict.fromkeys((release.base, *release.archive_bases))
                urls = tuple(archive_url(base, rel, key) for base in bases)
            except ManifestError as exc:
                notes.append(str(exc))
                continue
            if not in_mirror(folder, rel).startswith(".."):  # not above the archives
                documents[rel] = Document(in_mirror(folder, rel), urls)
    return list(documents.values()), notes
