"""A real consumer proves the tree: a CMake project (CUDA language, FindCUDAToolkit, thrust,
CUDA::cudart) configured and built against a linux-x86_64 tree that was installed from a
cudaredist-made mirror of real NVIDIA binaries, served by nginx."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from cudaredist.envexport import quote_sh
from tests.hosts import require_linux_x86_64
from tests.realmirror import (  # noqa: F401  (fixtures)
    host_free_env,
    nginx_serve,
    real_mirror_1302,
    real_wheel_cache,
)

pytestmark = [pytest.mark.e2e, pytest.mark.pypi]

PROJECT = Path(__file__).resolve().parent / "cmake_project"
# CUDA 13's nvcc.profile and FindCUDAToolkit's include/cccl handling want a recent CMake: the
# [test] extra installs one from PyPI next to this interpreter
MIN_CMAKE = (3, 25)

require_linux_x86_64()


def find_cmake() -> tuple[str, str]:
    """(path, version) of the newest usable cmake: this venv's (PyPI) first, then PATH's."""
    for candidate in (Path(sys.executable).parent / "cmake", shutil.which("cmake")):
        if candidate and os.access(candidate, os.X_OK):
            out = subprocess.run([str(candidate), "--version"], capture_output=True, text=True).stdout
            m = re.search(r"cmake version (\d+)\.(\d+)\.(\d+)", out)
            if m and tuple(int(x) for x in m.groups()[:2]) >= MIN_CMAKE:
                return str(candidate), ".".join(m.groups())
    raise AssertionError(f"no cmake >= {'.'.join(map(str, MIN_CMAKE))}: install the [test] extra "
                         "(it brings cmake from PyPI)")


def run(cmd: list[str], env: dict[str, str], **kw: object) -> subprocess.CompletedProcess[str]:
    r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600, **kw)  # type: ignore[call-overload]
    assert r.returncode == 0, f"{cmd[:3]} failed:\n{r.stdout[-4000:]}\n{r.stderr[-4000:]}"
    return r  # type: ignore[no-any-return]


def cudaredist(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return run([sys.executable, "-m", "cudaredist", *args], env)


def generator() -> list[str]:
    return ["-G", "Ninja"] if shutil.which("ninja", path="/usr/bin:/bin") else ["-G", "Unix Makefiles"]


def read_facts(build: Path) -> dict[str, str]:
    text = (build / "toolkit.txt").read_text()
    return dict(line.split("=", 1) for line in text.splitlines() if "=" in line)


def test_cmake_project_builds_against_an_installed_tree(real_mirror_1302: Path, nginx_serve,  # noqa: F811
                                                        tmp_path: Path) -> None:
    cmake, cmake_version = find_cmake()
    env = host_free_env(tmp_path / "cache")
    # the chain a CI image would use: a mirror made by the tool, served by a real web server
    mirror = tmp_path / "mirror"
    cudaredist("mirror", "13.0", "--platform", "linux-x86_64", "--base-url", str(real_mirror_1302),
               "--out", str(mirror), "--quiet", env=env)
    url = nginx_serve(mirror)
    prefix = tmp_path / "cuda 13.0"
    cudaredist("install", "13.0", "--base-url", url, "--prefix", str(prefix), "--platform", "linux-x86_64",
               "--cache-dir", str(tmp_path / "install cache"), env=env)

    nvcc = prefix / "bin" / "nvcc"
    m = re.search(r"release (\d+\.\d+), V(\d+\.\d+\.\d+)", run([str(nvcc), "--version"], env).stdout)
    assert m, "nvcc --version printed no version"
    nvcc_version = m.group(2)

    build = tmp_path / "build"
    configured = run([cmake, "-S", str(PROJECT), "-B", str(build), *generator(),
                      f"-DCMAKE_CUDA_COMPILER={nvcc}", "-DCMAKE_CUDA_ARCHITECTURES=90",
                      "-DCMAKE_BUILD_TYPE=Release"], env)
    facts = read_facts(build)
    assert facts["version"] == nvcc_version, (cmake_version, facts)
    assert f"CUDAToolkit_VERSION={nvcc_version}" in configured.stdout
    assert facts["version"].startswith(m.group(1) + ".")
    # everything CMake found is inside the prefix: nothing from /usr/local/cuda*
    assert facts["nvcc"] == facts["compiler"] == str(nvcc)
    assert facts["bin"] == str(prefix / "bin")
    for key in ("include", "library", "cudart"):
        for path in facts[key].split(";"):
            assert Path(path).resolve().is_relative_to(prefix.resolve()), (key, path)
    assert "/usr/local/cuda" not in (build / "CMakeCache.txt").read_text()

    run([cmake, "--build", str(build)], env)
    exe = build / "saxpy"
    data = exe.read_bytes()
    assert data[:4] == b"\x7fELF"
    assert b"sm_90" in data  # the kernel for the requested architecture is embedded
    needed = run(["readelf", "-d", str(exe)], env).stdout if shutil.which("readelf", path=env["PATH"]) \
        else ""
    if needed:
        assert "libcudart.so.13" in needed


def test_cmake_finds_the_tree_through_cudaredist_env(real_mirror_1302: Path, tmp_path: Path) -> None:  # noqa: F811
    """No CMAKE_CUDA_COMPILER: `eval "$(cudaredist env)"` alone points CMake at the tree."""
    cmake, _ = find_cmake()
    env = host_free_env(tmp_path / "cache")
    prefix = tmp_path / "it's cuda"
    cudaredist("install", "13.0", "--base-url", str(real_mirror_1302), "--prefix", str(prefix),
               "--platform", "linux-x86_64", "--quiet", env=env)
    build = tmp_path / "build"
    script = (f'eval "$({quote_sh(sys.executable)} -m cudaredist env --prefix {quote_sh(str(prefix))})" && '
              f"{quote_sh(cmake)} -S {quote_sh(str(PROJECT))} -B {quote_sh(str(build))} "
              f"{' '.join(generator())} -DCMAKE_CUDA_ARCHITECTURES=90")
    run(["bash", "-c", script], env)
    facts = read_facts(build)
    assert facts["compiler"] == str(prefix / "bin" / "nvcc")
    assert Path(facts["library"]).resolve().is_relative_to(prefix.resolve())
