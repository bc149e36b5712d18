"""The ``pypi`` source: NVIDIA's wheels, through the ``cuda-toolkit`` metapackage on a package index."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from cudaredist.cache import Cache
from cudaredist.fetch.transport import Transport
from cudaredist.plan import Plan, PlannedArchive
from cudaredist.sources.base import Layout, Where
from cudaredist.sources.nvidia.manifest import check_relative_path
from cudaredist.sources.pypi.index import WheelIndex, list_trains
from cudaredist.sources.pypi.planner import resolve_plan
from cudaredist.sources.pypi.wheels import member_mapper, record_digests
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


def _build(item: PlannedArchive, platform: str, variant: str = "") -> BuiltArchive:
    from cudaredist.sources.mirroring import BuiltArchive
    from cudaredist.sources.pypi.repack import relative_path

    rel = check_relative_path(relative_path(item.component, platform, item.version, variant=variant),
                              f"{item.component}.{platform}", item.archive.filename)
    return BuiltArchive(item, platform, rel, variant)


class PypiSource:
    name = "pypi"
    builds_archives = True

    def __init__(self, transport: Transport, cache: Cache, where: Where) -> None:
        self.transport = transport
        self.index = WheelIndex(transport, cache, index_url=where.index_url, offline=where.offline,
                                mirror=where.mirror, no_fallback=where.no_fallback,
                                trust=Trust.of(where.trusted_hosts))
        transport.trust = self.index.trust

    def location(self) -> str:
        return self.index.index_url

    def trains(self) -> list[dict[str, Any]]:
        return list_trains(self.index)

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
        from cudaredist.profiles import parse_product_requests
        from cudaredist.sources.mirroring import BuiltManifest, MirrorContent, ProductMirror, unique_builds

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
                    key, date = ((item.product, p.release_date) if p else ("cuda", plan.release_date))
                    groups.setdefault((key, p.release if p else plan.release), (date, []))[1].append(
                        _build(item, plan.platform, p.cuda_variant if p else ""))

        def content(product: str, **more: Any) -> MirrorContent:
            manifests = tuple(BuiltManifest(label, date, tuple(builds), product=product)
                              for (name, label), (date, builds) in groups.items() if name == product)
            return MirrorContent(releases=tuple(m.label for m in manifests), manifests=manifests,
                                 builds=unique_builds([b for m in manifests for b in m.archives]),
                                 xz_preset=preset, **more)

        return content("cuda", notes=tuple(notes), products=tuple(
            ProductMirror(r.name, r.product.title, content(r.name)) for r in requests))
