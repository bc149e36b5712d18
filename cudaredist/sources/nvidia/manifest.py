"""Parse NVIDIA's ``redistrib_X.Y.Z.json`` into frozen, validated models (pure)."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote

from cudaredist.errors import ManifestError
from cudaredist.plan import Archive

_HEX64 = re.compile(r"[0-9a-fA-F]{64}")
# ASCII digits only: str.isdigit() also accepts "²", which int() refuses
_SIZE = re.compile(r"[0-9]{1,20}")
_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:")
# A single archive larger than this is not a CUDA component; it is a hostile manifest.
MAX_ARCHIVE_SIZE = 64 * 1024**3


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


def check_relative_path(value: object, where: str, source: str) -> str:
    """A manifest path must stay under the base URL: relative, no '..', no scheme, no backslash."""
    if not isinstance(value, str) or not value:
        raise ManifestError(f"{source}: {where}: relative_path must be a non-empty string, got {value!r}",
                            source=source, entry=where)
    # "%2e%2e/" is "../" once a server or a file:// base decodes it; "?" and "#" end the path
    if not (_plain(value) and _plain(unquote(value))) or any(ch in value for ch in "?#"):
        raise ManifestError(
            f"{source}: {where}: relative_path {value!r} is not a plain relative path "
            "(absolute paths, URLs, '..' and backslashes are refused)",
            source=source, entry=where)
    return value


def _plain(path: str) -> bool:
    return not (
        path.startswith(("/", "\\"))
        or _SCHEME.match(path) is not None
        or "\\" in path
        or any(part in ("..", ".", "") for part in path.split("/"))
        or any(ord(ch) < 0x20 for ch in path)
    )


def _archive(obj: dict[str, Any], where: str, source: str) -> Archive:
    rel = check_relative_path(obj.get("relative_path"), where, source)
    sha = obj.get("sha256")
    if not isinstance(sha, str) or not _HEX64.fullmatch(sha):
        raise ManifestError(f"{source}: {where}: sha256 must be 64 hex digits, got {sha!r}",
                            source=source, entry=where)
    raw = obj.get("size")
    if isinstance(raw, bool):
        raw = None
    size: int | None = None
    if isinstance(raw, int):
        size = raw
    elif isinstance(raw, str) and _SIZE.fullmatch(raw.strip()):
        size = int(raw.strip())
    if size is None or size < 0 or size > MAX_ARCHIVE_SIZE:
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
        if not value.keys().isdisjoint(("relative_path", "sha256", "size", "md5")):
            archives[plat] = _archive(value, where, source)
        # a flat entry may hold variant subkeys too (cuDNN 9.27.0's windows-arm64: a flat _cuda13.4
        # build and a "cuda13" one in one object)
        nested = {v: _archive(a, f"{where}.{v}", source)
                  for v, a in value.items() if isinstance(a, dict)}
        if nested:
            variants[plat] = nested
    version = obj.get("version", "")
    return Component(
        key=key,
        name=str(obj.get("name", key)),
        version=str(version) if isinstance(version, (str, int, float)) else "",
        license=str(obj.get("license", "")),
        license_path=str(obj.get("license_path", "")),
        archives=archives,
        variants=variants,
    )


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
    if isinstance(found, str) and label and found != label:
        raise ManifestError(f"{source}: release_label is {found!r} but the file name says {label!r}",
                            source=source, entry="release_label")
    final_label = found if isinstance(found, str) and found else label
    date = obj.get("release_date", "")
    return Manifest(label=final_label, release_date=date if isinstance(date, str) else "",
                    components=components, source=source)
