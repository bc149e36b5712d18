"""``cudaredist profiles`` and the profile data behind it: both sources name the same components."""

from __future__ import annotations

import json
import sys

import pytest
from typer.testing import CliRunner

from cudaredist.cli import app
from cudaredist.profiles import data_dir, get_profile, profile_names
from cudaredist.sources.pypi.wheels import parse_wheel_data

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib


def cli(*args: str) -> tuple[int, str, str]:
    r = CliRunner().invoke(app, list(args))
    return r.exit_code, r.stdout, r.stderr


def test_json_per_train_applies_the_since_rules() -> None:
    code, out, _ = cli("profiles", "--json", "--train", "12.9", "--train", "13.0", "--train", "11.7")
    assert code == 0
    rows = {r["name"]: r for r in json.loads(out)["profiles"]}
    assert sorted(rows) == ["build", "nvcc", "runtime", "torch"]
    nvcc = rows["nvcc"]["trains"]
    assert nvcc["13.0"] == ["cuda_nvcc", "cuda_cudart", "cccl|cuda_cccl", "cuda_crt", "libnvvm",
                            "cuda_profiler_api", "cuda_nvtx", "visual_studio_integration"]
    assert nvcc["12.9"] == ["cuda_nvcc", "cuda_cudart", "cccl|cuda_cccl", "cuda_profiler_api", "cuda_nvtx",
                            "visual_studio_integration"]
    # the MSBuild files come with every nvcc profile, on Windows only
    platforms = {c["name"]: c["platforms"] for c in rows["torch"]["components"]}
    assert platforms["visual_studio_integration"] == ["windows-x86_64", "windows-arm64"]
    assert platforms["cuda_nvcc"] is None
    assert "cuda_profiler_api" not in nvcc["11.7"]  # in cuda_cudart before 11.8
    torch = rows["torch"]
    assert torch["extends"] == "nvcc"
    for comp in ("libcublas", "libcusparse", "libcusolver", "libcurand", "libcufft", "cuda_nvrtc"):
        assert comp in torch["trains"]["12.9"] and comp in torch["trains"]["13.0"]
    assert {c["name"]: c["since"] for c in torch["components"]}["libnvjitlink"] == "12.0"
    # a profile that extends another lists each component once
    assert len(rows["build"]["trains"]["13.0"]) == len(set(rows["build"]["trains"]["13.0"]))


def test_text_groups_components_by_first_release() -> None:
    code, out, _ = cli("profiles", "--profile", "nvcc")
    assert code == 0
    lines = out.splitlines()
    assert lines[0].startswith("nvcc: compile and link CUDA C++")
    assert any(ln.split() == ["from", "13.0:", "cuda_crt", "libnvvm"] for ln in lines)
    assert any(ln.split() == ["from", "11.8:", "cuda_profiler_api"] for ln in lines)
    assert any(ln.split()[:2] == ["every", "release:"]
               and ln.endswith("visual_studio_integration (windows-x86_64 and windows-arm64 only)")
               for ln in lines)


def test_a_spec_for_some_platforms() -> None:
    from cudaredist.errors import ManifestError
    from cudaredist.profiles import parse_spec

    spec = parse_spec({"name": "x", "platforms": ["windows-arm64"], "missing": "why"})
    assert spec.applies_to("13.4.1", "windows-arm64") and not spec.applies_to("13.4.1", "linux-x86_64")
    assert spec.applies_to("13.4.1") and spec.missing == "why"
    with pytest.raises(ManifestError, match="platforms must be a list of platform names"):
        parse_spec({"name": "x", "platforms": "windows-arm64"})


@pytest.mark.parametrize(("args", "message"), [
    pytest.param(["--profile", "nope"], "unknown profile 'nope'; profiles: build, nvcc, runtime, torch",
                 id="unknown-profile"),
    pytest.param(["--train", "13.x"], "'13.x' is not a CUDA train or release", id="bad-train"),
])
def test_bad_input_is_one_paragraph(args: list[str], message: str) -> None:
    code, out, err = cli("profiles", *args)
    assert code != 0 and out == ""
    assert message in err and "Traceback" not in err


def test_both_sources_offer_every_profile_and_map_every_component() -> None:
    """Every component of every profile has a wheel mapped in pypi.toml, and a profile of the same name;
    one the wheels lack (the MSBuild files) is optional, with a note from either source."""
    raw = tomllib.loads((data_dir() / "pypi.toml").read_text())
    data = parse_wheel_data(raw)
    assert sorted(data.profiles) == sorted(profile_names())
    mapped = {comp for comp, _renames in data.packages.values()}
    mapped |= {new for _comp, renames in data.packages.values() for _since, new in renames}
    for name in profile_names():
        for spec in get_profile(name).specs:
            if spec.missing:
                assert any(n in note.text for note in data.notes for n in spec.names), spec
                continue
            assert any(n in mapped for n in spec.names), f"{name}: no wheel maps to {spec}"
