"""End to end with real NVIDIA binaries: a redist-shaped mirror built from NVIDIA's PyPI wheels
(`cudaredist mirror --source pypi`), served on 127.0.0.1, installed from, and compiled with; the
tree it installs is the tree `install --source pypi` makes."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.realmirror import (  # noqa: F401  (fixtures)
    host_free_env,
    real_mirror_1302,
    real_wheel_cache,
    run_cudaredist,
    tree_of,
)

pytestmark = [pytest.mark.e2e, pytest.mark.pypi]

THRUST_PROGRAM = r"""
#include <thrust/device_vector.h>
#include <thrust/sequence.h>
#include <thrust/reduce.h>
#include <cstdio>

__global__ void scale(int *p, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) p[i] *= 2;
}

int main() {
    thrust::device_vector<int> v(1000);
    thrust::sequence(v.begin(), v.end());
    scale<<<4, 256>>>(thrust::raw_pointer_cast(v.data()), 1000);
    std::printf("%d\n", thrust::reduce(v.begin(), v.end()));
    return 0;
}
"""


def test_install_and_compile_thrust_linux(real_mirror_1302: Path, serve, tmp_path: Path) -> None:  # noqa: F811
    base = serve(real_mirror_1302)
    env = host_free_env(tmp_path / "cache")
    prefix = tmp_path / "cuda 13.0"
    r = run_cudaredist("install", "13.0", "--base-url", base, "--prefix", str(prefix),
                   "--platform", "linux-x86_64", env=env)
    assert r.returncode == 0, r.stderr
    assert "CUDA 13.0.2" in r.stderr

    nvcc = prefix / "bin" / "nvcc"
    version = subprocess.run([str(nvcc), "--version"], env=env, text=True, capture_output=True)
    assert version.returncode == 0, version.stderr
    assert "release 13.0" in version.stdout

    src = tmp_path / "prog.cu"
    src.write_text(THRUST_PROGRAM)
    exe = tmp_path / "prog"
    compiled = subprocess.run([str(nvcc), "-arch=sm_90", "-o", str(exe), str(src)], env=env,
                              text=True, capture_output=True, cwd=tmp_path, timeout=600)
    assert compiled.returncode == 0, compiled.stdout + compiled.stderr
    assert exe.stat().st_size > 100_000
    assert exe.read_bytes()[:4] == b"\x7fELF"
    # the kernel was compiled for sm_90 and embedded (the fatbin carries the arch name)
    assert b"sm_90" in exe.read_bytes()

    # the same tree links dynamically against its own cudart through lib64 -> lib
    dyn = subprocess.run([str(nvcc), "-arch=sm_90", "-cudart=shared", "-o", str(exe) + "-dyn",
                          str(src)], env=env, text=True, capture_output=True, cwd=tmp_path, timeout=600)
    assert dyn.returncode == 0, dyn.stdout + dyn.stderr
    ldd = subprocess.run(["ldd", str(exe) + "-dyn"], text=True, capture_output=True,
                         env=env | {"LD_LIBRARY_PATH": str(prefix / "lib64")})
    assert str(prefix / "lib64" / "libcudart.so.13") in ldd.stdout

    verify = run_cudaredist("verify", "--prefix", str(prefix), env=env)
    assert verify.returncode == 0, verify.stdout + verify.stderr
    assert "ok:" in verify.stdout


def test_install_windows_tree_on_linux(real_mirror_1302: Path, serve, tmp_path: Path) -> None:  # noqa: F811
    base = serve(real_mirror_1302)
    env = host_free_env(tmp_path / "cache")
    prefix = tmp_path / "cuda 13.0 win"
    r = run_cudaredist("install", "13.0", "--base-url", base, "--prefix", str(prefix),
                   "--platform", "windows-x86_64", env=env)
    assert r.returncode == 0, r.stderr
    for rel in ("bin/nvcc.exe", "bin/x64/cudart64_13.dll", "lib/x64/cudart.lib",
                "include/cuda_runtime.h", "include/crt/host_config.h", "nvvm/bin/cicc.exe",
                "include/cccl/thrust/version.h"):
        assert (prefix / rel).is_file(), rel
    assert (prefix / "bin" / "nvcc.exe").read_bytes()[:2] == b"MZ"
    assert not (prefix / "lib64").exists()  # the lib64 link is a Linux fix-up only


@pytest.mark.parametrize("platform", ["linux-x86_64", "windows-x86_64"])
def test_mirror_installs_the_tree_the_wheels_install(platform: str, real_mirror_1302: Path,  # noqa: F811
                                                     real_wheel_cache: Path, tmp_path: Path) -> None:  # noqa: F811
    env = host_free_env(tmp_path / "cache")
    redist = tmp_path / "from the mirror"
    r = run_cudaredist("install", "13.0", "--base-url", str(real_mirror_1302), "--prefix", str(redist),
                   "--platform", platform, "--quiet", env=env)
    assert r.returncode == 0, r.stderr
    wheels = tmp_path / "from the wheels"
    r = run_cudaredist("install", "13.0.2", "--source", "pypi", "--prefix", str(wheels),
                       "--platform", platform, "--quiet",
                       env=env | {"CUDAREDIST_CACHE_DIR": str(real_wheel_cache)})
    assert r.returncode == 0, r.stderr
    got, want = tree_of(redist), tree_of(wheels)
    assert sorted(got) == sorted(want)
    assert got == want
    assert ("bin/nvcc" if platform.startswith("linux") else "bin/nvcc.exe") in got
