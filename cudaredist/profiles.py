"""Profiles and platform rules, read from the ``manifests/`` data files (pure, cached)."""

from __future__ import annotations

import platform as _platform
import sys
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from cudaredist.errors import ManifestError, PlanError
from cudaredist.plan import version_key

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

DEFAULT_PROFILE = "nvcc"


@dataclass(frozen=True)
class Spec:
    """One wanted component: alternatives (renames) and the first release that needs it."""

    names: tuple[str, ...]
    since: str = ""

    def applies_to(self, release: str) -> bool:
        return not self.since or version_key(release) >= version_key(self.since)

    def __str__(self) -> str:
        return "|".join(self.names)


@dataclass(frozen=True)
class Profile:
    name: str
    description: str
    specs: tuple[Spec, ...]
    extends: str = ""


@dataclass(frozen=True)
class PlatformRule:
    name: str
    links: tuple[tuple[str, str], ...]
    hosts: tuple[tuple[str, str], ...]

    @property
    def is_windows(self) -> bool:
        return self.name.startswith("windows")


def data_dir() -> Path:
    """``cudaredist/_manifests`` in a wheel, the repository's ``manifests/`` in a checkout."""
    here = Path(__file__).resolve().parent
    for candidate in (here / "_manifests", here.parent / "manifests"):
        if (candidate / "profiles.toml").is_file():
            return candidate
    raise ManifestError(f"profiles.toml not found next to {here}; the installation is incomplete")


@cache
def _load(path: str) -> dict[str, Any]:
    try:
        with open(path, "rb") as fh:
            data: dict[str, Any] = tomllib.load(fh)
            return data
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise ManifestError(f"cannot read {path}: {exc}", source=path) from exc


def _data() -> dict[str, Any]:
    return _load(str(data_dir() / "profiles.toml"))


def parse_spec(item: object, where: str = "profile") -> Spec:
    if isinstance(item, str):
        names, since = item, ""
    elif isinstance(item, dict) and isinstance(item.get("name"), str):
        names, since = item["name"], str(item.get("since", ""))
    else:
        raise ManifestError(f"{where}: a component must be a name or {{name, since}}, got {item!r}")
    parts = tuple(n.strip() for n in names.split("|") if n.strip())
    if not parts:
        raise ManifestError(f"{where}: empty component name")
    return Spec(parts, since)


def get_profile(name: str) -> Profile:
    profiles = _data().get("profiles", {})
    seen: list[str] = []
    specs: list[Spec] = []

    def walk(n: str) -> str:
        if n not in profiles:
            raise PlanError(f"unknown profile {n!r}; profiles: {', '.join(sorted(profiles))}")
        if n in seen:
            raise ManifestError(f"profile {n!r} extends itself (through {' -> '.join(seen)})")
        seen.append(n)
        body = profiles[n]
        if "extends" in body:
            walk(str(body["extends"]))
        specs.extend(parse_spec(c, f"profile {n}") for c in body.get("components", []))
        return str(body.get("description", ""))

    description = walk(name)
    return Profile(name, description, tuple(specs), str(profiles[name].get("extends", "")))


def platform_rule(name: str) -> PlatformRule:
    body = _data().get("platforms", {}).get(name)
    if body is None:
        # A platform NVIDIA adds later still installs; it just gets no fix-ups.
        return PlatformRule(name, (), ())
    links = tuple(sorted((str(k), str(v)) for k, v in body.get("links", {}).items()))
    hosts = tuple((str(o), str(m)) for o, m in body.get("host", []))
    return PlatformRule(name, links, hosts)


def known_platforms() -> list[str]:
    return sorted(_data().get("platforms", {}))


def host_platform(system: str | None = None, machine: str | None = None) -> str:
    system = (system or _platform.system()).lower()
    machine = (machine or _platform.machine()).lower()
    for name in known_platforms():
        if (system, machine) in platform_rule(name).hosts:
            return name
    raise PlanError(
        f"this host ({system} {machine}) has no CUDA redist platform of its own; "
        f"pass --platform (one of {', '.join(known_platforms())})")


def component_title(component: str) -> str:
    """NVIDIA's display name of a component (``[names]`` in profiles.toml), else its key."""
    return str(_data().get("names", {}).get(component, component))


def profile_names() -> list[str]:
    return sorted(_data().get("profiles", {}))
