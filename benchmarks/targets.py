"""The targets bench.py checks: issue 37's table (Speed IV), as data, each measured in the same run.

Each target is a wall time, or the ratio of two wall times (or of a wall time to a reference)
measured side by side in this run; a failed timed command fails its targets. The cases are
bench.py's (``PLATFORM/LINK/CASE`` medians), the references its per-platform ones.

| path                  | numerator (case @ link)            | denominator                      | goal    |
|-----------------------|------------------------------------|----------------------------------|---------|
| warm hard-linked      | pypi-warm-hardlink @ loopback      | uv-warm @ loopback               | <= 3x   |
|                       | warm-hardlink @ local (redist)     | uv-warm @ loopback               | <= 3x   |
| warm default          | pypi-warm @ loopback               | pypi-cp -a @ local               | <= 1.5x |
|                       | warm-clone @ local (redist)        | cp -a @ local                    | <= 1.5x |
| cold unshaped         | pypi-cold @ loopback               | uv-cold @ loopback               | <= 1.5x |
| redist cold, Linux    | cold @ each link                   | decode floor (reference)         | <= 1.25x|
| redist cold, Windows  | cold @ each link                   | decode floor (reference)         | <= 2x   |
|   (and a runner's)    | cold-direct @ each link (--no-cache-unpacked): the same goals          |
| warm, both platforms  | warm-clone @ local                 |                                  | <= 1.0 s|
| no-op                 | no-op, pypi-no-op @ local          |                                  | <= 0.1 s|
| peak RSS              | every cudaredist case, the worst   |                                  | < 100 MB|
"""

from __future__ import annotations

from typing import Any

ISSUE = "issue 37"
WARM_HARDLINK_VS_UV = 3.0
WARM_DEFAULT_VS_CP = 1.5
COLD_UNSHAPED_VS_UV = 1.5
COLD_LINUX_VS_FLOOR = 1.25
COLD_WINDOWS_VS_FLOOR = 2.0
WARM_SECONDS = 1.0
NOOP_SECONDS = 0.1
RSS_MB = 100.0


def target(what: str, value: float, op: str, goal: float, unit: str, failures: int) -> dict[str, Any]:
    ok = not failures and {">=": value >= goal, "<": value < goal}.get(op, value <= goal)
    margin = (value - goal) / goal if op == ">=" else (goal - value) / goal
    return {"what": what, "value": value, "op": op, "goal": goal, "unit": unit, "pass": ok, "margin": margin}


def check(cfg: Any, cases: dict[str, dict[str, Any]], refs: dict[str, dict[str, float]], *, local: str,
          mine: tuple[str, ...]) -> list[dict[str, Any]]:
    """Every target this run measured (a case left out, e.g. uv's without uv, drops its targets).
    ``local``: the link name of the cases that read no server; ``mine``: cudaredist's cases."""
    out: list[dict[str, Any]] = []
    for plat in cfg.platforms:
        def case(name: str, link: str, plat: str = plat) -> dict[str, Any] | None:
            return cases.get(f"{plat}/{link}/{name}")

        for what, a, b, goal in (
                ("warm hard-linked, pypi / uv warm", ("pypi-warm-hardlink", "loopback"),
                 ("uv-warm", "loopback"), WARM_HARDLINK_VS_UV),
                ("warm hard-linked, redist / uv warm", ("warm-hardlink", local), ("uv-warm", "loopback"),
                 WARM_HARDLINK_VS_UV),
                ("warm default, pypi / cp -a", ("pypi-warm", "loopback"), ("pypi-cp -a", local),
                 WARM_DEFAULT_VS_CP),
                ("warm default, redist / cp -a", ("warm-clone", local), ("cp -a", local), WARM_DEFAULT_VS_CP),
                ("cold unshaped, pypi / uv cold", ("pypi-cold", "loopback"), ("uv-cold", "loopback"),
                 COLD_UNSHAPED_VS_UV)):
            ca, cb = case(*a), case(*b)
            if ca is not None and cb is not None:
                out.append(target(f"{plat:15} {what}", ca["wall"] / cb["wall"], "<=", goal, "x",
                                  ca["failures"] + cb["failures"]))
        goal = COLD_WINDOWS_VS_FLOOR if plat.startswith("windows") else COLD_LINUX_VS_FLOOR
        for name, what in (("cold", "redist cold"), ("cold-direct", "redist cold, no unpacked copy")):
            for link in cfg.links:
                if (c := case(name, link)) is not None:
                    out.append(target(f"{plat:15} {what}, {link} / decode floor",
                                      c["wall"] / refs[plat]["decode_floor"], "<=", goal, "x", c["failures"]))
        if (c := case("warm-clone", local)) is not None:
            out.append(target(f"{plat:15} warm (default mode)", c["wall"], "<=", WARM_SECONDS, "s",
                              c["failures"]))
        for name in ("no-op", "pypi-no-op"):
            if (c := case(name, local)) is not None:
                out.append(target(f"{plat:15} {name.replace('-no-op', ' no-op')}", c["wall"], "<=",
                                  NOOP_SECONDS, "s", c["failures"]))
        ran = [c for c in cases.values() if c["platform"] == plat and c["case"] in mine]
        if ran:
            worst = max(ran, key=lambda c: c["rss_mb_max"])
            out.append(target(f"{plat:15} peak RSS (worst: {worst['case']}, {worst['link']})",
                              worst["rss_mb_max"], "<", RSS_MB, "MB", 0))
    return out
