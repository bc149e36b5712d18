"""The environment a toolkit tree needs, and how each shell (or GitHub Actions) is told it (pure).

Two steps. The tree's shape on this host (``_SHAPES``, a table: native Linux or Windows, a Linux
or Windows cross tree, a Windows tree elsewhere, which gets only WINDOWS_CUDA_HOME, what torch's
cross-compile paths read) gives CUDA_PATH, CUDA_HOME, CUDA_PATH_VX_Y, PATH and LD_LIBRARY_PATH (Linux:
nvvm/lib64 too, where cuda-pathfinder asks the loader first) and CMake's arguments (``cmake_args``: a
cross tree's cross mode; a Windows tree's ``-T version=X,cuda=PREFIX``). Then hostcc's decision for
the compiler (``host_compiler``) adds its variables: NVCC_CCBIN, CUDAHOSTCXX, a cross tree's
``-target-dir`` in NVCC_APPEND_FLAGS, and an MSVC toolset's environment (what ``vcvars64.bat
-vcvars_ver=X`` sets: its bin on PATH after the tree's, INCLUDE, LIB, LIBPATH, ...).

Every renderer quotes so that any path (spaces, quotes, ``$``, backslashes) comes out as
exactly one word; what no quoting of a shell can carry is refused with an error.
"""

from __future__ import annotations

import contextlib
import itertools
import ntpath
import posixpath
import re
import shlex
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from cudaredist.errors import PrefixError, UsageError
from cudaredist.hostcc import Choice, with_exports
from cudaredist.localfs import local_error
from cudaredist.plan import version_key
from cudaredist.profiles import CrossRule, cross_rule, is_windows, platform_rule

SHELLS = ("sh", "bash", "zsh", "fish", "pwsh", "cmd")
# PowerShell also closes a single-quoted string on the typographic single quotes
_PWSH_QUOTES = "'\u2018\u2019\u201a\u201b"
_DRIVE = re.compile(r"^([A-Za-z]):[\\/]")
# where CMake's `-T cuda=<tree>` looks for NVIDIA's MSBuild files (CUDA X.Y.props, .targets)
MSBUILD_DIR = "extras/visual_studio_integration/MSBuildExtensions"


@dataclass(frozen=True)
class Environment:
    """Variables set to a value, and directories put in front of search-path variables."""

    variables: tuple[tuple[str, str], ...]
    # (variable, directories in the order they should be searched)
    prepend: tuple[tuple[str, tuple[str, ...]], ...]
    host_windows: bool
    notes: tuple[str, ...] = ()
    cmake_args: tuple[str, ...] = ()   # what makes CMake's Visual Studio generator use the tree

    def to_json(self) -> dict[str, object]:
        return {"set": dict(self.variables), "prepend": {k: list(v) for k, v in self.prepend},
                "notes": list(self.notes), "cmake_args": list(self.cmake_args)}


# The shapes of a tree on a host, as data: (variables set to the prefix, PATH entries, LD_LIBRARY_PATH
# entries, under the prefix; {arch}: the tree's, on CUDA 13 only). The compiler is a step of its own.
_HOMES = ("CUDA_PATH", "CUDA_HOME", "CUDA_PATH_V{major}_{minor}")
_SHAPES: dict[str, tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...]]] = {
    # libnvvm.so sits in nvvm/lib64, off lib/: without it here, a loader that finds another toolkit's
    # libNVVM first (ld.so.conf, an older LD_LIBRARY_PATH) mixes two toolkits. On Windows PATH stays as
    # NVIDIA's installer sets it (bin): cuda-pathfinder finds nvvm\bin\x64 through CUDA_PATH.
    "linux": (_HOMES, ("bin",), ("lib", "nvvm/lib64")),
    "windows": (_HOMES, ("bin", "bin/{arch}"), ()),  # CUDA 13 moved the runtime DLLs to bin\<arch>
    # the target's libraries are for the target's loader, not this host's; the arm64 DLLs do not load on x64
    "linux-cross": (_HOMES, ("bin",), ("nvvm/lib64",)),
    "windows-cross": (_HOMES, ("bin",), ()),
    "windows-elsewhere": (("WINDOWS_CUDA_HOME",), (), ()),  # what torch's cross-compile paths read
}


def shape(prefix: str, platform: str, *, host: str, host_windows: bool) -> str:
    """Which of the shapes a ``platform`` tree (a cross tree's tools for ``host``) is on this host."""
    tree_windows = is_windows(platform)
    if tree_windows and not host_windows:
        return "windows-elsewhere"
    if not tree_windows and host_windows:
        raise PrefixError(
            f"{prefix} holds a {platform} tree, which cannot run on this Windows host; use it from Linux or "
            "WSL (`cudaredist env` there), or install --platform windows-x86_64 here", prefix=prefix)
    return ("windows" if tree_windows else "linux") + ("-cross" if host else "")


def environment(prefix: str, *, platform: str, release: str, host_windows: bool,
                msbuild: bool = False, host: str = "",
                host_compiler: Choice | None = None, compat: str = "") -> Environment:
    """The environment for a tree of ``platform``/``release`` at ``prefix`` (a path of this host);
    ``msbuild``: the tree has NVIDIA's MSBuild files (the visual_studio_integration component);
    ``host``: a cross tree's, the platform its tools are for; ``host_compiler``: hostcc's decision
    for the tree (its variables, a Linux cross tree's compiler and -target-dir among them, and an MSVC
    toolset's directories after the tree's); ``compat``: the tree's compat/, first on
    LD_LIBRARY_PATH (what cudaredist.compat.decide decided; "" for none)."""
    kind = shape(prefix, platform, host=host, host_windows=host_windows)
    join = ntpath.join if host_windows else posixpath.join
    major, minor = (release.split(".") + ["0"])[:2]
    arch = platform_rule(platform).arch
    homes, bins, libs = _SHAPES[kind]
    variables = tuple((v.format(major=major, minor=minor), prefix) for v in homes)
    bins = tuple(b for b in bins if "{arch}" not in b or (arch and version_key(release) >= (13,)))
    prepend = {var: tuple(join(prefix, *d.format(arch=arch).split("/")) for d in dirs)
               for var, dirs in (("PATH", bins), ("LD_LIBRARY_PATH", libs)) if dirs}
    rule = cross_rule(platform, host) if host else None
    if compat and "LD_LIBRARY_PATH" in prepend:  # the compat libcuda before the tree's own libraries
        prepend["LD_LIBRARY_PATH"] = (compat, *prepend["LD_LIBRARY_PATH"])
    cmake, notes = _cmake(kind, prefix, rule, msbuild, host_compiler, join)
    # the compiler step: its variables after the tree's, its directories after the tree's own entries
    variables += host_compiler.variables if host_compiler else ()
    for var, dirs in host_compiler.prepend if host_compiler else ():
        prepend[var] = prepend.get(var, ()) + dirs
    if host_compiler and not host_compiler.quiet and host_compiler.reason:
        notes = (host_compiler.reason, *notes)
    return Environment(variables, tuple(prepend.items()), host_windows, notes, cmake)


def _cmake(kind: str, prefix: str, rule: CrossRule | None, msbuild: bool, choice: Choice | None,
           join: Callable[..., str]) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(the CMake arguments, the notes) for a tree of the shape ``kind``."""
    nvcc = join(prefix, "bin", "nvcc.exe" if join is ntpath.join else "nvcc")
    if kind == "windows-elsewhere":
        return (), ("a Windows tree on a non-Windows host: only WINDOWS_CUDA_HOME is set (for "
                    "cross-compiling); PATH and CUDA_HOME are left alone",)
    if rule is None:  # CMake's Visual Studio generator: -T version=<MSVC toolset>,cuda=<the MSBuild files>
        toolset = choice.toolset if choice and kind == "windows" else None
        toolset_args = [*([f"version={toolset.short}"] if toolset else []),
                        *([f"cuda={prefix}"] if kind == "windows" and msbuild else [])]
        cmake: tuple[str, ...] = ("-T", ",".join(toolset_args)) if toolset_args else ()
        generator = toolset.generator if toolset else "Visual Studio 17 2022"
        return cmake, tuple(n for n in (
            f"CMake's Visual Studio generator: cmake -G \"{generator}\" {cmake_line(cmake)}" if cmake else "",
            f"the same toolset from Visual Studio's own script: {toolset.vcvars}" if toolset else "") if n)
    system = (f"-DCMAKE_SYSTEM_NAME={rule.system[0]}", f"-DCMAKE_SYSTEM_PROCESSOR={rule.system[1]}")
    if rule.target_dir:
        flag = f"-target-dir {rule.target_dir}"
        ccbin = dict(choice.variables if choice else ()).get("NVCC_CCBIN", rule.compiler)
        cmake = (*system, *([f"-DCMAKE_C_COMPILER={rule.c_compiler}"] if rule.c_compiler else []),
                 f"-DCMAKE_CXX_COMPILER={ccbin}", f"-DCMAKE_CUDA_HOST_COMPILER={ccbin}",
                 f"-DCMAKE_CUDA_COMPILER={nvcc}", f"-DCMAKE_CUDA_FLAGS={flag}",
                 f"-DCUDAToolkit_ROOT={prefix}",
                 f"-DCUDAToolkit_TARGET_DIR={join(prefix, 'targets', rule.target_dir)}")
        return cmake, (f"a {rule.host} -> {rule.target} cross tree: nvcc builds for {rule.target} with "
                       f"{ccbin} (NVCC_CCBIN; -ccbin overrides it) and {flag} (NVCC_APPEND_FLAGS)",
                       f"CMake: cmake -G Ninja {cmake_line(cmake)}")
    lib_dir = join(prefix, "lib", platform_rule(rule.target).arch)
    # CudaToolkitLibDir: where NVIDIA's MSBuild files link from (as Conan's CUDA recipes set it)
    cmake = (*system, f"-DCMAKE_CUDA_COMPILER={nvcc}", f"-DCUDAToolkit_ROOT={prefix}",
             f"-DCMAKE_VS_GLOBALS=CudaToolkitLibDir={lib_dir}")
    vs = ("-A", "ARM64", *(("-T", f"cuda={prefix}") if msbuild else ()))
    return cmake, (f"a {rule.host} -> {rule.target} cross tree: build in a shell of {rule.compiler}; "
                   f"the import libraries are in {lib_dir}", f"CMake: cmake -G Ninja {cmake_line(cmake)}",
                   "CMake's Visual Studio generator: cmake -G \"Visual Studio 17 2022\" "
                   + cmake_line((*vs, *cmake)))


def cmake_line(args: tuple[str, ...]) -> str:
    """``args`` as one command-line fragment: an argument with a space in double quotes, which
    PowerShell, cmd and bash read alike (the action's cmake-args output is written the same way)."""
    return " ".join(f'"{a}"' if " " in a else a for a in args)


# -- quoting -----------------------------------------------------------------------------------
def quote_sh(value: str) -> str:
    """POSIX single quotes: nothing inside is special; a quote is closed, escaped and reopened."""
    return "'" + value.replace("'", "'\\''") + "'"


def quote_fish(value: str) -> str:
    """fish single quotes: only ``\\'`` and ``\\\\`` are escapes inside them."""
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _pwsh_literal(value: str) -> str:
    return "'" + "".join(c + c if c in _PWSH_QUOTES else c for c in value) + "'"


def quote_pwsh(value: str) -> str:
    """PowerShell verbatim string: every single-quote character (also ‘ ’ ‚ ‛) is doubled.

    A value with characters outside ASCII is spelled in ASCII, ``('C:\\' + [char]0x43F + ...)``
    (UTF-16 code units, as PowerShell's strings are): ``cudaredist env | Invoke-Expression`` reads
    the pipe in the console's code page, which may not hold them; ASCII reads right in every one
    (Windows PowerShell 5.1 and pwsh 7 alike)."""
    if value.isascii():
        return _pwsh_literal(value)
    parts = ["''"]  # a string first: [char] + [string] would be a char sum, not a concatenation
    for is_ascii, chars in itertools.groupby(value, str.isascii):
        text = "".join(chars)
        if is_ascii:
            parts.append(_pwsh_literal(text))
        else:
            units = text.encode("utf-16-le")
            parts += [f"[char]0x{int.from_bytes(units[i:i + 2], 'little'):04X}"
                      for i in range(0, len(units), 2)]
    return "(" + " + ".join(parts) + ")"


def quote_cmd(value: str, *, name: str) -> str:
    """The inside of ``set "NAME=value"`` in a batch file: ``%`` doubled; no quote or newline."""
    if '"' in value or "\n" in value or "\r" in value:
        raise PrefixError(f"cmd cannot carry {name}={value!r} (a double quote or a line break); "
                          "use --shell pwsh", prefix=value)
    return value.replace("%", "%%")


def msys_path(path: str) -> str:
    """``C:\\a b\\cuda`` -> ``/c/a b/cuda``: how Git Bash / MSYS2 shells spell a PATH entry."""
    m = _DRIVE.match(path)
    rest = path[m.end() if m else 0:].replace("\\", "/")
    return f"/{m[1].lower()}/{rest}" if m else rest


# -- renderers -----------------------------------------------------------------------------------
# per shell: a variable set to a value; directories put in front of a search path; the line end
_SYNTAX: dict[str, tuple[Callable[[str, str], str], Callable[[str, tuple[str, ...]], str], str]] = {
    # ${VAR:+:$VAR} adds no empty entry when VAR is unset (an empty entry means the cwd)
    "sh": (lambda name, value: f"export {name}={quote_sh(value)}",
           lambda var, dirs: f'export {var}={":".join(map(quote_sh, dirs))}"${{{var}:+:${{{var}}}}}"', "\n"),
    # fish keeps *PATH variables as lists; an unset one expands to nothing
    "fish": (lambda name, value: f"set -gx {name} {quote_fish(value)}",
             lambda var, dirs: f"set -gx {var} {' '.join(map(quote_fish, dirs))} ${var}", "\n"),
    "pwsh": (lambda name, value: f"$env:{name} = {quote_pwsh(value)}",
             lambda var, dirs: f"$env:{var} = (@({', '.join(map(quote_pwsh, dirs))}, $env:{var}) | "
                               "Where-Object { $_ }) -join [IO.Path]::PathSeparator", "\n"),
    "cmd": (lambda name, value: f'@set "{name}={quote_cmd(value, name=name)}"',
            lambda var, dirs: f'@set "{var}={";".join(quote_cmd(d, name=var) for d in dirs)};%{var}%"',
            "\r\n"),
}


def render(env: Environment, shell: str) -> str:
    """Commands that set ``env`` when evaluated by ``shell``, one of SHELLS (``env`` refuses any other)."""
    assign, prepend, eol = _SYNTAX["sh" if shell in ("bash", "zsh") else shell]
    lines = [assign(name, value) for name, value in env.variables]
    for var, dirs in env.prepend:
        if env.host_windows and var == "PATH" and shell not in ("pwsh", "cmd"):
            dirs = tuple(msys_path(d) for d in dirs)  # a POSIX shell on Windows splits PATH on ':'
        lines.append(prepend(var, dirs))
    return eol.join(lines) + eol


def load_hint(prefix: str, *, host_windows: bool) -> str:
    """How a user puts a tree's environment into the current shell, in the host's shells."""
    if not host_windows:
        return f'eval "$(cudaredist env --prefix {shlex.quote(prefix)})"'
    # PowerShell evaluates the whole output as one script; cmd runs each line (batch: %%i)
    # for people to read and type: the path as it is (quote_pwsh spells non-ASCII for a pipe)
    return (f"in PowerShell: cudaredist env --prefix {_pwsh_literal(prefix)} | Out-String | "
            "Invoke-Expression; "
            f"in cmd: for /f \"delims=\" %i in ('cudaredist env --shell cmd --prefix \"{prefix}\"') do %i")


# -- GitHub Actions ------------------------------------------------------------------------------
def github_files(env: Environment, current: Mapping[str, str], *,
                 delimiter: str | None = None) -> tuple[str, str]:
    """(text for $GITHUB_ENV, text for $GITHUB_PATH).

    GITHUB_ENV gets ``NAME<<DELIM`` heredocs, which carry any value. GITHUB_PATH gets one
    directory per line; the runner prepends each line in turn, so the first one wanted in
    PATH is written last. Other search paths are written out whole, with ``current`` (the
    present environment) after the new directories.
    """
    whole = applied(env, current)
    values = [*env.variables, *((var, whole[var]) for var, _dirs in env.prepend if var != "PATH")]
    path_lines = [d for var, dirs in env.prepend if var == "PATH" for d in reversed(dirs)]
    broken = next((d for d in path_lines if "\n" in d or "\r" in d), None)
    if broken is not None:
        raise PrefixError(f"GITHUB_PATH cannot carry a directory with a line break: {broken!r}",
                          prefix=broken)
    env_text = ""
    for name, value in values:
        delim = delimiter or f"ghadelimiter_{uuid.uuid4()}"
        if delim in value.splitlines():
            raise PrefixError(f"the value of {name} contains the delimiter {delim!r}", prefix=value)
        env_text += f"{name}<<{delim}\n{value}\n{delim}\n"
    return env_text, "".join(f"{d}\n" for d in path_lines)


def append_github(env: Environment, environ: Mapping[str, str]) -> None:
    """Append ``env`` to the files GitHub Actions reads after a step ($GITHUB_ENV, $GITHUB_PATH)."""
    env_file, path_file = environ.get("GITHUB_ENV"), environ.get("GITHUB_PATH")
    if not env_file or not path_file:
        raise UsageError("--github: $GITHUB_ENV or $GITHUB_PATH is not set; run it in a GitHub Actions step")
    env_text, path_text = github_files(env, environ)
    # both or neither: both are opened before either is written, and a failed write takes both back.
    # Text mode: the runner's own line ending (os.EOL, as @actions/core writes)
    name = env_file  # the file being written (an OSError of a write names none)
    try:
        with open(env_file, "a", encoding="utf-8") as env_fh, \
                open(path_file, "a", encoding="utf-8") as path_fh:
            ends = [(fh, fh.tell()) for fh in (env_fh, path_fh)]
            try:
                for fh, text in ((env_fh, env_text), (path_fh, path_text)):
                    name = fh.name
                    fh.write(text)
                    fh.flush()
            except OSError:
                for fh, end in ends:
                    with contextlib.suppress(OSError):
                        fh.truncate(end)
                raise
    except OSError as exc:
        raise local_error(exc, doing="append to", path=exc.filename or name,
                          kept="neither $GITHUB_ENV nor $GITHUB_PATH was changed") from exc


def applied(env: Environment, environ: Mapping[str, str]) -> dict[str, str]:
    """``environ`` with ``env`` applied: what a child process of ``cudaredist run`` gets."""
    return with_exports(environ, env.variables, env.prepend, ";" if env.host_windows else ":")
