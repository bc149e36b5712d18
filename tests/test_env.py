"""`cudaredist env`: what is set for which tree on which host, quoting per shell (evaluated for real
where the shell is installed), and the GitHub Actions file formats."""

from __future__ import annotations

import json
import ntpath
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from cudaredist.envexport import (
    environment,
    github_files,
    msys_path,
    quote_cmd,
    quote_fish,
    quote_pwsh,
    quote_sh,
    render,
)
from cudaredist.errors import PrefixError

# Directory names that break naive quoting, each one legal on Linux
NASTY = [
    pytest.param("plain", id="plain"),
    pytest.param("with space", id="space"),
    pytest.param("it's", id="single-quote"),
    pytest.param('say "hi"', id="double-quote"),
    pytest.param("$HOME and ${PATH} and $(id) and `id`", id="expansions"),
    pytest.param("back\\slash\\", id="backslash"),
    pytest.param("semi;colon & amp | pipe > gt", id="operators"),
    pytest.param("glob * ? [a]", id="glob"),
    pytest.param("percent %PATH% !bang!", id="cmd-specials"),
    pytest.param("\u2019typographic\u2018 quotes", id="typographic-quotes"),
    pytest.param("tab\tand\nnewline", id="newline"),
    pytest.param("ünïcödé ✓", id="unicode"),
    pytest.param("-dash start", id="leading-dash"),
]


# these run `env` on this host for Linux trees, or evaluate its output in POSIX shells
posix_host = pytest.mark.skipif(os.name == "nt", reason="a POSIX host: Linux trees, sh/bash/zsh/fish")


def cli(*args: str):  # type: ignore[no-untyped-def]
    from cudaredist.cli import app

    return CliRunner().invoke(app, list(args))


# -- what is set -----------------------------------------------------------------------------------
def test_linux_tree_on_linux() -> None:
    env = environment("/opt/cuda", platform="linux-x86_64", release="13.4.1", host_windows=False)
    assert env.variables == (("CUDA_PATH", "/opt/cuda"), ("CUDA_HOME", "/opt/cuda"),
                             ("CUDA_PATH_V13_4", "/opt/cuda"))
    # libNVVM is searched in the tree's nvvm/lib64 before any other toolkit's (numba-cuda loads it)
    assert env.prepend == (("PATH", ("/opt/cuda/bin",)),
                           ("LD_LIBRARY_PATH", ("/opt/cuda/lib", "/opt/cuda/nvvm/lib64")))
    assert env.notes == ()


@pytest.mark.parametrize(("platform", "release", "bins"), [
    pytest.param("windows-x86_64", "13.0.2", ("C:\\cuda\\bin", "C:\\cuda\\bin\\x64"),
                 id="13.x-dlls-in-bin-x64"),
    pytest.param("windows-x86_64", "12.9.1", ("C:\\cuda\\bin",), id="12.x-dlls-in-bin"),
    pytest.param("windows-arm64", "13.4.1", ("C:\\cuda\\bin", "C:\\cuda\\bin\\arm64"),
                 id="arm64-dlls-in-bin-arm64"),
])
def test_windows_tree_on_windows(platform: str, release: str, bins: tuple[str, ...]) -> None:
    env = environment("C:\\cuda", platform=platform, release=release, host_windows=True)
    train = "_".join(release.split(".")[:2])
    assert dict(env.variables) == {"CUDA_PATH": "C:\\cuda", "CUDA_HOME": "C:\\cuda",
                                   f"CUDA_PATH_V{train}": "C:\\cuda"}
    assert env.prepend == (("PATH", bins),)  # no LD_LIBRARY_PATH on Windows
    assert env.cmake_args == () and env.notes == ()  # no MSBuild files: -T cuda= would fail


@pytest.mark.parametrize(("prefix", "line"), [
    pytest.param("D:\\a\\_temp\\cuda-13.4", "-T cuda=D:\\a\\_temp\\cuda-13.4", id="plain"),
    pytest.param("C:\\my cuda", '-T "cuda=C:\\my cuda"', id="space"),
])
@pytest.mark.parametrize("platform", [pytest.param("windows-x86_64", id="x64"),
                                      pytest.param("windows-arm64", id="arm64")])
def test_windows_tree_with_msbuild_files_gives_the_cmake_line(prefix: str, line: str, platform: str) -> None:
    env = environment(prefix, platform=platform, release="13.4.1", host_windows=True, msbuild=True)
    assert env.cmake_args == ("-T", f"cuda={prefix}")
    assert env.to_json()["cmake_args"] == ["-T", f"cuda={prefix}"]
    assert env.notes == (f'CMake\'s Visual Studio generator: cmake -G "Visual Studio 17 2022" {line}',)
    # CMake's generator is Windows-only: a cross-compiling tree on Linux gets no CMake arguments
    cross = environment("/mnt/c/cuda", platform=platform, release="13.4.1", host_windows=False, msbuild=True)
    assert cross.cmake_args == ()


def test_windows_tree_on_linux_is_for_cross_compiling() -> None:
    env = environment("/mnt/c/cuda win", platform="windows-x86_64", release="13.4.1", host_windows=False)
    assert env.variables == (("WINDOWS_CUDA_HOME", "/mnt/c/cuda win"),)
    assert env.prepend == ()
    assert "WINDOWS_CUDA_HOME" in env.notes[0]


def test_linux_tree_on_windows_is_refused() -> None:
    with pytest.raises(PrefixError, match="cannot run on this Windows host"):
        environment("C:\\cuda", platform="linux-x86_64", release="13.4.1", host_windows=True)


# -- quoting rules (exact text) ----------------------------------------------------------------------
@pytest.mark.parametrize(("quote", "value", "expected"), [
    pytest.param(quote_sh, "a b", "'a b'", id="sh-space"),
    pytest.param(quote_sh, "it's", "'it'\\''s'", id="sh-quote"),
    pytest.param(quote_sh, "$x`y`\\", "'$x`y`\\'", id="sh-literal"),
    pytest.param(quote_fish, "it's", "'it\\'s'", id="fish-quote"),
    pytest.param(quote_fish, "a\\b", "'a\\\\b'", id="fish-backslash"),
    pytest.param(quote_fish, "$x (y)", "'$x (y)'", id="fish-literal"),
    pytest.param(quote_pwsh, "it's", "'it''s'", id="pwsh-quote"),
    pytest.param(quote_pwsh, "a\u2019b\u2018c", "('' + 'a' + [char]0x2019 + 'b' + [char]0x2018 + 'c')",
                 id="pwsh-typographic-as-ascii"),
    pytest.param(quote_pwsh, "C:\\\u042e\u043b\u044f's",
                 "('' + 'C:\\' + [char]0x042E + [char]0x043B + [char]0x044F + '''s')",
                 id="pwsh-cyrillic-as-ascii"),
    pytest.param(quote_pwsh, "x\U0001F600", "('' + 'x' + [char]0xD83D + [char]0xDE00)", id="pwsh-astral"),
    pytest.param(quote_pwsh, "$env:X `n \"q\"", "'$env:X `n \"q\"'", id="pwsh-literal"),
])
def test_quote(quote, value: str, expected: str) -> None:  # type: ignore[no-untyped-def]
    assert quote(value) == expected


def test_cmd_doubles_percent_and_refuses_what_it_cannot_carry() -> None:
    assert quote_cmd("C:\\a %b% & c", name="X") == "C:\\a %%b%% & c"
    for bad in ('C:\\"x"', "C:\\a\nb"):
        with pytest.raises(PrefixError, match="use --shell pwsh"):
            quote_cmd(bad, name="CUDA_PATH")


def test_msys_path() -> None:
    assert msys_path("C:\\Program Files\\cuda\\bin") == "/c/Program Files/cuda/bin"
    assert msys_path("d:/x") == "/d/x"
    assert msys_path("\\\\server\\share") == "//server/share"


_QUOTES = "'\u2018\u2019\u201a\u201b"
_PWSH_TOKEN = re.compile("'(?:[^" + _QUOTES + "]|[" + _QUOTES + "]{2})*'"
                         r"|\[char\]0x[0-9A-F]{4}|[()+]|\s+|.", re.S)


def _pwsh_single_quoted(text: str) -> list[str]:
    """The string values ``text`` spells: verbatim strings (doubled quote chars -> one), and
    ``('' + [char]0xNNNN + '...')`` groups joined as PowerShell joins them (UTF-16 code units)."""
    out: list[str] = []
    group: list[str] | None = None
    for m in _PWSH_TOKEN.finditer(text):
        tok = m.group()
        if tok[0] in _QUOTES and len(tok) > 1:
            value = re.sub(f"([{_QUOTES}])[{_QUOTES}]", r"\1", tok[1:-1])
            (out if group is None else group).append(value)
        elif tok.startswith("[char]0x"):
            assert group is not None, "a [char] outside a ( ... + ... ) group"
            group.append(chr(int(tok[8:], 16)))
        elif tok == "(" and text[m.end():m.end() + 2] == "''":
            group = []
        elif tok == ")" and group is not None:
            out.append("".join(group).encode("utf-16-le", "surrogatepass").decode("utf-16-le"))
            group = None
    return out


@pytest.mark.parametrize("name", NASTY)
def test_pwsh_and_cmd_render(name: str) -> None:
    prefix = f"C:\\Users\\me\\{name}"
    env = environment(prefix, platform="windows-x86_64", release="13.0.2", host_windows=True)
    text = render(env, "pwsh")
    bins = [ntpath.join(prefix, "bin"), ntpath.join(prefix, "bin", "x64")]
    assert _pwsh_single_quoted(text) == [prefix] * 3 + bins
    assert text.isascii()  # read right whatever code page the console decodes a pipe with
    assert "\n$env:PATH = (@(" in text and text.endswith("[IO.Path]::PathSeparator\n")
    if '"' in name or "\n" in name:
        with pytest.raises(PrefixError):
            render(env, "cmd")
    else:
        lines = render(env, "cmd").splitlines()
        doubled = [p.replace("%", "%%") for p in [prefix, *bins]]
        assert lines[0] == f'@set "CUDA_PATH={doubled[0]}"'
        assert lines[-1] == f'@set "PATH={doubled[1]};{doubled[2]};%PATH%"'


def test_posix_shell_on_windows_gets_msys_path_entries() -> None:
    env = environment("C:\\my cuda", platform="windows-x86_64", release="13.0.2", host_windows=True)
    text = render(env, "bash")
    assert "export CUDA_PATH='C:\\my cuda'" in text
    assert "export PATH='/c/my cuda/bin':'/c/my cuda/bin/x64'\"${PATH:+:${PATH}}\"" in text


# -- the shells themselves ----------------------------------------------------------------------------
PROBE = {
    "sh": 'printf "%s\\0" "$CUDA_PATH" "$CUDA_HOME" "$CUDA_PATH_V13_0" "$PATH" "${LD_LIBRARY_PATH-unset}"',
    "bash": 'printf "%s\\0" "$CUDA_PATH" "$CUDA_HOME" "$CUDA_PATH_V13_0" "$PATH" "${LD_LIBRARY_PATH-unset}"',
    "zsh": 'printf "%s\\0" "$CUDA_PATH" "$CUDA_HOME" "$CUDA_PATH_V13_0" "$PATH" "${LD_LIBRARY_PATH-unset}"',
    "fish": 'printf "%s\\0" "$CUDA_PATH" "$CUDA_HOME" "$CUDA_PATH_V13_0" "$PATH" "$LD_LIBRARY_PATH"',
}


def _evaluate(shell: str, script: str, env: dict[str, str]) -> list[str]:
    """Run ``script`` (the env output) in a real ``shell``, then read the variables back."""
    exe = shutil.which(shell)
    if exe is None:
        if os.environ.get("CI"):  # .ci/run installs bash, zsh and fish: missing there is a failure
            pytest.fail(f"{shell} is not installed although CI is set; .ci/run should have installed it")
        pytest.skip(f"{shell} is not installed")
    if shell == "fish":
        # fish's eval of a multi-line string; `string collect` keeps the newlines
        cmd = [exe, "--no-config", "-c", f"eval (cat {quote_fish(script)} | string collect); {PROBE[shell]}"]
    else:
        cmd = [exe, "-c", f'eval "$(cat {quote_sh(script)})"; {PROBE[shell]}']
    r = subprocess.run(cmd, env=env, capture_output=True, timeout=30)
    assert r.returncode == 0, r.stderr.decode(errors="replace")
    fields = r.stdout.decode("utf-8").split("\0")
    assert fields[-1] == ""
    return fields[:-1]


@posix_host
@pytest.mark.parametrize("shell", ["sh", "bash", "zsh", "fish"])
@pytest.mark.parametrize("name", NASTY)
def test_posix_shells_eval_the_output(shell: str, name: str, tmp_path: Path) -> None:
    prefix = f"/opt/{name}/cuda"
    rendered = render(environment(prefix, platform="linux-x86_64", release="13.0.2", host_windows=False),
                      shell)
    script = tmp_path / "env.sh"
    script.write_text(rendered, encoding="utf-8")
    base = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "LANG": "C.UTF-8"}
    cuda_path, cuda_home, versioned, path, ld = _evaluate(shell, str(script), base)
    assert cuda_path == cuda_home == versioned == prefix
    # prepended, and no empty entry (the cwd) when LD_LIBRARY_PATH was unset before
    assert path == f"{prefix}/bin:/usr/bin:/bin"
    assert ld == f"{prefix}/lib:{prefix}/nvvm/lib64"
    # a second evaluation on top of a set LD_LIBRARY_PATH keeps the old entries after the new
    *_, ld = _evaluate(shell, str(script), base | {"LD_LIBRARY_PATH": "/old/lib"})
    assert ld == f"{prefix}/lib:{prefix}/nvvm/lib64:/old/lib"


@posix_host
def test_pwsh_evaluates_the_output_if_installed(tmp_path: Path) -> None:
    exe = shutil.which("pwsh") or pytest.skip("pwsh is not installed (its quoting is unit-tested above)")
    prefix = "/opt/it's a \u2019quoted\u2019 $HOME dir/cuda"
    script = tmp_path / "env.ps1"
    script.write_text(render(environment(prefix, platform="linux-x86_64", release="13.0.2",
                                         host_windows=False), "pwsh"), encoding="utf-8")
    r = subprocess.run([exe, "-NoProfile", "-Command",
                        f"Get-Content -Raw {quote_pwsh(str(script))} | Invoke-Expression; "
                        "$env:CUDA_PATH; $env:PATH; $env:LD_LIBRARY_PATH"],
                       env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}, capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == [prefix, f"{prefix}/bin:/usr/bin:/bin", f"{prefix}/lib"]


# -- the command ---------------------------------------------------------------------------------------
def _install(mirror: Path, prefix: Path, platform: str = "linux-x86_64") -> None:
    r = cli("install", "13.0", "--prefix", str(prefix), "--platform", platform, "--base-url", str(mirror),
            "-q")
    assert r.exit_code == 0, r.output


@posix_host
def test_eval_of_the_real_command_in_bash(mirror: Path, tmp_path: Path) -> None:
    prefix = tmp_path / "it's \"my\" $CUDA dir"
    _install(mirror, prefix)
    env = {k: v for k, v in os.environ.items() if k != "LD_LIBRARY_PATH"}
    env["PATH"] = "/usr/bin:/bin"
    cmd = f'eval "$({quote_sh(sys.executable)} -m cudaredist env --prefix "$1")" && ' \
          'printf "%s\\0" "$CUDA_PATH" "$CUDA_PATH_V13_0" "$LD_LIBRARY_PATH" "$(command -v nvcc)"'
    r = subprocess.run(["bash", "-c", cmd, "bash", str(prefix)], env=env, capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split("\0")[:4] == [str(prefix), str(prefix), f"{prefix}/lib:{prefix}/nvvm/lib64",
                                         f"{prefix}/bin/nvcc"]


@posix_host
def test_command_shells_and_json(mirror: Path, tmp_path: Path) -> None:
    prefix = tmp_path / "cuda"
    _install(mirror, prefix)
    r = cli("env", "--prefix", str(prefix))
    assert r.exit_code == 0 and r.stdout.startswith(f"export CUDA_PATH={quote_sh(str(prefix))}\n")
    r = cli("env", "--prefix", str(prefix), "--shell", "fish")
    assert r.exit_code == 0 and r.stdout.startswith("set -gx CUDA_PATH ")
    r = cli("env", "--prefix", str(prefix), "--json")
    body = json.loads(r.stdout)
    chosen = body.pop("host_compiler")  # hostcc's decision on this host: the reason, each candidate's verdict
    assert chosen["reason"].startswith("host compiler: ") and chosen["candidates"][0]["verdict"], chosen
    assert body == {
        "prefix": str(prefix), "release": "13.0.1", "platform": "linux-x86_64",
        "set": {"CUDA_PATH": str(prefix), "CUDA_HOME": str(prefix), "CUDA_PATH_V13_0": str(prefix)},
        "prepend": {"PATH": [f"{prefix}/bin"], "LD_LIBRARY_PATH": [f"{prefix}/lib", f"{prefix}/nvvm/lib64"]},
        "notes": [], "cmake_args": [], "compat": {"first": False, "reason": "the tree has no compat package"}}
    r = cli("env", "--prefix", str(prefix), "--shell", "tcsh")
    assert r.exit_code == 2 and "unknown --shell 'tcsh'" in r.stderr
    r = cli("env", "--prefix", str(tmp_path / "nothing"))
    assert r.exit_code == 1 and "holds no cudaredist install" in r.stderr


@posix_host
def test_windows_tree_on_this_host_sets_windows_cuda_home(mirror: Path, tmp_path: Path) -> None:
    prefix = tmp_path / "cuda win"
    _install(mirror, prefix, "windows-x86_64")
    r = cli("env", "--prefix", str(prefix))
    assert r.exit_code == 0
    assert r.stdout == f"export WINDOWS_CUDA_HOME={quote_sh(str(prefix))}\n"
    assert "only WINDOWS_CUDA_HOME is set" in r.stderr


@pytest.mark.skipif(os.name != "nt", reason="a Windows host")
def test_windows_tree_on_windows_host_defaults_to_pwsh(mirror: Path, tmp_path: Path) -> None:
    prefix = tmp_path / "cuda win"
    _install(mirror, prefix, "windows-x86_64")
    r = cli("env", "--prefix", str(prefix))
    assert r.exit_code == 0, r.output
    assert r.stdout.splitlines()[0] == f"$env:CUDA_PATH = {quote_pwsh(str(prefix))}"
    assert quote_pwsh(str(prefix / "bin" / "x64")) in r.stdout
    # the tree has NVIDIA's MSBuild files: the one line for CMake's Visual Studio generator
    assert f'cmake -G "Visual Studio 17 2022" -T "cuda={prefix}"' in r.stderr
    assert json.loads(cli("env", "--prefix", str(prefix), "--json").stdout)["cmake_args"] == [
        "-T", f"cuda={prefix}"]


# -- GitHub Actions --------------------------------------------------------------------------------
def parse_github_env(text: str) -> dict[str, str]:
    """Read $GITHUB_ENV the way the runner does: NAME=value lines and NAME<<DELIM heredocs."""
    out: dict[str, str] = {}
    lines = text.split("\n")
    i = 0
    while i < len(lines):
        line = lines[i]
        i += 1
        if not line:
            continue
        if "<<" in line and ("=" not in line or line.index("<<") < line.index("=")):
            name, delim = line.split("<<", 1)
            value: list[str] = []
            while lines[i] != delim:
                value.append(lines[i])
                i += 1
            i += 1
            out[name] = "\n".join(value)
        else:
            name, value_ = line.split("=", 1)
            out[name] = value_
    return out


@pytest.mark.parametrize("name", NASTY)
def test_github_files_carry_any_value(name: str) -> None:
    prefix = f"/home/runner/{name}/cuda"
    env = environment(prefix, platform="linux-x86_64", release="13.0.2", host_windows=False)
    if "\n" in name:
        with pytest.raises(PrefixError, match="GITHUB_PATH cannot carry"):
            github_files(env, {})
        return
    env_text, path_text = github_files(env, {"LD_LIBRARY_PATH": "/old"})
    assert parse_github_env(env_text) == {"CUDA_PATH": prefix, "CUDA_HOME": prefix,
                                          "CUDA_PATH_V13_0": prefix,
                                          "LD_LIBRARY_PATH": f"{prefix}/lib:{prefix}/nvvm/lib64:/old"}
    assert path_text == f"{prefix}/bin\n"


def test_github_path_order_and_windows_separator() -> None:
    env = environment("D:\\a\\_temp\\cuda", platform="windows-x86_64", release="13.0.2", host_windows=True)
    env_text, path_text = github_files(env, {}, delimiter="EOF_X")
    # the runner prepends each line in turn: the directory searched first is written last
    assert path_text == "D:\\a\\_temp\\cuda\\bin\\x64\nD:\\a\\_temp\\cuda\\bin\n"
    assert env_text.startswith("CUDA_PATH<<EOF_X\nD:\\a\\_temp\\cuda\nEOF_X\n")


@posix_host
def test_github_command_appends(mirror: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    prefix = tmp_path / "cuda 13"
    _install(mirror, prefix)
    env_file, path_file = tmp_path / "github_env", tmp_path / "github_path"
    env_file.write_text("EARLIER=1\n")
    path_file.write_text("/earlier\n")
    r = cli("env", "--prefix", str(prefix), "--github")
    assert r.exit_code == 2 and "GITHUB_ENV" in r.stderr
    monkeypatch.setenv("GITHUB_ENV", str(env_file))
    monkeypatch.setenv("GITHUB_PATH", str(path_file))
    monkeypatch.delenv("LD_LIBRARY_PATH", raising=False)
    r = cli("env", "--prefix", str(prefix), "--github")
    assert r.exit_code == 0, r.output
    assert r.stdout == ""
    assert f"set CUDA_PATH={prefix}" in r.stderr
    assert parse_github_env(env_file.read_text()) == {
        "EARLIER": "1", "CUDA_PATH": str(prefix), "CUDA_HOME": str(prefix),
        "CUDA_PATH_V13_0": str(prefix), "LD_LIBRARY_PATH": f"{prefix}/lib:{prefix}/nvvm/lib64"}
    assert path_file.read_text() == f"/earlier\n{prefix}/bin\n"


@posix_host
@pytest.mark.parametrize("broken", ["a missing folder", "a full disk"])
def test_github_writes_both_files_or_neither(mirror: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                             broken: str) -> None:
    if broken == "a full disk" and not os.path.exists("/dev/full"):
        pytest.skip("no /dev/full (a disk that is always full)")
    prefix = tmp_path / "cuda"
    _install(mirror, prefix)
    env_file = tmp_path / "github_env"
    env_file.write_text("EARLIER=1\n")
    monkeypatch.setenv("GITHUB_ENV", str(env_file))
    monkeypatch.setenv("GITHUB_PATH", str(tmp_path / "no" / "github_path") if broken == "a missing folder"
                       else "/dev/full")
    r = cli("env", "--prefix", str(prefix), "--github")
    assert r.exit_code == 1
    assert r.stderr.startswith("error: ") and "neither $GITHUB_ENV nor $GITHUB_PATH was changed" in r.stderr
    assert env_file.read_text() == "EARLIER=1\n"
