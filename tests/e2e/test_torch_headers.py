"""PyTorch's CUDA headers compile against a tree: nvcc compiles a translation unit that includes
``torch/extension.h`` and ``ATen/cuda/CUDAContext.h`` with the CPU PyTorch wheel's headers, against
CUDA 13.0.2 trees from both sources (NVIDIA's wheels with --source pypi; a redist mirror of them, the
fatbin-heavy libraries packed with ``--xz-preset store``), and every CUDA header it reads comes from the tree.

The tree is the nvcc profile plus what CUDAContext.h includes beyond it (cuBLAS, cuSPARSE,
cuSOLVER: ``TORCH_HEADER_LIBS``), all of them components of the `torch` profile; the test checks
that each of those components supplies a header the compile read, so the set is no larger than
needed. The CPU wheel lacks the ``c10/cuda/impl/cuda_cmake_macros.h`` a CUDA build generates:
``-DC10_CUDA_NO_CMAKE_CONFIGURE_FILE`` is c10's own switch for that (CUDAMacros.h). One TU,
at -O0 for one architecture.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import sysconfig
import zipfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from tests.hosts import require_linux_x86_64
from tests.realmirror import (  # noqa: F401  (fixtures)
    TORCH_HEADER_LIBS,
    _once,
    host_free_env,
    real_mirror_1302,
    real_mirror_1302_torch_libs,
    real_wheel_cache,
    run_cudaredist,
)

pytestmark = [pytest.mark.e2e, pytest.mark.pypi]

require_linux_x86_64()

TORCH = "2.13.0"  # the CPU wheel the machine image holds (pip finds it on disk)
TU = "#include <torch/extension.h>\n#include <ATen/cuda/CUDAContext.h>\n"
# what CUDAContextLight.h includes: each must be read from the tree
CUDA_HEADERS = ("cuda_runtime_api.h", "cusparse.h", "cublas_v2.h", "cublasLt.h", "cusolverDn.h")


def _missing(what: str) -> None:
    if os.environ.get("CI"):
        pytest.fail(f"{what}, although CI is set")
    pytest.skip(what)


@pytest.fixture(scope="session")
def torch_include(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """torch/include of an installed torch, else of the torch wheel, unpacked once per run."""
    spec = importlib.util.find_spec("torch")
    if spec is not None and spec.origin:
        return Path(spec.origin).parent / "include"

    def unpack(d: Path) -> Path:
        r = subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "-d", str(d),
                            f"torch=={TORCH}"], capture_output=True, text=True, timeout=900)
        wheels = sorted(d.glob("torch-*.whl"))
        if r.returncode != 0 or not wheels:
            _missing(f"pip cannot get torch=={TORCH}: {r.stderr.strip()[-500:]}")
        with zipfile.ZipFile(wheels[0]) as zf:
            zf.extractall(d, [n for n in zf.namelist() if n.startswith("torch/include/")])
        wheels[0].unlink()
        return d / "torch" / "include"

    return _once(tmp_path_factory, "torch-include", unpack)


def _install(source: str, mirror: Path, cache: Path, prefix: Path) -> Path:
    where = ["--base-url", str(mirror)] if source == "nvidia" else ["--source", "pypi"]
    r = run_cudaredist("install", "13.0.2", *where, "--profile", "nvcc",
                       *(a for c in TORCH_HEADER_LIBS for a in ("--component", c)),
                       "--platform", "linux-x86_64", "--prefix", str(prefix), "--quiet",
                       env=host_free_env(cache))
    assert r.returncode == 0, r.stderr
    return prefix


def _compile(tree: Path, include: Path, work: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    work.mkdir()
    (work / "ext.cu").write_text(TU)
    cmd = [str(tree / "bin" / "nvcc"), "-c", "ext.cu", "-o", "ext.o", "-O0", "-arch=sm_90", "-std=c++20",
           "-DC10_CUDA_NO_CMAKE_CONFIGURE_FILE", "-I", str(include),
           "-I", str(include / "torch" / "csrc" / "api" / "include"),
           "-I", sysconfig.get_paths()["include"], "-MD", "-MF", "ext.d", "-w"]
    return subprocess.run(cmd, cwd=work, env=env, capture_output=True, text=True, timeout=1200)


def _deps(work: Path) -> list[Path]:
    text = (work / "ext.d").read_text().replace("\\\n", " ")
    return [Path(os.path.realpath(work / p)) for p in text.split(":", 1)[1].split()]


def test_torch_extension_headers_compile_against_both_trees(real_wheel_cache: Path,  # noqa: F811
                                                            real_mirror_1302_torch_libs: Path,  # noqa: F811
                                                            torch_include: Path, tmp_path: Path) -> None:
    if not (Path(sysconfig.get_paths()["include"]) / "Python.h").is_file():
        _missing(f"no Python.h in {sysconfig.get_paths()['include']} (torch/extension.h includes it)")
    torch_profile = next(p for p in json.loads(run_cudaredist("profiles", "--json", env=host_free_env(
        real_wheel_cache)).stdout)["profiles"] if p["name"] == "torch")
    in_profile = {alt for c in torch_profile["components"] for alt in c["alternatives"]}
    assert set(TORCH_HEADER_LIBS) <= in_profile, in_profile

    sources = ("nvidia", "pypi")
    trees = {s: _install(s, real_mirror_1302_torch_libs, real_wheel_cache, tmp_path / s / "cuda-13.0")
             for s in sources}
    env = host_free_env(real_wheel_cache)

    def compile_in(source: str) -> subprocess.CompletedProcess[str]:
        return _compile(trees[source], torch_include, tmp_path / f"tu-{source}", env)

    with ThreadPoolExecutor(len(sources)) as pool:  # one core each: the two compiles at once
        done = dict(zip(sources, pool.map(compile_in, sources), strict=True))
    for source, tree in trees.items():
        r, work = done[source], tmp_path / f"tu-{source}"
        assert r.returncode == 0, f"{source}: nvcc failed:\n{r.stdout[-3000:]}\n{r.stderr[-6000:]}"
        assert (work / "ext.o").stat().st_size > 0
        deps = _deps(work)
        root = tree.resolve()
        by_name = {p.name: p for p in deps}
        for header in CUDA_HEADERS:
            found = by_name.get(header)
            assert found is not None and found.is_relative_to(root), (source, header, found)
        # nothing from another toolkit: every header is the tree's, torch's, Python's or the host compiler's
        known = (root, torch_include.resolve(), Path(sysconfig.get_paths()["include"]).resolve(),
                 work.resolve(), Path("/usr/include"), Path("/usr/lib/gcc"))
        outside = [p for p in deps if not any(p.is_relative_to(k) for k in known)]
        assert outside == [], (source, outside[:10])
        assert not [p for p in deps if "/usr/local/cuda" in str(p)], source
        # each extra component supplied a header (the tree is no bigger than the compile needs)
        record = json.loads((tree / ".cudaredist" / "record.json").read_text())
        component = {f["path"]: f["component"] for f in record["files"]}
        used = {component.get(p.relative_to(root).as_posix()) for p in deps if p.is_relative_to(root)}
        assert set(TORCH_HEADER_LIBS) <= used, (source, used)
        assert used <= in_profile, (source, used - in_profile)
