"""A manifest and a profile -> the archives to install for one platform (pure)."""

from __future__ import annotations

from collections.abc import Sequence

from cudaredist.errors import PlanError
from cudaredist.plan import Archive, Plan, PlannedArchive, archive_url
from cudaredist.profiles import Spec, get_profile, wanted_specs
from cudaredist.sources.nvidia.manifest import Component, Manifest


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
    present = next((n for n in spec.names if n in manifest.components), None)
    if present is None:
        return spec.unplannable(f"CUDA {manifest.label} has no component {' or '.join(spec.names)} "
                                f"(needed for platform {platform})", manifest.label, platform)
    have = ", ".join(manifest.components[present].platforms) or "none"
    return spec.unplannable(f"component {present} of CUDA {manifest.label} has no archive for platform "
                            f"{platform} (it has: {have})", manifest.label, platform)


def make_plan(manifest: Manifest, *, platform: str, base_url: str, profile: str | None = "nvcc",
              components: Sequence[str] = (), source: str = "nvidia") -> Plan:
    """Select archives for ``platform``: the profile's components plus ``components``.

    ``profile=None`` installs exactly ``components``. Every failure happens here,
    before any download.
    """
    if platform not in manifest.platforms:
        raise PlanError(
            f"CUDA {manifest.label} has no archives for platform {platform!r}; "
            f"platforms in this release: {', '.join(p for p in manifest.platforms)}",
            release=manifest.label, platform=platform)
    specs = wanted_specs([s for s in get_profile(profile).specs if s.applies_to(manifest.label, platform)]
                         if profile is not None else [], components)
    items: list[PlannedArchive] = []
    notes: list[str] = []
    seen: set[str] = set()
    for spec in specs:
        chosen = manifest.first(spec.names, lambda c: _pick_archive(c, platform, manifest.label))
        if chosen is None and spec.missing:  # a release (or a mirror built from wheels) may lack it
            notes.append(f"CUDA {manifest.label} has no {spec} for {platform}: {spec.missing}")
            continue
        if chosen is None:
            raise _missing(spec, manifest, platform)
        comp, arch = chosen
        if comp.key in seen:
            continue
        seen.add(comp.key)
        items.append(PlannedArchive(comp.key, comp.version, arch,
                                    archive_url(base_url, arch.relative_path, comp.key),
                                    license=comp.license))
    return Plan(release=manifest.label, release_date=manifest.release_date, platform=platform,
                base_url=base_url, profile=profile or "custom", items=tuple(items), source=source,
                notes=tuple(notes))
