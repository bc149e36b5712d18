"""Managed installs: several trains in one command, train links, and list/find/env/run/uninstall by train."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from cudaredist.cli import app
from cudaredist.managed import release_of, system_toolkits
from tests.archives import Exe, MirrorArchive, build_mirror, toolkit
from tests.hosts import posix_only, wine_limit

LINUX = "linux-x86_64"
# a train link is a symlink, or a junction on Windows without the symlink right
train_links = wine_limit("no symlinks and no junctions (CreateJunction fails): no train link can be made")
runner = CliRunner()


def cli(*args: str) -> tuple[int, str, str]:
    r = runner.invoke(app, list(args))
    return r.exit_code, r.stdout, r.stderr


@pytest.fixture
def two_trains(tmp_path: Path) -> Path:
    """A mirror with 13.0.1 and 13.2.0 (linux-x86_64)."""
    root = tmp_path / "mirror"
    build_mirror(root, "13.0.1", toolkit(LINUX))
    build_mirror(root, "13.2.0", toolkit(LINUX, "13.2.0"))
    return root


@pytest.fixture
def tk_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    d = tmp_path / "toolkits"
    monkeypatch.setenv("CUDAREDIST_INSTALL_DIR", str(d))
    return d


def install(mirror: Path, *args: str) -> dict[str, object]:
    code, out, err = cli("install", *args, "--base-url", str(mirror), "--platform", LINUX, "--json")
    assert code == 0, err
    got: dict[str, object] = json.loads(out)
    return got


@train_links
def test_two_trains_in_one_command_land_by_release_with_train_links(two_trains: Path, tk_dir: Path) -> None:
    got = install(two_trains, "13.0", "13.2")
    names = sorted(p.name for p in tk_dir.iterdir() if not p.name.startswith("."))
    assert names == ["cuda-13.0-linux-x86_64", "cuda-13.0.1-linux-x86_64",
                     "cuda-13.2-linux-x86_64", "cuda-13.2.0-linux-x86_64"]
    assert os.readlink(tk_dir / "cuda-13.0-linux-x86_64") == "cuda-13.0.1-linux-x86_64"
    assert os.readlink(tk_dir / "cuda-13.2-linux-x86_64") == "cuda-13.2.0-linux-x86_64"
    assert [t["release"] for t in got["toolkits"]] == ["13.0.1", "13.2.0"]  # type: ignore[index]
    for name in ("cuda-13.0.1-linux-x86_64", "cuda-13.2.0-linux-x86_64"):
        assert cli("verify", "--prefix", str(tk_dir / name))[0] == 0
    # again: answered from the records, no network (the mirror is gone)
    code, out, err = cli("install", "13.0", "13.2", "--base-url", str(two_trains / "gone"),
                         "--platform", LINUX, "--json")
    assert code == 0, err
    assert all(t["noop"] for t in json.loads(out)["toolkits"])


@train_links
def test_a_patch_upgrade_moves_the_train_link(two_trains: Path, tk_dir: Path) -> None:
    install(two_trains, "13.2")
    link = tk_dir / "cuda-13.2-linux-x86_64"
    assert os.readlink(link) == "cuda-13.2.0-linux-x86_64"
    build_mirror(two_trains, "13.2.1", toolkit(LINUX, "13.2.1"))
    install(two_trains, "13.2", "--refresh")
    assert os.readlink(link) == "cuda-13.2.1-linux-x86_64"
    assert (tk_dir / "cuda-13.2.0-linux-x86_64").is_dir()  # the older patch stays until uninstalled
    code, out, _ = cli("find", "13.2", "--platform", LINUX)
    assert code == 0 and out.strip() == str(tk_dir / "cuda-13.2.1-linux-x86_64")
    # removing the newest moves the link back to the one left
    code, _, err = cli("uninstall", "13.2.1", "--platform", LINUX)
    assert code == 0, err
    assert os.readlink(link) == "cuda-13.2.0-linux-x86_64"


def test_list_find_env_run_and_uninstall_by_train(two_trains: Path, tk_dir: Path) -> None:
    install(two_trains, "13.0", "13.2")
    code, out, _ = cli("list", "--json")
    listed = json.loads(out)
    assert code == 0 and listed["install_dir"] == str(tk_dir)
    assert [(t["release"], t["platform"]) for t in listed["toolkits"]] == [("13.2.0", LINUX),
                                                                          ("13.0.1", LINUX)]
    assert all(t["size"] > 0 and Path(t["path"]).is_dir() for t in listed["toolkits"])
    code, out, _ = cli("list")
    assert "13.2.0" in out and "13.0.1" in out

    code, out, _ = cli("find", "13", "--platform", LINUX)  # the newest 13.x
    assert code == 0 and out.strip().endswith("cuda-13.2.0-linux-x86_64")
    code, out, err = cli("find", "12.9", "--platform", LINUX)
    assert code == 1 and out == "" and "cudaredist install 12.9" in err

    code, _, err = cli("uninstall", "13")
    assert code == 2 and "--all" in err  # two toolkits match: ask
    code, _, err = cli("uninstall", "13", "--all")
    assert code == 0, err
    assert cli("list", "--json")[1] and json.loads(cli("list", "--json")[1])["toolkits"] == []
    assert not any(p.is_symlink() for p in tk_dir.iterdir())  # the train links went with them


@posix_only("a Linux tree's environment and programs (its nvcc is a shell script, run through sh)")
def test_env_and_run_by_train(two_trains: Path, tk_dir: Path) -> None:
    install(two_trains, "13.0", "13.2")
    code, out, _ = cli("env", "13.0", "--json")
    assert code == 0 and json.loads(out)["set"]["CUDA_PATH"] == str(tk_dir / "cuda-13.0.1-linux-x86_64")

    # run: the toolkit's bin/ comes first on PATH, and the exit code is the command's
    env = {**os.environ, "CUDAREDIST_INSTALL_DIR": str(tk_dir)}
    r = subprocess.run([sys.executable, "-m", "cudaredist", "run", "13.2", "--", "nvcc"], env=env,
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and r.stdout.strip() == "nvcc", r.stderr  # the tree's fake nvcc
    r = subprocess.run([sys.executable, "-m", "cudaredist", "run", "13.2", "--", "sh", "-c",
                        'test "$CUDA_PATH" = "$1" && exit 7', "sh", str(tk_dir / "cuda-13.2.0-linux-x86_64")],
                       env=env, capture_output=True, text=True, timeout=60)
    assert r.returncode == 7, r.stderr
    # a command a signal killed: the shell's 128 + N (139 for a segfault), not 256 - N
    code, _, _ = cli("run", "13.2", "--", "sh", "-c", "kill -SEGV $$")
    assert code == 128 + signal.SIGSEGV


def test_prefix_takes_one_train(two_trains: Path, tmp_path: Path) -> None:
    code, _, err = cli("install", "13.0", "13.2", "--prefix", str(tmp_path / "p"),
                       "--base-url", str(two_trains))
    assert code == 2 and "--prefix takes one TRAIN" in err
    assert not (tmp_path / "p").exists()


def test_a_missing_train_installs_nothing(two_trains: Path, tk_dir: Path) -> None:
    code, _, err = cli("install", "13.0", "13.9", "--base-url", str(two_trains), "--platform", LINUX)
    assert code != 0 and "13.9" in err
    assert not tk_dir.exists() or not any(tk_dir.iterdir())  # resolved first: 13.0 was not installed either


def test_system_toolkits_are_found_with_how(tmp_path: Path) -> None:
    tree = tmp_path / "cuda-12.4"
    (tree / "bin").mkdir(parents=True)
    (tree / "bin" / "nvcc").write_text("")
    (tree / "include").mkdir()
    (tree / "include" / "cuda.h").write_text("#define CUDA_VERSION 12040\n")
    wheels = tmp_path / "site" / "nvidia" / "cu13"
    (wheels / "bin").mkdir(parents=True)
    (wheels / "bin" / "nvcc").write_text("")
    (wheels / "version.json").write_text('{"cuda": {"version": "13.0.2"}}')
    found = system_toolkits({"CUDA_PATH_V12_4": str(tree), "CUDA_HOME": str(tree)},
                            site_dirs=[str(tmp_path / "site")])
    mine = [f for f in found if str(f.path).startswith(str(tmp_path))]
    assert [(f.path, f.release, f.how) for f in mine] == [
        (tree, "12.4", "CUDA_HOME"), (wheels, "13.0.2", f"pip wheels ({sys.executable})")]
    assert release_of(tmp_path) == ""


@train_links
def test_a_train_that_fails_to_install_leaves_the_others_installed_and_linked(
        two_trains: Path, tk_dir: Path) -> None:
    tk_dir.mkdir()
    (tk_dir / "cuda-13.2.0-linux-x86_64").write_text("a file in the way")
    code, out, err = cli("install", "13.0", "13.2", "--base-url", str(two_trains), "--platform", LINUX,
                         "--json")
    assert code == 1, err
    assert os.readlink(tk_dir / "cuda-13.0-linux-x86_64") == "cuda-13.0.1-linux-x86_64"
    assert cli("verify", "13.0")[0] == 0
    assert not (tk_dir / "cuda-13.2-linux-x86_64").exists()
    lines = err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: CUDA 13.2: ") and "is a file" in lines[0], err
    got = json.loads(out)
    assert [t["release"] for t in got["toolkits"]] == ["13.0.1"]
    assert [(f["train"], f["exit_code"]) for f in got["failed"]] == [("13.2", 1)]
    assert got["links"] == {"cuda-13.0-linux-x86_64": "cuda-13.0.1-linux-x86_64"}


@train_links
def test_a_train_whose_download_fails_fails_alone(two_trains: Path, tk_dir: Path, tmp_path: Path) -> None:
    """``install 13.0 13.2`` where one of 13.2's archives is gone from the mirror: 13.0, whose
    archives arrived, is installed and linked; 13.2 fails in one paragraph; the exit code says so."""
    # 13.0's archives in the cache first, so that the failing 13.2 download cannot cancel them
    code, _, err = cli("install", "13.0", "--prefix", str(tmp_path / "warm"), "--base-url", str(two_trains),
                       "--platform", LINUX)
    assert code == 0, err
    # 13.2's nvcc of its own (the fixture's trains share every archive), then gone from the mirror
    nvcc = toolkit(LINUX, "13.2.0")[0]
    build_mirror(two_trains, "13.2.0", [MirrorArchive(nvcc.component, LINUX, "13.2.51",
                                                      {**nvcc.members, "bin/ptxas": Exe(b"#!/bin/sh\n")})])
    entry = json.loads((two_trains / "redistrib_13.2.0.json").read_text())[nvcc.component][LINUX]
    gone = entry["relative_path"]
    (two_trains / gone).unlink()
    code, out, err = cli("install", "13.0", "13.2", "--base-url", str(two_trains), "--platform", LINUX,
                         "--json")
    assert code == 1, err
    assert "Traceback" not in err
    lines = err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: CUDA 13.2: ") and gone in lines[0], err
    got = json.loads(out)
    assert [t["release"] for t in got["toolkits"]] == ["13.0.1"]
    assert [(f["train"], f["exit_code"]) for f in got["failed"]] == [("13.2", 1)]
    assert os.readlink(tk_dir / "cuda-13.0-linux-x86_64") == "cuda-13.0.1-linux-x86_64"
    assert cli("verify", "13.0")[0] == 0
    # nothing of 13.2 is left behind: no tree, no link, no half-made staging directory (a lock file
    # stays, as after any install)
    left = sorted(p.name for p in tk_dir.iterdir() if not p.name.endswith(".lock"))
    assert left == ["cuda-13.0-linux-x86_64", "cuda-13.0.1-linux-x86_64"]


@train_links
def test_train_links_are_updated_under_the_install_dir_lock(tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """Two installs finish at once: the one that installed 13.0.1 read the install dir before the
    other's 13.0.2 was there, and points the link last. Under the lock it reads after the other."""
    import threading

    from cudaredist import managed

    root = tmp_path / "toolkits"
    for release in ("13.0.1", "13.0.2"):
        rec = {"schema": 1, "tool": "cudaredist 0", "installed_at": "2026-01-01T00:00:00+00:00",
               "plan": {"release": release, "platform": LINUX, "profile": "nvcc", "base_url": "x",
                        "components": []}, "files": []}
        (root / f"cuda-{release}-{LINUX}" / ".cudaredist").mkdir(parents=True)
        (root / f"cuda-{release}-{LINUX}" / ".cudaredist" / "record.json").write_text(json.dumps(rec))
    newer = root / f"cuda-13.0.2-{LINUX}"
    hidden = newer.with_name(".installing")
    newer.rename(hidden)  # not there yet when the first process reads the install dir
    real_scan = managed.scan
    second: list[threading.Thread] = []

    def scan(path: Path) -> managed.Scan:
        seen = real_scan(path)
        if not second:  # the first process, right after its read: the second finishes now
            hidden.rename(newer)
            second.append(threading.Thread(target=managed.link_trains, args=(root,),
                                           kwargs={"timeout": 30}))
            second[0].start()
            second[0].join(timeout=2)  # it cannot link before this one is done: it waits on the lock
        return seen

    monkeypatch.setattr(managed, "scan", scan)
    managed.link_trains(root, timeout=30)
    second[0].join()
    assert os.readlink(root / f"cuda-13.0-{LINUX}") == f"cuda-13.0.2-{LINUX}"


@pytest.mark.parametrize("form", [["--install-dir", "{d}"], ["--install-dir={d}"]], ids=["split", "equals"])
def test_run_takes_its_options_after_the_train(mirror: Path, tmp_path: Path, form: list[str],
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """`run TRAIN --install-dir DIR -- CMD` uses DIR, not the default install dir (nor the
    environment's): options after TRAIN were taken for the command before."""
    plat = "windows-x86_64" if os.name == "nt" else LINUX
    mine, other = tmp_path / "mine", tmp_path / "other"
    for d in (mine, other):
        monkeypatch.setenv("CUDAREDIST_INSTALL_DIR", str(d))
        assert cli("install", "13.0", "--base-url", str(mirror), "--platform", plat)[0] == 0
    env = {**os.environ, "CUDAREDIST_INSTALL_DIR": str(other)}
    opts = [a.format(d=mine) for a in form]
    r = subprocess.run([sys.executable, "-m", "cudaredist", "run", "13.0", *opts, "--platform", plat, "--",
                        sys.executable, "-c", "import os; print(os.environ['CUDA_PATH'])"],
                       env=env, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == str(mine / f"cuda-13.0.1-{plat}")


def test_leftovers_in_the_install_dir_are_cleaned_before_the_no_op(mirror: Path, tk_dir: Path) -> None:
    """A swap cut short (the toolkit moved aside, nothing in its place) is put back and a killed run's
    staging removed before the no-op check, which then needs no server: the base URL answers nothing."""
    install(mirror, "13.0")
    tk = tk_dir / "cuda-13.0.1-linux-x86_64"
    tk.rename(tk_dir / ".cuda-13.0.1-linux-x86_64.cudaredist-old-1234abcd")
    (tk_dir / ".cuda-13.0.1-linux-x86_64.cudaredist-stage-abcd").mkdir()
    code, _out, err = cli("install", "13.0", "--base-url", "http://127.0.0.1:9/", "--platform", LINUX)
    assert code == 0, err
    assert f"restored {tk} from an interrupted swap" in err and "nothing to do" in err
    assert "127.0.0.1:9" not in err
    assert sorted(p.name for p in tk_dir.iterdir() if ".cudaredist-" in p.name and "lock" not in p.name) == []
    assert (tk / ".cudaredist" / "record.json").is_file()


def test_a_killed_uninstall_of_a_managed_toolkit_is_put_back_before_the_no_op(mirror: Path,
                                                                               tk_dir: Path) -> None:
    """As into a --prefix (test_interrupt): files a killed uninstall moved out of a managed toolkit,
    whose record is still there, go back before the install answers "already installed"."""
    install(mirror, "13.0")
    tk = tk_dir / "cuda-13.0.1-linux-x86_64"
    trash = tk / ".cudaredist" / "removing-1234abcd"
    (trash / "bin").mkdir(parents=True)
    os.rename(tk / "bin" / "nvcc", trash / "bin" / "nvcc")
    code, _out, err = cli("install", "13.0", "--base-url", "http://127.0.0.1:9/", "--platform", LINUX)
    assert code == 0 and "nothing to do" in err, err
    assert f"put back 1 files an interrupted uninstall had moved out of {tk}" in err
    assert not trash.exists() and cli("verify", "13.0")[0] == 0


def test_a_train_not_installed_names_the_install_dir_given(tmp_path: Path) -> None:
    """The advice to install a missing train keeps the --install-dir it was asked about."""
    root = tmp_path / "elsewhere"
    code, _, err = cli("find", "13.2", "--install-dir", str(root))
    assert code != 0
    assert f"install one with `cudaredist install 13.2 --install-dir {root}" in err, err


@pytest.mark.parametrize("command", ["info", "verify", "env", "find"])
def test_a_managed_swap_cut_short_names_the_previous_tree(two_trains: Path, tmp_path: Path,
                                                          command: str) -> None:
    """A managed toolkit named by its train, whose swap was killed between its two renames: the
    command names the tree moved aside and the install (with its --install-dir) that puts it back."""
    root = tmp_path / "kits"
    code, _, err = cli("install", "13.0", "--install-dir", str(root), "--base-url", str(two_trains),
                       "--platform", LINUX, "-q")
    assert code == 0, err
    tk = root / "cuda-13.0.1-linux-x86_64"
    old = root / f".{tk.name}.cudaredist-old-1234abcd"
    os.rename(tk, old)
    # the platform named: a Windows host (the Windows CPython) would look for its own by default
    code, out, err = cli(command, "13.0", "--install-dir", str(root), "--platform", LINUX)
    said = out + err
    assert code != 0, said
    assert f"{tk} does not exist: an install was cut short while it swapped trees" in said, said
    assert str(old) in said and "no managed CUDA" not in said
    redo = said.split("`cudaredist install ", 1)[1].split("`", 1)[0]
    assert redo.startswith(f"13.0.1 --install-dir {root} --platform {LINUX}"), redo
    from tests.hosts import split_line

    code, _, err = cli("install", *split_line(redo))
    assert code == 0 and "restored" in err, err
    assert tk.is_dir() and not old.exists()


@train_links
def test_list_all_shows_the_systems_toolkits_once_each(two_trains: Path, tk_dir: Path, tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """`list --all` where CUDA_HOME and /usr/local/cuda-X.Y name toolkits (the glob and the site dirs are
    this test's): each system toolkit once, with its release and how it was found, after the managed
    ones; a managed toolkit found again through /usr/local/cuda* is not listed twice."""
    from cudaredist import managed

    install(two_trains, "13.0")
    usr_local = tmp_path / "usr" / "local" / "cuda-12.4"
    (usr_local / "bin").mkdir(parents=True)
    (usr_local / "bin" / "nvcc").write_text("")
    (usr_local / "include").mkdir()
    (usr_local / "include" / "cuda.h").write_text("#define CUDA_VERSION 12040\n")
    home = tmp_path / "opt" / "cuda"
    (home / "bin").mkdir(parents=True)
    (home / "include").mkdir()
    (home / "include" / "cuda_runtime.h").write_text("")  # no nvcc, no version: a runtime-only tree
    mine = tk_dir / "cuda-13.0-linux-x86_64"
    monkeypatch.setattr(managed.glob, "glob", lambda pattern: [str(usr_local), str(mine)]
                        if pattern == "/usr/local/cuda*" else [])
    monkeypatch.setattr(managed.site, "getsitepackages", lambda: [str(tmp_path / "site")])
    monkeypatch.setattr(managed.site, "getusersitepackages", lambda: str(tmp_path / "user-site"))
    for var in ("CUDA_PATH", "CONDA_PREFIX"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("CUDA_HOME", str(home))
    code, out, err = cli("list", "--all")
    assert code == 0 and err == "", err
    lines = out.splitlines()
    assert len(lines) == 3 and lines[0].startswith("13.0.1")
    assert str(tk_dir / "cuda-13.0.1-linux-x86_64") in lines[0]
    assert lines[1].split() == ["?", "(system)", str(home), "[CUDA_HOME]"]
    assert lines[2].split() == ["12.4", "(system)", str(usr_local), "[/usr/local/cuda*]"]
    code, out, _ = cli("list", "--all", "--json")
    assert code == 0 and json.loads(out)["system"] == [
        {"path": str(home), "release": "", "found_by": "CUDA_HOME", "cudaredist": False},
        {"path": str(usr_local), "release": "12.4", "found_by": "/usr/local/cuda*", "cudaredist": False}]
    assert [t["release"] for t in json.loads(out)["toolkits"]] == ["13.0.1"]
