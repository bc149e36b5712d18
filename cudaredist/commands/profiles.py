"""``cudaredist profiles``: each profile's components, per train, from the profile data (offline)."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from cudaredist.commands.base import command, emit_json
from cudaredist.commands.options import JsonOpt, VerboseOpt

TrainsOpt = Annotated[list[str] | None, typer.Option(
    "--train", "-t", help="Show the components a release of this train needs (repeatable): 13.0, 12.9, "
                          "13.4.1. Without it, each component's first release.")]
ProfileNameOpt = Annotated[list[str] | None, typer.Option(
    "--profile", help="Only this profile (repeatable). Default: all.")]


def _row(name: str, trains: list[str]) -> dict[str, Any]:
    from cudaredist.profiles import get_profile

    prof = get_profile(name)
    specs = list(dict.fromkeys(prof.specs))  # a profile extending another may repeat one
    return {"name": name, "description": prof.description, "extends": prof.extends or None,
            "components": [{"name": str(s), "alternatives": list(s.names), "since": s.since or None,
                            "platforms": list(s.platforms) or None} for s in specs]} | (
        {"trains": {t: [str(s) for s in specs if s.applies_to(t)] for t in trains}} if trains else {})


@command
def profiles_cmd(train: TrainsOpt = None, profile: ProfileNameOpt = None, as_json: JsonOpt = False,
                 verbose: VerboseOpt = False) -> None:
    """List each profile's components, per train (offline: from the profile data).

    'a|b' is a component NVIDIA renamed: a release installs the first of the names it has. Both
    sources install the same components; --source pypi builds the nvcc-based profiles from 13.0 on.
    """
    from cudaredist.plan import version_key
    from cudaredist.profiles import profile_names
    from cudaredist.sources.nvidia.releases import check_train

    trains = list(dict.fromkeys(check_train(t) for t in train or []))
    rows = [_row(name, trains) for name in dict.fromkeys(profile or profile_names())]
    if as_json:
        emit_json({"profiles": rows})
        return
    for row in rows:
        extends = f" (extends {row['extends']})" if row["extends"] else ""
        typer.echo(f"{row['name']}{extends}: {row['description']}")
        if trains:
            for t, comps in row["trains"].items():
                typer.echo(f"  CUDA {t}: {' '.join(comps)}")
            continue
        by_since: dict[str, list[str]] = {}
        for c in row["components"]:
            only = f" ({' and '.join(c['platforms'])} only)" if c["platforms"] else ""
            by_since.setdefault(c["since"] or "", []).append(c["name"] + only)
        for since in sorted(by_since, key=version_key):
            label = f"from {since}:" if since else "every release:"
            typer.echo(f"  {label:<15} {' '.join(by_since[since])}")
