"""What a prefix really holds decides a no-op (cudaredist.record.satisfies, cudaredist.drift.lacking),
the same way for every command line: a tree whose profile now means more is updated, leftovers are cleaned
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
    pytest.param(["--channel", "bogus"], "unknown channel 'bogus': use release or preview", id="channel"),
    pytest.param(["--channel", "release"], "--channel release and --base-url", id="channel-and-base-url"),
    pytest.param(["--no-fallback"], "--no-fallback needs --mirror (or CUDAREDIST_MIRROR)", id="no-fallback"),
    pytest.param(["--source", "pypi", "--channel", "preview"],
                 "--channel names one of NVIDIA's redist indexes", id="channel-with-pypi"),
    pytest.param(["--platform", "bogus"], "unknown platform 'bogus': use one of linux-aarch64, ",
                 id="platform"),
])
def test_options_are_checked_on_a_no_op_as_on_a_fresh_install(installed: tuple[Path, list[str]],
                                                              tmp_path: Path, extra: list[str],
                                                              words: str) -> None:
    """The same usage error (exit 2) on the installed prefix as on an empty one, and before any network:
    the base URL is a server that is not there, whose name would show in a network error."""
    prefix, args = installed
    errors = []
    for where in (prefix, tmp_path / "fresh"):
        argv = [*args, *extra]
        argv[argv.index(str(prefix))] = str(where)
        argv[argv.index("--base-url") + 1] = "http://127.0.0.1:9/"
        r = _run(*argv)
        assert r.exit_code == 2, (where, r.output)
        assert words in r.stderr and "Traceback" not in r.output and "127.0.0.1:9" not in r.stderr.replace(
            "--base-url http://127.0.0.1:9/", "")
        errors.append(r.stderr)
    assert errors[0] == errors[1]


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


# -- "redo this tree's request": one command line, the same kind of tree ---------------------------------
def _advised(text: str) -> list[str]:
    """The `cudaredist install ...` command quoted in ``text``, as argv without the program name."""
    from tests.hosts import split_line

    quoted = text.split("`cudaredist install ", 1)[1].split("`", 1)[0]
    return ["install", *split_line(quoted)]


def test_the_advice_to_redo_a_tree_keeps_its_platform_and_profile(mirror: Path, tmp_path: Path) -> None:
    """A Windows runtime tree (cross-compiling from here): info's and verify's note, and doctor's
    fix, say --platform windows-x86_64 --profile runtime; following the note keeps both."""
    from cudaredist.doctor.toolkit import check_toolkit

    prefix = tmp_path / "win"
    r = _run("install", "13.0", "--prefix", str(prefix), "--platform", "windows-x86_64", "--profile",
             "runtime", "--base-url", str(mirror), "-q")
    assert r.exit_code == 0, r.output
    _drift(prefix, drop=("cuda_cudart",))
    info = _run("info", "--prefix", str(prefix))
    verify = _run("verify", "--prefix", str(prefix), "--fast")
    for said in (info.output, verify.output):
        assert "--platform windows-x86_64" in said and "--profile runtime" in said, said
        assert "--force" not in said
    (prefix / "include" / "crt" / "host_config.h").unlink()
    check, _tk = check_toolkit(prefix, host_windows=False)
    assert check.status == "fail" and "--force" not in check.fix
    assert f"cudaredist install 13.0.1 --prefix {prefix} --platform windows-x86_64" in check.fix
    assert "--profile runtime" in check.fix and "--reinstall" in check.fix
    redo = _run(*_advised(info.output))
    assert redo.exit_code == 0, redo.output
    plan = json.loads((prefix / ".cudaredist" / "record.json").read_text())["plan"]
    assert (plan["platform"], plan["profile"]) == ("windows-x86_64", "runtime")
    assert "cuda_cudart" in {c["name"] for c in plan["components"]}


def test_the_advice_for_a_managed_toolkit_names_its_install_dir(mirror: Path, tmp_path: Path) -> None:
    root = tmp_path / "toolkits"
    r = _run("install", "13.0", "--install-dir", str(root), "--profile", "runtime", "--base-url",
             str(mirror), *COMMON, "-q")
    assert r.exit_code == 0, r.output
    _drift(root / "cuda-13.0.1-linux-x86_64", drop=("cuda_cudart",))
    info = _run("info", "13.0", "--install-dir", str(root))
    assert info.exit_code == 0, info.output
    argv = _advised(info.output)
    assert "--prefix" not in argv and argv[argv.index("--install-dir") + 1] == str(root)
    assert argv[argv.index("--profile") + 1] == "runtime"
    assert _run(*argv).exit_code == 0
    assert "needs updating" not in _run("info", "13.0", "--install-dir", str(root)).output


# -- the layout version: a tree an older cudaredist laid out needs updating -------------------------------
def _older_layout(prefix: Path) -> None:
    rp = prefix / ".cudaredist" / "record.json"
    rec = json.loads(rp.read_text())
    rec.pop("layout", None)
    rp.write_text(json.dumps(rec))


def test_a_tree_of_an_older_layout_is_updated(installed: tuple[Path, list[str]]) -> None:
    prefix, args = installed
    _older_layout(prefix)
    for command in ("info", "verify"):
        said = _run(command, "--prefix", str(prefix)).output
        assert "needs updating: the tree was laid out by an older cudaredist (layout 0" in said, said
    r = _run(*args)
    assert r.exit_code == 0 and "laid out by an older cudaredist" in r.stderr and "; updating" in r.stderr
    assert "installed CUDA 13.0.1" in r.stderr and "nothing to do" not in r.stderr
    assert json.loads((prefix / ".cudaredist" / "record.json").read_text())["layout"] >= 1
    assert json.loads(_run(*args, "--json").stdout)["noop"] is True
    _older_layout(prefix)  # --refresh, which skips the offline no-op, updates it too
    again = _run(*args, "--refresh", "--json")
    assert again.exit_code == 0 and json.loads(again.stdout)["noop"] is False, again.output
    assert "needs updating" not in _run("info", "--prefix", str(prefix)).output


def test_a_pypi_tree_follows_its_profile(fake_index: object, tmp_path: Path) -> None:
    """A --source pypi tree whose profile (pypi.toml's extras) now means more is said to need
    updating and is updated, then a no-op again."""
    from tests.sources.pypi.test_pypi_source import INDEX, add_release_13_0

    add_release_13_0(fake_index)  # type: ignore[arg-type]
    prefix = tmp_path / "p"
    args = ["install", "13.0", "--prefix", str(prefix), "--source", "pypi", "--index-url", INDEX, *COMMON]
    assert _run(*args, "-q").exit_code == 0
    rp = prefix / ".cudaredist" / "record.json"
    rec = json.loads(rp.read_text())
    rec["request"]["profile"] = [e for e in rec["request"].get("profile", []) if e != "nvtx"]
    rp.write_text(json.dumps(rec))
    info = _run("info", "--prefix", str(prefix))
    assert "profile nvcc now also includes nvtx (CUDA 13.0.2), which this tree lacks" in info.output
    assert "--source pypi --index-url" in info.output
    r = _run(*args)
    assert r.exit_code == 0 and "; updating" in r.stderr and "nothing to do" not in r.stderr, r.output
    assert "nvtx" in json.loads(rp.read_text())["request"]["profile"]
    assert "already installed" in _run(*args).stderr
