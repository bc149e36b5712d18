"""The mirror writer: what a source's :meth:`~cudaredist.sources.Source.mirror_content` lists,
fetched, verified and laid out exactly like NVIDIA's redist site.

A mirror directory, as written by :func:`write_mirror`::

    index.html                      directory page: <a href='redistrib_X.Y.Z.json'> per release
    redistrib_X.Y.Z.json            the manifest bytes exactly as served (sha256 equal to NVIDIA's)
    <component>/LICENSE.txt         the license_path files, when the source has them
    <component>/<platform>/<file>   archives at their relative_path, sha256- and size-verified

Paths that climb (``../../../pool/...``) put the manifests and index page as many folders deep
(:func:`~cudaredist.sources.mirroring.manifest_folder`), so the archives still land inside.

Every file is written beside its final name and renamed into place; archives come
through the download cache (hard-linked when it shares the filesystem), so a re-run
only fetches what is missing and never rewrites an archive that verifies. Archives built
from wheels (``--source pypi``) hold the tree ``install --source pypi`` makes (see
:mod:`cudaredist.sources.pypi.repack`); their manifests are written from what was built, merged
with what the mirror already lists.
"""

from __future__ import annotations

import contextlib
import html
import json
import os
import queue
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cudaredist import interrupts
from cudaredist.cache.store import hold, lock_wait
from cudaredist.errors import FetchError, ManifestError
from cudaredist.fetch.client import local_path
from cudaredist.localfs import mb
from cudaredist.plan import PlannedArchive, version_key
from cudaredist.profiles import product_title
from cudaredist.progress import Reporter
from cudaredist.publish.mirrorfiles import MirrorReport, dest_path, place, verifies, write_if_changed
from cudaredist.sources.mirroring import BuiltArchive, BuiltManifest, CopiedArchive, Document, MirrorContent
from cudaredist.sources.nvidia.manifest import parse_manifest
from cudaredist.sources.nvidia.products import product_base
from cudaredist.sources.nvidia.releases import labels_from_names
from cudaredist.sources.pypi.repack import repack
from cudaredist.sources.pypi.wheels import pep440, wheel_data
from cudaredist.tree import links

Fetch = Callable[[PlannedArchive], tuple[Path, bool]]  # an archive -> (its verified cache path, cached?)
COMPONENT_KEYS = ("name", "license", "license_path", "version")


def index_page(labels: Sequence[str], dirs: Sequence[str], manifests: str = "") -> str:
    """A directory page in the shape NVIDIA's server gives (single-quoted hrefs); ``manifests``: the
    folder a mirror's top page points install at (``rel='manifests'``: its manifests sit deeper)."""
    rows = [f"<a href='{html.escape(d, quote=True)}/'>{html.escape(d)}/</a>" for d in sorted(dirs)]
    if manifests:
        rows.insert(0, f"<a href='{html.escape(manifests, quote=True)}/' rel='manifests'>"
                       f"{html.escape(manifests)}/</a>")
    rows += [f"<a href='redistrib_{lbl}.json'>redistrib_{lbl}.json</a>"
             for lbl in sorted(labels, key=version_key)]
    body = "\n".join(rows)
    return ("<html>\n<head><title>Index of /compute/cuda/redist/</title></head>\n<body>\n"
            f"<h1>Index of /compute/cuda/redist/</h1><hr><pre><a href='../'>../</a>\n{body}\n"
            "</pre><hr></body>\n</html>\n")


def write_mirror(out: Path, content: MirrorContent, *, fetch: Fetch, get_bytes: Callable[[str], bytes],
                 reporter: Reporter, jobs: int, locked: bool = False) -> MirrorReport:
    """Write (or complete) in ``out`` the mirror ``content`` describes, under the mirror's lock
    (``locked``: the caller holds the lock of a mirror that contains ``out``). Each ``--with``
    product goes to its own folder (where :func:`product_base` looks), inside ``out`` under the same lock.

    ``fetch`` returns the verified cache path of an archive or wheel
    (:meth:`cudaredist.fetch.fetcher.Fetcher.fetch`); ``get_bytes`` fetches small documents
    (licence files).
    """
    out = out.absolute()
    top = dest_path(out, content.folder) if content.folder else out  # where the manifests go
    out.mkdir(parents=True, exist_ok=True)
    report = MirrorReport(str(out), str(top), releases=[m.label for m in content.manifests],
                          notes=list(content.notes))
    # the lock beside the mirror, like the prefix lock, so that the mirror holds only what it serves
    with contextlib.nullcontext() if locked else hold(
            out.parent / f".{out.name}.cudaredist-mirror.lock", lock_wait(),
            f"the mirror {out} is busy: another cudaredist process is writing it; retry later", out,
            doing="create the lock file of the mirror in", where=out.parent, option="--out"):
        _copy_archives(out, content.copies, fetch, reporter, jobs, report)
        made = build_archives(out, content.builds, fetch=fetch, reporter=reporter, jobs=jobs,
                              preset=content.xz_preset, report=report)
        _documents(out, content.documents, get_bytes, report)
        for manifest in content.manifests:
            if isinstance(manifest, BuiltManifest):
                write_manifest(out, manifest, made)
            else:
                write_if_changed(top / f"redistrib_{manifest.label}.json", manifest.data)
        for product, held in content.products.items():  # each in its own folder, where install looks for it
            where = local_path(product_base(top.as_uri() + "/", product))
            part = write_mirror(where, held, fetch=fetch, get_bytes=get_bytes, reporter=reporter,
                                jobs=jobs, locked=where.is_relative_to(out))
            report.products.append({"name": product, "title": product_title(product),
                                    "releases": part.releases, "out": part.out})
            report.archives += [row | {"product": product} for row in part.archives]
            report.licenses += [str(Path(part.out, rel)) for rel in part.licenses]
            report.notes += [n for n in part.notes if n not in report.notes]
        labels = labels_from_names(os.listdir(top))
        dirs = [p.name for p in top.iterdir() if p.is_dir() and not p.name.startswith(".")]
        write_if_changed(top / "index.html", index_page(labels, dirs).encode())
        if top != out and not labels_from_names(os.listdir(out)):
            # the mirror's top says where its manifests are, for an install given this folder
            tops = [p.name for p in out.iterdir() if p.is_dir() and not p.name.startswith(".")]
            write_if_changed(out / "index.html", index_page([], tops, manifests=content.folder).encode())
    report.archives.sort(key=lambda a: (a.get("product", ""), a["relative_path"]))
    return report


def _copy_archives(out: Path, copies: Sequence[CopiedArchive], fetch: Fetch, reporter: Reporter, jobs: int,
                   report: MirrorReport) -> None:
    """Each archive as served: those that verify in place are kept, the rest fetched and placed."""
    need = [c for c in copies
            if not verifies(dest_path(out, c.relative_path), c.item.archive.size, c.item.archive.sha256)]
    report.archives.extend(_row(c.item, "present") for c in copies if c not in need)
    if not need:
        return
    reporter.start(sum(c.item.archive.size for c in need), len(need))

    def one(copy: CopiedArchive) -> dict[str, Any]:
        item = copy.item
        path, cached = fetch(item)
        place(dest_path(out, copy.relative_path), lambda tmp: links.place(path, tmp, "hardlink", 0o644))
        reporter.archive_done(item.archive.filename, item.archive.size, cached=cached)
        return _row(item, "cached" if cached else "downloaded")

    try:
        with ThreadPoolExecutor(max(1, min(jobs, len(need))), thread_name_prefix="mirror") as pool:
            report.archives.extend(interrupts.results([pool.submit(one, copy) for copy in need]))
    finally:
        reporter.close()


def _row(item: PlannedArchive, status: str) -> dict[str, Any]:
    return {"component": item.component, "relative_path": item.archive.relative_path,
            "sha256": item.archive.sha256, "size": item.archive.size, "status": status}


def _documents(out: Path, documents: Sequence[Document], get_bytes: Callable[[str], bytes],
               report: MirrorReport) -> None:
    """Each licence file not yet in the mirror, from the first URL that serves it; else a note."""
    for doc in documents:
        dest = dest_path(out, doc.relative_path)
        if dest.is_file():
            continue
        errors = []
        for url in doc.urls:
            try:
                write_if_changed(dest, get_bytes(url))
                report.licenses.append(doc.relative_path)
                break
            except FetchError as exc:
                errors.append(str(exc))
        else:
            report.notes.append(f"no {doc.relative_path} at the source ({'; '.join(errors)}); "
                                "mirrored without it")


@dataclass(frozen=True)
class Made:
    """A redist archive in the mirror: its manifest entry and its component's fields."""

    entry: dict[str, str]      # relative_path, sha256, md5, size
    fields: dict[str, str]     # name, license, license_path
    status: str


ManifestRow = tuple[str, str, str, dict[str, str], dict[str, str]]


def merge_manifest(existing: dict[str, Any] | None, *, label: str, release_date: str,
                   archives: Sequence[ManifestRow], variants: Sequence[str] = (),
                   product: str = "cuda") -> dict[str, Any]:
    """A ``redistrib_<label>.json`` object: ``existing`` with these archives added or replaced.

    ``archives`` are (component, platform, version, entry, fields); ``variants[i]`` (a product's
    ``cuda13``) lists archive ``i`` under that subkey of its platform, and in ``cuda_variant``. A release
    date and component fields already present are kept, so later runs do not rewrite earlier ones;
    keys come in NVIDIA's order (release keys, then components by name, each with its fields, then
    its platforms), so the bytes do not depend on which run added what.
    """
    old = existing or {}
    components: dict[str, dict[str, Any]] = {k: dict(v) for k, v in old.items() if isinstance(v, dict)}
    for i, (component, platform, version, entry, fields) in enumerate(archives):
        comp = components.setdefault(component, {})
        for key, value in fields.items():
            if value and not comp.get(key):
                comp[key] = value
        have = comp.get("version")
        if not isinstance(have, str) or not have or pep440(version) > pep440(have):
            comp["version"] = version
        variant = variants[i] if i < len(variants) else ""
        if variant:
            held = comp.get(platform)
            comp[platform] = {**(held if isinstance(held, dict) and "relative_path" not in held else {}),
                              variant: dict(entry)}
            listed = comp.get("cuda_variant")
            have_variants = {str(v) for v in listed} if isinstance(listed, list) else set()
            comp["cuda_variant"] = sorted(have_variants | {variant.removeprefix("cuda")}, key=version_key)
        else:
            comp[platform] = dict(entry)
    known = list(wheel_data().platforms)
    out: dict[str, Any] = {"release_date": old.get("release_date") or release_date, "release_label": label,
                           "release_product": old.get("release_product") or product}
    out.update({k: v for k, v in old.items() if k not in out and not isinstance(v, dict)})
    for key in sorted(components):
        comp = components[key]
        ordered = {k: comp[k] for k in COMPONENT_KEYS if k in comp}
        ordered.update({k: v for k, v in comp.items() if k not in ordered and not isinstance(v, dict)})
        # NVIDIA's order (pypi.toml's platform table), unknown platforms after it, alphabetically
        platforms = sorted((k for k, v in comp.items() if isinstance(v, dict)),
                           key=lambda p: (known.index(p) if p in known else len(known), p))
        ordered.update({p: comp[p] for p in platforms})
        out[key] = ordered
    return out


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
            for value in comp.values():  # a platform's entry, or its variant subkeys (a product's)
                entries = [value, *value.values()] if isinstance(value, dict) else []
                for entry in entries:
                    if isinstance(entry, dict) and isinstance(entry.get("relative_path"), str):
                        known.setdefault(entry["relative_path"], (entry, comp))
    return known


def _still_good(out: Path, entry: dict[str, Any], comp: dict[str, Any]) -> bool:
    size, lic, sha = str(entry.get("size", "")), comp.get("license_path"), str(entry.get("sha256", ""))
    if isinstance(lic, str) and lic and not dest_path(out, lic).is_file():
        return False
    return size.isascii() and size.isdigit() and verifies(dest_path(out, str(entry["relative_path"])),
                                                          int(size), sha.lower())


def build_archives(out: Path, builds: Sequence[BuiltArchive], *,
                   fetch: Fetch, reporter: Reporter, jobs: int,
                   preset: int | str, report: MirrorReport) -> dict[str, Made]:
    """Each redist archive re-packed from its wheel, and the licence files the wheels carry.

    An archive that already verifies against a manifest of the mirror is kept as it is: a re-run
    builds only what is missing or damaged, and writes nothing when nothing changed. Returns what
    each relative path holds now, for the manifests.
    """
    if not builds:
        return {}
    known = _known_archives(out)
    made: dict[str, Made] = {}
    for b in builds:
        found = known.get(b.relative_path)
        if found is not None and _still_good(out, *found):
            entry, comp = found
            made[b.relative_path] = Made(
                {k: str(entry[k]) for k in ("relative_path", "sha256", "md5", "size") if k in entry},
                {k: str(comp[k]) for k in ("name", "license", "license_path") if k in comp}, "present")
    need = sorted((b for b in builds if b.relative_path not in made), key=lambda b: -b.wheel.archive.size)
    licenses: dict[str, bytes] = {}
    if need:
        reporter.start(sum(b.wheel.archive.size for b in need), len(need))

        def build(job: BuiltArchive, wheel: Path, cached: bool) -> None:
            item = job.wheel
            dest = dest_path(out, job.relative_path)
            packed = place(dest, lambda tmp: repack(
                wheel, tmp, component=item.component, version=item.version, platform=job.platform,
                preset=preset, variant=job.variant))
            license_path = f"{item.component}/LICENSE.txt" if packed.license_text else ""
            if packed.license_text:
                licenses.setdefault(license_path, packed.license_text)
            else:
                report.notes.append(f"{item.archive.filename} has no licence file; the manifest names "
                                    f"none for {item.component}")
            made[job.relative_path] = Made(
                {"relative_path": job.relative_path, "sha256": packed.sha256, "md5": packed.md5,
                 "size": str(packed.size)},
                {"name": packed.summary or item.component,
                 "license": packed.license or "NVIDIA Proprietary", "license_path": license_path},
                "cached" if cached else "downloaded")
            reporter.message(f"  packed     {dest.name} ({mb(packed.size)})")

        # Packing is the slow part (xz and deflate hold a core each): the biggest wheel that has
        # arrived goes first, so the longest job does not start last.
        ready: queue.PriorityQueue[tuple[int, int, BuiltArchive, Path, bool]] = queue.PriorityQueue()

        packers = max(1, min(jobs, os.cpu_count() or 1))
        packing: list[Any] = []
        try:
            with ThreadPoolExecutor(max(1, min(jobs, len(need))), thread_name_prefix="fetch") as pool, \
                    ThreadPoolExecutor(packers, thread_name_prefix="pack") as packs:
                fetched = {pool.submit(fetch, b.wheel): b for b in need}
                try:
                    for fut in interrupts.as_done(fetched):
                        job = fetched[fut]
                        wheel, cached = fut.result()
                        reporter.archive_done(job.wheel.archive.filename, job.wheel.archive.size,
                                              cached=cached)
                        ready.put((-job.wheel.archive.size, len(packing), job, wheel, cached))
                        packing.append(packs.submit(lambda: build(*ready.get_nowait()[2:])))
                    interrupts.results(packing)
                except BaseException:
                    for fut in [*fetched, *packing]:
                        fut.cancel()
                    raise
        finally:
            reporter.close()
    for rel, text in sorted(licenses.items()):
        if write_if_changed(dest_path(out, rel), text):
            report.licenses.append(rel)
    report.archives += [{"component": b.wheel.component, "relative_path": b.relative_path,
                         "sha256": m.entry["sha256"], "size": int(m.entry["size"]), "status": m.status,
                         "wheel": b.wheel.archive.filename} for b in builds for m in [made[b.relative_path]]]
    return made


def write_manifest(out: Path, manifest: BuiltManifest, made: dict[str, Made]) -> None:
    path = out / f"redistrib_{manifest.label}.json"
    if (existing := _read_json(path)) is None and path.exists():
        raise ManifestError(f"{path} is not a JSON object; move it away to rebuild the manifest of "
                            f"CUDA {manifest.label}", source=str(path))
    rows = [(b.wheel.component, b.platform, b.wheel.version, made[b.relative_path].entry,
             made[b.relative_path].fields) for b in manifest.archives]
    merged = merge_manifest(existing, label=manifest.label, release_date=manifest.release_date, archives=rows,
                            variants=[b.variant for b in manifest.archives], product=manifest.product)
    if merged != existing:
        data = json.dumps(merged, indent=4, ensure_ascii=False).encode()  # as NVIDIA's: no final newline
        parse_manifest(data, label=manifest.label, source=str(path))  # what the mirror serves must read back
        write_if_changed(path, data)
