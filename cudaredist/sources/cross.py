"""Cross trees: the tools of one platform, the headers and libraries of another, as one plan.

``install TRAIN --platform TARGET --host HOST`` resolves the train for HOST (the profile's
components, as a native HOST tree would have them), then the same release for TARGET (every
component but the host tools, with the ``--with`` products). :func:`resolve_tree` keeps the host
tools of the first and the rest of the second, each archive with its platform and where its
folders go (``[cross]`` of profiles.toml): one plan, so one record, one ``verify`` and one lock.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from cudaredist.errors import PlanError, ResolveError
from cudaredist.plan import Plan
from cudaredist.profiles import cross_rule
from cudaredist.sources.base import Source


def resolve_tree(src: Source, train: str, platform: str, host: str = "", *, profile: str | None,
                 components: Sequence[str], products: Sequence[str] = ()) -> Plan:
    """The plan of one tree of ``platform`` (what ``install``, ``resolve`` and ``lock`` plan): the
    source's own, else, when ``host`` names another platform, a cross tree's (checked before any
    download): a pair NVIDIA does not publish, or a release one side lacks, is an error naming both
    sides."""
    if not host or host == platform:
        return src.resolve(train, [platform], profile=profile, components=components, products=products)[0]
    rule = cross_rule(platform, host)
    side = host
    try:
        host_plan = src.resolve(train, [host], profile=profile, components=components)[0]
        wanted = [c for c in host_plan.components if c not in rule.host_tools]
        side = platform
        # the release the host resolved, exactly: both halves of one tree are one release
        target_plan = src.resolve(host_plan.release, [platform], profile=None, components=wanted,
                                  products=products)[0]
    except (PlanError, ResolveError) as exc:
        role = "tools (--host)" if side == host else "headers and libraries (--platform)"
        raise PlanError(f"a {host} -> {platform} cross tree takes its {role} from {side}, which "
                        f"cannot be planned: {exc}", platform=side) from exc
    items = (*(replace(i, platform=host, place=rule.host_places)
               for i in host_plan.items if i.component in rule.host_tools),
             *(replace(i, platform=platform, place=rule.target_places)
               for i in target_plan.items if i.component not in rule.host_tools))
    notes = tuple(dict.fromkeys((*host_plan.notes, *target_plan.notes)))
    return replace(target_plan, host=host, profile=host_plan.profile, items=items, notes=notes)
