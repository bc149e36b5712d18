"""NVIDIA's CUDA wheels: versions, requirements, wheel tags, and where wheel members go in the tree (pure).

The rules that change when NVIDIA renames or moves something are data in
``manifests/pypi.toml``; this module reads them and applies them. The standards underneath
(PEP 440 versions, PEP 508 requirements and markers, wheel file names and tags, METADATA)
come from ``packaging``, the library pip uses.
"""

from __future__ import annotations

import fnmatch
import re
import zipfile
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cache
from typing import Any

from packaging.markers import Marker, UndefinedComparison, UndefinedEnvironmentName
from packaging.metadata import parse_email
from packaging.requirements import InvalidRequirement, Requirement
from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.tags import Tag
from packaging.utils import InvalidWheelFilename, NormalizedName, canonicalize_name, parse_wheel_filename
from packaging.version import InvalidVersion, Version

from cudaredist.errors import ManifestError, PlanError
from cudaredist.profiles import Profile, Spec, build_profile, data_dir, is_windows, load_toml, parse_spec
from cudaredist.sources.pypi.simple import IndexFile
from cudaredist.tree.paths import tree_path

# ------------------------------------------------------------------------------------------------
# Data (manifests/pypi.toml)


@dataclass(frozen=True)
class ExtraSpec(Spec):
    """One wanted extra of the metapackage (parsed as a profile's component is), its ``since``
    compared as PEP 440 versions."""

    def applies_to(self, release: str, platform: str | None = None) -> bool:
        return not self.since or pep440(release) >= pep440(self.since)


@dataclass(frozen=True)
class WheelPlatform:
    name: str
    tags: tuple[str, ...]
    markers: Mapping[str, str]
    arch_dirs: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Note:
    component: str
    platforms: tuple[str, ...]
    text: str


@dataclass(frozen=True)
class WheelData:
    metapackage: str
    profiles: Mapping[str, Profile]
    packages: Mapping[str, tuple[str, tuple[tuple[str, str], ...]]]  # base name -> (component, renames)
    relocate: Mapping[str, Mapping[str, tuple[tuple[str, str], ...]]]  # component -> os -> rules
    real_names: Mapping[str, str]
    platforms: Mapping[str, WheelPlatform]
    notes: tuple[Note, ...]
    # component -> the wheel's top directory when it is not nvidia/<dir>/ (cuTENSOR's: cutensor/)
    roots: Mapping[str, str] = field(default_factory=dict)

    def profile(self, name: str) -> Profile:
        if name not in self.profiles:
            raise PlanError(f"unknown profile {name!r}; profiles: {', '.join(sorted(self.profiles))}")
        return self.profiles[name]

    def platform(self, name: str) -> WheelPlatform:
        if name not in self.platforms:
            raise PlanError(f"NVIDIA publishes no CUDA wheels for platform {name!r}; wheel platforms: "
                            f"{', '.join(sorted(self.platforms))}", platform=name)
        return self.platforms[name]


def parse_wheel_data(raw: Mapping[str, Any]) -> WheelData:
    packages: dict[str, tuple[str, tuple[tuple[str, str], ...]]] = {}
    for name, value in raw.get("packages", {}).items():
        value = {"component": value} if isinstance(value, str) else value
        renames = sorted(((str(k), str(v)) for k, v in value.get("renamed", {}).items()),
                         key=lambda kv: pep440(kv[0]))
        packages[name] = (str(value["component"]), tuple(renames))
    relocate = {
        comp: {os_: tuple((str(a), str(b)) for a, b in rules.items()) for os_, rules in by_os.items()}
        for comp, by_os in raw.get("relocate", {}).items()
    }
    platforms = {
        name: WheelPlatform(name, tuple(body.get("tags", [])), dict(body.get("markers", {})),
                            dict(body.get("arch_dirs", {})))
        for name, body in raw.get("platforms", {}).items()
    }
    notes = tuple(Note(str(n["component"]), tuple(n.get("platforms", [])), str(n["text"]))
                  for n in raw.get("notes", []))
    profiles = {name: build_profile(raw["profiles"], name, "pypi.toml", "extras",
                                      lambda item, at: ExtraSpec(**vars(parse_spec(item, at))))
                for name in raw.get("profiles", {})}
    return WheelData(str(raw.get("metapackage", "cuda-toolkit")), profiles,
                     packages, relocate, dict(raw.get("real_names", {})), platforms, notes,
                     {str(k): str(v) for k, v in raw.get("roots", {}).items()})


@cache
def wheel_data() -> WheelData:
    path = data_dir() / "pypi.toml"
    raw = load_toml(str(path))  # a file it cannot read or parse: its ManifestError
    try:
        return parse_wheel_data(raw)
    except (KeyError, TypeError, AttributeError) as exc:
        raise ManifestError(f"cannot read {path}: {exc}", source=str(path)) from exc


# ------------------------------------------------------------------------------------------------
# Versions, specifiers, markers and metadata: the standards through `packaging`, the library pip
# uses; what is NVIDIA's here is which version a set of specifiers picks and what markers see.


def parse_version(text: str) -> Version | None:
    """A PEP 440 version, or None for text that is not one (odd files on an index page)."""
    try:
        return Version(text)
    except InvalidVersion:
        return None


def pep440(text: str) -> Version:
    """A PEP 440 version from data cudaredist reads (pypi.toml, a mirror's manifest), or a ManifestError."""
    v = parse_version(text)
    if v is None:
        raise ManifestError(f"{text!r} is not a version")
    return v


def release_label(text: str) -> str:
    """A metapackage version as a CUDA release label: ``13.4.1.0`` -> ``13.4.1``."""
    v = parse_version(text)
    if v is None or v.is_prerelease or len(v.release) <= 3 or any(v.release[3:]):
        return text
    return ".".join(str(p) for p in v.release[:3])


def choose_version(specs: Sequence[str], versions: Iterable[str]) -> str | None:
    """The version (as given in ``versions``) a set of specifiers picks.

    A pin (``==X.*``) takes the newest match. A pure range (nvjitlink's ``>=13.4.92,<14``)
    takes the oldest match, the one the metapackage release was built with, so a tree of
    one release does not drift as NVIDIA publishes later wheels. Pre-releases count only
    when nothing else matches.
    """
    try:
        sets = [SpecifierSet(s) for s in specs]
    except InvalidSpecifier as exc:
        raise ManifestError(f"unsupported version specifier in {', '.join(specs)}: {exc}") from exc
    ok = [(v, text) for text in versions
          if (v := parse_version(text)) is not None and all(s.contains(v, prereleases=True) for s in sets)]
    if not ok:
        return None
    pool = [vt for vt in ok if not vt[0].is_prerelease] or ok
    pinned = any(clause.operator in ("==", "===") for s in sets for clause in s)
    pick = max if pinned or not any(sets) else min
    return pick(pool, key=lambda vt: vt[0])[1]


def marker_env(platform: WheelPlatform, extra: str = "") -> dict[str, str]:
    """What markers see when the wheels are for ``platform`` (the Python version does not matter)."""
    return {"python_version": "3.12", "python_full_version": "3.12.0", "implementation_name": "cpython",
            "implementation_version": "3.12.0", "platform_python_implementation": "CPython",
            "platform_release": "", "platform_version": "", "os_name": "", "sys_platform": "",
            "platform_system": "", "platform_machine": "", **platform.markers, "extra": extra}


def applies(req: Requirement, env: Mapping[str, str]) -> bool:
    """Whether ``req``'s environment marker holds for ``env`` (see :func:`marker_env`)."""
    # a plan asks the same few markers of the same environment thousands of times (every extra of
    # the metapackage for every component): packaging's evaluation is the slow part of a resolve
    try:
        return req.marker is None or _evaluate(req.marker, tuple(sorted(env.items())))
    except (UndefinedComparison, UndefinedEnvironmentName) as exc:
        raise ManifestError(f"cannot evaluate the environment marker of {req}: {exc}") from exc


@cache
def _evaluate(marker: Marker, env: tuple[tuple[str, str], ...]) -> bool:
    return marker.evaluate(dict(env))


@dataclass(frozen=True)
class Metadata:
    """What cudaredist reads from a wheel's METADATA; requirement names are canonical."""

    name: str
    version: str
    extras: tuple[str, ...]
    requirements: tuple[Requirement, ...]
    summary: str = ""
    license: str = ""   # License-Expression, else License
    # (extra, env) -> wanted(): a plan asks every extra once per component (a resolve's slow part)
    _wanted: dict[tuple[str, tuple[tuple[str, str], ...]], list[Requirement]] = field(
        default_factory=dict, compare=False, repr=False)

    def wanted(self, extra: str, env: Mapping[str, str],
               among: Sequence[Requirement] | None = None) -> list[Requirement]:
        """The requirements ``extra`` adds for a target whose markers are ``env`` (of ``among`` only,
        where given: the markers of the others are not evaluated)."""
        name = canonicalize_name(extra)

        def adds(r: Requirement) -> bool:
            return applies(r, {**env, "extra": name}) and not applies(r, {**env, "extra": ""})

        if among is not None:
            return [r for r in among if adds(r)]
        key = (name, tuple(sorted(env.items())))
        if key not in self._wanted:
            self._wanted[key] = [r for r in self.requirements if adds(r)]
        return list(self._wanted[key])


def _requirement(line: str) -> Requirement:
    try:
        req = Requirement(line)
    except InvalidRequirement as exc:
        raise ManifestError(f"cannot parse the requirement {line!r}: {exc}") from exc
    if req.url:
        raise ManifestError(f"unsupported requirement {line!r} (only name, version and marker are read)")
    req.name = canonicalize_name(req.name)
    return req


def parse_metadata(text: str) -> Metadata:
    raw, _unparsed = parse_email(text)
    license_ = raw.get("license_expression") or raw.get("license") or ""
    return Metadata(canonicalize_name(raw.get("name", "")), raw.get("version", ""),
                    tuple(canonicalize_name(x) for x in raw.get("provides_extra", [])),
                    tuple(_requirement(x) for x in raw.get("requires_dist", [])),
                    raw.get("summary", "").strip(), license_.strip())


def wheel_metadata(zf: zipfile.ZipFile, wheel: str) -> Metadata:
    """The wheel's ``NAME.dist-info/METADATA`` (one, of at most 4 MiB: a bigger one is no text file)."""
    metas = [i for i in zf.infolist()
             if i.filename.count("/") == 1 and i.filename.endswith(".dist-info/METADATA")]
    if len(metas) != 1 or metas[0].file_size > 4 << 20:
        raise PlanError(f"{wheel} does not hold one METADATA file of at most 4 MiB (it holds {len(metas)})")
    return parse_metadata(zf.read(metas[0]).decode("utf-8", "replace"))

def record_digests(zf: zipfile.ZipFile) -> dict[str, str]:
    """Member -> sha256 (hex) from the wheel's ``NAME.dist-info/RECORD`` (PEP 376, PEP 627): the
    hashes its builder took of the files, believed because the whole wheel's sha256 was checked
    against the index before it is extracted (no file is hashed twice). A member the RECORD names
    without a sha256 (or a broken one) is not in it, and is hashed as it is written; a wheel
    without one readable RECORD of at most 16 MiB gives {}."""
    records = [i for i in zf.infolist()
               if i.filename.count("/") == 1 and i.filename.endswith(".dist-info/RECORD")]
    if len(records) != 1 or records[0].file_size > 16 << 20:
        return {}
    import base64
    import binascii
    import csv

    try:
        rows = list(csv.reader(zf.read(records[0]).decode("utf-8").splitlines()))
    except (UnicodeDecodeError, csv.Error, zipfile.BadZipFile):
        return {}  # every file hashed as written; a broken member is the extraction's to refuse
    found: dict[str, str] = {}
    for row in rows:
        if len(row) >= 2 and row[1].startswith("sha256="):
            b64 = row[1][7:]
            try:
                raw = base64.urlsafe_b64decode(b64 + "=" * (-len(b64) % 4))
            except (binascii.Error, ValueError):
                continue
            if len(raw) == 32:
                found[row[0]] = raw.hex()
    return found


# ------------------------------------------------------------------------------------------------
# Wheel file names and platforms: which tags fit a platform is pypi.toml's; among those,
# the oldest manylinux glibc is the widest-compatible build.

_MANYLINUX = re.compile(r"^manylinux_(\d+)_(\d+)_")
_LEGACY_GLIBC = {"manylinux1": (2, 5), "manylinux2010": (2, 12), "manylinux2014": (2, 17)}


def parse_wheel_name(filename: str) -> tuple[NormalizedName, Version, frozenset[Tag]] | None:
    """Name, version and tags of a wheel file name; None for sdists and other non-wheels on a page."""
    try:
        name, version, _build, tags = parse_wheel_filename(filename)
    except InvalidWheelFilename:
        return None
    return name, version, tags


def _glibc(platform_tag: str) -> tuple[int, int]:
    m = _MANYLINUX.match(platform_tag)
    if m:
        return int(m[1]), int(m[2])
    return _LEGACY_GLIBC.get(platform_tag.split("_", 1)[0], (0, 0))


def wheel_platforms(files: Sequence[IndexFile]) -> str:
    """The platforms ``files`` have wheels for (what a message lists)."""
    return ", ".join(sorted(p.name for p in wheel_data().platforms.values() if pick_wheel(files, p)))


def pick_wheel(files: Iterable[IndexFile], platform: WheelPlatform) -> IndexFile | None:
    """The wheel for ``platform``: tag order of pypi.toml, then the lowest glibc (widest fit)."""
    ranked: list[tuple[tuple[int, int, tuple[int, int]], str, IndexFile]] = []
    for f in files:
        tags = parsed[2] if (parsed := parse_wheel_name(f.filename)) else frozenset()
        for i, pattern in enumerate(platform.tags):
            if hits := [t for t in tags if fnmatch.fnmatchcase(t.platform, pattern)]:
                rank = min((0 if t.abi == "none" else 1, i, _glibc(t.platform)) for t in hits)
                ranked.append((rank, f.filename, f))
                break
    return min(ranked, key=lambda r: r[:2])[2] if ranked else None

# ------------------------------------------------------------------------------------------------
# Components and the member layout

_CU_SUFFIX = re.compile(r"-cu\d+$")


def component_for(package: str, release: str) -> str:
    """The redist component a wheel distribution is (``nvidia-cuda-runtime-cu12`` -> ``cuda_cudart``)."""
    data = wheel_data()
    base = _CU_SUFFIX.sub("", canonicalize_name(package))
    if base in data.packages:
        comp, renames = data.packages[base]
        for since, name in renames:
            if pep440(release) >= pep440(since):
                comp = name
        return comp
    # nvidia-cuda-X is cuda_X, any other nvidia-X libX
    return re.sub(r"^nvidia-(cuda-)?", lambda m: "cuda_" if m[1] else "lib", base).replace("-", "_")


_LICENSE_NAMES = {"license", "license.txt", "license.md", "licence", "licence.txt"}
_SHARED_LIB = re.compile(r"^(lib[^/]*\.so)\.(\d+(?:\.\d+)*)$")


def real_library_name(filename: str, version: str) -> str:
    """Wheels name a shared library by its SONAME; the redist archives by its full version."""
    if filename in wheel_data().real_names:
        return wheel_data().real_names[filename]
    m = _SHARED_LIB.match(filename)
    v = parse_version(version)
    if m is None or v is None:
        return filename
    sover = tuple(int(p) for p in m[2].split("."))
    if v.release[: len(sover)] == sover and len(v.release) > len(sover):
        return f"{m[1]}.{'.'.join(str(p) for p in v.release)}"
    return filename


def member_mapper(component: str, version: str, platform: str) -> Callable[[str], str | None]:
    """Wheel member (clean POSIX path) -> tree path, or None for what a toolkit tree does not hold.

    ``nvidia/<cu13 or package dir>/`` is removed; of the dist-info only the licence is kept
    (``licenses/<component>/LICENSE.txt``); ``__init__.py`` and NVIDIA's scan logs
    (``.metadata/``) are dropped; component relocations and per-architecture directory
    names come from pypi.toml; Linux shared libraries get their redist file name.
    """
    data = wheel_data()
    plat = data.platform(platform)
    per_os = data.relocate.get(component, {})
    rules = (*per_os.get("windows" if is_windows(platform) else "linux", ()), *per_os.get("all", ()))
    root = data.roots.get(component)

    def mapper(clean: str) -> str | None:
        parts = clean.split("/")
        if parts[0].endswith(".dist-info"):
            inner = parts[2:] if len(parts) > 2 and parts[1] == "licenses" else parts[1:]
            if len(inner) == 1 and inner[0].lower() in _LICENSE_NAMES:
                return tree_path("LICENSE.txt", component=component)
            if parts[1:2] == ["licenses"] and inner:
                return f"licenses/{component}/{'/'.join(inner)}"
            return None
        if root is not None and parts[0] == root and len(parts) >= 2:
            rest = parts[1:]
        elif parts[0] != "nvidia" or len(parts) < 3:
            return None
        else:
            rest = parts[2:]
        if rest[0] in (".metadata", "__pycache__") or rest[-1] == "__init__.py":
            return None
        rel = "/".join(rest)
        for old, new in rules:
            if rel.startswith(old):
                rel = new + rel[len(old):]
                break
        if not rel:
            return None
        segs = rel.split("/")
        for i in range(1, len(segs) - 1):
            if segs[i - 1] in ("bin", "lib") and segs[i] in plat.arch_dirs:
                segs[i] = plat.arch_dirs[segs[i]]
        if not is_windows(platform):
            segs[-1] = real_library_name(segs[-1], version)
        return tree_path("/".join(segs), component=component)

    return mapper


