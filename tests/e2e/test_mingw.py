"""Cross-compiling for Windows on Linux, proven: the Windows ``runtime`` tree of a release (NVIDIA's
binaries from PyPI), ``WINDOWS_CUDA_HOME`` from ``cudaredist env``, MinGW-w64's g++ with
``-lcudart -lcuda``, and the programs run under Wine.

There is no GPU driver under Wine, so the answers are the driver-less ones: cudart returns
cudaErrorInsufficientDriver (35; 13.0's cudart says cudaErrorNotSupported, 801) and cuInit a
non-zero CUresult. What matters is that the program started, which needs cudart64_13.dll to be
found and its imports resolved, and that the runtime's own code answered.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from cudaredist.tree.implib import read_exports
from tests.realmirror import (  # noqa: F401  (fixtures)
    LABEL,
    LABEL_134,
    host_free_env,
    real_mirror_1302,
    real_mirror_1343_windows_runtime,
    real_wheel_cache,
    run_cudaredist,
)
from tests.wintools import (  # noqa: F401
    SYSTEM_DLLS,
    imported_dlls,
    lld_link,
    mingw_gxx,
    run_under_wine,
    wine_prefix,
)

pytestmark = [pytest.mark.e2e, pytest.mark.pypi]

RUNTIME_PROGRAM = r"""
#include <cstdio>
#include <cuda_runtime.h>
int main() {
    int runtime = -1, driver = -1, count = -1;
    cudaError_t e1 = cudaRuntimeGetVersion(&runtime);
    cudaError_t e2 = cudaDriverGetVersion(&driver);
    cudaError_t e3 = cudaGetDeviceCount(&count);
    std::printf("cudaRuntimeGetVersion=%d runtime=%d\n", (int)e1, runtime);
    std::printf("cudaDriverGetVersion=%d driver=%d\n", (int)e2, driver);
    std::printf("cudaGetDeviceCount=%d count=%d\n", (int)e3, count);
    return 0;
}
"""

DRIVER_PROGRAM = r"""
#include <cstdio>
#include <cuda.h>
int main() {
    CUresult init = cuInit(0);
    int version = -1;
    CUresult got = cuDriverGetVersion(&version);
    std::printf("cuInit=%d\n", (int)init);
    std::printf("cuDriverGetVersion=%d version=%d\n", (int)got, version);
    return 0;
}
"""

# What cudart answers without a driver: cudaErrorInsufficientDriver, cudaErrorNoDevice, and
# cudaErrorNotSupported (13.0.x's cudart when nvcuda.dll is absent)
NO_DRIVER = {35, 100, 801}


def compile_line(home: str, source: Path, exe: Path) -> list[str]:
    """The line docs/recipes.md gives (keep the two identical)."""
    return [mingw_gxx(), "-O2", "-static-libgcc", "-static-libstdc++", "-o", str(exe), str(source),
            f"-I{home}/include", f"-L{home}/lib/x64", "-lcudart", "-lcuda"]


def windows_cuda_home(prefix: Path, env: dict[str, str]) -> str:
    """WINDOWS_CUDA_HOME as a bash user gets it: eval "$(cudaredist env --shell bash ...)"."""
    r = run_cudaredist("env", "--shell", "bash", "--prefix", str(prefix), env=env)
    assert r.returncode == 0, r.stderr
    script = 'eval "$1"; printf %s "${WINDOWS_CUDA_HOME:?unset}"'
    shown = subprocess.run(["bash", "-c", script, "_", r.stdout], capture_output=True, text=True,
                           env={"PATH": "/usr/bin:/bin"})
    assert shown.returncode == 0, (r.stdout, shown.stderr)
    return shown.stdout


def build(home: str, source: str, out: Path) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    src = out / "main.cpp"
    src.write_text(source)
    exe = out / "main.exe"
    r = subprocess.run(compile_line(home, src, exe), capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, f"x86_64-w64-mingw32-g++ failed:\n{r.stderr[-6000:]}"
    return exe


def ship(exe: Path, home: str) -> list[str]:
    """Copy the non-system DLLs that ``exe`` imports from the tree beside it; returns their names."""
    needed = [d for d in imported_dlls(exe) if d not in SYSTEM_DLLS]
    bin_x64 = Path(home) / "bin" / "x64"
    for name in needed:
        found = [p for p in bin_x64.iterdir() if p.name.lower() == name]
        assert found, f"{exe.name} imports {name}, which {bin_x64} does not hold"
        shutil.copy2(found[0], exe.parent / found[0].name)
    return needed


def answers(stdout: str) -> dict[str, int]:
    return {m[1]: int(m[2]) for m in re.finditer(r"(\w+)=(-?\d+)", stdout)}


@pytest.mark.parametrize("release", [pytest.param(LABEL, id="13.0"), pytest.param(LABEL_134, id="13.4")])
def test_cross_compile_and_run_under_wine(release: str, request: pytest.FixtureRequest, wine_prefix: Path,  # noqa: F811
                                          tmp_path: Path) -> None:
    mirror = request.getfixturevalue("real_mirror_1302" if release == LABEL
                                     else "real_mirror_1343_windows_runtime")
    mingw_gxx()  # a missing toolchain is reported before anything is installed
    env = host_free_env(tmp_path / "cache")
    prefix = tmp_path / "cuda-win"
    r = run_cudaredist("install", release, "--base-url", str(mirror), "--platform", "windows-x86_64",
                       "--profile", "runtime", "--prefix", str(prefix), "--json", env=env)
    assert r.returncode == 0, r.stderr
    components = sorted(c["name"] for c in json.loads(r.stdout)["plan"]["components"])
    assert components == ["cuda_crt", "cuda_cudart"], r.stdout
    home = windows_cuda_home(prefix, env)
    assert Path(home) == prefix
    # the profile holds what cross-compiling needs, and the GNU import library is recorded
    for rel in ("include/cuda.h", "include/cuda_runtime.h", "include/cuda_runtime_api.h",
                "include/crt/host_config.h", "lib/x64/cuda.lib", "lib/x64/cudart.lib",
                "lib/x64/libcudart.dll.a", "bin/x64/cudart64_13.dll"):
        assert (prefix / rel).is_file(), rel
    verify = run_cudaredist("verify", "--prefix", str(prefix), "--json", env=env)
    assert verify.returncode == 0 and json.loads(verify.stdout)["ok"], verify.stdout

    runtime_exe = build(home, RUNTIME_PROGRAM, tmp_path / "runtime")
    driver_exe = build(home, DRIVER_PROGRAM, tmp_path / "driver")
    # the program without its DLL does not start, and Wine says why: the check below can fail
    missing = run_under_wine(runtime_exe, wine_prefix)
    assert missing.returncode != 0 and "cudart64_13.dll" in missing.stderr, (missing.stdout, missing.stderr)

    assert ship(runtime_exe, home) == ["cudart64_13.dll"]
    assert ship(driver_exe, home) == []  # 13.x cuda.lib loads nvcuda.dll (the driver's) at run time
    ran = run_under_wine(runtime_exe, wine_prefix)
    print(f"--- {release} runtime program under Wine ---\n{ran.stdout}{ran.stderr}")
    assert ran.returncode == 0 and "not found" not in ran.stderr, (ran.stdout, ran.stderr)
    got = answers(ran.stdout)
    assert set(got) == {"cudaRuntimeGetVersion", "cudaDriverGetVersion", "cudaGetDeviceCount", "runtime",
                        "driver", "count"}, ran.stdout
    assert got["cudaGetDeviceCount"] in NO_DRIVER and got["cudaDriverGetVersion"] in NO_DRIVER, ran.stdout

    drv = run_under_wine(driver_exe, wine_prefix)
    print(f"--- {release} driver program under Wine ---\n{drv.stdout}{drv.stderr}")
    assert drv.returncode == 0, (drv.stdout, drv.stderr)
    got = answers(drv.stdout)
    assert "cuDriverGetVersion" in got and got["cuInit"] != 0, drv.stdout

    # uninstall removes the generated library with the rest
    r = run_cudaredist("uninstall", "--prefix", str(prefix), env=env)
    assert r.returncode == 0, r.stderr
    assert not (prefix / "lib/x64/libcudart.dll.a").exists()


# cublasGetProperty as cublas_api.h declares it (the header includes CCCL's through cuda_fp16.h: a
# link test needs only the declaration); libraryPropertyType: MAJOR_VERSION 0, MINOR 1, PATCH_LEVEL 2
CUBLAS_DECLARATION = "int cublasGetProperty(int type, int *value);"
CUBLAS_PROGRAM = 'extern "C" ' + CUBLAS_DECLARATION + r"""
#include <cstdio>
int main() {
    int major = -1, minor = -1, patch = -1;
    int got = cublasGetProperty(0, &major);
    cublasGetProperty(1, &minor);
    cublasGetProperty(2, &patch);
    std::printf("cublasGetProperty=%d version=%d.%d.%d\n", got, major, minor, patch);
    return 0;
}
"""

# lld-link's program: no C runtime, its entry point returns cuBLAS's major version as the exit code
CUBLAS_START = CUBLAS_DECLARATION + """
int start(void) { int major = -1; return cublasGetProperty(0, &major) ? 99 : major; }
"""


def test_pypi_cublas_links_through_the_import_library_the_tree_built(
        real_wheel_cache: Path, wine_prefix: Path, tmp_path: Path) -> None:  # noqa: F811
    """NVIDIA's cuBLAS wheel for Windows has bin/x64/cublas64_13.dll and no lib/x64/cublas.lib; the
    tree gets one (and cublasLt.lib), recorded; MinGW links through it with ``-l:cublas.lib`` and
    lld-link (an MSVC-compatible linker) with ``cublas.lib``; both programs run under Wine and get
    cuBLAS's version from the real DLL (no GPU needed)."""
    mingw_gxx()
    lld = lld_link()
    env = host_free_env(real_wheel_cache)
    prefix = tmp_path / "cuda-win"
    r = run_cudaredist("install", "13.0", "--source", "pypi", "--platform", "windows-x86_64", "--profile",
                       "runtime", "-c", "libcublas", "--prefix", str(prefix), env=env)
    assert r.returncode == 0, r.stderr
    libs = sorted(p.name for p in (prefix / "lib" / "x64").iterdir())
    print("lib/x64:", libs)
    assert {"cublas.lib", "cublasLt.lib", "cudart.lib", "libcudart.dll.a"} <= set(libs)
    assert not {"libcublas.dll.a", "libcublasLt.dll.a"} & set(libs)  # one library per DLL
    record = json.loads((prefix / ".cudaredist" / "record.json").read_text())
    components = {f["path"]: f["component"] for f in record["files"]}
    assert components["lib/x64/cublas.lib"] == components["lib/x64/cublasLt.lib"] == "libcublas"
    verify = run_cudaredist("verify", "--prefix", str(prefix), "--json", env=env)
    assert verify.returncode == 0 and json.loads(verify.stdout)["extra"] == [], verify.stdout

    home = windows_cuda_home(prefix, env)
    out = tmp_path / "gnu"
    out.mkdir()
    (out / "main.cpp").write_text(CUBLAS_PROGRAM)
    exe = out / "main.exe"
    g = subprocess.run([mingw_gxx(), "-O2", "-static-libgcc", "-static-libstdc++", "-o", str(exe),
                        str(out / "main.cpp"), f"-L{home}/lib/x64", "-l:cublas.lib"],
                       capture_output=True, text=True, timeout=300)
    assert g.returncode == 0, g.stderr[-4000:]
    assert "cublas64_13.dll" in imported_dlls(exe)

    msvc = tmp_path / "msvc"
    msvc.mkdir()
    (msvc / "start.c").write_text(CUBLAS_START)
    gcc = mingw_gxx().replace("g++", "gcc")
    c = subprocess.run([gcc, "-c", "-O2", "-fno-asynchronous-unwind-tables", "-o", str(msvc / "start.o"),
                        str(msvc / "start.c")], capture_output=True, text=True, timeout=300)
    assert c.returncode == 0, c.stderr[-4000:]
    link = subprocess.run([lld, "/nologo", f"/out:{msvc / 'main.exe'}", "/entry:start", "/subsystem:console",
                           "/nodefaultlib", str(msvc / "start.o"), f"/libpath:{home}/lib/x64", "cublas.lib"],
                          capture_output=True, text=True, timeout=300)
    assert link.returncode == 0, link.stdout + link.stderr
    assert imported_dlls(msvc / "main.exe") == ["cublas64_13.dll"]

    for d in (out, msvc):
        for dll in ("cublas64_13.dll", "cublasLt64_13.dll"):
            os.link(prefix / "bin" / "x64" / dll, d / dll)
    ran = run_under_wine(exe, wine_prefix)
    print(f"--- cuBLAS program (MinGW) under Wine ---\n{ran.stdout}{ran.stderr}")
    assert ran.returncode == 0 and answers(ran.stdout)["cublasGetProperty"] == 0, (ran.stdout, ran.stderr)
    assert re.search(r"version=13\.\d+\.\d+", ran.stdout), ran.stdout
    ran = run_under_wine(msvc / "main.exe", wine_prefix)
    assert ran.returncode == 13, (ran.returncode, ran.stderr)


# What AOTInductor's generated model code reaches in the tree: the driver API (kernel launches
# through cuda.lib) and the runtime (cudart64_13.dll through -lcudart); run() only asks for versions
MODEL_SOURCE = r"""
#include <cuda.h>
#include <cuda_runtime_api.h>
extern "C" __declspec(dllexport) int model_run(int launch, int *runtime, int *driver) {
    CUresult init = cuInit(0);
    if (launch) {  // referenced as a generated model does, never reached here
        CUmodule module; CUfunction fn;
        cuModuleLoadData(&module, "");
        cuModuleGetFunction(&fn, module, "triton_poi_fused_relu_0");
        cuLaunchKernel(fn, 1, 1, 1, 32, 1, 1, 0, nullptr, nullptr, nullptr);
        cudaStreamSynchronize(nullptr);
    }
    cudaRuntimeGetVersion(runtime);
    *driver = (int)init;
    return (int)cudaDriverGetVersion(driver);
}
"""

LOADER_SOURCE = r"""
#include <cstdio>
#include <windows.h>
int main() {
    HMODULE dll = LoadLibraryA("model.dll");
    if (!dll) { std::printf("LoadLibrary=%lu\n", GetLastError()); return 1; }
    typedef int (*run_t)(int, int *, int *);
    run_t run = (run_t)GetProcAddress(dll, "model_run");
    int runtime = -1, driver = -1;
    int got = run(0, &runtime, &driver);
    std::printf("model_run=%d runtime=%d\n", got, runtime);
    return 0;
}
"""


def torch_link_line(home: str, source: Path, out: Path, lib_dirs: list[str]) -> list[str]:
    """The command torch 2.11's cpp_builder runs for aot_inductor.cross_target_platform="windows"
    (the part about the tree): g++ from MinGW-w64, -shared, static libstdc++/libgcc and winpthread,
    then ``-lcuda -lcudart`` and ``-L$WINDOWS_CUDA_HOME/lib/x64`` after the output."""
    return [mingw_gxx(), str(source), "-D", "USE_CUDA", "-O3", "-DNDEBUG", "-shared", "-Wall", "-std=c++17",
            "-Wno-unused-variable", "-Wno-unknown-pragmas", f"-I{home}/include", "-static-libstdc++",
            "-static-libgcc", "-Wl,-Bstatic", "-lwinpthread", "-Wl,-Bdynamic", "-o", str(out),
            "-lcuda", "-lcudart", *(f"-L{d}" for d in lib_dirs)]


def test_aotinductor_link_line_and_the_files_torch_adds(real_wheel_cache: Path, wine_prefix: Path,  # noqa: F811
                                                        tmp_path: Path) -> None:
    """The part of PyTorch's AOTInductor cross-compile that needs no GPU: a model DLL linked with
    torch's line against a ``--profile runtime`` tree (``-lcudart`` takes the tree's
    libcudart.dll.a; without it GNU ld meets cudart.lib's MSVC objects and fails), importing
    cudart64_13.dll, loaded under Wine. Then what newer torch does when it finds no
    ``lib/x64/libcudart.a``: it writes one (and a .def) into WINDOWS_CUDA_HOME/lib/x64, so the
    folder is writable, ``verify`` lists the two as extra and passes, and uninstall keeps them."""
    mingw_gxx()
    env = host_free_env(real_wheel_cache)
    prefix = tmp_path / "cuda-win"
    r = run_cudaredist("install", "13.0", "--source", "pypi", "--platform", "windows-x86_64", "--profile",
                       "runtime", "--prefix", str(prefix), env=env)
    assert r.returncode == 0, r.stderr
    home = windows_cuda_home(prefix, env)
    lib_x64 = Path(home) / "lib" / "x64"
    build = tmp_path / "build"
    build.mkdir()
    (build / "model.cpp").write_text(MODEL_SOURCE)
    (build / "loader.cpp").write_text(LOADER_SOURCE)

    # the control: the tree's folder without libcudart.dll.a, as an unpacked NVIDIA archive is
    bare = tmp_path / "bare-lib-x64"
    shutil.copytree(lib_x64, bare, ignore=shutil.ignore_patterns("libcudart.dll.a"))
    failed = subprocess.run(torch_link_line(home, build / "model.cpp", build / "bare.dll", [str(bare)]),
                            capture_output=True, text=True, timeout=300)
    assert failed.returncode != 0 and re.search(r"__GSHandlerCheck|__security_cookie|__guard_dispatch",
                                                failed.stderr), failed.stderr[-3000:]

    dll = build / "model.dll"
    linked = subprocess.run(torch_link_line(home, build / "model.cpp", dll, [str(lib_x64)]),
                            capture_output=True, text=True, timeout=300)
    assert linked.returncode == 0, linked.stderr[-4000:]
    assert [d for d in imported_dlls(dll) if d not in SYSTEM_DLLS] == ["cudart64_13.dll"]
    loader = subprocess.run([mingw_gxx(), "-O2", "-static-libgcc", "-static-libstdc++", "-o",
                             str(build / "loader.exe"), str(build / "loader.cpp")],
                            capture_output=True, text=True, timeout=300)
    assert loader.returncode == 0, loader.stderr[-4000:]
    shutil.copy2(prefix / "bin" / "x64" / "cudart64_13.dll", build / "cudart64_13.dll")
    ran = run_under_wine(build / "loader.exe", wine_prefix)
    print(f"--- AOTInductor-like model DLL under Wine ---\n{ran.stdout}{ran.stderr}")
    assert ran.returncode == 0, (ran.stdout, ran.stderr)
    got = answers(ran.stdout)
    assert got["model_run"] in NO_DRIVER and "runtime" in got, ran.stdout  # it ran cudart's code

    # newer torch: no libcudart.a in the -L folders, so gendef + dlltool write one into the
    # first writable folder that holds cudart.lib (WINDOWS_CUDA_HOME/lib/x64)
    assert os.access(lib_x64, os.W_OK)
    exports = read_exports((prefix / "bin" / "x64" / "cudart64_13.dll").read_bytes())
    (lib_x64 / "cudart64_13.def").write_text("LIBRARY cudart64_13.dll\nEXPORTS\n"
                                             + "".join(f"{e.name}\n" for e in exports.exports))
    dlltool = subprocess.run(["x86_64-w64-mingw32-dlltool", "-d", str(lib_x64 / "cudart64_13.def"), "-l",
                              str(lib_x64 / "libcudart.a"), "-D", "cudart64_13.dll"],
                             capture_output=True, text=True, timeout=300)
    assert dlltool.returncode == 0, dlltool.stderr
    relinked = subprocess.run(torch_link_line(home, build / "model.cpp", build / "again.dll", [str(lib_x64)]),
                              capture_output=True, text=True, timeout=300)
    assert relinked.returncode == 0, relinked.stderr[-4000:]
    verify = run_cudaredist("verify", "--prefix", str(prefix), env=env)
    print(verify.stdout)
    assert verify.returncode == 0, verify.stdout + verify.stderr
    for added in ("lib/x64/cudart64_13.def", "lib/x64/libcudart.a"):
        assert f"extra    {added}" in verify.stdout, verify.stdout
    assert run_cudaredist("uninstall", "--prefix", str(prefix), env=env).returncode == 0
    assert sorted(p.name for p in lib_x64.iterdir()) == ["cudart64_13.def", "libcudart.a"]
