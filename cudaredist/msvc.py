"""The programs of this host that hostcc runs, and the MSVC toolsets of every Visual Studio that
vswhere reports, with the environment ``vcvars64.bat -vcvars_ver=X`` gives each (worked out from
the layout; the batch files are not run)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

Which = Callable[[str, str | None], str | None]  # (command, PATH) -> path or None
Pairs = tuple[tuple[str, str], ...]
Prepends = tuple[tuple[str, tuple[str, ...]], ...]


def which_on(command: str, path: str | None) -> str | None:
    return shutil.which(command, path=path)


def run_program(cmd: Sequence[str], env: Mapping[str, str], *, cwd: str | None = None,
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


def first_line(text: str) -> str:
    return next((ln.strip() for ln in text.splitlines() if ln.strip()), "")


def version_of(text: str) -> tuple[int, ...]:
    return tuple(int(p) for p in re.findall(r"\d+", text))


@dataclass(frozen=True)
class Toolset:
    """One MSVC toolset of one Visual Studio: ``root`` is its ``VC\\Tools\\MSVC\\<version>``."""

    version: str  # 14.44.35207
    root: str
    vs_root: str  # the installation path vswhere reports
    vs_name: str  # "Visual Studio Enterprise 2022"
    generator: str  # CMake's generator for that Visual Studio ("Visual Studio 17 2022")
    host: str  # "x64", "arm64": bin\Host<host>\<target>
    target: str

    @property
    def short(self) -> str:
        """14.44: what ``vcvars64.bat -vcvars_ver=`` and CMake's ``-T version=`` take."""
        return ".".join(self.version.split(".")[:2])

    @property
    def cl(self) -> str:
        return os.path.join(self.root, "bin", f"Host{self.host}", self.target, "cl.exe")

    @property
    def vcvars(self) -> str:
        """Visual Studio's own script for this toolset's environment."""
        return f"vcvars{'arm64' if self.target == 'arm64' else '64'}.bat -vcvars_ver={self.short}"


def visual_studios(env: Mapping[str, str], *, which: Which = which_on) -> list[dict[str, object]]:
    """Every Visual Studio vswhere reports (its JSON objects); none without vswhere."""
    # vswhere.exe where the Visual Studio Installer puts it, else on PATH
    base = env.get("ProgramFiles(x86)") or env.get("PROGRAMFILES(X86)")
    installer = os.path.join(base, "Microsoft Visual Studio", "Installer", "vswhere.exe") if base else ""
    vswhere = installer if os.path.isfile(installer) else (
        which("vswhere.exe", env.get("PATH")) or which("vswhere", env.get("PATH")))
    if vswhere is None:
        return []
    rc, out = run_program([vswhere, "-all", "-prerelease", "-products", "*", "-format", "json", "-utf8"],
                          env, timeout=60)
    try:
        found = json.loads(out) if rc == 0 else []
    except ValueError:
        return []
    return [vs for vs in found if isinstance(vs, dict)] if isinstance(found, list) else []


_GENERATORS = {16: "2019", 17: "2022", 18: "2026"}


def msvc_toolsets(studios: list[dict[str, object]], *, target: str = "x64") -> list[Toolset]:
    """Each ``VC\\Tools\\MSVC\\<version>`` of each Visual Studio with a cl.exe for ``target`` (x64,
    arm64), newest first."""
    hosts = ("arm64", "x64") if target == "arm64" else ("x64",)
    out = []
    for vs in studios:
        root = str(vs.get("installationPath") or "")
        tools = os.path.join(root, "VC", "Tools", "MSVC")
        try:
            versions = os.listdir(tools) if root else []
        except OSError:
            continue
        major = version_of(str(vs.get("installationVersion") or "0"))[:1] or (0,)
        catalog = vs.get("catalog")
        line = str(catalog.get("productLineVersion") or "") if isinstance(catalog, dict) else ""
        generator = f"Visual Studio {major[0]} {line or _GENERATORS.get(major[0], '')}".strip()
        name = str(vs.get("displayName") or f"Visual Studio {line}".strip())
        for version in versions:
            for host in hosts:
                ts = Toolset(version, os.path.join(tools, version), root, name, generator, host, target)
                if os.path.isfile(ts.cl):
                    out.append(ts)
                    break
    return sorted(out, key=lambda ts: tuple(-v for v in version_of(ts.version)))


def toolset_environment(ts: Toolset, env: Mapping[str, str]) -> tuple[Pairs, Prepends]:
    """What ``vcvars64.bat -vcvars_ver=<ts.short>`` sets for the toolset, worked out from the layout
    (the batch files are not run): (variables, directories put in front of PATH, INCLUDE, LIB, LIBPATH)."""
    join = os.path.join
    have = os.path.isdir
    lib_arch = ts.target
    variables: list[tuple[str, str]] = [
        ("VSINSTALLDIR", join(ts.vs_root, "")), ("VCINSTALLDIR", join(ts.vs_root, "VC", "")),
        ("VCToolsInstallDir", join(ts.root, "")), ("VCToolsVersion", ts.version),
        ("VSCMD_ARG_HOST_ARCH", ts.host), ("VSCMD_ARG_TGT_ARCH", ts.target), ("Platform", ts.target)]
    path = [os.path.dirname(ts.cl)]
    include = [d for d in (join(ts.root, "include"), join(ts.root, "ATLMFC", "include"),
                           join(ts.vs_root, "VC", "Auxiliary", "VS", "include")) if have(d)]
    lib = [d for d in (join(ts.root, "ATLMFC", "lib", lib_arch), join(ts.root, "lib", lib_arch)) if have(d)]
    libpath = list(lib) + [d for d in (join(ts.root, "lib", "x86", "store", "references"),) if have(d)]
    # the Windows SDK: Windows Kits\10 under %ProgramFiles(x86)%, its newest version with um headers
    base = env.get("ProgramFiles(x86)") or env.get("PROGRAMFILES(X86)")
    root = join(base, "Windows Kits", "10") if base else ""
    try:
        versions = [v for v in (os.listdir(join(root, "Include")) if root else [])
                    if have(join(root, "Include", v, "um"))]
    except OSError:
        versions = []
    if versions:
        version = max(versions, key=version_of)
        variables += [("WindowsSdkDir", join(root, "")), ("WindowsSDKVersion", version + "\\"),
                      ("UniversalCRTSdkDir", join(root, "")), ("UCRTVersion", version)]
        path.append(join(root, "bin", version, ts.host))  # rc.exe and mt.exe, which CMake's link runs
        include += [d for sub in ("ucrt", "shared", "um", "winrt", "cppwinrt")
                    if have(d := join(root, "Include", version, sub))]
        lib += [d for sub in ("ucrt", "um") if have(d := join(root, "Lib", version, sub, lib_arch))]
        libpath += [d for d in (join(root, "UnionMetadata", version), join(root, "References", version))
                    if have(d)]
    prepend = (("PATH", tuple(path)), ("INCLUDE", tuple(include)), ("LIB", tuple(lib)),
               ("LIBPATH", tuple(libpath)))
    return tuple(variables), tuple((var, dirs) for var, dirs in prepend if dirs)
