"""The MSVC toolset chosen on a Windows host: env, doctor and the action's install step, under the
Windows CPython, with the fake Visual Studio of tests/fakevs.py (VS 2026 with MSVC 14.50 and 14.44
side by side, VS 2022 with 14.43; each cl.exe clang posing as that MSVC) and real CUDA 13.0 and 13.4
trees from NVIDIA's wheels. CUDA 13.0's host_config.h refuses MSVC 14.50 (_MSC_VER 1950): 14.44 is
chosen; 13.4 takes 14.50.

Runs only under a Windows CPython; ``tests/test_windows_host.py`` builds the layout and the trees on
the Linux side and names them in ``CUDAREDIST_WINDOWS_HOSTCC`` (a JSON file).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(sys.platform != "win32", reason="a Windows host (on Linux, tests/test_windows_host.py "
                       "runs this module under the Windows CPython)"),
]
VAR = "CUDAREDIST_WINDOWS_HOSTCC"
ROOT = Path(__file__).resolve().parents[2]
EXPECTED = {"13.0": "14.44.35207", "13.4": "14.50.35717"}


@pytest.fixture(scope="module")
def setup() -> dict[str, Any]:
    given = os.environ.get(VAR)
    if not given:
        if os.environ.get("CI"):
            pytest.fail(f"{VAR} is not set although CI is set (tests/test_windows_host.py sets it)")
        pytest.skip(f"{VAR} names no fake Visual Studio layout (tests/test_windows_host.py builds one)")
    found: dict[str, Any] = json.loads(Path(given).read_text(encoding="utf-8"))
    return found


def runner_env(setup: dict[str, Any], **extra: str) -> dict[str, str]:
    """A runner's plain shell: no cl.exe on PATH, the Visual Studio layout where vswhere is looked for."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CUDA", "NVCC_", "GITHUB_", "CR_"))}
    env.pop("INCLUDE", None)
    env["PROGRAMFILES(X86)"] = setup["layout"]["ProgramFiles(x86)"]
    env["PATH"] = os.pathsep.join(p for p in os.environ.get("PATH", "").split(os.pathsep)
                                  if "Microsoft Visual Studio" not in p)
    return env | extra


def cudaredist(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    r = subprocess.run([sys.executable, "-m", "cudaredist", *args], env=env, capture_output=True, text=True,
                       timeout=600)
    print(f"$ cudaredist {' '.join(args)}\n{r.stderr}{r.stdout}")
    return r


def toolset(setup: dict[str, Any], version: str) -> str:
    vs = "18\\Enterprise" if version.startswith(("14.50", "14.44")) else "2022\\BuildTools"
    base = setup["layout"]["ProgramFiles" if vs.startswith("18") else "ProgramFiles(x86)"]
    return f"{base}\\Microsoft Visual Studio\\{vs}\\VC\\Tools\\MSVC\\{version}"


@pytest.mark.parametrize("train", ["13.0", "13.4"])
def test_env_exports_the_toolset_the_tree_accepts(setup: dict[str, Any], train: str) -> None:
    version = EXPECTED[train]
    short = ".".join(version.split(".")[:2])
    cl = f"{toolset(setup, version)}\\bin\\Hostx64\\x64\\cl.exe"
    r = cudaredist("env", "--prefix", setup["trees"][train], env=runner_env(setup))
    assert r.returncode == 0, r.stderr
    assert f"$env:NVCC_CCBIN = '{cl}'" in r.stdout and f"$env:CUDAHOSTCXX = '{cl}'" in r.stdout
    assert f"$env:VCToolsVersion = '{version}'" in r.stdout
    assert f"'{toolset(setup, version)}\\include'" in r.stdout  # INCLUDE
    assert f"note: host compiler: MSVC {version} (Visual Studio Enterprise 2026)" in r.stderr
    assert f'cmake -G "Visual Studio 18 2026" -T version={short}' in r.stderr
    assert f"vcvars64.bat -vcvars_ver={short}" in r.stderr
    if train == "13.0":
        assert "MSVC 14.50.35717 (Visual Studio Enterprise 2026) is refused by CUDA 13.0" in r.stderr
    tree = setup["trees"][train]
    found = json.loads(cudaredist("env", "--prefix", tree, "--json", env=runner_env(setup)).stdout)
    assert found["cmake_args"] == ["-T", f"version={short}"] and found["set"]["NVCC_CCBIN"] == cl
    # off: nothing of a compiler; a named toolset: that one
    off = cudaredist("env", "--prefix", tree, "--host-compiler", "off", env=runner_env(setup))
    assert off.returncode == 0 and "NVCC_CCBIN" not in off.stdout and "host compiler" not in off.stderr
    named = cudaredist("env", "--prefix", tree, env=runner_env(setup, CUDAREDIST_HOST_COMPILER="14.43"))
    assert "MSVC\\14.43.34808\\bin\\Hostx64\\x64\\cl.exe'" in named.stdout


def prompt_env(setup: dict[str, Any], tree: str) -> dict[str, str]:
    """VS 2026's developer prompt (its default toolset, 14.50, on PATH and in INCLUDE), the tree on PATH."""
    ts = toolset(setup, "14.50.35717")
    sdk = f"{setup['layout']['ProgramFiles(x86)']}\\Windows Kits\\10\\Include\\10.0.26100.0"
    env = runner_env(setup)
    env["PATH"] = os.pathsep.join([f"{ts}\\bin\\Hostx64\\x64", f"{tree}\\bin", f"{tree}\\bin\\x64",
                                   env["PATH"]])
    env["INCLUDE"] = os.pathsep.join([f"{ts}\\include", f"{sdk}\\ucrt"])
    return env


def test_doctor_names_the_side_by_side_toolset(setup: dict[str, Any]) -> None:
    tree = setup["trees"]["13.0"]
    r = cudaredist("doctor", "--prefix", tree, "--json", env=prompt_env(setup, tree))
    checks = {c["name"]: c for c in json.loads(r.stdout)["checks"]}
    host = checks["host-compiler"]
    assert host["status"] == "fail" and "19.50.35717" in host["detail"]
    assert "unsupported Microsoft Visual Studio version" in host["detail"]
    assert "use MSVC 14.44.35207 (Visual Studio Enterprise 2026), installed here" in host["fix"]
    assert "vcvars64.bat -vcvars_ver=14.44" in host["fix"] and "-T version=14.44" in host["fix"]
    assert "install a Visual Studio" not in host["fix"]
    # the probe's failure is explained, with a fix that works here, never "the checks above say more"
    assert checks["probe"]["status"] == "fail" and "above" not in checks["probe"]["fix"]
    # the 13.4 tree takes the prompt's 14.50 (its CCCL wants /Zc:preprocessor, given in CL)
    tree = setup["trees"]["13.4"]
    env = prompt_env(setup, tree) | {"CL": "/Zc:preprocessor"}
    r = cudaredist("doctor", "--prefix", tree, "--json", env=env)
    host = next(c for c in json.loads(r.stdout)["checks"] if c["name"] == "host-compiler")
    assert "passes CUDA 13.4" in host["detail"] and "19.50.35717" in host["detail"], host


def _parse(text: str) -> dict[str, str]:
    out, lines = {}, text.splitlines()
    i = 0
    while i < len(lines):
        name, _sep, delim = lines[i].partition("<<")
        j = lines.index(delim, i + 1)
        out[name] = "\n".join(lines[i + 1:j])
        i = j + 1
    return out


@pytest.mark.parametrize("train", ["13.0", "13.4"])
def test_the_action_exports_the_toolset(setup: dict[str, Any], train: str) -> None:
    """action/steps.py install on a runner whose tree is there already (a no-op install, offline)."""
    version = EXPECTED[train]
    with tempfile.TemporaryDirectory() as d:
        files = {n: os.path.join(d, n.lower()) for n in ("GITHUB_OUTPUT", "GITHUB_ENV", "GITHUB_PATH")}
        for f in files.values():
            Path(f).write_text("", encoding="utf-8")
        env = runner_env(setup, **files, CR_PYTHON=sys.executable, CR_TRAIN=train, CR_TRAINS=train,
                         CR_PREFIX=setup["trees"][train], CR_SOURCE="pypi", CR_PROFILE="nvcc",
                         CR_HOST_COMPILER="auto", RUNNER_TEMP=d, CR_CUDAREDIST="cudaredist")
        r = subprocess.run([sys.executable, str(ROOT / "action" / "steps.py"), "install"], env=env,
                           capture_output=True, text=True, timeout=600)
        print(r.stdout, r.stderr)
        assert r.returncode == 0, r.stdout + r.stderr
        outputs = _parse(Path(files["GITHUB_OUTPUT"]).read_text(encoding="utf-8"))
        exported = _parse(Path(files["GITHUB_ENV"]).read_text(encoding="utf-8"))
        path = Path(files["GITHUB_PATH"]).read_text(encoding="utf-8").splitlines()
    cl = f"{toolset(setup, version)}\\bin\\Hostx64\\x64\\cl.exe"
    assert outputs["host-compiler"] == cl and outputs["cmake-args"] == f"-T version={version[:5]}"
    assert exported["NVCC_CCBIN"] == exported["CUDAHOSTCXX"] == cl and exported["VCToolsVersion"] == version
    assert exported["INCLUDE"].startswith(f"{toolset(setup, version)}\\include;")
    assert f"{toolset(setup, version)}\\bin\\Hostx64\\x64" in path
    assert f"set NVCC_CCBIN={cl}" in r.stderr
