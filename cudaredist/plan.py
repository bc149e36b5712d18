"""The install plan: which archive of which component, from where (pure)."""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any


def version_key(text: str) -> tuple[int, ...]:
    """Numeric sort key for dotted versions: 13.10.0 > 13.9.1 > 13.2.2."""
    # bounded runs of ASCII digits: int() of a 5000-digit run from a hostile listing raises
    return tuple(int(p) for p in re.findall(r"[0-9]{1,18}", text))


@dataclass(frozen=True)
class Archive:
    """One downloadable archive: where it is relative to the base URL and how to check it."""

    relative_path: str
    sha256: str
    size: int
    md5: str = ""

    @property
    def filename(self) -> str:
        return self.relative_path.rsplit("/", 1)[-1]


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
    # why the archives' hashes are believed: "<url> (HTTPS)", "the lock file <path>" (cudaredist.trust)
    hashes_from: str = ""

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
        } | ({"hashes_from": self.hashes_from} if self.hashes_from else {})


def join_url(base: str, relative: str) -> str:
    return base.rstrip("/") + "/" + relative


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
                tuple(obj.get("notes", ())), str(obj.get("hashes_from", "")))


def with_bases(plan: Plan, bases: Sequence[str]) -> Plan:
    """The plan fetching each archive from ``bases`` in order (mirror first), same bytes."""
    if not bases:
        return plan
    items = tuple(replace(i, url=join_url(bases[0], i.archive.relative_path),
                          fallback_urls=tuple(join_url(b, i.archive.relative_path) for b in bases[1:]))
                  for i in plan.items)
    return replace(plan, items=items)
