"""Parse NVIDIA's ``redistrib_X.Y.Z.json`` into frozen, validated models, and pick the archives a
profile asks for on one platform (:func:`make_plan`) (pure).

The rules for a manifest whose shape changes, all here. A missing ``name``, ``version``,
``license``, ``license_path``, ``md5``, ``release_date`` or ``release_label`` is a default (the key,
"", the file name's label); a missing ``relative_path``, ``sha256`` or ``size`` in an archive entry
is refused, naming the entry. Unknown keys are skipped at every level: scalars and lists
(``release_product``, ``cuda_variant``), and objects that hold no archive keys. A component
``version`` is text, numeric or not; a ``release_label`` that is not the file name's release is
refused, one with a pre-release suffix on it (``13.4.0-ea``) is that release. A platform key NVIDIA
adds (``windows-arm64``, ``linux-all``) is a platform like any other; one that is not a name
(``[A-Za-z0-9._-]``) is refused. ``relative_path``: :func:`check_relative_path`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar
from urllib.parse import unquote

from cudaredist.errors import ManifestError, PlanError
from cudaredist.plan import Archive, Plan, PlannedArchive, archive_url
from cudaredist.profiles import Spec, get_profile, wanted_specs

_HEX64 = re.compile(r"[0-9a-fA-F]{64}")
# ASCII digits only: str.isdigit() also accepts "²", which int() refuses
_SIZE = re.compile(r"[0-9]{1,20}")
_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:")
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
_ARCHIVE_KEYS = ("relative_path", "sha256", "size", "md5")
# A single archive larger than this is not a CUDA component; it is a hostile manifest.
MAX_ARCHIVE_SIZE = 64 * 1024**3
T = TypeVar("T")


@dataclass(frozen=True)
class Component:
    key: str
    name: str
    version: str
    license: str
    license_path: str
    archives: dict[str, Archive] = field(default_factory=dict)
    # platform -> variant name (e.g. "cuda13.3") -> archive, for cuda_variant entries
    variants: dict[str, dict[str, Archive]] = field(default_factory=dict)

    @property
    def platforms(self) -> tuple[str, ...]:
        return tuple(sorted({*self.archives, *self.variants}))


@dataclass(frozen=True)
class Manifest:
    label: str
    release_date: str
    components: dict[str, Component]
    source: str = ""

    @property
    def platforms(self) -> tuple[str, ...]:
        return tuple(sorted({p for c in self.components.values() for p in c.platforms}))

    def first(self, names: Iterable[str],
              pick: Callable[[Component], T | None]) -> tuple[Component, T] | None:
        """The first component of ``names`` (alternatives) that ``pick`` finds an archive of, and that."""
        for name in names:
            comp = self.components.get(name)
            if comp is not None and (found := pick(comp)) is not None:
                return comp, found
        return None


def check_relative_path(value: object, where: str, source: str) -> str:
    """A relative URL reference (folders and ``..``) that :func:`cudaredist.plan.archive_url` joins
    to the manifest's folder; anything that could leave it otherwise is refused here, naming the
    entry (an absolute path too: a mirror could not hold it; ``%2e%2e`` is ``..`` to a server)."""
    if not isinstance(value, str) or not value:
        raise ManifestError(f"{source}: {where}: relative_path must be a non-empty string, got {value!r}",
                            source=source, entry=where)
    parts = value.split("/")
    why = ("names a scheme (another server, or a drive)" if _SCHEME.match(value) else
           "starts with '/' (an absolute path, or //host: another server)" if value.startswith("/") else
           "has a query or fragment ('?' or '#')" if any(ch in value for ch in "?#") else
           "has a backslash" if "\\" in value else
           "has a control character" if any(ord(ch) < 0x20 or ord(ch) == 0x7F for ch in value) else
           "has an empty folder name ('//')" if "" in parts else
           "ends in '.' or '..', not a file name" if parts[-1] in (".", "..") else
           "percent-encodes a dot segment or a separator (%2e%2e, %2f)" if any(
               p != unquote(p) and (unquote(p) in (".", "..") or any(c in unquote(p) for c in "/\\"))
               for p in parts) else "")
    if why:
        raise ManifestError(
            f"{source}: {where}: relative_path {value!r} {why}; an archive's path must be relative "
            "to the manifest's folder (folders and '..' only) and stay on its server",
            source=source, entry=where)
    return value


def _archive(obj: dict[str, Any], where: str, source: str) -> Archive:
    rel = check_relative_path(obj.get("relative_path"), where, source)
    sha = obj.get("sha256")
    if not isinstance(sha, str) or not _HEX64.fullmatch(sha):
        raise ManifestError(f"{source}: {where}: sha256 must be 64 hex digits, got {sha!r}",
                            source=source, entry=where)
    raw = obj.get("size")
    text = str(raw).strip() if isinstance(raw, (int, str)) and not isinstance(raw, bool) else ""
    size = int(text) if _SIZE.fullmatch(text) else None
    if size is None or size > MAX_ARCHIVE_SIZE:
        raise ManifestError(
            f"{source}: {where}: size must be a non-negative integer up to {MAX_ARCHIVE_SIZE}, got {raw!r}",
            source=source, entry=where)
    md5 = obj.get("md5", "")
    return Archive(rel, sha.lower(), size, md5 if isinstance(md5, str) else "")


def _component(key: str, obj: dict[str, Any], source: str) -> Component:
    archives: dict[str, Archive] = {}
    variants: dict[str, dict[str, Archive]] = {}
    for plat, value in obj.items():
        if not isinstance(value, dict):
            continue  # name, version, license, cuda_variant lists, future scalar keys
        where = f"{key}.{plat}"
        # an archive entry that lost its relative_path is broken, not a variant dict to skip
        if not value.keys().isdisjoint(_ARCHIVE_KEYS):
            archives[plat] = _archive(value, where, source)
        # a flat entry may hold variant subkeys too (cuDNN 9.27.0's windows-arm64: a flat _cuda13.4
        # build and a "cuda13" one in one object)
        nested = {v: _archive(a, f"{where}.{v}", source) for v, a in value.items()
                  if isinstance(a, dict) and not a.keys().isdisjoint(_ARCHIVE_KEYS)}
        if nested:
            variants[plat] = nested
        if (plat in archives or nested) and not _NAME.fullmatch(plat):
            raise ManifestError(f"{source}: {key}: platform key {plat!r} is not a platform name (letters, "
                                "digits, '.', '_' and '-')", source=source, entry=where)
    version = obj.get("version", "")
    return Component(key, str(obj.get("name", key)),
                     str(version) if isinstance(version, (str, int, float)) else "",
                     str(obj.get("license", "")), str(obj.get("license_path", "")), archives, variants)


def parse_manifest(data: bytes | str, *, label: str = "", source: str = "") -> Manifest:
    """Parse one redistrib JSON; ``label`` fills in ``release_label`` before 12.2."""
    source = source or (f"redistrib_{label}.json" if label else "manifest")
    try:
        obj = json.loads(data)
    except (ValueError, UnicodeDecodeError, RecursionError) as exc:
        raise ManifestError(f"{source} is not valid JSON: {exc}", source=source) from exc
    if not isinstance(obj, dict):
        raise ManifestError(f"{source}: the top level must be a JSON object, got {type(obj).__name__}",
                            source=source)
    components: dict[str, Component] = {}
    for key, value in obj.items():
        if isinstance(value, dict):
            components[key] = _component(key, value, source)
    found = obj.get("release_label")
    if isinstance(found, str) and label and found != label and not re.fullmatch(
            re.escape(label) + r"[-_+ ~][A-Za-z0-9._ -]{1,32}", found):
        raise ManifestError(f"{source}: release_label is {found!r} but the file name says {label!r}",
                            source=source, entry="release_label")
    final_label = label or (found if isinstance(found, str) else "")
    date = obj.get("release_date", "")
    return Manifest(label=final_label, release_date=date if isinstance(date, str) else "",
                    components=components, source=source)


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
        return PlanError(f"CUDA {manifest.label} has no component {' or '.join(spec.names)} (needed for "
                         f"platform {platform})", component=str(spec), release=manifest.label,
                         platform=platform)
    have = ", ".join(manifest.components[present].platforms) or "none"
    return PlanError(f"component {present} of CUDA {manifest.label} has no archive for platform {platform} "
                     f"(it has: {have})", component=str(spec), release=manifest.label, platform=platform)


def make_plan(manifest: Manifest, *, platform: str, base_url: str, profile: str | None = "nvcc",
              components: Sequence[str] = ()) -> Plan:
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
    for spec in specs:
        chosen = manifest.first(spec.names, lambda c: _pick_archive(c, platform, manifest.label))
        if chosen is None and spec.missing:  # a release (or a mirror built from wheels) may lack it
            notes.append(f"CUDA {manifest.label} has no {spec} for {platform}: {spec.missing}")
            continue
        if chosen is None:
            raise _missing(spec, manifest, platform)
        comp, arch = chosen
        if any(i.component == comp.key for i in items):
            continue
        items.append(PlannedArchive(comp.key, comp.version, arch,
                                    archive_url(base_url, arch.relative_path, comp.key),
                                    license=comp.license))
    return Plan(release=manifest.label, release_date=manifest.release_date, platform=platform,
                base_url=base_url, profile=profile or "custom", items=tuple(items), notes=tuple(notes))
