"""The environment a toolkit tree needs, and how each shell (or GitHub Actions) is told it (pure).

What is set, for a tree of release X.Y installed in PREFIX:

    native tree (Linux tree on a POSIX host, Windows tree on Windows):
        CUDA_PATH, CUDA_HOME, CUDA_PATH_VX_Y = PREFIX
        PATH            += PREFIX/bin  (Windows 13.x: also PREFIX\\bin\\x64, where the DLLs moved;
                        windows-arm64: PREFIX\\bin\\arm64)
        LD_LIBRARY_PATH += PREFIX/lib, PREFIX/nvvm/lib64  (Linux trees: libNVVM lives apart, and
                        cuda-pathfinder, numba-cuda's locator, asks the loader before CUDA_HOME)
    Windows tree on a non-Windows host (WSL / Linux cross-compiling for Windows):
        WINDOWS_CUDA_HOME = PREFIX     (what torch's cross-compile paths read); PATH is left alone,
                                       and CUDA_HOME stays free for a native toolkit

A Windows tree with NVIDIA's MSBuild files also gives the CMake arguments for the Visual Studio
generator, ``-T cuda=PREFIX`` (``cmake_args``: printed as a note, in --json, an output of the action).

Every renderer quotes so that any path (spaces, quotes, ``$``, backslashes) comes out as
exactly one word; what no quoting of a shell can carry is refused with an error.
"""

from __future__ import annotations

import ntpath
import posixpath
import re
import shlex
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from cudaredist.errors import PrefixError, UsageError
from cudaredist.profiles import is_windows, platform_rule

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


def environment(prefix: str, *, platform: str, release: str, host_windows: bool,
                msbuild: bool = False) -> Environment:
    """The environment for a tree of ``platform``/``release`` at ``prefix`` (a path of this host);
    ``msbuild``: the tree has NVIDIA's MSBuild files (the visual_studio_integration component)."""
    tree_windows = is_windows(platform)
    join = ntpath.join if host_windows else posixpath.join
    if tree_windows and not host_windows:
        return Environment(
            variables=(("WINDOWS_CUDA_HOME", prefix),), prepend=(), host_windows=False,
            notes=(f"a {platform} tree on a non-Windows host: only WINDOWS_CUDA_HOME is set "
                   "(for cross-compiling); PATH and CUDA_HOME are left alone",))
    if not tree_windows and host_windows:
        raise PrefixError(
            f"{prefix} holds a {platform} tree, which cannot run on this Windows host; use it from "
            "Linux or WSL (`cudaredist env` there), or install --platform windows-x86_64 here",
            prefix=prefix)
    major_minor = release.split(".")[:2]
    variables = (("CUDA_PATH", prefix), ("CUDA_HOME", prefix),
                 (f"CUDA_PATH_V{'_'.join(major_minor)}", prefix))
    bins = [join(prefix, "bin")]
    arch = platform_rule(platform).arch
    if tree_windows and arch and _major(release) >= 13:
        bins.append(join(prefix, "bin", arch))  # CUDA 13 moved the runtime DLLs here
    prepend: list[tuple[str, tuple[str, ...]]] = [("PATH", tuple(bins))]
    if not tree_windows:
        # libnvvm.so sits in nvvm/lib64, off lib/: without it here, a loader that finds another
        # toolkit's libNVVM first (ld.so.conf, an older LD_LIBRARY_PATH) mixes two toolkits. On
        # Windows PATH stays as NVIDIA's installer sets it (bin): cuda-pathfinder finds
        # nvvm\bin\x64 through CUDA_PATH, after PATH, where no NVIDIA installer puts an nvvm\bin.
        prepend.append(("LD_LIBRARY_PATH", (join(prefix, "lib"), join(prefix, "nvvm", "lib64"))))
    cmake = ("-T", f"cuda={prefix}") if tree_windows and msbuild else ()
    notes = (f"CMake's Visual Studio generator: cmake -G \"Visual Studio 17 2022\" {cmake_line(cmake)}",
             ) if cmake else ()
    return Environment(variables, tuple(prepend), host_windows, notes, cmake)


def cmake_line(args: tuple[str, ...]) -> str:
    """``args`` as one command-line fragment: an argument with a space in double quotes, which
    PowerShell, cmd and bash read alike (the action's cmake-args output is written the same way)."""
    return " ".join(f'"{a}"' if " " in a else a for a in args)


def _major(release: str) -> int:
    head = release.split(".", 1)[0]
    return int(head) if head.isdigit() else 0


# -- quoting -----------------------------------------------------------------------------------
def quote_sh(value: str) -> str:
    """POSIX single quotes: nothing inside is special; a quote is closed, escaped and reopened."""
    return "'" + value.replace("'", "'\\''") + "'"


def quote_fish(value: str) -> str:
    """fish single quotes: only ``\\'`` and ``\\\\`` are escapes inside them."""
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def quote_pwsh(value: str) -> str:
    """PowerShell verbatim string: every single-quote character (also ‘ ’ ‚ ‛) is doubled.

    A value with characters outside ASCII is spelled in ASCII, ``('C:\\' + [char]0x43F + ...)``
    (UTF-16 code units, as PowerShell's strings are): ``cudaredist env | Invoke-Expression`` reads
    the pipe in the console's code page, which may not hold them; ASCII reads right in every one
    (Windows PowerShell 5.1 and pwsh 7 alike)."""
    if value.isascii():
        return "'" + "".join(c + c if c in _PWSH_QUOTES else c for c in value) + "'"
    parts = ["''"]  # a string first: [char] + [string] would be a char sum, not a concatenation
    run = ""
    for c in value:
        if c.isascii():
            run += c + c if c in _PWSH_QUOTES else c
            continue
        if run:
            parts.append(f"'{run}'")
            run = ""
        units = c.encode("utf-16-le")
        parts += [f"[char]0x{int.from_bytes(units[i:i + 2], 'little'):04X}" for i in range(0, len(units), 2)]
    if run:
        parts.append(f"'{run}'")
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
    rest = path[m.end():] if m else path
    rest = rest.replace("\\", "/")
    return f"/{m.group(1).lower()}/{rest}" if m else rest


# -- renderers -----------------------------------------------------------------------------------
def _render_sh(env: Environment) -> str:
    lines = [f"export {name}={quote_sh(value)}" for name, value in env.variables]
    for var, dirs in env.prepend:
        if env.host_windows and var == "PATH":
            dirs = tuple(msys_path(d) for d in dirs)  # a POSIX shell on Windows splits PATH on ':'
        head = ":".join(quote_sh(d) for d in dirs)
        # ${VAR:+:$VAR} adds no empty entry when VAR is unset (an empty entry means the cwd)
        lines.append(f'export {var}={head}"${{{var}:+:${{{var}}}}}"')
    return "\n".join(lines) + "\n"


def _render_fish(env: Environment) -> str:
    lines = [f"set -gx {name} {quote_fish(value)}" for name, value in env.variables]
    for var, dirs in env.prepend:
        if env.host_windows and var == "PATH":
            dirs = tuple(msys_path(d) for d in dirs)
        # fish keeps *PATH variables as lists; an unset one expands to nothing
        lines.append(f"set -gx {var} {' '.join(quote_fish(d) for d in dirs)} ${var}")
    return "\n".join(lines) + "\n"


def _render_pwsh(env: Environment) -> str:
    lines = [f"$env:{name} = {quote_pwsh(value)}" for name, value in env.variables]
    for var, dirs in env.prepend:
        items = ", ".join(quote_pwsh(d) for d in dirs)
        lines.append(f"$env:{var} = (@({items}, $env:{var}) | Where-Object {{ $_ }}) "
                     "-join [IO.Path]::PathSeparator")
    return "\n".join(lines) + "\n"


def _render_cmd(env: Environment) -> str:
    lines = [f'@set "{name}={quote_cmd(value, name=name)}"' for name, value in env.variables]
    for var, dirs in env.prepend:
        head = ";".join(quote_cmd(d, name=var) for d in dirs)
        lines.append(f'@set "{var}={head};%{var}%"')
    return "\r\n".join(lines) + "\r\n"


_RENDERERS: dict[str, Callable[[Environment], str]] = {
    "sh": _render_sh, "bash": _render_sh, "zsh": _render_sh,
    "fish": _render_fish, "pwsh": _render_pwsh, "cmd": _render_cmd,
}


def render(env: Environment, shell: str) -> str:
    """Commands that set ``env`` when evaluated by ``shell``."""
    try:
        return _RENDERERS[shell](env)
    except KeyError:
        raise ValueError(f"unknown shell {shell!r}; choose one of {', '.join(SHELLS)}") from None


def default_shell(host_windows: bool) -> str:
    return "pwsh" if host_windows else "sh"


def load_hint(prefix: str, *, host_windows: bool) -> str:
    """How a user puts a tree's environment into the current shell, in the host's shells."""
    if not host_windows:
        return f'eval "$(cudaredist env --prefix {shlex.quote(prefix)})"'
    # PowerShell evaluates the whole output as one script; cmd runs each line (batch: %%i)
    # for people to read and type: the path as it is (quote_pwsh spells non-ASCII for a pipe)
    literal = "'" + "".join(c + c if c in _PWSH_QUOTES else c for c in prefix) + "'"
    return (f"in PowerShell: cudaredist env --prefix {literal} | Out-String | Invoke-Expression; "
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
    sep = ";" if env.host_windows else ":"
    values = list(env.variables)
    path_lines: list[str] = []
    for var, dirs in env.prepend:
        if var == "PATH":
            for d in dirs:
                if "\n" in d or "\r" in d:
                    raise PrefixError(f"GITHUB_PATH cannot carry a directory with a line break: {d!r}",
                                      prefix=d)
            path_lines.extend(reversed(dirs))
        else:
            old = current.get(var, "")
            values.append((var, sep.join([*dirs, *([old] if old else [])])))
    env_text = ""
    for name, value in values:
        delim = delimiter or f"ghadelimiter_{uuid.uuid4()}"
        if delim in value.splitlines():
            raise PrefixError(f"the value of {name} contains the delimiter {delim!r}", prefix=value)
        env_text += f"{name}<<{delim}\n{value}\n{delim}\n"
    path_text = "".join(f"{d}\n" for d in path_lines)
    return env_text, path_text


def append_github(env: Environment, environ: Mapping[str, str]) -> None:
    """Append ``env`` to the files GitHub Actions reads after a step ($GITHUB_ENV, $GITHUB_PATH)."""
    env_file, path_file = environ.get("GITHUB_ENV"), environ.get("GITHUB_PATH")
    if not env_file or not path_file:
        raise UsageError("--github: $GITHUB_ENV or $GITHUB_PATH is not set; run it in a GitHub Actions step")
    env_text, path_text = github_files(env, environ)
    # text mode: the runner's own line ending (os.EOL, as @actions/core writes)
    for name, text in ((env_file, env_text), (path_file, path_text)):
        with open(name, "a", encoding="utf-8") as fh:
            fh.write(text)


def applied(env: Environment, environ: Mapping[str, str]) -> dict[str, str]:
    """``environ`` with ``env`` applied: what a child process of ``cudaredist run`` gets."""
    sep = ";" if env.host_windows else ":"
    out = dict(environ)
    out.update(dict(env.variables))
    for var, dirs in env.prepend:
        old = out.get(var, "")
        out[var] = sep.join([*dirs, *([old] if old else [])])
    return out
