"""The host compiler nvcc will run, judged by the tree's own crt/host_config.h, and a probe build."""

from __future__ import annotations

import os
import re
import shlex
import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from cudaredist.doctor.checks import _RANK, Check, Toolkit, Which, _first_line, _run, _which
from cudaredist.profiles import platform_rule


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
        for i, a in enumerate(args):  # -ccbin X, -ccbin=X, --compiler-bindir X, --compiler-bindir=X
            opt, eq, value = a.partition("=")
            if opt in ("-ccbin", "--compiler-bindir") and (eq or i + 1 < len(args)):
                spec, source = value if eq else args[i + 1], f"-ccbin in {var}"
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


@dataclass(frozen=True)
class HostConfigVerdict:
    """What preprocessing the tree's host_config.h with the compiler said."""

    accepted: bool
    error: str  # the #error text when refused, or why it could not be judged
    judged: bool  # False: the preprocessor failed for another reason (no verdict)


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
    # only host_config.h is included: its first #error is the verdict
    if m := re.search(r"#[ \t]*error:?[ \t]*(.*)", out):
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


def zc_preprocessor_given(env: Mapping[str, str]) -> str:
    """Where /Zc:preprocessor reaches cl.exe ("" if nowhere): nvcc's flag variables (as
    -Xcompiler) or CL / _CL_, the variables cl.exe itself reads."""
    for var in ("NVCC_PREPEND_FLAGS", "NVCC_APPEND_FLAGS", "CL", "_CL_"):
        if re.search(r"[/-]Zc:preprocessor(?![-\w])", env.get(var, "")):
            return var
    return ""


def check_msvc_preprocessor(include: Path, env: Mapping[str, str]) -> Check:
    """Whether this tree's CCCL needs /Zc:preprocessor from cl.exe, and whether it gets it."""
    header = next((include / rel for rel in ("cccl/cuda/std/__cccl/preprocessor.h",
                                             "cuda/std/__cccl/preprocessor.h")
                   if (include / rel).is_file()), None)
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


def _msvc_prompt(tk: Toolkit) -> str:
    """Visual Studio's developer prompt for the tree's architecture (bin\\arm64 for windows-arm64)."""
    if platform_rule(tk.platform or "").arch == "arm64":
        return ("'ARM64 Native Tools Command Prompt' (or vcvarsarm64.bat; in GitHub Actions "
                "ilammy/msvc-dev-cmd@v1 with `arch: arm64`")
    return "'x64 Native Tools Command Prompt' (or vcvars64.bat; in GitHub Actions ilammy/msvc-dev-cmd@v1"


def _supported_fix(hc: HostCompiler, tk: Toolkit) -> str:
    if hc.msvc:
        example = (f"install a Visual Studio version the #error above accepts and open its "
                   f"{_msvc_prompt(tk)} and `toolset:`), or point NVCC_CCBIN at that cl.exe's directory")
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
    if skip := tk.not_run():
        return Check("host-compiler", "ok", skip)
    windows = tk.windows if windows is None else windows
    hc = select_host_compiler(env, windows=windows, which=which)
    if hc.path is None:
        if windows:
            return Check("host-compiler", "fail",
                         f"nvcc needs MSVC's cl.exe and finds none ({hc.source}: {hc.spec} not found)",
                         f"run the build from Visual Studio's {_msvc_prompt(tk)}), or set NVCC_CCBIN "
                         "to the directory that holds cl.exe")
        return Check("host-compiler", "fail",
                     f"nvcc will run {hc.spec} ({hc.source}), which is not found",
                     "install a C++ compiler (Debian/Ubuntu: apt-get install g++), or set NVCC_CCBIN "
                     "to one this toolkit supports")
    # the compiler's own banner line ("gcc (Debian 12.2.0-14) 12.2.0", "Microsoft (R) C/C++ ...")
    version = _first_line(_run([hc.path] if hc.msvc else [hc.path, "--version"], env, timeout=30)[1])
    who = f"{version or hc.spec} ({hc.path}, {hc.source})"
    include = tk.include()
    verdict = judge_host_config(hc, include, env)
    header = f"{f'CUDA {tk.release}' if tk.release else 'the tree'}'s include/crt/host_config.h"
    if verdict.accepted:
        checks = [Check("host-compiler", "ok", f"{who} passes {header}")]
    elif not verdict.judged:
        checks = [Check("host-compiler", "warn", f"could not judge {who} against {header}: {verdict.error}",
                        "run the probe's build by hand to see nvcc's own error")]
    elif hc.allow_unsupported:
        checks = [Check("host-compiler", "warn",
                        f"{who} is refused by {header} (\"{verdict.error}\"); nvcc accepts it only because "
                        f"-allow-unsupported-compiler is set in {hc.flags_source}, which may fail to compile "
                        "or build wrong code", _supported_fix(hc, tk))]
    else:
        checks = [Check("host-compiler", "fail", f"{who} is refused by {header}: \"{verdict.error}\"",
                        _supported_fix(hc, tk))]
    if hc.linker == "":
        checks.append(Check("host-compiler", "fail", "nvcc links with g++, which is not on PATH",
                            "install g++ (Debian/Ubuntu: apt-get install g++), or set NVCC_CCBIN to a C++ "
                            "compiler, which nvcc then uses to link too"))
    if hc.msvc:
        checks.append(check_msvc_preprocessor(include, env))
    # one verdict: the worst status, with the details and fixes of the checks that gave it
    worst = max(checks, key=lambda c: _RANK[c.status]).status
    relevant = [c for c in checks if c.status == worst] if worst != "ok" else checks
    return Check("host-compiler", worst, "; ".join(c.detail for c in relevant),
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
    for text in (first, output):  # when the first line does not say, the rest of the output may
        for pattern, meaning in _MEANINGS:
            if re.search(pattern, text, re.I):
                return first, meaning
    return first, "the toolkit could not build a minimal CUDA program"


def check_probe(tk: Toolkit, env: Mapping[str, str], *, timeout: float = 300) -> Check:
    """Compile and link a kernel and a host call with the tree's nvcc, like CMake's try-compile."""
    if skip := tk.not_run():
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


