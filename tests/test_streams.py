"""Paths outside the ANSI code page on a redirected stdout: `env`, `find` and `list` print them right
(or refuse in one paragraph) in every code page, never with a traceback."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from cudaredist import streams
from tests.archives import build_mirror, toolkit
from tests.test_env import _pwsh_single_quoted

WIN = "windows-x86_64"
NAME = "Юля ünï"  # Cyrillic: in no Western ANSI or OEM code page; Latin: cp1252 and cp437 differ


class Pipe(io.TextIOWrapper):
    def __init__(self, encoding: str, tty: bool = False) -> None:
        super().__init__(io.BytesIO(), encoding=encoding)
        self._tty = tty

    def isatty(self) -> bool:
        return self._tty


@pytest.fixture
def windows(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(streams, "WINDOWS", True)
    monkeypatch.delenv("PYTHONIOENCODING", raising=False)
    if sys.flags.utf8_mode:
        pytest.skip("UTF-8 mode (-X utf8) is on: the streams are left as they are, by design")


@pytest.mark.parametrize(("cp", "encoding"), [
    pytest.param(437, "cp437", id="oem-us"),
    pytest.param(866, "cp866", id="oem-cyrillic"),
    pytest.param(65001, "utf-8", id="chcp-65001"),
    pytest.param(0, "utf-8", id="no-console"),
])
def test_a_redirected_stream_takes_the_console_output_code_page(
        windows: None, monkeypatch: pytest.MonkeyPatch, cp: int, encoding: str) -> None:
    """What cmd's `for /f` and PowerShell decode a program's output with (not the ANSI code page
    Python picks for pipes)."""
    monkeypatch.setattr(streams, "console_output_cp", lambda: cp)
    out, err, tty = Pipe("cp1252"), Pipe("cp1252"), Pipe("cp1252", tty=True)
    streams.configure(out, err)
    assert (out.encoding, out.errors) == (encoding, "strict")
    assert (err.encoding, err.errors) == (encoding, "backslashreplace")
    streams.configure(tty, tty)
    assert tty.encoding == "cp1252"  # a console: WriteConsoleW shows any character


def test_the_user_s_choice_wins(windows: None, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(streams, "console_output_cp", lambda: 437)
    monkeypatch.setenv("PYTHONIOENCODING", "utf-16")
    out = Pipe("cp1252")
    streams.configure(out, Pipe("cp1252"))
    assert out.encoding == "cp1252"


# -- the commands, as a user runs them (stdout a pipe) -------------------------------------------------
@pytest.fixture(scope="module")
def managed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A managed 13.0.1 windows-x86_64 toolkit in an install dir named outside the ANSI code page."""
    tmp = tmp_path_factory.mktemp("streams")
    build_mirror(tmp / "mirror", "13.0.1", toolkit(WIN))
    root = tmp / NAME
    r = _run(root, "install", "13.0", "--platform", WIN, "--base-url", str(tmp / "mirror"),
             "--cache-dir", str(tmp / "cache"), "--json", encoding="utf-8",
             timeout=600)  # a Windows tree's first install: import libraries, the SBOM's first rendering
    assert r.returncode == 0, r.stderr
    return root


def _run(root: Path, *args: str, encoding: str | None = None, timeout: float = 120
         ) -> subprocess.CompletedProcess[bytes]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONIOENCODING", "PYTHONUTF8")}
    env["CUDAREDIST_INSTALL_DIR"] = str(root)
    if encoding:
        env["PYTHONIOENCODING"] = encoding
    return subprocess.run([sys.executable, "-m", "cudaredist", *args], env=env, capture_output=True,
                          timeout=timeout, check=False)


def _toolkit(root: Path) -> Path:
    return root / "cuda-13.0.1-windows-x86_64"


@pytest.mark.skipif(os.name != "nt", reason="Windows: pipes default to the ANSI code page there")
@pytest.mark.parametrize("args", [["list"], ["find", "13.0", "--platform", WIN]], ids=["list", "find"])
def test_list_and_find_print_the_path_into_a_pipe(managed: Path, args: list[str]) -> None:
    r = _run(managed, *args)
    assert b"Traceback" not in r.stderr, r.stderr.decode("utf-8", "replace")
    assert r.returncode == 0
    if streams.console_output_cp() == 0:  # no console (CI agents, Wine): UTF-8
        assert str(_toolkit(managed)) in r.stdout.decode("utf-8")


@pytest.mark.parametrize("args", [["list"], ["find", "13.0", "--platform", WIN],
                                  ["env", "13.0", "--platform", WIN, "--shell", "cmd"]],
                         ids=["list", "find", "env-cmd"])
@pytest.mark.parametrize("encoding", ["latin-1", "cp1252"])
def test_text_the_output_cannot_hold_is_refused_in_one_paragraph(managed: Path, args: list[str],
                                                                  encoding: str) -> None:
    """An encoding that lacks the path's characters (chosen here with PYTHONIOENCODING): a clear
    refusal, not a path with stand-ins, not a traceback. latin-1 is encoded in C, cp1252 (Windows'
    console code page, a charmap) by Python code whose frames lie below echo's."""
    r = _run(managed, *args, encoding=encoding)  # click rewraps ascii
    err = r.stderr.decode("utf-8", "replace")
    assert "Traceback" not in err, err
    assert r.returncode == 2
    last = err.splitlines()[-1]  # after any note
    assert last.startswith("error: cannot print") and "--json" in last
    assert r.stdout.decode("ascii", "replace").count("\n") <= 1  # stopped at the line it could not print


@pytest.mark.parametrize("encoding", ["latin-1", "cp437", "utf-8"])
def test_env_for_pwsh_and_json_are_ascii_so_right_in_every_code_page(managed: Path, encoding: str) -> None:
    r = _run(managed, "env", "13.0", "--platform", WIN, "--shell", "pwsh", encoding=encoding)
    assert r.returncode == 0, r.stderr.decode("utf-8", "replace")
    text = r.stdout.decode("ascii")
    assert str(_toolkit(managed)) in _pwsh_single_quoted(text)
    r = _run(managed, "list", "--json", encoding=encoding)
    assert r.returncode == 0
    assert json.loads(r.stdout.decode("ascii"))["toolkits"][0]["path"] == str(_toolkit(managed))
