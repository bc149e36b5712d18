"""Profiles and platform rules, read from the ``manifests/`` data files (pure, cached)."""

from __future__ import annotations

import platform as _platform
import re
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from cudaredist.errors import ManifestError, PlanError, UsageError
from cudaredist.plan import matches, version_key

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

DEFAULT_PROFILE = "nvcc"


def effective_profile(profile: str | None, only: bool) -> str | None:
    return None if only else (profile or DEFAULT_PROFILE)


@dataclass(frozen=True)
class Spec:
    """One wanted component: alternatives (renames), the first release that needs it, the
    platforms it is for (empty: every one), and for one a release may lack, the note saying so."""

    names: tuple[str, ...]
    since: str = ""
    platforms: tuple[str, ...] = ()
    missing: str = ""

    def applies_to(self, release: str, platform: str | None = None) -> bool:
        """``platform`` None: on any platform (``cudaredist profiles`` shows the platforms apart)."""
        return ((not self.since or version_key(release) >= version_key(self.since))
                and (platform is None or not self.platforms or platform in self.platforms))

    def __str__(self) -> str:
        return "|".join(self.names)


@dataclass(frozen=True)
class Profile:
    """A profile of profiles.toml or pypi.toml: its specs with those of what it extends; ``since``
    and ``before`` (pypi.toml) the nearest in the chain that says."""

    name: str
    description: str
    specs: tuple[Spec, ...]
    extends: str = ""
    since: str = ""
    before: str = ""


@dataclass(frozen=True)
class PlatformRule:
    links: tuple[tuple[str, str], ...]
    hosts: tuple[tuple[str, str], ...]
    arch: str = ""   # Windows: the folder of bin/ and lib/ that holds the DLLs and .lib files


@dataclass(frozen=True)
class CrossRule:
    """A cross tree's rule (``[cross.<target>]`` in profiles.toml): the tools of ``host``, the rest
    of ``target``."""

    target: str
    host: str
    target_dir: str                      # Linux: nvcc -target-dir (targets/<dir>); "" on Windows
    compiler: str                        # the host compiler nvcc drives for the target
    c_compiler: str                      # its C compiler ("": none named)
    package: str                         # its Debian/Ubuntu package ("": none named)
    system: tuple[str, ...]              # CMAKE_SYSTEM_NAME, CMAKE_SYSTEM_PROCESSOR
    host_places: tuple[tuple[str, str], ...]
    target_places: tuple[tuple[str, str], ...]
    links: tuple[tuple[str, str], ...]   # made in the finished tree instead of the platform's
    host_tools: frozenset[str]           # the components taken from the host's archives ([cross] host_tools)


def cross_rule(target: str, host: str) -> CrossRule:
    """The rule of a tree whose tools run on ``host`` and whose libraries are for ``target``; a pair
    NVIDIA publishes no cross toolkit for is a :class:`UsageError` (before any download)."""
    table = _data().get("cross", {})
    body = table.get(target)
    if not isinstance(body, dict) or host not in body.get("hosts", ()):
        pairs = [f"{h} -> {t}" for t, b in sorted(table.items()) if isinstance(b, dict)
                 for h in b.get("hosts", ())]
        raise UsageError(
            f"NVIDIA publishes no cross toolkit that builds for {target} on {host}: cross trees exist "
            f"for {', '.join(pairs)} (--host HOST --platform TARGET); leave out --host for a "
            f"{target} tree whose tools run on {target} itself")

    def places(key: str) -> tuple[tuple[str, str], ...]:
        return tuple((str(k), str(v)) for k, v in body.get(key, {}).items())

    return CrossRule(target, host, str(body.get("target_dir", "")), str(body.get("compiler", "")),
                     str(body.get("c_compiler", "")), str(body.get("package", "")),
                     tuple(str(s) for s in body.get("system", ())), places("host_places"),
                     places("target_places"), places("links"),
                     frozenset(str(c) for c in table.get("host_tools", ())))


def is_windows(platform: str) -> bool:
    """A Windows target platform (its tree: .exe and .dll, zips, names compared case-folded)."""
    return platform.startswith("windows")


def data_dir() -> Path:
    """``cudaredist/_manifests`` in a wheel, the repository's ``manifests/`` in a checkout."""
    here = Path(__file__).resolve().parent
    for candidate in (here / "_manifests", here.parent / "manifests"):
        if (candidate / "profiles.toml").is_file():
            return candidate
    raise ManifestError(f"profiles.toml not found next to {here}; the installation is incomplete")


@cache
def load_toml(path: str) -> dict[str, Any]:
    try:
        with open(path, "rb") as fh:
            data: dict[str, Any] = tomllib.load(fh)
            return data
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise ManifestError(f"cannot read {path}: {exc}", source=path) from exc


def _data() -> dict[str, Any]:
    return load_toml(str(data_dir() / "profiles.toml"))


def parse_spec(item: object, where: str = "profile") -> Spec:
    body = {"name": item} if isinstance(item, str) else item
    if not isinstance(body, dict) or not isinstance(body.get("name"), str):
        raise ManifestError(f"{where}: a component must be a name or {{name, since, platforms, missing}}, "
                            f"got {item!r}")
    names, platforms = body["name"], body.get("platforms", [])
    parts = tuple(n.strip() for n in names.split("|") if n.strip())
    if not parts:
        raise ManifestError(f"{where}: empty component name")
    if not isinstance(platforms, list) or not all(isinstance(p, str) for p in platforms):
        raise ManifestError(f"{where}: {names}: platforms must be a list of platform names, "
                            f"got {platforms!r}")
    return Spec(parts, str(body.get("since", "")), tuple(platforms), str(body.get("missing", "")))


def wanted_specs(profile_specs: Iterable[Spec], components: Sequence[str]) -> list[Spec]:
    """What a plan installs: the profile's specs (those of the release) and each ``--component``."""
    specs = [*profile_specs, *(parse_spec(c, "--component") for c in components)]
    if not specs:
        raise PlanError("nothing to install: give a profile or at least one --component")
    return specs


def build_profile(table: Mapping[str, Any], name: str, where: str, key: str = "components",
                  spec: Callable[[object, str], Spec] = parse_spec) -> Profile:
    """The profile ``name`` of ``table`` (``where``: the data file, ``key``: its list of components)
    with the components of those it ``extends``, the base's first."""
    names: list[str] = []
    link = name
    while link not in names:
        body = table.get(link)
        if not isinstance(body, dict):
            raise ManifestError(f"{where}: profile {link!r} is not defined")
        names.append(link)
        if "extends" not in body:
            break
        link = str(body["extends"])
    else:
        raise ManifestError(f"{where}: profile {link!r} extends itself (through {' -> '.join(names)})")
    chain = [table[n] for n in reversed(names)]
    at = f"profile {name}" if where == "profiles.toml" else f"{where} profile {name}"
    return Profile(name, str(chain[-1].get("description", "")),
                   tuple(spec(c, at) for b in chain for c in b.get(key, [])),
                   str(chain[-1].get("extends", "")),
                   *(next((str(b[f]) for b in reversed(chain) if f in b), "") for f in ("since", "before")))


def get_profile(name: str) -> Profile:
    profiles = _data().get("profiles", {})
    if name not in profiles:
        raise UsageError(f"unknown profile {name!r}; profiles: {', '.join(sorted(profiles))}")
    return build_profile(profiles, name, "profiles.toml")


def platform_rule(name: str) -> PlatformRule:
    body = _data().get("platforms", {}).get(name)
    if body is None:
        # A platform NVIDIA adds later still installs; it just gets no fix-ups.
        return PlatformRule((), ())
    links = tuple(sorted((str(k), str(v)) for k, v in body.get("links", {}).items()))
    hosts = tuple((str(o), str(m)) for o, m in body.get("host", []))
    return PlatformRule(links, hosts, str(body.get("arch", "")))


_ARCH = re.compile(r"[a-z0-9][a-z0-9_]*")


def host_platform(asked: str | None = None) -> str:
    """``asked`` (a --platform) if given, else this host's CUDA redist platform: the one place that
    decides the platform a command acts for. A ``--platform`` is ``OS-ARCH`` with the OS of a
    platform ``[platforms.*]`` names; an ARCH NVIDIA adds later still installs (without fix-ups), a
    name of another shape is a :class:`UsageError` before any network."""
    known: list[str] = sorted(_data().get("platforms", {}))
    if asked:
        systems = sorted({p.partition("-")[0] for p in known})
        system, _, arch = asked.partition("-")
        if asked in known or (system in systems and _ARCH.fullmatch(arch)):
            return asked
        raise UsageError(f"unknown platform {asked!r}: use one of {', '.join(known)} (--platform; an "
                         "architecture NVIDIA adds later is written OS-ARCH, OS one of "
                         f"{', '.join(systems)})")
    system, machine = _platform.system().lower(), _platform.machine().lower()
    for name in known:
        if (system, machine) in platform_rule(name).hosts:
            return name
    raise PlanError(
        f"this host ({system} {machine}) has no CUDA redist platform of its own; "
        f"pass --platform (one of {', '.join(known)})")


def component_title(component: str) -> str:
    """NVIDIA's display name of a component (``[names]`` in profiles.toml), else its key."""
    return str(_data().get("names", {}).get(component, component))


def component_root(component: str) -> str:
    """The tree folder a component's archive is unpacked into (``[roots]`` in profiles.toml), or
    ``""`` for the tree's root."""
    return str(_data().get("roots", {}).get(component, ""))


def profile_names() -> list[str]:
    return sorted(_data().get("profiles", {}))


# -- library products (`--with PRODUCT[=SPEC]`) ----------------------------------------------------

_PRODUCT_SPEC = re.compile(r"[0-9]+(?:\.[0-9]+){0,3}", re.A)


@dataclass(frozen=True)
class Product:
    """A library NVIDIA publishes beside the toolkit in the redist format (``[products.*]``)."""

    name: str
    title: str
    specs: tuple[Spec, ...]   # what ``--with NAME`` installs
    wheel: str                # the wheel's name for --source pypi, ``{major}`` = the CUDA major; "": none
    needs: tuple[str, ...] = ()   # toolkit components its libraries load (added with it)
    # toolkit components its headers include only before a release of it: (component, first release
    # that no longer needs it)
    needs_before: tuple[tuple[str, str], ...] = ()
    folder: str = ""              # its redist folder beside cuda/ (``nvidia-driver``), "": the name
    platforms: tuple[str, ...] = ()   # the only platforms NVIDIA publishes it for (empty: any)
    unsupported: str = ""         # why it is not published for other platforms (the refusal says)
    replaces: str = ""            # the toolkit component its newer release takes the place of
    per_minor: bool = False       # its builds serve one CUDA major.minor only (``cuda13.5``)
    no_wheel: str = ""            # why --source pypi cannot install it

    def check_platform(self, platform: str) -> None:
        """A :class:`UsageError` (before any network) for a platform NVIDIA publishes it not for."""
        if self.platforms and platform not in self.platforms:
            raise UsageError(f"--with {self.name}: {self.unsupported or self.title + ' is not published'} "
                             f"({self.title} exists for {', '.join(self.platforms)}, not for {platform}); "
                             f"leave out --with {self.name} for a {platform} tree")

    def needs_for(self, release: str) -> tuple[str, ...]:
        """The toolkit components ``release`` of this product needs (``""``: the product's newest)."""
        return (*self.needs, *(name for name, until in self.needs_before
                               if release and version_key(release) < version_key(until)))

    def wheel_name(self, cuda_major: str) -> str:
        if not self.wheel:
            raise UsageError(f"--source pypi --with {self.name}: {self.no_wheel}; install it with --source "
                             f"nvidia --with {self.name} (NVIDIA's redist folder or a mirror of it)")
        return self.wheel.format(major=cuda_major)


@dataclass(frozen=True)
class ProductRequest:
    """One ``--with`` value: ``cudnn`` (the newest release for the toolkit's CUDA major), ``cudnn=9.20``
    (the newest 9.20.x), ``cudnn=9.20.0`` (exactly that)."""

    product: Product
    spec: str = ""

    @property
    def name(self) -> str:
        return self.product.name

    def __str__(self) -> str:
        return f"{self.name}={self.spec}" if self.spec else self.name

    def matches(self, label: str) -> bool:
        return not self.spec or matches(self.spec, label)


def product_title(name: str) -> str:
    """How messages name a product (``cuDNN``), else its name."""
    body = _data().get("products", {}).get(name)
    return str(body.get("title", name)) if isinstance(body, dict) else name


def product_names() -> list[str]:
    return sorted(_data().get("products", {}))


def get_product(name: str) -> Product:
    body = _data().get("products", {}).get(name)
    if not isinstance(body, dict):
        raise UsageError(f"unknown product {name!r} for --with; products: {', '.join(product_names())} "
                         "(e.g. --with cudnn or --with cudnn=9.20)")
    specs = tuple(parse_spec(c, f"product {name}") for c in body.get("components", []))
    needs = [n for n in body.get("needs", []) if isinstance(n, str)]
    before = [(str(n["name"]), str(n["before"])) for n in body.get("needs", []) if isinstance(n, dict)]
    return Product(name, str(body.get("title", name)), specs, str(body.get("wheel", "")),
                   tuple(needs), tuple(before), str(body.get("folder", name)),
                   tuple(str(p) for p in body.get("platforms", ())), str(body.get("unsupported", "")),
                   str(body.get("replaces", "")), bool(body.get("per_minor", False)),
                   str(body.get("no_wheel", "")))


def parse_product_request(text: str) -> ProductRequest:
    """``PRODUCT[=SPEC]`` from ``--with``; a bad one is a :class:`UsageError` naming the value."""
    name, sep, spec = text.strip().partition("=")
    name, spec = name.strip().lower(), spec.strip().removeprefix("v")
    if not name:
        raise UsageError(f"--with {text!r}: give a product name, e.g. --with cudnn or --with cudnn=9.20; "
                         f"products: {', '.join(product_names())}")
    product = get_product(name)
    if sep and not _PRODUCT_SPEC.fullmatch(spec):
        raise UsageError(f"--with {text!r}: {spec!r} is not a release of {product.title}: use "
                         f"{name}=MAJOR.MINOR (a train, the newest of it) or {name}=MAJOR.MINOR.PATCH "
                         f"(exactly that), or {name} alone for the newest release for the toolkit's "
                         "CUDA major")
    return ProductRequest(product, spec)


def needs_notes(requests: Sequence[ProductRequest], components: Sequence[str],
                planned: Sequence[str], releases: Mapping[str, str]) -> list[str]:
    """A plan note per toolkit component that is there only because a product needs it."""
    needs = {r.name: r.product.needs_for(releases.get(r.name, "")) for r in requests}
    out = []
    for name in dict.fromkeys(n for r in requests for n in needs[r.name]):
        if name in planned and name not in components:
            who = " and ".join(r.product.title for r in requests if name in needs[r.name])
            why = ("its libraries load it" if any(name in r.product.needs for r in requests)
                   else "its headers include it")
            out.append(f"{name} comes with {who}: {why}")
    return out


def parse_product_requests(values: Sequence[str]) -> tuple[ProductRequest, ...]:
    """Every ``--with`` value, checked; one product twice is a :class:`UsageError`."""
    out: dict[str, ProductRequest] = {}
    for value in values:
        req = parse_product_request(value)
        if req.name in out and str(out[req.name]) != str(req):
            raise UsageError(f"--with names {req.name} twice ({out[req.name]} and {req}); give it once")
        out[req.name] = req
    return tuple(out.values())
