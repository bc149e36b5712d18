"""The install plan: which archive of which component, from where (pure)."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from cudaredist.errors import PlanError
from cudaredist.profiles import Spec, get_profile, parse_spec
from cudaredist.sources.nvidia.manifest import Archive, Component, Manifest


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

    @property
    def urls(self) -> tuple[str, ...]:
        return (self.url, *self.fallback_urls)


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

    @property
    def total_size(self) -> int:
        return sum(i.archive.size for i in self.items)

    @property
    def components(self) -> tuple[str, ...]:
        return tuple(i.component for i in self.items)

    def content_key(self) -> str:
        """Identifies what the tree holds: platform + archives' hashes (not where they came from)."""
        body = json.dumps([self.platform,
                           sorted((i.component, i.archive.sha256, i.layout) for i in self.items)])
        return hashlib.sha256(body.encode()).hexdigest()

    def to_json(self) -> dict[str, Any]:
        return {
            "release": self.release,
            "release_date": self.release_date,
            "platform": self.platform,
            "base_url": self.base_url,
            "source": self.source,
            "profile": self.profile,
            "total_size": self.total_size,
            "components": [
                {"name": i.component, "version": i.version, "url": i.url,
                 "relative_path": i.archive.relative_path, "sha256": i.archive.sha256,
                 "size": i.archive.size, "layout": i.layout}
                for i in self.items
            ],
            "notes": list(self.notes),
        }


def join_url(base: str, relative: str) -> str:
    return base.rstrip("/") + "/" + relative


def _pick_archive(comp: Component, platform: str, release: str) -> Archive | None:
    if platform in comp.archives:
        return comp.archives[platform]
    variants = comp.variants.get(platform)
    if not variants:
        return None
    major_minor = ".".join(release.split(".")[:2])
    for want in (f"cuda{major_minor}", f"cuda{release.split('.')[0]}"):
        if want in variants:
            return variants[want]
    if len(variants) == 1:
        return next(iter(variants.values()))
    raise PlanError(
        f"{comp.key} has several variants for {platform} in CUDA {release} "
        f"({', '.join(sorted(variants))}) and none matches the release",
        component=comp.key, release=release, platform=platform)


def _missing(spec: Spec, manifest: Manifest, platform: str) -> PlanError:
    present = [n for n in spec.names if n in manifest.components]
    if present:
        comp = manifest.components[present[0]]
        have = ", ".join(comp.platforms) or "none"
        msg = (f"component {present[0]} of CUDA {manifest.label} has no archive for platform {platform} "
               f"(it has: {have})")
    else:
        msg = (f"CUDA {manifest.label} has no component {' or '.join(spec.names)} "
               f"(needed for platform {platform})")
    return PlanError(msg, component=str(spec), release=manifest.label, platform=platform)


def make_plan(
    manifest: Manifest,
    *,
    platform: str,
    base_url: str,
    profile: str | None = "nvcc",
    components: Sequence[str] = (),
    source: str = "nvidia",
) -> Plan:
    """Select archives for ``platform``: the profile's components plus ``components``.

    ``profile=None`` installs exactly ``components``. Every failure happens here,
    before any download.
    """
    if platform not in manifest.platforms:
        raise PlanError(
            f"CUDA {manifest.label} has no archives for platform {platform!r}; "
            f"platforms in this release: {', '.join(p for p in manifest.platforms)}",
            release=manifest.label, platform=platform)
    specs: list[Spec] = []
    if profile is not None:
        specs.extend(s for s in get_profile(profile).specs if s.applies_to(manifest.label))
    specs.extend(parse_spec(c, "--component") for c in components)
    if not specs:
        raise PlanError("nothing to install: give a profile or at least one --component")
    items: list[PlannedArchive] = []
    seen: set[str] = set()
    for spec in specs:
        chosen: tuple[Component, Archive] | None = None
        for name in spec.names:
            comp = manifest.components.get(name)
            arch = _pick_archive(comp, platform, manifest.label) if comp else None
            if comp and arch:
                chosen = (comp, arch)
                break
        if chosen is None:
            raise _missing(spec, manifest, platform)
        comp, arch = chosen
        if comp.key in seen:
            continue
        seen.add(comp.key)
        items.append(PlannedArchive(comp.key, comp.version, arch, join_url(base_url, arch.relative_path)))
    return Plan(
        release=manifest.label,
        release_date=manifest.release_date,
        platform=platform,
        base_url=base_url,
        profile=profile or "custom",
        items=tuple(items),
        source=source,
    )


def plan_from_json(obj: dict[str, Any]) -> Plan:
    """Inverse of :meth:`Plan.to_json` (lock files, records)."""
    items = tuple(
        PlannedArchive(
            component=c["name"], version=c.get("version", ""),
            archive=Archive(c["relative_path"], c["sha256"], int(c["size"])),
            url=c["url"], layout=c.get("layout", "redist"))
        for c in obj["components"])
    return Plan(obj["release"], obj.get("release_date", ""), obj["platform"], obj["base_url"],
                obj.get("profile", "custom"), items, obj.get("source", "nvidia"),
                tuple(obj.get("notes", ())))



