"""A repeated no-op `install --prefix` answered before the command line is built (cudaredist.noop).

Through the real entry point (a child process): the first run installs and keeps the answer its
next run gives, which is then answered from it without typer being imported. Whatever
the no-op decision read (the arguments, CUDAREDIST_* variables, the record, leftovers of a killed
run) sends a changed command the full way, which then decides afresh.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from cudaredist import noop


def run(*args: str, env: dict[str, str] | None = None, importtime: bool = False,
        cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith("CUDAREDIST_")}
    return subprocess.run([sys.executable, *(["-X", "importtime"] if importtime else []), "-m", "cudaredist",
                           *args], env={**base, **(env or {})}, capture_output=True, text=True, timeout=120,
                          cwd=cwd)


def imported(r: subprocess.CompletedProcess[str]) -> set[str]:
    return {line.rsplit("|", 1)[1].strip() for line in r.stderr.splitlines()
            if line.startswith("import time:")}


def said(r: subprocess.CompletedProcess[str]) -> str:
    return "".join(line + "\n" for line in r.stderr.splitlines() if not line.startswith("import time:"))


@pytest.fixture
def installed(mirror: Path, tmp_path: Path) -> tuple[list[str], Path]:
    prefix = tmp_path / "cuda"
    args = ["install", "13.0", "--base-url", str(mirror), "--prefix", str(prefix),
            "--platform", "linux-x86_64", "--cache-dir", str(tmp_path / "cache")]
    r = run(*args)
    assert r.returncode == 0, r.stderr
    assert (prefix / ".cudaredist" / noop.STAMP).is_file()  # the answer of its next run
    return args, prefix


def test_the_same_no_op_again_is_answered_without_typer(installed: tuple[list[str], Path]) -> None:
    args, prefix = installed
    fast = run(*args, importtime=True)
    assert fast.returncode == 0 and fast.stdout == ""
    assert "is already installed in" in said(fast)
    assert not {m for m in imported(fast) if m.startswith(("typer", "cudaredist.cli", "cudaredist.api"))}
    # the full way says the same, and keeps it again
    stamp = prefix / ".cudaredist" / noop.STAMP
    stamp.unlink()
    full = run(*args, importtime=True)
    assert full.returncode == 0 and "typer" in imported(full)
    assert said(full) == said(fast) and stamp.is_file()
    fast = run(*args, importtime=True)
    assert said(fast) == said(full)
    assert not {m for m in imported(fast) if m.startswith(("typer", "cudaredist.cli", "cudaredist.api"))}
    # the stamp holds hashes and what was printed, no argument or variable itself
    text = (prefix / ".cudaredist" / noop.STAMP).read_text()
    assert str(prefix / ".." / "cache") not in text and "--base-url" not in text
    # verify ignores it, and uninstall removes it with the rest: nothing of the prefix is left
    assert run("verify", "--prefix", str(prefix)).returncode == 0
    assert run("uninstall", "--prefix", str(prefix)).returncode == 0
    assert not prefix.exists()
    again = run(*args)  # no record: the full way, which installs
    assert again.returncode == 0 and "installed CUDA 13.0.1" in again.stderr, again.stderr


def test_a_json_no_op_prints_the_json_of_the_full_way(mirror: Path, tmp_path: Path) -> None:
    """install --json, then the same again: the answer's JSON is what the full no-op prints."""
    prefix = tmp_path / "cuda"
    args = ["install", "13.0", "--base-url", str(mirror), "--prefix", str(prefix),
            "--platform", "linux-x86_64", "--cache-dir", str(tmp_path / "cache"), "--json"]
    first = run(*args)
    assert first.returncode == 0 and json.loads(first.stdout)["noop"] is False
    fast = run(*args, importtime=True)
    assert fast.returncode == 0 and "typer" not in imported(fast)
    (prefix / ".cudaredist" / noop.STAMP).unlink()
    full = run(*args, importtime=True)
    assert full.returncode == 0 and "typer" in imported(full)
    assert fast.stdout == full.stdout and json.loads(fast.stdout)["noop"] is True
    assert said(fast) == said(full) == ""


@pytest.mark.parametrize("change", ["quiet", "profile", "variable", "acting", "json", "record", "leftover",
                                    "stamp"])
def test_anything_the_decision_read_changed_goes_the_full_way(installed: tuple[list[str], Path],
                                                              change: str) -> None:
    args, prefix = installed
    assert run(*args).returncode == 0  # the full no-op, which keeps its answer
    env: dict[str, str] = {}
    if change == "quiet":  # another command line: its own answer (nothing printed)
        args = [*args, "-q"]
    elif change == "profile":  # another request: the full way decides it is not a no-op
        args = [*args, "--profile", "runtime"]
    elif change == "variable":
        env = {"CUDAREDIST_SOURCE": "nvidia"}
    elif change in ("acting", "json"):
        args = [*args, "--reinstall" if change == "acting" else "--json"]
    elif change == "record":  # rewritten (the same bytes, another file): not the record that was read
        record = prefix / ".cudaredist" / "record.json"
        data = record.read_bytes()
        record.unlink()
        record.write_bytes(data)
    elif change == "leftover":  # what a killed run left beside the prefix: the installer cleans it first
        (prefix.parent / f".{prefix.name}.cudaredist-stage-1").mkdir()
    else:  # a damaged stamp is no answer, and no error
        (prefix / ".cudaredist" / noop.STAMP).write_text("{not json")
    r = run(*args, env=env, importtime=True)
    assert r.returncode == 0, r.stderr
    assert "typer" in imported(r), change
    out = said(r)
    if change == "quiet":
        assert out == ""
    elif change == "profile":
        assert "installed CUDA 13.0.1" in out and "runtime" in out, out
    elif change == "acting":
        assert "installed CUDA 13.0.1" in out, out
    elif change == "json":
        assert json.loads(r.stdout)["noop"] is True
    elif change == "leftover":
        assert not list(prefix.parent.glob(f".{prefix.name}.cudaredist-*"))
    else:
        assert "is already installed in" in out, out
    assert "Traceback" not in r.stderr


def test_a_prefix_that_cannot_keep_an_answer_still_answers(installed: tuple[list[str], Path]) -> None:
    args, prefix = installed
    stamp = prefix / ".cudaredist" / noop.STAMP
    stamp.unlink()
    stamp.mkdir()  # no file can be written there
    for _ in range(2):
        r = run(*args)
        assert r.returncode == 0 and "is already installed in" in r.stderr and "Traceback" not in r.stderr
    assert not list((prefix / ".cudaredist").glob("*.tmp"))


def test_a_relative_prefix_is_answered_in_its_own_directory_only(mirror: Path, tmp_path: Path) -> None:
    """The working directory is part of the key: `--prefix cuda` elsewhere is another prefix."""
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    args = ["install", "13.0", "--base-url", str(mirror), "--prefix", "cuda", "--platform", "linux-x86_64",
            "--cache-dir", str(tmp_path / "cache"), "-q"]
    for _ in range(3):
        assert run(*args, cwd=tmp_path / "a").returncode == 0
    r = run(*args, cwd=tmp_path / "b")
    assert r.returncode == 0 and (tmp_path / "b" / "cuda" / ".cudaredist" / "record.json").is_file()


def test_an_answer_is_not_kept_for_a_record_rewritten_meanwhile(installed: tuple[list[str], Path]) -> None:
    """remember() keeps an answer only for the record the decision read: one a concurrent install
    rewrote between the read and the answer gets none."""
    args, prefix = installed
    ident = noop.before(args)
    assert ident is not None
    record = prefix / ".cudaredist" / "record.json"
    data = record.read_bytes()
    record.unlink()
    record.write_bytes(data)
    noop.remember(args, ident, "", "stale\n")
    assert noop.answer(args) is None
    noop.remember(args, noop.before(args), "", "fresh\n")
    assert noop.answer(args) == ("", "fresh\n")


@pytest.mark.parametrize(("argv", "prefix"), [
    (["install", "13.0", "--prefix", "p"], "p"),
    (["install", "13.0", "--prefix=p", "-q", "--with", "cudnn"], "p"),
    (["install", "13.0"], None),                            # managed: the full way
    (["install", "13.0", "--prefix", "p", "--prefix", "q"], None),
    (["install", "13.0", "--prefix", "p", "--refresh"], None),
    (["install", "13.0", "--prefix", "p", "--lock", "cuda.lock"], None),
    (["install", "13.0", "--prefix", "p", "-qv"], None),     # a cluster of short flags: not parsed here
    (["install", "13.0", "--prefix", "p", "--", "x"], None),
    (["install", "13.0", "--prefix", "p", "--no-such-option"], None),
    (["verify", "--prefix", "p"], None),
])
def test_which_command_lines_a_stamp_may_answer(argv: list[str], prefix: str | None) -> None:
    assert noop.prefix_of(argv) == prefix


def test_every_install_option_is_classified() -> None:
    """An option added to `install` must be put in REPLAYABLE (its effect on a no-op is all in the
    arguments) or ACTING (always the full way): until then this fails."""
    import typer

    from cudaredist.cli import app

    group = typer.main.get_command(app)
    command = group.commands["install"]  # type: ignore[attr-defined]
    names = {n for p in command.params for n in (*p.opts, *p.secondary_opts) if n.startswith("-")}
    assert names - noop.REPLAYABLE - noop.ACTING == set()
    assert not noop.REPLAYABLE & noop.ACTING
    assert noop.REPLAYABLE - names == set()  # no stale names
