"""Build real tiny redist archives and mirrors for the tests (tar.xz with links and modes, zip)."""

from __future__ import annotations

import hashlib
import io
import json
import lzma
import tarfile
import zipfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from tests.pe import AMD64, ARM64, make_dll

if TYPE_CHECKING:
    from cudaredist.plan import Plan
    from cudaredist.sources.nvidia.index import Index

# A member spec: path -> bytes (a file), or a Link / Dir / Special / Mode(bytes, mode)


@dataclass(frozen=True)
class Link:
    target: str
    hard: bool = False


@dataclass(frozen=True)
class Dir:
    pass


@dataclass(frozen=True)
class Exe:
    data: bytes
    mode: int = 0o755


@dataclass(frozen=True)
class Special:
    kind: bytes  # tarfile.CHRTYPE, BLKTYPE, FIFOTYPE


Members = dict[str, "bytes | Link | Dir | Exe | Special"]


def make_tar_xz(dest: Path, members: Members) -> Path:
    """Members are written in the given order, names as given (no top folder added)."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(dest, "w:xz", preset=0, format=tarfile.GNU_FORMAT) as tf:
        for name, spec in members.items():
            ti = tarfile.TarInfo(name)
            ti.mtime = 1_700_000_000
            if isinstance(spec, Dir):
                ti.type, ti.mode = tarfile.DIRTYPE, 0o755
                tf.addfile(ti)
            elif isinstance(spec, Link):
                ti.type = tarfile.LNKTYPE if spec.hard else tarfile.SYMTYPE
                ti.linkname, ti.mode = spec.target, 0o777
                tf.addfile(ti)
            elif isinstance(spec, Special):
                ti.type = spec.kind
                tf.addfile(ti)
            else:
                data, mode = (spec.data, spec.mode) if isinstance(spec, Exe) else (spec, 0o644)
                ti.size, ti.mode = len(data), mode
                tf.addfile(ti, io.BytesIO(data))
    return dest


def cut_inside_a_member(path: Path) -> None:
    """Rewrite the .tar.xz at ``path`` as a sound xz stream whose tar ends half-way through its largest
    member (a mirror that lost the archive's tail, then recompressed what it had)."""
    raw = lzma.decompress(path.read_bytes())
    with tarfile.open(path) as tf:
        largest = max(tf.getmembers(), key=lambda m: m.size)
    path.write_bytes(lzma.compress(raw[: largest.offset_data + largest.size // 2]))


def zip_info(name: str, **kw: object) -> zipfile.ZipInfo:
    """A ZipInfo named exactly ``name``: on Windows zipfile turns backslashes into "/" on the way in
    (a hostile archive's backslashes would be gone before the test starts)."""
    zi = zipfile.ZipInfo(name, **kw)  # type: ignore[arg-type]
    zi.filename = name
    return zi


def make_zip(dest: Path, members: Members) -> Path:
    """A zip of ``members``, the same bytes on every call (the member times fixed: a test that builds
    one archive name twice, e.g. two releases of one component version, gets one archive)."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    when = (2026, 1, 1, 0, 0, 0)
    with zipfile.ZipFile(dest, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, spec in members.items():
            if isinstance(spec, Dir):
                zi = zip_info(name.rstrip("/") + "/", date_time=when)
                zi.external_attr = (0o40775 << 16) | 0x10  # as writestr(name + "/", b"") makes it
                zf.writestr(zi, b"")
            elif isinstance(spec, Link):
                zi = zip_info(name, date_time=when)
                zi.create_system = 3
                zi.external_attr = (0o120777 << 16)
                zf.writestr(zi, spec.target)
            else:
                data = spec.data if isinstance(spec, Exe) else spec
                assert isinstance(data, bytes)
                zi = zip_info(name, date_time=when)  # as writestr(name, ...) makes it, name kept as it is
                zi.compress_type, zi.external_attr = zipfile.ZIP_DEFLATED, 0o600 << 16
                zf.writestr(zi, data)
    return dest


def digest(path: Path) -> tuple[str, int]:
    data = path.read_bytes()
    return hashlib.sha256(data).hexdigest(), len(data)


@dataclass
class MirrorArchive:
    component: str
    platform: str
    version: str
    members: Members  # relative to the archive's top folder


def archive_name(component: str, platform: str, version: str) -> str:
    ext = "zip" if platform.startswith("windows") else "tar.xz"
    return f"{component}-{platform}-{version}-archive.{ext}"


def build_mirror(root: Path, label: str, archives: list[MirrorArchive], *,
                 release_date: str = "2026-01-01", listing: bool = True,
                 overrides: dict[tuple[str, str], dict[str, object]] | None = None) -> Path:
    """A directory laid out like NVIDIA's redist site: archives, redistrib_<label>.json, index.html.

    ``overrides[(component, platform)]`` replaces fields of that manifest entry (bad sha256, size...).
    """
    root.mkdir(parents=True, exist_ok=True)
    manifest_path = root / f"redistrib_{label}.json"
    manifest: dict[str, object] = (json.loads(manifest_path.read_text()) if manifest_path.exists()
                                   else {})
    manifest.update({"release_date": release_date, "release_label": label, "release_product": "cuda"})
    for a in archives:
        name = archive_name(a.component, a.platform, a.version)
        top = name.rsplit(".", 2 if name.endswith(".tar.xz") else 1)[0]
        members: Members = {f"{top}/": Dir()} | {f"{top}/{k}": v for k, v in a.members.items()}
        rel = f"{a.component}/{a.platform}/{name}"
        path = root / rel
        if a.platform.startswith("windows"):
            make_zip(path, {k.rstrip("/") if not isinstance(v, Dir) else k: v for k, v in members.items()})
        else:
            make_tar_xz(path, {k.rstrip("/"): v for k, v in members.items()})
        sha, size = digest(path)
        entry: dict[str, object] = {"relative_path": rel, "sha256": sha, "md5": "0" * 32, "size": str(size)}
        entry.update((overrides or {}).get((a.component, a.platform), {}))
        comp = manifest.setdefault(a.component, {"name": a.component, "license": "CUDA Toolkit",
                                                 "version": a.version})
        assert isinstance(comp, dict)
        comp[a.platform] = entry
    manifest_path.write_text(json.dumps(manifest, indent=4))
    if listing:
        names = sorted(p.name for p in root.glob("redistrib_*.json"))
        links = "\n".join(f"<a href='{n}'>{n}</a>" for n in names)
        (root / "index.html").write_text(f"<html><body><pre>\n{links}\n</pre></body></html>")
    return manifest_path


def toolkit(platform: str = "linux-x86_64", version: str = "13.0.1") -> list[MirrorArchive]:
    """A small but realistically shaped nvcc profile: nvcc, cudart (with a .so chain), cccl, crt, nvvm,
    profiler API, NVTX; on Windows the MSBuild files of ``version``'s train too, and the DLLs and
    .lib files in bin/arm64 and lib/arm64 for windows-arm64."""
    win = platform.startswith("windows")
    if win:
        arch, machine = ("arm64", ARM64) if platform == "windows-arm64" else ("x64", AMD64)
        train = ".".join(version.split(".")[:2])  # the MSBuild files are named for it
        return [
            MirrorArchive("cuda_nvcc", platform, "13.0.88", {"bin/nvcc.exe": b"MZ nvcc", "LICENSE": b"eula"}),
            MirrorArchive("cuda_cudart", platform, "13.0.96", {
                f"bin/{arch}/cudart64_13.dll": make_dll("cudart64_13.dll", code=("cudaMalloc",), data=(),
                                                        machine=machine),
                f"lib/{arch}/cudart.lib": b"lib",
                "include/cuda_runtime.h": b"// rt", "LICENSE": b"eula"}),
            MirrorArchive("visual_studio_integration", platform, f"{train}.85", msbuild_members(train)),
            MirrorArchive("cuda_cccl", platform, "13.0.85", {"include/cccl/thrust/version.h": b"// t",
                                                             "LICENSE": b"cccl eula"}),
            MirrorArchive("cuda_crt", platform, "13.0.88", {"include/crt/host_config.h": b"// hc"}),
            MirrorArchive("libnvvm", platform, "13.0.88", {"nvvm/bin/cicc.exe": b"MZ cicc"}),
            *_headers(platform),
        ]
    return [
        MirrorArchive("cuda_nvcc", platform, "13.0.88", {
            "bin/": Dir(), "bin/nvcc": Exe(b"#!/bin/sh\necho nvcc\n"), "bin/nvcc.profile": b"TOP = ..",
            "LICENSE": b"eula"}),
        MirrorArchive("cuda_cudart", platform, "13.0.96", {
            "include/cuda_runtime.h": b"// rt", "lib/libcudart.so.13.0.96": b"\x7fELF fake",
            "lib/libcudart.so.13": Link("libcudart.so.13.0.96"), "lib/libcudart.so": Link("libcudart.so.13"),
            "LICENSE": b"eula"}),
        MirrorArchive("cuda_cccl", platform, "13.0.85", {"include/cccl/thrust/version.h": b"// t",
                                                         "LICENSE": b"cccl eula"}),
        MirrorArchive("cuda_crt", platform, "13.0.88", {"include/crt/host_config.h": b"// hc"}),
        MirrorArchive("libnvvm", platform, "13.0.88", {"nvvm/bin/cicc": Exe(b"\x7fELF cicc")}),
        *_headers(platform),
    ]


def msbuild_members(train: str) -> Members:
    """NVIDIA's visual_studio_integration zip below its top folder (the files of its 13.x zips)."""
    ext = "visual_studio_integration/MSBuildExtensions"
    return {f"{ext}/CUDA {train}.props": b"<Project/>", f"{ext}/CUDA {train}.targets": b"<Project/>",
            f"{ext}/CUDA {train}.Version.props": b"<Project/>", f"{ext}/CUDA {train}.xml": b"<Rules/>",
            f"{ext}/Nvda.Build.CudaTasks.v{train}.dll": b"MZ tasks", "LICENSE": b"eula"}


def _headers(platform: str) -> list[MirrorArchive]:
    """The header-only components of the nvcc profile: the profiler API and NVTX."""
    return [
        MirrorArchive("cuda_profiler_api", platform, "13.0.85", {"include/cuda_profiler_api.h": b"// prof"}),
        MirrorArchive("cuda_nvtx", platform, "13.0.85", {"include/nvtx3/nvToolsExt.h": b"// nvtx"}),
    ]


# The components of the nvcc profile before 13.0 (no crt, no nvvm of their own): a 12.9.1 release
NVCC_12 = ("cuda_nvcc", "cuda_cudart", "cuda_cccl", "cuda_profiler_api", "cuda_nvtx")


def resolve_plan(index: Index, train: str, *, bases: Sequence[str], platform: str, profile: str | None,
                 components: Sequence[str] = ()) -> Plan:
    """The plan of ``train`` for one platform from the first of ``bases`` (a mirror built here)."""
    from cudaredist.plan import with_bases
    from cudaredist.sources.nvidia.manifest import make_plan

    release = index.release(train, bases)
    return with_bases(make_plan(release.manifest, platform=platform, base_url=release.base, profile=profile,
                                components=components), release.archive_bases)
