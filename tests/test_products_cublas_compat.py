"""`--with cublas` (cuBLAS patch releases in the toolkit's libcublas place) and `--with compat` (NVIDIA's
forward-compatibility package in <tree>/compat/, from the CUDA manifest of 13.1-13.3 or the nvidia-driver
product): resolve, install, record, info, verify, lock, mirror, offline, uninstall, and the refusals; on
a loopback server laid out like NVIDIA's site, and local directories."""

from __future__ import annotations

import dataclasses
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from cudaredist.plan import ProductRelease
from cudaredist.sources.nvidia.products import env_base
from tests.archives import Link, Members, MirrorArchive, build_mirror, toolkit
from tests.hosts import assert_link
from tests.test_products_install import _ok, _run, product_mirror

MKCOMPAT = Path(__file__).resolve().parents[2] / "shared" / "tools" / "mkcompat.py"
LINUX = "linux-x86_64"


def libcublas(version: str) -> Members:
    return {
        f"lib/libcublas.so.{version}": f"\x7fELF cublas {version}".encode(),
        "lib/libcublas.so.13": Link(f"libcublas.so.{version}"),
        "include/cublas_v2.h": b"// cublas",
        "LICENSE.txt": b"cublas license",
    }


def compat(driver: str) -> Members:
    """NVIDIA's archive: the driver's user-mode libraries under compat/ (nixpkgs links compat/*.so*)."""
    libs = {
        "libcuda.so": "libcuda.so.1",
        "libnvidia-ptxjitcompiler.so": "libnvidia-ptxjitcompiler.so.1",
        "libnvidia-nvvm.so": "libnvidia-nvvm.so.4",
        "libcudadebugger.so": "libcudadebugger.so.1",
    }
    out: Members = {"LICENSE.txt": b"driver license"}
    for base, soname in libs.items():
        out |= {
            f"compat/{base}.{driver}": f"\x7fELF {soname} {driver}".encode(),
            f"compat/{soname}": Link(f"{base}.{driver}"),
            f"compat/{base}": Link(f"{base}.{driver}"),
        }
    return out


def own_compat(cuda: Path, label: str, driver: str, variant: str) -> None:
    """The CUDA manifest's own `cuda_compat` entry (13.1-13.3), its archive beside the toolkit's."""
    scratch = cuda.parent / "scratch"
    product_mirror(scratch, "cuda", "0", "cuda_compat", driver, {LINUX: {f"cuda{variant}": compat(driver)}})
    shutil.copytree(scratch / "cuda_compat", cuda / "cuda_compat")
    manifest = json.loads((cuda / f"redistrib_{label}.json").read_text())
    manifest["cuda_compat"] = json.loads((scratch / "redistrib_0.json").read_text())["cuda_compat"]
    (cuda / f"redistrib_{label}.json").write_text(json.dumps(manifest))
    shutil.rmtree(scratch)


def _toolkit(compute: Path, label: str, cublas: str = "13.4.1.3") -> Path:
    cuda = compute / "cuda" / "redist"
    build_mirror(
        cuda,
        label,
        [
            *toolkit(LINUX),
            *toolkit("windows-x86_64"),
            MirrorArchive("libcublas", LINUX, cublas, libcublas(cublas)),
        ],
    )
    return cuda


@pytest.fixture
def site(tmp_path: Path, serve: object) -> str:
    """CUDA 13.2.2 (libcublas 13.4.1.3, its own compat 595.45.04 for 13.2), 13.4.1 and 13.5.0 (none),
    cuBLAS patches 13.4.1 (older than the toolkit's), 13.4.2, 13.6.2 and 12.9.2, and the nvidia-driver
    product 610.57.04 (13.3), 620.70.06 and 620.70.10 (13.5)."""
    compute = tmp_path / "site" / "compute"
    cuda = _toolkit(compute, "13.2.2")
    own_compat(cuda, "13.2.2", "595.45.04", "13.2")
    _toolkit(compute, "13.4.1", "13.8.0.4")
    _toolkit(compute, "13.5.0", "13.9.0.1")
    patches = compute / "cublas" / "redist"
    for label, version, variant in (
        ("13.4.1", "13.4.1.2", "cuda13"),
        ("13.4.2", "13.4.2.5", "cuda13"),
        ("13.6.2", "13.6.2.1", "cuda13"),
        ("12.9.2", "12.9.2.3", "cuda12"),
    ):
        product_mirror(
            patches,
            "cublas",
            label,
            "libcublas",
            version,
            {LINUX: {variant: libcublas(version)}, "linux-sbsa": {variant: libcublas(version)}},
        )
    drivers = compute / "nvidia-driver" / "redist"
    for driver, mm in (("610.57.04", "13.3"), ("620.70.06", "13.5"), ("620.70.10", "13.5")):
        product_mirror(
            drivers, "nvidia-driver", driver, "cuda_compat", driver, {LINUX: {f"cuda{mm}": compat(driver)}}
        )
    assert callable(serve)
    return str(serve(tmp_path / "site")) + "compute/cuda/redist/"


@pytest.fixture(autouse=True)
def _linux_host(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("cudaredist.profiles.host_platform", lambda asked=None: asked or LINUX)


def _record(prefix: Path) -> dict[str, object]:
    return json.loads((prefix / ".cudaredist" / "record.json").read_text())  # type: ignore[no-any-return]


def _products(prefix: Path) -> list[dict[str, str]]:
    return _record(prefix)["plan"]["products"]  # type: ignore[index,no-any-return]


def test_cublas_patch_takes_the_toolkits_place(site: str, tmp_path: Path) -> None:
    prefix, cache = tmp_path / "cuda", ("--cache-dir", str(tmp_path / "cache"))
    asked = ("13.2", "--only", "--component", "cuda_cudart", "--component", "libcublas", "--with", "cublas",
             "--prefix", str(prefix))
    assert "with cuBLAS 13.4.2" in _ok("install", *asked, "--base-url", site, *cache).stderr
    lib = prefix / "lib"
    assert (lib / "libcublas.so.13.4.2.5").is_file() and not (lib / "libcublas.so.13.4.1.3").exists()
    assert_link(lib / "libcublas.so.13", "libcublas.so.13.4.2.5")  # a copy where links are not made
    rec = _record(prefix)
    components = rec["plan"]["components"]  # type: ignore[index]
    assert [(c["name"], c["version"]) for c in components if c["name"] == "libcublas"] == [
        ("libcublas", "13.4.2.5")]
    served = rec["provenance"]["archives"]["libcublas"]  # type: ignore[index]
    assert served.startswith(site.replace("/cuda/redist/", "/cublas/redist/"))
    shown = _ok("info", "--prefix", str(prefix)).stdout
    assert "with:      cublas 13.4.2 (cuda13 build, --with cublas)" in shown
    assert "replaces the toolkit's libcublas 13.4.1.3" in shown
    assert json.loads(_ok("verify", "--prefix", str(prefix), "--json").stdout)["ok"] is True
    again = _ok("install", *asked, "--base-url", "http://127.0.0.1:9/", *cache)  # no network: a no-op
    assert "already installed" in again.stderr
    _ok("uninstall", "--prefix", str(prefix))
    assert not prefix.exists()


def test_cublas_keeps_the_toolkits_own_where_no_patch_is_newer(site: str, tmp_path: Path) -> None:
    prefix = tmp_path / "cuda"
    _ok(
        "install",
        "13.2",
        "--with",
        "cublas=13.4.1",
        "--prefix",
        str(prefix),
        "--base-url",
        site,
        "--cache-dir",
        str(tmp_path / "cache"),
    )
    assert (prefix / "lib" / "libcublas.so.13.4.1.3").is_file()  # the nvcc profile has none: it came along
    assert _products(prefix)[0]["release"] == "13.4.1.3"
    assert (
        "the toolkit's own: no cuBLAS 13.4.1 patch is newer (the newest, 13.4.1, is 13.4.1.2)"
        in _ok("info", "--prefix", str(prefix)).stdout
    )


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--with", "cublas=12.9"), "cuBLAS 12.9 has no release with archives for CUDA 13 on linux-x86_64"),
        (
            ("--with", "cublas", "--platform", "windows-x86_64"),
            "--with cublas: NVIDIA publishes cuBLAS patch releases for Linux only",
        ),
        (
            ("--with", "compat", "--platform", "windows-x86_64"),
            "--with compat: forward compatibility is Linux-only",
        ),
    ],
)
def test_refusals_are_clear_and_leave_nothing(
    site: str, tmp_path: Path, args: tuple[str, ...], message: str
) -> None:
    result = _run(
        "install",
        "13.2",
        *args,
        "--prefix",
        str(tmp_path / "p"),
        "--base-url",
        site,
        "--cache-dir",
        str(tmp_path / "cache"),
    )
    assert result.exit_code != 0 and "Traceback" not in result.output
    assert message in result.stderr and result.stderr.count("\n") == 1
    assert not (tmp_path / "p").exists()


def test_compat_from_the_driver_product_goes_into_compat(site: str, tmp_path: Path) -> None:
    prefix, cache = tmp_path / "cuda", ("--cache-dir", str(tmp_path / "cache"))
    _ok("install", "13.5", "--with", "compat", "--prefix", str(prefix), "--base-url", site, *cache)
    assert_link(prefix / "compat" / "libcuda.so.1", "libcuda.so.620.70.10")
    for lib in ("libnvidia-ptxjitcompiler.so.1", "libnvidia-nvvm.so.4", "libcudadebugger.so.1"):
        assert (prefix / "compat" / lib).exists()
    assert not list(prefix.glob("lib*/libcuda.so*")) and not list(prefix.glob("targets/*/lib/libcuda.so*"))
    product = _products(prefix)[0]
    # the contract a driver decision reads: name, the driver's version, the CUDA major.minor it serves
    assert ProductRelease(**product).name == "compat"
    assert (product["release"], product["cuda_variant"]) == ("620.70.10", "13.5")
    assert product["base_url"] == site.replace("/cuda/redist/", "/nvidia-driver/redist/")
    assert "with:      compat 620.70.10 (13.5 build" in _ok("info", "--prefix", str(prefix)).stdout
    assert json.loads(_ok("verify", "--prefix", str(prefix), "--json").stdout)["ok"] is True
    older = tmp_path / "older"
    _ok("install", "13.5", "--with", "compat=620.70.06", "--prefix", str(older), "--base-url", site, *cache)
    assert_link(older / "compat" / "libcuda.so.1", "libcuda.so.620.70.06")
    _ok("uninstall", "--prefix", str(prefix))
    assert not prefix.exists()


def test_compat_from_the_cuda_manifests_own_entry(site: str, tmp_path: Path) -> None:
    """13.2's package is in its own manifest (no 13.2 build in the driver product): a toolkit archive
    (mirrored with the toolkit: test_lock_mirror_and_offline_carry_both)."""
    prefix, cache = tmp_path / "cuda", ("--cache-dir", str(tmp_path / "cache"))
    _ok("install", "13.2", "--with", "compat", "--prefix", str(prefix), "--base-url", site, *cache)
    assert_link(prefix / "compat" / "libcuda.so.1", "libcuda.so.595.45.04")
    product = _products(prefix)[0]
    assert (product["release"], product["cuda_variant"], product["base_url"]) == ("595.45.04", "13.2", site)


def test_compat_for_a_train_nvidia_publishes_none_for(site: str, tmp_path: Path) -> None:
    result = _run(
        "resolve", "13.4", "--with", "compat", "--base-url", site, "--cache-dir", str(tmp_path / "c")
    )
    assert result.exit_code == 1 and "Traceback" not in result.output, result.output
    assert "NVIDIA publishes no CUDA forward compatibility package for CUDA 13.4" in result.stderr
    assert "620.70.10 (CUDA 13.5)" in result.stderr and "610.57.04 (CUDA 13.3)" in result.stderr


def test_lock_mirror_and_offline_carry_both(site: str, tmp_path: Path) -> None:
    cache = ("--cache-dir", str(tmp_path / "cache"))
    both = ("--with", "compat", "--with", "cublas=13.4")
    lock = tmp_path / "cuda.lock"
    _ok("lock", "13.5", "--with", "compat", "--platform", LINUX, "-o", str(lock), "--base-url", site, *cache)
    assert json.loads(lock.read_text())["request"]["with"] == ["compat"]
    prefix = tmp_path / "locked"
    _ok("install", "--lock", str(lock), "--prefix", str(prefix), "--cache-dir", str(tmp_path / "c2"))
    assert (prefix / "compat" / "libcuda.so.1").exists()
    offline = json.loads(
        _ok("resolve", "13.5", "--with", "compat", "--base-url", site, *cache, "--json", "--offline").stdout
    )
    assert offline["products"][0]["release"] == "620.70.10"
    out = tmp_path / "mirror"
    _ok("mirror", "13.2", *both, "--platform", LINUX, "--out", str(out), "--base-url", site, *cache)
    assert (out / "cublas" / "redist" / "redistrib_13.4.2.json").is_file()
    _ok("mirror", "13.5", "--with", "compat", "--platform", LINUX, "--out", str(out), "--base-url", site,
        *cache)
    assert (out / "nvidia-driver" / "redist" / "redistrib_620.70.10.json").is_file()
    # 13.2's own compat package is the toolkit's: mirrored with it
    assert "cuda_compat" in json.loads((out / "redistrib_13.2.2.json").read_text())
    local = tmp_path / "local"  # from the mirror alone
    _ok("install", "13.2", *both, "--prefix", str(local), "--base-url", str(out),
        "--cache-dir", str(tmp_path / "fresh"))
    assert (local / "lib" / "libcublas.so.13.4.2.5").is_file()
    assert (local / "compat" / "libcuda.so.1").exists()


def test_the_driver_folder_has_a_shell_name_for_its_override(
    site: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert env_base("compat") == "CUDAREDIST_NVIDIA_DRIVER_BASE_URL"
    elsewhere = tmp_path / "elsewhere"
    product_mirror(
        elsewhere,
        "nvidia-driver",
        "630.1.2",
        "cuda_compat",
        "630.1.2",
        {LINUX: {"cuda13.5": compat("630.1.2")}},
    )
    monkeypatch.setenv("CUDAREDIST_NVIDIA_DRIVER_BASE_URL", str(elsewhere))
    plan = json.loads(
        _ok(
            "resolve",
            "13.5",
            "--with",
            "compat",
            "--base-url",
            site,
            "--json",
            "--cache-dir",
            str(tmp_path / "c"),
        ).stdout
    )
    assert plan["products"][0]["release"] == "630.1.2"


def hostile(root: Path, product: str, component: str, label: str, version: str, variant: str) -> Path:
    """A product folder with one manifest, then edited by the test."""
    folder = root / product / "redist"
    members = compat(version) if component == "cuda_compat" else libcublas(version)
    product_mirror(folder, product, label, component, version, {LINUX: {variant: members}})
    return folder / f"redistrib_{label}.json"


@pytest.mark.parametrize(
    ("product", "component", "label", "version", "good"),
    [
        ("cublas", "libcublas", "13.4.9", "13.4.9.1", "cuda13"),
        ("nvidia-driver", "cuda_compat", "630.0.1", "630.0.1", "cuda13.5"),
    ],
)
@pytest.mark.parametrize("attack", ["variant", "platform", "climb"])
def test_hostile_product_manifests(
    tmp_path: Path, product: str, component: str, label: str, version: str, good: str, attack: str
) -> None:
    root = tmp_path / "m"
    build_mirror(
        root,
        "13.5.0",
        [*toolkit(LINUX), MirrorArchive("libcublas", LINUX, "13.4.1.3", libcublas("13.4.1.3"))],
    )
    path = hostile(root, product, component, label, version, good)
    manifest = json.loads(path.read_text())
    entry = manifest[component]
    if attack == "variant":  # a build for another CUDA than it claims to serve
        entry[LINUX] = {("cuda12" if product == "cublas" else "cuda13.3"): entry[LINUX][good]}
        entry["cuda_variant"] = ["12" if product == "cublas" else "13.3"]
    elif attack == "platform":
        entry["linux-sbsa"] = entry.pop(LINUX)
    else:
        entry[LINUX][good]["relative_path"] = f"../../../{component}/x-archive.tar.xz"
    path.write_text(json.dumps(manifest))
    name = "cublas=13.4" if product == "cublas" else "compat"
    result = _run(
        "install",
        "13.5",
        "--with",
        name,
        "--prefix",
        str(tmp_path / "p"),
        "--base-url",
        str(root),
        "--cache-dir",
        str(tmp_path / "cache"),
    )
    assert result.exit_code != 0 and "Traceback" not in result.output
    assert result.stderr.startswith("error: ") and result.stderr.count("\n") == 1
    expect = {
        "variant": "has no release with archives for CUDA 13",
        "platform": "releases for linux-x86_64: none",
        "climb": "relative_path",
    }[attack]
    assert expect in result.stderr
    assert not (tmp_path / "p").exists() and not (tmp_path / "x-archive.tar.xz").exists()


@pytest.mark.skipif(
    shutil.which("gcc") is None or not MKCOMPAT.is_file(),
    reason="mkcompat.py (../shared/tools) needs gcc to make its ELF stand-ins",
)
def test_compat_in_nvidias_layout_from_mkcompat(tmp_path: Path) -> None:
    """The stand-in of NVIDIA's archive (real ELF files with NVIDIA's sonames) lands in compat/."""
    compute = tmp_path / "compute"
    build_mirror(compute / "cuda" / "redist", "13.5.0", toolkit(LINUX))
    subprocess.run(
        [sys.executable, str(MKCOMPAT), str(compute), "620.70.10", "13.5"], check=True, capture_output=True
    )
    prefix = tmp_path / "p"
    _ok(
        "install",
        "13.5",
        "--with",
        "compat",
        "--prefix",
        str(prefix),
        "--base-url",
        str(compute / "cuda" / "redist"),
        "--cache-dir",
        str(tmp_path / "cache"),
    )
    assert (prefix / "compat" / "libcuda.so.1").read_bytes()[:4] == b"\x7fELF"
    assert_link(prefix / "compat" / "libcuda.so.1", "libcuda.so.620.70.10")


def cuda_135(platform: str) -> list[MirrorArchive]:
    """13.5.0's shape: `cccl` (13.3.5.0.6), nvcc/cudart/crt/nvvm 13.5.37, profiler API and NVTX 13.5.25."""
    skew = {"cuda_profiler_api": "13.5.25", "cuda_nvtx": "13.5.25", "cuda_cccl": "13.3.5.0.6"}
    return [
        dataclasses.replace(
            a,
            component="cccl" if a.component == "cuda_cccl" else a.component,
            version=skew.get(a.component, "13.5.37"),
        )
        for a in toolkit(platform, "13.5.0")
        if a.component != "visual_studio_integration"
    ]


def test_cuda_135_resolves_everywhere_and_info_names_the_skew(tmp_path: Path) -> None:
    root = tmp_path / "m"
    build_mirror(
        root,
        "13.5.0",
        [a for p in (LINUX, "linux-sbsa", "windows-x86_64", "windows-arm64") for a in cuda_135(p)],
    )
    manifest = json.loads((root / "redistrib_13.5.0.json").read_text())
    assert "cccl" in manifest and "cuda_cccl" not in manifest and "windows-arm64" in manifest["cuda_nvcc"]
    for platform in ("windows-arm64", "linux-sbsa"):
        plan = json.loads(
            _ok(
                "resolve",
                "13.5",
                "--platform",
                platform,
                "--base-url",
                str(root),
                "--json",
                "--cache-dir",
                str(tmp_path / "c"),
            ).stdout
        )
        assert plan["release"] == "13.5.0" and "cccl" in [c["name"] for c in plan["components"]]
    prefix = tmp_path / "p"
    _ok(
        "install",
        "13.5",
        "--prefix",
        str(prefix),
        "--base-url",
        str(root),
        "--cache-dir",
        str(tmp_path / "c"),
    )
    shown = _ok("info", "--prefix", str(prefix)).stdout
    assert "release:   CUDA 13.5.0" in shown
    assert (
        "versions:  13.5.37 (cuda_nvcc, cuda_cudart, cuda_crt, libnvvm); 13.5.25 (cuda_profiler_api, "
        "cuda_nvtx) (one release, named by its label)"
    ) in shown
