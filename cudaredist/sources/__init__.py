"""Sources: where releases come from. A source turns a train into plans (one per platform).

Two sources exist: ``nvidia`` (NVIDIA's redist server, a mirror of it, or a directory) and
``pypi`` (NVIDIA's wheels on a package index). Commands ask :func:`open_source` for one and
call the :class:`Source` protocol (:mod:`cudaredist.sources.base`, which the sources import);
nothing outside this package branches on a source's name. This face is light to import (the CLI
starts without httpx): each source loads on first use, here, where both are named.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from cudaredist.errors import PlanError, UsageError
from cudaredist.sources.base import Layout, Source, Where, check_where

if TYPE_CHECKING:
    from cudaredist.cache.store import Cache
    from cudaredist.fetch.transport import Transport

ENV_SOURCE = "CUDAREDIST_SOURCE"
SOURCES = ("nvidia", "pypi")


def check_source(source: str | None) -> str:
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


def open_source(name: str | None, transport: Transport, cache: Cache, where: Where) -> Source:
    source = check_source(name)
    where = check_where(where, source)
    if source == "pypi":
        from cudaredist.sources.pypi.source import PypiSource

        return PypiSource(transport, cache, where)
    from cudaredist.sources.nvidia.source import NvidiaSource

    return NvidiaSource(transport, cache, where)


def layout(name: str) -> Layout:
    """The layout a planned archive names (``redist`` or ``wheel``), from its source."""
    if name == "redist":
        from cudaredist.sources.nvidia.source import LAYOUT
    elif name == "wheel":
        from cudaredist.sources.pypi.source import LAYOUT
    else:
        raise PlanError(f"unknown archive layout {name!r}: this plan needs a newer cudaredist")
    return LAYOUT
