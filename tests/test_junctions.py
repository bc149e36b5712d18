"""Train links on Windows are directory junctions: made with the Win32 call, checked as reparse
points (``os.path.islink`` says no to a junction), verified to exist, replaced and removed like
links; the install record and uninstall never walk through one.

Wine has no junctions (CreateJunction fails, see wine-python.sh), so on other hosts Windows'
rules are put in place: a junction is a link with an absolute target that ``islink`` and
``is_symlink`` do not see, ``is_junction`` does, and ``rmdir`` removes. The failure path runs
for real under Wine.
"""

from __future__ import annotations

import errno
import json
import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

from cudaredist import fsops, managed
from cudaredist.cli import app
from tests.archives import build_mirror, toolkit

LINUX = "linux-x86_64"
runner = CliRunner()
UNDER_WINE = bool(os.environ.get("UNDER_WINE"))


def cli(*args: str) -> tuple[int, str, str]:
    r = runner.invoke(app, list(args))
    return r.exit_code, r.stdout, r.stderr


@pytest.fixture
def junctions(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Windows' junction semantics on this host; returns the names of the junctions made."""
    made: list[str] = []
    if os.name == "nt":
        if UNDER_WINE:
            pytest.skip("Wine has no junctions: CreateJunction fails (wine-python.sh); the rules are "
                        "checked on Linux with Windows' semantics put in place")
        real_make = managed._make_junction

        def counted(target: Path, link: Path) -> None:
            made.append(link.name)
            real_make(target, link)

        monkeypatch.setattr(managed, "_make_junction", counted)
        return made
    real_islink, real_is_symlink, real_rmdir = os.path.islink, Path.is_symlink, os.rmdir

    def is_junction(p: object) -> bool:
        return real_islink(p) and os.path.isabs(os.readlink(p))  # type: ignore[arg-type]

    def make(target: Path, link: Path) -> None:
        made.append(link.name)
        os.symlink(str(target), link)

    def rmdir(p: object, *a: object, **k: object) -> None:
        if is_junction(p):
            os.unlink(p)  # type: ignore[arg-type]
        else:
            real_rmdir(p, *a, **k)  # type: ignore[arg-type]

    monkeypatch.setattr(managed, "WINDOWS", True)
    monkeypatch.setattr(managed, "_make_junction", make)
    monkeypatch.setattr(fsops, "is_junction", is_junction)
    monkeypatch.setattr(os.path, "islink", lambda p: real_islink(p) and not is_junction(p))
    monkeypatch.setattr(Path, "is_symlink", lambda self: real_is_symlink(self) and not is_junction(self))
    monkeypatch.setattr(os, "rmdir", rmdir)
    return made


@pytest.fixture
def mirror2(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = tmp_path / "mirror"
    build_mirror(root, "13.2.0", toolkit(LINUX, "13.2.0"))
    monkeypatch.setenv("CUDAREDIST_INSTALL_DIR", str(tmp_path / "toolkits"))
    return root


def install(mirror: Path, *extra: str) -> dict[str, object]:
    code, out, err = cli("install", "13.2", "--base-url", str(mirror), "--platform", LINUX, "--json", *extra)
    assert code == 0, err
    got: dict[str, object] = json.loads(out)
    return got


def test_train_links_are_junctions_made_once_moved_and_removed(mirror2: Path, tmp_path: Path,
                                                              junctions: list[str]) -> None:
    root, link = tmp_path / "toolkits", tmp_path / "toolkits" / "cuda-13.2-linux-x86_64"
    got = install(mirror2)
    assert got["links"] == {link.name: "cuda-13.2.0-linux-x86_64"}
    assert fsops.is_junction(link) and not os.path.islink(link)  # the premise: not a link to Python
    assert (link / "bin" / "nvcc").is_file()
    install(mirror2)  # a no-op: the junction already points right, so it is not made again
    assert junctions == [link.name]
    build_mirror(mirror2, "13.2.1", toolkit(LINUX, "13.2.1"))
    assert install(mirror2, "--refresh")["links"] == {link.name: "cuda-13.2.1-linux-x86_64"}
    assert junctions == [link.name] * 2
    assert cli("uninstall", "13.2.1", "--platform", LINUX)[0] == 0
    assert managed._points_at(link) == "cuda-13.2.0-linux-x86_64"
    assert cli("uninstall", "13.2", "--all")[0] == 0
    assert not os.path.lexists(link)  # the stale junction went with its last toolkit
    assert sorted(p.name for p in root.iterdir() if not p.name.startswith(".")) == []


@pytest.mark.parametrize("how", ["refused", "made-nothing"])
def test_a_junction_that_is_not_made_is_reported_not_listed(mirror2: Path, tmp_path: Path, how: str,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """A failed ``mklink /J`` went unnoticed and ``install --json`` listed a link that did not
    exist. Under Wine the real CreateJunction fails; elsewhere both failures are injected."""
    if os.name != "nt":
        def refused(_t: Path, link: Path) -> None:
            raise OSError(errno.EINVAL, "The request is not supported", str(link))

        monkeypatch.setattr(managed, "WINDOWS", True)
        monkeypatch.setattr(managed, "_make_junction", refused if how == "refused" else lambda _t, _l: None)
    elif how == "made-nothing" or not UNDER_WINE:
        pytest.skip("the real CreateJunction decides on Windows (it fails under Wine: the other case)")
    code, out, err = cli("install", "13.2", "--base-url", str(mirror2), "--platform", LINUX, "--json")
    assert code == 0, err
    assert json.loads(out)["links"] == {}
    assert "warning: could not make the train link" in err and "cudaredist find" in err
    assert not os.path.lexists(tmp_path / "toolkits" / "cuda-13.2-linux-x86_64")
    assert cli("find", "13.2", "--platform", LINUX)[0] == 0  # the toolkit itself is there


def test_record_and_uninstall_never_walk_through_a_junction(mirror: Path, tmp_path: Path,
                                                            junctions: list[str]) -> None:
    prefix, outside = tmp_path / "cuda", tmp_path / "outside"
    (outside / "empty").mkdir(parents=True)
    (outside / "keep.txt").write_text("mine")
    assert cli("install", "13.0", "--prefix", str(prefix), "--base-url", str(mirror),
               "--platform", LINUX, "-q")[0] == 0
    managed._make_junction(outside, prefix / "include" / "mine")
    code, out, _ = cli("verify", "--prefix", str(prefix), "--json")
    assert json.loads(out)["extra"] == ["include/mine"]  # one entry, not what is behind it
    assert cli("uninstall", "--prefix", str(prefix))[0] == 0
    assert (outside / "keep.txt").read_text() == "mine" and (outside / "empty").is_dir()
    assert fsops.is_junction(prefix / "include" / "mine")  # the user's: it stays
