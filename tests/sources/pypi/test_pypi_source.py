"""The PyPI source: versions, markers, index pages, tag choice, member layout, SONAME chains,
resolution and a whole install, against tiny wheels behind a respx-mocked index."""

from __future__ import annotations

import base64
import hashlib
import io
import json
import os
import re
import struct
import zipfile
from pathlib import Path
from typing import Any

import httpx
import pytest
import respx
from packaging.requirements import Requirement
from typer.testing import CliRunner

from cudaredist import sources as source
from cudaredist.cache.store import Cache
from cudaredist.cli import app
from cudaredist.errors import (
    FetchError,
    IntegrityError,
    ManifestError,
    OfflineError,
    PlanError,
    ResolveError,
    UsageError,
)
from cudaredist.fetch.client import RetryPolicy
from cudaredist.fetch.transport import Transport
from cudaredist.install import Installer
from cudaredist.prefixes import verify
from cudaredist.sources.pypi import index as pypi
from cudaredist.sources.pypi import source as planner
from cudaredist.sources.pypi.simple import IndexFile, parse_simple_html, parse_simple_json
from cudaredist.sources.pypi.wheels import (
    Metadata,
    applies,
    choose_version,
    component_for,
    marker_env,
    member_mapper,
    parse_metadata,
    parse_version,
    parse_wheel_name,
    pick_wheel,
    real_library_name,
    record_digests,
    release_label,
    wheel_data,
)
from cudaredist.tree import staging
from cudaredist.tree.sonames import chain_links, read_soname, soname_links
from tests.archives import zip_info
from tests.hosts import assert_link

INDEX = "https://pypi.test/simple/"
FILES = "https://files.test/packages/"

# ------------------------------------------------------------------------------------------------
# Tiny real artefacts


def fake_elf(soname: str, *, is64: bool = True, little: bool = True) -> bytes:
    """A minimal ELF shared object: one PT_LOAD over the file, a PT_DYNAMIC with STRTAB and SONAME."""
    e = "<" if little else ">"
    ehsize, phentsize, dyn_fmt = (64, 56, e + "qQ") if is64 else (52, 32, e + "iI")
    phoff, phnum, base = ehsize, 2, 0x400000
    dyn_off = phoff + phnum * phentsize
    dyn_len = 3 * struct.calcsize(dyn_fmt)
    str_off = dyn_off + dyn_len
    strtab = b"\0" + soname.encode() + b"\0"
    total = str_off + len(strtab)
    dyn = (struct.pack(dyn_fmt, 5, base + str_off) + struct.pack(dyn_fmt, 14, 1)
           + struct.pack(dyn_fmt, 0, 0))
    ident = b"\x7fELF" + bytes([2 if is64 else 1, 1 if little else 2, 1]) + b"\0" * 9
    if is64:
        header = ident + struct.pack(e + "HHIQQQIHHHHHH", 3, 62, 1, 0, phoff, 0, 0, ehsize, phentsize,
                                     phnum, 64, 0, 0)
        load = struct.pack(e + "IIQQQQQQ", 1, 5, 0, base, base, total, total, 0x1000)
        dynamic = struct.pack(e + "IIQQQQQQ", 2, 6, dyn_off, base + dyn_off, base + dyn_off, dyn_len,
                              dyn_len, 8)
    else:
        header = ident + struct.pack(e + "HHIIIIIHHHHHH", 3, 20, 1, 0, phoff, 0, 0, ehsize, phentsize,
                                     phnum, 40, 0, 0)
        load = struct.pack(e + "IIIIIIII", 1, 0, base, base, total, total, 5, 0x1000)
        dynamic = struct.pack(e + "IIIIIIII", 2, dyn_off, base + dyn_off, base + dyn_off, dyn_len,
                              dyn_len, 6, 4)
    out = header + load + dynamic + dyn + strtab
    assert len(out) == total
    return out


def record_line(name: str, data: bytes) -> str:
    """A RECORD row as wheel builders write it: the path, sha256=urlsafe-base64 (no padding), size."""
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{name},sha256={digest},{len(data)}"


def make_wheel(dist: str, version: str, files: dict[str, bytes], *, metadata: str = "",
               unrecorded: tuple[str, ...] = ()) -> bytes:
    """A wheel of ``files`` with its METADATA, a licence and a RECORD of them all (but ``unrecorded``)."""
    info = f"{dist}-{version}.dist-info"
    members = {**files, f"{info}/licenses/License.txt": b"NVIDIA EULA\n",
               f"{info}/METADATA": (metadata or f"Metadata-Version: 2.4\nName: {dist}\n"
                                                 f"Version: {version}\n").encode()}
    record = "".join(f"{record_line(n, d)}\n" for n, d in members.items() if n not in unrecorded)
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        for name, data in {**members, f"{info}/RECORD": f"{record}{info}/RECORD,,\n".encode()}.items():
            zi = zip_info(name, date_time=(2025, 10, 9, 0, 0, 0))  # the name as given, on Windows too
            zi.create_system = 3
            zi.external_attr = (0o100755 if "/bin/" in name and "." not in name.rsplit("/", 1)[-1]
                                else 0o100644) << 16
            zf.writestr(zi, data)
    return buf.getvalue()


LINUX = "(sys_platform == 'linux' or sys_platform == 'win32')"
ONLY_LINUX = "(sys_platform == 'linux')"


def toolkit_metadata(version: str, pins: dict[str, tuple[str, str, str]]) -> str:
    """METADATA of a cuda-toolkit release: extra -> (package, pin, marker platforms)."""
    lines = ["Metadata-Version: 2.4", "Name: cuda-toolkit", f"Version: {version}", "Provides-Extra: all"]
    for pkg, pin, plat in pins.values():
        lines.append(f"Requires-Dist: {pkg}{pin}; {plat} and extra == 'all'")
    for extra, (pkg, pin, plat) in pins.items():
        lines.append(f"Provides-Extra: {extra}")
        lines.append(f"Requires-Dist: {pkg}{pin}; {plat} and extra == '{extra}'")
    return "\n".join(lines) + "\n\n# cuda-toolkit\n\nSome: markdown body\n"


PINS_13_0 = {
    "cccl": ("nvidia-cuda-cccl", "==13.0.85.*", LINUX),
    "crt": ("nvidia-cuda-crt", "==13.0.88.*", LINUX),
    "cudart": ("nvidia-cuda-runtime", "==13.0.96.*", LINUX),
    "culibos": ("nvidia-cuda-culibos", "==13.0.85.*", ONLY_LINUX),
    "nvcc": ("nvidia-cuda-nvcc", "==13.0.88.*", LINUX),
    "nvvm": ("nvidia-nvvm", "==13.0.88.*", LINUX),
    "profiler": ("nvidia-cuda-profiler-api", "==13.0.85.*", LINUX),
    "nvtx": ("nvidia-nvtx", "==13.0.85.*", LINUX),
}

LINUX_TAG = "py3-none-manylinux2014_x86_64.manylinux_2_17_x86_64"
WIN_TAG = "py3-none-win_amd64"


class FakeIndex:
    """A Simple API (PEP 691 JSON, or PEP 503 HTML) and a file host, served through respx."""

    def __init__(self, html: bool = False) -> None:
        self.html = html
        self.projects: dict[str, list[dict[str, Any]]] = {}
        self.blobs: dict[str, bytes] = {}
        self.requests: list[str] = []

    def add(self, filename: str, data: bytes, *, uploaded: str = "2025-10-09T00:00:00Z",
            yanked: bool = False, sha256: str | None = None, serve: bytes | None = None) -> None:
        wn = parse_wheel_name(filename)
        name = wn[0] if wn else filename.split("-")[0]
        self.blobs[filename] = data if serve is None else serve
        self.projects.setdefault(name, []).append({
            "filename": filename, "url": f"{FILES}{filename}", "size": len(data),
            "hashes": {"sha256": hashlib.sha256(data).hexdigest() if sha256 is None else sha256},
            "upload-time": uploaded, "yanked": yanked})

    def add_wheel(self, dist: str, version: str, tag: str, files: dict[str, bytes], **kw: Any) -> None:
        self.add(f"{dist}-{version}-{tag}.whl", make_wheel(dist, version, files), **kw)

    def page(self, request: httpx.Request, name: str) -> httpx.Response:
        self.requests.append(str(request.url))
        files = self.projects.get(name)
        if files is None:
            return httpx.Response(404)
        if self.html:
            body = "".join(
                f'<a href="../../packages/{f["filename"]}#sha256={f["hashes"]["sha256"]}"'
                f'{" data-yanked" if f["yanked"] else ""}>{f["filename"]}</a>\n' for f in files)
            return httpx.Response(200, text=f"<html><body>{body}</body></html>",
                                  headers={"content-type": "text/html"})
        assert "application/vnd.pypi.simple.v1+json" in request.headers.get("accept", "")
        return httpx.Response(200, json={"meta": {"api-version": "1.1"}, "name": name, "files": files},
                              headers={"content-type": "application/vnd.pypi.simple.v1+json"})

    def blob(self, request: httpx.Request, fn: str) -> httpx.Response:
        self.requests.append(str(request.url))
        if fn not in self.blobs:
            return httpx.Response(404)
        data = self.blobs[fn]
        if request.method == "HEAD":
            return httpx.Response(200, headers={"content-length": str(len(data))})
        return httpx.Response(200, content=data)

    def mount(self, router: respx.MockRouter) -> None:
        router.get(url__regex=r"^https://pypi\.test/simple/(?P<name>[^/]+)/$").mock(side_effect=self.page)
        router.route(url__regex=r"^https://(?:files|pypi)\.test/packages/(?P<fn>[^/]+)$").mock(
            side_effect=self.blob)


def add_release_13_0(index: FakeIndex, *, windows: bool = True) -> None:
    """cuda-toolkit 13.0.2 and its compile set, shaped like NVIDIA's real wheels."""
    index.add_wheel("cuda_toolkit", "13.0.1", "py2.py3-none-any", {}, uploaded="2025-09-08T00:00:00Z")
    index.add("cuda_toolkit-13.0.2-py2.py3-none-any.whl",
              make_wheel("cuda_toolkit", "13.0.2", {}, metadata=toolkit_metadata("13.0.2", PINS_13_0)),
              uploaded="2025-12-19T23:24:07Z")
    index.add_wheel("cuda_toolkit", "13.1.0rc1", "py2.py3-none-any", {})
    index.add_wheel("cuda_toolkit", "12.9.1", "py2.py3-none-any", {})
    index.add("cuda_toolkit-0.0.0a0.tar.gz", b"sdist")
    cu = "nvidia/cu13"
    linux = {
        ("nvidia_cuda_nvcc", "13.0.88"): {f"{cu}/bin/nvcc": b"\x7fELF nvcc", f"{cu}/bin/nvcc.profile": b"TOP",
                                          f"{cu}/bin/crt/link.stub": b"stub"},
        ("nvidia_cuda_runtime", "13.0.96"): {f"{cu}/include/cuda_runtime.h": b"// rt",
                                             f"{cu}/lib/libcudart.so.13": fake_elf("libcudart.so.13"),
                                             f"{cu}/lib/libcudart_static.a": b"!<arch>"},
        ("nvidia_cuda_cccl", "13.0.85"): {f"{cu}/include/cccl/thrust/version.h": b"// thrust",
                                          f"{cu}/.metadata/provenance.txt": b"scan log",
                                          f"{cu}/lib/cmake/cccl/cccl-config.cmake": b"# cmake"},
        ("nvidia_cuda_crt", "13.0.88"): {f"{cu}/include/crt/host_config.h": b"// hc"},
        ("nvidia_nvvm", "13.0.88"): {f"{cu}/include/nvvm.h": b"// nvvm", f"{cu}/nvvm/bin/cicc": b"cicc",
                                     f"{cu}/lib/libnvvm.so.4": fake_elf("libnvvm.so.4"),
                                     f"{cu}/nvvm/libdevice/libdevice.10.bc": b"bc"},
        ("nvidia_cuda_culibos", "13.0.85"): {f"{cu}/lib/libculibos.a": b"!<arch>"},
        ("nvidia_cuda_profiler_api", "13.0.85"): {f"{cu}/include/cuda_profiler_api.h": b"// prof"},
        ("nvidia_nvtx", "13.0.85"): {f"{cu}/include/nvtx3/nvToolsExt.h": b"// nvtx"},
    }
    win = {
        ("nvidia_cuda_nvcc", "13.0.88"): {f"{cu}/bin/nvcc.exe": b"MZ nvcc", f"{cu}/bin/nvcc.profile": b"TOP"},
        ("nvidia_cuda_runtime", "13.0.96"): {f"{cu}/include/cuda_runtime.h": b"// rt",
                                             f"{cu}/bin/x86_64/cudart64_13.dll": b"MZ dll",
                                             f"{cu}/lib/x64/cudart.lib": b"lib"},
        ("nvidia_cuda_cccl", "13.0.85"): {f"{cu}/include/cccl/thrust/version.h": b"// thrust"},
        ("nvidia_cuda_crt", "13.0.88"): {f"{cu}/include/crt/host_config.h": b"// hc win"},
        ("nvidia_nvvm", "13.0.88"): {f"{cu}/include/nvvm.h": b"// nvvm", f"{cu}/nvvm/bin/cicc.exe": b"MZ",
                                     f"{cu}/bin/x86_64/nvvm64_40_0.dll": b"MZ nvvm"},
        ("nvidia_cuda_profiler_api", "13.0.85"): {f"{cu}/include/cuda_profiler_api.h": b"// prof win"},
        ("nvidia_nvtx", "13.0.85"): {f"{cu}/include/nvtx3/nvToolsExt.h": b"// nvtx win"},
    }
    for (dist, ver), files in linux.items():
        index.add_wheel(dist, ver, LINUX_TAG, files)
    if windows:
        for (dist, ver), files in win.items():
            index.add_wheel(dist, ver, WIN_TAG, files)
    # an older build of the same component must not be chosen over the pinned one
    index.add_wheel("nvidia_cuda_runtime", "13.0.48", LINUX_TAG, {f"{cu}/include/old.h": b""})


def transport() -> Transport:
    return Transport(retry=RetryPolicy(attempts=2), sleep=lambda _s: None)


def wheel_index(tmp_path: Path, **kw: Any) -> pypi.WheelIndex:
    return pypi.WheelIndex(transport(), Cache(tmp_path / "cache"), index_url=INDEX, **kw)


# ------------------------------------------------------------------------------------------------
# Versions, specifiers, markers


@pytest.mark.parametrize(("a", "b"), [
    pytest.param("13.4.1", "13.4.1.0", id="trailing-zero-equal"),
    pytest.param("13.0.88", "13.0.88.0.0", id="two-trailing-zeros"),
    pytest.param("1.0rc1", "1.0.rc.1", id="pre-spellings"),
])
def test_versions_equal(a: str, b: str) -> None:
    assert parse_version(a) == parse_version(b)


@pytest.mark.parametrize(("low", "high"), [
    pytest.param("13.4.0rc1", "13.4.0", id="rc-before-final"),
    pytest.param("13.4.46rc1", "13.4.59", id="rc-before-next"),
    pytest.param("13.9.0", "13.10.0", id="numeric-not-lexical"),
    pytest.param("1.0.dev1", "1.0a1", id="dev-before-alpha"),
    pytest.param("1.0", "1.0.post1", id="post-after"),
    pytest.param("13.3.3.3.1", "13.3.4.2.1", id="five-parts"),
])
def test_version_order(low: str, high: str) -> None:
    assert parse_version(low) < parse_version(high)  # type: ignore[operator]


def test_release_labels() -> None:
    assert release_label("13.4.1.0") == "13.4.1"
    assert release_label("13.4.2") == "13.4.2"
    assert release_label("13.4.0rc1") == "13.4.0rc1"
    assert parse_version("13.4.0rc1").is_prerelease  # type: ignore[union-attr]
    assert parse_version("not-a-version") is None


@pytest.mark.parametrize(("spec", "version", "ok"), [
    pytest.param("==13.0.88.*", "13.0.88", True, id="wildcard-exact"),
    pytest.param("==13.0.88.*", "13.0.88.1", True, id="wildcard-longer"),
    pytest.param("==13.0.88.*", "13.0.880", False, id="wildcard-not-prefix-string"),
    pytest.param("==13.0.88.*", "13.0.89", False, id="wildcard-other"),
    pytest.param(">=13.4.92,<14", "13.5.37", True, id="range-in"),
    pytest.param(">=13.4.92,<14", "14.0.0", False, id="range-upper"),
    pytest.param(">=13.4.92,<14", "13.4.59", False, id="range-lower"),
    pytest.param("~=13.4.2", "13.4.9", True, id="compatible"),
    pytest.param("~=13.4.2", "13.5.0", False, id="compatible-out"),
    pytest.param("!=13.0.1", "13.0.1.0", False, id="not-equal-zero-padded"),
    pytest.param("", "1.0", True, id="empty"),
])
def test_specifiers(spec: str, version: str, ok: bool) -> None:
    assert choose_version([spec], [version]) == (version if ok else None)


def test_bad_specifier_is_a_manifest_error() -> None:
    with pytest.raises(ManifestError):
        choose_version(["=>1.0"], ["1.0"])


def test_choose_version_pin_newest_range_oldest_no_pre() -> None:
    versions = ["13.0.48", "13.0.88", "13.0.88.1", "13.0.96", "13.1.0rc1"]
    assert choose_version(["==13.0.88.*"], versions) == "13.0.88.1"
    assert choose_version([">=13.0.88,<14"], versions) == "13.0.88"
    assert choose_version([">=13.0.96"], versions) == "13.0.96"
    assert choose_version([">=13.1.0rc1"], versions) == "13.1.0rc1"  # only a pre-release matches
    assert choose_version(["==12.*"], versions) is None


NVIDIA_13_4_MARKER = ("(sys_platform == 'linux' and platform_machine == 'aarch64' or "
                      "sys_platform == 'linux' and platform_machine == 'x86_64' or "
                      "sys_platform == 'win32' and platform_machine == 'ARM64' or "
                      "sys_platform == 'win32' and platform_machine == 'AMD64') and extra == 'nvcc'")


@pytest.mark.parametrize(("marker", "platform", "extra", "ok"), [
    pytest.param(NVIDIA_13_4_MARKER, "linux-x86_64", "nvcc", True, id="13.4-linux"),
    pytest.param(NVIDIA_13_4_MARKER, "windows-arm64", "nvcc", True, id="13.4-win-arm"),
    pytest.param(NVIDIA_13_4_MARKER, "windows-x86_64", "cudart", False, id="13.4-other-extra"),
    pytest.param(f"{ONLY_LINUX} and extra == 'culibos'", "windows-x86_64", "culibos", False,
                 id="linux-only-on-windows"),
    pytest.param(f"{ONLY_LINUX} and extra == 'culibos'", "linux-sbsa", "culibos", True, id="linux-only"),
    pytest.param("sys_platform == 'linux' and platform_machine == 'aarch64' and extra == 'cudla'",
                 "linux-x86_64", "cudla", False, id="aarch64-only"),
    pytest.param('extra == "Profiler_API"', "linux-x86_64", "profiler-api", True, id="extra-normalised"),
    pytest.param("'linux' in sys_platform", "linux-x86_64", "", True, id="in"),
    pytest.param("'win' not in sys_platform", "windows-x86_64", "", False, id="not-in"),
    pytest.param("python_version >= '3.8'", "linux-x86_64", "", True, id="python-version"),
])
def test_markers(marker: str, platform: str, extra: str, ok: bool) -> None:
    env = marker_env(wheel_data().platform(platform), extra)
    assert applies(Requirement(f"nvidia-x; {marker}"), env) is ok


@pytest.mark.parametrize("marker", [
    pytest.param("sys_platform ==", id="no-value"),
    pytest.param("(sys_platform == 'linux'", id="unbalanced"),
    pytest.param("nonsense == 'x'", id="unknown-variable"),
    pytest.param("sys_platform == 'linux' extra", id="trailing"),
    # PEP 508 compares strings that are no versions as Python does ('<' too); '~=' has no such fallback
    pytest.param("sys_platform ~= 'linux'", id="undefined-comparison"),
])
def test_bad_markers(marker: str) -> None:
    with pytest.raises(ManifestError):
        meta = parse_metadata(f"Name: x\nVersion: 1\nProvides-Extra: x\nRequires-Dist: nvidia-x; {marker}\n")
        meta.wanted("x", marker_env(wheel_data().platform("linux-x86_64")))


def test_requirements_and_extras_per_platform() -> None:
    meta = parse_metadata(toolkit_metadata("13.0.2", PINS_13_0))
    assert meta.name == "cuda-toolkit" and meta.version == "13.0.2"
    assert "culibos" in meta.extras and "all" in meta.extras
    linux = marker_env(wheel_data().platform("linux-x86_64"))
    win = marker_env(wheel_data().platform("windows-x86_64"))
    assert [r.name for r in meta.wanted("culibos", linux)] == ["nvidia-cuda-culibos"]
    assert meta.wanted("culibos", win) == []
    (nvcc,) = meta.wanted("nvcc", win)
    assert (nvcc.name, nvcc.specifier) == ("nvidia-cuda-nvcc", "==13.0.88.*")
    old = parse_metadata("Name: x\nVersion: 1\nProvides-Extra: X\n"
                         "Requires-Dist: Nvidia_CUDA_nvcc (>=13.0,<14) ; extra == 'x'\n")
    (old_style,) = old.wanted("x", linux)
    assert (old_style.name, old_style.specifier, str(old_style.marker)) == ("nvidia-cuda-nvcc", ">=13.0,<14",
                                                                            'extra == "x"')
    with pytest.raises(ManifestError):
        parse_metadata("Name: x\nVersion: 1\nRequires-Dist: nvidia-x @ https://example.invalid/x.whl\n")
    assert isinstance(meta, Metadata)


# ------------------------------------------------------------------------------------------------
# Index pages and platform tags


def test_simple_json_relative_urls_and_fields() -> None:
    page = json.dumps({"files": [
        {"filename": "a-1.0-py3-none-any.whl", "url": "../../packages/a-1.0-py3-none-any.whl#frag",
         "hashes": {"sha256": "AB" * 32}, "size": 12, "upload-time": "2025-01-02T03:04:05Z",
         "yanked": "broken"},
        {"filename": "b-1.0.tar.gz", "url": "https://cdn.test/b-1.0.tar.gz", "hashes": {}},
        "garbage",
    ]}).encode()
    a, b = parse_simple_json(page, "https://idx.test/simple/a/")
    assert a == IndexFile("a-1.0-py3-none-any.whl", "https://idx.test/packages/a-1.0-py3-none-any.whl",
                          "ab" * 32, 12, "2025-01-02T03:04:05Z", True)
    assert (b.sha256, b.size) == ("", None)
    with pytest.raises(ManifestError):
        parse_simple_json(b'{"nofiles": []}', "https://idx.test/simple/a/")


def test_simple_html_hashes_and_yanked() -> None:
    page = (b'<html><body><a href="../../f/x-1.0-py3-none-any.whl#sha256=' + b"cd" * 32
            + b'" data-requires-python="&gt;=3">x-1.0-py3-none-any.whl</a>'
            b'<a href="x-0.9-py3-none-any.whl#md5=00" data-yanked="">x-0.9-py3-none-any.whl</a>'
            b"</body></html>")
    new, old = parse_simple_html(page, "https://idx.test/simple/x/")
    assert (new.url, new.sha256, new.size, new.yanked) == (
        "https://idx.test/f/x-1.0-py3-none-any.whl", "cd" * 32, None, False)
    assert (old.sha256, old.yanked) == ("", True)


WHEELS = [
    "nvidia_x-1.0-py3-none-manylinux_2_28_x86_64.whl",
    "nvidia_x-1.0-py3-none-manylinux2014_x86_64.manylinux_2_17_x86_64.whl",
    "nvidia_x-1.0-py3-none-manylinux2014_aarch64.manylinux_2_17_aarch64.whl",
    "nvidia_x-1.0-py3-none-win_amd64.whl",
    "nvidia_x-1.0-py3-none-win_arm64.whl",
    "nvidia_x-1.0-py3-none-macosx_11_0_arm64.whl",
]


@pytest.mark.parametrize(("platform", "expected"), [
    pytest.param("linux-x86_64", WHEELS[1], id="linux-lowest-glibc"),
    pytest.param("linux-sbsa", WHEELS[2], id="sbsa-aarch64"),
    pytest.param("windows-x86_64", WHEELS[3], id="win-amd64"),
    pytest.param("windows-arm64", WHEELS[4], id="win-arm64"),
])
def test_platform_tag_choice(platform: str, expected: str) -> None:
    files = [IndexFile(w, f"{FILES}{w}", "0" * 64) for w in WHEELS]
    chosen = pick_wheel(files, wheel_data().platform(platform))
    assert chosen is not None and chosen.filename == expected


def test_no_wheel_for_platform_and_unknown_platform() -> None:
    files = [IndexFile(WHEELS[3], "u", "0" * 64)]
    assert pick_wheel(files, wheel_data().platform("linux-x86_64")) is None
    with pytest.raises(PlanError, match="no CUDA wheels for platform 'linux-ppc64le'"):
        wheel_data().platform("linux-ppc64le")


@pytest.mark.parametrize(("package", "release", "component"), [
    pytest.param("nvidia-cuda-runtime", "13.0.2", "cuda_cudart", id="runtime"),
    pytest.param("nvidia_cuda_runtime_cu12", "12.9.1", "cuda_cudart", id="cu12-suffix"),
    pytest.param("nvidia-cuda-cccl", "13.2.2", "cuda_cccl", id="cccl-old-name"),
    pytest.param("nvidia-cuda-cccl", "13.3.0", "cccl", id="cccl-renamed"),
    pytest.param("nvidia-nvvm", "13.0.2", "libnvvm", id="nvvm"),
    pytest.param("nvidia-cuda-newthing", "13.9.0", "cuda_newthing", id="guess-cuda"),
    pytest.param("nvidia-newlib-cu13", "13.9.0", "libnewlib", id="guess-lib"),
])
def test_component_names(package: str, release: str, component: str) -> None:
    assert component_for(package, release) == component


# ------------------------------------------------------------------------------------------------
# Member layout


@pytest.mark.parametrize(("component", "version", "platform", "member", "tree"), [
    pytest.param("cuda_cudart", "13.0.96", "linux-x86_64", "nvidia/cu13/lib/libcudart.so.13",
                 "lib/libcudart.so.13.0.96", id="so-real-name"),
    pytest.param("cuda_nvrtc", "13.0.88", "linux-x86_64", "nvidia/cu13/lib/libnvrtc-builtins.so.13.0",
                 "lib/libnvrtc-builtins.so.13.0.88", id="so-two-part-soname"),
    pytest.param("cuda_cudart", "13.0.96", "linux-x86_64", "nvidia/cu13/lib/libcudart_static.a",
                 "lib/libcudart_static.a", id="static-lib"),
    pytest.param("libnvvm", "13.0.88", "linux-x86_64", "nvidia/cu13/lib/libnvvm.so.4",
                 "nvvm/lib64/libnvvm.so.4.0.0", id="nvvm-lib-linux"),
    pytest.param("libnvvm", "13.0.88", "linux-sbsa", "nvidia/cu13/include/nvvm.h",
                 "nvvm/include/nvvm.h", id="nvvm-include"),
    pytest.param("libnvvm", "13.0.88", "linux-x86_64", "nvidia/cu13/nvvm/bin/cicc",
                 "nvvm/bin/cicc", id="nvvm-cicc-stays"),
    pytest.param("libnvvm", "13.0.88", "windows-x86_64", "nvidia/cu13/bin/x86_64/nvvm64_40_0.dll",
                 "nvvm/bin/x64/nvvm64_40_0.dll", id="nvvm-dll-windows"),
    pytest.param("libnvvm", "13.4.92", "windows-arm64", "nvidia/cu13/bin/arm64/nvvm64_40_0.dll",
                 "nvvm/bin/arm64/nvvm64_40_0.dll", id="nvvm-dll-arm64"),
    pytest.param("cuda_cudart", "13.0.96", "windows-x86_64", "nvidia/cu13/bin/x86_64/cudart64_13.dll",
                 "bin/x64/cudart64_13.dll", id="dll-x64"),
    pytest.param("cuda_cudart", "13.0.96", "windows-x86_64", "nvidia/cu13/lib/x64/cudart.lib",
                 "lib/x64/cudart.lib", id="import-lib"),
    pytest.param("cuda_cudart", "13.0.96", "windows-x86_64", "nvidia/cu13/lib/libcudart.so.13",
                 "lib/libcudart.so.13", id="no-so-rename-on-windows"),
    pytest.param("cuda_nvcc", "13.0.88", "windows-x86_64", "nvidia/cu13/bin/nvcc.exe", "bin/nvcc.exe",
                 id="exe"),
    pytest.param("cuda_cudart", "12.9.79", "linux-x86_64", "nvidia/cuda_runtime/lib/libcudart.so.12",
                 "lib/libcudart.so.12.9.79", id="cu12-package-dir"),
    pytest.param("cuda_cudart", "12.9.79", "windows-x86_64", "nvidia/cuda_runtime/bin/cudart64_12.dll",
                 "bin/cudart64_12.dll", id="cu12-dll-in-bin"),
    pytest.param("cccl", "13.3.4.3.1", "linux-x86_64", "nvidia/cu13/cccl/LICENSE",
                 "licenses/cccl/LICENSE", id="cccl-license"),
    pytest.param("cccl", "13.3.4.3.1", "linux-x86_64", "nvidia/cu13/cccl/lib/cmake/cub/cub-config.cmake",
                 "lib/cmake/cub/cub-config.cmake", id="cccl-cmake"),
    pytest.param("cccl", "13.3.4.3.1", "linux-x86_64", "nvidia/cu13/include/cccl/cuda/std/x",
                 "include/cccl/cuda/std/x", id="cccl-headers"),
    pytest.param("cuda_crt", "13.0.88", "linux-x86_64",
                 "nvidia_cuda_crt-13.0.88.dist-info/licenses/License.txt",
                 "licenses/cuda_crt/LICENSE.txt", id="dist-info-license"),
    pytest.param("cuda_crt", "12.9.86", "linux-x86_64",
                 "nvidia_cuda_crt_cu12-12.9.86.dist-info/License.txt",
                 "licenses/cuda_crt/LICENSE.txt", id="old-dist-info-license"),
    pytest.param("cuda_crt", "13.0.88", "linux-x86_64", "nvidia_cuda_crt-13.0.88.dist-info/licenses/NOTICE",
                 "licenses/cuda_crt/NOTICE", id="dist-info-other-license-file"),
    pytest.param("cuda_crt", "13.0.88", "linux-x86_64", "nvidia_cuda_crt-13.0.88.dist-info/METADATA",
                 None, id="dist-info-metadata"),
    pytest.param("cuda_crt", "13.0.88", "linux-x86_64", "nvidia_cuda_crt-13.0.88.dist-info/RECORD",
                 None, id="dist-info-record"),
    pytest.param("cuda_cccl", "13.0.85", "linux-x86_64", "nvidia/cu13/.metadata/provenance.txt", None,
                 id="scan-logs"),
    pytest.param("cuda_cccl", "12.9.27", "linux-x86_64", "nvidia/__init__.py", None, id="namespace-init"),
    pytest.param("cuda_cccl", "12.9.27", "linux-x86_64", "nvidia/cuda_cccl/lib/__init__.py", None,
                 id="package-init"),
    pytest.param("cuda_cccl", "12.9.27", "linux-x86_64", "other/top.txt", None, id="outside-nvidia"),
])
def test_member_mapping(component: str, version: str, platform: str, member: str, tree: str | None) -> None:
    assert member_mapper(component, version, platform)(member) == tree


def test_real_library_names() -> None:
    assert real_library_name("libcublas.so.13", "13.1.0.3") == "libcublas.so.13.1.0.3"
    assert real_library_name("libcufft.so.12", "12.0.0.61") == "libcufft.so.12.0.0.61"
    assert real_library_name("libfoo.so.7", "13.0.1") == "libfoo.so.7"  # versioned apart, not listed
    assert real_library_name("libnvvm.so.4", "13.0.88") == "libnvvm.so.4.0.0"  # pypi.toml real_names
    assert real_library_name("libcudart.so.13.0.96", "13.0.96") == "libcudart.so.13.0.96"


# ------------------------------------------------------------------------------------------------
# ELF SONAME


@pytest.mark.parametrize(("is64", "little"), [
    pytest.param(True, True, id="elf64-le"), pytest.param(False, True, id="elf32-le"),
    pytest.param(True, False, id="elf64-be"), pytest.param(False, False, id="elf32-be"),
])
def test_read_soname(is64: bool, little: bool) -> None:
    assert read_soname(io.BytesIO(fake_elf("libcudart.so.13", is64=is64, little=little))) == "libcudart.so.13"


@pytest.mark.parametrize("data", [
    pytest.param(b"", id="empty"),
    pytest.param(b"!<arch>\n" + b"\0" * 100, id="static-archive"),
    pytest.param(b"/* GNU ld script */ INPUT(libc.so.6)", id="linker-script"),
    pytest.param(fake_elf("libx.so.1")[:80], id="truncated"),
    pytest.param(fake_elf("lib/../x.so"), id="slash-in-soname"),
])
def test_read_soname_rejects(data: bytes) -> None:
    assert read_soname(io.BytesIO(data)) is None


@pytest.mark.parametrize(("filename", "soname", "links"), [
    pytest.param("libcudart.so.13.0.96", "libcudart.so.13",
                 [("libcudart.so.13", "libcudart.so.13.0.96"), ("libcudart.so", "libcudart.so.13")],
                 id="full-chain"),
    pytest.param("libnvvm.so", "libnvvm.so.4", [("libnvvm.so.4", "libnvvm.so")], id="cu12-nvvm"),
    pytest.param("libfoo.so.1", "libfoo.so.1", [("libfoo.so", "libfoo.so.1")], id="named-by-soname"),
    pytest.param("libbar.so", "libbar.so", [], id="unversioned"),
])
def test_soname_links(filename: str, soname: str, links: list[tuple[str, str]]) -> None:
    assert soname_links(filename, soname) == links


def test_chain_links_skip_taken_names_and_non_libraries() -> None:
    sonames = {"lib/libcudart.so.13.0.96": "libcudart.so.13", "lib/libnvvm.so.4.0.0": "libnvvm.so.4",
               "lib/libstatic.a": "never asked", "bin/libfake.so": None}
    taken = {"lib/libnvvm.so"}  # already in the tree: left alone
    made = []
    for link, target in chain_links(sorted(sonames), sonames.__getitem__, lambda rel: rel in taken):
        taken.add(link)
        made.append((link, target))
    assert made == [("lib/libcudart.so.13", "libcudart.so.13.0.96"), ("lib/libcudart.so", "libcudart.so.13"),
                    ("lib/libnvvm.so.4", "libnvvm.so.4.0.0")]


def test_metadata_summary_and_license() -> None:
    meta = parse_metadata("Metadata-Version: 2.4\nName: nvidia-cuda-nvcc\nVersion: 13.0.88\n"
                          "Summary: CUDA nvcc\nLicense-Expression: LicenseRef-NVIDIA-Proprietary\n"
                          "License: ignored when an expression is given\n")
    assert (meta.summary, meta.license) == ("CUDA nvcc", "LicenseRef-NVIDIA-Proprietary")
    meta = parse_metadata("Metadata-Version: 2.1\nName: x\nVersion: 1\nLicense: Other/Proprietary\n")
    assert (meta.summary, meta.license) == ("", "Other/Proprietary")


@pytest.mark.parametrize("extra", [
    pytest.param({}, id="no-metadata"),
    pytest.param({"a-1.dist-info/METADATA": b"Name: a\n", "b-1.dist-info/METADATA": b"Name: b\n"},
                 id="two-metadata"),
])
def test_repack_refuses_a_wheel_without_one_metadata(extra: dict[str, bytes], tmp_path: Path) -> None:
    """The metapackage's requirements and a mirrored archive's summary come from one METADATA reader."""
    from cudaredist.sources.pypi.repack import repack

    wheel = tmp_path / "a-1-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as zf:
        for name, data in {"nvidia/cu13/include/a.h": b"1", **extra}.items():
            zf.writestr(name, data)
    with pytest.raises(PlanError, match="does not hold one METADATA file"):
        repack(wheel, tmp_path / "out", component="cuda_crt", version="13.0.88", platform="linux-x86_64")
    assert not (tmp_path / "out").exists()


# ------------------------------------------------------------------------------------------------
# Resolution against a mocked index


def test_source_and_index_url_defaults(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    assert source.check_source(None) == "nvidia"
    monkeypatch.setenv("CUDAREDIST_SOURCE", "PyPI")
    assert source.check_source(None) == "pypi"
    assert source.check_source("nvidia") == "nvidia"
    with pytest.raises(UsageError, match="unknown source 'conda'"):
        source.check_source("conda")
    assert pypi.default_index_url() == "https://pypi.org/simple/"
    monkeypatch.setenv("PIP_INDEX_URL", "https://proxy.test/pypi/simple")
    assert pypi.default_index_url() == "https://proxy.test/pypi/simple/"
    assert pypi.default_index_url("https://other.test/simple/") == "https://other.test/simple/"
    assert pypi.default_index_url(str(tmp_path)) == tmp_path.as_uri() + "/"


def test_resolve_train_newest_final_release(fake_index: FakeIndex, tmp_path: Path) -> None:
    add_release_13_0(fake_index)
    idx = wheel_index(tmp_path)
    assert idx.resolve("13.0").label == "13.0.2"
    assert idx.resolve("13").label == "13.0.2"  # 13.1.0rc1 is a pre-release
    assert idx.resolve("13.1.0rc1").label == "13.1.0rc1"  # asked for by name
    assert idx.resolve("13.0.1").label == "13.0.1"
    with pytest.raises(ResolveError) as err:
        idx.resolve("13.5")
    assert err.value.available == ("12.9", "13.0")
    assert "published trains: 12.9, 13.0" in str(err.value)
    with pytest.raises(ResolveError, match="pre-release 13.2.0rc1"):
        idx.resolve("13.2.0rc1")


def test_plan_linux_nvcc(fake_index: FakeIndex, tmp_path: Path) -> None:
    add_release_13_0(fake_index)
    plan = planner.resolve_plan(wheel_index(tmp_path), "13.0", platform="linux-x86_64", profile="nvcc")
    assert (plan.release, plan.release_date, plan.source, plan.base_url) == (
        "13.0.2", "2025-12-19", "pypi", INDEX)
    by = {i.component: i for i in plan.items}
    assert list(by) == ["cuda_nvcc", "cuda_cudart", "cuda_cccl", "cuda_crt", "libnvvm",
        "cuda_profiler_api", "cuda_nvtx"]
    rt = by["cuda_cudart"]
    assert rt.version == "13.0.96"  # the pin, not the older 13.0.48 build
    assert rt.layout == "wheel"
    assert rt.archive.relative_path == f"nvidia_cuda_runtime-13.0.96-{LINUX_TAG}.whl"
    assert rt.url == f"{FILES}{rt.archive.relative_path}"
    assert rt.archive.sha256 == hashlib.sha256(fake_index.blobs[rt.archive.filename]).hexdigest()
    assert rt.archive.size == len(fake_index.blobs[rt.archive.filename])
    assert any("libcuda.so" in n for n in plan.notes)
    assert any("pkg-config" in n for n in plan.notes)


def test_plan_windows_notes_and_extras_by_marker(fake_index: FakeIndex, tmp_path: Path) -> None:
    add_release_13_0(fake_index)
    idx = wheel_index(tmp_path)
    plan = planner.resolve_plan(idx, "13.0", platform="windows-x86_64", profile="nvcc")
    assert all(i.archive.filename.endswith("win_amd64.whl") for i in plan.items)
    # the Linux gaps are not Windows', and nvvm.lib is no gap: the tree builds it from the DLL
    assert not any("libcuda.so" in n or "nvvm.lib" in n for n in plan.notes), plan.notes
    # no MSBuild files in NVIDIA's wheels: said once, with what it means for CMake and what to do
    msbuild = [n for n in plan.notes if "visual_studio_integration" in n]
    assert len(msbuild) == 1 and "-T cuda=<tree>" in msbuild[0] and "--source nvidia" in msbuild[0]
    assert not any("visual_studio_integration" in n for n in
                   planner.resolve_plan(idx, "13.0", platform="linux-x86_64", profile="nvcc").notes)
    # culibos is marked linux-only in the metadata
    linux = planner.resolve_plan(idx, "13.0", platform="linux-x86_64", profile=None, components=["culibos"])
    assert [i.component for i in linux.items] == ["cuda_culibos"]
    with pytest.raises(PlanError, match="extra culibos of cuda-toolkit 13.0.2 names no wheel for "
                                        "windows-x86_64"):
        planner.resolve_plan(idx, "13.0", platform="windows-x86_64", profile=None, components=["culibos"])


def test_components_by_extra_component_or_package(fake_index: FakeIndex, tmp_path: Path) -> None:
    add_release_13_0(fake_index)
    idx = wheel_index(tmp_path)
    for name in ("cudart", "cuda_cudart", "nvidia-cuda-runtime", "nosuch|cudart"):
        plan = planner.resolve_plan(idx, "13.0", platform="linux-x86_64", profile=None, components=[name])
        assert [i.component for i in plan.items] == ["cuda_cudart"], name
    with pytest.raises(PlanError, match="has no extra, component or wheel libcublas") as err:
        planner.resolve_plan(idx, "13.0", platform="linux-x86_64", profile=None, components=["libcublas"])
    assert err.value.component == "libcublas"
    with pytest.raises(PlanError, match="nothing to install"):
        planner.resolve_plan(idx, "13.0", platform="linux-x86_64", profile=None)


def test_a_component_by_name_asks_only_its_own_markers(fake_index: FakeIndex, tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """Which extras add a wheel asked by component or package name: the markers of its requirements
    alone are evaluated, not every requirement under every extra (the slow part of a resolve)."""
    from cudaredist.sources.pypi import wheels

    add_release_13_0(fake_index)
    idx = wheel_index(tmp_path)
    asked: list[str] = []
    real = wheels.applies

    def applies(req: Requirement, env: Any) -> bool:
        asked.append(req.name)
        return real(req, env)

    monkeypatch.setattr(wheels, "applies", applies)
    for name in ("cuda_cudart", "nvidia-cuda-runtime"):
        asked.clear()
        plan = planner.resolve_plan(idx, "13.0", platform="linux-x86_64", profile=None, components=[name])
        assert [i.component for i in plan.items] == ["cuda_cudart"]
        assert asked and set(asked) == {"nvidia-cuda-runtime"}, set(asked)


def test_missing_wheel_for_platform(fake_index: FakeIndex, tmp_path: Path) -> None:
    add_release_13_0(fake_index, windows=False)
    with pytest.raises(PlanError) as err:
        planner.resolve_plan(wheel_index(tmp_path), "13.0", platform="windows-x86_64", profile="runtime")
    msg = str(err.value)
    assert "nvidia-cuda-runtime 13.0.96 has no wheel for windows-x86_64" in msg
    assert "its wheels are for: linux-x86_64" in msg
    assert err.value.platform == "windows-x86_64"


def test_no_wheel_matches_the_pin(fake_index: FakeIndex, tmp_path: Path) -> None:
    add_release_13_0(fake_index)
    fake_index.projects["nvidia-cuda-crt"] = []
    with pytest.raises(PlanError, match=r"no wheel of nvidia-cuda-crt .* matches ==13\.0\.88\.\*"):
        planner.resolve_plan(wheel_index(tmp_path), "13.0", platform="linux-x86_64")


def test_profile_before_its_first_release(fake_index: FakeIndex, tmp_path: Path) -> None:
    fake_index.add("cuda_toolkit-12.9.1-py2.py3-none-any.whl", make_wheel(
        "cuda_toolkit", "12.9.1", {}, metadata=toolkit_metadata("12.9.1", {
            "cudart": ("nvidia-cuda-runtime-cu12", "==12.9.79.*", LINUX),
            "nvcc": ("nvidia-cuda-nvcc-cu12", "==12.9.86.*", LINUX)})))
    fake_index.add_wheel("nvidia_cuda_runtime_cu12", "12.9.79", LINUX_TAG,
                         {"nvidia/__init__.py": b"", "nvidia/cuda_runtime/lib/libcudart.so.12": b"x"})
    idx = wheel_index(tmp_path)
    with pytest.raises(PlanError, match="no nvcc driver"):
        planner.resolve_plan(idx, "12.9", platform="linux-x86_64", profile="nvcc")
    plan = planner.resolve_plan(idx, "12.9", platform="linux-x86_64", profile="runtime")
    assert [(i.component, i.version) for i in plan.items] == [("cuda_cudart", "12.9.79")]


def test_index_without_digest_is_refused(fake_index: FakeIndex, tmp_path: Path) -> None:
    add_release_13_0(fake_index)
    fake_index.projects["nvidia-cuda-crt"][0]["hashes"] = {}
    with pytest.raises(IntegrityError, match="lists no sha256 for nvidia_cuda_crt"):
        planner.resolve_plan(wheel_index(tmp_path), "13.0", platform="linux-x86_64")


def test_metapackage_digest_is_verified(fake_index: FakeIndex, tmp_path: Path) -> None:
    add_release_13_0(fake_index)
    f = fake_index.projects["cuda-toolkit"][1]
    fake_index.blobs[f["filename"]] = b"X" * f["size"]  # same size, other bytes
    with pytest.raises(IntegrityError, match="sha256 mismatch"):
        planner.resolve_plan(wheel_index(tmp_path), "13.0", platform="linux-x86_64")


def test_unknown_project_is_a_fetch_error(fake_index: FakeIndex, tmp_path: Path) -> None:
    with pytest.raises(FetchError, match="has no project cuda-toolkit") as err:
        wheel_index(tmp_path).resolve("13.0")
    assert err.value.status == 404


def test_project_page_retries_and_limits_like_every_fetch(tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """The page goes through the transport: 429/503 retried after Retry-After (seconds or a date),
    PEP 691's Accept sent, a page over the limit refused."""
    idx = FakeIndex()
    add_release_13_0(idx)
    answers = [httpx.Response(429, headers={"retry-after": "7"}),
               httpx.Response(503, headers={"retry-after": "Thu, 01 Jan 1970 00:00:00 GMT"})]
    slept: list[float] = []

    def page(request: httpx.Request, name: str) -> httpx.Response:
        return answers.pop(0) if answers else idx.page(request, name)

    with respx.mock(assert_all_called=False) as router:
        router.get(url__regex=r"^https://pypi\.test/simple/(?P<name>[^/]+)/$").mock(side_effect=page)
        index = pypi.WheelIndex(Transport(retry=RetryPolicy(attempts=3), sleep=slept.append),
                                Cache(tmp_path / "cache"), index_url=INDEX)
        assert index.resolve("13.0").label == "13.0.2"
        assert slept == [7.0, 0.0]  # the server's delays, not a default backoff
        monkeypatch.setattr(pypi, "PAGE_LIMIT", 100)
        with pytest.raises(FetchError, match="larger than 100 bytes"):
            wheel_index(tmp_path).files("cuda-toolkit")


def test_html_index_sizes_by_head(tmp_path: Path) -> None:
    idx = FakeIndex(html=True)
    add_release_13_0(idx)
    with respx.mock(assert_all_called=False) as router:
        idx.mount(router)
        plan = planner.resolve_plan(wheel_index(tmp_path), "13.0", platform="linux-x86_64")
    rt = next(i for i in plan.items if i.component == "cuda_cudart")
    assert rt.archive.size == len(idx.blobs[rt.archive.filename])
    assert rt.url == f"https://pypi.test/packages/{rt.archive.filename}"


def test_size_by_head_is_retried_and_needs_a_length(tmp_path: Path) -> None:
    url = f"{FILES}x-1.0-py3-none-any.whl"
    f = IndexFile("x-1.0-py3-none-any.whl", url, "0" * 64)
    with respx.mock() as router:
        router.head(url).mock(side_effect=[httpx.Response(503),
                                           httpx.Response(200, headers={"content-length": "12"})])
        assert wheel_index(tmp_path).size(f) == 12
    with respx.mock() as router:
        router.head(url).mock(return_value=httpx.Response(200))
        with pytest.raises(FetchError, match="no Content-Length"):
            wheel_index(tmp_path).size(f)


def test_offline_resolution_from_the_cache(fake_index: FakeIndex, tmp_path: Path) -> None:
    add_release_13_0(fake_index)
    online = planner.resolve_plan(wheel_index(tmp_path), "13.0", platform="linux-x86_64")
    seen = len(fake_index.requests)
    offline = planner.resolve_plan(wheel_index(tmp_path, offline=True), "13.0", platform="linux-x86_64")
    assert offline == online
    assert len(fake_index.requests) == seen  # no network at all
    with pytest.raises(OfflineError, match="nvidia-cuda-cupti"):
        wheel_index(tmp_path, offline=True).files("nvidia-cuda-cupti")


# ------------------------------------------------------------------------------------------------
# Installing wheels through the ordinary installer


@pytest.mark.parametrize("cache_unpacked", [True, False], ids=["via-entry", "direct"])
def test_install_linux_tree_from_wheels(fake_index: FakeIndex, tmp_path: Path, cache_unpacked: bool) -> None:
    """The wheels' .so chains come from each library's SONAME, whether the wheel is unpacked into the
    cache first or straight into the tree (--no-cache-unpacked), beside the other wheels' files."""
    add_release_13_0(fake_index)
    idx = wheel_index(tmp_path)
    plan = planner.resolve_plan(idx, "13.0", platform="linux-x86_64")
    prefix = tmp_path / "cuda 13.0"
    result = Installer(idx.transport, Cache(tmp_path / "cache"), cache_unpacked=cache_unpacked).install(
        plan, prefix)
    assert result.downloaded == len(plan.items)
    assert bool(list((tmp_path / "cache" / "unpacked").glob("[0-9a-f]*"))) == cache_unpacked
    assert_link(prefix / "lib" / "libcudart.so", "libcudart.so.13")
    assert_link(prefix / "lib" / "libcudart.so.13", "libcudart.so.13.0.96")
    assert (prefix / "lib" / "libcudart.so.13.0.96").read_bytes()[:4] == b"\x7fELF"
    assert_link(prefix / "nvvm" / "lib64" / "libnvvm.so.4", "libnvvm.so.4.0.0")
    assert_link(prefix / "nvvm" / "lib64" / "libnvvm.so", "libnvvm.so.4")
    assert_link(prefix / "lib64", "lib")
    assert (prefix / "nvvm" / "include" / "nvvm.h").is_file()
    assert (prefix / "nvvm" / "bin" / "cicc").is_file()
    assert (prefix / "include" / "crt" / "host_config.h").read_bytes() == b"// hc"
    assert (prefix / "include" / "cccl" / "thrust" / "version.h").is_file()
    assert os.access(prefix / "bin" / "nvcc", os.X_OK)
    assert (prefix / "licenses" / "cuda_nvcc" / "LICENSE.txt").read_bytes() == b"NVIDIA EULA\n"
    assert not (prefix / ".metadata").exists() and not list(prefix.rglob("*.dist-info"))
    assert not list(prefix.rglob("__init__.py"))
    report = verify(prefix)
    assert report.ok, report.to_json()
    # a second install of the same plan is a no-op; the wheels stay in the cache
    again = Installer(idx.transport, Cache(tmp_path / "cache")).install(plan, prefix)
    assert again.noop


def test_record_digests_are_the_wheels_own_hashes() -> None:
    """RECORD's sha256 of each member, in hex; a row without one, with another algorithm or with a
    broken one is left to hashing, and a zip without one RECORD gives nothing."""
    data = {"nvidia/cu13/a,b.h": b"quoted, comma", "nvidia/cu13/lib/x.so": b"\x7fELF"}
    rows = [record_line(n, d).replace(n, f'"{n}"') for n, d in data.items()]
    rows += ["nvidia/cu13/c.h,sha512=AAAA,4", "nvidia/cu13/d.h,sha256=!!not base64!!,4",
             "nvidia/cu13/e.h,sha256=AAAA,4", "x-1.dist-info/RECORD,,"]
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        zf.writestr("x-1.dist-info/RECORD", "\n".join(rows))
    with zipfile.ZipFile(buf) as zf:
        assert record_digests(zf) == {n: hashlib.sha256(d).hexdigest() for n, d in data.items()}
    for names in ([], ["x-1.dist-info/RECORD", "y-1.dist-info/RECORD"]):
        buf = io.BytesIO()
        with zipfile.ZipFile(buf, "w") as zf:
            for n in names:
                zf.writestr(n, rows[0])
        with zipfile.ZipFile(buf) as zf:
            assert record_digests(zf) == {}


@pytest.mark.parametrize("cache_unpacked", [True, False], ids=["via-entry", "direct"])
def test_wheel_members_are_not_hashed_again(fake_index: FakeIndex, tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch, cache_unpacked: bool) -> None:
    """A verified wheel's files go into the tree with the sha256 its RECORD gives: the tree hashes only
    a member the RECORD leaves out, and the record holds the right hash of every file either way."""
    add_release_13_0(fake_index)
    cu = "nvidia/cu13"
    fake_index.projects.pop("nvidia-cuda-crt")
    fake_index.add("nvidia_cuda_crt-13.0.88-" + LINUX_TAG + ".whl", make_wheel(
        "nvidia_cuda_crt", "13.0.88", {f"{cu}/include/crt/host_config.h": b"// hc",
                                       f"{cu}/include/crt/unrecorded.h": b"// left out of RECORD"},
        unrecorded=(f"{cu}/include/crt/unrecorded.h",)))
    fed: list[bytes] = []

    class Counted:
        def __init__(self) -> None:
            self.h, self.data = hashlib.sha256(), b""

        def update(self, chunk: bytes) -> None:
            self.data += chunk
            self.h.update(chunk)

        def hexdigest(self) -> str:
            fed.append(self.data)
            return self.h.hexdigest()

    monkeypatch.setattr(staging, "hashlib", type("hashlib", (), {"sha256": Counted}))
    idx = wheel_index(tmp_path)
    plan = planner.resolve_plan(idx, "13.0", platform="linux-x86_64")
    prefix = tmp_path / "cuda"
    Installer(idx.transport, Cache(tmp_path / "cache"), cache_unpacked=cache_unpacked).install(plan, prefix)
    assert b"// left out of RECORD" in fed
    from_wheels = [p.read_bytes() for p in prefix.rglob("*") if p.is_file() and not p.is_symlink()
                   and p.name not in ("unrecorded.h", "version.json", ".cudaredist.json")]
    assert len(from_wheels) > 10
    assert not [d for d in from_wheels if d in fed]
    report = verify(prefix)  # every file's recorded sha256 is its own
    assert report.ok, report.to_json()


def test_install_windows_tree_from_wheels(fake_index: FakeIndex, tmp_path: Path) -> None:
    add_release_13_0(fake_index)
    idx = wheel_index(tmp_path)
    plan = planner.resolve_plan(idx, "13.0", platform="windows-x86_64")
    prefix = tmp_path / "win"
    Installer(idx.transport, Cache(tmp_path / "cache")).install(plan, prefix)
    for rel in ("bin/nvcc.exe", "bin/x64/cudart64_13.dll", "lib/x64/cudart.lib", "include/cuda_runtime.h",
                "include/crt/host_config.h", "nvvm/bin/cicc.exe", "nvvm/bin/x64/nvvm64_40_0.dll"):
        assert (prefix / rel).is_file(), rel
    assert not (prefix / "bin" / "x86_64").exists()
    assert not (prefix / "lib64").exists()
    assert verify(prefix).ok


def test_wheel_with_wrong_bytes_leaves_prefix_untouched(fake_index: FakeIndex, tmp_path: Path) -> None:
    add_release_13_0(fake_index)
    idx = wheel_index(tmp_path)
    plan = planner.resolve_plan(idx, "13.0", platform="linux-x86_64")
    rt = next(i for i in plan.items if i.component == "cuda_cudart")
    good = fake_index.blobs[rt.archive.filename]
    fake_index.blobs[rt.archive.filename] = bytes(reversed(good))  # right size, wrong sha256
    prefix = tmp_path / "cuda"
    prefix.mkdir()
    (prefix / "keep.txt").write_text("mine")
    with pytest.raises(IntegrityError) as err:
        Installer(idx.transport, Cache(tmp_path / "cache")).install(plan, prefix, replace_foreign=True)
    assert err.value.expected == rt.archive.sha256
    assert sorted(p.name for p in prefix.iterdir()) == ["keep.txt"]
    assert Cache(tmp_path / "cache").lookup(rt.archive.sha256, rt.archive.size) is None


# ------------------------------------------------------------------------------------------------
# The command line


def test_cli_resolve_and_install_with_source_pypi(fake_index: FakeIndex, tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    add_release_13_0(fake_index)
    runner = CliRunner()
    r = runner.invoke(app, ["resolve", "13.0", "--source", "pypi", "--index-url", INDEX, "--platform",
                            "linux-x86_64", "--json"])
    assert r.exit_code == 0, r.output
    obj = json.loads(r.stdout)
    assert obj["source"] == "pypi" and obj["release"] == "13.0.2"
    assert {c["layout"] for c in obj["components"]} == {"wheel"}
    assert any("libcuda.so" in n for n in obj["notes"])

    monkeypatch.setenv("CUDAREDIST_SOURCE", "pypi")
    monkeypatch.setenv("PIP_INDEX_URL", INDEX)
    r = runner.invoke(app, ["resolve", "13.0", "--platform", "windows-x86_64"])
    assert r.exit_code == 0, r.output
    assert "from https://pypi.test/simple/" in r.stdout and "windows-x86_64" in r.stdout

    prefix = tmp_path / "p"
    r = runner.invoke(app, ["install", "13.0", "--prefix", str(prefix), "--platform", "linux-x86_64"])
    assert r.exit_code == 0, r.output
    assert "note: the cudart wheel has no lib/stubs/libcuda.so" in r.stderr
    rec = json.loads((prefix / ".cudaredist" / "record.json").read_text())
    assert rec["plan"]["source"] == "pypi"
    # satisfied without the network: the record says pypi and the request says pypi
    before = len(fake_index.requests)
    r = runner.invoke(app, ["install", "13.0", "--prefix", str(prefix), "--platform", "linux-x86_64"])
    assert r.exit_code == 0 and "already installed" in r.stderr
    assert len(fake_index.requests) == before

    r = runner.invoke(app, ["trains", "--json"])
    assert r.exit_code == 0, r.output
    rows = json.loads(r.stdout)["trains"]
    assert [(t["train"], t["release"]) for t in rows] == [("12.9", "12.9.1"), ("13.0", "13.0.2")]

    r = runner.invoke(app, ["resolve", "13.7", "--platform", "linux-x86_64"])
    assert r.exit_code == 1
    assert re.search(r"error: CUDA train 13\.7 has no release at https://pypi\.test/simple/ "
                     r"\(cuda-toolkit\); published trains: 12\.9, 13\.0", r.stderr)
    r = runner.invoke(app, ["resolve", "13.0", "--source", "conda"])
    assert r.exit_code == 2 and "unknown source 'conda'" in r.stderr


def test_local_directory_index(tmp_path: Path) -> None:
    """A PEP 503 tree on disk (<dir>/<project>/index.html, files beside) works as --index-url."""
    idx = FakeIndex()
    add_release_13_0(idx)
    root = tmp_path / "simple"
    for name, files in idx.projects.items():
        (root / name).mkdir(parents=True)
        links = "".join(f'<a href="../../files/{f["filename"]}#sha256={f["hashes"]["sha256"]}">'
                        f'{f["filename"]}</a>\n' for f in files)
        (root / name / "index.html").write_text(f"<html><body>{links}</body></html>")
    (tmp_path / "files").mkdir()
    for fn, data in idx.blobs.items():
        (tmp_path / "files" / fn).write_bytes(data)
    wi = pypi.WheelIndex(transport(), Cache(tmp_path / "cache"), index_url=str(root))
    plan = planner.resolve_plan(wi, "13.0", platform="linux-x86_64")
    assert plan.base_url == root.as_uri() + "/"
    assert all(i.url.startswith((tmp_path / "files").as_uri()) for i in plan.items)
    prefix = tmp_path / "cuda"
    Installer(wi.transport, Cache(tmp_path / "cache")).install(plan, prefix)
    assert_link(prefix / "lib" / "libcudart.so", "libcudart.so.13")
