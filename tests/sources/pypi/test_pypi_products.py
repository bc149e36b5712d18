"""`--source pypi --with`: NVIDIA's product wheels for the toolkit's CUDA major, in the same tree."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner, Result

from cudaredist.cli import app
from cudaredist.prefixes import verify
from cudaredist.record import read_record
from cudaredist.tree.implib import import_library, read_exports
from tests.hosts import assert_link
from tests.pe import make_dll
from tests.sources.pypi.test_pypi_source import (
    INDEX,
    LINUX,
    LINUX_TAG,
    PINS_13_0,
    WIN_TAG,
    FakeIndex,
    fake_elf,
    make_wheel,
    toolkit_metadata,
)
from tests.sources.pypi.test_pypi_source import add_release_13_0 as add_toolkit_13_0

CU = "nvidia/cu13"


def add_release_13_0(index: FakeIndex) -> None:
    """cuda-toolkit 13.0.2's compile set, and a 13.0.3 that also has cuBLAS and NVRTC (what cuDNN,
    cuTENSOR and cuDSS need: profiles.toml `needs`)."""
    add_toolkit_13_0(index)
    pins = {**PINS_13_0, "cublas": ("nvidia-cublas", "==13.1.0.3.*", LINUX),
            "nvrtc": ("nvidia-cuda-nvrtc", "==13.0.88.*", LINUX)}
    index.add("cuda_toolkit-13.0.3-py2.py3-none-any.whl",
              make_wheel("cuda_toolkit", "13.0.3", {}, metadata=toolkit_metadata("13.0.3", pins)),
              uploaded="2026-04-14T00:00:00Z")
    index.add_wheel("nvidia_cublas", "13.1.0.3", LINUX_TAG,
                    {f"{CU}/lib/libcublas.so.13": fake_elf("libcublas.so.13")})
    index.add_wheel("nvidia_cublas", "13.1.0.3", WIN_TAG, {f"{CU}/bin/x86_64/cublas64_13.dll": b"MZ"})
    index.add_wheel("nvidia_cuda_nvrtc", "13.0.88", LINUX_TAG,
                    {f"{CU}/lib/libnvrtc.so.13": fake_elf("libnvrtc.so.13")})
    index.add_wheel("nvidia_cuda_nvrtc", "13.0.88", WIN_TAG, {f"{CU}/bin/x86_64/nvrtc64_130_0.dll": b"MZ"})


def add_cudss(index: FakeIndex) -> None:
    """cuDSS wheels shaped like NVIDIA's nvidia-cudss-cu13 (and an older one, and a CUDA 12 one)."""
    for version, uploaded in (("0.7.1.4", "2025-09-01T00:00:00Z"), ("1.0.0.35", "2026-10-22T00:00:00Z")):
        index.add_wheel("nvidia_cudss_cu13", version, LINUX_TAG, {
            f"{CU}/include/cudss.h": f"// cudss {version}".encode(),
            f"{CU}/lib/libcudss.so.1": fake_elf("libcudss.so.1")}, uploaded=uploaded)
    index.add_wheel("nvidia_cudss_cu13", "1.0.0.35", WIN_TAG, {
        f"{CU}/include/cudss.h": b"// cudss win", f"{CU}/bin/cudss64_1.dll": b"MZ cudss",
        f"{CU}/lib/cudss.lib": b"lib"})
    index.add_wheel("nvidia_cudss_cu12", "1.0.0.35", LINUX_TAG, {"nvidia/cu12/include/cudss.h": b"// 12"})


def _run(*args: str) -> Result:
    return CliRunner().invoke(app, [*args, "--source", "pypi", "--index-url", INDEX])


def test_install_with_cudss_from_wheels(fake_index: FakeIndex, tmp_path: Path) -> None:
    add_release_13_0(fake_index)
    add_cudss(fake_index)
    plan = json.loads(_run("resolve", "13.0", "--with", "cudss", "--platform", "linux-x86_64",
                           "--json").stdout)
    [product] = plan["products"]
    assert (product["name"], product["release"], product["cuda_variant"]) == ("cudss", "1.0.0", "cuda13")
    [item] = [c for c in plan["components"] if c.get("product")]
    assert item["name"] == "libcudss" and item["relative_path"].startswith("nvidia_cudss_cu13-1.0.0.35-")

    prefix = tmp_path / "cuda"
    common = ("--prefix", str(prefix), "--platform", "linux-x86_64", "--cache-dir", str(tmp_path / "cache"))
    r = _run("install", "13.0", "--with", "cudss", *common)
    assert r.exit_code == 0, r.output
    assert (prefix / "include" / "cudss.h").read_bytes() == b"// cudss 1.0.0.35"
    assert (prefix / "include" / "cuda_runtime.h").is_file()
    assert_link(prefix / "lib" / "libcudss.so", "libcudss.so.1")
    assert_link(prefix / "lib" / "libcudss.so.1", "libcudss.so.1.0.0.35")
    assert (prefix / "lib64" / "libcudss.so").exists()
    assert (prefix / "licenses" / "libcudss" / "LICENSE.txt").is_file()
    assert (prefix / "lib" / "libcublas.so.13").exists() and (prefix / "lib" / "libnvrtc.so.13").exists()
    assert verify(prefix).ok
    r = _run("install", "13.0", "--with", "cudss", *common)
    assert r.exit_code == 0 and "already installed" in r.stderr

    r = _run("install", "13.0", "--with", "cudss=0.7", *common)
    assert r.exit_code == 0, r.output
    assert (prefix / "include" / "cudss.h").read_bytes() == b"// cudss 0.7.1.4"


def test_windows_tree_with_cudss(fake_index: FakeIndex, tmp_path: Path) -> None:
    add_release_13_0(fake_index)
    add_cudss(fake_index)
    prefix = tmp_path / "win"
    r = _run("install", "13.0", "--with", "cudss", "--prefix", str(prefix), "--platform", "windows-x86_64",
             "--cache-dir", str(tmp_path / "cache"))
    assert r.exit_code == 0, r.output
    assert (prefix / "lib" / "x64" / "cudss.lib").is_file()   # beside cudart.lib
    assert (prefix / "lib" / "x64" / "cudart.lib").is_file()
    assert (prefix / "bin" / "cudss64_1.dll").is_file()       # bin/ is on PATH like bin/x64/


@pytest.mark.parametrize(("args", "expected"), [
    pytest.param(["--with", "cudss=2.1"], "cuDSS 2.1 has no wheel nvidia-cudss-cu13 on "
                 "https://pypi.test/simple/ for CUDA 13; its releases there: 1.0.0.35, 0.7.1.4",
                 id="no-such-version"),
    pytest.param(["--with", "cudnn"], "cuDNN for CUDA 13 is not on https://pypi.test/simple/: the index has "
                 "no project nvidia-cudnn-cu13", id="no-such-project"),
    pytest.param(["--with", "cudss=0.7", "--platform", "windows-x86_64"],
                 "cuDSS 0.7 has no wheel nvidia-cudss-cu13 for windows-x86_64", id="no-wheel-for-platform"),
])
def test_errors(fake_index: FakeIndex, tmp_path: Path, args: list[str], expected: str) -> None:
    add_release_13_0(fake_index)
    add_cudss(fake_index)
    r = _run("install", "13.0", *args, "--prefix", str(tmp_path / "p"), "--cache-dir", str(tmp_path / "c"))
    assert r.exit_code == 1 and "Traceback" not in r.output
    assert r.stderr.startswith("error: ") and r.stderr.count("\n") == 1
    assert expected in r.stderr
    assert not (tmp_path / "p").exists()


def test_mirror_builds_nvidia_shaped_product_archives(fake_index: FakeIndex, tmp_path: Path) -> None:
    """`mirror --source pypi --with cudss`: the product in <out>/cudss/redist/, named and listed as
    NVIDIA lays a product out; installing from it gives the tree the wheels give."""
    from tests.realmirror import tree_of

    add_release_13_0(fake_index)
    add_cudss(fake_index)
    out = tmp_path / "mirror"
    common = ("--cache-dir", str(tmp_path / "cache"))
    r = _run("mirror", "13.0", "--with", "cudss", "--platform", "linux-x86_64", "--platform",
             "windows-x86_64", "--out", str(out), "--xz-preset", "0", *common)
    assert r.exit_code == 0, r.output
    assert "with cuDSS 1.0.0" in r.stderr
    manifest = json.loads((out / "cudss" / "redist" / "redistrib_1.0.0.json").read_text())
    assert manifest["release_product"] == "cudss" and manifest["release_label"] == "1.0.0"
    comp = manifest["libcudss"]
    assert comp["cuda_variant"] == ["13"] and comp["version"] == "1.0.0.35"
    assert comp["linux-x86_64"]["cuda13"]["relative_path"] == (
        "libcudss/linux-x86_64/libcudss-linux-x86_64-1.0.0.35_cuda13-archive.tar.xz")
    assert comp["windows-x86_64"]["cuda13"]["relative_path"].endswith("_cuda13-archive.zip")
    assert not any(k.startswith("lib") and k != "libcudss" for k in manifest)  # the toolkit's stay out
    toolkit = json.loads((out / "redistrib_13.0.3.json").read_text())
    assert "libcudss" not in toolkit and "libcublas" in toolkit and "cuda_nvrtc" in toolkit  # what it needs

    for platform in ("linux-x86_64", "windows-x86_64"):
        redist, wheels = tmp_path / f"redist-{platform}", tmp_path / f"wheels-{platform}"
        r = CliRunner().invoke(app, ["install", "13.0", "--with", "cudss", "--base-url", str(out), "--prefix",
                                     str(redist), "--platform", platform, *common])
        assert r.exit_code == 0, r.output
        r = _run("install", "13.0", "--with", "cudss", "--prefix", str(wheels), "--platform", platform,
                 *common)
        assert r.exit_code == 0, r.output
        assert tree_of(redist) == tree_of(wheels)
        assert (redist / "include" / "cudss.h").is_file()


def test_cutensor_wheels_keep_their_files_under_cutensor(fake_index: FakeIndex, tmp_path: Path) -> None:
    """cutensor-cu13 has no nvidia/ directory: cutensor/{include,lib,bin,LICENSE} map into the tree."""
    add_release_13_0(fake_index)
    fake_index.add_wheel("cutensor_cu13", "2.8.1", LINUX_TAG, {
        "cutensor/include/cutensor.h": b"// cutensor", "cutensor/include/cutensor/types.h": b"// types",
        "cutensor/lib/libcutensor.so.2": fake_elf("libcutensor.so.2"), "cutensor/LICENSE": b"cutensor eula"})
    fake_index.add_wheel("cutensor_cu13", "2.8.1", WIN_TAG, {
        "cutensor/include/cutensor.h": b"// cutensor", "cutensor/bin/cutensor.dll": b"MZ",
        "cutensor/lib/cutensor.lib": b"lib", "cutensor/LICENSE": b"cutensor eula"})
    linux = tmp_path / "linux"
    r = _run("install", "13.0", "--with", "cutensor", "--prefix", str(linux), "--platform", "linux-x86_64",
             "--cache-dir", str(tmp_path / "cache"))
    assert r.exit_code == 0, r.output
    assert (linux / "include" / "cutensor" / "types.h").is_file()
    assert_link(linux / "lib" / "libcutensor.so", "libcutensor.so.2")
    assert_link(linux / "lib" / "libcutensor.so.2", "libcutensor.so.2.8.1")
    assert (linux / "licenses" / "libcutensor" / "LICENSE").read_bytes() == b"cutensor eula"
    assert not (linux / "cutensor").exists()
    win = tmp_path / "win"
    r = _run("install", "13.0", "--with", "cutensor", "--prefix", str(win), "--platform", "windows-x86_64",
             "--cache-dir", str(tmp_path / "cache"))
    assert r.exit_code == 0, r.output
    assert (win / "lib" / "x64" / "cutensor.lib").is_file() and (win / "bin" / "cutensor.dll").is_file()


def test_cudnn_windows_wheel_gets_its_import_library(fake_index: FakeIndex, tmp_path: Path) -> None:
    """cuDNN's Windows wheel has DLLs and headers but no lib/x64/cudnn.lib: the tree gets one, built
    from the DLL's exports and recorded, and no note says linking needs another source."""
    add_release_13_0(fake_index)
    fake_index.add_wheel("nvidia_cudnn_cu13", "9.28.1.4", WIN_TAG, {
        "nvidia/cudnn/bin/cudnn64_9.dll": make_dll("cudnn64_9.dll", code=("cudnnCreate", "cudnnGetVersion")),
        "nvidia/cudnn/include/cudnn.h": b"// cudnn"})
    r = _run("resolve", "13.0", "--with", "cudnn", "--platform", "windows-x86_64", "--json")
    assert r.exit_code == 0, r.output
    assert not any("import library" in n for n in json.loads(r.stdout)["notes"])
    win = tmp_path / "win"
    r = _run("install", "13.0", "--with", "cudnn", "--prefix", str(win), "--platform", "windows-x86_64",
             "--cache-dir", str(tmp_path / "cache"))
    assert r.exit_code == 0, r.output
    exports = read_exports((win / "bin" / "cudnn64_9.dll").read_bytes())
    assert (win / "lib" / "x64" / "cudnn.lib").read_bytes() == import_library(exports)
    assert verify(win).ok and "lib/x64/cudnn.lib" in {f["path"] for f in (read_record(win) or {})["files"]}


def test_no_fallback_refuses_a_product_wheel_the_mirror_does_not_list(fake_index: FakeIndex,
                                                                      tmp_path: Path) -> None:
    """A mirror directory with the toolkit's wheels (and cuBLAS, NVRTC) but no cuDSS project: with
    --no-fallback its pages stand in for the index's, so cuDSS is refused, naming the mirror and the
    way out, before anything is installed; without it, that one wheel comes from the index."""
    from tests.test_trust import write_simple

    add_release_13_0(fake_index)
    add_cudss(fake_index)
    listed = FakeIndex(html=True)
    listed.projects = {k: v for k, v in fake_index.projects.items() if not k.startswith("nvidia-cudss")}
    listed.blobs = {k: v for k, v in fake_index.blobs.items() if not k.startswith("nvidia_cudss")}
    mirror = write_simple(tmp_path / "mirror", listed)
    cudss = f"nvidia_cudss_cu13-1.0.0.35-{LINUX_TAG}.whl"
    prefix = tmp_path / "cuda"
    common = ("--prefix", str(prefix), "--platform", "linux-x86_64", "--cache-dir", str(tmp_path / "cache"),
              "--mirror", str(mirror), "--with", "cudss")

    r = _run("install", "13.0", *common, "--no-fallback")
    assert r.exit_code == 1, r.output
    assert r.stderr == (f"error: the mirror {mirror.as_uri()}/ has no project nvidia-cudss-cu13, and "
                        f"--no-fallback forbids its page at the package index {INDEX}: add the project to "
                        "the mirror, or drop --no-fallback\n"), r.stderr
    assert "Traceback" not in r.output and not prefix.exists()
    assert not [u for u in fake_index.requests if "/packages/" in u], fake_index.requests

    r = _run("install", "13.0", *common)
    assert r.exit_code == 0, r.output
    assert (prefix / "include" / "cudss.h").read_bytes() == b"// cudss 1.0.0.35"
    # from the index: cuDSS's wheel alone (cuda-toolkit's metadata wheel too comes from the mirror)
    assert [u.rsplit("/", 1)[1] for u in fake_index.requests if "/packages/" in u] == [cudss]


def test_cublas_patch_wheel_takes_the_toolkits_place(fake_index: FakeIndex, tmp_path: Path) -> None:
    """The index holds cuBLAS patches as later versions of the toolkit's own nvidia-cublas: 13.0.3 pins
    13.1.0.3, so the newest 13.1.x (13.1.1.2, not 13.4.2.4) replaces it; compat has no wheel."""
    add_release_13_0(fake_index)
    for version in ("13.1.1.2", "13.4.2.4"):
        lib = fake_elf("libcublas.so.13") + f"cublas {version}".encode()
        fake_index.add_wheel("nvidia_cublas", version, LINUX_TAG, {f"{CU}/lib/libcublas.so.13": lib})
    plan = json.loads(_run("resolve", "13.0", "--with", "cublas", "--platform", "linux-x86_64",
                           "--json").stdout)
    assert [c["relative_path"].split("-")[1] for c in plan["components"] if c["name"] == "libcublas"] == [
        "13.1.1.2"]
    assert plan["products"][0]["note"] == "replaces the toolkit's libcublas 13.1.0.3"
    prefix = tmp_path / "cuda"
    r = _run("install", "13.0", "--with", "cublas", "--prefix", str(prefix), "--platform", "linux-x86_64",
             "--cache-dir", str(tmp_path / "cache"))
    assert r.exit_code == 0, r.output
    assert b"cublas 13.1.1.2" in (prefix / "lib" / "libcublas.so.13").read_bytes()
    assert verify(prefix).ok
    kept = json.loads(_run("resolve", "13.0", "--with", "cublas=13.1.0", "--json").stdout)["products"][0]
    assert kept["note"] == ("the toolkit's own: no cuBLAS 13.1.0 patch is newer (the newest, 13.1.0, is "
                            "13.1.0.3)")
    r = _run("resolve", "13.0", "--with", "compat")
    assert r.exit_code == 2 and "never as a wheel; install it with --source nvidia --with compat" in r.stderr
