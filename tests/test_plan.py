"""The install plan (cudaredist.plan): real manifests for every platform, and the rules on small ones."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from cudaredist.errors import PlanError, UsageError
from cudaredist.plan import join_url, plan_from_json, version_key
from cudaredist.sources.nvidia.manifest import Manifest, make_plan, parse_manifest
from tests.conftest import SHARED_MANIFESTS

BASE = "https://developer.download.nvidia.com/compute/cuda/redist/"

# What each profile must pull in, per FACTS.md §3 ("What a working nvcc needs") and profiles.toml.
NVCC_12 = (("cuda_nvcc",), ("cuda_cudart",), ("cccl", "cuda_cccl"))
NVCC_13 = (*NVCC_12, ("cuda_crt",), ("libnvvm",))
# cuda_profiler_api.h (NVIDIA's samples matrixMul, asyncAPI): its own component from 11.8, in cudart before
HEADERS = (("cuda_profiler_api",), ("cuda_nvtx",))
BUILD_EXTRA = (("cuda_cuobjdump",), ("cuda_nvrtc",), ("libcurand",))
TORCH_EXTRA = (("libcublas",), ("libcusparse",), ("libcusolver",), ("libcurand",), ("libcufft",),
               ("cuda_nvrtc",), ("libnvjitlink",))


# NVIDIA's MSBuild files, which CMake's Visual Studio generator needs: with nvcc on Windows only
MSBUILD = (("visual_studio_integration",),)


def nvcc_groups(label: str, platform: str) -> tuple[tuple[str, ...], ...]:
    base = NVCC_13 if version_key(label) >= (13,) else NVCC_12
    return (base + (HEADERS if version_key(label) >= (11, 8) else HEADERS[1:])
            + (MSBUILD if platform.startswith("windows") else ()))


def _load(label: str) -> tuple[bytes, dict[str, Any]]:
    data = (SHARED_MANIFESTS / f"redistrib_{label}.json").read_bytes()
    return data, json.loads(data)


def _raw_platforms(raw: dict[str, Any]) -> list[str]:
    return sorted({p for body in raw.values() if isinstance(body, dict)
                   for p, v in body.items() if isinstance(v, dict)})


def _cases() -> list[Any]:
    labels = sorted((p.stem.removeprefix("redistrib_") for p in SHARED_MANIFESTS.glob("redistrib_*.json")),
                    key=version_key)
    cases = [pytest.param(lbl, plat, id=f"{lbl}-{plat}") for lbl in labels
             for plat in _raw_platforms(_load(lbl)[1])]
    return cases or [pytest.param("absent", "none", id="shared-manifests-absent")]


def _cases_13() -> list[Any]:
    labels = [p.stem.removeprefix("redistrib_") for p in SHARED_MANIFESTS.glob("redistrib_13.*.json")]
    cases = [pytest.param(lbl, plat, prof, id=f"{lbl}-{plat}-{prof}")
             for lbl in sorted(labels, key=version_key)
             for plat in ("linux-x86_64", "windows-x86_64") for prof in ("build", "runtime", "torch")]
    return cases or [pytest.param("absent", "none", "none", id="shared-manifests-absent")]


def _expect(raw: dict[str, Any], groups: tuple[tuple[str, ...], ...], platform: str) -> list[str | None]:
    """For each group the first name whose entry has the platform; computed without the parser."""
    return [next((n for n in g if isinstance(raw.get(n), dict) and platform in raw[n]), None)
            for g in groups]


def _check_items(plan: Any, raw: dict[str, Any], names: list[str], platform: str) -> None:
    assert list(plan.components) == names
    for item in plan.items:
        entry = raw[item.component][platform]
        assert item.url == BASE + entry["relative_path"]
        assert item.archive.sha256 == entry["sha256"]
        assert item.archive.size == int(entry["size"])
        assert item.version == raw[item.component]["version"]
        assert item.layout == "redist"
        assert item.fallback_urls == ()
    assert plan.total_size == sum(int(raw[n][platform]["size"]) for n in names)


@pytest.mark.parametrize(("label", "platform"), _cases())
def test_nvcc_profile_for_every_listed_platform(shared_manifests: Path, label: str, platform: str) -> None:
    data, raw = _load(label)
    manifest = parse_manifest(data, label=label)
    thirteen = version_key(label) >= (13,)
    groups = nvcc_groups(label, platform)
    chosen = _expect(raw, groups, platform)
    if None in chosen:
        missing = groups[chosen.index(None)]
        with pytest.raises(PlanError) as info:
            make_plan(manifest, platform=platform, base_url=BASE, profile="nvcc")
        err = info.value
        assert (err.component, err.release, err.platform) == ("|".join(missing), label, platform)
        assert missing[0] in str(err) and label in str(err) and platform in str(err)
        return
    plan = make_plan(manifest, platform=platform, base_url=BASE, profile="nvcc")
    assert (plan.release, plan.platform, plan.profile, plan.base_url) == (label, platform, "nvcc", BASE)
    assert plan.release_date == raw["release_date"]
    _check_items(plan, raw, [c for c in chosen if c], platform)
    # FACTS §3: crt and nvvm are separate components from 13.0; CCCL is "cccl" from 13.3
    assert ("cuda_crt" in plan.components) is thirteen
    assert ("libnvvm" in plan.components) is thirteen
    assert plan.components[2] == ("cccl" if version_key(label) >= (13, 3) else "cuda_cccl")


def test_platforms_without_nvcc_exist_and_fail(shared_manifests: Path) -> None:
    """linux-all (driver_assistant only, 12.8+) is listed but cannot carry nvcc."""
    label = "12.8.0"
    if not (shared_manifests / f"redistrib_{label}.json").is_file():
        pytest.skip(f"redistrib_{label}.json not saved")
    manifest = parse_manifest(_load(label)[0], label=label)
    assert "linux-all" in manifest.platforms
    with pytest.raises(PlanError) as info:
        make_plan(manifest, platform="linux-all", base_url=BASE)
    assert info.value.component == "cuda_nvcc"
    assert "(it has: " in str(info.value)


@pytest.mark.parametrize(("label", "platform", "profile"), _cases_13())
def test_build_and_runtime_profiles_13x(shared_manifests: Path, label: str, platform: str,
                                        profile: str) -> None:
    data, raw = _load(label)
    # runtime: cuda_runtime.h includes crt/host_config.h, in cuda_crt from 13.0 on
    groups = {"build": nvcc_groups(label, platform) + BUILD_EXTRA,
              "torch": nvcc_groups(label, platform) + TORCH_EXTRA,
              "runtime": (("cuda_cudart",), ("cuda_crt",))}[profile]
    chosen = _expect(raw, groups, platform)
    assert None not in chosen, f"{label} {platform} lacks one of {groups}"
    plan = make_plan(parse_manifest(data, label=label), platform=platform, base_url=BASE, profile=profile)
    assert plan.profile == profile
    _check_items(plan, raw, [c for c in chosen if c], platform)


@pytest.mark.parametrize("label", ["13.2.0", "13.3.0"])
def test_cuda_compat_variant_is_planned(shared_manifests: Path, label: str) -> None:
    if not (shared_manifests / f"redistrib_{label}.json").is_file():
        pytest.skip(f"redistrib_{label}.json not saved")
    data, raw = _load(label)
    train = ".".join(label.split(".")[:2])
    plan = make_plan(parse_manifest(data, label=label), platform="linux-sbsa", base_url=BASE, profile=None,
                     components=["cuda_compat"])
    (item,) = plan.items
    assert item.archive.relative_path == raw["cuda_compat"]["linux-sbsa"][f"cuda{train}"]["relative_path"]
    assert item.url.endswith(f"_cuda{train}-archive.tar.xz")


# -- rules, on small manifests ------------------------------------------------------------------------
def _manifest(label: str, comps: dict[str, Any]) -> Manifest:
    """comps: name -> list of platforms (flat entries) or {platform: [variant, ...]} (nested)."""
    doc: dict[str, Any] = {"release_label": label, "release_date": "2026-01-01"}
    for i, (name, plats) in enumerate(comps.items()):
        body: dict[str, Any] = {"name": name, "version": f"1.{i}"}
        for plat in plats:
            def entry(suffix: str = "", *, name: str = name, plat: str = plat, i: int = i) -> dict[str, str]:
                return {"relative_path": f"{name}/{plat}/{name}-{plat}{suffix}.tar.xz",
                        "sha256": f"{i:064x}", "size": str(100 + i)}
            if isinstance(plats, dict):
                body[plat] = {v: entry("_" + v) for v in plats[plat]}
            else:
                body[plat] = entry()
        doc[name] = body
    return parse_manifest(json.dumps(doc), label=label)


BOTH = ["linux-x86_64", "windows-x86_64"]
NVCC_13_SET = {"cuda_nvcc": BOTH, "cuda_cudart": BOTH, "cuda_cccl": BOTH, "cuda_crt": BOTH, "libnvvm": BOTH,
               "cuda_profiler_api": BOTH, "cuda_nvtx": BOTH, "cuda_gdb": ["linux-x86_64"]}


def test_unknown_platform_lists_the_releases_platforms() -> None:
    with pytest.raises(PlanError) as info:
        make_plan(_manifest("13.0.1", NVCC_13_SET), platform="solaris-sparc", base_url=BASE)
    assert (info.value.platform, info.value.release) == ("solaris-sparc", "13.0.1")
    assert "platforms in this release: linux-x86_64, windows-x86_64" in str(info.value)


def test_unknown_profile_lists_profiles() -> None:
    with pytest.raises(UsageError, match=r"unknown profile 'cuda'; profiles: build, nvcc, runtime, torch"):
        make_plan(_manifest("13.0.1", NVCC_13_SET), platform="linux-x86_64", base_url=BASE, profile="cuda")


def test_nothing_to_install() -> None:
    with pytest.raises(PlanError, match="nothing to install"):
        make_plan(_manifest("13.0.1", NVCC_13_SET), platform="linux-x86_64", base_url=BASE, profile=None)


@pytest.mark.parametrize(("component", "platform", "message"), [
    pytest.param("cuda_gdb", "windows-x86_64",
                 "component cuda_gdb of CUDA 13.0.1 has no archive for platform windows-x86_64 "
                 "(it has: linux-x86_64)", id="linux-only-on-windows"),
    pytest.param("cuda_nope", "linux-x86_64",
                 "CUDA 13.0.1 has no component cuda_nope (needed for platform linux-x86_64)", id="absent"),
    pytest.param("nope_a|nope_b", "linux-x86_64",
                 "CUDA 13.0.1 has no component nope_a or nope_b", id="absent-alternatives"),
])
def test_missing_component(component: str, platform: str, message: str) -> None:
    with pytest.raises(PlanError) as info:
        make_plan(_manifest("13.0.1", NVCC_13_SET), platform=platform, base_url=BASE, components=[component])
    assert message in str(info.value)
    assert (info.value.component, info.value.release, info.value.platform) == (component, "13.0.1", platform)


def test_since_keeps_13x_components_out_of_12x() -> None:
    twelve = {k: v for k, v in NVCC_13_SET.items() if k not in ("cuda_crt", "libnvvm")}
    plan = make_plan(_manifest("12.9.1", twelve), platform="linux-x86_64", base_url=BASE)
    assert plan.components == ("cuda_nvcc", "cuda_cudart", "cuda_cccl", "cuda_profiler_api", "cuda_nvtx")
    missing_crt = {k: v for k, v in NVCC_13_SET.items() if k != "cuda_crt"}
    with pytest.raises(PlanError) as info:
        make_plan(_manifest("13.0.1", missing_crt), platform="linux-x86_64", base_url=BASE)
    assert info.value.component == "cuda_crt"


@pytest.mark.parametrize(("comps", "spec", "expected"), [
    pytest.param({"a": ["windows-x86_64"], "b": ["linux-x86_64"]}, "a|b", "b", id="first-with-the-platform"),
    pytest.param({"a": ["linux-x86_64"], "b": ["linux-x86_64"]}, "a|b", "a", id="first-wins"),
    pytest.param({"b": ["linux-x86_64"]}, "a|b", "b", id="renamed"),
    pytest.param({"a": ["linux-x86_64"]}, " a | ", "a", id="spaces-and-empty-alternative"),
])
def test_alternatives(comps: dict[str, Any], spec: str, expected: str) -> None:
    plan = make_plan(_manifest("13.0.1", comps), platform="linux-x86_64", base_url=BASE, profile=None,
                     components=[spec])
    assert plan.components == (expected,)


def test_duplicates_are_planned_once() -> None:
    plan = make_plan(_manifest("13.0.1", NVCC_13_SET), platform="linux-x86_64", base_url=BASE,
                     components=["cuda_nvcc", "cuda_gdb", "cuda_gdb|cuda_nvcc"])
    assert plan.components == ("cuda_nvcc", "cuda_cudart", "cuda_cccl", "cuda_crt", "libnvvm",
                               "cuda_profiler_api", "cuda_nvtx", "cuda_gdb")


@pytest.mark.parametrize(("label", "variants", "expected"), [
    pytest.param("13.3.1", ["cuda13.2", "cuda13.3"], "cuda13.3", id="major-minor-match"),
    pytest.param("13.3.1", ["cuda12", "cuda13"], "cuda13", id="major-match"),
    pytest.param("13.3.1", ["cuda13.2"], "cuda13.2", id="single-variant"),
])
def test_variant_choice(label: str, variants: list[str], expected: str) -> None:
    m = _manifest(label, {"cuda_compat": {"linux-x86_64": variants}})
    plan = make_plan(m, platform="linux-x86_64", base_url=BASE, profile=None, components=["cuda_compat"])
    assert plan.items[0].archive.relative_path.endswith(f"_{expected}.tar.xz")


def test_ambiguous_variants_are_an_error() -> None:
    m = _manifest("13.3.1", {"cuda_compat": {"linux-x86_64": ["cuda12.8", "cuda12.9"]}})
    with pytest.raises(PlanError) as info:
        make_plan(m, platform="linux-x86_64", base_url=BASE, profile=None, components=["cuda_compat"])
    assert "cuda12.8, cuda12.9" in str(info.value)
    assert (info.value.component, info.value.platform) == ("cuda_compat", "linux-x86_64")


def test_json_round_trip_and_content_key() -> None:
    m = _manifest("13.0.1", NVCC_13_SET)
    plan = make_plan(m, platform="linux-x86_64", base_url=BASE, components=["cuda_gdb"])
    back = plan_from_json(json.loads(json.dumps(plan.to_json())))
    assert back == plan
    assert plan.to_json()["total_size"] == sum(100 + i for i in range(8))
    elsewhere = make_plan(m, platform="linux-x86_64", base_url="file:///srv/mirror/", components=["cuda_gdb"])
    assert elsewhere.content_key() == plan.content_key()
    assert elsewhere.items[0].url == "file:///srv/mirror/cuda_nvcc/linux-x86_64/cuda_nvcc-linux-x86_64.tar.xz"
    fewer = make_plan(m, platform="linux-x86_64", base_url=BASE)
    assert fewer.content_key() != plan.content_key()


@pytest.mark.parametrize(("base", "expected"), [
    pytest.param("https://h/redist/", "https://h/redist/a/b.zip", id="slash"),
    pytest.param("https://h/redist", "https://h/redist/a/b.zip", id="no-slash"),
    pytest.param("file:///m//", "file:///m/a/b.zip", id="double-slash"),
])
def test_join_url(base: str, expected: str) -> None:
    assert join_url(base, "a/b.zip") == expected
