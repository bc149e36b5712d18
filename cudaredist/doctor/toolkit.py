"""Checks of the tree itself: its install record, nvcc, and the environment around it."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path

from cudaredist.doctor.checks import Check, Toolkit, Which, _first_line, _run, _short, _which
from cudaredist.envexport import MSBUILD_DIR, cmake_line, load_hint
from cudaredist.errors import CudaRedistError
from cudaredist.fsops import WINDOWS
from cudaredist.prefixes import EXEC_BIT_REMOVED, cut_short, verify
from cudaredist.profiles import is_windows
from cudaredist.record import read_record
from cudaredist.redo import request_argv, shell_line


# -- toolkit ------------------------------------------------------------------------------------
def check_toolkit(prefix: Path, *, host_windows: bool = WINDOWS) -> tuple[Check, Toolkit | None]:
    """The tree in ``prefix``: its install record, and a quick verify (sizes, links, exec bits)."""
    install = shell_line(request_argv(None, prefix))
    if not prefix.is_dir():
        if swap := cut_short(prefix):
            return Check("toolkit", "fail", swap, "run the command it names"), None
        return Check("toolkit", "fail", f"{prefix} does not exist or is not a directory",
                     f"install a toolkit there: {install}"), None
    try:
        rec = read_record(prefix)
    except CudaRedistError as exc:
        return Check("toolkit", "fail", str(exc),
                     f"reinstall: {shell_line(request_argv(None, prefix, reinstall=True))}"), None
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
    windows = is_windows(platform)
    nvcc_version = next((str(c["version"]) for c in plan.get("components", [])
                         if c.get("name") == "cuda_nvcc"), None)
    has_nvcc = any(f["path"] in ("bin/nvcc", "bin/nvcc.exe") for f in rec.get("files", []))
    tk = Toolkit(prefix, release, platform, nvcc_version, has_nvcc, windows == host_windows, windows,
                 str(plan.get("host", "")), rec)
    report = verify(prefix, fast=True, record=rec)
    # exec bits: a tree copied through a tool that drops them has an nvcc that cannot start
    lost = [p for p in report.changed if report.reasons.get(p) == EXEC_BIT_REMOVED]
    what = f"CUDA {release} ({platform}, profile {plan.get('profile', '?')})"
    reinstall = tk.redo(reinstall=True)
    changed = [p for p in report.changed if p not in lost]
    if report.missing or changed:
        problems = [f"{len(found)} {kind} ({_short(found)})"
                    for kind, found in (("missing", report.missing), ("changed", changed)) if found]
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


def check_nvcc(tk: Toolkit, env: Mapping[str, str]) -> tuple[Check, str | None]:
    """``bin/nvcc --version`` runs and reports the record's release; returns the X.Y it reports."""
    if skip := tk.not_run():
        return Check("nvcc", "ok", skip), None
    nvcc = tk.nvcc()
    if not nvcc.is_file():
        return Check("nvcc", "fail", f"{nvcc} is missing",
                     f"reinstall the tree: {tk.redo(reinstall=True)}"), None
    rc, out = _run([str(nvcc), "--version"], env, timeout=60)
    m = _NVCC_VERSION.search(out)
    if rc != 0 or m is None:
        return Check("nvcc", "fail",
                     f"{nvcc} --version " + (f"failed (exit {rc})" if rc else "ran, but its output names no "
                                             "release") + f": {_first_line(out) or 'no output'}",
                     f"reinstall the tree ({tk.redo(reinstall=True)}); if it still fails, the host cannot "
                     "run this platform's binaries (check `file` on it and the C library version)"), None
    reported, full = m.group(1), m.group(2)
    said = f"{nvcc} reports release {reported}, V{full}"
    if tk.release is not None:
        want = ".".join(tk.release.split(".")[:2])
        if reported != want or (tk.nvcc_version is not None and full != tk.nvcc_version):
            expected = f"release {want}" + (f", V{tk.nvcc_version}" if tk.nvcc_version else "")
            return Check("nvcc", "fail",
                         f"{said}, but the install record names CUDA {tk.release} ({expected})",
                         f"the tree was changed after install: reinstall it: {tk.redo(reinstall=True)}"
                         ), reported
        said += f", as the record says (CUDA {tk.release})"
    return Check("nvcc", "ok", said), reported


# -- msbuild ------------------------------------------------------------------------------------
def check_msbuild(tk: Toolkit) -> Check:
    """A Windows tree with nvcc: ``CUDA X.Y.props`` and ``.targets`` where CMake's
    ``-T cuda=<tree>`` looks (NVIDIA's visual_studio_integration component)."""
    if not tk.windows or not tk.has_nvcc:
        return Check("msbuild", "ok", f"not checked: {'no nvcc' if tk.windows else 'a Linux tree'}")
    where, use = tk.prefix / MSBUILD_DIR, cmake_line(("-T", f"cuda={tk.prefix}"))
    train = ".".join(tk.release.split(".")[:2]) if tk.release else "*"
    missing = [f"CUDA {train}.{e}" for e in ("props", "targets") if not any(where.glob(f"CUDA {train}.{e}"))]
    if missing:
        # from NVIDIA's wheels: the same request from --source nvidia (the wheels lack the files); else
        # the tree again (its visual_studio_integration was removed)
        source = str((tk.record or {}).get("plan", {}).get("source", "nvidia"))
        fix = (f"install the same request from NVIDIA's redist archives (NVIDIA's wheels lack the files): "
               f"{tk.redo(source='nvidia', reinstall=True)}" if source != "nvidia" else
               f"reinstall the tree: {tk.redo(reinstall=True)}")
        return Check("msbuild", "warn", f"{' and '.join(missing)} missing in {where}: CMake's Visual Studio "
                     f"generator ({use}) finds no CUDA toolset; Ninja and nvcc builds are unaffected",
                     f"{fix}; or build with -G Ninja")
    return Check("msbuild", "ok", f"{where}: cmake -G \"Visual Studio 17 2022\" {use}")


# -- environment --------------------------------------------------------------------------------
def _inside(path: str, root: str | Path, *, same: bool = False) -> bool:
    """``path`` is ``root`` or (unless ``same``) below it, links resolved, case folded where the OS does."""
    p, r = (os.path.normcase(os.path.realpath(x)) for x in (path, root))
    return p == r or (not same and p.startswith(r.rstrip(os.sep) + os.sep))


def check_environment(env: Mapping[str, str], tk: Toolkit | None, *, which: Which = _which,
                      host_windows: bool = WINDOWS) -> Check:
    """CUDA_PATH / CUDA_HOME / PATH against the tree (or each other), and what a plain nvcc runs.
    Its fixes are spelled for the host's shells."""
    plain = which("nvcc", env.get("PATH"))
    if plain is None:
        runs = "a plain `nvcc` runs nothing: no nvcc on PATH"
    else:
        real = os.path.realpath(plain)
        runs = f"a plain `nvcc` runs {plain}" + (f" (-> {real})" if real != os.path.abspath(plain) else "")
    problems: list[str] = []
    if tk is not None and not tk.native:  # a cross-compiling tree: only WINDOWS_CUDA_HOME names it
        home = env.get("WINDOWS_CUDA_HOME")
        if tk.windows and (not home or not _inside(home, tk.prefix, same=True)):
            return Check("environment", "warn",
                         f"WINDOWS_CUDA_HOME is {home or 'unset'}, not this tree ({tk.prefix})",
                         load_hint(str(tk.prefix), host_windows=host_windows))
        return Check("environment", "ok", f"WINDOWS_CUDA_HOME names this tree; {runs}")
    if tk is not None:
        for var in ("CUDA_PATH", "CUDA_HOME"):
            value = env.get(var)
            if value and not _inside(value, tk.prefix, same=True):
                problems.append(f"{var}={value} names another toolkit than {tk.prefix}")
        if tk.has_nvcc:
            if plain is None:
                problems.append(f"no nvcc on PATH, so a plain `nvcc` (and CMake without CUDAToolkit_ROOT) "
                                f"will not find {tk.nvcc()}")
            elif not _inside(plain, tk.prefix):
                problems.append(f"a plain `nvcc` runs {plain}, another toolkit's, not {tk.nvcc()}")
        said = f"CUDA_PATH/CUDA_HOME are unset or name {tk.prefix}"
        fix = (f"put this tree first: {load_hint(str(tk.prefix), host_windows=host_windows)} (GitHub "
               f"Actions: cudaredist env --prefix {tk.prefix} --github), or unset the variables that name "
               "the other toolkit")
    else:  # no tree to compare with: the variables and PATH must at least agree with each other
        named = {var: env[var] for var in ("CUDA_PATH", "CUDA_HOME") if env.get(var)}
        for var, value in named.items():
            if not os.path.isdir(value):
                problems.append(f"{var}={value} does not exist")
            elif plain is not None and not _inside(plain, value):
                problems.append(f"{var}={value}, but a plain `nvcc` runs {plain}, from elsewhere")
        if len({os.path.realpath(v) for v in named.values()}) > 1:
            problems.append("CUDA_PATH and CUDA_HOME name different toolkits")
        said = ", ".join(f"{k}={v}" for k, v in named.items()) or "CUDA_PATH and CUDA_HOME unset"
        fix = f"make them name one toolkit: {load_hint('DIR', host_windows=host_windows)} for the tree you " \
              "build with"
    if problems:
        return Check("environment", "warn", "; ".join(problems), fix)
    return Check("environment", "ok", f"{said}; {runs}")


