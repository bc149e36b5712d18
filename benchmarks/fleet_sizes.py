"""Disk arithmetic for a fleet cache: archive bytes per train, platform and profile.

Reads NVIDIA's redistrib JSONs (default: ../shared/redist/manifests), takes the newest release of
each train, and sizes what cudaredist's own planner selects for every profile of
manifests/profiles.toml on every platform the release has. Prints the Markdown tables that
docs/fleet.md shows. Standard library plus cudaredist; no network.

    python benchmarks/fleet_sizes.py                       # 13.x trains
    python benchmarks/fleet_sizes.py --trains 12.9 13.0 13.4 --manifests DIR
    python benchmarks/fleet_sizes.py --all-releases        # every patch release, not the newest
"""

from __future__ import annotations

import argparse
import contextlib
import sys
from pathlib import Path

from cudaredist.errors import PlanError
from cudaredist.plan import Plan, version_key
from cudaredist.profiles import get_profile
from cudaredist.sources.nvidia.manifest import Manifest, make_plan, parse_manifest

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_MANIFESTS = ROOT.parent / "shared" / "redist" / "manifests"
PROFILES = ("runtime", "nvcc", "build")
BASE = "https://developer.download.nvidia.com/compute/cuda/redist/"
GB = 1e9


def releases(directory: Path, trains: list[str] | None, *, every: bool) -> dict[str, Manifest]:
    """train (or release, with ``every``) -> its manifest; a train's is its highest release
    (numeric order, as `cudaredist` resolves)."""
    found: dict[str, tuple[tuple[int, ...], Path]] = {}
    for path in directory.glob("redistrib_*.json"):
        label = path.stem.removeprefix("redistrib_")
        train = ".".join(label.split(".")[:2])
        if trains is not None and train not in trains:
            continue
        key = version_key(label)
        name = label if every else train
        if name not in found or key > found[name][0]:
            found[name] = (key, path)
    return {t: parse_manifest(p.read_bytes(), label=p.stem.removeprefix("redistrib_"), source=p.name)
            for t, (_, p) in sorted(found.items(), key=lambda kv: version_key(kv[0]))}


def plans(manifest: Manifest) -> dict[tuple[str, str], Plan]:
    """(platform, profile) -> plan, for every pair the release can satisfy."""
    out: dict[tuple[str, str], Plan] = {}
    for platform in manifest.platforms:
        if platform == "source" or "variant" in platform:
            continue
        for profile in PROFILES:
            get_profile(profile)  # a profile missing from profiles.toml is a bug here, not a gap
            # PlanError: the release lacks a component of the profile for this platform
            with contextlib.suppress(PlanError):
                out[platform, profile] = make_plan(manifest, platform=platform, base_url=BASE,
                                                   profile=profile)
    return out


def gb(n: int) -> str:
    return f"{n / GB:.3f}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--manifests", type=Path, default=DEFAULT_MANIFESTS)
    ap.add_argument("--trains", nargs="*", help="e.g. 13.0 13.4 (default: every 13.x train found)")
    ap.add_argument("--all-releases", action="store_true",
                    help="one row per release of the trains, and every release in the totals")
    args = ap.parse_args(argv)
    if not args.manifests.is_dir():
        print(f"error: {args.manifests} is not a directory of redistrib_*.json files", file=sys.stderr)
        return 1
    by_train = releases(args.manifests, args.trains, every=args.all_releases)
    if args.trains is None:
        by_train = {t: m for t, m in by_train.items() if t.startswith("13.")}
    table = {t: plans(m) for t, m in by_train.items()}
    platforms = sorted({p for per in table.values() for p, _ in per})

    what = "release" if args.all_releases else "train (newest release)"
    print(f"GB (10^9 bytes) of archives per {what}, platform and profile:\n")
    print("| train | release | platform | " + " | ".join(PROFILES) + " |")
    print("|---|---|---|" + "---:|" * len(PROFILES))
    for train, per in table.items():
        for platform in platforms:
            cells = [gb(per[platform, p].total_size) if (platform, p) in per else "–" for p in PROFILES]
            if any(c != "–" for c in cells):
                label = by_train[train].label
                head = f"| {'.'.join(label.split('.')[:2])} | {label} | {platform} | "
                print(head + " | ".join(cells) + " |")

    # What the proxy holds when the fleet uses every train listed: distinct archives only
    # (two releases can list one archive path; the cache stores it once).
    print(f"\nGB a cache holds for all of these {what.split()[0]}s together (distinct archive paths):\n")
    print("| platform | " + " | ".join(PROFILES) + " |")
    print("|---|" + "---:|" * len(PROFILES))
    totals: dict[str, dict[str, int]] = {}
    for platform in platforms:
        row = []
        for profile in PROFILES:
            seen: dict[str, int] = {}
            for per in table.values():
                if (platform, profile) in per:
                    seen.update((i.archive.relative_path, i.archive.size)
                                for i in per[platform, profile].items)
            totals.setdefault(profile, {})[platform] = sum(seen.values())
            row.append(gb(sum(seen.values())) if seen else "–")
        print(f"| {platform} | " + " | ".join(row) + " |")
    print("| **all platforms** | " + " | ".join(gb(sum(totals[p].values())) for p in PROFILES) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
