"""The host compiler nvcc runs for a tree, decided once: ``choose`` judges the candidates (what the
user named, nvcc's default, those installed here) by the tree's own ``include/crt/host_config.h``
and returns the compiler, what to export, each candidate's verdict and the reason: ``env``, ``run``
and the action export it, doctor judges the shell by it.

    what nvcc would run     ``select_host_compiler``: -ccbin in NVCC_PREPEND_FLAGS/NVCC_APPEND_FLAGS,
                            NVCC_CCBIN, else its default (``gcc`` on Linux, ``cl.exe`` on Windows;
                            a cross tree's cross compiler)
    installed here          Linux: g++, g++-N, clang++, clang++-N on PATH (a launcher's wrappers,
                            ccache's g++-14, by their names); Windows: the MSVC toolsets (cudaredist.msvc)
    the verdict             ``judge_host_config``: host_config.h preprocessed by that compiler
    the choice              the user's (NVCC_CCBIN, -ccbin) or nvcc's default, kept when the tree takes
                            it; else the newest installed it takes (NVCC_CCBIN, CUDAHOSTCXX, MSVC's env)
    a cross tree            the same, with its cross compiler as the default and nvcc's -target-dir
                            added to the user's NVCC_APPEND_FLAGS (``--sysroot`` and all kept)

CUDAHOSTCXX alone is CMake's: nvcc never reads it. ``--host-compiler`` / ``CUDAREDIST_HOST_COMPILER``
is ``auto``, ``off`` (any case) or names one (a path, a name on PATH, an MSVC version)."""

from __future__ import annotations

import os
import re
import shlex
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from cudaredist.errors import UsageError
from cudaredist.msvc import (
    Pairs,
    Prepends,
    Toolset,
    Which,
    first_line,
    msvc_toolsets,
    run_program,
    toolset_environment,
    version_of,
    visual_studios,
    which_on,
)
from cudaredist.profiles import CrossRule, cross_rule, is_windows, platform_rule

ENV_HOST_COMPILER = "CUDAREDIST_HOST_COMPILER"
_LINUX_NAMES = re.compile(r"(g\+\+|clang\+\+)(?:-(\d+(?:\.\d+)*))?")


def _said(error: str) -> str:
    """A host_config.h #error without NVIDIA's advice to pass -allow-unsupported-compiler."""
    return re.split(r"\s+The nvcc flag", error)[0]


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
    ccbin_var: str = ""  # the variable whose -ccbin names it

    @property
    def named(self) -> bool:
        """The user named it (NVCC_CCBIN, -ccbin), rather than nvcc's default."""
        return not self.source.startswith(("nvcc's default", "the cross compiler"))


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


def select_host_compiler(env: Mapping[str, str], *, windows: bool, which: Which = which_on,
                         cross: str = "") -> HostCompiler:
    """The compiler nvcc will use, the way nvcc picks it: ``-ccbin`` in NVCC_PREPEND_FLAGS /
    NVCC_APPEND_FLAGS, else NVCC_CCBIN, else its default: ``cl.exe`` on PATH on Windows, on
    Linux ``gcc`` on PATH to compile and ``g++`` to link (what ``nvcc --dryrun`` shows); a cross
    tree's default is its ``cross`` compiler, which its environment names."""
    path_var = env.get("PATH")
    flags = _nvcc_flags(env, windows)
    # -allow-unsupported-compiler, or the macro it sets (13.x: #if !__NV_NO_HOST_COMPILER_CHECK)
    allow = next((var for var, args in flags for a in args
                  if a.lstrip("-") == "allow-unsupported-compiler" or "__NV_NO_HOST_COMPILER_CHECK" in a), "")
    spec, source, ccbin_var = None, "", ""
    for var, args in flags:  # NVCC_APPEND_FLAGS is read last: its -ccbin is the one that counts
        for i, a in enumerate(args):  # -ccbin X, -ccbin=X, --compiler-bindir X, --compiler-bindir=X
            opt, eq, value = a.partition("=")
            if opt in ("-ccbin", "--compiler-bindir") and (eq or i + 1 < len(args)):
                spec, source, ccbin_var = value if eq else args[i + 1], f"-ccbin in {var}", var
    if spec is None and env.get("NVCC_CCBIN"):
        spec, source = env["NVCC_CCBIN"], "NVCC_CCBIN"
    default = "cl.exe" if windows else "gcc"
    linker: str | None = None
    if spec is None:
        spec = cross or default
        source = "the cross compiler" if cross else f"nvcc's default `{default}` on PATH"
        path = which(spec, path_var)
        if not (windows or cross):
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
    return HostCompiler(spec, path, source, msvc, linker, bool(allow), allow, ccbin_var)


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
class Compiler:
    name: str  # how messages name it: "g++-15", "MSVC 14.44.35207 (Visual Studio Enterprise 2022)"
    path: str
    version: tuple[int, ...]
    toolset: Toolset | None = None  # an MSVC toolset


def identity(path: str) -> str:
    """What tells two compilers apart: the file a link leads to (g++ -> g++-14), unless that is a
    launcher (ccache, sccache, distcc: every g++-N in ccache's masquerade folder links to it), whose
    wrappers are told apart by their names (ccache's g++-14 runs g++-14)."""
    real = os.path.realpath(path)
    compiler = re.search(r"\+\+|gcc|clang|cl\.exe", os.path.basename(real), re.I)
    return real if compiler else os.path.abspath(path)


def linux_compilers(env: Mapping[str, str]) -> list[Compiler]:
    """g++, g++-N, clang++ and clang++-N on PATH, newest first, g++ before clang++ (nvcc's default
    family); one entry per compiler (``g++`` is often a link to ``g++-14``)."""
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
            kept = seen.get(key := identity(path))
            if kept is not None and (m.group(2) is None or "-" in kept.name):
                continue  # the first on PATH wins, but a suffixed name (g++-14) names it best
            version = version_of(m.group(2)) if m.group(2) else version_of(
                first_line(run_program([path, "-dumpversion"], env, timeout=30)[1]))
            seen[key] = Compiler(name, path, version or (0,))
    return sorted(seen.values(), key=lambda c: (c.name.startswith("clang"), tuple(-v for v in c.version)))


def installed(env: Mapping[str, str], *, windows: bool, target: str = "x64", which: Which = which_on
              ) -> list[Compiler]:
    """The host compilers installed here, newest first (see the module's docstring)."""
    if windows:
        return [Compiler(f"MSVC {ts.version} ({ts.vs_name})", ts.cl, version_of(ts.version), ts)
                for ts in msvc_toolsets(visual_studios(env, which=which), target=target)]
    return linux_compilers(env)


# -- what makes nvcc and CMake use a compiler ---------------------------------------------------
def with_exports(env: Mapping[str, str], variables: Pairs, prepend: Prepends, sep: str) -> dict[str, str]:
    """``env`` with ``variables`` set and ``prepend``'s directories in front: what a child process gets."""
    out = {**env, **dict(variables)}
    for var, dirs in prepend:
        out[var] = sep.join([*dirs, out[var]] if out.get(var) else dirs)
    return out


def _without_ccbin(env: Mapping[str, str], var: str, windows: bool) -> str:
    """``var``'s nvcc flags, read as :func:`select_host_compiler` reads them, with -ccbin taken out (it
    comes before NVCC_CCBIN)."""
    args, out = dict(_nvcc_flags(env, windows))[var], []
    for i, a in enumerate(args):
        opt, eq, _v = a.partition("=")
        if opt in ("-ccbin", "--compiler-bindir") or (i and args[i - 1] in ("-ccbin", "--compiler-bindir")):
            continue
        out.append(a)
    return " ".join(out if windows else map(shlex.quote, out))


def _exports(c: Compiler, env: Mapping[str, str], hc: HostCompiler | None = None) -> tuple[Pairs, Prepends]:
    """NVCC_CCBIN and CUDAHOSTCXX (CMake's) for ``c``, a -ccbin that would beat it taken out, and an
    MSVC toolset's environment."""
    variables: Pairs = (("NVCC_CCBIN", c.path), ("CUDAHOSTCXX", c.path))
    if hc is not None and hc.ccbin_var:
        variables += ((hc.ccbin_var, _without_ccbin(env, hc.ccbin_var, c.toolset is not None)),)
    if c.toolset is None:
        return variables, ()
    more, prepend = toolset_environment(c.toolset, env)
    return variables + more, prepend


def cross_exports(rule: CrossRule, env: Mapping[str, str], named: bool) -> Pairs:
    """What nvcc needs for a Linux cross tree, around what the user set: ``-target-dir`` added to
    their NVCC_APPEND_FLAGS (a ``--sysroot`` kept), the cross compiler unless they ``named`` one.
    (A Windows cross tree, with no ``target_dir``, never gets here: :func:`for_tree` answers None.)"""
    flags = env.get("NVCC_APPEND_FLAGS", "")
    both = f"{env.get('NVCC_PREPEND_FLAGS', '')} {flags}"
    given = re.search(r"(^|\s)(-target-dir|--target-directory)\b", both)
    return ((() if given else (("NVCC_APPEND_FLAGS", f"{flags} -target-dir {rule.target_dir}".strip()),))
            + (() if named else (("NVCC_CCBIN", rule.compiler),)))


def judge(c: Compiler, include: Path, env: Mapping[str, str]) -> HostConfigVerdict:
    """``c`` against the tree's host_config.h, run in the environment it would be exported with."""
    variables, prepend = _exports(c, env)
    return judge_host_config(HostCompiler(c.path, c.path, c.name, c.toolset is not None), include,
                             with_exports(env, variables, prepend, os.pathsep))


def _default_name(hc: HostCompiler, env: Mapping[str, str]) -> str:
    assert hc.path is not None
    if hc.msvc:
        m = re.search(r"MSVC[\\/](\d+\.\d+\.\d+)", hc.path, re.I)
        return f"cl.exe {m.group(1) if m else ''} ({hc.path})".replace("  ", " ")
    version = first_line(run_program([hc.path, "-dumpversion"], env, timeout=30)[1])
    return f"{os.path.basename(hc.spec)} {version} ({hc.path})".replace("  ", " ")


def _named(spec: str, compilers: list[Compiler], env: Mapping[str, str], windows: bool,
           which: Which, origin: str) -> Compiler:
    """The compiler --host-compiler (or the variable) names: an MSVC version (14.44) on Windows, a path,
    or a name on PATH."""
    given = f"{origin} {spec}" if origin.startswith("-") else f"{origin}={spec}"
    if windows and re.fullmatch(r"\d+(\.\d+)*", spec):
        hit = next((c for c in compilers if c.toolset and (c.toolset.version + ".").startswith(spec + ".")),
                   None)
        if hit is None:
            have = ", ".join(c.toolset.version for c in compilers if c.toolset) or "none"
            raise UsageError(f"{given}: no MSVC toolset {spec} is installed (vswhere reports toolsets "
                             f"{have}); name one of them, a cl.exe path, auto or off")
        return hit
    path = spec if os.path.isfile(spec) else which(spec, env.get("PATH"))
    if path is None:
        raise UsageError(f"{given}: no such compiler (not a file, nor a command on PATH); name a "
                         "compiler's path or command, auto or off")
    known = next((c for c in compilers if identity(c.path) == identity(path)), None)
    # the path as named (g++, not the g++-12 it links to), known for its version and toolset
    return Compiler(os.path.basename(path), path, known.version, known.toolset) if known else Compiler(
        os.path.basename(path), path, ())


# -- the choice ---------------------------------------------------------------------------------
@dataclass(frozen=True)
class Choice:
    """The host compiler decided for a tree: the one exported (None: what nvcc runs stays), what to
    export (with a cross tree's nvcc flags), why, and each candidate's verdict, in the order judged."""

    compiler: Compiler | None
    reason: str  # one line: what was chosen and why
    variables: Pairs = ()
    prepend: Prepends = ()
    quiet: bool = False  # the compiler nvcc runs is not changed (it passes, or is kept): `env` says nothing
    candidates: tuple[tuple[str, str], ...] = ()  # (candidate, verdict)
    accepted: bool = False  # the compiler nvcc runs with these exports passes the header
    shell: tuple[HostCompiler, HostConfigVerdict] | None = None  # the shell's own compiler, where judged

    @property
    def toolset(self) -> Toolset | None:
        return self.compiler.toolset if self.compiler else None


def _merge(first: Pairs, then: Pairs) -> Pairs:
    return tuple({**dict(first), **dict(then)}.items())


def _verdict(v: HostConfigVerdict) -> str:
    return ("accepted" if v.accepted else f"refused: {_said(v.error)}" if v.judged else
            f"not judged: {v.error}")


def choose(include: Path, env: Mapping[str, str], *, windows: bool, release: str | None = None,
           mode: str = "auto", target: str = "x64", origin: str = "--host-compiler",
           cross: CrossRule | None = None, which: Which = which_on) -> Choice:
    """The host compiler for the tree whose headers are ``include`` (its release for messages);
    ``mode``: auto, off, or a compiler (path, command, MSVC version) that ``origin`` names, to use as
    it is; ``cross``: a cross tree's rule (its compiler is the default, its -target-dir added)."""
    header = f"{f'CUDA {release}' if release else 'the tree'}'s host_config.h"
    hc = select_host_compiler(env, windows=windows, which=which, cross=cross.compiler if cross else "")
    base = cross_exports(cross, env, hc.named) if cross else ()
    if mode == "off" or not (include / "crt" / "host_config.h").is_file():
        return Choice(None, "", base)

    def listing() -> list[Compiler]:
        if cross:  # a cross compiler for the target: the one the rule names
            found = which(cross.compiler, env.get("PATH"))
            return [Compiler(cross.compiler, found, ())] if found else []
        return installed(env, windows=windows, target=target, which=which)

    if mode != "auto":
        c = _named(mode, listing(), env, windows, which, origin)
        verdict = judge(c, include, env)
        said = "accepts it" if verdict.accepted else f"refuses it: \"{_said(verdict.error)}\""
        variables, prepend = _exports(c, {**env, **dict(base)}, hc)
        return Choice(c, f"host compiler: {c.name} ({c.path}), named by {origin}; {header} {said}",
                      _merge(base, variables), prepend, candidates=((c.name, _verdict(verdict)),),
                      accepted=verdict.accepted)
    whose = "the cross compiler " if cross else "nvcc's default, "
    label = f"{hc.spec} ({hc.source})" if hc.named else whose + (
        _default_name(hc, env) if hc.path else hc.spec)
    shell = (hc, judge_host_config(hc, include, env)) if hc.path is not None else None
    if shell is not None:
        mine = shell[1]
        judged = ((label, _verdict(mine)),)
        if mine.accepted or not mine.judged:
            said = f"passes {header}" if mine.accepted else \
                f"could not be judged against {header} ({mine.error})"
            return Choice(None, f"host compiler: {label} {said}; {'kept' if hc.named else 'nothing set'}",
                          base, quiet=True, candidates=judged, accepted=mine.accepted, shell=shell)
        refused = f"{label}{'' if hc.named else ','} is refused by {header} (\"{_said(mine.error)}\")"
        if hc.allow_unsupported:
            return Choice(None, f"host compiler: {refused}, and kept: -allow-unsupported-compiler is set in "
                                f"{hc.flags_source}", base, candidates=judged, shell=shell)
    else:
        judged = ((label, "not found"),)
        refused = f"{label} is not found" if hc.named else f"nvcc finds no {hc.spec} on PATH"
    compilers = listing()
    rest = [c for c in compilers if identity(c.path) != identity(hc.path or "")]
    found, errors = None, {}  # newest first, until one passes: each refused one with the header's #error
    for c in rest:
        verdict = judge(c, include, env)
        if verdict.accepted:
            found = c
            break
        errors[c.path] = _said(verdict.error)
    why = "; ".join([refused, *(f"{c.name} is refused too (\"{errors[c.path]}\")" if hc.path else
                                f"{c.name} is refused by {header} (\"{errors[c.path]}\")" for c in rest
                                if c.path in errors and c.toolset is not None)])
    candidates = judged + tuple((c.name, "accepted" if c is found else f"refused: {errors[c.path]}" if c.path
                                 in errors else "not tried: a newer one is accepted") for c in rest)
    keep = f" (`--host-compiler {hc.spec}` keeps yours)" if hc.named else ""
    if found is None:
        none = ("no Visual Studio that vswhere reports has an MSVC toolset" if windows else
                f"{cross.compiler} is not on PATH" if cross else "no g++ on PATH")
        others = (f"none of the {len(compilers)} installed here passes {header}" if compilers else
                  f"no other is installed here ({none})")
        return Choice(None, f"host compiler: {why}, and {others}; nothing {'more ' if base else ''}set "
                            "(`cudaredist doctor` says what to install)", base, candidates=candidates,
                      shell=shell)
    variables, prepend = _exports(found, {**env, **dict(base)}, hc)
    cmake = env.get("CUDAHOSTCXX", "")  # CMake's compiler, kept where the tree takes it
    at = (cmake if os.path.isfile(cmake) else which(cmake, env.get("PATH"))) if cmake else None
    if at and judge_host_config(HostCompiler(cmake, at, "CUDAHOSTCXX", found.toolset is not None), include,
                                env).accepted:
        variables = tuple(p for p in variables if p[0] != "CUDAHOSTCXX")
    return Choice(found, f"host compiler: {found.name} ({found.path}): {why}; {found.name} is the newest "
                         f"installed that {header} accepts{keep}", _merge(base, variables), prepend,
                  candidates=candidates, accepted=True, shell=shell)


def for_tree(prefix: Path, *, platform: str, release: str, env: Mapping[str, str], host_windows: bool,
             given: str | None = None, host: str = "", which: Which = which_on) -> Choice | None:
    """``choose`` for an installed tree used on this host (None: a tree for another host, or a Windows
    cross tree, whose compiler comes from Visual Studio's prompt); ``given``: --host-compiler;
    ``host``: a cross tree's, the platform its tools are for. env, run, the action and doctor ask here."""
    rule = cross_rule(platform, host) if host else None
    if is_windows(platform) != host_windows or (rule is not None and not rule.target_dir):
        return None
    # --host-compiler, else CUDAREDIST_HOST_COMPILER, else auto; the keywords auto and off in any case
    origin, mode = ("--host-compiler", given) if given else (ENV_HOST_COMPILER, env.get(ENV_HOST_COMPILER))
    mode = (mode or "").strip() or "auto"
    include = prefix / "targets" / rule.target_dir / "include" if rule else prefix / "include"
    return choose(include, env, windows=host_windows, release=release, origin=origin, cross=rule,
                  mode=mode.lower() if mode.lower() in ("auto", "off") else mode,
                  target=platform_rule(platform).arch or "x64", which=which)
