"""Releases resolved once for several platforms, and mirrors laid out exactly like NVIDIA's redist site.

A mirror directory, as written by :func:`write_mirror`::

    index.html                      directory page: <a href='redistrib_X.Y.Z.json'> per release
    redistrib_X.Y.Z.json            the manifest bytes exactly as served (sha256 equal to NVIDIA's)
    <component>/LICENSE.txt         the license_path files, when the source has them
    <component>/<platform>/<file>   archives at their relative_path, sha256- and size-verified

Every file is written beside its final name and renamed into place; archives come
through the download cache (hard-linked when it shares the filesystem), so a re-run
only fetches what is missing and never rewrites an archive that verifies.
"""

from __future__ import annotations

import contextlib
import html
import os
import shutil
import uuid
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cudaredist.errors import (
    BusyError,
    ConflictError,
    FetchError,
    ManifestError,
)
from cudaredist.hashing import sha256_file
from cudaredist.localfs import UMASK
from cudaredist.plan import Plan, PlannedArchive, join_url
from cudaredist.progress import Reporter, Silent
from cudaredist.sources.nvidia.index import Release
from cudaredist.sources.nvidia.manifest import check_relative_path
from cudaredist.sources.nvidia.releases import labels_from_names, sort_labels

INDEX_PAGE = "index.html"


@dataclass
class MirrorReport:
    out: str
    releases: list[str] = field(default_factory=list)
    archives: list[dict[str, Any]] = field(default_factory=list)
    licenses: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def count(self, status: str) -> int:
        return sum(1 for a in self.archives if a["status"] == status)

    def to_json(self) -> dict[str, Any]:
        return {"out": self.out, "releases": self.releases, "archives": self.archives,
                "licenses": self.licenses, "notes": self.notes}


def dest_path(out: Path, relative_path: str) -> Path:
    return out.joinpath(*relative_path.split("/"))


def temp_beside(dest: Path) -> Path:
    return dest.parent / f".{dest.name}.{uuid.uuid4().hex[:8]}.part"


def world_readable(path: Path) -> None:
    # a web server's worker must read what the cache kept 0600; the umask was read at start-up
    # (mirror workers call this from threads, where os.umask() would race other threads' files)
    os.chmod(path, 0o644 & ~UMASK)


def write_bytes_atomic(dest: Path, data: bytes) -> None:
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = temp_beside(dest)
    try:
        tmp.write_bytes(data)
        world_readable(tmp)
        os.replace(tmp, dest)
    finally:
        tmp.unlink(missing_ok=True)


def place_archive(src: Path, dest: Path) -> None:
    """Put a verified cache file at ``dest``: hard link when possible, else copy; then rename."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = temp_beside(dest)
    try:
        try:
            os.link(src, tmp)
        except OSError:  # another filesystem, or links not supported
            shutil.copyfile(src, tmp)
        world_readable(tmp)
        os.replace(tmp, dest)
    finally:
        tmp.unlink(missing_ok=True)


def _present(dest: Path, item: PlannedArchive) -> bool:
    try:
        if dest.stat().st_size != item.archive.size:
            return False
    except OSError:
        return False
    return sha256_file(dest) == item.archive.sha256


def index_page(labels: Sequence[str], dirs: Sequence[str]) -> str:
    """A directory page in the shape NVIDIA's server gives (single-quoted hrefs)."""
    rows = [f"<a href='{html.escape(d, quote=True)}/'>{html.escape(d)}/</a>" for d in sorted(dirs)]
    rows += [f"<a href='redistrib_{lbl}.json'>redistrib_{lbl}.json</a>"
             for lbl in sorted(labels, key=lambda s: [int(p) for p in s.split(".")])]
    body = "\n".join(rows)
    return ("<html>\n<head><title>Index of /compute/cuda/redist/</title></head>\n<body>\n"
            f"<h1>Index of /compute/cuda/redist/</h1><hr><pre><a href='../'>../</a>\n{body}\n"
            "</pre><hr></body>\n</html>\n")


@contextlib.contextmanager
def mirror_lock(out: Path, timeout: float) -> Any:
    import filelock

    # beside the mirror, like the prefix lock, so that the mirror holds only what it serves
    lock = filelock.FileLock(str(out.parent / f".{out.name}.cudaredist-mirror.lock"), timeout=timeout)
    try:
        with lock:
            yield
    except filelock.Timeout as exc:
        raise BusyError(f"another cudaredist process is writing the mirror {out}; retry later",
                        path=str(out), lock=lock.lock_file) from exc


def write_mirror(
    out: Path,
    releases: Sequence[tuple[Release, Sequence[Plan]]],
    *,
    fetch: Callable[[PlannedArchive], tuple[Path, bool]],
    get_bytes: Callable[[str], bytes] | None = None,
    reporter: Reporter | None = None,
    jobs: int = 4,
    lock_timeout: float = 600.0,
) -> MirrorReport:
    """Write (or complete) a mirror of ``releases`` in ``out``.

    ``fetch`` returns the verified cache path of an archive (:meth:`cudaredist.fetch.fetcher.Fetcher.fetch`);
    ``get_bytes`` fetches small documents (license files; None skips them).
    """
    reporter = reporter or Silent()
    out = out.absolute()
    out.mkdir(parents=True, exist_ok=True)
    report = MirrorReport(str(out))
    with mirror_lock(out, lock_timeout):
        items: dict[str, PlannedArchive] = {}
        for release, plans in releases:
            report.releases.append(release.label)
            for plan in plans:
                for item in plan.items:
                    rel = item.archive.relative_path
                    seen = items.get(rel)
                    if seen is not None and seen.archive.sha256 != item.archive.sha256:
                        raise ConflictError(
                            f"two releases list {rel} with different sha256 ({seen.archive.sha256[:16]}… "
                            f"and {item.archive.sha256[:16]}…); mirror them into separate directories",
                            path=rel, first=seen.archive.sha256, second=item.archive.sha256)
                    items.setdefault(rel, item)
        need = [it for rel, it in items.items() if not _present(dest_path(out, rel), it)]
        for it in items.values():
            if it not in need:
                report.archives.append(_row(it, "present"))
        if need:
            reporter.start(sum(i.archive.size for i in need), len(need))

            def one(item: PlannedArchive) -> dict[str, Any]:
                path, cached = fetch(item)
                place_archive(path, dest_path(out, item.archive.relative_path))
                reporter.archive_done(item.archive.filename, item.archive.size, cached=cached)
                return _row(item, "cached" if cached else "downloaded")

            try:
                with ThreadPoolExecutor(max(1, min(jobs, len(need))), thread_name_prefix="mirror") as pool:
                    report.archives.extend(pool.map(one, need))
            finally:
                reporter.close()
        if get_bytes is not None:
            _licenses(out, releases, items, get_bytes, report)
        for release, _plans in releases:
            dest = out / f"redistrib_{release.label}.json"
            if not dest.is_file() or dest.read_bytes() != release.data:
                write_bytes_atomic(dest, release.data)
        labels = labels_from_names(os.listdir(out))
        dirs = [p.name for p in out.iterdir() if p.is_dir() and not p.name.startswith(".")]
        write_bytes_atomic(out / INDEX_PAGE, index_page(sort_labels(labels), dirs).encode())
    report.archives.sort(key=lambda a: a["relative_path"])
    return report


def _row(item: PlannedArchive, status: str) -> dict[str, Any]:
    return {"component": item.component, "relative_path": item.archive.relative_path,
            "sha256": item.archive.sha256, "size": item.archive.size, "status": status}


def _licenses(out: Path, releases: Sequence[tuple[Release, Sequence[Plan]]],
              items: dict[str, PlannedArchive], get_bytes: Callable[[str], bytes],
              report: MirrorReport) -> None:
    """Copy each mirrored component's license_path file; a source without one only gets a note."""
    wanted = {i.component for i in items.values()}
    done: set[str] = set()
    for release, _plans in releases:
        for key in sorted(wanted):
            comp = release.manifest.components.get(key)
            if comp is None or not comp.license_path or comp.license_path in done:
                continue
            try:
                rel = check_relative_path(comp.license_path, f"{key}.license_path", release.label)
            except ManifestError as exc:
                report.notes.append(str(exc))
                continue
            done.add(rel)
            dest = dest_path(out, rel)
            if dest.is_file():
                continue
            errors = []
            for base in (release.base, *release.fallbacks):
                try:
                    write_bytes_atomic(dest, get_bytes(join_url(base, rel)))
                    report.licenses.append(rel)
                    break
                except FetchError as exc:
                    errors.append(str(exc))
            else:
                report.notes.append(f"no {rel} at the source ({'; '.join(errors)}); mirrored without it")
