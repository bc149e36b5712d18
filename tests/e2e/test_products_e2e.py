"""End to end with real NVIDIA binaries: CUDA 13.0.2 `--with cusparselt` (cuSPARSELt, the smallest
product whose library links alone: one 237 MB .so with no CUDA library among its DT_NEEDED; its
wheel is 170 MB) installed from both sources, and a program calling it compiled and linked with the
tree's own nvcc (tests/gpu/products/product_check.cu, which tests/gpu/products/product_check.sh also
runs on a GPU). CUDA 13.5.0 on day one, on both routes (its components differ in version: nvcc
13.5.37, NVTX 13.5.25), with the forward-compatibility package beside it (../shared/tools/mkcompat.py's
stand-in in NVIDIA's layout, inside the mirror where `mirror --with compat` puts it)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.realmirror import (  # noqa: F401  (fixtures)
    host_free_env,
    real_mirror_135,
    real_mirror_1302_cusparselt,
    real_wheel_cache,
    run_cudaredist,
    tree_of,
)

pytestmark = [pytest.mark.e2e, pytest.mark.pypi]
PROGRAM = Path(__file__).resolve().parents[1] / "gpu" / "products" / "product_check.cu"


def _compile_and_run(prefix: Path, env: dict[str, str], tmp_path: Path) -> str:
    exe = tmp_path / "product_check"
    built = subprocess.run([str(prefix / "bin" / "nvcc"), "-o", str(exe), str(PROGRAM), "-lcusparseLt"],
                           env=env, text=True, capture_output=True, cwd=tmp_path, timeout=600)
    assert built.returncode == 0, built.stdout + built.stderr
    ldd = subprocess.run(["ldd", str(exe)], text=True, capture_output=True,
                         env=env | {"LD_LIBRARY_PATH": str(prefix / "lib64")})
    assert str(prefix / "lib64" / "libcusparseLt.so.0") in ldd.stdout, ldd.stdout
    # the version function needs no GPU: the library really loads and answers
    ran = subprocess.run([str(exe)], text=True, capture_output=True, timeout=120,
                         env=env | {"LD_LIBRARY_PATH": str(prefix / "lib64")})
    assert ran.returncode == 0, ran.stdout + ran.stderr
    return ran.stdout.strip()


def test_pypi_source_with_cusparselt(real_wheel_cache: Path, tmp_path: Path) -> None:  # noqa: F811
    env = host_free_env(real_wheel_cache)
    prefix = tmp_path / "cuda"
    r = run_cudaredist("install", "13.0.2", "--source", "pypi", "--with", "cusparselt=0.10", "--prefix",
                       str(prefix), "--platform", "linux-x86_64", env=env)
    assert r.returncode == 0, r.stderr
    assert "CUDA 13.0.2 with cuSPARSELt 0.10.0" in r.stderr
    assert (prefix / "include" / "cusparseLt.h").is_file()
    assert _compile_and_run(prefix, env, tmp_path) == "cuSPARSELt 0.10.0"
    verify = run_cudaredist("verify", "--prefix", str(prefix), env=env)
    assert verify.returncode == 0, verify.stdout + verify.stderr


def test_redist_source_with_cusparselt(real_mirror_1302_cusparselt: Path, real_wheel_cache: Path,  # noqa: F811
                                       serve, tmp_path: Path) -> None:
    """The mirror `cudaredist mirror --source pypi --with cusparselt` wrote, served on loopback: the
    product found inside it (<base>/cusparselt/redist/), installed and linked; the tree is the one the
    wheels give."""
    base = serve(real_mirror_1302_cusparselt)
    env = host_free_env(tmp_path / "cache")
    prefix = tmp_path / "cuda"
    r = run_cudaredist("install", "13.0", "--with", "cusparselt", "--base-url", base, "--prefix", str(prefix),
                       "--platform", "linux-x86_64", env=env)
    assert r.returncode == 0, r.stderr
    assert "CUDA 13.0.2 with cuSPARSELt 0.10.0" in r.stderr
    assert _compile_and_run(prefix, env, tmp_path) == "cuSPARSELt 0.10.0"
    wheels = tmp_path / "from-wheels"
    r = run_cudaredist("install", "13.0.2", "--source", "pypi", "--with", "cusparselt=0.10", "--prefix",
                       str(wheels), "--platform", "linux-x86_64", env=host_free_env(real_wheel_cache))
    assert r.returncode == 0, r.stderr
    assert tree_of(prefix) == tree_of(wheels)


MKCOMPAT = Path(__file__).resolve().parents[3] / "shared" / "tools" / "mkcompat.py"


@pytest.mark.skipif(shutil.which("gcc") is None or not MKCOMPAT.is_file(),
                    reason="mkcompat.py (../shared/tools) needs gcc to make its ELF stand-ins")
def test_cuda_135_on_both_routes_with_compat(real_mirror_135: Path, real_wheel_cache: Path,  # noqa: F811
                                             serve, tmp_path: Path) -> None:
    site = tmp_path / "site"
    shutil.copytree(real_mirror_135, site, copy_function=shutil.copy)
    subprocess.run([sys.executable, str(MKCOMPAT), str(site), "620.70.10", "13.5"], check=True,
                   capture_output=True)
    base, prefix = serve(site), tmp_path / "cuda"
    env = host_free_env(tmp_path / "cache")
    r = run_cudaredist("install", "13.5", "--with", "compat", "--base-url", base, "--prefix", str(prefix),
                       "--platform", "linux-x86_64", env=env)
    assert r.returncode == 0, r.stderr
    assert "CUDA 13.5.0 with CUDA forward compatibility 620.70.10" in r.stderr
    assert (prefix / "compat" / "libcuda.so.1").resolve().name == "libcuda.so.620.70.10"
    info = run_cudaredist("info", "--prefix", str(prefix), env=env).stdout
    assert "release:   CUDA 13.5.0" in info and "13.5.37 (cuda_nvcc" in info and "13.5.25 (" in info
    nvcc = subprocess.run([str(prefix / "bin" / "nvcc"), "--version"], text=True, capture_output=True,
                          env=env)
    assert "V13.5.37" in nvcc.stdout, nvcc.stdout + nvcc.stderr
    wheels = tmp_path / "from-wheels"
    r = run_cudaredist("install", "13.5.0", "--source", "pypi", "--prefix", str(wheels), "--platform",
                       "linux-x86_64", env=host_free_env(real_wheel_cache))
    assert r.returncode == 0, r.stderr
    # the same tree but for compat/ and version.json (which names it)
    redist = {k: v for k, v in tree_of(prefix).items() if k.split("/")[0] not in ("compat", "version.json")}
    assert redist == {k: v for k, v in tree_of(wheels).items() if k != "version.json"}
