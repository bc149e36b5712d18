"""Windows host rules, checked on any host: sharing violations (WinError 32/5) are retried where
they happen (os.rename / os.replace / os.unlink), read-only files are made writable before they
are deleted, and long paths get the extended-length prefix."""

from __future__ import annotations

import os
import stat
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from cudaredist import fsops
from cudaredist.cache.store import Cache
from cudaredist.install import swap_into_place
from cudaredist.prefixes import recover, uninstall


def sharing_violation(winerror: int = 32) -> PermissionError:
    exc = PermissionError(13, "The process cannot access the file because it is being used by "
                              "another process")
    exc.winerror = winerror  # type: ignore[attr-defined] - only Windows sets it
    return exc


@pytest.fixture(autouse=True)
def no_sleep(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    slept: list[float] = []
    monkeypatch.setattr(fsops, "_sleep", slept.append)
    return slept


def flaky(monkeypatch: pytest.MonkeyPatch, name: str, times: int,
          winerror: int = 32) -> list[tuple[Any, ...]]:
    """``os.<name>`` fails ``times`` times with a sharing violation, then works."""
    real: Callable[..., Any] = getattr(os, name)
    calls: list[tuple[Any, ...]] = []

    def fake(*args: Any, **kwargs: Any) -> Any:
        calls.append(args)
        if len(calls) <= times:
            raise sharing_violation(winerror)
        return real(*args, **kwargs)

    monkeypatch.setattr(os, name, fake)
    return calls


def test_swap_waits_out_a_scanner_holding_the_new_tree(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                       no_sleep: list[float]) -> None:
    prefix, staging = tmp_path / "cuda", tmp_path / ".cuda.cudaredist-stage-x"
    prefix.mkdir()
    (prefix / "old").write_text("old")
    staging.mkdir()
    (staging / "new.dll").write_text("new")
    calls = flaky(monkeypatch, "rename", 3)
    swap_into_place(staging, prefix)
    assert (prefix / "new.dll").read_text() == "new" and not staging.exists()
    # 3 failures, then prefix -> old, staging -> prefix, old -> gone (out of recover()'s reach)
    assert len(calls) == 3 + 3 and len(no_sleep) == 3
    assert [p.name for p in tmp_path.iterdir()] == ["cuda"]  # the old tree is gone too


def test_recover_retries_the_restore(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    prefix = tmp_path / "cuda"
    old = tmp_path / ".cuda.cudaredist-old-1234abcd"
    old.mkdir()
    (old / "f").write_text("x")
    flaky(monkeypatch, "rename", 2, winerror=5)
    assert recover(prefix) == [f"restored {prefix} from an interrupted swap"]
    assert (prefix / "f").read_text() == "x"


def test_cache_commit_retries_replace(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cache = Cache(tmp_path / "c")
    cache.prepare()
    cache.tmp.mkdir(exist_ok=True)
    tmp = cache.tmp / ("ab" * 32 + ".part")  # where a download is written before its commit
    tmp.write_bytes(b"data")
    flaky(monkeypatch, "replace", 4)
    final = cache.commit(tmp, "ab" * 32, url="http://x/a", name="a.tar.xz")
    assert final.read_bytes() == b"data" and final.with_suffix(".json").is_file()


def test_uninstall_retries_deletes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    prefix = tmp_path / "p"
    (prefix / ".cudaredist").mkdir(parents=True)
    (prefix / "bin").mkdir()
    (prefix / "bin" / "a.dll").write_text("a")
    (prefix / ".cudaredist" / "record.json").write_text(
        '{"schema": 1, "tool": "cudaredist", "installed_at": "2026-12-01T00:00:00Z",'
        ' "plan": {"release": "13.0.2", "platform": "windows-x86_64", "profile": "nvcc", "base_url": "x",'
        ' "components": []}, "files": [{"path": "bin/a.dll", "size": 1, "sha256": "x"}]}')
    flaky(monkeypatch, "unlink", 2)
    assert uninstall(prefix) == 1
    assert not prefix.exists()


def test_retries_are_bounded(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, no_sleep: list[float]) -> None:
    (tmp_path / "a").write_text("a")
    calls = flaky(monkeypatch, "rename", 1000)
    with pytest.raises(PermissionError):
        fsops.rename(tmp_path / "a", tmp_path / "b")
    assert len(calls) == len(fsops.DELAYS) + 1
    assert 2 < sum(no_sleep) < 10  # seconds, not minutes


def test_a_real_permission_error_is_not_retried(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    calls: list[object] = []

    def denied(*args: object) -> None:
        calls.append(args)
        raise PermissionError(13, "Permission denied")  # EACCES on a POSIX host: no winerror

    monkeypatch.setattr(os, "rename", denied)
    with pytest.raises(PermissionError):
        fsops.rename(tmp_path / "a", tmp_path / "b")
    assert len(calls) == 1


def test_read_only_files_are_made_writable_before_delete(tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """Windows refuses to delete a read-only file: simulate that refusal on this host."""
    monkeypatch.setattr(fsops, "WINDOWS", True)
    real_unlink = os.unlink

    def windows_unlink(p: Any, *a: Any, **k: Any) -> None:
        if not os.lstat(p).st_mode & stat.S_IWRITE:
            raise PermissionError(13, "Access is denied")
        real_unlink(p, *a, **k)

    monkeypatch.setattr(os, "unlink", windows_unlink)
    tree = tmp_path / "t"
    (tree / "sub").mkdir(parents=True)
    for f in (tree / "ro.dll", tree / "sub" / "ro.h"):
        f.write_text("x")
        f.chmod(stat.S_IREAD)
    fsops.unlink(tree / "ro.dll")
    assert not (tree / "ro.dll").exists()
    fsops.rmtree(tree)
    assert not tree.exists()


LONG = "C:\\cuda\\" + "\\".join(["very-long-directory-name"] * 12) + "\\cudart64_13.dll"


@pytest.mark.parametrize(("path", "want"), [
    pytest.param("C:\\cuda\\bin\\nvcc.exe", "C:\\cuda\\bin\\nvcc.exe", id="short-unchanged"),
    pytest.param(LONG, "\\\\?\\" + LONG, id="long-drive"),
    pytest.param(LONG.replace("\\", "/"), "\\\\?\\" + LONG, id="long-forward-slashes-normalised"),
    pytest.param("\\\\server\\share" + LONG[2:], "\\\\?\\UNC\\server\\share" + LONG[2:], id="long-unc"),
    pytest.param("\\\\?\\" + LONG, "\\\\?\\" + LONG, id="already-extended"),
    pytest.param("cuda\\" + LONG[3:], "cuda\\" + LONG[3:], id="long-relative-unchanged"),
    pytest.param("C:\\a\\..\\" + LONG[3:], "\\\\?\\C:\\" + LONG[3:], id="dotdot-resolved-first"),
])
def test_long_paths_on_windows(path: str, want: str) -> None:
    assert fsops.long_path(path, nt=True) == want


def test_long_paths_untouched_elsewhere() -> None:
    assert fsops.long_path(LONG, nt=False) == LONG
