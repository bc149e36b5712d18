"""A Visual Studio layout for tests: two installs, three MSVC toolsets, a Windows SDK and a vswhere.

    Program Files/Microsoft Visual Studio/18/Enterprise      VS 2026: MSVC 14.50.35717 and 14.44.35207
    Program Files (x86)/Microsoft Visual Studio/2022/BuildTools   VS 2022: MSVC 14.43.34808
    Program Files (x86)/Windows Kits/10                      SDK 10.0.26100.0 (ucrt, um, shared)
    Program Files (x86)/Microsoft Visual Studio/Installer/vswhere.exe   reports both installs

Each toolset's ``cl.exe`` is clang in cl mode posing as that MSVC (``-fms-compatibility-version=19.44``
for 14.44: ``_MSC_VER`` 1944), so a tree's real ``crt/host_config.h`` judges it. Its CRT headers are
stubs in the places MSVC keeps them (``crtdefs.h`` in the toolset's include, ``corecrt.h`` in the SDK's
ucrt): the preprocessing finds them only through the INCLUDE that the toolset's environment sets.

On Linux (``wine=False``) cl.exe and vswhere.exe are scripts run directly. For the Windows CPython
under Wine (``wine=True``) each is ``tests/windows/unixrun.c`` built with MinGW (a PE, which Wine can
wait on) beside a ``.unix`` script it runs; paths in vswhere's JSON are then Windows paths (Z:).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

# (Visual Studio folder, its vswhere fields, its toolsets)
INSTALLS = (
    ("Program Files/Microsoft Visual Studio/18/Enterprise",
     {"displayName": "Visual Studio Enterprise 2026", "installationVersion": "18.0.11205.157",
      "catalog": {"productLineVersion": "2026"}}, ("14.50.35717", "14.44.35207")),
    ("Program Files (x86)/Microsoft Visual Studio/2022/BuildTools",
     {"displayName": "Visual Studio Build Tools 2022", "installationVersion": "17.14.36310.24",
      "catalog": {"productLineVersion": "2022"}}, ("14.43.34808",)),
)
SDK = "10.0.26100.0"
UNIXRUN = Path(__file__).resolve().parent / "windows" / "unixrun.c"

_CL = '''\
import os, re, sys

def unix(p):  # Z:\\a\\b -> /a/b (Wine maps Z: to /)
    return p[2:].replace("\\\\", "/") if re.match(r"[Zz]:[\\\\/]", p) else p

def main(args, include, write):
    if not args:  # cl.exe alone prints its banner
        write("Microsoft (R) C/C++ Optimizing Compiler Version {full} for x64\\n")
        return 0
    seps = ";" if ";" in include or re.match(r"[Zz]:", include) else ":"
    env = dict(os.environ, INCLUDE=";".join(unix(p) for p in include.split(seps) if p))  # clang splits on ;
    out = [("/I" + unix(a[2:])) if a.startswith("/I") else unix(a) for a in args]
    import subprocess
    r = subprocess.run(["{clang}", "--driver-mode=cl", "-fms-compatibility-version={ms}", *out], env=env,
                       capture_output=True, text=True)
    write(r.stdout + r.stderr)
    return r.returncode
'''
_LINUX_MAIN = '''
sys.exit(main(sys.argv[1:], os.environ.get("INCLUDE", ""), sys.stderr.write))
'''
_WINE_MAIN = '''
out, code, include, *args = sys.argv[1:]
with open(out, "w") as f:
    rc = main(args, include, f.write)
with open(code, "w") as f:
    f.write(f"{rc}\\n")
'''


def need_tool(name: str) -> str:
    """The tool's path; missing, the test skips, except under CI where it fails."""
    found = shutil.which(name)
    if found is None:
        if os.environ.get("CI"):
            pytest.fail(f"{name} is not installed although CI is set (.ci/run installs it)")
        pytest.skip(f"{name} is not installed")
    return found


def _program(path: Path, body: str, *, wine: bool, unixrun: Path | None) -> None:
    """``path`` (an .exe): a Python script on Linux; under Wine the PE stand-in and ``.unix`` beside it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    script = path.with_suffix(".unix") if wine else path
    script.write_text("#!/usr/bin/python3\n" + body, encoding="utf-8")
    script.chmod(0o755)
    if wine:
        assert unixrun is not None
        shutil.copyfile(unixrun, path)


def build_unixrun(out: Path) -> Path:
    mingw = need_tool("x86_64-w64-mingw32-gcc-posix")
    exe = out / "unixrun.exe"
    subprocess.run([mingw, "-municode", "-O1", "-o", str(exe), str(UNIXRUN)], check=True)
    return exe


def build_layout(root: Path, *, wine: bool = False, winpath: Callable[[Path], str] = str) -> dict[str, str]:
    """The layout under ``root``; returns the variables that point Windows programs at it
    (``ProgramFiles(x86)``, ``ProgramFiles``), as paths the host that runs cudaredist sees."""
    clang = need_tool("clang")
    root.mkdir(parents=True, exist_ok=True)
    unixrun = build_unixrun(root) if wine else None
    studios = []
    for folder, fields, toolsets in INSTALLS:
        vs = root / folder
        for version in toolsets:
            tools = vs / "VC" / "Tools" / "MSVC" / version
            ms = "19." + version.split(".")[1]
            body = _CL.format(clang=clang, ms=ms, full=f"{ms}.{version.split('.')[2]}")
            main = _WINE_MAIN if wine else _LINUX_MAIN
            _program(tools / "bin" / "Hostx64" / "x64" / "cl.exe", body + main, wine=wine, unixrun=unixrun)
            (tools / "include").mkdir(parents=True)
            (tools / "include" / "crtdefs.h").write_text(f"/* MSVC {version} */\n", encoding="utf-8")
            (tools / "lib" / "x64").mkdir(parents=True)
        studios.append({"instanceId": folder.split("/")[-2], "installationPath": winpath(vs), **fields})
    kits = root / "Program Files (x86)" / "Windows Kits" / "10"
    for sub in ("Include/{v}/ucrt", "Include/{v}/um", "Include/{v}/shared", "Lib/{v}/ucrt/x64",
                "Lib/{v}/um/x64", "bin/{v}/x64"):
        (kits / sub.format(v=SDK)).mkdir(parents=True)
    (kits / "Include" / SDK / "ucrt" / "corecrt.h").write_text("/* ucrt */\n", encoding="utf-8")
    installer = root / "Program Files (x86)" / "Microsoft Visual Studio" / "Installer"
    installer.mkdir(parents=True)
    (installer / "vswhere.json").write_text(json.dumps(studios, indent=2), encoding="utf-8")
    listing = installer / "vswhere.json"
    body = (f"import sys\nout, code = sys.argv[1:3]\nopen(out, 'w').write(open({str(listing)!r}).read())\n"
            "open(code, 'w').write('0\\n')\n") if wine else (
            f"import sys\nsys.stdout.write(open({str(listing)!r}).read())\n")
    _program(installer / "vswhere.exe", body, wine=wine, unixrun=unixrun)
    return {"ProgramFiles(x86)": winpath(root / "Program Files (x86)"),
            "ProgramFiles": winpath(root / "Program Files")}
