"""End to end with NVIDIA's real wheels from PyPI: `install --source pypi`, then compile and link
with the tree's own nvcc (no CUDA from the host), for Linux, and lay out a Windows tree.

Downloads about 100 MB per tree. Wheels are cached for the session under pytest's tmp dir,
or in $CUDAREDIST_TEST_CACHE when set (reruns then need no network for the wheels).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from cudaredist.tree.sonames import read_soname
from tests.realmirror import host_free_env, real_wheel_cache, run_cudaredist  # noqa: F401  (fixture)

pytestmark = pytest.mark.pypi

THRUST_PROGRAM = r"""
#include <thrust/device_vector.h>
#include <thrust/sequence.h>
#include <thrust/reduce.h>
#include <cuda_runtime.h>
#include <cstdio>

__global__ void scale(int *p, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) p[i] *= 2;
}

int main() {
    int version = 0;
    cudaRuntimeGetVersion(&version);
    thrust::device_vector<int> v(1000);
    thrust::sequence(v.begin(), v.end());
    scale<<<4, 256>>>(thrust::raw_pointer_cast(v.data()), 1000);
    std::printf("%d %d\n", version, thrust::reduce(v.begin(), v.end()));
    return 0;
}
"""


def install(train: str, platform: str, prefix: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    r = run_cudaredist("install", train, "--source", "pypi", "--platform", platform, "--prefix", str(prefix),
                   env=env)
    if r.returncode != 0 and "has no release at" in r.stderr:
        pytest.skip(f"the index has no cuda-toolkit release for {train}: {r.stderr.strip()}")
    assert r.returncode == 0, r.stderr
    return r


SMALL_PROGRAM = r"""
#include <cuda_runtime.h>
__global__ void k(int *p) { *p = 1; }
int main() { int *p; cudaMalloc(&p, 4); k<<<1, 1>>>(p); return cudaDeviceSynchronize() != cudaSuccess; }
"""


def compile_thrust(prefix: Path, workdir: Path, env: dict[str, str]) -> None:
    """Thrust with the static runtime (the default), and a small kernel against libcudart.so."""
    nvcc = prefix / "bin" / "nvcc"
    (workdir / "thrust_demo.cu").write_text(THRUST_PROGRAM)
    (workdir / "small.cu").write_text(SMALL_PROGRAM)
    for src, flags, out in (("thrust_demo.cu", [], "demo_static"),
                            ("small.cu", ["-cudart", "shared"], "demo_shared")):
        exe = workdir / out
        r = subprocess.run([str(nvcc), "-arch=sm_90", *flags, src, "-o", str(exe)], env=env,
                           cwd=workdir, text=True, capture_output=True, timeout=600)
        assert r.returncode == 0, f"nvcc {src} {' '.join(flags)} failed:\n{r.stdout}\n{r.stderr}"
        assert exe.is_file() and os.access(exe, os.X_OK)
    # the shared build found libcudart.so through the restored link chain
    needed = subprocess.run(["readelf", "-d", str(workdir / "demo_shared")], text=True,
                            capture_output=True).stdout
    assert "libcudart.so.13" in needed


@pytest.mark.skipif(sys.platform != "linux", reason="compiles with the Linux tree")
def test_install_13_0_linux_and_compile(real_wheel_cache: Path, tmp_path: Path) -> None:  # noqa: F811
    env = host_free_env(real_wheel_cache)
    prefix = tmp_path / "cuda 13.0"
    r = install("13.0", "linux-x86_64", prefix, env)
    assert "note: the cudart wheel has no lib/stubs/libcuda.so" in r.stderr
    lib = prefix / "lib"
    real = os.readlink(lib / "libcudart.so.13")
    assert os.readlink(lib / "libcudart.so") == "libcudart.so.13" and real.startswith("libcudart.so.13.0.")
    with open(lib / real, "rb") as fh:
        assert read_soname(fh) == "libcudart.so.13"  # a real NVIDIA library's DT_SONAME
    assert os.readlink(prefix / "nvvm" / "lib64" / "libnvvm.so") == "libnvvm.so.4"
    assert (prefix / "nvvm" / "bin" / "cicc").is_file()
    assert os.readlink(prefix / "lib64") == "lib"
    assert not list(prefix.glob("nvidia*")) and not (prefix / "cu13").exists()

    compile_thrust(prefix, tmp_path, env)

    v = run_cudaredist("verify", "--prefix", str(prefix), env=env)
    assert v.returncode == 0, v.stdout + v.stderr
    again = run_cudaredist("install", "13.0", "--source", "pypi", "--platform", "linux-x86_64", "--prefix",
                       str(prefix), env=env)
    assert again.returncode == 0 and "already installed" in again.stderr


def test_install_13_0_windows_tree(real_wheel_cache: Path, tmp_path: Path) -> None:  # noqa: F811
    env = host_free_env(real_wheel_cache)
    prefix = tmp_path / "cuda 13.0 win"
    r = install("13.0", "windows-x86_64", prefix, env)
    assert "nvvm.lib" not in r.stderr  # no gap: built from nvvm64_40_0.dll's exports
    for rel in ("bin/nvcc.exe", "bin/x64/cudart64_13.dll", "lib/x64/cudart.lib", "include/cuda_runtime.h",
                "include/crt/host_config.h", "nvvm/bin/cicc.exe", "nvvm/bin/x64/nvvm64_40_0.dll",
                "nvvm/lib/x64/nvvm.lib", "include/cccl/thrust/device_vector.h"):
        assert (prefix / rel).is_file(), rel
    assert not (prefix / "bin" / "x86_64").exists()
    v = run_cudaredist("verify", "--prefix", str(prefix), env=env)
    assert v.returncode == 0, v.stdout + v.stderr


@pytest.mark.skipif(sys.platform != "linux", reason="compiles with the Linux tree")
def test_install_13_4_linux_and_compile(real_wheel_cache: Path, tmp_path: Path) -> None:  # noqa: F811
    """13.4's wheels ship the pip-style nvcc.profile (-I$(TOP)/include, -L$(TOP)/lib): it fits the tree."""
    env = host_free_env(real_wheel_cache)
    prefix = tmp_path / "cuda 13.4"
    r = install("13.4", "linux-x86_64", prefix, env)
    assert "CUDA 13.4." in r.stderr
    assert (prefix / "licenses" / "cccl" / "LICENSE").is_file()  # cccl/ of the 13.3+ CCCL wheel
    compile_thrust(prefix, tmp_path, env)
