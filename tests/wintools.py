"""MinGW-w64 and Wine for the tests that build and run Windows programs on Linux.

``.ci/run`` installs them (Debian: g++-mingw-w64-x86-64-posix, wine64, and lld for lld-link); under
CI a missing one fails the test, elsewhere it skips. Wine's first start creates its prefix (about 20 s):
one prefix per session, shared by every module through ``_made``.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.hosts import skip_on_windows

# Debian's wine64 puts its loader in /usr/lib/wine/, off PATH (the `wine` wrapper on PATH
# needs the wine32 half for some commands); other distributions have wine64 or wine on PATH.
_WINE_CANDIDATES = ("wine64", "/usr/lib/wine/wine64", "/usr/lib64/wine/wine64", "wine")
# Loads and fails of DLLs stay visible ("Library cudart64_13.dll ... not found"); the rest is noise.
WINEDEBUG = "-all,err+module"
_made: dict[str, Path] = {}

# DLLs every Windows (and Wine) has: never shipped beside a program
SYSTEM_DLLS = frozenset({"kernel32.dll", "msvcrt.dll", "user32.dll", "advapi32.dll", "ntdll.dll",
                         "ws2_32.dll", "shell32.dll", "ole32.dll"})


# These toolchains run on the Linux host that builds and runs Windows programs; the suite under the
# Windows CPython has none of them (a Linux path is not a program there).
_LINUX_HOST = "MinGW-w64, LLVM and Wine run on the Linux host that cross-builds for Windows"


def _missing(what: str, hint: str) -> None:
    if os.environ.get("CI"):
        pytest.fail(f"{what} is not installed although CI is set; .ci/run should have installed it ({hint})")
    pytest.skip(f"{what} is not installed ({hint}; .ci/run does)")


def mingw_gxx() -> str:
    """x86_64-w64-mingw32-g++, the posix-threads variant where there is one."""
    skip_on_windows(_LINUX_HOST)
    for name in ("x86_64-w64-mingw32-g++-posix", "x86_64-w64-mingw32-g++"):
        found = shutil.which(name)
        if found:
            return found
    _missing("x86_64-w64-mingw32-g++", "apt-get install g++-mingw-w64-x86-64-posix")
    raise AssertionError("unreachable")


def tool(name: str, hint: str) -> str:
    """The path of a program on PATH; a fail under CI, else a skip, naming how to install it."""
    skip_on_windows(_LINUX_HOST)
    found = shutil.which(name)
    if found is None:
        _missing(name, hint)
        raise AssertionError("unreachable")
    return found


def mingw_objdump() -> str:
    return tool("x86_64-w64-mingw32-objdump", "apt-get install binutils-mingw-w64-x86-64")


def lld_link() -> str:
    """LLVM's MSVC-compatible linker (Debian: lld)."""
    return tool("lld-link", "apt-get install lld")


def wine_binary() -> str:
    skip_on_windows(_LINUX_HOST)
    for cand in _WINE_CANDIDATES:
        found = shutil.which(cand) if "/" not in cand else (cand if os.access(cand, os.X_OK) else None)
        if found:
            return found
    _missing("wine64", "apt-get install wine64")
    raise AssertionError("unreachable")


def wine_env(prefix: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("DISPLAY", "WAYLAND_DISPLAY")}
    env.update(WINEPREFIX=str(prefix), WINEDEBUG=WINEDEBUG, WINEDLLOVERRIDES="mscoree,mshtml=")
    return env


@pytest.fixture(scope="session")
def wine_prefix(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A Wine prefix made once per session (``wineboot --init``)."""
    if "prefix" not in _made:
        wine = wine_binary()
        prefix = tmp_path_factory.mktemp("wineprefix")
        r = subprocess.run([wine, "wineboot", "--init"], env=wine_env(prefix), capture_output=True,
                           text=True, timeout=300)
        assert r.returncode == 0, f"wineboot --init failed ({r.returncode}):\n{r.stderr[-3000:]}"
        _made["prefix"] = prefix
    return _made["prefix"]


def run_under_wine(exe: Path, prefix: Path) -> subprocess.CompletedProcess[str]:
    """Run ``exe`` with its own directory as the working directory (Windows looks for DLLs in
    the program's directory first, then the working directory: only the former is meant)."""
    return subprocess.run([wine_binary(), exe.name], cwd=exe.parent, env=wine_env(prefix),
                          capture_output=True, text=True, timeout=120)


def imported_dlls(exe: Path) -> list[str]:
    """The DLL names in a PE image's import table, lower-case, as objdump reads them."""
    out = subprocess.run([mingw_objdump(), "-p", str(exe)], capture_output=True, text=True, check=True).stdout
    return sorted(line.split(":", 1)[1].strip().lower() for line in out.splitlines()
                  if line.strip().startswith("DLL Name:"))


def llvm(name: str, *args: str) -> str:
    """Run one of LLVM's tools (llvm-mc, llvm-readobj, lld-link, ld.lld): its output, or the test
    fails with what the tool said."""
    r = subprocess.run([tool(name, "apt-get install lld llvm"), *args], capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, f"{name} {' '.join(args)}:\n{r.stdout[-2000:]}{r.stderr[-3000:]}"
    return r.stdout


# An ARM64 program's entry point that calls the CUDA runtime: linked against a tree's lib/arm64 only
ARM64_MAIN_CUDART = """
    .text
    .globl mainCRTStartup
    .p2align 2
mainCRTStartup:
    stp x29, x30, [sp, #-16]!
    bl cudaGetDeviceCount
    ldp x29, x30, [sp], #16
    ret
"""
