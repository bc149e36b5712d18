"""What a prefix really holds decides a no-op (cudaredist.record.satisfies / lacking), the same way
for every command line: a tree whose profile now means more is updated, leftovers are cleaned
before anything that may need the network, and options are checked even when nothing is to do."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner, Result

from cudaredist.cli import app
from tests.hosts import posix_only

COMMON = ["--platform", "linux-x86_64"]


def _run(*args: str) -> Result:
    return CliRunner().invoke(app, list(args))


@pytest.fixture
def installed(mirror: Path, tmp_path: Path) -> tuple[Path, list[str]]:
    """A prefix holding 13.0.1 (profile nvcc), and the arguments that installed it."""
    prefix = tmp_path / "cuda"
    args = ["install", "13.0", "--prefix", str(prefix), "--base-url", str(mirror), *COMMON]
    r = _run(*args, "-q")
    assert r.exit_code == 0, r.output
    return prefix, args


def _drift(prefix: Path, drop: tuple[str, ...] = ("cuda_profiler_api", "cuda_nvtx")) -> None:
    """Make the record say what a tree installed by an older cudaredist says: profile nvcc, without
    the components that profile gained since."""
    rp = prefix / ".cudaredist" / "record.json"
    rec = json.loads(rp.read_text())
    rec["plan"]["components"] = [c for c in rec["plan"]["components"] if c["name"] not in drop]
    rec["files"] = [f for f in rec["files"] if f.get("component") not in drop]
    rp.write_text(json.dumps(rec))


def test_a_tree_whose_profile_now_means_more_is_brought_up_to_date(installed: tuple[Path, list[str]]) -> None:
    prefix, args = installed
    _drift(prefix)
    info = _run("info", "--prefix", str(prefix))
    assert info.exit_code == 0
    assert "profile nvcc now also includes cuda_profiler_api, cuda_nvtx" in info.output
    assert f"cudaredist install 13.0.1 --prefix {prefix}" in info.output
    verify = _run("verify", "--prefix", str(prefix), "--fast")
    assert "profile nvcc now also includes cuda_profiler_api, cuda_nvtx" in verify.output
    r = _run(*args)
    assert r.exit_code == 0, r.output
    assert (f"{prefix}: profile nvcc now also includes cuda_profiler_api, cuda_nvtx (CUDA 13.0.1), which "
            "this tree lacks; updating") in r.stderr
    assert "installed CUDA 13.0.1" in r.stderr
    names = {c["name"] for c in json.loads((prefix / ".cudaredist" / "record.json").read_text())
             ["plan"]["components"]}
    assert {"cuda_profiler_api", "cuda_nvtx"} <= names
    again = _run(*args, "--json")
    assert again.exit_code == 0 and json.loads(again.stdout)["noop"] is True


def test_a_complete_prefix_is_a_no_op_offline_with_leftovers_beside_it(
        installed: tuple[Path, list[str]], tmp_path: Path) -> None:
    """A `-gone-` folder (a held file kept it on Windows) and a killed run's staging beside the prefix
    are cleaned first; the no-op then needs no server: here the base URL answers nothing at all."""
    prefix, _args = installed
    gone = tmp_path / ".cuda.cudaredist-gone-1234"
    (gone / "bin").mkdir(parents=True)
    (gone / "bin" / "held.dll").write_bytes(b"x")
    (tmp_path / ".cuda.cudaredist-stage-abcd").mkdir()
    r = _run("install", "13.0", "--prefix", str(prefix), "--base-url", "http://127.0.0.1:9/", *COMMON)
    assert r.exit_code == 0, r.output
    assert "nothing to do" in r.stderr and "removed leftover .cuda.cudaredist-gone-1234" in r.stderr
    assert not gone.exists() and not (tmp_path / ".cuda.cudaredist-stage-abcd").exists()


@posix_only("a symlinked prefix (Windows needs a privilege for symlinks)")
def test_a_symlinked_prefix_is_cleaned_beside_its_target(installed: tuple[Path, list[str]],
                                                         tmp_path: Path) -> None:
    prefix, _args = installed
    link = tmp_path / "links" / "cuda"
    link.parent.mkdir()
    link.symlink_to(prefix)
    (tmp_path / ".cuda.cudaredist-stage-abcd").mkdir()  # beside the target, not the link
    r = _run("install", "13.0", "--prefix", str(link), "--base-url", "http://127.0.0.1:9/", *COMMON)
    assert r.exit_code == 0 and "nothing to do" in r.stderr, r.output
    assert not (tmp_path / ".cuda.cudaredist-stage-abcd").exists()


@pytest.mark.parametrize("extra, words", [
    pytest.param(["--base-url", "ftp://x/"], "unsupported URL scheme 'ftp'", id="base-url-scheme"),
    pytest.param(["--trusted-host", "a/b"], "--trusted-host 'a/b'", id="trusted-host-shape"),
    pytest.param(["--link-mode", "symlink"], "symlink", id="link-mode"),
    pytest.param(["--profile", "full"], "unknown profile 'full'", id="profile"),
])
def test_options_are_checked_on_a_no_op_as_on_a_fresh_install(installed: tuple[Path, list[str]],
                                                              tmp_path: Path, extra: list[str],
                                                              words: str) -> None:
    prefix, args = installed
    for where in (prefix, tmp_path / "fresh"):
        argv = [*args, *extra]
        argv[argv.index(str(prefix))] = str(where)
        r = _run(*argv)
        assert r.exit_code == 2, (where, r.output)
        assert words in r.stderr and "Traceback" not in r.output


def test_a_foreign_prefix_is_refused_before_any_network(tmp_path: Path) -> None:
    foreign = tmp_path / "etc"
    foreign.mkdir()
    (foreign / "passwd").write_text("root:x:0:0\n")
    r = _run("install", "13.0", "--prefix", str(foreign), "--base-url", "http://127.0.0.1:9/", *COMMON)
    assert r.exit_code == 1, r.output
    assert "exists and does not hold a cudaredist install; refusing to replace it" in r.stderr
    assert "127.0.0.1:9" not in r.stderr  # no attempt at the (dead) server came first


def test_the_json_answer_into_a_closed_stdout_ends_quietly(installed: tuple[Path, list[str]]) -> None:
    prefix, args = installed
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
    env["PYTHONPATH"] = str(Path(__file__).resolve().parents[1])
    for _ in range(2):  # the second run was once answered by a replay that raised BrokenPipeError
        p = subprocess.run(f"{shlex_join([sys.executable, '-m', 'cudaredist', *args, '--json'])} | true",
                           shell=True, capture_output=True, text=True, env=env, timeout=120, check=False)
        assert "Traceback" not in p.stderr and "BrokenPipeError" not in p.stderr, p.stderr


def shlex_join(argv: list[str]) -> str:
    import shlex

    return shlex.join(argv)


def test_a_component_the_release_lacks_is_not_drift(tmp_path: Path) -> None:
    """visual_studio_integration (nvcc on Windows) may be absent from a release: its plan's note says
    so, and the next run is a no-op without network rather than an 'update' each time."""
    from tests.archives import build_mirror, toolkit

    bare = tmp_path / "bare"
    build_mirror(bare, "13.0.1", [a for a in toolkit("windows-x86_64")
                                  if a.component != "visual_studio_integration"])
    prefix = tmp_path / "win"
    args = ["install", "13.0", "--prefix", str(prefix), "--platform", "windows-x86_64"]
    first = _run(*args, "--base-url", str(bare))
    assert first.exit_code == 0 and "has no visual_studio_integration for windows-x86_64" in first.stderr
    r = _run(*args, "--base-url", "http://127.0.0.1:9/")
    assert r.exit_code == 0 and "nothing to do" in r.stderr, r.output
