"""Real small filesystems for the tests: a size-limited (or read-only) tmpfs, and exFAT.

They need root (CI runs as root). Where mounting is impossible the test is skipped, except
under CI (``CI=true``), where a missing tool must fail rather than hide the test.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest


def unavailable(why: str) -> None:
    if os.name == "nt":
        pytest.skip(f"POSIX: {why} (mounts are a Linux feature; CI or not)")
    if os.environ.get("CI") == "true":
        pytest.fail(f"{why} (under CI this must work: .ci/run installs what it needs)")
    pytest.skip(why)


def _run(*cmd: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, capture_output=True, text=True, timeout=60, check=False)


@contextlib.contextmanager
def tmpfs(mountpoint: Path, size: str, *, read_only: bool = False) -> Iterator[Path]:
    """A tmpfs of ``size`` (e.g. "2m") at ``mountpoint``: a disk that really fills up."""
    mountpoint.mkdir(parents=True, exist_ok=True)
    opts = f"size={size},mode=0755" + (",ro" if read_only else "")
    if os.name == "nt":
        unavailable("a tmpfs mount")
    if os.geteuid() != 0 or shutil.which("mount") is None:
        unavailable("mounting a tmpfs needs root and mount(8)")
    r = _run("mount", "-t", "tmpfs", "-o", opts, "tmpfs", str(mountpoint))
    if r.returncode != 0:
        unavailable(f"cannot mount a tmpfs here: {r.stderr.strip()}")
    try:
        yield mountpoint
    finally:
        _run("umount", "-l", str(mountpoint))


@contextlib.contextmanager
def read_only_view(source: Path, mountpoint: Path) -> Iterator[Path]:
    """``source`` seen through a read-only bind mount at ``mountpoint`` (root can write nowhere in it)."""
    mountpoint.mkdir(parents=True, exist_ok=True)
    if os.name == "nt":
        unavailable("a read-only bind mount")
    if os.geteuid() != 0 or shutil.which("mount") is None:
        unavailable("a bind mount needs root and mount(8)")
    r = _run("mount", "--bind", str(source), str(mountpoint))
    if r.returncode != 0:
        unavailable(f"cannot bind-mount here: {r.stderr.strip()}")
    try:
        r = _run("mount", "-o", "remount,bind,ro", str(mountpoint))
        if r.returncode != 0:
            unavailable(f"cannot make a bind mount read-only here: {r.stderr.strip()}")
        yield mountpoint
    finally:
        _run("umount", "-l", str(mountpoint))


@contextlib.contextmanager
def exfat(mountpoint: Path, image: Path, size_mb: int = 64) -> Iterator[Path]:
    """A real case-insensitive filesystem (exFAT through FUSE on a loop device)."""
    tools = ("mkfs.exfat", "mount.exfat-fuse", "losetup")
    missing = [t for t in tools if shutil.which(t) is None]
    if os.name == "nt":
        unavailable("an exFAT mount through FUSE")
    if os.geteuid() != 0 or missing or not os.path.exists("/dev/fuse"):
        unavailable(f"exFAT needs root, /dev/fuse and {', '.join(tools)} (missing: {missing})")
    with open(image, "wb") as fh:
        fh.truncate(size_mb << 20)
    r = _run("mkfs.exfat", str(image))
    if r.returncode != 0:
        unavailable(f"mkfs.exfat failed: {r.stderr.strip()}")
    loop = _run("losetup", "-f", "--show", str(image))
    if loop.returncode != 0:
        unavailable(f"no loop device: {loop.stderr.strip()}")
    dev = loop.stdout.strip()
    mountpoint.mkdir(parents=True, exist_ok=True)
    try:
        r = _run("mount.exfat-fuse", dev, str(mountpoint))
        if r.returncode != 0:
            unavailable(f"cannot mount exFAT: {r.stderr.strip()}")
        try:
            yield mountpoint
        finally:
            _run("umount", str(mountpoint))
    finally:
        _run("losetup", "-d", dev)
