"""The host compiler nvcc will run, judged by the tree's own crt/host_config.h, and a probe build.

A cross tree (``install --host``): with the compiler profiles.toml names for the target
(``aarch64-linux-gnu-g++``; or the one ``-ccbin`` / ``NVCC_CCBIN`` name) installed, both checks run
as for a native tree, in the environment ``cudaredist env`` gives (``NVCC_CCBIN``, ``-target-dir``).
Without it, the device code is compiled alone (cicc, ptxas, against the target's headers,
preprocessed by this host's own compiler) and the checks say that only the compile step was checked.
"""

from __future__ import annotations

import re
import tempfile
import time
from collections.abc import Mapping
from dataclasses import replace
from functools import cache
from pathlib import Path
from typing import Literal

from cudaredist.doctor.checks import _RANK, Check, Toolkit, Which, _first_line, _run, _which
from cudaredist.envexport import load_hint
from cudaredist.errors import ManifestError, UsageError
from cudaredist.hostcc import (
    ENV_HOST_COMPILER,
    Choice,
    HostCompiler,
    HostConfigVerdict,
    for_tree,
    gcc_limit,
    judge_host_config,
    select_host_compiler,
)
from cudaredist.profiles import cross_rule, data_dir, load_toml, platform_rule


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


_LAST_RESORT = (" Last resort: -allow-unsupported-compiler (NVCC_APPEND_FLAGS=-allow-unsupported-compiler) "
                "skips the check, at your own risk: an unsupported host compiler can fail on CUDA's headers "
                "or build code that computes wrong results")


def decision(tk: Toolkit, env: Mapping[str, str], *, windows: bool, which: Which = _which
             ) -> tuple[Choice | None, str]:
    """hostcc's decision for the tree in this shell (what `cudaredist env` and `run` export), or why
    there is none (a CUDAREDIST_HOST_COMPILER that names no compiler); a tree without a record is of
    this host's kind."""
    try:
        return for_tree(tk.prefix, platform=tk.platform or ("windows" if windows else "linux"), env=env,
                        release=tk.release or "", host_windows=windows, host=tk.host, which=which), ""
    except UsageError as exc:
        return None, str(exc)


def judged(hc: HostCompiler, tk: Toolkit, env: Mapping[str, str], choice: Choice | None) -> HostConfigVerdict:
    """``hc`` judged by the tree's host_config.h: the decision's verdict where it judged the same compiler
    (the decision runs it once; doctor asks again only for one the decision did not judge)."""
    if choice is not None and choice.shell is not None and choice.shell[0] == hc:
        return choice.shell[1]
    return judge_host_config(hc, tk.include(), env)


def _none_here(tk: Toolkit, msvc: bool) -> str:
    """The fix where no compiler is found, and none installed can be judged."""
    return (f"run the build from Visual Studio's {_msvc_prompt(tk)}), or set NVCC_CCBIN to the directory "
            "that holds cl.exe") if msvc else ("install a C++ compiler (Debian/Ubuntu: apt-get install g++), "
                                               "or set NVCC_CCBIN to one this toolkit supports")


def compiler_fix(tk: Toolkit, *, msvc: bool, choice: Choice | None) -> str:
    """The compiler to use instead, from hostcc's decision: the one `cudaredist env` exports, which
    the tree's host_config.h accepts, else what to install."""
    include = tk.include()
    header = f"{f'CUDA {tk.release}' if tk.release else 'the tree'}'s host_config.h"
    if not (include / "crt" / "host_config.h").is_file():  # nothing to judge a compiler by
        return _none_here(tk, msvc)
    found = choice.compiler if choice is not None and choice.accepted else None
    load = load_hint(str(tk.prefix), host_windows=msvc)
    named = (f"{choice.reason.removeprefix('host compiler: ')}: unset CUDAREDIST_HOST_COMPILER or name "
             "another. " if choice is not None and choice.compiler and not choice.accepted else "")
    if found is not None and found.toolset is not None:
        ts = found.toolset
        return (f"use {found.name}, installed here, which {header} accepts: `cudaredist env` exports its "
                f"environment and NVCC_CCBIN ({load}); or open its prompt with "
                f"`{ts.vcvars}` (GitHub Actions: ilammy/msvc-dev-cmd@v1 with "
                f"`toolset: {ts.short}`); CMake's Visual Studio generator: -G \"{ts.generator}\" "
                f"-T version={ts.short}")
    if found is not None:
        return (f"use {found.name}, installed here, which {header} accepts: `cudaredist env` exports it as "
                f"NVCC_CCBIN ({load}); or export NVCC_CCBIN={found.path} (CMake: "
                f"-DCMAKE_CUDA_HOST_COMPILER={found.path})")
    if msvc:
        return (f"{named}no MSVC toolset installed here passes {header}: install a Visual Studio version "
                "its #error accepts (or that version's toolset beside yours, in the Visual Studio Installer) "
                f"and open its {_msvc_prompt(tk)} and `toolset:`), or point NVCC_CCBIN at that cl.exe's "
                "directory." + _LAST_RESORT)
    limit = gcc_limit(include)
    if limit is None:
        return (f"{named}no compiler installed here passes {header}: install a gcc version its #error "
                "accepts and export NVCC_CCBIN=/usr/bin/g++-N." + _LAST_RESORT)
    return (f"{named}no compiler installed here passes {header}, which takes gcc up to {limit}: install one "
            f"(Debian/Ubuntu: apt-get install g++-{limit}), then export NVCC_CCBIN=/usr/bin/g++-{limit} "
            f"(CMake: -DCMAKE_CUDA_HOST_COMPILER=/usr/bin/g++-{limit}), or `cudaredist env` sets it."
            + _LAST_RESORT)


def check_host_compiler(tk: Toolkit, env: Mapping[str, str], *, windows: bool | None = None,
                        which: Which = _which) -> Check:
    """The compiler nvcc will run in this shell, judged by the tree's own ``include/crt/host_config.h``,
    against hostcc's decision (what `cudaredist env` exports): the difference, and the fix from it."""
    if skip := tk.not_run():
        return Check("host-compiler", "ok", skip)
    windows = tk.windows if windows is None else windows
    choice, bad = decision(tk, env, windows=windows, which=which)
    if bad:
        return Check("host-compiler", "fail", bad, f"unset {ENV_HOST_COMPILER}, or set it to auto, off or a "
                     "compiler installed here (`cudaredist env --host-compiler` takes the same)")
    hc = select_host_compiler(env, windows=windows, which=which)
    fix = compiler_fix(tk, msvc=hc.msvc or windows, choice=choice)
    if hc.path is None:  # the decision's fix where it found one, or where MSVC toolsets are installed
        found = choice is not None and (choice.accepted or (windows and len(choice.candidates) > 1))
        return Check("host-compiler", "fail", f"nvcc needs MSVC's cl.exe and finds none ({hc.source}: "
                     f"{hc.spec} not found)" if windows else f"nvcc will run {hc.spec} ({hc.source}), which "
                     "is not found", fix if found else _none_here(tk, windows))
    # the compiler's own banner line ("gcc (Debian 12.2.0-14) 12.2.0", "Microsoft (R) C/C++ ...")
    version = _first_line(_run([hc.path] if hc.msvc else [hc.path, "--version"], env, timeout=30)[1])
    who = f"{version or hc.spec} ({hc.path}, {hc.source})"
    verdict = judged(hc, tk, env, choice)
    header = f"{f'CUDA {tk.release}' if tk.release else 'the tree'}'s include/crt/host_config.h"
    # what `cudaredist env` sets for nvcc that this shell has otherwise
    differ = [f"{k}={v}" for k, v in (choice.variables if choice else ())
              if k.startswith("NVCC_") and env.get(k) != v]
    if verdict.accepted:
        checks = [Check("host-compiler", "ok", f"{who} passes {header}" + (
            f"; `cudaredist env` sets {', '.join(differ)}, which this shell lacks" if differ else ""))]
    elif not verdict.judged:
        checks = [Check("host-compiler", "warn", f"could not judge {who} against {header}: {verdict.error}",
                        "run the probe's build by hand to see nvcc's own error")]
    elif hc.allow_unsupported:
        checks = [Check("host-compiler", "warn",
                        f"{who} is refused by {header} (\"{verdict.error}\"); nvcc accepts it only because "
                        f"-allow-unsupported-compiler is set in {hc.flags_source}, which may fail to compile "
                        "or build wrong code", fix)]
    else:
        checks = [Check("host-compiler", "fail", f"{who} is refused by {header}: \"{verdict.error}\"", fix)]
    if hc.linker == "":
        checks.append(Check("host-compiler", "fail", "nvcc links with g++, which is not on PATH",
                            "install g++ (Debian/Ubuntu: apt-get install g++), or set NVCC_CCBIN to a C++ "
                            "compiler, which nvcc then uses to link too"))
    if hc.msvc:
        checks.append(check_msvc_preprocessor(tk.include(), env))
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


@cache
def _rules() -> tuple[tuple[tuple[str, str, str], ...], tuple[str, str]]:
    """manifests/probe.toml: (each rule's pattern, meaning and fix, in order; what no rule explains)."""
    path = str(data_dir() / "probe.toml")
    data = load_toml(path)
    try:
        return (tuple((str(r["pattern"]), str(r["means"]), str(r["fix"])) for r in data["rule"]),
                (str(data["unknown"]["means"]), str(data["unknown"]["fix"])))
    except (KeyError, TypeError) as exc:
        raise ManifestError(f"cannot read {path}: {exc}", source=path) from exc


# Windows' STATUS_DLL_NOT_FOUND: a program started without a DLL it links against
_DLL_NOT_FOUND = (0xC0000135, 0xC0000135 - (1 << 32))


def explain_probe_failure(output: str) -> tuple[str, str, str]:
    """(the first error line, what it means, the fix's template) for nvcc's output."""
    lines = [ln.strip() for ln in output.splitlines() if ln.strip()]
    first = next((ln for ln in lines if re.search(r"\berror\b|fatal|not found|cannot", ln, re.I)),
                 lines[0] if lines else "no output")
    rules, unknown = _rules()
    for text in (first, output):  # when the first line does not say, the rest of the output may
        for pattern, meaning, fix in rules:
            if re.search(pattern, text, re.I):
                return first, meaning, fix
    return first, *unknown


def probe_fix(template: str, tk: Toolkit, env: Mapping[str, str], which: Which) -> str:
    if template == "compiler":
        hc = select_host_compiler(env, windows=tk.windows, which=which)
        choice = decision(tk, env, windows=tk.windows, which=which)[0]
        if hc.path is not None and judged(hc, tk, env, choice).accepted:
            # the header takes it: another compiler is no fix; what nvcc ran says what went wrong
            return (f"{hc.path} ({hc.source}) passes the tree's host_config.h, so nvcc failed running it for "
                    f"another reason: run `{tk.nvcc()} -v probe.cu -o probe` by hand to see the command "
                    "nvcc ran and its own error")
        return compiler_fix(tk, msvc=tk.windows, choice=choice)
    return template.format(
        release=tk.release or "<release>", prefix=tk.prefix, nvcc=tk.nvcc(),
        load=load_hint(str(tk.prefix), host_windows=tk.windows),
        reinstall=f"reinstall it: {tk.redo(reinstall=True)}")


def check_probe(tk: Toolkit, env: Mapping[str, str], *, timeout: float = 300, which: Which = _which,
                host_windows: bool | None = None) -> Check:
    """Compile and link a kernel and a host call with the tree's nvcc, like CMake's try-compile; on a
    Windows host also run it (where a DLL missing from PATH shows)."""
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
        ran = None
        if built and (tk.windows if host_windows is None else host_windows):
            ran = _run([str(Path(tmp) / exe)], env, cwd=tmp, timeout=120)
    if built and (ran is None or ran[0] == 0):
        return Check("probe", "ok", f"{nvcc} compiled and linked a kernel and a host call in {took:.1f} s"
                     + (", and it ran" if ran is not None else ""))
    if built and ran is not None:
        code, said = ran
        if code in _DLL_NOT_FOUND or re.search(r"cudart64_\d+\.dll", said, re.I):
            _first, meaning, fix = explain_probe_failure(said or "cudart64_NN.dll was not found")
            return Check("probe", "fail",
                         f"the probe built, but it does not start (exit {code:#x}): {meaning}",
                         probe_fix(fix, tk, env, which))
        return Check("probe", "warn",
                     f"the probe built, but it exited {code}: {_first_line(said) or 'no output'}",
                     "run it by hand to see why; `cudaredist doctor`'s driver and gpu checks below say "
                     "what they found")
    first, meaning, fix = explain_probe_failure(out)
    return Check("probe", "fail", f"{nvcc} could not build a minimal program (exit {rc}): {first}; {meaning}",
                 probe_fix(fix, tk, env, which))


# -- a cross tree -------------------------------------------------------------------------------
def cross_checks(tk: Toolkit, env: Mapping[str, str], *, which: Which = _which) -> list[Check]:
    assert tk.platform is not None
    rule = cross_rule(tk.platform, tk.host)
    # not run here (each check says so), or Windows: MSVC's ARM64 cross tools come from the developer prompt
    if tk.not_run() or not rule.target_dir:
        return [check_host_compiler(tk, env, windows=tk.windows, which=which), check_probe(tk, env)]
    choice = decision(tk, env, windows=False, which=which)[0]  # the environment `cudaredist env` gives
    ready = {**env, **dict(choice.variables if choice else ())}
    hc = select_host_compiler(ready, windows=False, which=which)
    if hc.path is not None:
        probe = check_probe(tk, ready)
        return [check_host_compiler(tk, ready, windows=False, which=which),
                replace(probe, detail=f"{probe.detail} (for {tk.platform}, with {hc.spec} and "
                                      f"-target-dir {rule.target_dir})")]
    fix = (f"install it (Debian/Ubuntu: apt-get install {rule.package})" if rule.package else
           "install it") + ", or name another with NVCC_CCBIN or -ccbin, to check the link step too"
    warned = Check("host-compiler", "warn", f"this {tk.host} -> {tk.platform} tree builds with {hc.spec} "
                   f"({hc.source}), which is not installed: only the compile step was checked", fix)
    # the probe's device code compiled to a cubin with the target's headers (no host compiler of
    # the target needed), preprocessed by this host's own compiler: nvcc's flags from the
    # environment are left out (their -target-dir asks for the target's compiler)
    include = tk.include()
    dropped = ("NVCC_CCBIN", "NVCC_APPEND_FLAGS", "NVCC_PREPEND_FLAGS")
    plain = {k: v for k, v in env.items() if k not in dropped}
    with tempfile.TemporaryDirectory(prefix="cudaredist-probe-") as tmp:
        (Path(tmp) / "probe.cu").write_text(PROBE_SOURCE, encoding="utf-8")
        started = time.monotonic()
        rc, out = _run([str(tk.nvcc()), "-cubin", "-arch=sm_90", f"-I{include}", "-isystem",
                        str(include / "cccl"), "probe.cu", "-o", "probe.cubin"], plain, cwd=tmp, timeout=300)
        took = time.monotonic() - started
        built = rc == 0 and (Path(tmp) / "probe.cubin").is_file()
    if built:
        return [warned, Check("probe", "warn", f"{tk.nvcc()} compiled the probe's kernel against {include} "
                              f"in {took:.1f} s; only the compile step was checked (no {tk.platform} "
                              "compiler to build and link the host side)", fix)]
    first, meaning, template = explain_probe_failure(out)
    return [warned, Check("probe", "fail", f"{tk.nvcc()} could not compile the probe's kernel (exit {rc}): "
                          f"{first}; {meaning}", probe_fix(template, tk, plain, which))]
