"""Paths past Windows' MAX_PATH (260): the unpacked cache adds ``unpacked/<64 hex>/tree/`` to every
member, so the tree's writes, ``links.place`` and the cache's own calls go through
``fsops.long_path`` (``\\\\?\\C:\\...``); a disk error on the tree's own file is the disk's; and the
unpacked entry's rename waits out a scanner.

Wine does not enforce MAX_PATH (a plain 300-character path works there), so MAX_PATH is put in
place on any host: an OS call given a plain path of 260 characters or more fails as Windows fails
it (ERROR_PATH_NOT_FOUND), one given ``long_path``'s result works.
"""

from __future__ import annotations

import errno
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from cudaredist import fsops
from cudaredist.cli import app
from cudaredist.tree import staging
from tests.archives import Link, MirrorArchive, archive_name, build_mirror, toolkit

LINUX = "linux-x86_64"
DEEP = "include/cccl/" + "/".join(["d" * 40] * 6) + "/deep.h"
runner = CliRunner()


class Long(str):
    """A path ``fsops.long_path`` made."""


def _too_long(p: Any) -> None:
    if isinstance(p, (int, Long)):
        return
    s = os.fspath(p)
    if len(s) >= 260:
        exc = FileNotFoundError(errno.ENOENT, "The system cannot find the path specified", s)
        exc.winerror = 3  # type: ignore[attr-defined]
        raise exc


@pytest.fixture
def max_path(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(fsops, "long_path", lambda p, *, nt=None: Long(os.fspath(p)))

    def guarded(fn: Callable[..., Any], *positions: int) -> Callable[..., Any]:
        def call(*args: Any, **kwargs: Any) -> Any:
            for i in positions:
                if i < len(args):
                    _too_long(args[i])
            return fn(*args, **kwargs)

        return call

    for name, positions in (("open", (0,)), ("mkdir", (0,)), ("link", (0, 1)), ("symlink", (1,)),
                            ("stat", (0,)), ("rename", (0, 1)), ("replace", (0, 1)), ("readlink", (0,))):
        monkeypatch.setattr(os, name, guarded(getattr(os, name), *positions))


@pytest.fixture
def deep_mirror(tmp_path: Path) -> Path:
    if os.environ.get("UNDER_WINE"):
        pytest.skip("Wine's GetFinalPathNameByHandleW fails over 260 characters (wine-python.sh), so "
                    "realpath does; Windows' MAX_PATH rule is put in place on Linux instead")
    def deep(a: MirrorArchive) -> MirrorArchive:
        top = archive_name(a.component, LINUX, a.version).removesuffix(".tar.xz")
        # a hard link names the archive's own path of its target
        members = {**a.members, DEEP: b"// deep", DEEP + ".copy": Link(f"{top}/{DEEP}", hard=True)}
        return MirrorArchive(a.component, a.platform, a.version, members)

    archives = [deep(a) if a.component == "cuda_cccl" else a for a in toolkit(LINUX)]
    build_mirror(tmp_path / "mirror", "13.0.1", archives)
    return tmp_path / "mirror"


def install(mirror: Path, prefix: Path, cache: Path, *extra: str) -> tuple[int, str, str]:
    r = runner.invoke(app, ["install", "13.0", "--prefix", str(prefix), "--base-url", str(mirror),
                            "--platform", LINUX, "--cache-dir", str(cache), "-q", *extra])
    return r.exit_code, r.stdout, r.stderr


@pytest.mark.parametrize("mode", ["clone", "hardlink", "copy"])
def test_an_install_past_max_path_cold_and_warm(deep_mirror: Path, tmp_path: Path, max_path: None,
                                                mode: str) -> None:
    cache = tmp_path / "cache"
    for run, prefix in enumerate((tmp_path / "cold", tmp_path / "warm")):
        code, _, err = install(deep_mirror, prefix, cache, "--link-mode", mode)
        assert code == 0, (run, err)
        assert len(str(cache / "unpacked" / ("k" * 64) / "tree" / DEEP)) > 260
        assert (prefix / DEEP).read_bytes() == b"// deep" == (prefix / (DEEP + ".copy")).read_bytes()
    files = json.loads((tmp_path / "warm" / ".cudaredist" / "record.json").read_text())["files"]
    assert {DEEP, DEEP + ".copy"} <= {f["path"] for f in files}


def test_a_disk_error_on_a_hard_link_s_target_is_the_disk_s(deep_mirror: Path, tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """Reading the tree's own copy for a hard link failed as "corrupt archive", which evicts a
    verified download. It is this machine's disk: a local disk error, and the archive stays."""
    real_open = open

    def failing(file: Any, *args: Any, **kwargs: Any) -> Any:
        if os.fspath(file).endswith("deep.h"):
            raise OSError(errno.EIO, "Input/output error", os.fspath(file))
        return real_open(file, *args, **kwargs)

    monkeypatch.setattr(staging, "open", failing, raising=False)
    cache = tmp_path / "cache"
    code, _, err = install(deep_mirror, tmp_path / "p", cache)
    assert code == 1 and "corrupt" not in err, err
    assert "the local disk refused it, not the archive" in err
    # cuda_cccl's archive, whose member failed, is still in the cache: it was not evicted as corrupt
    # (the others may be: the failed install cancels downloads still running)
    manifest = json.loads((deep_mirror / "redistrib_13.0.1.json").read_text())
    sha = manifest["cuda_cccl"][LINUX]["sha256"]
    assert (cache / "archives" / sha).is_file(), sorted(p.name for p in (cache / "archives").iterdir())
    assert not (tmp_path / "p").exists()


def test_the_unpacked_entry_rename_waits_out_a_scanner(mirror: Path, tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(fsops, "_sleep", lambda _s: None)
    real = os.rename
    failures: list[str] = []

    def scanned(src: Any, dst: Any, *a: Any, **k: Any) -> None:
        if "/unpacked/.tmp-" in os.fspath(src).replace(os.sep, "/") and len(failures) < 3:
            failures.append(os.fspath(src))
            exc = PermissionError(errno.EACCES, "being used by another process", os.fspath(src))
            exc.winerror = 32  # type: ignore[attr-defined]
            raise exc
        real(src, dst, *a, **k)

    monkeypatch.setattr(os, "rename", scanned)
    code, _, err = install(mirror, tmp_path / "p", tmp_path / "cache")
    assert code == 0, err
    assert len(failures) == 3
    record = json.loads((tmp_path / "p" / ".cudaredist" / "record.json").read_text())
    assert record["plan"]["release"] == "13.0.1"
