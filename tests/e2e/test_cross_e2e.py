"""A real x86_64 -> aarch64 cross tree: CUDA 13.0.2 from NVIDIA's linux-x86_64 and linux-sbsa
wheels (re-packed into a mirror by `cudaredist mirror --source pypi`), installed with
``--host linux-x86_64 --platform linux-sbsa``; its x86-64 nvcc and Debian's aarch64-linux-gnu-g++
build an aarch64 program against the tree's sbsa cudart (by hand and through CMake, each
configured only with what `cudaredist env` prints), and the program runs under qemu-user, where
cudaGetDeviceCount fails cleanly (no driver)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from cudaredist.envexport import Environment, applied
from tests.e2e.test_cmake import find_cmake, generator
from tests.hosts import require_linux_x86_64
from tests.realmirror import (  # noqa: F401  (fixtures)
    host_free_env,
    real_mirror_1302_sbsa,
    real_wheel_cache,
    run_cudaredist,
    scratch,
)
from tests.wintools import ARM64_MAIN_CUDART, llvm, tool

pytestmark = [pytest.mark.e2e, pytest.mark.pypi]

require_linux_x86_64()

PROJECT = Path(__file__).resolve().parent / "cross_project"
SYSROOT = "/usr/aarch64-linux-gnu"   # Debian's aarch64 libc, for qemu-aarch64 -L
ELF_X86_64, ELF_AARCH64 = 62, 183    # e_machine


def elf_machine(path: Path) -> int:
    head = path.read_bytes()[:20]
    assert head[:4] == b"\x7fELF", f"{path} is not an ELF file"
    return int.from_bytes(head[18:20], "little")


def ok(r: subprocess.CompletedProcess[str]) -> subprocess.CompletedProcess[str]:
    assert r.returncode == 0, f"{r.args}:\n{r.stdout[-4000:]}\n{r.stderr[-4000:]}"
    return r


def sh(cmd: list[str], env: dict[str, str], **kw: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600,  # type: ignore[call-overload, no-any-return]
                          **kw)


def under_qemu(program: Path, env: dict[str, str]) -> str:
    """The program's output under qemu-aarch64; it must fail cleanly: no driver here."""
    r = sh([tool("qemu-aarch64", "apt-get install qemu-user"), "-L", SYSROOT, str(program)], env)
    print(f"$ qemu-aarch64 -L {SYSROOT} {program.name}\n{r.stdout}{r.stderr}(exit {r.returncode})")
    assert r.returncode == 3, (r.returncode, r.stdout, r.stderr)
    clean_failure = r"CUDA runtime 130\d\d; cudaGetDeviceCount: cudaError\w+ \([1-9]\d*\)"
    assert re.search(clean_failure, r.stdout), r.stdout
    return r.stdout


@pytest.fixture(scope="module")
def cross_tree(real_mirror_1302_sbsa: Path, tmp_path_factory: pytest.TempPathFactory  # noqa: F811
               ) -> Iterator[tuple[Path, dict[str, str], dict[str, object]]]:
    with scratch(tmp_path_factory, "cross") as tmp:
        env = host_free_env(tmp / "cache")
        prefix = tmp / "cuda 13.0 sbsa"
        line = ["install", "13.0.2", "--platform", "linux-sbsa", "--host", "linux-x86_64",
                "--prefix", str(prefix), "--base-url", str(real_mirror_1302_sbsa)]
        r = ok(run_cudaredist(*line, env=env))
        print(f"$ cudaredist {' '.join(line)}\n{r.stderr[-600:]}")
        print(ok(run_cudaredist("info", "--prefix", str(prefix), env=env)).stdout)
        printed = ok(run_cudaredist("env", "--prefix", str(prefix), env=env))
        print(f"$ cudaredist env --prefix ...\n{printed.stdout}{printed.stderr}")
        found = json.loads(ok(run_cudaredist("env", "--prefix", str(prefix), "--json", env=env)).stdout)
        yield prefix, env, found


def loaded(found: dict[str, object], env: dict[str, str]) -> dict[str, str]:
    """``env`` with what `cudaredist env` sets (as `eval "$(cudaredist env ...)"` would)."""
    sets, prepend = found["set"], found["prepend"]
    assert isinstance(sets, dict) and isinstance(prepend, dict)
    return applied(Environment(tuple(sets.items()), tuple((k, tuple(v)) for k, v in prepend.items()),
                               host_windows=False), env)


def test_tools_are_x86_64_and_the_target_runtime_aarch64(cross_tree) -> None:  # type: ignore[no-untyped-def]
    prefix, env, _found = cross_tree
    assert elf_machine(prefix / "bin/nvcc") == ELF_X86_64
    assert elf_machine(prefix / "bin/ptxas") == ELF_X86_64
    assert elf_machine(prefix / "nvvm/bin/cicc") == ELF_X86_64
    runtimes = sorted((prefix / "targets/sbsa-linux/lib").glob("libcudart.so.*"))
    assert runtimes and all(elf_machine(p) == ELF_AARCH64 for p in runtimes), runtimes
    assert (prefix / "targets/sbsa-linux/include/crt/host_config.h").is_file()
    assert ok(run_cudaredist("verify", "--prefix", str(prefix), env=env)).returncode == 0


def test_nvcc_builds_an_aarch64_program_that_runs_under_qemu(cross_tree, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    prefix, env, found = cross_tree
    gxx = tool("aarch64-linux-gnu-g++", "apt-get install g++-aarch64-linux-gnu")
    assert found["set"]["NVCC_CCBIN"] == Path(gxx).name
    assert found["set"]["NVCC_APPEND_FLAGS"] == "-target-dir sbsa-linux"
    ready = loaded(found, env)
    out = tmp_path / "count"
    cmd = ["nvcc", "-ccbin", "aarch64-linux-gnu-g++", "-arch=sm_90", str(PROJECT / "count.cu"),
           "-o", str(out)]
    assert shutil.which("nvcc", path=ready["PATH"]) == str(prefix / "bin/nvcc")
    ok(sh(cmd, ready, cwd=tmp_path))
    assert elf_machine(out) == ELF_AARCH64
    under_qemu(out, env)
    # against the shared runtime too: the program loads the tree's aarch64 libcudart.so.13
    shared = tmp_path / "count-shared"
    ok(sh([*cmd[:-1], str(shared), "-cudart", "shared"], ready, cwd=tmp_path))
    qemu_env = env | {"QEMU_SET_ENV": f"LD_LIBRARY_PATH={prefix / 'targets/sbsa-linux/lib'}"}
    under_qemu(shared, qemu_env)


def test_cmake_builds_it_with_what_env_prints(cross_tree, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    prefix, env, found = cross_tree
    tool("aarch64-linux-gnu-g++", "apt-get install g++-aarch64-linux-gnu")
    cmake, version = find_cmake()
    args = found["cmake_args"]
    assert isinstance(args, list) and f"-DCUDAToolkit_ROOT={prefix}" in args, args
    ready = loaded(found, env)
    build = tmp_path / "build"
    configure = ok(sh([cmake, *generator(), "-S", str(PROJECT), "-B", str(build), *args], ready))
    print(f"$ cmake {' '.join(args)} (CMake {version})\n{configure.stdout[-1500:]}")
    facts = dict(line.split("=", 1) for line in (build / "toolkit.txt").read_text().splitlines())
    assert facts["crosscompiling"] == "TRUE"
    assert Path(facts["target_dir"]) == prefix / "targets/sbsa-linux"
    # found through the root's lib link or in the target dir: the target's library either way
    target_lib = (prefix / "targets/sbsa-linux/lib").resolve()
    assert Path(facts["cudart"]).resolve().is_relative_to(target_lib), facts
    built = ok(sh([cmake, "--build", str(build)], ready))
    print(built.stdout[-800:])
    assert elf_machine(build / "count") == ELF_AARCH64
    under_qemu(build / "count", env)


def test_doctor_probes_the_cross_tree_with_its_cross_compiler(cross_tree) -> None:  # type: ignore[no-untyped-def]
    prefix, env, _found = cross_tree
    tool("aarch64-linux-gnu-g++", "apt-get install g++-aarch64-linux-gnu")
    r = run_cudaredist("doctor", "--prefix", str(prefix), "--json", env=env)
    checks = {c["name"]: c for c in json.loads(r.stdout)["checks"]}
    print("\n".join(f"{c['status']:<5} {c['name']:<13} {c['detail']}" for c in checks.values()))
    compiler = checks["host-compiler"]
    assert compiler["status"] == "ok" and "aarch64-linux-gnu-g++" in compiler["detail"], compiler
    assert checks["probe"]["status"] == "ok", checks["probe"]
    assert "for linux-sbsa, with aarch64-linux-gnu-g++" in checks["probe"]["detail"]


# -- Windows x64 -> arm64, from NVIDIA's wheels (13.4 is the first release with win_arm64 ones) ----------
WIN_LABEL = "13.4.3"
PE_AMD64, PE_ARM64 = 0x8664, 0xAA64

def pe_machine(path: Path) -> int:
    data = path.read_bytes()[:4096]
    pe = int.from_bytes(data[0x3C:0x40], "little")
    assert data[:2] == b"MZ" and data[pe:pe + 4] == b"PE\0\0", f"{path} is not a PE image"
    return int.from_bytes(data[pe + 4:pe + 6], "little")


def test_windows_arm64_cross_tree_from_nvidias_wheels_links_with_lld(real_wheel_cache: Path,  # noqa: F811
                                                                      tmp_path: Path) -> None:
    env = host_free_env(real_wheel_cache)
    prefix = tmp_path / "cuda woa"
    line = ["install", WIN_LABEL, "--source", "pypi", "--platform", "windows-arm64",
            "--host", "windows-x86_64", "--prefix", str(prefix)]
    r = ok(run_cudaredist(*line, env=env))
    print(f"$ cudaredist {' '.join(line)}\n{r.stderr[-400:]}")
    print(ok(run_cudaredist("info", "--prefix", str(prefix), env=env)).stdout)
    printed = ok(run_cudaredist("env", "--prefix", str(prefix), env=env))
    print(f"$ cudaredist env --prefix ... (this Linux host)\n{printed.stdout}{printed.stderr}")
    assert pe_machine(prefix / "bin/nvcc.exe") == PE_AMD64
    assert pe_machine(prefix / "bin/ptxas.exe") == PE_AMD64
    assert pe_machine(prefix / "bin/arm64/cudart64_13.dll") == PE_ARM64
    assert not (prefix / "lib/x64").exists() and not (prefix / "bin/x64").exists()
    headers = llvm("llvm-readobj", "--file-headers", str(prefix / "lib/arm64/cudart.lib"))
    machines = set(re.findall(r"Machine: (IMAGE_FILE_MACHINE_\w+)", headers))
    assert machines == {"IMAGE_FILE_MACHINE_ARM64"}, machines
    (tmp_path / "main.s").write_text(ARM64_MAIN_CUDART)
    llvm("llvm-mc", "-triple=aarch64-pc-windows-msvc", "-filetype=obj", str(tmp_path / "main.s"),
         "-o", str(tmp_path / "main.obj"))
    # 13.x cudart.lib is NVIDIA's static loader (MSVC objects, the C runtime's): a program links
    # against the runtime DLL through the GNU import library cudaredist writes beside it, with
    # lld-link (MSVC's driver) and ld.lld -m arm64pe (llvm-mingw's) alike
    gnu = prefix / "lib/arm64/libcudart.dll.a"
    gnu_headers = llvm("llvm-readobj", "--file-headers", str(gnu))
    assert set(re.findall(r"Machine: (IMAGE_FILE_MACHINE_\w+)", gnu_headers)) == {"IMAGE_FILE_MACHINE_ARM64"}
    llvm("lld-link", "/machine:arm64", "/subsystem:console", "/entry:mainCRTStartup", "/nodefaultlib",
         f"/out:{tmp_path / 'msvc.exe'}", str(tmp_path / "main.obj"), str(gnu))
    llvm("ld.lld", "-m", "arm64pe", "-o", str(tmp_path / "gnu.exe"), str(tmp_path / "main.obj"),
         f"-L{prefix / 'lib/arm64'}", "-lcudart", "-e", "mainCRTStartup", "--subsystem", "console")
    for exe in ("msvc.exe", "gnu.exe"):
        imports = llvm("llvm-readobj", "--coff-imports", str(tmp_path / exe))
        print(f"{exe}: machine {pe_machine(tmp_path / exe):#x}\n{imports}")
        assert pe_machine(tmp_path / exe) == PE_ARM64
        assert "Name: cudart64_13.dll" in imports and "Symbol: cudaGetDeviceCount" in imports, imports
    assert ok(run_cudaredist("verify", "--prefix", str(prefix), env=env)).returncode == 0


def test_a_cross_tree_of_wheels_whose_nvcc_profile_names_top_include(real_wheel_cache: Path,  # noqa: F811
                                                                     tmp_path: Path) -> None:
    """NVIDIA's wheels from 13.2 on ship an nvcc.profile with $(TOP)/include and $(TOP)/lib, which
    -target-dir does not move: the root's links to targets/sbsa-linux give nvcc the target's files."""
    tool("aarch64-linux-gnu-g++", "apt-get install g++-aarch64-linux-gnu")
    env = host_free_env(real_wheel_cache)
    prefix = tmp_path / "cuda 13.2 sbsa"
    ok(run_cudaredist("install", "13.2.2", "--source", "pypi", "--platform", "linux-sbsa",
                      "--host", "linux-x86_64", "--prefix", str(prefix), env=env))
    assert '"-I$(TOP)/include"' in (prefix / "bin/nvcc.profile").read_text()
    found = json.loads(ok(run_cudaredist("env", "--prefix", str(prefix), "--json", env=env)).stdout)
    out = tmp_path / "count"
    ok(sh(["nvcc", "-arch=sm_90", str(PROJECT / "count.cu"), "-o", str(out)], loaded(found, env),
          cwd=tmp_path))
    assert elf_machine(out) == ELF_AARCH64
    under_qemu(out, env)
