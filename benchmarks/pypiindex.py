"""A package index of NVIDIA's CUDA 13.0.2 wheels for ``install --source pypi`` in the benchmark.

The wheels are the ones the redist mirror is built from (``pypi-mirror.sh`` repacks the same
wheels), so both sources install the same binaries. They are taken, without a download, from

* ``--wheels DIR`` (a flat folder of ``.whl`` files), if given;
* a cudaredist download cache (``archives/<sha256>`` + ``.json`` naming the file):
  ``$CUDAREDIST_TEST_CACHE`` (the tests' shared cache) or ``$CUDAREDIST_CACHE_DIR``;
* pypi-mirror.sh's wheel cache (``$WHEEL_CACHE``, default ``~/.cache/pypi-cuda-wheels``);

and what is still missing comes with ``pip download`` into the work dir, once. The index is a
folder ``files/`` (the wheels, hard-linked where possible) and ``simple/<project>/`` with both
an ``index.html`` (PEP 503) and an ``index.json`` (PEP 691: names, URLs, sha256 and sizes);
``cdnserver.py`` answers the JSON form to clients that ask for it, as PyPI does.
"""

from __future__ import annotations

import hashlib
import html
import json
import os
import re
import shutil
import subprocess
import sys
import zipfile
from collections.abc import Callable, Iterable
from pathlib import Path

LABEL = "13.0.2"
METAPACKAGE = "cuda-toolkit"
EXTRAS = ("nvcc", "cudart", "cccl", "crt", "nvvm")   # the nvcc profile, as pypi-mirror.sh names it
PIP_TAGS = {
    "linux-x86_64": ["manylinux_2_27_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64",
                     "manylinux_2_12_x86_64", "manylinux2010_x86_64"],
    "windows-x86_64": ["win_amd64"],
}
STAMP = "index-stamp.json"
UPLOAD_TIME = "2025-09-27T00:00:00.000000Z"  # CUDA 13.0.2's release date
Log = Callable[[str], None]


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _wheel_parts(filename: str) -> tuple[str, str, str] | None:
    """(canonical name, version, platform tag) of a wheel file name."""
    if not filename.endswith(".whl"):
        return None
    parts = filename[:-4].split("-")
    if len(parts) < 5:
        return None
    return canonical(parts[0]), parts[1], parts[-1]


def _fits(tag: str, platform: str) -> bool:
    if platform == "windows-x86_64":
        return "win_amd64" in tag
    return "manylinux" in tag and "x86_64" in tag or tag == "any"


def _known_wheels(wheels_dir: Path | None) -> dict[str, Path]:
    """file name -> path of every wheel found without downloading."""
    found: dict[str, Path] = {}
    caches = [Path(v) for k in ("CUDAREDIST_TEST_CACHE", "CUDAREDIST_CACHE_DIR") if (v := os.environ.get(k))]
    for cache in caches:
        for meta in (cache / "archives").glob("*.json"):
            try:
                name = str(json.loads(meta.read_text()).get("name", ""))
            except (OSError, ValueError):
                continue
            blob = meta.with_suffix("")
            if name.endswith(".whl") and blob.is_file():
                found.setdefault(name, blob)
    dirs = [wheels_dir] if wheels_dir else []
    wc = Path(os.environ.get("WHEEL_CACHE", Path.home() / ".cache" / "pypi-cuda-wheels"))
    dirs += [wc / "meta", *sorted((wc / LABEL).glob("*"))]
    for d in dirs:
        if d and d.is_dir():
            for w in d.glob("*.whl"):
                found.setdefault(w.name, w)
    return found


def _pick(known: dict[str, Path], project: str, version: str, platform: str) -> str | None:
    """The wheel of ``project`` whose version is ``version`` or ``version.*`` for ``platform``."""
    for name in sorted(known):
        parts = _wheel_parts(name)
        if parts and parts[0] == canonical(project) and _fits(parts[2], platform) and (
                parts[1] == version or parts[1].startswith(version + ".")):
            return name
    return None


def _pins(metapackage: Path, extras: Iterable[str]) -> list[tuple[str, str]]:
    """(project, version) pinned by the metapackage for the extras (== X or == X.*)."""
    with zipfile.ZipFile(metapackage) as zf:
        meta = next(n for n in zf.namelist() if n.endswith(".dist-info/METADATA"))
        text = zf.read(meta).decode("utf-8", "replace")
    wanted = set(extras)
    pins = set()
    for line in text.splitlines():
        m = re.match(r"Requires-Dist: ([A-Za-z0-9_.-]+)\s*\(?==\s*([0-9][0-9.]*?)(?:\.\*)?\)?\s*;(.*)", line)
        if m and any(re.search(rf"extra\s*==\s*['\"]{re.escape(e)}['\"]", m.group(3)) for e in wanted):
            pins.add((m.group(1), m.group(2)))
    return sorted(pins)


def _pip_download(args: list[str], dest: Path, log: Log) -> None:
    dest.mkdir(parents=True, exist_ok=True)
    log(f"pypi index: pip download {' '.join(args)}")
    subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:",
                    "-d", str(dest), *args], check=True, stdin=subprocess.DEVNULL, timeout=1800)


def build_index(work: Path, platforms: list[str], *, with_nvrtc: bool, wheels_dir: Path | None,
                log: Log) -> Path:
    """The index folder (``files/``, ``simple/``) for ``platforms``; reused when it has them all."""
    extras = EXTRAS + (("nvrtc",) if with_nvrtc else ())
    out = work / f"pypi-index-{LABEL}"
    stamp = out / STAMP
    if stamp.is_file():
        old = json.loads(stamp.read_text())
        if set(platforms) <= set(old.get("platforms", [])) and set(extras) <= set(old.get("extras", [])):
            return out
    downloads = work / "wheels"
    known = _known_wheels(wheels_dir)
    known.update({w.name: w for w in downloads.rglob("*.whl")} if downloads.is_dir() else {})
    meta = _pick(known, METAPACKAGE, LABEL, "any")
    if meta is None:
        _pip_download([f"{METAPACKAGE}=={LABEL}"], downloads / "meta", log)
        known.update({w.name: w for w in (downloads / "meta").glob("*.whl")})
        meta = _pick(known, METAPACKAGE, LABEL, "any")
        if meta is None:
            raise SystemExit(f"no {METAPACKAGE} {LABEL} wheel found or downloaded")
    pins = _pins(known[meta], extras)
    chosen = {meta}
    for plat in platforms:
        missing = [(p, v) for p, v in pins if _pick(known, p, v, plat) is None]
        if missing:
            tags = [a for t in PIP_TAGS[plat] for a in ("--platform", t)]
            _pip_download(["--python-version", "3.11", *tags, *(f"{p}=={v}.*" for p, v in missing)],
                          downloads / plat, log)
            known.update({w.name: w for w in (downloads / plat).glob("*.whl")})
        for p, v in pins:
            name = _pick(known, p, v, plat)
            if name is None:
                raise SystemExit(f"no wheel of {p} {v} for {plat} found or downloaded")
            chosen.add(name)
    if out.exists():
        shutil.rmtree(out)
    (out / "files").mkdir(parents=True)
    projects: dict[str, list[dict[str, object]]] = {}
    for name in sorted(chosen):
        dest = out / "files" / name
        try:
            os.link(known[name], dest)
        except OSError:
            shutil.copyfile(known[name], dest)
        h = hashlib.sha256()
        with open(dest, "rb") as fh:
            while chunk := fh.read(1 << 20):
                h.update(chunk)
        parts = _wheel_parts(name)
        assert parts is not None
        projects.setdefault(parts[0], []).append({"filename": name, "url": f"../../files/{name}",
                                                  "hashes": {"sha256": h.hexdigest()},
                                                  "size": dest.stat().st_size,
                                                  "upload-time": UPLOAD_TIME})
    for project, files in projects.items():
        d = out / "simple" / project
        d.mkdir(parents=True)
        (d / "index.json").write_text(json.dumps({"meta": {"api-version": "1.0"}, "name": project,
                                                  "files": files}))
        links = "".join(f'<a href="{html.escape(str(f["url"]))}#sha256={f["hashes"]["sha256"]}">'  # type: ignore[index]
                        f'{html.escape(str(f["filename"]))}</a><br>\n' for f in files)
        (d / "index.html").write_text(f"<!DOCTYPE html>\n<html><body>\n{links}</body></html>\n")
    (out / "simple" / "index.html").write_text(
        "<!DOCTYPE html>\n<html><body>\n"
        + "".join(f'<a href="{p}/">{p}</a><br>\n' for p in sorted(projects)) + "</body></html>\n")
    stamp.write_text(json.dumps({"platforms": platforms, "extras": list(extras), "files": sorted(chosen)}))
    log(f"pypi index: {len(chosen)} wheels in {out}")
    return out


def wheels_for(index: Path, platform: str) -> list[Path]:
    """The wheels of the index that install on ``platform`` (the metapackage left out)."""
    return sorted(w for w in (index / "files").glob("*.whl")
                  if (p := _wheel_parts(w.name)) and p[0] != METAPACKAGE and _fits(p[2], platform)
                  and p[2] != "any")
