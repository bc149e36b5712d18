"""Lock files: resolved plans written down, then read back, checked for edits and for drift.

A lock (``cudaredist lock 13.4 -o cuda.lock``) is JSON with a fixed key order::

    {
      "lock_version": 1,
      "release": "13.4.2",  "release_date": "2026-09-16",
      "base_url": "<redist base the archives come from>",  "source": "nvidia",
      "request": {"train": "13.4", "profile": "nvcc", "components": []},
      "platforms": ["linux-x86_64", "windows-x86_64"],
      "content_key": "<sha256 of platforms + archive hashes: the CI cache key>",
      "plans": {"linux-x86_64": <Plan.to_json()>, ...},
      "digest": "<sha256 of everything above, canonical JSON: detects hand edits>"
    }

``install --lock`` takes its plan from here: no index listing, no manifest. A lock of the
``nvidia`` source names archives by ``relative_path`` under ``base_url`` (which ``--base-url``
and ``--mirror`` may replace); a lock of the ``pypi`` source has ``base_url`` = the package
index it was resolved on and pins each wheel by its own URL (``layout`` "wheel"), fetched as is.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from cudaredist.errors import LockFileError, ManifestError
from cudaredist.localfs import directory_as_file
from cudaredist.plan import Plan, archive_url, matches, plan_from_json, with_bases
from cudaredist.profiles import parse_product_requests
from cudaredist.publish.mirrorfiles import place
from cudaredist.sources.nvidia.manifest import check_relative_path

LOCK_VERSION = 1
# source -> the layout of its archives (a lock mixing them was not written by `cudaredist lock`)
LAYOUTS = {"nvidia": "redist", "pypi": "wheel"}
_HEX64 = re.compile(r"^[0-9a-f]{64}$")
_URL = re.compile(r"^(https?|file)://", re.I)


@dataclass(frozen=True)
class Lock:
    path: str
    release: str
    base_url: str
    train: str
    profile: str
    components: tuple[str, ...]
    plans: dict[str, Plan]
    source: str = "nvidia"
    products: tuple[str, ...] = ()   # the --with values it was locked with

    @property
    def platforms(self) -> tuple[str, ...]:
        return tuple(self.plans)


def content_key(plans: Sequence[Plan]) -> str:
    """A stable key of what the plans install (platforms + archive hashes), not of where from."""
    body = json.dumps(sorted([p.platform, p.content_key()] for p in plans))
    return hashlib.sha256(body.encode()).hexdigest()


def _digest(body: dict[str, Any]) -> str:
    canon = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(canon.encode()).hexdigest()


def build_lock(plans: Sequence[Plan], *, train: str, components: Sequence[str] = ()) -> dict[str, Any]:
    """The lock document for plans of one release (one plan per platform, at least one: `lock`
    plans the host's platform where --platform names none)."""
    first = plans[0]
    if any(p.release != first.release or p.base_url != first.base_url for p in plans):
        raise LockFileError("all platforms of a lock must come from one release and base URL")
    body: dict[str, Any] = {
        "lock_version": LOCK_VERSION,
        "release": first.release,
        "release_date": first.release_date,
        "base_url": first.base_url,
        "source": first.source,
        "request": {"train": train, "profile": first.profile, "components": list(components)}
        | ({"with": [p.requested for p in first.products]} if first.products else {})
        | ({"host": first.host} if first.host else {}),
        "platforms": [p.platform for p in plans],
        "content_key": content_key(plans),
        "plans": {p.platform: _plain(p).to_json() for p in plans},
    }
    body["digest"] = _digest(body)
    return body


def _plain(plan: Plan) -> Plan:
    """The plan as recorded: no mirror fallbacks; redist archives on the plan's own base (a wheel's
    URL is wherever the index said it is, not under the index URL: the last, a mirror's comes first)."""
    if plan.source == "nvidia":
        plan = with_bases(plan, [plan.base_url], lambda _base, product: plan.product_base(product))
    return replace(plan, hashes_from="",  # an install from the lock believes the lock
                   items=tuple(replace(i, url=i.urls[-1], fallback_urls=()) for i in plan.items))


def dumps(lock: dict[str, Any]) -> str:
    return json.dumps(lock, indent=2, ensure_ascii=False) + "\n"


def write_lock(path: Path, lock: dict[str, Any]) -> None:
    place(path.absolute(), lambda tmp: tmp.write_bytes(dumps(lock).encode()))  # "\n" line ends everywhere


def read_lock(path: Path) -> Lock:
    where = str(path)
    try:
        obj = json.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise LockFileError(f"the lock file {where} does not exist; create it with "
                            "`cudaredist lock TRAIN -o FILE`", path=where) from None
    except (OSError, ValueError) as exc:
        why = directory_as_file(exc, where) if isinstance(exc, OSError) else exc
        raise LockFileError(f"the lock file {where} is not readable JSON: {why}", path=where) from exc
    if not isinstance(obj, dict) or obj.get("lock_version") != LOCK_VERSION:
        version = obj.get("lock_version") if isinstance(obj, dict) else None
        raise LockFileError(f"{where} is not a cudaredist lock of version {LOCK_VERSION} "
                            f"(lock_version: {version!r})", path=where)
    body = {k: v for k, v in obj.items() if k != "digest"}
    if obj.get("digest") != _digest(body):
        raise LockFileError(
            f"the lock file {where} was edited after `cudaredist lock` wrote it (its digest does not "
            "match its content); regenerate it with `cudaredist lock`", path=where)
    try:
        release, base_url, request = str(obj["release"]), str(obj["base_url"]), obj["request"]
        plans = {str(k): plan_from_json(v) for k, v in obj["plans"].items()}
        train, profile = str(request["train"]), str(request["profile"])
        components = tuple(str(c) for c in request["components"])
        products = tuple(str(c) for c in request.get("with", ()))
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise LockFileError(f"the lock file {where} lacks a field or has a wrong type: {exc!r}",
                            path=where) from exc
    if not plans or list(plans) != obj.get("platforms"):
        raise LockFileError(f"{where}: 'platforms' does not list the planned platforms", path=where)
    source = str(obj.get("source", "nvidia"))
    if source not in LAYOUTS:
        raise LockFileError(f"{where}: unknown source {source!r} (this cudaredist knows "
                            f"{', '.join(LAYOUTS)}); regenerate the lock or upgrade cudaredist", path=where)
    for platform, plan in plans.items():
        _check_plan(plan, platform, release, source, where)
    if obj.get("content_key") != content_key(list(plans.values())):
        raise LockFileError(f"{where}: content_key does not match the archives it lists", path=where)
    return Lock(where, release, base_url, train, profile, components, plans, source, products)


def _check_plan(plan: Plan, platform: str, release: str, source: str, where: str) -> None:
    def bad(message: str) -> LockFileError:
        return LockFileError(f"{where}: {message}", path=where)

    if plan.platform != platform or plan.release != release:
        raise bad(f"the plan under {platform!r} is for {plan.platform} CUDA {plan.release}, not {platform} "
                  f"CUDA {release}")
    if plan.source != source:
        raise bad(f"the plan for {platform} is from source {plan.source!r}, the lock from {source!r}")
    if not plan.items:
        raise bad(f"the plan for {platform} lists no archives")
    named = {p.name for p in plan.products}
    for item in plan.items:
        entry = f"{platform}/{item.component}"
        if item.product and item.product not in named:
            raise bad(f"{entry} belongs to product {item.product!r}, which the plan for {platform} does "
                      "not list")
        if item.layout != LAYOUTS[source]:
            raise bad(f"{entry}: layout {item.layout!r} is not that of a {source} archive "
                      f"({LAYOUTS[source]!r})")
        try:
            check_relative_path(item.archive.relative_path, entry, where)
            archive_url(plan.product_base(item.product), item.archive.relative_path, entry)
        except ManifestError as exc:
            raise LockFileError(str(exc), path=where) from exc
        if not isinstance(item.archive.sha256, str) or not _HEX64.match(item.archive.sha256):
            raise bad(f"{entry}: sha256 must be 64 lowercase hex digits")
        if item.archive.size < 0:
            raise bad(f"{entry}: size must not be negative")
        if not isinstance(item.url, str) or not _URL.match(item.url):
            raise bad(f"{entry}: url {item.url!r} is not http(s):// or file://")


def select(lock: Lock, *, train: str | None, platform: str | None, host: str | None,
           profile: str | None, components: Sequence[str] | None, source: str | None = None,
           products: Sequence[str] | None = None) -> Plan:
    """The locked plan for this request, or :class:`LockFileError` if the request drifted."""
    hint = (f"regenerate the lock (`cudaredist lock {train or lock.train} ... -o {lock.path}`) "
            "or drop the conflicting option")
    if train is not None and not matches(train, lock.release):
        raise LockFileError(f"{lock.path} pins CUDA {lock.release}, but {train} was asked for; "
                            f"{hint}", path=lock.path)
    if platform is None:
        if host in lock.plans:
            platform = host
        elif len(lock.plans) == 1:
            platform = lock.platforms[0]
        else:
            raise LockFileError(f"{lock.path} locks {', '.join(lock.platforms)}, not this host's "
                                f"{host}; pass --platform", path=lock.path)
    if platform not in lock.plans:
        raise LockFileError(f"{lock.path} has no plan for platform {platform} (it locks "
                            f"{', '.join(lock.platforms)}); {hint}", path=lock.path)
    for what, locked, asked in (
            ("with profile", lock.profile, profile), ("from source", lock.source, source),
            ("with components", sorted(lock.components), None if components is None else sorted(components)),
            ("with --with", sorted(lock.products),
             None if products is None else sorted(str(r) for r in parse_product_requests(products)))):
        if asked is not None and asked != locked:
            raise LockFileError(f"{lock.path} was locked {what} {locked!r}, not {asked!r}; {hint}",
                                path=lock.path)
    return replace(lock.plans[platform], hashes_from=f"the lock file {Path(lock.path).absolute()}")

