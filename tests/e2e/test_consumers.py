"""Real consumers prove the tree: NVIDIA's own locator (cuda-pathfinder) and numba-cuda, each pointed
at an ``nvcc`` tree of CUDA 13.0.2 (real NVIDIA binaries) from both sources, with no CUDA of the host.

- cuda-pathfinder with ``CUDA_PATH=<tree>`` finds every header directory, binary, bitcode library
  and static library that the tree holds, inside the tree (the profiler API header too: NVIDIA's
  samples matrixMul and asyncAPI include ``cuda_profiler_api.h``). Shared libraries are left out:
  pathfinder asks the system loader before ``CUDA_PATH``, so a host CUDA in ld.so.conf would win;
- numba-cuda with ``CUDA_HOME=<tree>`` compiles a kernel to PTX, with the tree's libNVVM loaded
  into the process and the tree's libdevice linked in (``sin``). numba-cuda also loads NVRTC (to
  list the architectures), so that tree is the nvcc profile plus ``cuda_nvrtc`` (90 MB of wheel).

The trees come from the session's real mirror (``tests/realmirror.py``): the redist route installs
from it, the pypi route installs the same release's wheels from the same download cache.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.hosts import require_linux_x86_64
from tests.realmirror import (  # noqa: F401  (fixtures)
    dropped_at_end,
    host_free_env,
    real_mirror_1302,
    real_wheel_cache,
    run_cudaredist,
    scratch,
)

pytestmark = [pytest.mark.e2e, pytest.mark.pypi]

require_linux_x86_64()

_trees: dict[str, Path] = {}


@pytest.fixture(scope="module", autouse=True)
def _drop_trees() -> Iterator[None]:
    yield from dropped_at_end(_trees)


@pytest.fixture(scope="module", params=["nvidia", "pypi"])
def nvcc_tree(request: pytest.FixtureRequest, real_mirror_1302: Path,  # noqa: F811
              real_wheel_cache: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:  # noqa: F811
    """The default profile of 13.0.2 for linux-x86_64, installed from the mirror or from the wheels."""
    source = str(request.param)
    if source not in _trees:
        prefix = tmp_path_factory.mktemp(f"tree-{source}") / "cuda-13.0"
        env = host_free_env(real_wheel_cache)
        where = ["--base-url", str(real_mirror_1302)] if source == "nvidia" else ["--source", "pypi"]
        r = run_cudaredist("install", "13.0.2", *where, "--platform", "linux-x86_64", "--prefix", str(prefix),
                           "--quiet", env=env)
        assert r.returncode == 0, r.stderr
        _trees[source] = prefix
    return _trees[source]


def consumer_env(tree: Path, cache: Path, **extra: str) -> dict[str, str]:
    env = host_free_env(cache)
    env.update(extra)
    return env


def run_python(script: str, env: dict[str, str], cwd: Path) -> dict[str, Any]:
    r = subprocess.run([sys.executable, "-c", script], env=env, cwd=cwd, capture_output=True, text=True,
                       timeout=600)
    assert r.returncode == 0, f"the consumer failed:\n{r.stdout[-3000:]}\n{r.stderr[-6000:]}"
    result: dict[str, Any] = json.loads(r.stdout.strip().splitlines()[-1])
    return result


def inside(path: str | None, tree: Path) -> bool:
    return path is not None and Path(path).resolve().is_relative_to(tree.resolve())


PATHFINDER = r"""
import json
import cuda.pathfinder as pf

def safe(fn, name):
    try:
        return fn(name)
    except Exception as exc:  # the not-found errors differ per kind
        return None

out = {
    "headers": {n: safe(pf.find_nvidia_header_directory, n) for n in pf.SUPPORTED_HEADERS_CTK},
    "header_files": dict(pf.SUPPORTED_HEADERS_CTK),
    "binaries": {n: safe(pf.find_nvidia_binary_utility, n) for n in pf.SUPPORTED_BINARY_UTILITIES},
    "bitcode": {n: safe(pf.find_bitcode_lib, n) for n in pf.SUPPORTED_BITCODE_LIBS},
    "static": {n: safe(pf.find_static_lib, n) for n in pf.SUPPORTED_STATIC_LIBS},
}
print(json.dumps(out))
"""


def _expected_headers(tree: Path, header_files: dict[str, str]) -> set[str]:
    """Header keys whose file the tree holds (CCCL under include/cccl, NVVM under nvvm/include)."""
    return {key for key, rel in header_files.items()
            if any((tree / d / rel).exists() for d in ("include", "include/cccl", "nvvm/include"))}


def test_cuda_pathfinder_finds_everything_the_tree_holds_inside_it(nvcc_tree: Path, real_wheel_cache: Path,  # noqa: F811
                                                                    tmp_path: Path) -> None:
    tree = nvcc_tree
    env = consumer_env(tree, real_wheel_cache, CUDA_PATH=str(tree))
    found = run_python(PATHFINDER, env, tmp_path)

    headers = _expected_headers(tree, found["header_files"])
    # what the nvcc profile must provide (profiler: matrixMul/asyncAPI include cuda_profiler_api.h)
    assert {"cudart", "cccl", "profiler", "nvvm", "nvcc"} <= headers, headers
    for key in headers:
        assert inside(found["headers"][key], tree), (key, found["headers"][key])
    binaries = {n for n in found["binaries"] if (tree / "bin" / n).is_file()}
    assert {"nvcc", "ptxas", "fatbinary", "nvlink", "bin2c"} <= binaries, binaries
    for name in binaries:
        assert inside(found["binaries"][name], tree), (name, found["binaries"][name])
    assert inside(found["bitcode"]["device"], tree), found["bitcode"]  # libdevice.10.bc
    assert Path(found["bitcode"]["device"]).name.startswith("libdevice")
    assert inside(found["static"]["cudadevrt"], tree), found["static"]


NUMBA = r"""
import json, math
from numba import cuda
from numba.cuda.cuda_paths import get_cuda_paths

def kernel(r, x):
    i = cuda.grid(1)
    if i < r.size:
        r[i] = math.sin(x[i])

ptx, _ = cuda.compile_ptx(kernel, "void(float32[:], float32[:])", cc=(9, 0))
with open("/proc/self/maps") as fh:
    nvvm = sorted({ln.split()[-1] for ln in fh if "libnvvm" in ln})
print(json.dumps({"ptx": ptx, "libnvvm_mapped": nvvm, "libdevice": get_cuda_paths()["libdevice"].info}))
"""


@pytest.fixture(scope="module")
def numba_tree(real_wheel_cache: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:  # noqa: F811
    """The nvcc profile plus NVRTC (numba-cuda asks NVRTC which architectures exist), from the wheels."""
    with scratch(tmp_path_factory, "tree-numba") as tmp:
        prefix = tmp / "cuda-13.0"
        r = run_cudaredist("install", "13.0.2", "--source", "pypi", "--component", "cuda_nvrtc",
                           "--platform", "linux-x86_64", "--prefix", str(prefix), "--quiet",
                           env=host_free_env(real_wheel_cache))
        assert r.returncode == 0, r.stderr
        yield prefix


def test_numba_cuda_compiles_ptx_with_the_trees_nvvm_and_libdevice(numba_tree: Path, real_wheel_cache: Path,  # noqa: F811
                                                                   tmp_path: Path) -> None:
    pytest.importorskip("numba.cuda", reason="numba-cuda is a [test] extra")
    tree = numba_tree
    # The loader path names the tree's libraries, so that a host CUDA in ld.so.conf (pathfinder
    # asks the system loader before CUDA_HOME) is not picked up by accident.
    env = consumer_env(tree, real_wheel_cache, CUDA_HOME=str(tree),
                       LD_LIBRARY_PATH=f"{tree / 'lib'}:{tree / 'nvvm' / 'lib64'}")
    out = run_python(NUMBA, env, tmp_path)
    ptx = out["ptx"]
    assert ".target sm_90" in ptx and ".entry" in ptx
    # the tree's libNVVM is the one in the process, and the PTX names the tree's compiler
    assert out["libnvvm_mapped"], "no libnvvm was loaded"
    assert all(inside(p, tree) for p in out["libnvvm_mapped"]), out["libnvvm_mapped"]
    nvcc_version = json.loads((tree / "version.json").read_text())["libnvvm"]["version"]
    assert f"V{nvcc_version}" in ptx.split(".version")[0], ptx[:400]
    # sin() came from the tree's libdevice, linked in and inlined: no call to an external __nv_sinf
    assert inside(out["libdevice"], tree), out["libdevice"]
    assert "__nv_sin" not in ptx and ".extern .func" not in ptx


def test_numba_cuda_under_cudaredist_env_loads_the_trees_nvvm(numba_tree: Path, real_wheel_cache: Path,  # noqa: F811
                                                              tmp_path: Path) -> None:
    """`eval "$(cudaredist env)"` alone: numba-cuda (through cuda-pathfinder, which asks the loader
    before CUDA_HOME) loads the tree's libNVVM, although another libNVVM is on the LD_LIBRARY_PATH
    the shell had before (another toolkit's, as a module system or an older setup leaves it)."""
    pytest.importorskip("numba.cuda", reason="numba-cuda is a [test] extra")
    from cudaredist.envexport import quote_sh

    tree = numba_tree
    other = tmp_path / "other-toolkit" / "nvvm" / "lib64"
    other.mkdir(parents=True)
    for lib in (tree / "nvvm" / "lib64").glob("libnvvm.so*"):  # a copy: the same library elsewhere
        (other / lib.name).write_bytes(lib.read_bytes())
    env = consumer_env(tree, real_wheel_cache, LD_LIBRARY_PATH=str(other))
    script = tmp_path / "numba_probe.py"
    script.write_text(NUMBA)
    py, where, probe = (quote_sh(str(p)) for p in (sys.executable, tree, script))
    line = f'eval "$({py} -m cudaredist env --prefix {where})" && exec {py} {probe}'
    r = subprocess.run(["bash", "-c", line], env=env, cwd=tmp_path, capture_output=True, text=True,
                       timeout=600)
    assert r.returncode == 0, f"the consumer failed:\n{r.stdout[-3000:]}\n{r.stderr[-6000:]}"
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert out["libnvvm_mapped"], "no libnvvm was loaded"
    assert all(inside(p, tree) for p in out["libnvvm_mapped"]), out["libnvvm_mapped"]
    assert inside(out["libdevice"], tree), out["libdevice"]
