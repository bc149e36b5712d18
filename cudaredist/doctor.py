"""Why CUDA does not work on this machine: checks of the tree, nvcc, the host compiler, a probe
build, the driver, the GPUs and the environment, each giving ok, warn or fail and a fix.

Every check is a function over injected inputs (an environment mapping, a ``which`` over its
PATH, a driver library and loader) returning a :class:`Check`; :func:`run` strings them
together in the order a build meets them:

    toolkit        the tree: install record, release, platform, sizes, links and exec bits
    nvcc           bin/nvcc --version runs and reports the release the record names
    host-compiler  the compiler nvcc will run, judged by the tree's own include/crt/host_config.h
                   (preprocessed with that compiler), never by a version table; on MSVC whether
                   the tree's CCCL needs /Zc:preprocessor
    probe          a kernel and a host call compiled and linked with bin/nvcc, in a temp dir
    driver         libcuda.so.1 / nvcuda.dll through ctypes: absent, the stub, too old, minor compat
    gpu            devices and compute capabilities, and the -arch / CMAKE_CUDA_ARCHITECTURES value
    environment    CUDA_PATH / CUDA_HOME / PATH naming another toolkit; what a plain `nvcc` runs
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from cudaredist.errors import CudaRedistError, ManifestError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

Status = Literal["ok", "warn", "fail"]
_RANK = {"ok": 0, "warn": 1, "fail": 2}
ORDER = ("toolkit", "nvcc", "host-compiler", "probe", "driver", "gpu", "environment")

Which = Callable[[str, str | None], str | None]  # (command, PATH) -> path or None
Loader = Callable[[str], Any]  # ctypes.CDLL

# CUresult values the driver check names (cuda.h)
CUDA_SUCCESS = 0
CUDA_ERROR_NO_DEVICE = 100
CUDA_ERROR_STUB_LIBRARY = 34
_CU_ERRORS = {1: "CUDA_ERROR_INVALID_VALUE", 2: "CUDA_ERROR_OUT_OF_MEMORY",
              3: "CUDA_ERROR_NOT_INITIALIZED", 4: "CUDA_ERROR_DEINITIALIZED",
              34: "CUDA_ERROR_STUB_LIBRARY", 35: "CUDA_ERROR_INSUFFICIENT_DRIVER",
              46: "CUDA_ERROR_DEVICE_UNAVAILABLE", 100: "CUDA_ERROR_NO_DEVICE",
              101: "CUDA_ERROR_INVALID_DEVICE", 304: "CUDA_ERROR_OPERATING_SYSTEM",
              803: "CUDA_ERROR_SYSTEM_DRIVER_MISMATCH",
              804: "CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE", 999: "CUDA_ERROR_UNKNOWN"}
_ATTR_CC_MAJOR = 75  # CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR
_ATTR_CC_MINOR = 76


@dataclass(frozen=True)
class Check:
    """One check's verdict: ``fix`` is what to do when the status is not ok ("" when ok)."""

    name: str
    status: Status
    detail: str
    fix: str = ""

    def to_json(self) -> dict[str, str]:
        return {"name": self.name, "status": self.status, "detail": self.detail, "fix": self.fix}


@dataclass(frozen=True)
class Report:
    prefix: str | None
    release: str | None
    checks: tuple[Check, ...]

    @property
    def failed(self) -> bool:
        return any(c.status == "fail" for c in self.checks)

    def to_json(self) -> dict[str, Any]:
        return {"prefix": self.prefix, "release": self.release,
                "checks": [c.to_json() for c in self.checks]}


@dataclass(frozen=True)
class Toolkit:
    """What the toolkit check learned about the tree, for the checks after it."""

    prefix: Path
    release: str | None  # "13.0.2" from the record; None for a tree cudaredist did not install
    platform: str | None
    nvcc_version: str | None  # the record's cuda_nvcc component version ("13.0.88")
    has_nvcc: bool
    native: bool  # runs on this host (not a windows tree on Linux, say)
    windows: bool  # a Windows tree

    def nvcc(self) -> Path:
        return self.prefix / "bin" / ("nvcc.exe" if self.windows else "nvcc")


def _which(command: str, path: str | None) -> str | None:
    return shutil.which(command, path=path)


def _run(cmd: Sequence[str], env: Mapping[str, str], *, cwd: str | None = None,
         timeout: float = 120) -> tuple[int, str]:
    """(exit code, stdout + stderr); a command that cannot start gives (-1, why)."""
    try:
        r = subprocess.run(list(cmd), env=dict(env), cwd=cwd, capture_output=True, text=True,
                           errors="replace", timeout=timeout)
    except OSError as exc:
        return -1, f"cannot run {cmd[0]}: {exc}"
    except subprocess.TimeoutExpired:
        return -1, f"{cmd[0]} did not finish within {timeout:.0f} s"
    return r.returncode, (r.stdout or "") + (r.stderr or "")


def _first_line(text: str) -> str:
    return next((ln.strip() for ln in text.splitlines() if ln.strip()), "")


def _short(items: Sequence[str], n: int = 3) -> str:
    return ", ".join(items[:n]) + (f" and {len(items) - n} more" if len(items) > n else "")


# -- toolkit ------------------------------------------------------------------------------------
def _host_is_windows() -> bool:
    return os.name == "nt"


def check_toolkit(prefix: Path, *, host_windows: bool | None = None) -> tuple[Check, Toolkit | None]:
    """The tree in ``prefix``: its install record, and a quick verify (sizes, links, exec bits)."""
    from cudaredist.record import read_record, verify

    host_windows = _host_is_windows() if host_windows is None else host_windows
    install = f"cudaredist install TRAIN --prefix {prefix}"
    if not prefix.is_dir():
        return Check("toolkit", "fail", f"{prefix} does not exist or is not a directory",
                     f"install a toolkit there: {install}"), None
    try:
        rec = read_record(prefix)
    except CudaRedistError as exc:
        return Check("toolkit", "fail", str(exc), f"reinstall: {install} --force"), None
    if rec is None:
        windows = (prefix / "bin" / "nvcc.exe").is_file()
        has_nvcc = windows or (prefix / "bin" / "nvcc").is_file()
        if not has_nvcc:
            return Check("toolkit", "fail",
                         f"{prefix} holds no CUDA toolkit (no install record, no bin/nvcc)",
                         f"install one: {install}"), None
        tk = Toolkit(prefix, None, None, None, True, windows == host_windows, windows)
        return Check("toolkit", "warn",
                     f"{prefix} holds a toolkit that cudaredist did not install (no "
                     ".cudaredist/record.json): its files cannot be verified",
                     f"for a tree that can be verified and reproduced: {install}"), tk
    plan = rec["plan"]
    release, platform = str(plan["release"]), str(plan["platform"])
    windows = platform.startswith("windows")
    nvcc_version = next((str(c["version"]) for c in plan.get("components", [])
                         if c.get("name") == "cuda_nvcc"), None)
    names = [f["path"] for f in rec.get("files", [])]
    has_nvcc = any(n in ("bin/nvcc", "bin/nvcc.exe") for n in names)
    tk = Toolkit(prefix, release, platform, nvcc_version, has_nvcc, windows == host_windows, windows)
    report = verify(prefix, fast=True)
    # exec bits: a tree copied through a tool that drops them has an nvcc that cannot start
    lost = [] if host_windows else [
        f["path"] for f in rec.get("files", [])
        if "link" not in f and int(str(f.get("mode", "0")), 8) & 0o111
        and (prefix / f["path"]).is_file() and not os.access(prefix / f["path"], os.X_OK)]
    what = f"CUDA {release} ({platform}, profile {plan.get('profile', '?')})"
    reinstall = f"cudaredist install {release} --platform {platform} --prefix {prefix} --force"
    if report.missing or report.changed:
        problems = [f"{len(found)} {kind} ({_short(found)})"
                    for kind, found in (("missing", report.missing), ("changed", report.changed)) if found]
        return Check("toolkit", "fail", f"{what} in {prefix}: {'; '.join(problems)}",
                     f"reinstall: {reinstall} (`cudaredist verify --prefix {prefix}` lists every file)"), tk
    if lost:
        return Check("toolkit", "fail", f"{what} in {prefix}: {len(lost)} programs lost their exec bit "
                     f"({_short(lost)})", f"reinstall: {reinstall} (or chmod +x them)"), tk
    extra = f", {len(report.extra)} files added by hand" if report.extra else ""
    return Check("toolkit", "ok", f"{what} in {prefix}: {report.checked} entries, sizes, links and "
                 f"exec bits match the install record{extra}"), tk


# -- nvcc ---------------------------------------------------------------------------------------
_NVCC_VERSION = re.compile(r"release (\d+\.\d+), V(\d+(?:\.\d+)+)")


def _not_run(tk: Toolkit) -> str | None:
    """Why the tree's programs are not run here, or None."""
    if not tk.native:
        return (f"not run: a {tk.platform or ('Windows' if tk.windows else 'Linux')} tree does not "
                "run on this host (a cross-compiling tree)")
    if not tk.has_nvcc:
        return "not run: the tree has no nvcc (a runtime-only profile)"
    return None


def check_nvcc(tk: Toolkit, env: Mapping[str, str]) -> tuple[Check, str | None]:
    """``bin/nvcc --version`` runs and reports the record's release; returns the X.Y it reports."""
    skip = _not_run(tk)
    if skip:
        return Check("nvcc", "ok", skip), None
    nvcc = tk.nvcc()
    if not nvcc.is_file():
        return Check("nvcc", "fail", f"{nvcc} is missing",
                     f"reinstall the tree with the nvcc profile: cudaredist install {tk.release or 'TRAIN'} "
                     f"--prefix {tk.prefix} --profile nvcc --force"), None
    rc, out = _run([str(nvcc), "--version"], env, timeout=60)
    m = _NVCC_VERSION.search(out)
    if rc != 0 or m is None:
        return Check("nvcc", "fail",
                     f"{nvcc} --version failed (exit {rc}): {_first_line(out) or 'no output'}",
                     "reinstall the tree (--force); if it still fails, the host cannot run this "
                     "platform's binaries (check `file` on it and the C library version)"), None
    reported, full = m.group(1), m.group(2)
    said = f"{nvcc} reports release {reported}, V{full}"
    if tk.release is not None:
        want = ".".join(tk.release.split(".")[:2])
        if reported != want or (tk.nvcc_version is not None and full != tk.nvcc_version):
            expected = f"release {want}" + (f", V{tk.nvcc_version}" if tk.nvcc_version else "")
            return Check("nvcc", "fail",
                         f"{said}, but the install record names CUDA {tk.release} ({expected})",
                         f"the tree was changed after install: reinstall with --force into {tk.prefix}"
                         ), reported
        said += f", as the record says (CUDA {tk.release})"
    return Check("nvcc", "ok", said), reported


# -- host compiler ------------------------------------------------------------------------------
@dataclass(frozen=True)
class HostCompiler:
    """The compiler nvcc will run: ``spec`` as given, ``path`` where it resolves (None: not found)."""

    spec: str
    path: str | None
    source: str  # where the choice comes from, for messages
    msvc: bool
    linker: str | None = None  # nvcc's default links with g++: its path, or "" when not found
    allow_unsupported: bool = False
    flags_source: str = ""  # the variable holding -allow-unsupported-compiler


def _nvcc_flags(env: Mapping[str, str], windows: bool) -> list[tuple[str, list[str]]]:
    out = []
    for var in ("NVCC_PREPEND_FLAGS", "NVCC_APPEND_FLAGS"):
        value = env.get(var, "")
        if value.strip():
            try:
                out.append((var, shlex.split(value, posix=not windows)))
            except ValueError:
                out.append((var, value.split()))
    return out


def _ccbin_in(args: list[str]) -> str | None:
    found = None
    for i, a in enumerate(args):
        for opt in ("-ccbin", "--compiler-bindir"):
            if a == opt and i + 1 < len(args):
                found = args[i + 1]
            elif a.startswith(opt + "="):
                found = a[len(opt) + 1:]
    return found


def select_host_compiler(env: Mapping[str, str], *, windows: bool, which: Which = _which) -> HostCompiler:
    """The compiler nvcc will use, the way nvcc picks it: ``-ccbin`` in NVCC_PREPEND_FLAGS /
    NVCC_APPEND_FLAGS, else NVCC_CCBIN, else its default: ``cl.exe`` on PATH on Windows, on
    Linux ``gcc`` on PATH to compile and ``g++`` to link (what ``nvcc --dryrun`` shows)."""
    path_var = env.get("PATH")
    flags = _nvcc_flags(env, windows)
    allow = next((var for var, args in flags for a in args
                  if a.lstrip("-") == "allow-unsupported-compiler"), "")
    spec, source = None, ""
    for var, args in flags:  # NVCC_APPEND_FLAGS is read last: its -ccbin is the one that counts
        got = _ccbin_in(args)
        if got is not None:
            spec, source = got, f"-ccbin in {var}"
    if spec is None and env.get("NVCC_CCBIN"):
        spec, source = env["NVCC_CCBIN"], "NVCC_CCBIN"
    default = "cl.exe" if windows else "gcc"
    linker: str | None = None
    if spec is None:
        spec, source = default, f"nvcc's default `{default}` on PATH"
        path = which(default, path_var)
        if not windows:
            linker = which("g++", path_var) or ""
    elif os.path.isdir(spec):  # -ccbin DIR: nvcc runs DIR/gcc (DIR\cl.exe)
        candidate = os.path.join(spec, default)
        path = candidate if os.path.isfile(candidate) else None
        spec = candidate
    elif os.sep in spec or (os.altsep and os.altsep in spec):
        path = spec if os.path.isfile(spec) else None
    else:
        path = which(spec, path_var)
    name = os.path.basename(spec).lower()
    msvc = windows and name in ("cl", "cl.exe")
    return HostCompiler(spec, path, source, msvc, linker, bool(allow), allow)


def compiler_version(hc: HostCompiler, env: Mapping[str, str]) -> str:
    """The compiler's own banner line ("gcc (Debian 12.2.0-14) 12.2.0", "Microsoft (R) C/C++ ...")."""
    if hc.path is None:
        return ""
    rc, out = _run([hc.path] if hc.msvc else [hc.path, "--version"], env, timeout=30)
    return _first_line(out) if out else ""


@dataclass(frozen=True)
class HostConfigVerdict:
    """What preprocessing the tree's host_config.h with the compiler said."""

    accepted: bool
    error: str  # the #error text when refused, or why it could not be judged
    judged: bool  # False: the preprocessor failed for another reason (no verdict)


_ERROR_LINE = re.compile(r"#\s*error:?\s*(.*)")


def judge_host_config(hc: HostCompiler, include: Path, env: Mapping[str, str]) -> HostConfigVerdict:
    """Preprocess ``crt/host_config.h`` from ``include`` with the compiler and the defines nvcc
    sets, and see whether it reaches one of the header's ``#error`` lines."""
    assert hc.path is not None
    header = include / "crt" / "host_config.h"
    if not header.is_file():
        return HostConfigVerdict(False, f"{header} is missing", judged=False)
    defines = ("__CUDACC__", "__NVCC__", "__CUDA_INCLUDE_COMPILER_INTERNAL_HEADERS__")
    with tempfile.TemporaryDirectory(prefix="cudaredist-doctor-") as tmp:
        src = Path(tmp) / "host_config_probe.cpp"
        src.write_text('#include "crt/host_config.h"\n', encoding="utf-8")
        if hc.msvc:
            cmd = [hc.path, "/nologo", "/EP", "/TP", *(f"/D{d}" for d in defines), f"/I{include}", str(src)]
        else:
            cmd = [hc.path, "-E", "-x", "c++", *(f"-D{d}" for d in defines), f"-I{include}", str(src),
                   "-o", os.devnull]
        rc, out = _run(cmd, env, cwd=tmp, timeout=60)
    if rc == 0:
        return HostConfigVerdict(True, "", judged=True)
    for line in out.splitlines():  # only host_config.h is included: its #error is the verdict
        m = _ERROR_LINE.search(line)
        if m:
            return HostConfigVerdict(False, m.group(1).strip().lstrip("-").strip(), judged=True)
    first = next((ln.strip() for ln in out.splitlines() if re.search(r"error|fatal", ln, re.I)), "")
    return HostConfigVerdict(False, first or _first_line(out) or f"exit {rc}", judged=False)


def cccl_msvc_rule(text: str) -> Literal["error", "message", "none"]:
    """How the tree's CCCL ``preprocessor.h`` treats MSVC's traditional preprocessor: an ``#error``
    (13.2 and later: /Zc:preprocessor is required), a ``#pragma message`` (a warning) or nothing."""
    m = re.search(r"_MSVC_TRADITIONAL(.*?)#\s*endif", text, re.S)
    if m is None:
        return "none"
    block = m.group(1)
    if re.search(r"#\s*error", block):
        return "error"
    return "message" if re.search(r"#\s*pragma\s+message", block) else "none"


def cccl_preprocessor_header(include: Path) -> Path | None:
    for rel in ("cccl/cuda/std/__cccl/preprocessor.h", "cuda/std/__cccl/preprocessor.h"):
        if (include / rel).is_file():
            return include / rel
    return None


def zc_preprocessor_given(env: Mapping[str, str]) -> str:
    """Where /Zc:preprocessor reaches cl.exe ("" if nowhere): nvcc's flag variables (as
    -Xcompiler) or CL / _CL_, the variables cl.exe itself reads."""
    for var in ("NVCC_PREPEND_FLAGS", "NVCC_APPEND_FLAGS", "CL", "_CL_"):
        if re.search(r"[/-]Zc:preprocessor(?![-\w])", env.get(var, "")):
            return var
    return ""


def check_msvc_preprocessor(include: Path, env: Mapping[str, str]) -> Check:
    """Whether this tree's CCCL needs /Zc:preprocessor from cl.exe, and whether it gets it."""
    header = cccl_preprocessor_header(include)
    rule = cccl_msvc_rule(header.read_text(encoding="utf-8", errors="replace")) if header else "none"
    given = zc_preprocessor_given(env)
    fix = ('pass it to cl.exe through nvcc: set NVCC_APPEND_FLAGS="-Xcompiler=/Zc:preprocessor" (CMake: '
           'add -Xcompiler=/Zc:preprocessor to CMAKE_CUDA_FLAGS and /Zc:preprocessor to CMAKE_CXX_FLAGS), '
           'or set CL=/Zc:preprocessor, which cl.exe reads itself')
    if rule == "none":
        return Check("host-compiler", "ok", "this CCCL works with MSVC's traditional preprocessor")
    if given:
        return Check("host-compiler", "ok", f"/Zc:preprocessor, which this CCCL wants, is set in {given}")
    if rule == "error":
        return Check("host-compiler", "fail",
                     f"this CCCL ({header}) stops with an #error under MSVC's traditional preprocessor "
                     "(\"MSVC/cl.exe with traditional preprocessor is used\", fatal error C1189), and "
                     "/Zc:preprocessor is set nowhere", fix)
    return Check("host-compiler", "warn",
                 f"this CCCL ({header}) warns under MSVC's traditional preprocessor and later "
                 "releases refuse it; /Zc:preprocessor is set nowhere", fix)


def _supported_fix(hc: HostCompiler) -> str:
    if hc.msvc:
        example = ("install a Visual Studio version the #error above accepts and open its "
                   "'x64 Native Tools' prompt (or run its vcvars64.bat; in GitHub Actions "
                   "ilammy/msvc-dev-cmd with `toolset:`), or point NVCC_CCBIN at that cl.exe's directory")
    else:
        example = ("install a compiler version the #error above accepts and point nvcc at it: "
                   "export NVCC_CCBIN=/usr/bin/g++-13 (any version this toolkit supports; CMake: "
                   "-DCMAKE_CUDA_HOST_COMPILER=...)")
    return (f"{example}. Last resort: -allow-unsupported-compiler (NVCC_APPEND_FLAGS="
            "-allow-unsupported-compiler) skips the check, at your own risk: an unsupported host "
            "compiler can fail on CUDA's headers or build code that computes wrong results")


def check_host_compiler(tk: Toolkit, env: Mapping[str, str], *, windows: bool | None = None,
                        which: Which = _which) -> Check:
    """The compiler nvcc will use, judged by the tree's own ``include/crt/host_config.h``."""
    skip = _not_run(tk)
    if skip:
        return Check("host-compiler", "ok", skip)
    windows = tk.windows if windows is None else windows
    hc = select_host_compiler(env, windows=windows, which=which)
    if hc.path is None:
        if windows:
            return Check("host-compiler", "fail",
                         f"nvcc needs MSVC's cl.exe and finds none ({hc.source}: {hc.spec} not found)",
                         "run the build from Visual Studio's 'x64 Native Tools Command Prompt' (or call "
                         "vcvars64.bat first; in GitHub Actions: uses: ilammy/msvc-dev-cmd@v1), or set "
                         "NVCC_CCBIN to the directory that holds cl.exe")
        return Check("host-compiler", "fail",
                     f"nvcc will run {hc.spec} ({hc.source}), which is not found",
                     "install a C++ compiler (Debian/Ubuntu: apt-get install g++), or set NVCC_CCBIN "
                     "to one this toolkit supports")
    version = compiler_version(hc, env)
    who = f"{version or hc.spec} ({hc.path}, {hc.source})"
    include = tk.prefix / "include"
    verdict = judge_host_config(hc, include, env)
    checks: list[Check] = []
    what = f"CUDA {tk.release}'s" if tk.release else "the tree's"
    if verdict.accepted:
        checks.append(Check("host-compiler", "ok", f"{who} passes {what} include/crt/host_config.h"))
    elif not verdict.judged:
        checks.append(Check("host-compiler", "warn",
                            f"could not judge {who} against {what} include/crt/host_config.h: "
                            f"{verdict.error}",
                            "run the probe's build by hand to see nvcc's own error"))
    elif hc.allow_unsupported:
        checks.append(Check("host-compiler", "warn",
                            f"{who} is refused by {what} include/crt/host_config.h (\"{verdict.error}\"); "
                            f"nvcc accepts it only because -allow-unsupported-compiler is set in "
                            f"{hc.flags_source}, which may fail to compile or build wrong code",
                            _supported_fix(hc)))
    else:
        checks.append(Check("host-compiler", "fail",
                            f"{who} is refused by {what} include/crt/host_config.h: \"{verdict.error}\"",
                            _supported_fix(hc)))
    if hc.linker == "":
        checks.append(Check("host-compiler", "fail", "nvcc links with g++, which is not on PATH",
                            "install g++ (Debian/Ubuntu: apt-get install g++), or set NVCC_CCBIN to a C++ "
                            "compiler, which nvcc then uses to link too"))
    if hc.msvc:
        checks.append(check_msvc_preprocessor(include, env))
    return _merge("host-compiler", checks)


def _merge(name: str, checks: Sequence[Check]) -> Check:
    worst = max(checks, key=lambda c: _RANK[c.status]).status
    relevant = [c for c in checks if c.status == worst] if worst != "ok" else list(checks)
    return Check(name, worst, "; ".join(c.detail for c in relevant),
                 " Also: ".join(dict.fromkeys(c.fix for c in relevant if c.fix)))


# -- probe --------------------------------------------------------------------------------------
PROBE_SOURCE = """\
#include <cstdio>
#include <cuda_runtime.h>

__global__ void cudaredist_probe(int *out) { out[threadIdx.x] = threadIdx.x; }

int main() {
    int *d = nullptr;
    if (cudaMalloc(&d, 32 * sizeof(int)) != cudaSuccess) return 0;  /* no GPU: built is enough */
    cudaredist_probe<<<1, 32>>>(d);
    cudaError_t e = cudaDeviceSynchronize();
    cudaFree(d);
    std::printf("%s\\n", cudaGetErrorString(e));
    return 0;
}
"""

# (pattern in nvcc's output, what it means); the first that matches explains the failure
_MEANINGS: tuple[tuple[str, str], ...] = (
    (r"unsupported (GNU|clang|Microsoft Visual Studio|.*) version",
     "the host compiler is outside the range this toolkit's host_config.h accepts (see host-compiler)"),
    (r"traditional preprocessor", "CCCL needs MSVC's /Zc:preprocessor (see host-compiler)"),
    (r"Cannot find compiler 'cl\.exe'",
     "no MSVC environment: run from a Visual Studio developer prompt or vcvars64.bat"),
    (r"(gcc|g\+\+|c\+\+|clang\+\+|cl\.exe)\S*: (not found|No such file)|failed to preprocess host compiler",
     "nvcc cannot start its host compiler (see host-compiler)"),
    (r"cicc|libnvvm|nvvm", "nvcc's device compiler (nvvm, the libnvvm component) is missing or broken"),
    (r"cannot find -lcudart|cudart\.lib|cannot find -lcudadevrt",
     "the tree has no CUDA runtime libraries to link (the cuda_cudart component)"),
    (r"nv/target|cuda/std|thrust|cub/",
     "CCCL headers are missing (the cccl / cuda_cccl component)"),
    (r"crt/host_config\.h|crt/host_defines\.h|No such file.*\.h",
     "headers nvcc needs are missing from the tree (cuda_crt / cuda_cudart components)"),
    (r"ptxas|fatbinary|nvlink", "one of nvcc's own tools failed (ptxas, fatbinary or nvlink)"),
    (r"\bld\b|collect2|LINK : fatal|undefined reference",
     "the link step failed: the host linker or a library is missing"),
)


def explain_probe_failure(output: str) -> tuple[str, str]:
    """(the first error line, what it means) for nvcc's output."""
    lines = [ln.strip() for ln in output.splitlines() if ln.strip()]
    first = next((ln for ln in lines if re.search(r"\berror\b|fatal|not found|cannot", ln, re.I)),
                 lines[0] if lines else "no output")
    for pattern, meaning in _MEANINGS:
        if re.search(pattern, first, re.I):
            return first, meaning
    for pattern, meaning in _MEANINGS:  # the first line did not say; the rest of the output may
        if re.search(pattern, output, re.I):
            return first, meaning
    return first, "the toolkit could not build a minimal CUDA program"


def check_probe(tk: Toolkit, env: Mapping[str, str], *, timeout: float = 300) -> Check:
    """Compile and link a kernel and a host call with the tree's nvcc, like CMake's try-compile."""
    skip = _not_run(tk)
    if skip:
        return Check("probe", "ok", skip)
    nvcc = tk.nvcc()
    with tempfile.TemporaryDirectory(prefix="cudaredist-probe-") as tmp:
        (Path(tmp) / "probe.cu").write_text(PROBE_SOURCE, encoding="utf-8")
        exe = "probe.exe" if tk.windows else "probe"
        started = time.monotonic()
        rc, out = _run([str(nvcc), "probe.cu", "-o", exe], env, cwd=tmp, timeout=timeout)
        took = time.monotonic() - started
        built = rc == 0 and (Path(tmp) / exe).is_file()
    if built:
        return Check("probe", "ok", f"{nvcc} compiled and linked a kernel and a host call in {took:.1f} s")
    first, meaning = explain_probe_failure(out)
    return Check("probe", "fail", f"{nvcc} could not build a minimal program (exit {rc}): {first}",
                 f"{meaning}; the checks above say more")


# -- driver -------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Device:
    index: int
    name: str
    major: int
    minor: int

    @property
    def sm(self) -> str:
        return f"{self.major}{self.minor}"


@dataclass(frozen=True)
class DriverInfo:
    """What loading the driver library and asking it said."""

    library: str
    loaded: bool
    path: str = ""  # the file that was loaded ("" when unknown)
    load_error: str = ""
    version: int | None = None  # cuDriverGetVersion: 1000 * major + 10 * minor
    version_result: int | None = None
    init_result: int | None = None
    devices: tuple[Device, ...] = ()
    device_error: str = ""
    kernel_module: str = ""  # the driver's own version (580.95.05), where the OS says

    @property
    def cuda(self) -> str:
        return "" if self.version is None else f"{self.version // 1000}.{self.version % 1000 // 10}"


def default_driver_library(windows: bool | None = None) -> str:
    return "nvcuda.dll" if (_host_is_windows() if windows is None else windows) else "libcuda.so.1"


def _loaded_path(lib: Any, symbol: str) -> str:
    """The file a loaded library came from (dladdr / GetModuleFileNameW); "" if unknown."""
    with contextlib.suppress(Exception):
        if os.name == "nt":
            buf = ctypes.create_unicode_buffer(32768)
            if ctypes.windll.kernel32.GetModuleFileNameW(ctypes.c_void_p(lib._handle), buf, 32768):  # type: ignore[attr-defined]
                return str(buf.value)
            return ""

        class DlInfo(ctypes.Structure):
            _fields_ = [("dli_fname", ctypes.c_char_p), ("dli_fbase", ctypes.c_void_p),
                        ("dli_sname", ctypes.c_char_p), ("dli_saddr", ctypes.c_void_p)]

        info = DlInfo()
        for libc in (None, "libdl.so.2"):
            dladdr = getattr(ctypes.CDLL(libc), "dladdr", None)
            if dladdr is not None:
                dladdr.argtypes = [ctypes.c_void_p, ctypes.POINTER(DlInfo)]
                if dladdr(ctypes.cast(getattr(lib, symbol), ctypes.c_void_p), ctypes.byref(info)) and \
                        info.dli_fname:
                    return os.path.realpath(bytes(info.dli_fname).decode(errors="replace"))
                break
    return ""


def _kernel_module_version(proc_file: str = "/proc/driver/nvidia/version") -> str:
    with contextlib.suppress(OSError):
        m = re.search(r"Kernel Module(?: for \S+)?\s+(\d+\.\d+(?:\.\d+)?)", Path(proc_file).read_text())
        if m:
            return m.group(1)
    return ""


def probe_driver(library: str | None = None, *, loader: Loader = ctypes.CDLL,
                 proc_file: str = "/proc/driver/nvidia/version") -> DriverInfo:
    """Load the driver library and ask it: cuDriverGetVersion, cuInit, then the devices."""
    library = library or default_driver_library()
    try:
        lib = loader(library)
    except OSError as exc:
        return DriverInfo(library, loaded=False, load_error=str(exc))
    path = _loaded_path(lib, "cuInit")
    kernel = _kernel_module_version(proc_file)
    try:
        get_version, init = lib.cuDriverGetVersion, lib.cuInit
    except AttributeError as exc:
        return DriverInfo(library, True, path, load_error=f"not a CUDA driver library: {exc}",
                          kernel_module=kernel)
    version = ctypes.c_int(0)
    version_result = int(get_version(ctypes.byref(version)))
    init_result = int(init(ctypes.c_uint(0)))
    devices: list[Device] = []
    device_error = ""
    if init_result == CUDA_SUCCESS:
        try:
            devices = _devices(lib)
        except (AttributeError, RuntimeError) as exc:
            device_error = str(exc)
    return DriverInfo(library, True, path, "", version.value if version_result == 0 else None,
                      version_result, init_result, tuple(devices), device_error, kernel)


def _devices(lib: Any) -> list[Device]:
    def call(fn: Any, *args: Any) -> None:
        result = int(fn(*args))
        if result != CUDA_SUCCESS:
            raise RuntimeError(f"{fn.__name__} returned {result} ({cu_error_name(result)})")

    count = ctypes.c_int(0)
    call(lib.cuDeviceGetCount, ctypes.byref(count))
    out = []
    for i in range(count.value):
        dev = ctypes.c_int(0)
        call(lib.cuDeviceGet, ctypes.byref(dev), ctypes.c_int(i))
        name = ctypes.create_string_buffer(256)
        call(lib.cuDeviceGetName, name, ctypes.c_int(len(name)), dev)
        major, minor = ctypes.c_int(0), ctypes.c_int(0)
        call(lib.cuDeviceGetAttribute, ctypes.byref(major), ctypes.c_int(_ATTR_CC_MAJOR), dev)
        call(lib.cuDeviceGetAttribute, ctypes.byref(minor), ctypes.c_int(_ATTR_CC_MINOR), dev)
        out.append(Device(i, name.value.decode(errors="replace"), major.value, minor.value))
    return out


def cu_error_name(code: int) -> str:
    return _CU_ERRORS.get(code, f"CUresult {code}")


@dataclass(frozen=True)
class DriverBranch:
    major: int
    branch: int
    linux: str = ""
    windows: str = ""


def driver_branches(path: Path | None = None) -> dict[int, DriverBranch]:
    """manifests/drivers.toml: the driver branch each CUDA major version needs."""
    from cudaredist.profiles import data_dir

    path = path or data_dir() / "drivers.toml"
    try:
        with open(path, "rb") as fh:
            data = tomllib.load(fh)
        return {int(k): DriverBranch(int(k), int(v["branch"]), str(v.get("linux", "")),
                                     str(v.get("windows", "")))
                for k, v in data.get("cuda", {}).items()}
    except (OSError, tomllib.TOMLDecodeError, KeyError, TypeError, ValueError) as exc:
        raise ManifestError(f"cannot read {path}: {exc}", source=str(path)) from exc


def _branch_advice(major: int, branches: Mapping[int, DriverBranch], windows: bool) -> str:
    b = branches.get(major)
    if b is None:
        return f"a driver that supports CUDA {major}.0 (cuDriverGetVersion {major * 1000} or more)"
    first = b.windows if windows else b.linux
    return (f"driver branch R{b.branch} or newer" + (f" ({first} or later)" if first else "")
            + f", which runs every CUDA {major}.x")


def _release_key(release: str) -> tuple[int, int]:
    parts = [int(p) for p in re.findall(r"\d+", release)[:2]] + [0, 0]
    return parts[0], parts[1]


def check_driver(info: DriverInfo, release: str | None, *, windows: bool | None = None,
                 branches: Mapping[int, DriverBranch] | None = None) -> Check:
    windows = _host_is_windows() if windows is None else windows
    if branches is None:
        branches = driver_branches()
    wanted = _release_key(release) if release else None
    install = _branch_advice(wanted[0], branches, windows) if wanted else "an NVIDIA driver"
    where = f" from {info.path}" if info.path else ""
    if not info.loaded:
        return Check("driver", "warn",
                     f"no NVIDIA driver: {info.library} cannot be loaded ({info.load_error}); a "
                     "compile-only machine: builds work, CUDA programs cannot run "
                     "(cudaGetDeviceCount gives 35, cudaErrorInsufficientDriver)",
                     f"to run CUDA programs here install {install}; nothing to do for build-only jobs")
    if info.init_result == CUDA_ERROR_STUB_LIBRARY or info.version_result == CUDA_ERROR_STUB_LIBRARY:
        stub_dir = os.path.dirname(info.path) if info.path else "the stubs directory"
        return Check("driver", "fail",
                     f"the stub libcuda{where} was loaded instead of the driver: cuInit returned "
                     f"{CUDA_ERROR_STUB_LIBRARY} (CUDA_ERROR_STUB_LIBRARY); the stub is for linking only",
                     f"take {stub_dir} out of LD_LIBRARY_PATH (and out of /etc/ld.so.conf.d), and do "
                     f"not copy or link the stub as libcuda.so.1; on a machine with a GPU install {install}")
    if info.load_error or info.version is None:
        why = info.load_error or f"cuDriverGetVersion returned {info.version_result}"
        return Check("driver", "fail", f"{info.library}{where} is not a working CUDA driver: {why}",
                     f"reinstall {install}")
    module = f"driver {info.kernel_module}, " if info.kernel_module else ""
    said = f"{module}{info.library}{where} supports CUDA {info.cuda} (cuDriverGetVersion {info.version})"
    if wanted is not None and info.version // 1000 < wanted[0]:
        return Check("driver", "fail",
                     f"{said}: too old for CUDA {release}, which needs a CUDA {wanted[0]} driver; "
                     "its programs fail with cudaErrorInsufficientDriver (35)",
                     f"install {install}")
    if info.init_result not in (None, CUDA_SUCCESS):
        code = int(info.init_result)
        if code == CUDA_ERROR_NO_DEVICE:
            return Check("driver", "warn", f"{said}, but cuInit found no GPU ({cu_error_name(code)})",
                         "check that the GPU is visible to this machine or container (nvidia-smi; "
                         "docker --gpus all; CUDA_VISIBLE_DEVICES)")
        return Check("driver", "fail", f"{said}, but cuInit failed with {code} ({cu_error_name(code)})",
                     "check the driver installation (nvidia-smi; dmesg for NVRM errors); a kernel "
                     "module and user-space library of different versions gives this after an upgrade "
                     "until the machine reboots")
    if wanted is not None and (info.version // 1000, info.version % 1000 // 10) < wanted:
        return Check("driver", "ok",
                     f"{said}: older than CUDA {release}, which runs through minor-version "
                     f"compatibility (any CUDA {wanted[0]} driver runs CUDA {wanted[0]}.x programs); build "
                     "SASS for the GPU (-arch=sm_XY): this driver cannot JIT PTX from a newer toolkit, "
                     "and APIs new in the newer minor release are unavailable")
    return Check("driver", "ok", said + ("; cuInit ok" if info.init_result == CUDA_SUCCESS else ""))


# -- gpu ----------------------------------------------------------------------------------------
def arch_flags(devices: Sequence[Device]) -> tuple[str, str]:
    """(nvcc flags, CMAKE_CUDA_ARCHITECTURES) that build SASS for exactly these devices."""
    sms = sorted({d.sm for d in devices}, key=int)
    if len(sms) == 1:
        return f"-arch=sm_{sms[0]}", sms[0]
    return " ".join(f"-gencode arch=compute_{s},code=sm_{s}" for s in sms), ";".join(sms)


def nvcc_gpu_codes(tk: Toolkit | None, env: Mapping[str, str]) -> tuple[str, ...]:
    """The sm_XY targets the tree's nvcc can build (``nvcc --list-gpu-code``); () if unknown."""
    if tk is None or _not_run(tk) or not tk.nvcc().is_file():
        return ()
    rc, out = _run([str(tk.nvcc()), "--list-gpu-code"], env, timeout=60)
    return tuple(re.findall(r"\bsm_\d+[a-z]?\b", out)) if rc == 0 else ()


def check_gpu(info: DriverInfo, codes: Sequence[str] = ()) -> Check:
    """Devices and compute capabilities, the matching -arch, and whether the tree can target them."""
    if not info.loaded or info.init_result is None:
        return Check("gpu", "warn", "no GPU can be seen without a driver",
                     "run `cudaredist doctor` on the machine that runs the programs; set -arch / "
                     "CMAKE_CUDA_ARCHITECTURES for the GPUs you target")
    if info.init_result != CUDA_SUCCESS:
        return Check("gpu", "warn" if info.init_result == CUDA_ERROR_NO_DEVICE else "fail",
                     f"no usable GPU: cuInit returned {info.init_result} ({cu_error_name(info.init_result)})",
                     "see the driver check")
    if info.device_error:
        return Check("gpu", "fail", f"the driver could not list the GPUs: {info.device_error}",
                     "see the driver check; nvidia-smi shows what the driver sees")
    if not info.devices:
        return Check("gpu", "warn", "the driver reports no GPU",
                     "check that the GPU is visible to this machine or container (nvidia-smi; "
                     "CUDA_VISIBLE_DEVICES)")
    listed = ", ".join(f"{d.index}: {d.name} (compute capability {d.major}.{d.minor}, sm_{d.sm})"
                       for d in info.devices)
    flags, cmake = arch_flags(info.devices)
    said = f"{len(info.devices)} GPU{'s' if len(info.devices) > 1 else ''}: {listed}; build with {flags} " \
           f"(CMAKE_CUDA_ARCHITECTURES={cmake})"
    if not codes:
        return Check("gpu", "ok", said)
    known = {int(c[3:].rstrip("abcdefghijklmnopqrstuvwxyz")) for c in codes}
    lo, hi = min(known), max(known)
    older = [d for d in info.devices if int(d.sm) not in known and int(d.sm) < lo]
    newer = [d for d in info.devices if int(d.sm) not in known and int(d.sm) >= lo]
    if older:
        return Check("gpu", "fail",
                     f"{said}; this toolkit cannot build for {_short([f'sm_{d.sm}' for d in older])}: its "
                     f"nvcc targets sm_{lo} to sm_{hi}",
                     "use an older CUDA release whose `nvcc --list-gpu-code` still lists "
                     f"{_short([f'sm_{d.sm}' for d in older])}")
    if newer:
        ptx = min(max(k for k in known if k <= int(d.sm)) for d in newer)
        return Check("gpu", "warn",
                     f"{said}; this toolkit's nvcc does not list {_short([f'sm_{d.sm}' for d in newer])} "
                     f"(it targets sm_{lo} to sm_{hi})",
                     "embed PTX the driver can compile for it "
                     f"(-gencode arch=compute_{ptx},code=compute_{ptx}), or install a newer CUDA release "
                     "that knows this GPU")
    return Check("gpu", "ok", said + "; this toolkit's nvcc targets all of them")


# -- environment --------------------------------------------------------------------------------
def _same(a: str, b: str | Path) -> bool:
    return os.path.normcase(os.path.realpath(a)) == os.path.normcase(os.path.realpath(b))


def _inside(path: str, root: str | Path) -> bool:
    p = os.path.normcase(os.path.realpath(path))
    r = os.path.normcase(os.path.realpath(root))
    return p == r or p.startswith(r.rstrip(os.sep) + os.sep)


def check_environment(env: Mapping[str, str], tk: Toolkit | None, *, which: Which = _which) -> Check:
    """CUDA_PATH / CUDA_HOME / PATH against the tree (or each other), and what a plain nvcc runs."""
    plain = which("nvcc", env.get("PATH"))
    if plain is None:
        runs = "a plain `nvcc` runs nothing: no nvcc on PATH"
    else:
        real = os.path.realpath(plain)
        runs = f"a plain `nvcc` runs {plain}" + (f" (-> {real})" if real != os.path.abspath(plain) else "")
    problems: list[str] = []
    if tk is not None and not tk.native:  # a cross-compiling tree: only WINDOWS_CUDA_HOME names it
        home = env.get("WINDOWS_CUDA_HOME")
        if tk.windows and (not home or not _same(home, tk.prefix)):
            return Check("environment", "warn",
                         f"WINDOWS_CUDA_HOME is {home or 'unset'}, not this tree ({tk.prefix})",
                         f'eval "$(cudaredist env --prefix {tk.prefix})"')
        return Check("environment", "ok", f"WINDOWS_CUDA_HOME names this tree; {runs}")
    if tk is not None:
        for var in ("CUDA_PATH", "CUDA_HOME"):
            value = env.get(var)
            if value and not _same(value, tk.prefix):
                problems.append(f"{var}={value} names another toolkit than {tk.prefix}")
        if tk.has_nvcc:
            if plain is None:
                problems.append(f"no nvcc on PATH, so a plain `nvcc` (and CMake without CUDAToolkit_ROOT) "
                                f"will not find {tk.nvcc()}")
            elif not _inside(plain, tk.prefix):
                problems.append(f"a plain `nvcc` runs {plain}, another toolkit's, not {tk.nvcc()}")
        if problems:
            return Check("environment", "warn", "; ".join(problems),
                         f'put this tree first: eval "$(cudaredist env --prefix {tk.prefix})" (GitHub '
                         f"Actions: cudaredist env --prefix {tk.prefix} --github), or unset the variables "
                         "that name the other toolkit")
        return Check("environment", "ok", f"CUDA_PATH/CUDA_HOME are unset or name {tk.prefix}; {runs}")
    # no tree to compare with: the variables and PATH must at least agree with each other
    named = {var: env[var] for var in ("CUDA_PATH", "CUDA_HOME") if env.get(var)}
    for var, value in named.items():
        if not os.path.isdir(value):
            problems.append(f"{var}={value} does not exist")
        elif plain is not None and not _inside(plain, value):
            problems.append(f"{var}={value}, but a plain `nvcc` runs {plain}, from elsewhere")
    if len({os.path.realpath(v) for v in named.values()}) > 1:
        problems.append("CUDA_PATH and CUDA_HOME name different toolkits")
    said = ", ".join(f"{k}={v}" for k, v in named.items()) or "CUDA_PATH and CUDA_HOME unset"
    if problems:
        return Check("environment", "warn", "; ".join(problems),
                     'make them name one toolkit: eval "$(cudaredist env --prefix DIR)" for the tree '
                     "you build with")
    return Check("environment", "ok", f"{said}; {runs}")


# -- the whole run ------------------------------------------------------------------------------
def find_toolkit(train: str) -> Path | None:
    """The tree cudaredist manages for ``train``; managed installs are not wired yet: None."""
    return None


@dataclass(frozen=True)
class Inputs:
    """What the checks read from the machine, injectable for tests."""

    env: Mapping[str, str] = field(default_factory=lambda: dict(os.environ))
    which: Which = _which
    driver_library: str | None = None
    loader: Loader = ctypes.CDLL
    host_windows: bool = field(default_factory=_host_is_windows)


def run(prefix: Path | None = None, *, train: str | None = None, inputs: Inputs | None = None,
        find: Callable[[str], Path | None] = find_toolkit) -> Report:
    """All checks in order; without a prefix or train, driver, gpu and environment only."""
    inputs = inputs or Inputs()
    env = inputs.env
    checks: list[Check] = []
    tk: Toolkit | None = None
    release: str | None = None
    if train is not None and prefix is None:
        prefix = find(train)
        if prefix is None:
            checks.append(Check("toolkit", "fail", f"no managed toolkit for {train}: cudaredist has not "
                                "installed one for this train",
                                f"install one: cudaredist install {train} --prefix DIR, then "
                                "cudaredist doctor --prefix DIR"))
    if prefix is not None:
        toolkit_check, tk = check_toolkit(prefix, host_windows=inputs.host_windows)
        checks.append(toolkit_check)
        if tk is not None:
            release = tk.release
            nvcc_check, reported = check_nvcc(tk, env)
            checks.append(nvcc_check)
            release = release or reported
            checks.append(check_host_compiler(tk, env, windows=tk.windows, which=inputs.which))
            checks.append(check_probe(tk, env))
    info = probe_driver(inputs.driver_library or default_driver_library(inputs.host_windows),
                        loader=inputs.loader)
    checks.append(check_driver(info, release, windows=inputs.host_windows))
    checks.append(check_gpu(info, nvcc_gpu_codes(tk, env)))
    checks.append(check_environment(env, tk, which=inputs.which))
    return Report(str(prefix) if prefix is not None else None, release, tuple(checks))
