"""uv on the same wheels, index and link as ``cudaredist install --source pypi`` (issue 23).

bench.py times these cases next to its own, in the same run and over the same servers:

  uv-cold             uv pip install --target T of cuda-toolkit[the extras], empty uv cache
  pypi-cold           cudaredist install --source pypi, empty cache
  uv-warm             uv again into a fresh target, its cache full (uv hard-links from it)
  pypi-warm-hardlink  cudaredist again into a fresh prefix, --link-mode hardlink
  pypi-warm           cudaredist again into a fresh prefix, the default link mode (clone)
  pypi-cp -a          cp -a of pypi-cold's tree (the default mode's reference; no server)
  uv-no-op            uv-warm's command again (no server)
  pypi-no-op          pypi-warm's command again (no server)

Each pair runs back to back, the order of uv and cudaredist swapped every other repetition. Both
get exactly the same wheels: the five the bench mirror is made of (``--only -c ...`` for
cudaredist, the matching extras of the cuda-toolkit metapackage for uv). The layouts differ (uv:
``nvidia/cu13/...`` plus dist-info; cudaredist: a CUDA_PATH tree); the files and bytes are the same.

This module builds the commands and prints the ratios of issue 23's table (benchmarks/targets.py
checks the targets).
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pypiindex

NET_CASES = ("uv-cold", "pypi-cold", "uv-warm", "pypi-warm-hardlink", "pypi-warm")
LOCAL_CASES = ("pypi-cp -a", "uv-no-op", "pypi-no-op")
CASES = ("uv-cold", "pypi-cold", "uv-warm", "pypi-warm-hardlink", "pypi-warm", "pypi-cp -a", "uv-no-op",
         "pypi-no-op")
# what each case removes before it runs (names under the link's run dir)
FRESH = {"uv-cold": ["uv-cold", "uv-cache"], "pypi-cold": ["pypi", "pypi-cache"], "uv-warm": ["uv-warm"],
         "pypi-warm-hardlink": ["pypi-warm-hardlink"], "pypi-warm": ["pypi-warm"],
         "pypi-cp -a": ["pypi-cp-a"], "uv-no-op": [], "pypi-no-op": []}
# case -> (its tree, the tree it must equal)
SAME_TREE = {"warm-clone": ("warm-clone", "cold"), "warm-hardlink": ("warm-hardlink", "cold"),
             "warm-copy": ("warm-copy", "cold"), "cp -a": ("cp-a", "cold"),
             "pypi-warm-hardlink": ("pypi-warm-hardlink", "pypi"), "pypi-warm": ("pypi-warm", "pypi"),
             "pypi-cp -a": ("pypi-cp-a", "pypi")}
# the pairs whose order alternates between repetitions (cudaredist first on odd ones)
_PAIRS = ((("uv-cold",), ("pypi-cold",)), (("uv-warm",), ("pypi-warm-hardlink", "pypi-warm")),
          (("uv-no-op",), ("pypi-no-op",)))
UV_PLATFORM = {"linux-x86_64": "x86_64-manylinux_2_28", "windows-x86_64": "x86_64-pc-windows-msvc"}
EXTRA_OF = {"cuda_nvcc": "nvcc", "cuda_cudart": "cudart", "cuda_cccl": "cccl", "cuda_crt": "crt",
            "libnvvm": "nvvm", "cuda_nvrtc": "nvrtc"}



def find_uv(given: str | None, venv_bin: Path) -> list[str]:
    """The uv to time: --uv, the bench venv's (the bench extra), else the one on PATH; [] for none."""
    if given:
        return [given]
    for cand in (venv_bin / "uv", shutil.which("uv")):
        if cand and Path(cand).is_file():
            return [str(cand)]
    return []


def order(cases: tuple[str, ...], rep: int) -> list[str]:
    """``cases`` with each uv/cudaredist pair swapped on odd repetitions."""
    out = list(cases)
    if rep % 2:
        for first, second in _PAIRS:
            if all(c in out for c in (*first, *second)):
                at = out.index(first[0])
                for c in (*first, *second):
                    out.remove(c)
                out[at:at] = [*second, *first]
    return out


def commands(cfg: Any, index_url: str, install: list[str], plat: str, d: Path,
             specs: tuple[str, ...]) -> dict[str, list[str]]:
    pypi = [*install, "--source", "pypi", "--index-url", index_url, "--cache-dir", str(d / "pypi-cache")]
    cmds = {
        "pypi-cold": [*pypi, "--prefix", str(d / "pypi")],
        "pypi-warm-hardlink": [*pypi, "--prefix", str(d / "pypi-warm-hardlink"), "--link-mode", "hardlink"],
        "pypi-warm": [*pypi, "--prefix", str(d / "pypi-warm")],
        "pypi-cp -a": ["cp", "-a", str(d / "pypi"), str(d / "pypi-cp-a")],
        "pypi-no-op": [*pypi, "--prefix", str(d / "pypi-warm")],
    }
    if cfg.uv:
        extras = ",".join(EXTRA_OF[s.split("|")[-1]] for s in specs)
        uv = [*cfg.uv, "pip", "install", "--quiet", "--no-config", "--python", cfg.python,
              "--python-platform", UV_PLATFORM[plat], "--index-url", index_url,
              "--cache-dir", str(d / "uv-cache"), "--link-mode", "hardlink",
              f"{pypiindex.METAPACKAGE}[{extras}]=={pypiindex.LABEL}", "--target"]
        cmds |= {"uv-cold": [*uv, str(d / "uv-cold")], "uv-warm": [*uv, str(d / "uv-warm")],
                 "uv-no-op": [*uv, str(d / "uv-warm")]}
    return cmds


# -- the report -------------------------------------------------------------------------------------
def _wall(cases: dict[str, dict[str, Any]], plat: str, link: str, case: str) -> float | None:
    c = cases.get(f"{plat}/{link}/{case}")
    return None if c is None or c["failures"] else float(c["wall"])


def _s(x: float | None) -> str:
    return "" if x is None else f"{x:.2f} s"


def _r(a: float | None, b: float | None) -> str:
    return "" if a is None or not b else f"{a / b:.2f}x"


def _first(cases: dict[str, dict[str, Any]], plat: str, links: list[str], case: str) -> float | None:
    """The case's wall over the unshaped link if it ran there, else the first link's."""
    for link in sorted(links, key=lambda x: x != "loopback"):
        if (w := _wall(cases, plat, link, case)) is not None:
            return w
    return None


def render(cfg: Any, summary: dict[str, Any], local: str) -> list[str]:
    """Issue 23's table, per platform: uv against cudaredist on the same wheels, and the redist route
    against uv and its floors."""
    cases, refs = summary["cases"], summary["references"]
    lines = ["", "against uv on the same wheels (issue 23, medians; ratio: cudaredist / uv or / reference)",
             f"{'platform':15} {'route':7} {'link':8} {'case':34} {'uv':>8} {'cudaredist':>21} {'ratio':>15}"]
    for plat in cfg.platforms:
        row = f"{plat:15} "
        for link in cfg.links:
            uc, pc = _wall(cases, plat, link, "uv-cold"), _wall(cases, plat, link, "pypi-cold")
            lines.append(f"{row}{'pypi':7} {link:8} {'cold (nothing cached)':34} {_s(uc):>8} {_s(pc):>21} "
                         f"{_r(pc, uc):>15}")
            uw = _wall(cases, plat, link, "uv-warm")
            pw, ph = _wall(cases, plat, link, "pypi-warm"), _wall(cases, plat, link, "pypi-warm-hardlink")
            lines.append(f"{row}{'pypi':7} {link:8} {'warm, fresh target: default':34} {_s(uw):>8} "
                         f"{_s(pw):>21} {_r(pw, uw):>15}")
            lines.append(f"{row}{'pypi':7} {link:8} {'warm, fresh target: hardlink':34} {'':>8} "
                         f"{_s(ph):>21} {_r(ph, uw):>15}")
        cp = _wall(cases, plat, local, "pypi-cp -a")
        pw = _first(cases, plat, cfg.links, "pypi-warm")
        lines.append(f"{row}{'pypi':7} {local:8} {'cp -a of the tree (warm default / it)':34} {'':>8} "
                     f"{_s(cp):>21} {_r(pw, cp):>15}")
        un, pn = _wall(cases, plat, local, "uv-no-op"), _wall(cases, plat, local, "pypi-no-op")
        lines.append(f"{row}{'pypi':7} {local:8} {'no-op':34} {_s(un):>8} {_s(pn):>21} {_r(pn, un):>15}")
        ref = refs.get(plat, {})
        uw = _first(cases, plat, cfg.links, "uv-warm")
        longest, floor = ref.get("decode_longest"), ref.get("decode_floor")
        for link in cfg.links:
            for name, label in (("cold", "cold"), ("cold-direct", "cold, --no-cache-unpacked")):
                c = _wall(cases, plat, link, name)
                ratio = f"{_r(c, longest)} longest" if plat.startswith("linux") else f"{_r(c, floor)} floor"
                lines.append(f"{row}{'redist':7} {link:8} {label:34} {'':>8} {_s(c):>21} {ratio:>15}")
        wc, wh = _wall(cases, plat, local, "warm-clone"), _wall(cases, plat, local, "warm-hardlink")
        rcp = _wall(cases, plat, local, "cp -a")
        lines.append(f"{row}{'redist':7} {local:8} {'warm: default (/ cp -a)':34} {'':>8} {_s(wc):>21} "
                     f"{_r(wc, rcp):>15}")
        lines.append(f"{row}{'redist':7} {local:8} {'warm: hardlink (/ uv warm)':34} {_s(uw):>8} "
                     f"{_s(wh):>21} {_r(wh, uw):>15}")
        lines.append(f"{row}{'redist':7} {local:8} {'cp -a of the tree':34} {'':>8} {_s(rcp):>21} {'':>15}")
        rn = _wall(cases, plat, local, "no-op")
        lines.append(f"{row}{'redist':7} {local:8} {'no-op':34} {_s(un):>8} {_s(rn):>21} {_r(rn, un):>15}")
    lines.append("warm: a fresh target from a full cache (uv hard-links from its cache); the redist route's")
    lines.append("warm rows read no archive; uv's warm there is its run over the unshaped link.")
    return lines
