"""Does a tree still hold what its request means today? A profile's entries change between
cudaredist versions (``profile nvcc`` gained ``cuda_profiler_api``) and a tree's layout version does
too: what the record says it was installed for (:mod:`cudaredist.record`) judged against what this
cudaredist means by it, offline. The no-op check, ``info``, ``verify`` and ``doctor`` ask here.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from cudaredist.errors import CudaRedistError
from cudaredist.plan import Plan, plan_from_json
from cudaredist.profiles import Spec, get_product, get_profile, parse_spec
from cudaredist.record import LAYOUT
from cudaredist.redo import request_argv, shell_line


def profile_specs(source: str, profile: str, release: str, platform: str) -> list[Spec]:
    """The entries of ``source``'s profile (profiles.toml; pypi.toml's extras for the pypi source)
    that apply to ``release`` on ``platform``: what a resolve of that profile asks for. A profile this
    cudaredist does not have (``custom``: none) asks for nothing."""
    if profile == "custom":
        return []
    try:
        if source == "pypi":
            from cudaredist.sources.pypi.wheels import wheel_data

            return [s for s in wheel_data().profile(profile).specs if s.applies_to(release)]
        return [s for s in get_profile(profile).specs if s.applies_to(release, platform)]
    except CudaRedistError:
        return []


def lacking(record: dict[str, Any]) -> list[str]:
    """What the record's own request means today for its release that its tree lacks (``profile
    nvcc`` gained ``cuda_profiler_api`` in a later cudaredist): offline. A redist tree's components
    against profiles.toml; another source's profile (pypi.toml's extras, which only the index turns
    into wheels) against the profile entries its record says the tree was resolved from."""
    plan = record["plan"]
    release, platform, have = plan["release"], plan["platform"], {c["name"] for c in plan["components"]}
    source = plan.get("source", "nvidia")
    try:
        if source != "nvidia":
            had = record.get("request", {}).get("profile")
            if not isinstance(had, list):  # recorded before records said: its layout version says it
                return []
            return [str(s) for s in profile_specs(source, plan["profile"], release, platform)
                    if str(s) not in had]
        # a component the release may lack (``missing``): the plan's note says when it did
        absent = " ".join(str(n) for n in plan.get("notes", []))
        specs = [s for s in get_profile(plan["profile"]).specs if s.applies_to(release, platform)
                 and not (s.missing and f"has no {s} for {platform}" in absent)] \
            if plan["profile"] != "custom" else []
        specs += [parse_spec(c, "--component") for c in record.get("request", {}).get("components", [])]
        specs += [parse_spec(n) for p in plan.get("products", [])
                  for n in get_product(str(p["name"])).needs_for(str(p["release"]))]
    except CudaRedistError:  # a profile or product this cudaredist no longer has: nothing to compare
        return []
    return list(dict.fromkeys(str(s) for s in specs if not any(n in have for n in s.names)))


def outdated(record: dict[str, Any]) -> list[str]:
    """Why the tree needs updating, offline: a layout older than this cudaredist's (:data:`LAYOUT`),
    what its request means today that it lacks (:func:`lacking`). [] when it is up to date."""
    why = []
    layout = record.get("layout", 0)
    if not isinstance(layout, int) or layout < LAYOUT:
        why.append(f"the tree was laid out by an older cudaredist (layout {layout}; this one lays trees "
                   f"out as layout {LAYOUT})")
    if missing := lacking(record):  # "profile nvcc now also includes cuda_profiler_api, cuda_nvtx"
        plan = record["plan"]
        who = f"profile {plan['profile']}" if plan["profile"] != "custom" else "the request"
        why.append(f"{who} now also includes {', '.join(missing)} (CUDA {plan['release']}), which this tree "
                   "lacks")
    return why


def holds(record: dict[str, Any], plan: Plan) -> bool:
    """Does the tree hold exactly ``plan``'s archives (as resolved now), from the components its
    record lists rather than a key stored beside them, laid out as this cudaredist lays them out
    (not :func:`outdated`)?"""
    try:
        same = plan_from_json(record["plan"]).content_key() == plan.content_key()
    except (KeyError, TypeError, ValueError):
        return False
    return same and not outdated(record)


def drift_note(prefix: Path, record: dict[str, Any]) -> str:
    """What ``info`` and ``verify`` say of a tree that needs updating (:func:`outdated`), or ""."""
    why = outdated(record)
    return f"needs updating: {'; '.join(why)}: `{shell_line(request_argv(record, prefix))}` brings it " \
        "up to date" if why else ""
