"""NVIDIA's CUDA wheels: versions, requirements, index pages, and where wheel members go in the tree (pure).

The rules that change when NVIDIA renames or moves something are data in
``manifests/pypi.toml``; this module reads them and applies them. Only
:func:`read_soname` and :func:`add_soname_links` look at files (the extracted tree).
"""

from __future__ import annotations

import email.parser
import fnmatch
import html.parser
import json
import os
import posixpath
import re
import struct
import sys
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cache
from typing import IO, TYPE_CHECKING, Any
from urllib.parse import unquote, urljoin, urlsplit, urlunsplit

from cudaredist.errors import ManifestError, PlanError
from cudaredist.profiles import data_dir
from cudaredist.tree.paths import tree_path

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

if TYPE_CHECKING:
    from cudaredist.tree.extract import Tree

# ------------------------------------------------------------------------------------------------
# Data (manifests/pypi.toml)


@dataclass(frozen=True)
class ExtraSpec:
    """One wanted extra of the metapackage: alternatives, first release needing it, note if older."""

    names: tuple[str, ...]
    since: str = ""
    missing: str = ""

    def applies_to(self, release: str) -> bool:
        return not self.since or version_key(release) >= version_key(self.since)

    def __str__(self) -> str:
        return "|".join(self.names)


@dataclass(frozen=True)
class WheelProfile:
    name: str
    description: str
    extras: tuple[ExtraSpec, ...]
    since: str = ""
    before: str = ""


@dataclass(frozen=True)
class WheelPlatform:
    name: str
    tags: tuple[str, ...]
    markers: Mapping[str, str]
    arch_dirs: Mapping[str, str] = field(default_factory=dict)

    @property
    def is_windows(self) -> bool:
        return self.name.startswith("windows")


@dataclass(frozen=True)
class Note:
    component: str
    platforms: tuple[str, ...]
    text: str


@dataclass(frozen=True)
class WheelData:
    metapackage: str
    profiles: Mapping[str, WheelProfile]
    packages: Mapping[str, tuple[str, tuple[tuple[str, str], ...]]]  # base name -> (component, renames)
    relocate: Mapping[str, Mapping[str, tuple[tuple[str, str], ...]]]  # component -> os -> rules
    real_names: Mapping[str, str]
    platforms: Mapping[str, WheelPlatform]
    notes: tuple[Note, ...]

    def profile(self, name: str) -> WheelProfile:
        if name not in self.profiles:
            raise PlanError(f"unknown profile {name!r}; profiles: {', '.join(sorted(self.profiles))}")
        return self.profiles[name]

    def platform(self, name: str) -> WheelPlatform:
        if name not in self.platforms:
            raise PlanError(f"NVIDIA publishes no CUDA wheels for platform {name!r}; wheel platforms: "
                            f"{', '.join(sorted(self.platforms))}", platform=name)
        return self.platforms[name]


def _spec(item: object, where: str) -> ExtraSpec:
    if isinstance(item, str):
        names, since, missing = item, "", ""
    elif isinstance(item, dict) and isinstance(item.get("name"), str):
        names, since, missing = item["name"], str(item.get("since", "")), str(item.get("missing", ""))
    else:
        raise ManifestError(f"{where}: an extra must be a name or {{name, since}}, got {item!r}")
    parts = tuple(n.strip() for n in names.split("|") if n.strip())
    if not parts:
        raise ManifestError(f"{where}: empty extra name")
    return ExtraSpec(parts, since, missing)


def _profiles(raw: Mapping[str, Any]) -> dict[str, WheelProfile]:
    out: dict[str, WheelProfile] = {}

    def build(name: str, seen: tuple[str, ...]) -> WheelProfile:
        if name in out:
            return out[name]
        if name in seen:
            raise ManifestError(f"pypi.toml: profile {name!r} extends itself ({' -> '.join(seen)})")
        body = raw.get(name)
        if not isinstance(body, dict):
            raise ManifestError(f"pypi.toml: profile {name!r} is not defined")
        base = build(str(body["extends"]), (*seen, name)) if "extends" in body else None
        extras = tuple(_spec(x, f"pypi.toml profile {name}") for x in body.get("extras", []))
        prof = WheelProfile(
            name, str(body.get("description", "")),
            (base.extras if base else ()) + extras,
            str(body.get("since", base.since if base else "")),
            str(body.get("before", base.before if base else "")))
        out[name] = prof
        return prof

    for n in raw:
        build(n, ())
    return out


def parse_wheel_data(raw: Mapping[str, Any]) -> WheelData:
    packages: dict[str, tuple[str, tuple[tuple[str, str], ...]]] = {}
    for name, value in raw.get("packages", {}).items():
        if isinstance(value, str):
            packages[name] = (value, ())
        else:
            renames = tuple(sorted(((str(k), str(v)) for k, v in value.get("renamed", {}).items()),
                                   key=lambda kv: version_key(kv[0])))
            packages[name] = (str(value["component"]), renames)
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
    return WheelData(str(raw.get("metapackage", "cuda-toolkit")), _profiles(raw.get("profiles", {})),
                     packages, relocate, dict(raw.get("real_names", {})), platforms, notes)


@cache
def wheel_data() -> WheelData:
    path = data_dir() / "pypi.toml"
    try:
        with open(path, "rb") as fh:
            return parse_wheel_data(tomllib.load(fh))
    except (OSError, tomllib.TOMLDecodeError, KeyError, TypeError, AttributeError) as exc:
        raise ManifestError(f"cannot read {path}: {exc}", source=str(path)) from exc


# ------------------------------------------------------------------------------------------------
# Versions (the PEP 440 subset NVIDIA's wheels use: release, pre, post, dev, local)

_VERSION = re.compile(
    r"^\s*v?(?:(?P<epoch>\d+)!)?(?P<release>\d+(?:\.\d+)*)"
    r"(?:[-_.]?(?P<pre_l>alpha|a|beta|b|preview|pre|c|rc)[-_.]?(?P<pre_n>\d+)?)?"
    r"(?:-(?P<post_n1>\d+)|[-_.]?(?P<post_l>post|rev|r)[-_.]?(?P<post_n2>\d+)?)?"
    r"(?:[-_.]?(?P<dev_l>dev)[-_.]?(?P<dev_n>\d+)?)?"
    r"(?:\+(?P<local>[a-z0-9]+(?:[-_.][a-z0-9]+)*))?\s*$", re.I)
_PRE_ORDER = {"a": 0, "alpha": 0, "b": 1, "beta": 1, "c": 2, "rc": 2, "pre": 2, "preview": 2}
_INF = sys.maxsize


@dataclass(frozen=True, order=True)
class Version:
    key: tuple[Any, ...]
    release: tuple[int, ...] = field(compare=False)
    is_prerelease: bool = field(compare=False)
    text: str = field(compare=False)


def parse_version(text: str) -> Version | None:
    m = _VERSION.match(text)
    if m is None:
        return None
    release = tuple(int(p) for p in m["release"].split("."))
    trimmed = release
    while len(trimmed) > 1 and trimmed[-1] == 0:
        trimmed = trimmed[:-1]
    dev = None if m["dev_l"] is None else int(m["dev_n"] or 0)
    post_n = m["post_n1"] or m["post_n2"]
    post = None if (m["post_l"] is None and m["post_n1"] is None) else int(post_n or 0)
    if m["pre_l"] is not None:
        pre: tuple[int, int] = (_PRE_ORDER[m["pre_l"].lower()], int(m["pre_n"] or 0))
    elif post is None and dev is not None:
        pre = (-1, 0)  # 1.0.dev1 sorts before 1.0a1
    else:
        pre = (3, 0)
    key = (int(m["epoch"] or 0), trimmed, pre, -1 if post is None else post, _INF if dev is None else dev)
    return Version(key, release, m["pre_l"] is not None or dev is not None, text.strip())


def version_key(text: str) -> Version:
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


# ------------------------------------------------------------------------------------------------
# Specifiers (PEP 440 clauses: ==, ==X.*, !=, <=, >=, <, >, ~=, ===)

_CLAUSE = re.compile(r"^\s*(===|==|!=|<=|>=|~=|<|>)\s*([^\s,]+)\s*$")


def _clauses(spec: str) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    for part in spec.split(","):
        if not part.strip():
            continue
        m = _CLAUSE.match(part)
        if m is None:
            raise ManifestError(f"unsupported version specifier {part.strip()!r} in {spec!r}")
        out.append((m[1], m[2]))
    return out


def _padded(release: tuple[int, ...], n: int) -> tuple[int, ...]:
    return release[:n] + (0,) * max(0, n - len(release))


def _clause_allows(op: str, target: str, v: Version) -> bool:
    if op == "===":
        return v.text == target
    if op in ("==", "!=") and target.endswith(".*"):
        want = version_key(target[:-2]).release
        hit = _padded(v.release, len(want)) == want
        return hit if op == "==" else not hit
    t = version_key(target)
    if op == "==":
        return v.key == t.key
    if op == "!=":
        return v.key != t.key
    if op == ">=":
        return v.key >= t.key
    if op == "<=":
        return v.key <= t.key
    if op == ">":
        return v.key > t.key
    if op == "<":
        return v.key < t.key
    # ~=X.Y.Z  means  >=X.Y.Z, ==X.Y.*
    prefix = t.release[:-1] or t.release
    return v.key >= t.key and _padded(v.release, len(prefix)) == prefix


def specifier_allows(spec: str, version: str) -> bool:
    v = parse_version(version)
    return v is not None and all(_clause_allows(op, t, v) for op, t in _clauses(spec))


def choose_version(specs: Sequence[str], versions: Iterable[str], *, pre: bool = False) -> str | None:
    """The version a set of specifiers picks from ``versions``.

    A pin (``==X.*``) takes the newest match. A pure range (nvjitlink's ``>=13.4.92,<14``)
    takes the oldest match, the one the metapackage release was built with, so a tree of
    one release does not drift as NVIDIA publishes later wheels. Pre-releases count only
    when asked for or when nothing else matches.
    """
    parsed = [v for v in (parse_version(x) for x in versions) if v is not None]
    ok = [v for v in parsed if all(specifier_allows(s, v.text) for s in specs)]
    if not ok:
        return None
    final = [v for v in ok if not v.is_prerelease]
    pool = ok if pre or not final else final
    pinned = any(op in ("==", "===") for s in specs for op, _t in _clauses(s))
    return (max(pool) if pinned or not any(s.strip() for s in specs) else min(pool)).text


# ------------------------------------------------------------------------------------------------
# Environment markers (PEP 508)

_MARKER_TOKEN = re.compile(r"""\s*(?:(?P<str>'[^']*'|"[^"]*")|(?P<op>===|==|!=|<=|>=|~=|<|>)|"""
                           r"""(?P<paren>[()])|(?P<word>[A-Za-z_][A-Za-z0-9_.]*))""")
_VERSION_VARS = {"python_version", "python_full_version", "implementation_version"}


def normalize_name(name: str) -> str:
    """PEP 503 normalisation: ``Nvidia_CUDA.nvcc`` -> ``nvidia-cuda-nvcc``."""
    return re.sub(r"[-_.]+", "-", name).lower()


def _tokens(marker: str) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    pos = 0
    while marker[pos:].strip():
        m = _MARKER_TOKEN.match(marker, pos)
        if m is None:
            raise ManifestError(f"cannot parse environment marker {marker!r} at {marker[pos:]!r}")
        kind = m.lastgroup or ""
        out.append((kind, m[kind]))
        pos = m.end()
    return out


def evaluate_marker(marker: str, env: Mapping[str, str]) -> bool:
    """Evaluate a PEP 508 marker against ``env`` (variable -> value; ``extra`` included)."""
    toks = _tokens(marker)
    pos = 0

    def peek() -> tuple[str, str]:
        return toks[pos] if pos < len(toks) else ("", "")

    def take() -> tuple[str, str]:
        nonlocal pos
        tok = peek()
        pos += 1
        return tok

    def value() -> tuple[str, str]:
        kind, text = take()
        if kind == "str":
            return "", text[1:-1]
        if kind == "word" and text not in ("and", "or", "in", "not"):
            if text not in env:
                raise ManifestError(f"environment marker {marker!r} uses unknown variable {text!r}")
            return text, env[text]
        raise ManifestError(f"environment marker {marker!r}: expected a value, got {text!r}")

    def compare() -> bool:
        if peek() == ("paren", "("):
            take()
            result = disjunction()
            if take() != ("paren", ")"):
                raise ManifestError(f"environment marker {marker!r}: unbalanced parentheses")
            return result
        lname, left = value()
        kind, op = take()
        if (kind, op) == ("word", "not"):
            if take() != ("word", "in"):
                raise ManifestError(f"environment marker {marker!r}: 'not' must be followed by 'in'")
            op = "not in"
        elif kind != "op" and (kind, op) != ("word", "in"):
            raise ManifestError(f"environment marker {marker!r}: expected an operator, got {op!r}")
        rname, right = value()
        if "extra" in (lname, rname):
            left, right = normalize_name(left), normalize_name(right)
        if op == "in":
            return left in right
        if op == "not in":
            return left not in right
        if {lname, rname} & _VERSION_VARS and parse_version(left) and parse_version(right):
            return specifier_allows(f"{op}{right}", left)
        if op in ("==", "==="):
            return left == right
        if op == "!=":
            return left != right
        raise ManifestError(f"environment marker {marker!r}: {op} compares only versions")

    def conjunction() -> bool:
        result = compare()
        while peek() == ("word", "and"):
            take()
            result = compare() and result
        return result

    def disjunction() -> bool:
        result = conjunction()
        while peek() == ("word", "or"):
            take()
            result = conjunction() or result
        return result

    result = disjunction()
    if pos != len(toks):
        raise ManifestError(f"environment marker {marker!r}: unexpected {peek()[1]!r}")
    return result


def marker_env(platform: WheelPlatform, extra: str = "") -> dict[str, str]:
    """What markers see when the wheels are for ``platform`` (the Python version does not matter)."""
    return {"python_version": "3.12", "python_full_version": "3.12.0", "implementation_name": "cpython",
            "implementation_version": "3.12.0", "platform_python_implementation": "CPython",
            "platform_release": "", "platform_version": "", "os_name": "", "sys_platform": "",
            "platform_system": "", "platform_machine": "", **platform.markers, "extra": extra}


# ------------------------------------------------------------------------------------------------
# Metadata: Provides-Extra and Requires-Dist of the metapackage

_REQUIREMENT = re.compile(
    r"^\s*(?P<name>[A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?)\s*(?:\[(?P<extras>[^\]]*)\])?\s*"
    r"(?:\((?P<paren>[^)]*)\)|(?P<spec>[^;]*?))\s*(?:;\s*(?P<marker>.*))?$")


@dataclass(frozen=True)
class Requirement:
    name: str          # normalised
    specifier: str     # "==13.0.88.*", ">=13.4.92,<14" or ""
    marker: str = ""

    def applies(self, env: Mapping[str, str]) -> bool:
        return not self.marker or evaluate_marker(self.marker, env)


@dataclass(frozen=True)
class Metadata:
    name: str
    version: str
    extras: tuple[str, ...]
    requirements: tuple[Requirement, ...]
    summary: str = ""
    license: str = ""   # License-Expression, else License

    def wanted(self, extra: str, env: Mapping[str, str]) -> list[Requirement]:
        """The requirements ``extra`` adds for a target whose markers are ``env``."""
        with_extra = {**env, "extra": normalize_name(extra)}
        without = {**env, "extra": ""}
        return [r for r in self.requirements if r.applies(with_extra) and not r.applies(without)]


def parse_requirement(line: str) -> Requirement:
    m = _REQUIREMENT.match(line)
    spec = "" if m is None else (m["paren"] if m["paren"] is not None else m["spec"] or "")
    if m is None or "@" in spec:
        raise ManifestError(f"unsupported requirement {line!r} (only name, version and marker are read)")
    return Requirement(normalize_name(m["name"]), spec.replace(" ", ""), (m["marker"] or "").strip())


def parse_metadata(text: str) -> Metadata:
    msg = email.parser.Parser().parsestr(text, headersonly=True)
    extras = tuple(normalize_name(str(x)) for x in msg.get_all("Provides-Extra") or [])
    reqs = tuple(parse_requirement(str(x)) for x in msg.get_all("Requires-Dist") or [])
    license_ = str(msg.get("License-Expression") or msg.get("License") or "").strip()
    return Metadata(normalize_name(str(msg.get("Name", ""))), str(msg.get("Version", "")), extras, reqs,
                    str(msg.get("Summary") or "").strip(), license_)


# ------------------------------------------------------------------------------------------------
# Index pages (PEP 691 JSON, PEP 503 HTML)

@dataclass(frozen=True)
class IndexFile:
    filename: str
    url: str
    sha256: str
    size: int | None = None
    upload_time: str = ""
    yanked: bool = False


def _file_url(page_url: str, href: str) -> tuple[str, str]:
    """Absolute URL without fragment, and the fragment (``sha256=...``)."""
    parts = urlsplit(urljoin(page_url, href))
    return urlunsplit((parts.scheme, parts.netloc, parts.path, parts.query, "")), parts.fragment


def parse_simple_json(data: bytes, page_url: str) -> list[IndexFile]:
    try:
        files = json.loads(data)["files"]
        if not isinstance(files, list):
            raise TypeError("'files' is not a list")
    except (ValueError, KeyError, TypeError) as exc:
        raise ManifestError(f"{page_url} is not a PEP 691 project page: {exc}", source=page_url) from exc
    out: list[IndexFile] = []
    for f in files:
        if not isinstance(f, dict) or not isinstance(f.get("filename"), str):
            continue
        url, _frag = _file_url(page_url, str(f.get("url", "")))
        hashes = f.get("hashes")
        hashes = hashes if isinstance(hashes, dict) else {}
        size = f.get("size")
        out.append(IndexFile(f["filename"], url, str(hashes.get("sha256", "")).lower(),
                             size if isinstance(size, int) and not isinstance(size, bool) else None,
                             str(f.get("upload-time") or ""), bool(f.get("yanked"))))
    return out


class _Anchors(html.parser.HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.found: list[tuple[dict[str, str | None], str]] = []
        self._current: dict[str, str | None] | None = None
        self._text: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "a":
            self._current, self._text = dict(attrs), []

    def handle_data(self, data: str) -> None:
        if self._current is not None:
            self._text.append(data)

    def handle_endtag(self, tag: str) -> None:
        if tag == "a" and self._current is not None:
            self.found.append((self._current, "".join(self._text).strip()))
            self._current = None


def parse_simple_html(data: bytes, page_url: str) -> list[IndexFile]:
    parser = _Anchors()
    parser.feed(data.decode("utf-8", "replace"))
    out: list[IndexFile] = []
    for attrs, text in parser.found:
        href = attrs.get("href")
        if not href:
            continue
        url, frag = _file_url(page_url, href)
        name = text or unquote(posixpath.basename(urlsplit(url).path))
        algo, _, digest = frag.partition("=")
        out.append(IndexFile(name, url, digest.lower() if algo == "sha256" else "",
                             yanked="data-yanked" in attrs))
    return out


def parse_simple_page(data: bytes, page_url: str) -> list[IndexFile]:
    """Either form: servers answer JSON when they speak PEP 691, HTML otherwise."""
    if data.lstrip()[:1] == b"{":
        return parse_simple_json(data, page_url)
    return parse_simple_html(data, page_url)


# ------------------------------------------------------------------------------------------------
# Wheel file names and platforms

_WHEEL = re.compile(r"^(?P<dist>[^-]+)-(?P<ver>[^-]+)(?:-(?P<build>\d[^-]*))?-(?P<py>[^-]+)-(?P<abi>[^-]+)"
                    r"-(?P<plat>[^-]+)\.whl$")
_MANYLINUX = re.compile(r"^manylinux_(\d+)_(\d+)_")
_LEGACY_GLIBC = {"manylinux1": (2, 5), "manylinux2010": (2, 12), "manylinux2014": (2, 17)}


@dataclass(frozen=True)
class WheelName:
    distribution: str  # normalised
    version: str
    abi: str
    platforms: tuple[str, ...]


def parse_wheel_filename(filename: str) -> WheelName | None:
    m = _WHEEL.match(filename)
    if m is None:
        return None
    return WheelName(normalize_name(m["dist"]), m["ver"], m["abi"], tuple(m["plat"].split(".")))


def _glibc(tag: str) -> tuple[int, int]:
    m = _MANYLINUX.match(tag)
    if m:
        return int(m[1]), int(m[2])
    return _LEGACY_GLIBC.get(tag.split("_", 1)[0], (0, 0))


WheelRank = tuple[int, int, tuple[int, int]]


def wheel_rank(name: WheelName, platform: WheelPlatform) -> WheelRank | None:
    """Sort key of a wheel for ``platform`` (lower is better), or None if it does not fit."""
    for i, pattern in enumerate(platform.tags):
        hits = [t for t in name.platforms if fnmatch.fnmatchcase(t, pattern)]
        if hits:
            return (0 if name.abi == "none" else 1, i, min(_glibc(t) for t in hits))
    return None


def wheel_platforms(name: WheelName, platforms: Iterable[WheelPlatform]) -> list[str]:
    return [p.name for p in platforms if wheel_rank(name, p) is not None]


def pick_wheel(files: Iterable[IndexFile], platform: WheelPlatform) -> IndexFile | None:
    """The wheel for ``platform``: tag order of pypi.toml, then the lowest glibc (widest fit)."""
    ranked: list[tuple[WheelRank, IndexFile]] = []
    for f in files:
        name = parse_wheel_filename(f.filename)
        rank = wheel_rank(name, platform) if name else None
        if rank is not None:
            ranked.append((rank, f))
    return min(ranked, key=lambda rf: (rf[0], rf[1].filename))[1] if ranked else None


# ------------------------------------------------------------------------------------------------
# Components and the member layout

_CU_SUFFIX = re.compile(r"-cu\d+$")


def component_for(package: str, release: str, data: WheelData | None = None) -> str:
    """The redist component a wheel distribution is (``nvidia-cuda-runtime-cu12`` -> ``cuda_cudart``)."""
    data = data or wheel_data()
    base = _CU_SUFFIX.sub("", normalize_name(package))
    if base in data.packages:
        comp, renames = data.packages[base]
        for since, name in renames:
            if version_key(release) >= version_key(since):
                comp = name
        return comp
    if base.startswith("nvidia-cuda-"):
        return "cuda_" + base[len("nvidia-cuda-"):].replace("-", "_")
    if base.startswith("nvidia-"):
        return "lib" + base[len("nvidia-"):].replace("-", "_")
    return base.replace("-", "_")


_LICENSE_NAMES = {"license", "license.txt", "license.md", "licence", "licence.txt"}
_SHARED_LIB = re.compile(r"^(lib[^/]*\.so)\.(\d+(?:\.\d+)*)$")
_DEV_LIB = re.compile(r"^lib[^/]*\.so(?:\.\d+)*$")


def real_library_name(filename: str, version: str, data: WheelData | None = None) -> str:
    """Wheels name a shared library by its SONAME; the redist archives by its full version."""
    data = data or wheel_data()
    if filename in data.real_names:
        return data.real_names[filename]
    m = _SHARED_LIB.match(filename)
    v = parse_version(version)
    if m is None or v is None:
        return filename
    sover = tuple(int(p) for p in m[2].split("."))
    if v.release[: len(sover)] == sover and len(v.release) > len(sover):
        return f"{m[1]}.{'.'.join(str(p) for p in v.release)}"
    return filename


def member_mapper(component: str, version: str, platform: str,
                  data: WheelData | None = None) -> Callable[[str], str | None]:
    """Wheel member (clean POSIX path) -> tree path, or None for what a toolkit tree does not hold.

    ``nvidia/<cu13 or package dir>/`` is removed; of the dist-info only the licence is kept
    (``licenses/<component>/LICENSE.txt``); ``__init__.py`` and NVIDIA's scan logs
    (``.metadata/``) are dropped; component relocations and per-architecture directory
    names come from pypi.toml; Linux shared libraries get their redist file name.
    """
    data = data or wheel_data()
    plat = data.platform(platform)
    per_os = data.relocate.get(component, {})
    rules = (*per_os.get("windows" if plat.is_windows else "linux", ()), *per_os.get("all", ()))

    def mapper(clean: str) -> str | None:
        parts = clean.split("/")
        if parts[0].endswith(".dist-info"):
            inner = parts[2:] if len(parts) > 2 and parts[1] == "licenses" else parts[1:]
            if len(inner) == 1 and inner[0].lower() in _LICENSE_NAMES:
                return tree_path("LICENSE.txt", component=component)
            if parts[1:2] == ["licenses"] and inner:
                return f"licenses/{component}/{'/'.join(inner)}"
            return None
        if parts[0] != "nvidia" or len(parts) < 3:
            return None
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
        if not plat.is_windows:
            segs[-1] = real_library_name(segs[-1], version, data)
        return tree_path("/".join(segs), component=component)

    return mapper


# ------------------------------------------------------------------------------------------------
# ELF SONAME and the link chains the wheels leave out

_PT_LOAD, _PT_DYNAMIC = 1, 2
_DT_NULL, _DT_STRTAB, _DT_SONAME = 0, 5, 14


def read_soname(fh: IO[bytes]) -> str | None:
    """DT_SONAME of an ELF shared object, read through its program headers (as the loader does)."""
    try:
        head = fh.read(64)
        if len(head) < 52 or head[:4] != b"\x7fELF" or head[4] not in (1, 2) or head[5] not in (1, 2):
            return None
        is64 = head[4] == 2
        e = "<" if head[5] == 1 else ">"
        if is64:
            (phoff,) = struct.unpack_from(e + "Q", head, 0x20)
            phentsize, phnum = struct.unpack_from(e + "HH", head, 0x36)
            ph_fmt, dyn_fmt = e + "IIQQQQQQ", e + "qQ"
        else:
            (phoff,) = struct.unpack_from(e + "I", head, 0x1C)
            phentsize, phnum = struct.unpack_from(e + "HH", head, 0x2A)
            ph_fmt, dyn_fmt = e + "IIIIIIII", e + "iI"
        if phentsize < struct.calcsize(ph_fmt) or not 0 < phnum < 4096:
            return None
        fh.seek(phoff)
        table = fh.read(phentsize * phnum)
        loads: list[tuple[int, int, int]] = []  # (vaddr, offset, filesz)
        dynamic: tuple[int, int] | None = None
        for i in range(phnum):
            f = struct.unpack_from(ph_fmt, table, i * phentsize)
            ptype, offset, vaddr, filesz = (f[0], f[2], f[3], f[5]) if is64 else (f[0], f[1], f[2], f[4])
            if ptype == _PT_LOAD:
                loads.append((vaddr, offset, filesz))
            elif ptype == _PT_DYNAMIC:
                dynamic = (offset, min(filesz, 1 << 20))
        if dynamic is None:
            return None
        fh.seek(dynamic[0])
        dyn = fh.read(dynamic[1])
        step = struct.calcsize(dyn_fmt)
        strtab = soname = None
        for off in range(0, len(dyn) - step + 1, step):
            tag, val = struct.unpack_from(dyn_fmt, dyn, off)
            if tag == _DT_NULL:
                break
            if tag == _DT_STRTAB:
                strtab = val
            elif tag == _DT_SONAME:
                soname = val
        if strtab is None or soname is None:
            return None
        base = next((o + (strtab - v) for v, o, n in loads if v <= strtab < v + n), None)
        if base is None:
            return None
        fh.seek(base + soname)
        name = fh.read(4096).split(b"\0", 1)[0].decode("utf-8")
    except (struct.error, OSError, UnicodeDecodeError, ValueError):
        return None
    return name if name and "/" not in name and name not in (".", "..") else None


def soname_links(filename: str, soname: str) -> list[tuple[str, str]]:
    """(link name, target) pairs in the library's directory: SONAME -> file, libX.so -> SONAME."""
    links: list[tuple[str, str]] = []
    if soname != filename:
        links.append((soname, filename))
    dev = soname[: soname.index(".so") + 3] if ".so" in soname else ""
    if dev and dev not in (soname, filename):
        links.append((dev, soname))
    return links


def chain_links(paths: Iterable[str], soname_of: Callable[[str], str | None],
                taken: Callable[[str], bool]) -> Iterator[tuple[str, str]]:
    """(link path, target) for ``libX.so -> libX.so.N -> libX.so.N.M.P`` beside each shared library.

    ``soname_of`` reads a library's DT_SONAME (None: not an ELF shared object); a link whose
    path ``taken`` says is in use is left out. Lazy, so a caller that creates each link before
    asking for the next one sees its own links as taken.
    """
    for rel in sorted(set(paths)):
        d, _, name = rel.rpartition("/")
        if not _DEV_LIB.match(name):
            continue
        soname = soname_of(rel)
        if not soname:
            continue
        for link, target in soname_links(name, soname):
            link_rel = f"{d}/{link}" if d else link
            if not taken(link_rel):
                yield link_rel, target


def add_soname_links(tree: Tree, paths: Iterable[str], *, component: str, archive: str) -> list[str]:
    """Restore the chains of :func:`chain_links` in an extracted tree (the wheels carry no symlinks).

    The SONAME comes from the ELF itself; a link whose name is already taken is left alone.
    """

    def soname_of(rel: str) -> str | None:
        full = tree.root / rel
        if full.is_symlink() or not full.is_file():
            return None
        with open(full, "rb") as fh:
            return read_soname(fh)

    made: list[str] = []
    for link_rel, target in chain_links(paths, soname_of, lambda rel: os.path.lexists(tree.root / rel)):
        tree.add_symlink(link_rel, target, component, archive)
        made.append(link_rel)
    return made
