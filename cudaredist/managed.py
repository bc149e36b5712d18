"""Managed toolkits: trees named by release and platform in one install directory, found by train.

Layout of the install directory (``--install-dir`` > ``CUDAREDIST_INSTALL_DIR`` > the user data
dir)::

    cuda-13.4.1-linux-x86_64/      an ordinary prefix with an install record
    cuda-13.4-linux-x86_64  ->     the train link: the newest installed 13.4.x (a junction on Windows)

A managed toolkit is installed, locked, verified and uninstalled like any other prefix; this
module only names them, finds them and keeps the train links pointing at the newest patch.

``list --all`` shows the other toolkits of this machine beside them (``system_toolkits``), looked at in
order: ``CUDA_PATH`` / ``CUDA_HOME``, ``CUDA_PATH_V<major>_<minor>`` (NVIDIA's Windows installer sets
them), ``/usr/local/cuda*`` (NVIDIA's Linux installers and packages), the active conda environment,
and NVIDIA's pip wheels in this interpreter's site-packages.
"""

from __future__ import annotations

import contextlib
import errno
import glob
import json
import ntpath
import os
import re
import site
import sys
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cudaredist import fsops, profiles
from cudaredist.cache.store import hold
from cudaredist.errors import CudaRedistError, PrefixError, RecordError, ResolveError
from cudaredist.fsops import WINDOWS
from cudaredist.interrupts import Interrupted, signum_of
from cudaredist.plan import matches, version_key
from cudaredist.prefixes import cut_short
from cudaredist.prefixes import tidy as tidy_prefix
from cudaredist.record import RECORD_DIR, read_record
from cudaredist.redo import shell_line, train_argv

_NAME = re.compile(r"^cuda-(?P<release>\d+\.\d+\.\d+)-(?P<platform>[a-z0-9]+-[a-z0-9_]+)$")
# what a killed run leaves beside a toolkit (cudaredist.record.leftovers): .NAME.cudaredist-KIND-ID
_LEFTOVER = re.compile(r"^\.(?P<name>.+)\.cudaredist-[a-z]+-")


@dataclass(frozen=True)
class Toolkit:
    """An installed managed toolkit, read from its install record."""

    path: Path
    release: str
    platform: str
    profile: str
    size: int
    record: dict[str, Any] = field(compare=False, repr=False)  # all of it, as read

    @property
    def added(self) -> str:
        """``+cudnn-9.27.0`` for each product the tree holds (what `list` shows), else ""."""
        return "".join(f" +{p['name']}-{p['release']}" for p in self.record["plan"].get("products", []))

    def to_json(self) -> dict[str, Any]:
        plan = self.record["plan"]
        return {"path": str(self.path), "release": self.release, "platform": self.platform,
                "profile": self.profile, "components": [c["name"] for c in plan["components"]],
                "size": self.size, "source": plan.get("source", "nvidia"),
                "products": [{"name": p["name"], "release": p["release"]} for p in plan.get("products", [])]}


@dataclass(frozen=True)
class Scan:
    """What the install dir ``root`` holds: the toolkits, newest release first, and the directories named
    like one whose install record is damaged (each error names the record and the fix). A command
    scans once and asks it everything (each scan reads every toolkit's record)."""

    root: Path
    toolkits: list[Toolkit]
    damaged: list[tuple[Path, RecordError]]

    def damaged_of(self, train: str, platform: str | None) -> RecordError | None:
        """The error of a damaged toolkit that, by its directory name, is of ``train``."""
        named = ((_NAME.match(path.name), err) for path, err in self.damaged)
        return next((err for m, err in named
                     if m and matches(train, m["release"]) and platform in (None, m["platform"])), None)

    def find(self, train: str, platform: str | None = None) -> list[Toolkit]:
        """Installed toolkits of ``train`` (and ``platform`` when given), best (newest) first."""
        return [t for t in self.toolkits
                if matches(train, t.release) and (platform is None or t.platform == platform)]

    def best(self, train: str, platform: str | None = None) -> Toolkit | None:
        """The newest installed toolkit of ``train``: of ``platform``, or when none is given of this
        host's platform first, then of any."""
        hits = self.find(train, platform or host()) or (self.find(train) if platform is None else [])
        return hits[0] if hits else None

    def one(self, train: str, platform: str | None) -> Toolkit:
        """The best installed match (this host's platform first when none is given), or a
        :class:`ResolveError` that says how to install one."""
        best_match, root = self.best(train, platform), self.root
        if best_match is None:
            damaged = self.damaged_of(train, platform)
            if damaged is not None:
                raise damaged
            for name, n in _names(root):
                if matches(train, n["release"]) and platform in (None, n["platform"]) and \
                        (swap := cut_short(root / name)):  # its previous tree moved aside: that is the answer
                    raise ResolveError(swap, requested=train, where=str(root))
            on = f" for {platform}" if platform else ""
            raise ResolveError(f"no managed CUDA {train} toolkit{on} is installed in {root}; install one "
                               f"with `{shell_line(train_argv(train, root, platform))}`", requested=train,
                               where=str(root))
        return best_match


def scan(root: Path) -> Scan:
    """Managed toolkits in ``root`` (directories named cuda-<release>-<platform> with a record)."""
    found: list[Toolkit] = []
    damaged: list[tuple[Path, RecordError]] = []
    for entry in sorted(root.iterdir()) if root.is_dir() else ():
        m = _NAME.match(entry.name)
        if m is None or fsops.is_link(entry) or not entry.is_dir():
            continue
        try:
            rec = read_record(entry)
        except RecordError as exc:
            damaged.append((entry, exc))
            continue
        if rec is None:
            continue
        plan = rec["plan"]
        found.append(Toolkit(entry, plan["release"], plan["platform"], plan["profile"],
                             sum(f["size"] for f in rec["files"]), rec))
    found.sort(key=lambda t: (version_key(t.release), t.platform), reverse=True)
    return Scan(root, found, damaged)


def tidy(root: Path, timeout: float) -> list[str]:
    """:func:`cudaredist.prefixes.tidy` for each toolkit of ``root`` (a killed uninstall leaves its files
    inside it) and each that a killed run left something beside (a swap cut short is put back): before
    the no-op check, so that it needs no network."""
    return [action for name, _ in _names(root) for action in tidy_prefix(root / name, timeout)]


def _names(root: Path) -> list[tuple[str, re.Match[str]]]:
    """The toolkits of ``root`` (name, its parts), and those a killed run left something beside."""
    found = {m["name"] if m else e.name for e in (root.iterdir() if root.is_dir() else ())
             if (m := _LEFTOVER.match(e.name)) or not fsops.is_link(e)}
    return [(name, n) for name in sorted(found) if (n := _NAME.match(name))]


def _make_junction(target: Path, link: Path) -> None:  # pragma: no cover - Windows only
    """A directory junction: needs no privilege, unlike a symlink (tests replace it)."""
    import _winapi

    _winapi.CreateJunction(str(target), str(link))  # type: ignore[attr-defined]


def _points_at(link: Path) -> str | None:
    """The name of the sibling ``link`` points at (a symlink's relative target, a junction's
    absolute one), or None when it is not a link."""
    if not fsops.is_link(link):
        return None
    try:
        return ntpath.basename(os.readlink(link).rstrip("\\/")) if WINDOWS else os.readlink(link)
    except OSError:
        return None


def _point(link: Path, target_name: str) -> None:
    """Make ``link`` point at the sibling ``target_name``, replacing what is there (atomically
    on POSIX); raises OSError when the link is not there afterwards."""
    if WINDOWS:
        if fsops.is_link(link):
            fsops.remove_link(link)  # the junction, never its target's contents
        try:
            _make_junction(link.parent / target_name, link)
            if _points_at(link) != target_name:  # verify: a call that "worked" and made nothing failed
                raise OSError(errno.ENOENT, f"the junction was not created (it should point at "
                                            f"{target_name})", str(link))
        except OSError:
            if os.path.isdir(link) and not fsops.is_link(link):
                with contextlib.suppress(OSError):
                    os.rmdir(link)  # the empty directory a failed CreateJunction leaves (Wine does)
            raise
        return
    tmp = link.parent / f".{link.name}.{uuid.uuid4().hex[:8]}.tmp"
    os.symlink(target_name, tmp, target_is_directory=True)
    try:
        os.replace(tmp, link)
    finally:
        if os.path.lexists(tmp):
            os.unlink(tmp)


LINKS_LOCK = ".cudaredist-links.lock"


def link_trains(root: Path, *, timeout: float,
                warn: Callable[[str], None] = lambda _text: None) -> list[tuple[str, str]]:
    """:func:`update_train_links` under the install dir's lock: of two installs finishing at once,
    the second sees the first one's toolkit, so the newest patch always ends up linked."""
    if not root.is_dir():
        return []
    try:
        with hold(root / LINKS_LOCK, timeout, f"the train links of {root} are busy: another cudaredist "
                  f"process held them for more than {timeout:g}s; retry, or raise --lock-timeout", root,
                  doing="lock the train links of", where=root, option="--install-dir"):
            return update_train_links(root, warn)
    except KeyboardInterrupt as exc:
        raise Interrupted(f"interrupted while updating the train links of {root} (cuda-X.Y-<platform>): "
                          "the toolkits there are complete, but a link may still name an earlier patch or "
                          f"one removed; `cudaredist list --install-dir {root}` shows them, and the next "
                          "install or uninstall there puts the links right", signum=signum_of(exc)) from None


def update_train_links(root: Path, warn: Callable[[str], None]) -> list[tuple[str, str]]:
    """Point every ``cuda-X.Y-<platform>`` link at the newest installed X.Y.z; drop links whose train
    has none left. Returns the (link, target) pairs now in place, each checked to be there; a link
    that cannot be made is left out and ``warn`` told (the toolkit itself is installed)."""
    best: dict[str, str] = {}
    for t in scan(root).toolkits:  # newest first
        best.setdefault(f"cuda-{'.'.join(t.release.split('.')[:2])}-{t.platform}", t.path.name)
    for link_name, target in best.items():
        link = root / link_name
        if _points_at(link) == target:
            continue
        if os.path.lexists(link) and not fsops.is_link(link):
            raise PrefixError(f"{link} exists and is not a link cudaredist made; move it away",
                              prefix=str(link))
        try:
            _point(link, target)
        except OSError as exc:
            kind = "junction" if WINDOWS else "symbolic link"
            warn(f"warning: could not make the train link {link} -> {target} ({exc.strerror or exc}); the "
                 f"toolkit is installed: use its full name, or `cudaredist find` (it needs no link). Is "
                 f"{root} on a filesystem without {kind}s?")
    for link in root.iterdir():  # train links whose train has none left (link_trains: root is a directory)
        if fsops.is_link(link) and re.match(r"^cuda-\d+\.\d+-", link.name) and link.name not in best:
            fsops.remove_link(link)
    return sorted((name, target) for name, target in best.items() if _points_at(root / name) == target)


def host() -> str | None:
    try:
        return profiles.host_platform()
    except CudaRedistError:
        return None


# -- the other toolkits of this machine (read-only) --------------------------------------------
@dataclass(frozen=True)
class Found:
    path: Path
    release: str           # "13.0.88" from version.json, "13.0" from cuda.h, "" when unknown
    how: str               # e.g. "CUDA_PATH", "/usr/local/cuda-*", "conda env", "pip wheels"
    managed: bool = False  # installed by cudaredist (it has an install record)

    def to_json(self) -> dict[str, Any]:
        return {"path": str(self.path), "release": self.release, "found_by": self.how,
                "cudaredist": self.managed}


def release_of(root: Path) -> str:
    """The toolkit release of the tree at ``root``, from version.json or include/cuda.h."""
    with contextlib.suppress(OSError, ValueError, AttributeError):
        data = json.loads((root / "version.json").read_text("utf-8"))
        version = data.get("cuda", {}).get("version") or data.get("cuda_cudart", {}).get("version")
        if isinstance(version, str):
            return version
    for header in (root / "include" / "cuda.h", *root.glob("targets/*/include/cuda.h")):
        with contextlib.suppress(OSError):
            m = re.search(r"#define\s+CUDA_VERSION\s+(\d+)", header.read_text("utf-8", "replace"))
            if m:
                return f"{int(m[1]) // 1000}.{int(m[1]) % 1000 // 10}"
    return ""


def _is_toolkit(root: Path) -> bool:
    return (root / "bin").is_dir() and (
        any((root / "bin" / n).exists() for n in ("nvcc", "nvcc.exe"))
        or (root / "include" / "cuda_runtime.h").is_file())


def _candidates(environ: Mapping[str, str], prefixes: Iterable[str]) -> Iterable[tuple[Path, str]]:
    versioned = sorted(v for v in environ if re.fullmatch(r"CUDA_PATH_V\d+_\d+", v))
    for var in ("CUDA_PATH", "CUDA_HOME", *versioned):
        if environ.get(var):
            yield Path(environ[var]), var
    for p in sorted(glob.glob("/usr/local/cuda*")):
        yield Path(p), "/usr/local/cuda*"
    if environ.get("CONDA_PREFIX"):
        conda = Path(environ["CONDA_PREFIX"])
        yield (conda / "Library" if WINDOWS else conda), "conda env (CONDA_PREFIX)"
    for sp in prefixes:
        # NVIDIA's wheels: nvidia/cu13 (13.x, one tree) or nvidia/cuda_nvcc (12.x, one per component)
        for sub in ("nvidia/cu13", "nvidia/cu12", "nvidia/cuda_nvcc"):
            yield Path(sp) / sub, f"pip wheels ({sys.executable})"


def system_toolkits(environ: Mapping[str, str] | None = None,
                    site_dirs: Iterable[str] | None = None) -> list[Found]:
    """Toolkits on this machine, each once (by real path), in the order they were found."""
    environ = os.environ if environ is None else environ
    if site_dirs is None:
        site_dirs = [*site.getsitepackages(), site.getusersitepackages()]
    seen: dict[str, Found] = {}
    for path, how in _candidates(environ, site_dirs):
        if _is_toolkit(path) and (real := os.path.realpath(path)) not in seen:
            seen[real] = Found(path, release_of(path), how, (path / RECORD_DIR).is_dir())
    return list(seen.values())
