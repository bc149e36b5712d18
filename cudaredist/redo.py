"""The one spelling of "redo this tree's request": the ``cudaredist install`` command line a user is
told to run (by ``info``, ``verify``, every doctor fix, a cut-short swap and a missing toolkit),
from the record's plan and request alone."""

from __future__ import annotations

import shlex
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from cudaredist.fsops import WINDOWS
from cudaredist.installdir import install_dir_argv, toolkit_name


def request_argv(record: Mapping[str, Any] | None, prefix: Path, *, reinstall: bool = False,
                 source: str | None = None) -> list[str]:
    """The one spelling of "redo this tree's request": the ``cudaredist install`` command line that
    makes the tree ``record`` describes again in ``prefix`` (its release, platform, source and where
    it came from, profile or ``--only``, ``--component`` and ``--with``); a managed toolkit by its
    install dir. ``source``: the same request from another source; no record: a TRAIN to fill in."""
    if record is None:
        return ["cudaredist", "install", "TRAIN", "--prefix", str(prefix)] + ["--reinstall"] * reinstall
    plan, request = record["plan"], record.get("request", {})
    release, platform, had = str(plan["release"]), str(plan["platform"]), str(plan.get("source", "nvidia"))
    # --prefix P, or for a managed toolkit (named by its release and platform) its install dir
    argv = ["cudaredist", "install", release, "--prefix", str(prefix), "--platform", platform] \
        if prefix.name != toolkit_name(release, platform) else train_argv(release, prefix.parent, platform)
    if plan.get("host"):  # a cross tree: the tools' platform too
        argv += ["--host", str(plan["host"])]
    source = source or had
    if source != "nvidia" or source != had:  # another source than the tree's: said, even the default
        argv += ["--source", source]
    if source == had:
        argv += request.get("location", _spelled_out(plan))
    profile = str(plan.get("profile", "custom"))
    argv += ["--only"] if profile == "custom" else ["--profile", profile]
    for c in request.get("components", []):
        argv += ["--component", str(c)]
    for p in plan.get("products", []):
        argv += ["--with", str(p.get("requested", p.get("name", "")))]
    return argv + (["--reinstall"] if reinstall else [])


def _spelled_out(plan: Mapping[str, Any]) -> list[str]:
    """Where a tree whose record kept no options came from (an older cudaredist's): spelled out."""
    base, channel = str(plan.get("base_url", "")), str(plan.get("channel", ""))
    if channel or not base:
        return ["--channel", channel] if channel else []
    return ["--index-url" if plan.get("source") == "pypi" else "--base-url", base]


def train_argv(train: str, root: Path | None = None, platform: str | None = None) -> list[str]:
    """The command that installs ``train`` as a managed toolkit of ``root`` (None: the default install
    dir), for ``platform`` when given."""
    argv = ["cudaredist", "install", train, *(install_dir_argv(root) if root is not None else [])]
    return argv + (["--platform", platform] if platform else [])


def shell_line(argv: Sequence[str]) -> str:
    return subprocess.list2cmdline(list(argv)) if WINDOWS else shlex.join(argv)
