"""Sources: where releases come from. A source turns a train into plans (one per platform).

Two sources exist: ``nvidia`` (NVIDIA's redist server, a mirror of it, or a directory) and
``pypi`` (NVIDIA's wheels on a package index). Commands ask :func:`open_source` for one and
call the :class:`Source` protocol; nothing outside this package branches on a source's name.
The protocol is light to import (the CLI starts without httpx): sources load on first use.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from cudaredist.errors import CudaRedistError, PlanError, UsageError

if TYPE_CHECKING:
    from cudaredist.cache import Cache
    from cudaredist.fetch.transport import Transport
    from cudaredist.plan import Plan, PlannedArchive
    from cudaredist.profiles import Spec
    from cudaredist.sources.mirroring import MirrorContent
    from cudaredist.tree.extract import Digests
    from cudaredist.tree.staging import Mapper, Tree

ENV_SOURCE = "CUDAREDIST_SOURCE"
SOURCES = ("nvidia", "pypi")


def check_source(source: str | None) -> str:
    """``--source`` > ``CUDAREDIST_SOURCE`` > nvidia."""
    value = (source or os.environ.get(ENV_SOURCE) or "nvidia").strip().lower()
    if value not in SOURCES:
        raise UsageError(f"unknown source {value!r}: use one of {', '.join(SOURCES)} (--source or "
                         f"{ENV_SOURCE})")
    return value


def location_argv(source: str, base_url: str, channel: str = "") -> list[str]:
    """The options that point a new run where a plan of ``source`` came from (``base_url``, the
    ``channel`` that meant it): none for the default, so a printed command stays short."""
    if source == "pypi":
        from cudaredist.sources.pypi.index import default_index_url

        return [] if not base_url or base_url == default_index_url() else ["--index-url", base_url]
    if channel:
        return ["--channel", channel]
    from cudaredist.sources.nvidia.index import base_and_mirror

    return [] if not base_url or base_url == base_and_mirror(None, None)[0] else ["--base-url", base_url]


def profile_specs(source: str, profile: str, release: str, platform: str) -> list[Spec]:
    """The entries of ``source``'s profile (profiles.toml; pypi.toml's extras for the pypi source)
    that apply to ``release`` on ``platform``: what a resolve of that profile asks for. A profile this
    cudaredist does not have (``custom``: none) asks for nothing."""
    from cudaredist.profiles import get_profile

    if profile == "custom":
        return []
    try:
        if source == "pypi":
            from cudaredist.sources.pypi.wheels import wheel_data

            return [s for s in wheel_data().profile(profile).specs if s.applies_to(release)]
        return [s for s in get_profile(profile).specs if s.applies_to(release, platform)]
    except CudaRedistError:
        return []


_URL_OPTIONS = (("base_url", "--base-url (or CUDAREDIST_BASE_URL)"),
                ("mirror", "--mirror (or CUDAREDIST_MIRROR)"),
                ("index_url", "--index-url (or PIP_INDEX_URL)"))


def check_where(where: Where, source: str | None = None) -> Where:
    """``where`` if each URL in it parses and has a scheme cudaredist speaks (a directory needs no
    scheme) and, for ``source`` (a :func:`check_source` name), its options fit together; else a
    :class:`UsageError` naming the option. No network: the install checks this before its no-op."""
    from urllib.parse import urlsplit

    for field, option in _URL_OPTIONS:
        value = getattr(where, field)
        if not value or "://" not in value:
            continue
        try:
            parts = urlsplit(value.strip())
            parts.port  # noqa: B018 - parsing the port is what rejects "http://host:x/"
        except ValueError as exc:
            raise UsageError(f"{option} {value!r} is not a valid URL ({exc}); write it like "
                             "https://host/path/, file:///path/ or a directory") from exc
        if parts.scheme.lower() not in ("http", "https", "file"):
            raise UsageError(f"{option} {value!r}: unsupported URL scheme {parts.scheme!r}; use http://, "
                             "https://, file:// or a directory")
    if where.channel and source == "pypi":
        raise UsageError("--channel names one of NVIDIA's redist indexes: it needs --source nvidia")
    if source == "nvidia":
        if where.channel:
            from cudaredist.sources.nvidia.index import channel_base

            channel_base(where.channel, where.base_url)
        if where.no_fallback and not where.mirror:
            raise UsageError("--no-fallback needs --mirror (or CUDAREDIST_MIRROR)")
    return where


@dataclass(frozen=True)
class Where:
    """Where a source looks, as the command line and environment say."""

    base_url: str | None = None     # nvidia: the redist base URL (default NVIDIA's)
    mirror: str | None = None       # nvidia: tried before the base URL
    no_fallback: bool = False       # nvidia: the mirror only
    index_url: str | None = None    # pypi: the package index
    offline: bool = False           # only what the cache holds
    # --trusted-host HOST[:PORT] values (None: CUDAREDIST_TRUSTED_HOST); see cudaredist.trust
    trusted_hosts: tuple[str, ...] | None = None
    channel: str | None = None      # nvidia: --channel (release, preview), the base URL it means


class Source(Protocol):
    name: str
    transport: Transport  # what its archives are fetched over (the fetcher and the installer use it)
    # the mirror re-packs archives (so an xz preset means something) rather than copying them
    builds_archives: bool

    def location(self) -> str:
        """The URL trains are listed from."""
        ...

    def trains(self) -> list[dict[str, Any]]:
        """Published trains, oldest first: {train, release, release_date, releases}."""
        ...

    def resolve(self, train: str, platforms: Sequence[str], *, profile: str | None,
                components: Sequence[str], products: Sequence[str] = ()) -> list[Plan]:
        """One plan per platform, all of the one release ``train`` means; checked before any download.
        ``products``: ``--with`` values (``cudnn``, ``cudnn=9.20``), each product's archives added to
        the plan of every platform (the newest release built for the toolkit's CUDA major there)."""
        ...

    def relocate(self, plan: Plan) -> Plan:
        """A plan read from a lock file, fetched from where this run says (mirror first)."""
        ...

    def mirror_content(self, trains: Sequence[str], platforms: Sequence[str], *, profile: str | None,
                       components: Sequence[str], xz_preset: int | str | None,
                       products: Sequence[str] = ()) -> MirrorContent:
        """What a redist-shaped mirror of ``trains`` holds (:mod:`cudaredist.publish.mirror` writes it)."""
        ...


def open_source(name: str | None, transport: Transport, cache: Cache, where: Where) -> Source:
    """The source ``name`` (``--source`` / ``CUDAREDIST_SOURCE`` / nvidia)."""
    source = check_source(name)
    where = check_where(where, source)
    if source == "pypi":
        from cudaredist.sources.pypi.source import PypiSource

        return PypiSource(transport, cache, where)
    from cudaredist.sources.nvidia.source import NvidiaSource

    return NvidiaSource(transport, cache, where)


@dataclass(frozen=True)
class Layout:
    """How an archive's members land in the tree, and what runs once it is extracted."""

    mapper: Callable[[PlannedArchive, str], Mapper]
    # given the tree paths the archive wrote (e.g. wheels: restore .so symlink chains)
    after: Callable[[PlannedArchive, str, Tree, list[str]], object] | None = None
    # a zip's own record of its members' sha256 (wheels: RECORD), believed once the archive verified
    digests: Digests | None = None


def layout(name: str) -> Layout:
    """The layout a planned archive names (``redist`` or ``wheel``)."""
    module = {"wheel": "pypi", "redist": "nvidia"}.get(name)
    if module is None:
        raise PlanError(f"unknown archive layout {name!r}: this plan needs a newer cudaredist")
    found: Layout = importlib.import_module(f"cudaredist.sources.{module}.source").LAYOUT
    return found
