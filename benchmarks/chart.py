"""bench.py's chart: every case of both routes against uv and the floors, one panel per platform and
route (matplotlib, the bench extra). Bars are medians; a tick on each bar spans min-max."""

from __future__ import annotations

from pathlib import Path
from typing import Any

COLORS = {"uv": "#7f7f7f", "cudaredist": "#1f77b4", "hardlink": "#9ecae1", "copy": "#c6dbef",
          "cp -a": "#d9d9d9", "floor": "#ff7f0e", "target": "#d62728"}


def _bars(summary: dict[str, Any], plat: str, links: list[str], local: str,
          route: str) -> tuple[list[str], list[list[tuple[str, str, str]]]]:
    """Groups (label, [(series, link, case)]) of one panel."""
    groups: list[tuple[str, list[tuple[str, str, str]]]] = []
    if route == "pypi":
        for link in links:
            groups.append((f"cold\n{link}", [("uv", link, "uv-cold"), ("cudaredist", link, "pypi-cold")]))
        for link in links:
            groups.append((f"warm\n{link}", [("uv", link, "uv-warm"), ("cudaredist", link, "pypi-warm"),
                                             ("hardlink", link, "pypi-warm-hardlink")]))
        groups.append(("warm\ncp -a", [("cp -a", local, "pypi-cp -a")]))
        groups.append(("no-op", [("uv", local, "uv-no-op"), ("cudaredist", local, "pypi-no-op")]))
    else:
        uv_link = "loopback" if "loopback" in links else links[0]
        for link in links:
            groups.append((f"cold\n{link}", [("uv", link, "uv-cold"), ("cudaredist", link, "cold")]))
        groups.append(("warm", [("uv", uv_link, "uv-warm"), ("cudaredist", local, "warm-clone"),
                                ("hardlink", local, "warm-hardlink"), ("copy", local, "warm-copy"),
                                ("cp -a", local, "cp -a")]))
        groups.append(("no-op", [("uv", local, "uv-no-op"), ("cudaredist", local, "no-op")]))
    return [g[0] for g in groups], [g[1] for g in groups]


def write(path: Path, cfg: Any, summary: dict[str, Any], title: str, *, local: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cases, refs = summary["cases"], summary["references"]
    routes = ("pypi", "redist")
    fig, axes = plt.subplots(len(cfg.platforms), len(routes), figsize=(13, 4.2 * len(cfg.platforms)),
                             squeeze=False)
    for r, plat in enumerate(cfg.platforms):
        ref = refs.get(plat, {})
        for c, route in enumerate(routes):
            ax = axes[r][c]
            labels, groups = _bars(summary, plat, cfg.links, local, route)
            seen: set[str] = set()
            for g, members in enumerate(groups):
                width = 0.8 / max(1, len(members))
                for k, (series, link, case) in enumerate(members):
                    row = cases.get(f"{plat}/{link}/{case}")
                    if row is None:
                        continue
                    x = g - 0.4 + width * (k + 0.5)
                    ax.bar(x, row["wall"], width * 0.9, color=COLORS[series],
                           label=series if series not in seen else None)
                    ax.vlines(x, row["wall_min"], row["wall_max"], color="black", linewidth=0.8)
                    ax.text(x, row["wall"], f"{row['wall']:.2f}", ha="center", va="bottom", fontsize=7)
                    seen.add(series)
            if route == "redist" and ref:
                if plat.startswith("linux"):
                    floor, goal, name = ref["decode_longest"], 1.25, "longest decode"
                else:
                    floor, goal, name = ref["decode_floor"], 2.0, "inflate floor"
                ax.axhline(floor, color=COLORS["floor"], linestyle="--", linewidth=1,
                           label=f"{name} {floor:.2f} s")
                ax.axhline(floor * goal, color=COLORS["target"], linestyle=":", linewidth=1,
                           label=f"cold target {goal:g}x = {floor * goal:.2f} s")
            elif route == "pypi" and ref.get("wheel_decode_floor"):
                ax.axhline(ref["wheel_decode_floor"], color=COLORS["floor"], linestyle="--", linewidth=1,
                           label=f"wheel inflate floor {ref['wheel_decode_floor']:.2f} s")
            ax.axhline(0.1, color=COLORS["target"], linestyle="-.", linewidth=0.8, label="no-op target 0.1 s")
            ax.set_xticks(range(len(labels)), labels, fontsize=8)
            ax.set_yscale("log")
            ax.set_ylabel("wall s (median, log scale)")
            ax.set_title(f"{plat}: {'PyPI wheels' if route == 'pypi' else 'redist archives'}", fontsize=10)
            ax.legend(fontsize=7, loc="upper right")
            ax.grid(axis="y", alpha=0.3)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
