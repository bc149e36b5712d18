"""A mirror laid out like NVIDIA's redist site, its archives re-packed from NVIDIA's wheels (I/O).

The archives hold the tree ``install --source pypi`` makes (see :mod:`.repack`); the manifests
are written from what was built, merged with what the mirror already lists.
"""

from __future__ import annotations

import heapq
import json
import os
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cudaredist.errors import ConflictError, ManifestError
from cudaredist.hashing import sha256_file
from cudaredist.mirror import (
    INDEX_PAGE,
    MirrorReport,
    dest_path,
    index_page,
    mirror_lock,
    temp_beside,
    world_readable,
    write_bytes_atomic,
)
from cudaredist.plan import Plan, PlannedArchive
from cudaredist.progress import Reporter, Silent
from cudaredist.sources.nvidia.manifest import check_relative_path, parse_manifest
from cudaredist.sources.nvidia.releases import labels_from_names, sort_labels

RELEASE_KEYS = ("release_date", "release_label", "release_product")
COMPONENT_KEYS = ("name", "license", "license_path", "version")


@dataclass(frozen=True)
class _Job:
    item: PlannedArchive   # the wheel
    platform: str
    relative_path: str     # the redist archive made of it


@dataclass(frozen=True)
class _Made:
    """A redist archive in the mirror: its manifest entry and its component's fields."""

    entry: dict[str, str]      # relative_path, sha256, md5, size
    fields: dict[str, str]     # name, license, license_path
    status: str


def platform_order(platforms: Sequence[str]) -> list[str]:
    """NVIDIA's order (pypi.toml's platform table), unknown platforms after it, alphabetically."""
    from cudaredist.sources.pypi.wheels import wheel_data

    known = list(wheel_data().platforms)
    return sorted(platforms, key=lambda p: (known.index(p) if p in known else len(known), p))


ManifestRow = tuple[str, str, str, dict[str, str], dict[str, str]]


def merge_manifest(existing: dict[str, Any] | None, *, label: str, release_date: str,
                   archives: Sequence[ManifestRow]) -> dict[str, Any]:
    """A ``redistrib_<label>.json`` object: ``existing`` with these archives added or replaced.

    ``archives`` are (component, platform, version, entry, fields). A release date and
    component fields already present are kept, so later runs do not rewrite earlier ones;
    keys come in NVIDIA's order (release keys, then components by name, each with its
    fields, then its platforms), so the bytes do not depend on which run added what.
    """
    from cudaredist.sources.pypi.wheels import pep440

    old = existing or {}
    components: dict[str, dict[str, Any]] = {k: dict(v) for k, v in old.items() if isinstance(v, dict)}
    for component, platform, version, entry, fields in archives:
        comp = components.setdefault(component, {})
        for key, value in fields.items():
            if value and not comp.get(key):
                comp[key] = value
        have = comp.get("version")
        if not isinstance(have, str) or not have or pep440(version) > pep440(have):
            comp["version"] = version
        comp[platform] = dict(entry)
    out: dict[str, Any] = {"release_date": old.get("release_date") or release_date, "release_label": label,
                           "release_product": old.get("release_product") or "cuda"}
    out.update({k: v for k, v in old.items() if k not in RELEASE_KEYS and not isinstance(v, dict)})
    for key in sorted(components):
        comp = components[key]
        ordered = {k: comp[k] for k in COMPONENT_KEYS if k in comp}
        ordered.update({k: v for k, v in comp.items() if k not in ordered and not isinstance(v, dict)})
        platforms = platform_order([k for k, v in comp.items() if isinstance(v, dict)])
        ordered.update({p: comp[p] for p in platforms})
        out[key] = ordered
    return out


def dump_manifest(obj: dict[str, Any]) -> bytes:
    """As NVIDIA writes them: 4-space indent, no trailing newline."""
    return json.dumps(obj, indent=4, ensure_ascii=False).encode()


def _read_json(path: Path) -> dict[str, Any] | None:
    try:
        obj = json.loads(path.read_bytes())
    except (OSError, ValueError):
        return None
    return obj if isinstance(obj, dict) else None


def _known_archives(out: Path) -> dict[str, tuple[dict[str, Any], dict[str, Any]]]:
    """relative_path -> (platform entry, component) of every manifest already in the mirror."""
    known: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {}
    for label in labels_from_names(os.listdir(out)):
        obj = _read_json(out / f"redistrib_{label}.json") or {}
        for comp in obj.values():
            if not isinstance(comp, dict):
                continue
            for entry in comp.values():
                if isinstance(entry, dict) and isinstance(entry.get("relative_path"), str):
                    known.setdefault(entry["relative_path"], (entry, comp))
    return known


def _still_good(out: Path, entry: dict[str, Any], comp: dict[str, Any]) -> bool:
    """The archive verifies against its manifest entry, and its licence file is there."""
    try:
        size = int(str(entry.get("size", "")))
    except ValueError:
        return False
    dest = dest_path(out, str(entry["relative_path"]))
    try:
        if dest.stat().st_size != size:
            return False
    except OSError:
        return False
    lic = comp.get("license_path")
    if isinstance(lic, str) and lic and not dest_path(out, lic).is_file():
        return False
    return sha256_file(dest) == str(entry.get("sha256", "")).lower()


def write_wheel_mirror(
    out: Path,
    releases: Sequence[Sequence[Plan]],
    *,
    fetch: Callable[[PlannedArchive], tuple[Path, bool]],
    reporter: Reporter | None = None,
    jobs: int = 4,
    preset: int = 6,
    lock_timeout: float = 600.0,
) -> MirrorReport:
    """Write (or complete) a redist-shaped mirror whose archives are re-packed wheels.

    ``releases`` holds, per release, the wheel plans of ``--source pypi`` (one per
    platform). Each wheel becomes ``<component>/<platform>/<component>-<platform>-<version>-archive.*``
    (:mod:`cudaredist.sources.pypi.repack`); the manifests list them in NVIDIA's format, merged with what the
    mirror already holds. An archive that already verifies against a manifest of the mirror
    is kept as it is: a re-run builds only what is missing or damaged, and writes nothing
    when nothing changed. ``fetch`` returns a verified wheel (:meth:`cudaredist.fetch.fetcher.Fetcher.fetch`).
    """
    from cudaredist.sources.pypi.repack import relative_path as archive_path
    from cudaredist.sources.pypi.repack import repack

    reporter = reporter or Silent()
    out = out.absolute()
    out.mkdir(parents=True, exist_ok=True)
    report = MirrorReport(str(out))
    with mirror_lock(out, lock_timeout):
        work: dict[str, _Job] = {}
        rows: list[list[_Job]] = []  # per release
        for plans in releases:
            report.releases.append(plans[0].release)
            rows.append([])
            for plan in plans:
                for note in plan.notes:
                    if note not in report.notes:
                        report.notes.append(note)
                for item in plan.items:
                    rel = check_relative_path(archive_path(item.component, plan.platform, item.version),
                                              f"{item.component}.{plan.platform}", item.archive.filename)
                    seen = work.get(rel)
                    if seen is not None and seen.item.archive.sha256 != item.archive.sha256:
                        raise ConflictError(
                            f"{rel} would be made from two different wheels ({seen.item.archive.filename} "
                            f"and {item.archive.filename}); mirror these releases into separate directories",
                            path=rel, first=seen.item.archive.sha256, second=item.archive.sha256)
                    work.setdefault(rel, _Job(item, plan.platform, rel))
                    rows[-1].append(_Job(item, plan.platform, rel))
        known = _known_archives(out)
        made: dict[str, _Made] = {}
        for rel in work:
            found = known.get(rel)
            if found is not None and _still_good(out, *found):
                entry, comp = found
                made[rel] = _Made({k: str(entry[k]) for k in ("relative_path", "sha256", "md5", "size")
                                   if k in entry},
                                  {k: str(comp[k]) for k in ("name", "license", "license_path") if k in comp},
                                  "present")
        need = sorted((j for rel, j in work.items() if rel not in made), key=lambda j: -j.item.archive.size)
        licenses: dict[str, bytes] = {}
        if need:
            reporter.start(sum(j.item.archive.size for j in need), len(need))

            def build(job: _Job, wheel: Path, cached: bool) -> None:
                item = job.item
                dest = dest_path(out, job.relative_path)
                dest.parent.mkdir(parents=True, exist_ok=True)
                tmp = temp_beside(dest)
                try:
                    packed = repack(wheel, tmp, component=item.component, version=item.version,
                                    platform=job.platform, preset=preset)
                    world_readable(tmp)
                    os.replace(tmp, dest)
                finally:
                    tmp.unlink(missing_ok=True)
                license_path = f"{item.component}/LICENSE.txt" if packed.license_text else ""
                if packed.license_text:
                    licenses.setdefault(license_path, packed.license_text)
                else:
                    report.notes.append(f"{item.archive.filename} has no licence file; the manifest names "
                                        f"none for {item.component}")
                made[job.relative_path] = _Made(
                    {"relative_path": job.relative_path, "sha256": packed.sha256, "md5": packed.md5,
                     "size": str(packed.size)},
                    {"name": packed.summary or item.component,
                     "license": packed.license or "NVIDIA Proprietary", "license_path": license_path},
                    "cached" if cached else "downloaded")
                reporter.message(f"  packed     {dest.name} ({packed.size / 1e6:.1f} MB)")

            # Packing is the slow part (xz and deflate hold a core each): the biggest wheel that has
            # arrived goes first, so the longest job does not start last.
            ready: list[tuple[int, int, _Job, Path, bool]] = []
            ready_lock = threading.Lock()

            def pack_biggest() -> None:
                with ready_lock:
                    _size, _n, job, wheel, cached = heapq.heappop(ready)
                build(job, wheel, cached)

            packers = max(1, min(jobs, os.cpu_count() or 1))
            fetched: dict[Any, _Job] = {}
            packing: list[Any] = []
            try:
                with ThreadPoolExecutor(max(1, min(jobs, len(need))), thread_name_prefix="fetch") as pool, \
                        ThreadPoolExecutor(packers, thread_name_prefix="pack") as packs:
                    fetched = {pool.submit(fetch, j.item): j for j in need}
                    try:
                        for fut in as_completed(fetched):
                            job = fetched[fut]
                            wheel, cached = fut.result()
                            reporter.archive_done(job.item.archive.filename, job.item.archive.size,
                                                  cached=cached)
                            with ready_lock:
                                queued = (-job.item.archive.size, len(packing), job, wheel, cached)
                                heapq.heappush(ready, queued)
                            packing.append(packs.submit(pack_biggest))
                        for fut in packing:
                            fut.result()
                    except BaseException:
                        for fut in [*fetched, *packing]:
                            fut.cancel()
                        raise
            finally:
                reporter.close()
        for rel, text in sorted(licenses.items()):
            dest = dest_path(out, rel)
            if not dest.is_file() or dest.read_bytes() != text:
                write_bytes_atomic(dest, text)
                report.licenses.append(rel)
        for plans, jobs_of in zip(releases, rows, strict=True):
            _write_manifest(out, plans[0], [(j.item.component, j.platform, j.item.version,
                                             made[j.relative_path].entry, made[j.relative_path].fields)
                                            for j in jobs_of])
        for rel, j in work.items():
            report.archives.append({"component": j.item.component, "relative_path": rel,
                                    "sha256": made[rel].entry["sha256"], "size": int(made[rel].entry["size"]),
                                    "status": made[rel].status, "wheel": j.item.archive.filename})
        _write_index(out)
    report.archives.sort(key=lambda a: a["relative_path"])
    return report


def _write_manifest(out: Path, plan: Plan, rows: Sequence[ManifestRow]) -> None:
    path = out / f"redistrib_{plan.release}.json"
    existing = None
    if path.exists():
        existing = _read_json(path)
        if existing is None:
            raise ManifestError(f"{path} is not a JSON object; move it away to rebuild the manifest of "
                                f"CUDA {plan.release}", source=str(path))
    merged = merge_manifest(existing, label=plan.release, release_date=plan.release_date, archives=rows)
    if merged != existing:
        data = dump_manifest(merged)
        parse_manifest(data, label=plan.release, source=str(path))  # what the mirror serves must read back
        write_bytes_atomic(path, data)


def _write_index(out: Path) -> None:
    labels = labels_from_names(os.listdir(out))
    dirs = [p.name for p in out.iterdir() if p.is_dir() and not p.name.startswith(".")]
    page = index_page(sort_labels(labels), dirs).encode()
    dest = out / INDEX_PAGE
    if not dest.is_file() or dest.read_bytes() != page:
        write_bytes_atomic(dest, page)
