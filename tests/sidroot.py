"""A real newer Linux host for the end-to-end tests: a Debian sid root made by debootstrap (glibc
2.43, g++-14, 15 and 16, Python 3.14), at a fixed path outside the clone so that later CI runs on
the same machine reuse it (.ci/run makes it when it is absent).

:func:`sid_chroot` gives a :class:`Chroot`: a directory of this session mounted into the root at
``/tmp/cudaredist-e2e-<id>`` (trees installed from the host land there), cudaredist and its
dependencies for the root's Python in it, and commands run in the root with ``chroot`` in a
mount namespace of their own (``unshare``): the /proc and bind mounts go when the command ends,
and nothing of the session stays in the shared root but an empty mount point, removed at the end.
Under CI=true a root or a tool that is missing fails; elsewhere it skips, saying why.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

SID_ROOT = Path("/var/cache/cudaredist-ci/sid")  # .ci/run makes it
REPO = Path(__file__).resolve().parent.parent
PYTHON = "3.14"  # the root's python3
# what the root must hold (debootstrap --include=... in .ci/run)
NEEDED = ("usr/bin/g++-14", "usr/bin/g++-15", "usr/bin/g++-16", "usr/bin/make", "usr/bin/python3")


def _unusable() -> str:
    """Why the sid root cannot be used here ("" when it can)."""
    if sys.platform != "linux":
        return "a Debian sid root runs under chroot on a Linux host"
    if os.geteuid() != 0:
        return "chroot and mount need root"
    if shutil.which("unshare") is None or shutil.which("chroot") is None:
        return "unshare and chroot (util-linux, coreutils) are needed"
    missing = [p for p in NEEDED if not (SID_ROOT / p).exists()]
    if missing:
        return (f"{SID_ROOT} is not a complete Debian sid root (lacks {', '.join(missing)}); .ci/run makes "
                "it with debootstrap")
    return ""


def require_sid_root() -> Path:
    if why := _unusable():
        if os.environ.get("CI"):
            pytest.fail(f"{why}, although CI is set")
        pytest.skip(why)
    return SID_ROOT


@dataclass
class Chroot:
    root: Path
    host_dir: Path   # this session's directory on the host ...
    inside: str      # ... and where the root sees it
    site: Path       # cudaredist for the root's Python (seen at <inside>/site)

    def path(self, host: Path) -> str:
        """``host`` (under host_dir) as the root sees it."""
        return f"{self.inside}/{host.relative_to(self.host_dir).as_posix()}"

    def run(self, script: str, *, timeout: float = 600) -> subprocess.CompletedProcess[str]:
        """``script`` by the root's sh, with a clean environment and cudaredist on PATH."""
        env = (f"PATH={self.inside}/bin:/usr/local/bin:/usr/bin:/bin HOME=/root LANG=C.UTF-8 "
               f"PYTHONPATH={self.inside}/site PYTHONDONTWRITEBYTECODE=1 TMPDIR=/tmp")
        mount = self.root / self.inside.lstrip("/")
        inner = (f"mount -t proc proc {shlex.quote(str(self.root / 'proc'))} && "
                 f"mount --bind {shlex.quote(str(self.host_dir))} {shlex.quote(str(mount))} && "
                 f"mount --bind {shlex.quote(str(self.site))} {shlex.quote(str(mount / 'site'))} && "
                 f"exec chroot {shlex.quote(str(self.root))} /usr/bin/env -i {env} /bin/sh -c "
                 f"{shlex.quote(script)}")
        return subprocess.run(["unshare", "--mount", "--propagation", "private", "/bin/sh", "-c", inner],
                              capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)


def make_site(target: Path) -> Path:
    """cudaredist (this checkout, laid out as its wheel lays it out) and its dependencies for the
    root's Python, from binary wheels only, in ``target`` (made once per run: tests/realmirror's
    ``_once``, which every pytest-xdist worker shares)."""
    from packaging.requirements import Requirement

    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover
        import tomli as tomllib
    deps = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"]
    env = {"python_version": PYTHON, "python_full_version": f"{PYTHON}.0", "sys_platform": "linux",
           "platform_system": "Linux", "implementation_name": "cpython"}
    wanted = [str(r) for r in map(Requirement, deps) if r.marker is None or r.marker.evaluate(env)]
    platforms = [a for p in ("manylinux_2_17_x86_64", "manylinux2014_x86_64", "manylinux_2_28_x86_64",
                             "linux_x86_64") for a in ("--platform", p)]
    r = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--disable-pip-version-check",
                        "--target", str(target), "--python-version", PYTHON, "--implementation", "cp",
                        "--only-binary=:all:", *platforms, *wanted], capture_output=True, text=True,
                       timeout=600)
    assert r.returncode == 0, f"pip could not fetch the dependencies for Python {PYTHON}:\n{r.stderr}"
    shutil.copytree(REPO / "cudaredist", target / "cudaredist",
                    ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(REPO / "manifests", target / "cudaredist" / "_manifests")
    return target


def chroot_session(tmp: Path, site: Path) -> Iterator[Chroot]:
    """A :class:`Chroot` on ``tmp`` with ``site`` (:func:`make_site`): a fixture's generator, the
    mount point goes at the end."""
    root = require_sid_root()
    inside = f"/tmp/cudaredist-e2e-{uuid.uuid4().hex[:10]}"
    (root / inside.lstrip("/")).mkdir()
    try:
        (tmp / "site").mkdir()  # where the root sees ``site``
        (tmp / "bin").mkdir()
        script = tmp / "bin" / "cudaredist"
        script.write_text("#!/usr/bin/python3\nimport sys\n"
                          "from cudaredist.entry import main\nsys.exit(main())\n")
        script.chmod(0o755)
        yield Chroot(root, tmp, inside, site)
    finally:
        (root / inside.lstrip("/")).rmdir()  # empty: the session's files were only mounted there
