"""The GitHub actions' steps (action/steps.py) run directly, as their bash steps run them: the input
checks, the install step's outputs and environment, the ::error:: annotations, doctor's modes, and
the two action.yml files agreeing. tests/e2e/test_action.py runs the same through a real runner."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from cudaredist.profiles import host_platform
from tests.archives import build_mirror, toolkit
from tests.test_env import parse_github_env

ROOT = Path(__file__).resolve().parents[1]
STEPS = ROOT / "action" / "steps.py"
yaml = pytest.importorskip("yaml")
DEFAULTS = {"CR_PROFILE": "nvcc", "CR_DOCTOR": "report"}
HOST = host_platform()
WINDOWS = sys.platform == "win32"
needs_venv = pytest.mark.skipif(importlib.util.find_spec("venv") is None,
                                reason="this Python has no venv module (the embeddable Windows CPython "
                                       "under Wine); ci.yml's action job builds the tool on Windows")


Files = dict[str, Path]


def step(command: str, tmp_path: Path, **env: str | None) -> tuple[subprocess.CompletedProcess[str], Files]:
    """Run one step command like the action's bash step does; env None drops a variable."""
    files = {n: tmp_path / n.lower() for n in ("GITHUB_OUTPUT", "GITHUB_ENV", "GITHUB_PATH")}
    for f in files.values():
        f.write_text("")
    base = {k: v for k, v in os.environ.items() if not k.startswith(("CR_", "CUDA_PATH", "GITHUB_"))}
    full = base | DEFAULTS | {k: str(v) for k, v in files.items()}
    full |= {k: v for k, v in env.items() if v is not None}
    full = {k: v for k, v in full.items() if env.get(k, "") is not None}
    r = subprocess.run([sys.executable, str(STEPS), command], env=full, capture_output=True, text=True,
                       timeout=300, cwd=tmp_path)
    return r, files


def outputs(files: dict[str, Path]) -> dict[str, str]:
    return parse_github_env(files["GITHUB_OUTPUT"].read_text(encoding="utf-8"))


@pytest.mark.parametrize(("given", "said"), [
    pytest.param({}, "give 'train' (e.g. '13.4'", id="nothing"),
    pytest.param({"CR_TRAIN": "13.0", "CR_TRAINS": "13.0 13.2"}, "give either 'train' or 'trains', not both",
                 id="both"),
    pytest.param({"CR_TRAIN": "13.0 13.2"}, "'train' takes one train", id="two-in-train"),
    pytest.param({"CR_TRAIN": "latest"}, "'latest' is not a CUDA train", id="not-a-train"),
    pytest.param({"CR_TRAINS": "13.0 13.0"}, "'trains' names 13.0 more than once", id="twice"),
    pytest.param({"CR_TRAINS": "13.0", "CR_PREFIX": "x"}, "'prefix' goes with 'train'", id="prefix-trains"),
    pytest.param({"CR_TRAIN": "13", "CR_PLATFORM": "Windows x64"}, "is not a platform", id="platform"),
    pytest.param({"CR_TRAIN": "13", "CR_PROFILE": "all"}, "give one of nvcc, runtime, build", id="profile"),
    pytest.param({"CR_TRAIN": "13", "CR_SOURCE": "conda"}, "give nvidia or pypi", id="source"),
    pytest.param({"CR_TRAIN": "13", "CR_WITH": "cudnn nccl"}, "'with: nccl': nccl is not a product: give "
                 "cudnn, cutensor, cusparselt, cudss", id="with-unknown"),
    pytest.param({"CR_TRAIN": "13", "CR_WITH": "cudnn=latest"}, "'latest' is not a release", id="with-spec"),
    pytest.param({"CR_TRAIN": "13", "CR_DOCTOR": "yes"}, "give report, fail or off", id="doctor"),
    pytest.param({"CR_TRAIN": "13", "CR_CACHE": "yes"}, "'cache: yes' is not a boolean", id="cache"),
    pytest.param({"CR_TRAIN": "13", "CR_HOST_COMPILER": "-ccbin"},
                 "'host-compiler: -ccbin' is not a compiler", id="host-compiler"),
    pytest.param({"CR_TRAIN": "13", "CR_COMPAT": "yes"}, "'compat: yes' is not a mode: give auto, on or off",
                 id="compat"),
])
def test_bad_inputs_are_errors_before_anything_runs(tmp_path: Path, given: dict[str, str], said: str) -> None:
    r, files = step("check", tmp_path, **given)
    assert r.returncode == 2, r.stdout
    assert "::error title=cudaredist input::" in r.stdout and said in r.stdout, r.stdout
    assert "nothing was installed" in r.stdout
    assert outputs(files) == {}


def test_good_inputs_give_the_trains(tmp_path: Path) -> None:
    r, files = step("check", tmp_path, CR_TRAINS=" 13.0   13.2 ", CR_PLATFORM="windows-x86_64",
                    CR_CACHE="false")
    assert r.returncode == 0, r.stdout
    assert outputs(files) == {"trains": "13.0 13.2"}


def install_env(tmp_path: Path, mirror: Path, **env: str) -> dict[str, str | None]:
    temp = tmp_path / "runner temp"
    temp.mkdir(exist_ok=True)
    return {"CR_PYTHON": sys.executable, "RUNNER_TEMP": str(temp), "CUDAREDIST_BASE_URL": str(mirror),
            "CR_CUDAREDIST": "/tool/bin/cudaredist", "CR_TRAINS": env.get("CR_TRAIN", "")} | env


def test_install_outputs_are_json_from_resolved_paths(mirror: Path, tmp_path: Path) -> None:
    """A prefix with backslashes (and quotes, where a file name may have them) relative to the
    workspace: cuda-paths is JSON of the absolute path, the same one CUDA_PATH and cuda-path have."""
    given = r"a\_temp\cuda 13.0" if WINDOWS else r'D:\a\_temp\cuda "13.0"'
    r, files = step("install", tmp_path, **install_env(tmp_path, mirror, CR_TRAIN="13.0", CR_PREFIX=given))
    assert r.returncode == 0, r.stdout + r.stderr
    prefix = str(tmp_path / given)
    out = outputs(files)
    assert json.loads(out["cuda-paths"]) == {"13.0": prefix}
    assert out["cuda-path"] == prefix and out["release"] == "13.0.1"
    assert out["cudaredist"] == "/tool/bin/cudaredist"
    assert out["compat"] == "false"  # no compat/ in the tree: LD_LIBRARY_PATH as env leaves it
    assert json.loads(Path(out["sbom"]).read_text())["bomFormat"] == "CycloneDX"  # the install wrote it
    # a Windows tree (NVIDIA's MSBuild files) on Windows: the arguments for CMake's Visual Studio generator
    assert out["cmake-args"] == (f'-T "cuda={prefix}"' if WINDOWS else "")
    exported = parse_github_env(files["GITHUB_ENV"].read_text())
    assert exported["CUDA_PATH"] == exported["CUDA_PATH_V13_0"] == prefix
    assert os.path.join(prefix, "bin") in files["GITHUB_PATH"].read_text().splitlines()


@pytest.mark.skipif(WINDOWS, reason="a Linux tree and g++ (Windows: tests/windows/test_hostcc_windows.py)")
def test_install_exports_the_host_compiler_named_or_none(mirror: Path, tmp_path: Path) -> None:
    gxx = shutil.which("g++")
    if gxx is None:
        pytest.skip("no g++ on this host")
    given = install_env(tmp_path, mirror, CR_TRAIN="13.0", CR_HOST_COMPILER=gxx)
    r, files = step("install", tmp_path, **given)
    assert r.returncode == 0, r.stdout + r.stderr
    exported = parse_github_env(files["GITHUB_ENV"].read_text())
    assert exported["NVCC_CCBIN"] == exported["CUDAHOSTCXX"] == gxx
    assert outputs(files)["host-compiler"] == gxx
    assert "named by --host-compiler" in r.stderr and f"set NVCC_CCBIN={gxx}" in r.stderr
    # off (and auto, where nvcc's default passes the tree's header): nothing exported
    for mode in ("off", "auto"):
        r, files = step("install", tmp_path, **(given | {"CR_HOST_COMPILER": mode}))
        assert r.returncode == 0, r.stdout + r.stderr
        assert "NVCC_CCBIN" not in parse_github_env(files["GITHUB_ENV"].read_text()), mode
        assert outputs(files)["host-compiler"] == ""


@pytest.mark.parametrize(("runner", "given", "kept"), [
    pytest.param("github-hosted", {}, False, id="hosted"),
    pytest.param("github-hosted", {"CR_CACHE": "true", "CR_CACHE_UNPACKED": "false"}, False,
                 id="hosted-actions-cache-of-archives"),
    pytest.param("github-hosted", {"CR_CACHE": "true", "CR_CACHE_UNPACKED": "true"}, True,
                 id="hosted-actions-cache-of-unpacked"),
    pytest.param("github-hosted", {"CUDAREDIST_CACHE_UNPACKED": "true"}, True, id="hosted-job-says-keep"),
    pytest.param("self-hosted", {}, True, id="self-hosted"),
    pytest.param(None, {"CUDAREDIST_CACHE_UNPACKED": "0"}, False, id="job-says-no"),
])
def test_install_keeps_unpacked_entries_only_where_they_outlive_the_job(
        mirror: Path, tmp_path: Path, runner: str | None, given: dict[str, str], kept: bool) -> None:
    """A GitHub-hosted runner's cache dies with the job (unless the Actions cache keeps the unpacked
    entries): the archives are extracted straight into the prefix, each file written once."""
    cache = tmp_path / "cache"
    env = install_env(tmp_path, mirror, CR_TRAIN="13.0", CUDAREDIST_CACHE_DIR=str(cache))
    env |= {"RUNNER_ENVIRONMENT": runner, "CUDAREDIST_CACHE_UNPACKED": None} | given  # None: not set
    r, files = step("install", tmp_path, **env)
    assert r.returncode == 0, r.stdout + r.stderr
    entries = [p for p in (cache / "unpacked").glob("*") if not p.name.startswith(".")]
    assert bool(entries) == kept and any((cache / "archives").iterdir())
    assert (Path(outputs(files)["cuda-path"]) / "bin").is_dir()


def test_install_with_a_product(mirror: Path, tmp_path: Path) -> None:
    """`with: cudnn` is passed as --with: cuDNN lands in the tree the action exports."""
    from tests.test_products_install import LINUX_CUDNN, WINDOWS_CUDNN, cublas, product_mirror

    build_mirror(mirror, "13.0.1", toolkit(HOST) + [cublas(HOST)])
    members = WINDOWS_CUDNN if HOST.startswith("windows") else LINUX_CUDNN
    product_mirror(mirror / "cudnn" / "redist", "cudnn", "9.27.0", "cudnn", "9.27.0.42",
                   {HOST: {"cuda13": members}})
    r, files = step("install", tmp_path, **install_env(tmp_path, mirror, CR_TRAIN="13.0", CR_WITH="cudnn",
                                                        CR_PREFIX="cuda"))
    assert r.returncode == 0, r.stdout + r.stderr
    assert (Path(outputs(files)["cuda-path"]) / "include" / "cudnn.h").is_file()


def test_install_of_several_trains(tmp_path: Path) -> None:
    mirror = tmp_path / "mirror"
    build_mirror(mirror, "13.0.1", toolkit(HOST))
    build_mirror(mirror, "13.2.0", toolkit(HOST, "13.2.0"))
    env = install_env(tmp_path, mirror, CR_TRAINS="13.2 13.0")
    r, files = step("install", tmp_path, **env)
    assert r.returncode == 0, r.stdout + r.stderr
    toolkits = Path(env["RUNNER_TEMP"]) / "cudaredist-toolkits"
    p132, p130 = (str(toolkits / f"cuda-{v}-{HOST}") for v in ("13.2.0", "13.0.1"))
    out = outputs(files)
    assert json.loads(out["cuda-paths"]) == {"13.2": p132, "13.0": p130}
    assert out["cuda-path"] == p132 and out["release"] == "13.2.0"  # the first one asked for
    exported = parse_github_env(files["GITHUB_ENV"].read_text())
    assert exported["CUDA_PATH"] == exported["CUDA_PATH_V13_2"] == p132
    assert exported["CUDA_PATH_V13_0"] == p130
    assert exported["CUDAREDIST_INSTALL_DIR"] == str(toolkits)


def test_several_trains_when_one_is_there_already(tmp_path: Path) -> None:
    """install --json lists the no-op first: the outputs still follow the trains as asked."""
    mirror = tmp_path / "mirror"
    build_mirror(mirror, "13.0.1", toolkit(HOST))
    build_mirror(mirror, "13.2.0", toolkit(HOST, "13.2.0"))
    (tmp_path / "first").mkdir()
    r, _files = step("install", tmp_path / "first", **install_env(tmp_path, mirror, CR_TRAINS="13.2"))
    assert r.returncode == 0, r.stdout + r.stderr
    r, files = step("install", tmp_path, **install_env(tmp_path, mirror, CR_TRAINS="13.0 13.2"))
    assert r.returncode == 0, r.stdout + r.stderr
    assert "already installed" in r.stdout  # the tool's summary lines are in the log
    toolkits = tmp_path / "runner temp" / "cudaredist-toolkits"
    out = outputs(files)
    assert json.loads(out["cuda-paths"]) == {t: str(toolkits / f"cuda-{v}-{HOST}")
                                             for t, v in (("13.0", "13.0.1"), ("13.2", "13.2.0"))}
    assert out["release"] == "13.0.1"


def test_cudaredist_errors_become_annotations(mirror: Path, tmp_path: Path) -> None:
    r, files = step("install", tmp_path, **install_env(tmp_path, mirror, CR_TRAIN="13.5"))
    assert r.returncode == 1
    line = next(ln for ln in r.stdout.splitlines() if ln.startswith("::error"))
    assert line.startswith("::error title=cudaredist install failed::CUDA train 13.5 has no release at ")
    assert line.endswith("published trains: 12.9, 13.0."), line
    assert "error: CUDA train 13.5" in r.stderr  # the tool's own message stays in the log too
    assert outputs(files) == {} and files["GITHUB_ENV"].read_text() == ""


def test_cache_key_and_paths_do_not_depend_on_the_runner_dirs(mirror: Path, tmp_path: Path) -> None:
    # POSIX: a home of the test's own; Windows: the user's (platformdirs asks the shell for it)
    home = Path.home() if WINDOWS else tmp_path / "home"
    home_env: dict[str, str | None] = {} if WINDOWS else {"HOME": str(home), "XDG_CACHE_HOME": None}
    keys, paths, dirs = set(), set(), set()
    for temp in ("t1", "t2"):
        work = tmp_path / temp
        work.mkdir()
        env = install_env(work, mirror, CR_TRAINS="13.0", RUNNER_OS="Linux", RUNNER_ARCH="X64")
        r, files = step("cache-key", work, **env, **home_env, CUDAREDIST_CACHE_DIR=None)
        assert r.returncode == 0, r.stdout + r.stderr
        out = outputs(files)
        keys.add(out["key"])
        paths.add(out["path"])
        dirs.add(out["cache-dir"])
    assert len(keys) == 1 and keys.pop().startswith("cudaredist-Linux-X64-default-archives-")
    (cache_dir,) = dirs
    literal = "~/" + Path(cache_dir).relative_to(home).as_posix()
    if not WINDOWS:
        assert literal == "~/.cache/cudaredist"
    assert paths == {f"{literal}/archives"}
    # the unpacked entries only when asked for, and then under their own key
    env = install_env(tmp_path / "t1", mirror, CR_TRAINS="13.0", CR_CACHE_UNPACKED="true")
    r, files = step("cache-key", tmp_path / "t1", **env, **home_env, CUDAREDIST_CACHE_DIR=None)
    assert r.returncode == 0, r.stdout + r.stderr
    assert outputs(files)["path"] == f"{literal}/archives\n{literal}/unpacked"
    assert "-archives+unpacked-" in outputs(files)["key"]


def test_both_actions_take_the_same_inputs_and_only_the_cache_one_uses_actions() -> None:
    core = yaml.safe_load((ROOT / "action.yml").read_text())
    cached = yaml.safe_load((ROOT / "cache" / "action.yml").read_text())
    assert all("uses" not in s for s in core["runs"]["steps"]), "the core action must need no other action"
    assert {s["uses"] for s in cached["runs"]["steps"] if "uses" in s} == {
        "actions/cache/restore@v4", "actions/cache/save@v4"}
    assert {k: v for k, v in cached["inputs"].items() if k in core["inputs"]} == core["inputs"]
    assert set(cached["inputs"]) - set(core["inputs"]) == {"cache", "cache-unpacked"}
    assert {k: v for k, v in cached["outputs"].items() if k in core["outputs"]} == core["outputs"]
    assert set(cached["outputs"]) - set(core["outputs"]) == {"cache-hit", "cache-key"}
    for action, prefix in ((core, "$GITHUB_ACTION_PATH/action/"), (cached, "$GITHUB_ACTION_PATH/../action/")):
        runs = [s["run"] for s in action["runs"]["steps"] if "run" in s]
        assert all(prefix in r for r in runs), runs


def test_workflows_parse_and_use_both_actions() -> None:
    ci = yaml.safe_load((ROOT / ".github" / "workflows" / "ci.yml").read_text())
    assert set(ci.get("on", ci.get(True))) >= {"push", "pull_request"}  # YAML 1.1 reads `on` as True
    oses = {os_ for job in ci["jobs"].values()
            for os_ in job.get("strategy", {}).get("matrix", {}).get("os", [])}
    assert {"ubuntu-latest", "windows-latest", "macos-latest"} <= oses
    # the Linux leg installs and runs exactly what .ci/run does (the same Debian packages, as root)
    assert any(s.get("if") == "runner.os == 'Linux'" and "bash .ci/run" in s.get("run", "")
               for s in ci["jobs"]["test"]["steps"])
    for path in ("./", "./cache"):
        action = yaml.safe_load((ROOT / path / "action.yml").read_text())
        used = [s for job in ci["jobs"].values() for s in job["steps"] if s.get("uses") == path]
        assert used, f"the workflow should exercise {path}"
        for s in used:
            assert set(s.get("with", {})) <= set(action["inputs"]), s


def _tool_cache_left(root: Path) -> list[str]:
    return sorted(p.name for p in (root / "cudaredist").iterdir()) if (root / "cudaredist").exists() else []


@needs_venv
def test_a_python_without_venv_is_an_error_that_says_what_to_install(tmp_path: Path) -> None:
    fake = tmp_path / "fake"
    (fake / "venv").mkdir(parents=True)
    (fake / "venv" / "__init__.py").write_text("")
    (fake / "venv" / "__main__.py").write_text(
        "import sys\nprint('The virtual environment was not created successfully because ensurepip is not "
        "available.', file=sys.stderr)\nsys.exit(1)\n")
    r, files = step("tool", tmp_path, RUNNER_TOOL_CACHE=str(tmp_path / "tools"), PYTHONPATH=str(fake))
    assert r.returncode == 1
    assert "::error title=cudaredist could not install itself::" in r.stdout
    assert "ensurepip is not available" in r.stdout and "apt-get install python3-venv" in r.stdout
    assert _tool_cache_left(tmp_path / "tools") == [] and outputs(files) == {}


@needs_venv
def test_a_failed_pip_install_leaves_nothing_in_the_tool_cache(tmp_path: Path) -> None:
    r, files = step("tool", tmp_path, RUNNER_TOOL_CACHE=str(tmp_path / "tools"), PIP_CONFIG_FILE=os.devnull,
                    PIP_NO_INDEX="1", PIP_FIND_LINKS=None, PIP_INDEX_URL=None)
    assert r.returncode == 1
    said = ("::error title=cudaredist could not install itself::pip install of the action's pinned "
            "dependencies")
    assert said in r.stdout
    assert "PIP_INDEX_URL" in r.stdout
    assert _tool_cache_left(tmp_path / "tools") == [] and outputs(files) == {}


def _pins() -> list[tuple[str, str, str, list[str]]]:
    """action/requirements.txt as (name, version, marker, hashes)."""
    pins = []
    for block in re.split(r"\n(?=[A-Za-z])", (ROOT / "action" / "requirements.txt").read_text()):
        head = block.split("\\")[0].strip()
        if not head or head.startswith("#"):
            continue
        spec, _, marker = head.partition(";")
        name, _, version = spec.strip().partition("==")
        pins.append((name, version, marker.strip(), re.findall(r"--hash=sha256:([0-9a-f]{64})", block)))
    return pins


@pytest.mark.parametrize("python", ["3.10", "3.11", "3.12", "3.13", "3.14"])
@pytest.mark.parametrize("system", ["linux", "win32", "darwin"])
def test_the_action_installs_every_dependency_pinned_with_hashes(python: str, system: str) -> None:
    """Every [project] dependency has exactly one pin on every runner the action supports, inside the
    range pyproject.toml allows, with the sha256 of its files: pip --require-hashes installs it."""
    import tomllib
    from packaging.markers import Marker
    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    env = {"python_version": python, "python_full_version": f"{python}.0", "sys_platform": system,
           "platform_system": {"linux": "Linux", "win32": "Windows", "darwin": "Darwin"}[system],
           "os_name": "nt" if system == "win32" else "posix", "implementation_name": "cpython",
           "platform_machine": "x86_64"}
    pins = [(canonicalize_name(n), v, h) for n, v, m, h in _pins() if not m or Marker(m).evaluate(env)]
    assert pins and all(h for _, _, h in pins), "every pin carries its files' hashes"
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    for dep in map(Requirement, project["dependencies"]):
        if dep.marker and not dep.marker.evaluate(env):
            continue
        versions = [v for n, v, _ in pins if n == canonicalize_name(dep.name)]
        assert len(versions) == 1, f"{dep.name}: pinned {versions} for Python {python} on {system}"
        assert dep.specifier.contains(versions[0], prereleases=True), \
            f"{dep.name}=={versions[0]} is outside {dep.specifier}: run action/update-pins.sh"
