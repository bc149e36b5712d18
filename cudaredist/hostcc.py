"""The host compiler nvcc runs for a tree: the one nvcc would pick, the ones installed here, each
judged by the tree's own ``include/crt/host_config.h``, and the choice with what makes nvcc and
CMake use it.

    what nvcc would run     ``select_host_compiler``: -ccbin in NVCC_PREPEND_FLAGS/NVCC_APPEND_FLAGS,
                            NVCC_CCBIN, else its default (``gcc`` on Linux, ``cl.exe`` on Windows)
    installed here          Linux: g++, g++-N, clang++, clang++-N on PATH; Windows: each
                            ``VC\\Tools\\MSVC\\<version>`` of every Visual Studio vswhere reports
    the verdict             ``judge_host_config``: host_config.h preprocessed by that compiler
    the choice              ``choose``: the default when the tree accepts it (nothing is exported);
                            else the newest installed that it accepts (NVCC_CCBIN, CUDAHOSTCXX, and
                            on Windows the toolset's environment, as ``vcvars64.bat -vcvars_ver=X``
                            sets it, and CMake's ``-T version=X``)

A compiler the user named (NVCC_CCBIN, -ccbin, CUDAHOSTCXX) is kept; ``--host-compiler`` /
``CUDAREDIST_HOST_COMPILER`` names one (a path, a name on PATH, an MSVC version) or is ``off``.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from cudaredist.errors import UsageError
from cudaredist.profiles import is_windows, platform_rule

Which = Callable[[str, str | None], str | None]  # (command, PATH) -> path or None
ENV_HOST_COMPILER = "CUDAREDIST_HOST_COMPILER"
_LINUX_NAMES = re.compile(r"(g\+\+|clang\+\+)(?:-(\d+(?:\.\d+)*))?")


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


def _said(error: str) -> str:
    """A host_config.h #error without NVIDIA's advice to pass -allow-unsupported-compiler."""
    return re.split(r"\s+The nvcc flag", error)[0]


def _version(text: str) -> tuple[int, ...]:
    return tuple(int(p) for p in re.findall(r"\d+", text))


# -- what nvcc will run -------------------------------------------------------------------------
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

    @property
    def named(self) -> bool:
        """The user named it (NVCC_CCBIN, -ccbin), rather than nvcc's default."""
        return not self.source.startswith("nvcc's default")


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


def select_host_compiler(env: Mapping[str, str], *, windows: bool, which: Which = which_on) -> HostCompiler:
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


# -- the verdict of the tree's host_config.h ----------------------------------------------------
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
    with tempfile.TemporaryDirectory(prefix="cudaredist-hostcc-") as tmp:
        src = Path(tmp) / "host_config_probe.cpp"
        src.write_text('#include "crt/host_config.h"\n', encoding="utf-8")
        if hc.msvc:
            cmd = [hc.path, "/nologo", "/EP", "/TP", *(f"/D{d}" for d in defines), f"/I{include}", src.name]
        else:
            cmd = [hc.path, "-E", "-x", "c++", *(f"-D{d}" for d in defines), f"-I{include}", str(src),
                   "-o", os.devnull]
        rc, out = run_program(cmd, env, cwd=tmp, timeout=60)
    if rc == 0:
        return HostConfigVerdict(True, "", judged=True)
    # only host_config.h is included: its first #error is the verdict
    if m := re.search(r"#[ \t]*error:?[ \t]*(.*)", out):
        return HostConfigVerdict(False, m.group(1).strip().lstrip("-").strip(), judged=True)
    first = next((ln.strip() for ln in out.splitlines() if re.search(r"error|fatal", ln, re.I)), "")
    return HostConfigVerdict(False, first or first_line(out) or f"exit {rc}", judged=False)


def gcc_limit(include: Path) -> int | None:
    """The newest GCC major the tree's host_config.h accepts (``#if __GNUC__ > 15``), or None."""
    try:
        text = (include / "crt" / "host_config.h").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    found = [int(n) for n in re.findall(r"#\s*if\s+__GNUC__\s*>\s*(\d+)", text)]
    return min(found) if found else None


# -- the compilers installed here ---------------------------------------------------------------
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
    def vcvars(self) -> str:
        """Visual Studio's own script for this toolset's environment."""
        return f"vcvars{'arm64' if self.target == 'arm64' else '64'}.bat -vcvars_ver={self.short}"


@dataclass(frozen=True)
class Compiler:
    """A host compiler installed here."""

    name: str  # how messages name it: "g++-15", "MSVC 14.44.35207 (Visual Studio Enterprise 2022)"
    path: str
    version: tuple[int, ...]
    toolset: Toolset | None = None  # an MSVC toolset

    @property
    def host_compiler(self) -> HostCompiler:
        return HostCompiler(self.path, self.path, self.name, self.toolset is not None)


def linux_compilers(env: Mapping[str, str], *, run: Callable[..., tuple[int, str]] = run_program
                    ) -> list[Compiler]:
    """g++, g++-N, clang++ and clang++-N on PATH, newest first, g++ before clang++ (nvcc's default
    family); one entry per real file (``g++`` is often a link to ``g++-14``)."""
    seen: dict[str, Compiler] = {}
    for folder in env.get("PATH", "").split(os.pathsep):
        try:
            names = sorted(os.listdir(folder)) if folder else []
        except OSError:
            continue
        for name in names:
            m = _LINUX_NAMES.fullmatch(name)
            path = os.path.join(folder, name)
            if m is None or not (os.path.isfile(path) and os.access(path, os.X_OK)):
                continue
            real = os.path.realpath(path)
            kept = seen.get(real)
            if kept is not None and (m.group(2) is None or "-" in kept.name):
                continue  # the first on PATH wins, but a suffixed name (g++-14) names it best
            version = _version(m.group(2)) if m.group(2) else _version(
                first_line(run([path, "-dumpversion"], env, timeout=30)[1]))
            seen[real] = Compiler(name, path, version or (0,))
    return sorted(seen.values(), key=lambda c: (c.name.startswith("clang"), tuple(-v for v in c.version)))


def find_vswhere(env: Mapping[str, str], which: Which = which_on) -> str | None:
    """vswhere.exe where the Visual Studio Installer puts it, else on PATH."""
    base = env.get("ProgramFiles(x86)") or env.get("PROGRAMFILES(X86)")
    if base:
        path = os.path.join(base, "Microsoft Visual Studio", "Installer", "vswhere.exe")
        if os.path.isfile(path):
            return path
    return which("vswhere.exe", env.get("PATH")) or which("vswhere", env.get("PATH"))


def visual_studios(env: Mapping[str, str], *, which: Which = which_on,
                   run: Callable[..., tuple[int, str]] = run_program) -> list[dict[str, object]]:
    """Every Visual Studio vswhere reports (its JSON objects); none without vswhere."""
    vswhere = find_vswhere(env, which)
    if vswhere is None:
        return []
    rc, out = run([vswhere, "-all", "-prerelease", "-products", "*", "-format", "json", "-utf8"], env,
                  timeout=60)
    try:
        found = json.loads(out) if rc == 0 else []
    except ValueError:
        return []
    return [vs for vs in found if isinstance(vs, dict)] if isinstance(found, list) else []


_GENERATORS = {16: "2019", 17: "2022", 18: "2026"}


def msvc_toolsets(studios: list[dict[str, object]], *, target: str = "x64") -> list[Compiler]:
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
        major = _version(str(vs.get("installationVersion") or "0"))[:1] or (0,)
        catalog = vs.get("catalog")
        line = str(catalog.get("productLineVersion") or "") if isinstance(catalog, dict) else ""
        generator = f"Visual Studio {major[0]} {line or _GENERATORS.get(major[0], '')}".strip()
        name = str(vs.get("displayName") or f"Visual Studio {line}".strip())
        for version in versions:
            for host in hosts:
                cl = os.path.join(tools, version, "bin", f"Host{host}", target, "cl.exe")
                if os.path.isfile(cl):
                    ts = Toolset(version, os.path.join(tools, version), root, name, generator, host, target)
                    out.append(Compiler(f"MSVC {version} ({name})", cl, _version(version), ts))
                    break
    return sorted(out, key=lambda c: tuple(-v for v in c.version))


# -- what makes nvcc and CMake use a compiler ---------------------------------------------------
Pairs = tuple[tuple[str, str], ...]
Prepends = tuple[tuple[str, tuple[str, ...]], ...]


def _windows_sdk(env: Mapping[str, str]) -> tuple[str, str] | None:
    """(Windows Kits\\10 root, newest SDK version with um headers), from %ProgramFiles(x86)%."""
    base = env.get("ProgramFiles(x86)") or env.get("PROGRAMFILES(X86)")
    if not base:
        return None
    root = os.path.join(base, "Windows Kits", "10")
    try:
        versions = [v for v in os.listdir(os.path.join(root, "Include"))
                    if os.path.isdir(os.path.join(root, "Include", v, "um"))]
    except OSError:
        return None
    return (root, max(versions, key=_version)) if versions else None


def toolset_environment(ts: Toolset, env: Mapping[str, str]) -> tuple[Pairs, Prepends]:
    """What ``vcvars64.bat -vcvars_ver=<ts.short>`` sets for the toolset, worked out from the layout
    (the batch files are not run): (variables, directories put in front of PATH, INCLUDE, LIB, LIBPATH)."""
    join = os.path.join
    have = os.path.isdir
    bindir = join(ts.root, "bin", f"Host{ts.host}", ts.target)
    lib_arch = ts.target
    variables: list[tuple[str, str]] = [
        ("VSINSTALLDIR", join(ts.vs_root, "")), ("VCINSTALLDIR", join(ts.vs_root, "VC", "")),
        ("VCToolsInstallDir", join(ts.root, "")), ("VCToolsVersion", ts.version),
        ("VSCMD_ARG_HOST_ARCH", ts.host), ("VSCMD_ARG_TGT_ARCH", ts.target), ("Platform", ts.target)]
    path = [bindir]
    include = [d for d in (join(ts.root, "include"), join(ts.root, "ATLMFC", "include"),
                           join(ts.vs_root, "VC", "Auxiliary", "VS", "include")) if have(d)]
    lib = [d for d in (join(ts.root, "ATLMFC", "lib", lib_arch), join(ts.root, "lib", lib_arch)) if have(d)]
    libpath = list(lib) + [d for d in (join(ts.root, "lib", "x86", "store", "references"),) if have(d)]
    if (sdk := _windows_sdk(env)) is not None:
        root, version = sdk
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


def _with(env: Mapping[str, str], variables: Pairs, prepend: Prepends) -> dict[str, str]:
    out = {**env, **dict(variables)}
    for var, dirs in prepend:
        out[var] = os.pathsep.join([*dirs, out[var]] if out.get(var) else dirs)
    return out


# -- the choice ---------------------------------------------------------------------------------
@dataclass(frozen=True)
class Choice:
    """The compiler chosen for a tree (None: nvcc's own stays) and what makes nvcc and CMake use it."""

    compiler: Compiler | None
    reason: str  # one line: what was chosen and why
    variables: Pairs = ()
    prepend: Prepends = ()
    quiet: bool = False  # nothing changes (nvcc's own works, or the user's is kept): `env` says nothing

    @property
    def toolset(self) -> Toolset | None:
        return self.compiler.toolset if self.compiler else None


def _exports(c: Compiler, env: Mapping[str, str]) -> tuple[Pairs, Prepends]:
    if c.toolset is None:
        return (("NVCC_CCBIN", c.path), ("CUDAHOSTCXX", c.path)), ()
    variables, prepend = toolset_environment(c.toolset, env)
    return (("NVCC_CCBIN", c.path), ("CUDAHOSTCXX", c.path), *variables), prepend


def installed(env: Mapping[str, str], *, windows: bool, target: str = "x64", which: Which = which_on,
              run: Callable[..., tuple[int, str]] = run_program) -> list[Compiler]:
    """The host compilers installed here, newest first (see the module's docstring)."""
    if windows:
        return msvc_toolsets(visual_studios(env, which=which, run=run), target=target)
    return linux_compilers(env, run=run)


def judge(c: Compiler, include: Path, env: Mapping[str, str]) -> HostConfigVerdict:
    """``c`` against the tree's host_config.h, run in the environment it would be exported with."""
    variables, prepend = _exports(c, env)
    return judge_host_config(c.host_compiler, include, _with(env, variables, prepend))


def walk(compilers: list[Compiler], include: Path, env: Mapping[str, str], skip: str | None = None
         ) -> tuple[Compiler | None, list[tuple[Compiler, str]]]:
    """The first of ``compilers`` (newest first) that the tree accepts, and those refused before it
    (each with the header's #error); ``skip``: a path already judged."""
    refused: list[tuple[Compiler, str]] = []
    for c in compilers:
        if skip is not None and os.path.realpath(c.path) == os.path.realpath(skip):
            continue
        verdict = judge(c, include, env)
        if verdict.accepted:
            return c, refused
        refused.append((c, _said(verdict.error)))
    return None, refused


def _default_name(hc: HostCompiler, env: Mapping[str, str], run: Callable[..., tuple[int, str]]) -> str:
    assert hc.path is not None
    if hc.msvc:
        m = re.search(r"MSVC[\\/](\d+\.\d+\.\d+)", hc.path, re.I)
        return f"cl.exe {m.group(1) if m else ''} ({hc.path})".replace("  ", " ")
    version = first_line(run([hc.path, "-dumpversion"], env, timeout=30)[1])
    return f"{os.path.basename(hc.spec)} {version} ({hc.path})".replace("  ", " ")


def _named(spec: str, compilers: list[Compiler], env: Mapping[str, str], windows: bool,
           which: Which) -> Compiler:
    """The compiler --host-compiler names: an MSVC version (14.44) on Windows, a path, or a name on PATH."""
    if windows and re.fullmatch(r"\d+(\.\d+)*", spec):
        hit = next((c for c in compilers if c.toolset and (c.toolset.version + ".").startswith(spec + ".")),
                   None)
        if hit is None:
            have = ", ".join(c.toolset.version for c in compilers if c.toolset) or "none"
            raise UsageError(f"--host-compiler {spec}: no MSVC toolset {spec} is installed (vswhere reports "
                             f"toolsets {have}); name one of them, a cl.exe path, auto or off")
        return hit
    path = spec if os.path.isfile(spec) else which(spec, env.get("PATH"))
    if path is None:
        raise UsageError(f"--host-compiler {spec}: no such compiler (not a file, nor a command on PATH); "
                         "name a compiler's path or command, auto or off")
    known = next((c for c in compilers if os.path.realpath(c.path) == os.path.realpath(path)), None)
    # the path as named (g++, not the g++-12 it links to), known for its version and toolset
    return Compiler(os.path.basename(path), path, known.version, known.toolset) if known else Compiler(
        os.path.basename(path), path, ())


def choose(include: Path, env: Mapping[str, str], *, windows: bool, release: str | None = None,
           mode: str = "auto", target: str = "x64", which: Which = which_on,
           run: Callable[..., tuple[int, str]] = run_program) -> Choice:
    """The host compiler for the tree whose headers are ``include`` (its release for messages);
    ``mode``: auto, off, or a compiler (path, command, MSVC version) to use as it is."""
    header = f"{f'CUDA {release}' if release else 'the tree'}'s host_config.h"
    if mode == "off" or not (include / "crt" / "host_config.h").is_file():
        return Choice(None, "")
    if mode != "auto":
        c = _named(mode, installed(env, windows=windows, target=target, which=which, run=run), env,
                   windows, which)
        verdict = judge(c, include, env)
        said = "accepts it" if verdict.accepted else f"refuses it: \"{_said(verdict.error)}\""
        return Choice(c, f"host compiler: {c.name} ({c.path}), named by --host-compiler; {header} {said}",
                      *_exports(c, env))
    hc = select_host_compiler(env, windows=windows, which=which)
    if hc.named or env.get("CUDAHOSTCXX"):
        what = f"{hc.source}={hc.spec}" if hc.named else f"CUDAHOSTCXX={env['CUDAHOSTCXX']}"
        return Choice(None, f"host compiler: {what} is kept, as set (--host-compiler auto chooses only "
                            "when nothing names one)", quiet=True)
    refused = ""
    if hc.path is not None:
        verdict = judge_host_config(hc, include, env)
        name = _default_name(hc, env, run)
        if verdict.accepted:
            return Choice(None, f"host compiler: nvcc's default, {name}, passes {header}; nothing set",
                          quiet=True)
        if not verdict.judged:
            return Choice(None, f"host compiler: nvcc's default, {name}, could not be judged against "
                                f"{header} ({verdict.error}); nothing set", quiet=True)
        refused = f"nvcc's default, {name}, is refused by {header} (\"{_said(verdict.error)}\")"
    compilers = installed(env, windows=windows, target=target, which=which, run=run)
    found, newer = walk(compilers, include, env, skip=hc.path)
    why = "; ".join([refused or f"nvcc finds no {hc.spec} on PATH",
                     *(f"{c.name} is refused too (\"{error}\")" if refused else
                       f"{c.name} is refused by {header} (\"{error}\")" for c, error in newer
                       if c.toolset is not None)])
    if found is None:
        none = "no Visual Studio that vswhere reports has an MSVC toolset" if windows else "no g++ on PATH"
        others = (f"none of the {len(compilers)} installed here passes {header}" if compilers else
                  f"no other is installed here ({none})")
        return Choice(None, f"host compiler: {why}, and {others}; nothing set (`cudaredist doctor` says "
                            "what to install)")
    return Choice(found, f"host compiler: {found.name} ({found.path}): {why}; {found.name} is the newest "
                         f"installed that {header} accepts", *_exports(found, env))


def for_tree(prefix: Path, *, platform: str, release: str, env: Mapping[str, str], host_windows: bool,
             given: str | None = None) -> Choice | None:
    """``choose`` for an installed tree run on this host (None: a tree for another host, whose
    compiler is not this host's to choose); ``given``: --host-compiler, else CUDAREDIST_HOST_COMPILER."""
    if is_windows(platform) != host_windows:
        return None
    mode = (given or env.get(ENV_HOST_COMPILER) or "auto").strip() or "auto"
    return choose(prefix / "include", env, windows=host_windows, release=release, mode=mode,
                  target=platform_rule(platform).arch or "x64")
