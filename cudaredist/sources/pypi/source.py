"""The ``pypi`` source: NVIDIA's wheels, through the ``cuda-toolkit`` metapackage on a package index."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from cudaredist.cache import Cache
from cudaredist.fetch.fetcher import Fetcher
from cudaredist.fetch.transport import Transport
from cudaredist.mirror import MirrorReport
from cudaredist.plan import Plan
from cudaredist.progress import Reporter
from cudaredist.sources import Layout, Where
from cudaredist.sources.pypi.index import WheelIndex, list_trains, resolve_plans
from cudaredist.sources.pypi.mirror import write_wheel_mirror
from cudaredist.sources.pypi.wheels import member_mapper
from cudaredist.tree.sonames import add_soname_links
from cudaredist.trust import Trust

LAYOUT = Layout(
    mapper=lambda item, platform: member_mapper(item.component, item.version, platform),
    # wheels carry no symlinks: the .so chains are restored from each library's SONAME
    after=lambda item, platform, tree, paths: add_soname_links(
        tree, paths, component=item.component, archive=item.archive.filename),
)


class PypiSource:
    name = "pypi"
    builds_archives = True

    def __init__(self, transport: Transport, cache: Cache, where: Where) -> None:
        self.transport = transport
        self.index = WheelIndex(transport, cache, index_url=where.index_url, offline=where.offline,
                                mirror=where.mirror, no_fallback=where.no_fallback,
                                trust=Trust.of(where.trusted_hosts))

    def location(self) -> str:
        return self.index.index_url

    def trains(self) -> list[dict[str, Any]]:
        return list_trains(self.index)

    def resolve(self, train: str, platforms: Sequence[str], *, profile: str | None,
                components: Sequence[str], products: Sequence[str] = ()) -> list[Plan]:
        return resolve_plans(self.index, train, platforms, profile=profile, components=components,
                             products=products)

    def relocate(self, plan: Plan) -> Plan:
        return plan  # a wheel is fetched from the URL the lock pins: no index, no base

    def write_mirror(self, out: Path, trains: Sequence[str], platforms: Sequence[str], *,
                     profile: str | None, components: Sequence[str], fetcher: Fetcher,
                     reporter: Reporter, jobs: int, xz_preset: int | None) -> MirrorReport:
        by_release: dict[str, list[Plan]] = {}
        for train in trains:
            plans = self.resolve(train, platforms, profile=profile, components=components)
            by_release.setdefault(plans[0].release, plans)
        return write_wheel_mirror(out, list(by_release.values()), fetch=fetcher.fetch, reporter=reporter,
                                  jobs=jobs, preset=6 if xz_preset is None else xz_preset)
