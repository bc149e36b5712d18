"""The `build` profile against CMake's own list of ``CUDA::`` targets.

FindCUDAToolkit's documentation, as the cmake wheel from PyPI ships it (``cmake --help-module``),
names each library it makes targets for, in one section per library. Each section belongs to one
redist component (``SECTION_COMPONENTS``, a table this test refuses to run without an entry for
every section). For a `build` tree of CUDA 13.0.2, from both sources, every target of a component
the tree holds must resolve to a file inside the tree, and every library target must link (and
run) in a program; a target may be left unresolved only when the tree has no file by that name at
all and the source is known not to ship it (``NOT_SHIPPED``).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.test_cmake import find_cmake, generator
from tests.hosts import require_linux_x86_64
from tests.realmirror import (  # noqa: F401  (fixtures)
    dropped_at_end,
    host_free_env,
    real_mirror_1302,
    real_mirror_1302_libs,
    real_wheel_cache,
    run_cudaredist,
)

pytestmark = [pytest.mark.e2e, pytest.mark.pypi]

require_linux_x86_64()

# FindCUDAToolkit's section -> the redist component that ships its libraries (CUDA 13 names;
# None: no CUDA 13 component has it).
SECTION_COMPONENTS: dict[str, str | None] = {
    "CUDA Runtime Library": "cuda_cudart", "CUDA Driver Library": "cuda_cudart",  # lib/stubs/libcuda.so
    "cuBLAS": "libcublas", "cuDLA": "libcudla", "cuFile": "libcufile", "cuFFT": "libcufft",
    "cuRAND": "libcurand", "cuSOLVER": "libcusolver", "cuSPARSE": "libcusparse", "cupti": "cuda_cupti",
    "NPP": "libnpp", "nvBLAS": "libcublas", "nvGRAPH": None,  # removed in CUDA 11
    "nvJPEG": "libnvjpeg", "nvPTX Compiler": "libnvptxcompiler", "nvRTC": "cuda_nvrtc",
    "nvJitLink": "libnvjitlink", "nvFatBin": "libnvfatbin", "nvidia-ML": "cuda_nvml_dev",
    "nvToolsExt": None,  # gone from CUDA 12.9 on (nvtx3 is header-only)
    "nvtx3": "cuda_nvtx", "OpenCL": "cuda_opencl", "cuLIBOS": "cuda_culibos", "bin2c": "cuda_nvcc",
    "compute-sanitizer": "cuda_sanitizer_api", "cufilt": "cuda_cuxxfilt",
}
# Targets whose file the trees here cannot have: both come from NVIDIA's wheels (the redist mirror
# is re-packed from them), which carry no static library but cudart's and no driver stub
# (manifests/pypi.toml's notes say so for the stub).
NOT_SHIPPED = {
    "cuda_driver": "the cudart wheel has no lib/stubs/libcuda.so",
    "curand_static": "the curand wheel has no libcurand_static.a",
    "nvrtc_static": "the nvrtc wheel has no libnvrtc_static.a",
    "nvrtc_builtins_static": "the nvrtc wheel has no libnvrtc-builtins_static.a",
}
# The file names FindCUDAToolkit looks for, where they are not lib<target>.{so,a}
_FILE_NAMES = {"cuda_driver": "cuda", "nvrtc_builtins": "nvrtc-builtins",
               "nvrtc_builtins_static": "nvrtc-builtins_static", "nvtx3_interop": "nvtx3interop"}

_HEADING = re.compile(r'"{3,}')
_TARGET = re.compile(r"^\s*- ``CUDA::(\w+)``")


def documented_targets(cmake: str) -> dict[str, list[str]]:
    """Section -> the ``CUDA::`` targets its "Targets Created" list names, from the module's docs."""
    lines = subprocess.run([cmake, "--help-module", "FindCUDAToolkit"], capture_output=True, text=True,
                           check=True, timeout=60).stdout.splitlines()
    sections: dict[str, list[str]] = {}
    current = None
    for line, below in zip(lines, [*lines[1:], ""], strict=True):
        if line.strip() and _HEADING.fullmatch(below.strip()) and len(below.strip()) >= len(line.strip()):
            current = line.strip()
            sections[current] = []
        elif current is not None and (m := _TARGET.match(line)) and m.group(1) not in sections[current]:
            sections[current].append(m.group(1))
    return {name: targets for name, targets in sections.items() if targets}


PROBE = """\
cmake_minimum_required(VERSION 3.25)
project(cuda_targets LANGUAGES CXX)
find_package(CUDAToolkit REQUIRED)
set(out "")
foreach(t IN LISTS TARGETS)
  if(NOT TARGET CUDA::${t})
    string(APPEND out "${t}\\tmissing\\t\\n")
    continue()
  endif()
  get_target_property(type CUDA::${t} TYPE)
  if(type STREQUAL "INTERFACE_LIBRARY")
    get_target_property(where CUDA::${t} INTERFACE_INCLUDE_DIRECTORIES)
  else()
    get_target_property(where CUDA::${t} IMPORTED_LOCATION)
  endif()
  string(APPEND out "${t}\\t${type}\\t${where}\\n")
  if(NOT type STREQUAL "EXECUTABLE" AND t IN_LIST LINK)
    add_executable(use_${t} use.cpp)
    target_compile_definitions(use_${t} PRIVATE USE_${t})
    target_link_libraries(use_${t} PRIVATE CUDA::${t})
    target_link_options(use_${t} PRIVATE "LINKER:--no-as-needed")
  endif()
endforeach()
file(WRITE "${CMAKE_BINARY_DIR}/targets.tsv" "${out}")
"""
# One call into each library whose API is known; any other links with an empty main (its NEEDED
# entry is checked instead).
USE = """\
#if defined(USE_cudart) || defined(USE_cudart_static)
#include <cuda_runtime_api.h>
int main() { int v = 0; return cudaRuntimeGetVersion(&v) != cudaSuccess || v < 13000; }
#elif defined(USE_curand)
#include <curand.h>
int main() { int v = 0; return curandGetVersion(&v) != CURAND_STATUS_SUCCESS || v == 0; }
#elif defined(USE_nvrtc)
#include <nvrtc.h>
int main() { int a = 0, b = 0; return nvrtcVersion(&a, &b) != NVRTC_SUCCESS || a < 13; }
#elif defined(USE_nvtx3)
#include <nvtx3/nvToolsExt.h>
int main() { nvtxRangePushA("cudaredist"); nvtxRangePop(); return 0; }
#else
int main() { return 0; }
#endif
"""

_trees: dict[str, Path] = {}


@pytest.fixture(scope="module", autouse=True)
def _drop_trees() -> Iterator[None]:
    yield from dropped_at_end(_trees)


@pytest.fixture(scope="module", params=["nvidia", "pypi"])
def build_tree(request: pytest.FixtureRequest, real_mirror_1302_libs: Path,  # noqa: F811
               real_wheel_cache: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:  # noqa: F811
    """The `build` profile of 13.0.2 for linux-x86_64, from the redist mirror or from the wheels."""
    source = str(request.param)
    if source not in _trees:
        prefix = tmp_path_factory.mktemp(f"build-{source}") / "cuda-13.0"
        # The mirror is made of wheels, and cuda_cuobjdump has none before 13.2 (the pypi source
        # notes it and goes on; the redist source requires what the profile names): so that tree
        # is the build profile's other components. cuobjdump has no CUDA:: target either.
        what = (["--base-url", str(real_mirror_1302_libs), "--profile", "nvcc",
                 "--component", "cuda_nvrtc", "--component", "libcurand"] if source == "nvidia"
                else ["--source", "pypi", "--profile", "build"])
        r = run_cudaredist("install", "13.0.2", *what, "--platform", "linux-x86_64",
                           "--prefix", str(prefix), "--quiet", env=host_free_env(real_wheel_cache))
        assert r.returncode == 0, r.stderr
        _trees[source] = prefix
    return _trees[source]


def _run(cmd: list[str], env: dict[str, str], **kw: object) -> subprocess.CompletedProcess[str]:
    r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600, **kw)  # type: ignore[call-overload]
    assert r.returncode == 0, f"{cmd[:3]} failed:\n{r.stdout[-4000:]}\n{r.stderr[-4000:]}"
    return r  # type: ignore[no-any-return]


def _in_tree(tree: Path, target: str) -> list[Path]:
    """Files of the tree FindCUDAToolkit would take for ``target``, wherever they lie."""
    stem = _FILE_NAMES.get(target, target)
    names = {f"lib{stem}.so", f"lib{stem}.a"}
    return [Path(d) / f for d, _dirs, files in os.walk(tree) for f in files if f in names]


def test_every_cuda_target_of_the_build_profile_resolves_and_links(build_tree: Path, real_wheel_cache: Path,  # noqa: F811
                                                                   tmp_path: Path) -> None:
    cmake, _ = find_cmake()
    sections = documented_targets(cmake)
    assert "CUDA Runtime Library" in sections and "cudart" in sections["CUDA Runtime Library"], sections
    unknown = sorted(set(sections) - set(SECTION_COMPONENTS))
    assert not unknown, f"FindCUDAToolkit documents sections this test has no component for: {unknown}"

    tree = build_tree
    components = set(json.loads((tree / "version.json").read_text())) - {"cuda"}
    profile = next(p for p in json.loads(run_cudaredist("profiles", "--json", env=host_free_env(
        real_wheel_cache)).stdout)["profiles"] if p["name"] == "build")
    allowed = {alt for c in profile["components"] for alt in c["alternatives"]}
    assert components <= allowed, components - allowed
    wanted = sorted({t for section, targets in sections.items() if SECTION_COMPONENTS[section] in components
                     for t in targets})
    assert {"cudart", "curand", "nvrtc", "nvtx3"} <= set(wanted), wanted

    project = tmp_path / "project"
    project.mkdir()
    (project / "CMakeLists.txt").write_text(PROBE)
    (project / "use.cpp").write_text(USE)
    build = tmp_path / "build"
    env = host_free_env(real_wheel_cache)
    _run([cmake, "-S", str(project), "-B", str(build), *generator(), f"-DCUDAToolkit_ROOT={tree}",
          "-DTARGETS=" + ";".join(wanted),
          "-DLINK=" + ";".join(t for t in wanted if t not in NOT_SHIPPED)], env)
    rows = {name: (kind, where) for name, kind, where in
            (line.split("\t") for line in (build / "targets.tsv").read_text().splitlines())}
    assert sorted(rows) == wanted

    # What the source does not ship the tree must lack (CMake then finds nothing, or the host's
    # own file, such as the driver's libcuda.so on a GPU machine); everything else resolves inside.
    unshipped = set(NOT_SHIPPED) & set(rows)
    assert {t: _in_tree(tree, t) for t in unshipped} == {t: [] for t in unshipped}
    missing = {t for t, (kind, _w) in rows.items() if kind == "missing"}
    unexplained = sorted(missing - unshipped)
    assert not unexplained, f"unresolved, though the source ships them: {unexplained}"
    for t, (_kind, where) in rows.items():
        if t in unshipped:
            continue
        for path in where.split(";"):
            assert Path(path).exists() and Path(path).resolve().is_relative_to(tree.resolve()), (t, path)

    _run([cmake, "--build", str(build)], env)
    readelf = [str(Path(d) / "readelf") for d in ("/usr/bin", "/bin") if (Path(d) / "readelf").exists()]
    for t, (kind, where) in rows.items():
        if t in unshipped or kind == "EXECUTABLE":
            continue
        exe = build / f"use_{t}"
        assert exe.is_file(), t
        _run([str(exe)], env)  # cudart, cuRAND and NVRTC answer their version without a GPU
        if readelf and where.endswith(".so"):
            needed = _run([readelf[0], "-d", str(exe)], env).stdout
            assert f"[{Path(where).name}." in needed, (t, needed[-2000:])
