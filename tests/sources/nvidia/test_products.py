"""Library products (`--with cudnn`): every real manifest in ../shared parses and resolves, the
release and variant rules, where a product's folder is, and what a bad --with says."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner, Result

from cudaredist.cli import app
from cudaredist.errors import PlanError, ResolveError, UsageError
from cudaredist.plan import Plan
from cudaredist.profiles import get_profile, parse_product_request, parse_product_requests, product_names
from cudaredist.record import satisfies
from cudaredist.sources.nvidia.manifest import Manifest, make_plan, parse_manifest
from cudaredist.sources.nvidia.products import (
    choose_release,
    pick_archive,
    plan_product,
    product_base,
)
from tests.conftest import SHARED_MANIFESTS

PRODUCTS = ("cudnn", "cutensor", "cusparselt", "cudss", "cublas", "nvidia-driver")  # their folders
NAMES = {"nvidia-driver": "compat"}  # a folder's product, where the two differ


@pytest.fixture(autouse=True)
def _linux_host(monkeypatch: pytest.MonkeyPatch) -> None:
    """These cases read NVIDIA's linux-x86_64 layout where no --platform is given: the host counts as a
    linux-x86_64 one whatever runs them (the Windows CPython included)."""
    monkeypatch.setattr("cudaredist.profiles.host_platform", lambda asked=None: asked or "linux-x86_64")


def _files(sub: str = "") -> list[Path]:
    d = SHARED_MANIFESTS / sub if sub else SHARED_MANIFESTS
    return sorted(d.glob("redistrib_*.json")) or [d / "redistrib_absent.json"]  # keeps tests collected


def _load(path: Path) -> Manifest:
    return parse_manifest(path.read_bytes(), label=path.stem.removeprefix("redistrib_"), source=str(path))


@pytest.fixture
def nvbase(shared_manifests: Path, tmp_path: Path) -> Path:
    """NVIDIA's layout, in a directory: compute/cuda/redist/ and compute/<product>/redist/."""
    compute = tmp_path / "compute"
    (compute / "cuda" / "redist").mkdir(parents=True)
    for f in shared_manifests.glob("redistrib_*.json"):
        shutil.copyfile(f, compute / "cuda" / "redist" / f.name)
    for product in PRODUCTS:  # contents only: a read-only mode copied along cannot be deleted on Windows
        shutil.copytree(shared_manifests / product, compute / product / "redist",
                        copy_function=shutil.copyfile)
    return compute / "cuda" / "redist"


def _manifests(product: str) -> dict[str, Manifest]:
    return {m.label: m for m in map(_load, sorted((SHARED_MANIFESTS / product).glob("redistrib_*.json")))}


# -- every real manifest ------------------------------------------------------------------------------

@pytest.mark.parametrize("path", _files(), ids=lambda p: p.stem)
def test_every_cuda_manifest_parses_and_resolves(shared_manifests: Path, path: Path) -> None:
    manifest = _load(path)
    assert manifest.label and manifest.components
    for platform in ("linux-x86_64", "windows-x86_64"):
        if platform not in manifest.platforms:
            continue
        # the runtime profile: cudart (and crt from 13.0) exists on both platforms in every release
        plan = make_plan(manifest, platform=platform, base_url="https://h/compute/cuda/redist/",
                         profile="runtime")
        assert "cuda_cudart" in plan.components
        assert all(i.archive.relative_path.startswith(f"{i.component}/") for i in plan.items)


@pytest.mark.parametrize("path", [p for s in PRODUCTS for p in _files(s)],
                         ids=lambda p: f"{p.parent.name}-{p.stem}")
def test_every_product_manifest_parses_and_resolves(shared_manifests: Path, path: Path) -> None:
    """Each platform and CUDA major a product manifest lists resolves to that platform's build for it."""
    manifest = _load(path)
    request = parse_product_request(NAMES.get(path.parent.name, path.parent.name))
    assert manifest.label == path.stem.removeprefix("redistrib_")
    resolved = 0
    for comp in manifest.components.values():
        for platform in comp.platforms:
            # a major's build (cuda13), or a major.minor's (compat: cuda13.5)
            majors = {v.removeprefix("cuda") for v in comp.variants.get(platform, {})}
            for major in majors:
                picked = pick_archive(comp, platform, major if "." in major else f"{major}.0")
                assert picked is not None, (comp.key, platform, major)
                archive, variant = picked
                assert f"/{platform}/" in archive.relative_path and variant.startswith(f"cuda{major}")
                resolved += 1
            if platform == "source":
                assert pick_archive(comp, platform, "13.0") is not None
    for comp_spec in request.product.specs:
        assert any(n in manifest.components for n in comp_spec.names), "the product's default is in it"
    assert resolved > 0


# -- releases and variants (the quirks of the real manifests) ---------------------------------------

def _choose(product: str, cuda: str, platform: str, spec: str = "",
            components: tuple[str, ...] = ()) -> tuple[str, list[str], list[str]]:
    found = _manifests(product)
    request = parse_product_request(f"{product}={spec}" if spec else product)
    got = choose_release(request, list(found), found.__getitem__, platform=platform, cuda_release=cuda,
                         base_url="file:///b/", archive_bases=["file:///b/"], components=components)
    return got.release.release, [i.component for i in got.items], [i.archive.relative_path for i in got.items]


def test_newest_release_for_the_toolkits_major(shared_manifests: Path) -> None:
    assert _choose("cudnn", "13.0.2", "linux-x86_64")[0] == "9.27.0"
    assert _choose("cudnn", "11.8.0", "linux-x86_64")[0] == "8.9.7"          # 8.9.7: CUDA 11 and 12
    assert _choose("cusparselt", "12.9.1", "linux-x86_64")[0] == "0.8.1"     # 0.10.0 is CUDA 13 only
    assert _choose("cusparselt", "13.0.2", "linux-x86_64")[0] == "0.10.0"
    assert _choose("cudnn", "13.0.2", "linux-x86_64", "9.13")[0] == "9.13.0"  # a train
    assert _choose("cudnn", "12.9.1", "windows-x86_64", "8.9.7")[0] == "8.9.7"  # exact
    release, comps, paths = _choose("cudss", "12.9.1", "linux-aarch64")
    assert (release, comps) == ("0.8.0", ["libcudss"]) and paths[0].endswith("_cuda12-archive.tar.xz")


def test_flat_and_subkeyed_entry_in_one_platform(shared_manifests: Path) -> None:
    """cuDNN 9.27.0 windows-arm64: a cuda13 subkey and a flat _cuda13.4 build in one object."""
    comp = _manifests("cudnn")["9.27.0"].components["cudnn"]
    a134 = pick_archive(comp, "windows-arm64", "13.4.1")
    a130 = pick_archive(comp, "windows-arm64", "13.0.2")
    assert a134 is not None and a130 is not None
    assert a134[0].filename.endswith("_cuda13.4-archive.zip") and a134[1] == "cuda13.4"
    assert a130[0].filename.endswith("_cuda13-archive.zip") and a130[1] == "cuda13"
    assert pick_archive(comp, "windows-arm64", "12.9.1") is None


def test_cuda_variant_lists_a_major_the_platform_lacks(shared_manifests: Path) -> None:
    """cuDSS 0.8.0 lists cuda_variant 12 and 13, but its linux-aarch64 has only cuda12: no release
    has CUDA 13 there, and the error lists what exists for that platform and for that major."""
    with pytest.raises(ResolveError) as err:
        _choose("cudss", "13.0.2", "linux-aarch64")
    msg = str(err.value)
    assert "cuDSS has no release with archives for CUDA 13 on linux-aarch64" in msg
    assert "releases for linux-aarch64: 0.8.0 (CUDA 12)" in msg
    assert "releases for CUDA 13: 0.8.0 (linux-sbsa, linux-x86_64, windows-x86_64)" in msg


def test_samples_and_source_never_by_default(shared_manifests: Path) -> None:
    for label in ("9.13.0", "9.27.0", "8.9.7"):
        _r, comps, _p = _choose("cudnn", "12.9.1", "linux-x86_64", label)
        assert comps == ["cudnn"]
    _r, comps, paths = _choose("cudnn", "13.0.2", "linux-x86_64", components=("cudnn_samples", "cudnn_jit"))
    assert comps == ["cudnn", "cudnn_samples", "cudnn_jit"]
    assert paths[1].startswith("cudnn_samples/source/")


def test_an_asked_component_missing_on_the_platform_is_an_error(shared_manifests: Path) -> None:
    found = _manifests("cudnn")
    with pytest.raises(PlanError, match=r"cuDNN 9.27.0 has no archive of cudnn_jit for windows-x86_64 built "
                                        r"for CUDA 13 \(it has: linux-sbsa, linux-x86_64\)"):
        plan_product(found["9.27.0"], parse_product_request("cudnn"), platform="windows-x86_64",
                     cuda_release="13.0.2", base_url="file:///b/", archive_bases=(),
                     components=["cudnn_jit"])


def test_a_spec_no_release_matches(shared_manifests: Path) -> None:
    with pytest.raises(ResolveError, match=r"cuDNN has no release 9.20 at file:///b/; its releases there: "
                                           r"9.27.0, 9.13.0, 8.9.7"):
        _choose("cudnn", "13.0.2", "linux-x86_64", "9.20")


# -- data, requests, where a product's folder is ---------------------------------------------------

def test_products_are_data() -> None:
    assert product_names() == sorted(NAMES.get(p, p) for p in PRODUCTS)
    assert parse_product_request("cudnn").product.specs[0].names == ("cudnn",)
    assert str(parse_product_request(" CuDNN = 9.20 ")) == "cudnn=9.20"
    assert parse_product_request("cudss").product.wheel_name("12") == "nvidia-cudss-cu12"
    with pytest.raises(UsageError, match="unknown product 'cudart' for --with; products: compat, cublas"):
        parse_product_request("cudart")
    with pytest.raises(UsageError, match=r"'9\.x' is not a release of cuDNN"):
        parse_product_request("cudnn=9.x")
    with pytest.raises(UsageError, match="--with names cudnn twice"):
        parse_product_requests(["cudnn", "cudnn=9.20"])
    assert get_profile("nvcc")  # profiles still load with the products table beside them


def test_product_base_follows_nvidias_layout(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CUDAREDIST_CUDNN_BASE_URL", raising=False)
    nv = "https://developer.download.nvidia.com/compute/cuda/redist/"
    assert product_base(nv, "cudnn") == "https://developer.download.nvidia.com/compute/cudnn/redist/"
    assert product_base("file:///srv/m/", "cudss") == "file:///srv/m/cudss/redist/"
    monkeypatch.setenv("CUDAREDIST_CUDNN_BASE_URL", "https://cdn.example/cudnn")
    assert product_base(nv, "cudnn", override=True) == "https://cdn.example/cudnn/"
    assert product_base(nv, "cudnn") == "https://developer.download.nvidia.com/compute/cudnn/redist/"


def test_content_key_and_noop_cover_products(shared_manifests: Path) -> None:
    """A tree without the product does not satisfy `--with`, and its content key differs."""
    cuda = _load(SHARED_MANIFESTS / "redistrib_13.0.2.json")
    bare = make_plan(cuda, platform="linux-x86_64", base_url="file:///b/cuda/redist/")
    found = _manifests("cudnn")
    picked = plan_product(found["9.27.0"], parse_product_request("cudnn"), platform="linux-x86_64",
                          cuda_release="13.0.2", base_url="file:///b/cudnn/redist/", archive_bases=())
    assert picked is not None
    full = Plan(**{**bare.__dict__, "items": bare.items + picked.items, "products": (picked.release,)})
    assert full.content_key() != bare.content_key()
    record = {"plan": bare.to_json(), "request": {"components": []}}
    ask = dict(train="13.0", platform="linux-x86_64", profile="nvcc", components=[], source="nvidia")
    assert satisfies(record, **ask)  # type: ignore[arg-type]
    assert not satisfies(record, **ask, products=["cudnn"])  # type: ignore[arg-type]
    record = {"plan": full.to_json(), "request": {"components": []}}
    assert satisfies(record, **ask, products=["cudnn"])  # type: ignore[arg-type]
    assert not satisfies(record, **ask)  # type: ignore[arg-type]
    assert not satisfies(record, **ask, products=["cudnn=9.13"])  # type: ignore[arg-type]


# -- the command line, over the real manifests in NVIDIA's layout -----------------------------------

def _run(*args: str) -> Result:
    return CliRunner().invoke(app, list(args))


def test_resolve_json_with_cudnn(nvbase: Path) -> None:
    for platform, suffix in (("linux-x86_64", ".tar.xz"), ("windows-x86_64", ".zip")):
        result = _run("resolve", "13.0", "--with", "cudnn", "--platform", platform, "--base-url", str(nvbase),
                      "--json")
        assert result.exit_code == 0, result.output
        plan = json.loads(result.stdout)
        assert plan["release"] == "13.0.2"
        [product] = plan["products"]
        assert (product["name"], product["release"], product["cuda_variant"]) == ("cudnn", "9.27.0", "cuda13")
        assert product["base_url"] == nvbase.parent.parent.joinpath("cudnn", "redist").as_uri() + "/"
        [cudnn] = [c for c in plan["components"] if c.get("product") == "cudnn"]
        assert cudnn["url"] == product["base_url"] + cudnn["relative_path"]
        want = f"cudnn/{platform}/cudnn-{platform}-9.27.0.42_cuda13-archive{suffix}"
        assert cudnn["relative_path"] == want
        assert "cuda_nvcc" in [c["name"] for c in plan["components"]]


def test_old_cusparselt_brings_the_cusparse_header_its_header_includes(nvbase: Path) -> None:
    """cusparseLt.h of 0.8.x includes cusparse.h (seen on a GPU machine: `fatal error: cusparse.h: No
    such file or directory` in a tree without libcusparse); 0.10's does not, so it comes alone."""
    def planned(spec: str) -> tuple[list[str], list[str]]:
        result = _run("resolve", "13.0", "--with", spec, "--platform", "linux-x86_64", "--base-url",
                      str(nvbase), "--json")
        assert result.exit_code == 0, result.output
        plan = json.loads(result.stdout)
        return [c["name"] for c in plan["components"]], plan["notes"]

    old, notes = planned("cusparselt=0.8")
    assert "libcusparse" in old and "libcusparse_lt" in old
    assert "libcusparse comes with cuSPARSELt: its headers include it" in notes
    new, notes = planned("cusparselt")
    assert "libcusparse_lt" in new and "libcusparse" not in new
    assert not [n for n in notes if n.startswith("libcusparse ")]


def _error(result: Result) -> str:
    assert result.exit_code != 0, result.output
    assert "Traceback" not in result.output and result.stdout == ""
    assert result.stderr.startswith("error: ") and result.stderr.count("\n") == 1
    return result.stderr.removeprefix("error: ").rstrip("\n")


@pytest.mark.parametrize(("args", "expected"), [
    pytest.param(["13.0", "--with", "cudart"], "unknown product 'cudart' for --with", id="unknown-product"),
    pytest.param(["13.0", "--with", "cudnn=nine"], "'nine' is not a release of cuDNN", id="bad-spec"),
    pytest.param(["13.0", "--with", "cudnn=9.20"], "cuDNN has no release 9.20 at", id="no-such-release"),
    pytest.param(["12.9", "--with", "cusparselt=0.10"],
                 "cuSPARSELt 0.10 has no release with archives for CUDA 12 on linux-x86_64", id="no-major"),
    pytest.param(["13.0", "--with", "cudnn", "-c", "cudnn_jit", "--platform", "windows-x86_64"],
                 "cuDNN 9.27.0 has no archive of cudnn_jit for windows-x86_64", id="component-not-there"),
])
def test_with_errors(nvbase: Path, args: list[str], expected: str) -> None:
    for command in ("resolve", "lock", "install"):
        extra = ["--prefix", str(nvbase.parent / "never")] if command == "install" else []
        msg = _error(_run(command, *args, "--base-url", str(nvbase), *extra))
        assert expected in msg
        assert not (nvbase.parent / "never").exists()


def test_product_folder_missing(nvbase: Path, tmp_path: Path) -> None:
    shutil.rmtree(nvbase.parent.parent / "cudss")
    msg = _error(_run("resolve", "13.0", "--with", "cudss", "--base-url", str(nvbase)))
    assert "cannot list the cuDSS releases" in msg and "CUDAREDIST_CUDSS_BASE_URL" in msg


def _resolve(nvbase: Path, tmp_path: Path, train: str, product: str) -> dict[str, Any]:
    result = CliRunner().invoke(app, ["resolve", train, "--with", product, "--base-url", str(nvbase),
                                      "--json", "--cache-dir", str(tmp_path / "c")])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)  # type: ignore[no-any-return]


def test_real_cublas_patches_and_compat_packages(nvbase: Path, tmp_path: Path) -> None:
    """NVIDIA's manifests: 13.0.2 ships libcublas 13.1.0.3, patched by 13.1.1 (13.1.1.2); 13.2.0 ships
    13.3.0.5 and no 13.3 patch exists; compat of 13.2 and 13.3 is in their own manifests, none for 13.4."""
    plan = _resolve(nvbase, tmp_path, "13.0", "cublas")
    assert [(c["name"], c["version"]) for c in plan["components"] if c["name"] == "libcublas"] == [
        ("libcublas", "13.1.1.2")]
    assert plan["products"][0]["note"] == "replaces the toolkit's libcublas 13.1.0.3"
    kept = _resolve(nvbase, tmp_path, "13.2", "cublas")
    assert [c["version"] for c in kept["components"] if c["name"] == "libcublas"] == ["13.3.0.5"]
    assert kept["products"][0]["note"] == ("the toolkit's own: NVIDIA publishes no cuBLAS 13.3 patch for "
                                           "linux-x86_64")
    for train, driver in (("13.2", "595.45.04"), ("13.3", "610.43.02")):
        product = _resolve(nvbase, tmp_path, train, "compat")["products"][0]
        assert (product["release"], product["cuda_variant"]) == (driver, train)
    result = CliRunner().invoke(app, ["resolve", "13.4", "--with", "compat", "--base-url", str(nvbase),
                                      "--cache-dir", str(tmp_path / "c")])
    assert result.exit_code == 1 and "NVIDIA publishes no CUDA forward compatibility package for CUDA 13.4" \
        in result.stderr and "620.70.06 (CUDA 13.5)" in result.stderr
