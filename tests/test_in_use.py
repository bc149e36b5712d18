"""A file another process holds open (an editor, a running nvcc, an antivirus scan) during
``--reinstall`` and ``uninstall``: a finished swap is a success, an uninstall is all or nothing,
and the message says a process holds which file and what to do, not "fix the permissions".

On the Windows CPython a second process really holds the file (tests/inuse.py); elsewhere the
sharing violation (WinError 32) is injected into the os calls that meet it.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

from cudaredist import fsops
from cudaredist.cli import app
from cudaredist.errors import LocalDiskError
from cudaredist.localfs import disk_error, local_error
from tests.inuse import held, sharing_violation

WIN = "windows-x86_64"
runner = CliRunner()


@pytest.fixture(autouse=True)
def slept(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """The retries' waits, recorded instead of slept: a bounded budget, not a stopwatch."""
    got: list[float] = []
    monkeypatch.setattr(fsops, "_sleep", got.append)
    return got


def cli(*args: str) -> tuple[int, str, str]:
    r = runner.invoke(app, list(args))
    return r.exit_code, r.stdout, r.stderr


def install(mirror: Path, prefix: Path, *extra: str) -> tuple[int, str, str]:
    return cli("install", "13.0", "--platform", WIN, "--base-url", str(mirror), "--prefix", str(prefix),
               "--json", *extra)


def recorded(prefix: Path) -> list[str]:
    return [f["path"] for f in json.loads((prefix / ".cudaredist" / "record.json").read_text())["files"]]


def test_reinstall_with_a_file_in_use_in_the_old_tree_succeeds_and_cleans_up_later(
        mirror: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, slept: list[float]) -> None:
    prefix = tmp_path / "cuda"
    assert install(mirror, prefix)[0] == 0
    exe = prefix / "bin" / "nvcc.exe"
    with held(exe, monkeypatch):
        code, out, err = install(mirror, prefix, "--reinstall")
        assert code == 0, err
        assert json.loads(out)["noop"] is False
        assert "Traceback" not in err
        assert "warning: the previous tree" in err and "another process has" in err
        assert "nvcc.exe" in err and "removes it" in err
        leftover = [p.name for p in tmp_path.iterdir() if p.name.startswith(".cuda.cudaredist-")]
        assert len(leftover) == 1 and "-gone-" in leftover[0]  # never restored over the new tree
        assert cli("verify", "--prefix", str(prefix))[0] == 0  # the new tree is complete
        # one wait per stuck file (about 5 s), not a retry around a retry (11 x 5 s)
        assert sum(slept) <= sum(fsops.DELAYS)
    # released: the next run removes the leftover and is a no-op
    code, out, err = install(mirror, prefix)
    assert code == 0, err
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".cuda.cudaredist-")]


def test_uninstall_with_a_file_in_use_removes_nothing(mirror: Path, tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    prefix = tmp_path / "cuda"
    assert install(mirror, prefix)[0] == 0
    files = recorded(prefix)
    exe = prefix / "bin" / "nvcc.exe"
    assert sorted(files)[-1] != "bin/nvcc.exe"  # files after it in the record are at stake too
    with held(exe, monkeypatch):
        code, _, err = cli("uninstall", "--prefix", str(prefix))
    assert code == 1 and "Traceback" not in err
    assert "another process has" in err and str(exe) in err and "Nothing was removed" in err
    assert "permission" not in err.lower()
    assert all((prefix / f).exists() for f in files)
    assert cli("verify", "--prefix", str(prefix))[0] == 0
    assert not list((prefix / ".cudaredist").glob("removing-*"))
    code, out, err = cli("uninstall", "--prefix", str(prefix))
    assert code == 0, err
    assert not prefix.exists()


def test_a_held_file_in_a_tree_costs_one_bounded_wait(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                      slept: list[float]) -> None:
    tree = tmp_path / "t"
    (tree / "bin").mkdir(parents=True)
    for name in ("a.dll", "busy.dll", "c.dll"):
        (tree / "bin" / name).write_bytes(b"MZ")
    with held(tree / "bin" / "busy.dll", monkeypatch), pytest.raises(PermissionError) as caught:
        fsops.rmtree(tree)
    assert getattr(caught.value, "winerror", None) == 32
    assert sum(slept) <= sum(fsops.DELAYS)


@pytest.mark.parametrize("winerror", [32, 33], ids=["sharing-violation", "lock-violation"])
def test_a_file_another_process_holds_is_not_a_permissions_problem(winerror: int) -> None:
    exc = sharing_violation(r"C:\cuda\bin\cudart64_13.dll")
    exc.winerror = winerror  # type: ignore[attr-defined]
    for err in (local_error(exc, doing="remove"),
                disk_error(exc, path=exc.filename, where=r"C:\cuda")):
        text = str(err)
        assert isinstance(err, LocalDiskError)
        assert "another process has C:\\cuda\\bin\\cudart64_13.dll open" in text
        assert "fix the permissions" not in text and "permission denied" not in text
        assert "close it" in text.lower()


@pytest.mark.skipif(os.name != "nt", reason="Windows: opens each file for DELETE access")
def test_find_held_names_the_file_a_process_holds(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    tree = tmp_path / "t"
    (tree / "bin" / "x64").mkdir(parents=True)
    for name in ("a.dll", "b.dll"):
        (tree / "bin" / "x64" / name).write_bytes(b"MZ")
    assert fsops.find_held(tree) is None
    with held(tree / "bin" / "x64" / "b.dll", monkeypatch):
        assert fsops.find_held(tree) == str(tree / "bin" / "x64" / "b.dll")


def test_a_prefix_windows_will_not_move_aside_names_the_held_file(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Real Windows refuses to rename a directory while a file in it is open (WinError 5, not 32):
    the message still names the file a process holds, and nothing changed."""
    from cudaredist import install as install_mod
    from cudaredist.errors import PrefixError

    prefix, staging = tmp_path / "cuda", tmp_path / ".cuda.cudaredist-stage-x"
    (prefix / "bin").mkdir(parents=True)
    (prefix / "bin" / "nvcc.exe").write_bytes(b"MZ old")
    staging.mkdir()
    real_rename = fsops.rename

    def refuse(src: object, dst: object) -> None:
        if Path(str(src)) == prefix:
            exc = PermissionError(13, "Access is denied", str(src))
            exc.winerror = 5  # type: ignore[attr-defined]
            raise exc
        real_rename(src, dst)  # type: ignore[arg-type]

    monkeypatch.setattr(fsops, "rename", refuse)
    monkeypatch.setattr(fsops, "find_held", lambda tree: str(Path(tree) / "bin" / "nvcc.exe"))
    with pytest.raises(PrefixError) as caught:
        install_mod.swap_into_place(staging, prefix)
    text = str(caught.value)
    assert f"another process has {prefix / 'bin' / 'nvcc.exe'} open" in text and "left as it was" in text
    assert (prefix / "bin" / "nvcc.exe").read_bytes() == b"MZ old" and staging.is_dir()
