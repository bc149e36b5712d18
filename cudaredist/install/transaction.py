"""The install transaction: fetch (cache first), extract into a staging tree, swap it into place.

A prefix is either as it was or complete: the tree is built beside it and renamed
over it only after every archive verified and extracted; the previous tree is kept
until the new one is in place and restored if the swap fails. A per-prefix file
lock serialises installers; leftovers of a killed run are cleaned by the next one.
"""

from __future__ import annotations

import io
import json
import os
import shutil
import tempfile
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from cudaredist import fsops, hostfixes, interrupts, prefixes, record, sbom
from cudaredist.drift import holds, profile_specs
from cudaredist.errors import PrefixError
from cudaredist.fetch.fetcher import StreamBroken
from cudaredist.install.build import Build, Builder
from cudaredist.localfs import UMASK, check_free_space, disk_error, is_case_insensitive, mb
from cudaredist.plan import Plan
from cudaredist.profiles import component_title, cross_rule, is_windows, platform_rule
from cudaredist.sources import location_argv
from cudaredist.tree.staging import FileRecord, Tree


@dataclass(frozen=True)
class InstallResult:
    prefix: Path
    noop: bool
    downloaded: int = 0
    cached: int = 0
    files: int = 0
    seconds: float = 0.0
    warnings: tuple[str, ...] = ()  # for stderr even when quiet: e.g. an old tree left behind


def swap_into_place(staging: Path, prefix: Path, warn: Callable[[str], None] | None = None,
                    swapped: Callable[[], None] | None = None) -> None:
    """Rename ``staging`` over ``prefix``, keeping the previous tree until the new one is in place.

    The renames are one step that Ctrl-C waits for (``swapped`` is called at its end). Once the new
    tree is in place the install has succeeded: the previous tree is renamed out of the way of
    :func:`~cudaredist.prefixes.recover`'s restore (``-gone-``) and deleted; a file in it that
    another process holds leaves it behind, with ``warn`` told, for the next run to remove."""
    old: Path | None = None
    with interrupts.deferred():
        if os.path.lexists(prefix):
            old = prefix.parent / f".{prefix.name}.cudaredist-old-{uuid.uuid4().hex[:8]}"
            try:
                fsops.rename(prefix, old)
            except OSError as exc:
                held = fsops.holder_hint(exc)
                if not held and getattr(exc, "winerror", None) == 5:
                    # Windows refuses to rename a directory while a file in it is open: which one?
                    inside = fsops.find_held(prefix)
                    held = f"another process has {inside} open" if inside else ""
                raise PrefixError(
                    f"cannot move the existing {prefix} aside: "
                    + (f"{held}. Close it and run the install again"
                       if held else f"{exc.strerror}; is a file in it open, or is it a mount point?")
                    + "; the prefix was left as it was", prefix=str(prefix)) from exc
        try:
            fsops.rename(staging, prefix)
        except BaseException as exc:  # the previous tree goes back, whatever stopped the rename
            if old is not None and not os.path.lexists(prefix):
                fsops.rename(old, prefix)
            if not isinstance(exc, OSError):
                raise
            raise PrefixError(f"cannot move the new tree into {prefix} ({exc.strerror}); the previous "
                              "tree was restored", prefix=str(prefix)) from exc
        gone: Path | None = None
        if old is not None:
            gone = old.with_name(old.name.replace("-old-", "-gone-"))
            try:
                os.rename(old, gone)  # once: a swap that finished is never undone by recover()
            except OSError:
                gone = old
        if swapped is not None:
            swapped()
    if gone is None:
        return
    try:
        fsops.rmtree(gone)
    except OSError as exc:
        if warn is not None:
            warn(f"warning: {prefixes.not_removed(gone, exc)}")


def interrupted_text(prefix: Path, plan: Plan, *, swapped: bool) -> str:
    """What an install that Ctrl-C ended left in ``prefix``, said truthfully."""
    if not swapped:
        return f"interrupted; {prefix} was left as it was (CUDA {plan.release} was not installed)"
    left = [p for p in prefixes.leftovers(prefix) if "-gone-" in p.name or "-stage-" in p.name]
    return (f"interrupted after the new tree was swapped in: {prefix} holds CUDA {plan.release} "
            f"({plan.platform}, {plan.profile}), complete"
            + (f"; the next cudaredist run on this prefix removes {', '.join(p.name for p in left)}"
               if left else ""))


def version_json(plan: Plan) -> bytes:
    """``version.json`` at the tree root, in the format NVIDIA's installer writes: CMake's
    FindCUDAToolkit and other tools read the toolkit's version from it, and a tree without nvcc
    (the ``runtime`` profile) has no other. The toolkit as a whole is NVIDIA's own key ``cuda``
    (the component the record files the file under); the display names are NVIDIA's, from
    ``[names]`` in profiles.toml, and a component not listed there gets its own key."""
    body = {"cuda": {"name": "CUDA SDK", "version": plan.release}}
    for item in sorted(plan.items, key=lambda i: i.component):
        body[item.component] = {"name": component_title(item.component), "version": item.version}
    # NVIDIA's file: 3-space indent, keys in name order, a trailing newline
    return (json.dumps(body, indent=3) + "\n").encode()


class Installer(Builder):
    def install(self, plan: Plan, prefix: Path | str, *, reinstall: bool = False,
                replace_foreign: bool = False, requested: Sequence[str] = (),
                host_fixes: bool = True) -> InstallResult:
        """``reinstall``: build the tree again even if the prefix holds this plan (or its record is
        unreadable); ``replace_foreign``: replace a prefix that holds no cudaredist install;
        ``host_fixes``: apply the known host fixes (:mod:`cudaredist.hostfixes`)."""
        t0 = time.monotonic()
        prefix = prefixes.canonical_prefix(prefix)
        self.cache.prepare()  # a --cache-dir that is not a cache is refused before anything is written
        warnings: list[str] = []
        swapped: list[bool] = []
        try:
            with prefixes.prefix_lock(prefix, self.lock_timeout):
                for action in prefixes.recover(prefix):
                    (warnings.append if action.startswith("warning: ") else self.reporter.message)(action)
                # an unreadable record's error says to reinstall with --reinstall: then it is not read
                held = (record.read_record(prefix) or {}) if not reinstall and prefix.is_dir() else {}
                if held and holds(held, plan) and not hostfixes.pending(prefix, held, host_fixes):
                    return InstallResult(prefix, noop=True, seconds=time.monotonic() - t0,
                                         warnings=tuple(warnings))
                if not replace_foreign:
                    prefixes.refuse_foreign(prefix)
                try:
                    staging = Path(tempfile.mkdtemp(dir=prefix.parent,
                                                    prefix=f".{prefix.name}.cudaredist-stage-"))
                except OSError as exc:
                    raise disk_error(exc, path=prefix.parent / f".{prefix.name}.cudaredist-stage-*",
                                     where=prefix.parent) from exc
                try:
                    # mkdtemp's 0700 would hide the toolkit from other users; the umask was read at start-up
                    os.chmod(staging, 0o777 & ~UMASK)
                    self._check_space(plan, staging)
                    try:
                        files, downloaded, cached = self._build(plan, staging, prefix)
                    except StreamBroken as broken:
                        # (its __cause__ is gone: the build re-raises from None)
                        self.reporter.message(f"{broken.args[0]}; building the tree again, without "
                                              "extracting while downloading")
                        fsops.rmtree(staging)
                        staging.mkdir()
                        files, downloaded, cached = self._build(plan, staging, prefix, stream=False)
                    outcomes: list[hostfixes.Outcome] = []
                    if host_fixes:  # each fix said in one line; one that does not fit its file is a warning
                        files, outcomes = hostfixes.apply(staging, files, plan)
                        for o in outcomes:
                            (warnings.append if o.skipped else self.reporter.message)(o.line())
                    meant = profile_specs(plan.source, plan.profile, plan.release, plan.platform)
                    made = record.build_record(plan, files, served=self.fetcher.served,
                                               links=self._complete(plan, staging), requested=requested,
                                               meant=[str(s) for s in meant], location=location_argv(
                                                   plan.source, plan.base_url, plan.channel))
                    if fixed := hostfixes.applied_json(outcomes):
                        made[hostfixes.RECORD_KEY] = fixed
                    made["sbom"] = sbom.write(staging, made, self.cache.root / "sbom")
                    record.write_record(staging, made)
                    swap_into_place(staging, prefix, warn=warnings.append,
                                    swapped=lambda: swapped.append(True))
                except BaseException:
                    fsops.rmtree(staging)
                    raise
            return InstallResult(prefix, noop=False, downloaded=downloaded, cached=cached,
                                 files=len(files), seconds=time.monotonic() - t0, warnings=tuple(warnings))
        except KeyboardInterrupt as exc:
            if isinstance(exc, interrupts.Interrupted):
                raise
            raise interrupts.Interrupted(interrupted_text(prefix, plan, swapped=bool(swapped)),
                                         signum=interrupts.signum_of(exc)) from None

    def _check_space(self, plan: Plan, staging: Path) -> None:
        """Refuse before downloading when a disk clearly cannot hold what lands on it.

        The estimate is a lower bound, so the check never refuses an install that would fit: an
        unpacked tree is at least as big as its compressed archives (2-4 times for CUDA's), and
        archives not cached yet land on the cache's disk first: this one when the cache shares it,
        else the cache's, checked on its own.
        """
        needed = plan.total_size
        try:  # the cache root exists: install() prepared it
            same_disk = os.stat(staging).st_dev == os.stat(self.cache.root).st_dev
        except OSError:
            same_disk = False
        missing = [it for it in plan.items if self.cache.lookup(it.archive.sha256, it.archive.size) is None]
        downloads = sum(it.archive.size for it in missing)
        if same_disk:
            needed += downloads
        elif missing:
            check_free_space(self.cache.root, downloads, option="--cache-dir",
                             what=f"the download of {len(missing)} archives into the cache")
        check_free_space(staging.parent, needed,
                         what=f"the tree of {len(plan.items)} archives ({mb(plan.total_size)} compressed"
                              + (", plus their downloads into the cache on the same disk)" if same_disk
                                 and needed > plan.total_size else ")"))

    def _build(self, plan: Plan, staging: Path, prefix: Path, *,
               stream: bool = True) -> tuple[list[FileRecord], int, int]:
        self.fetcher.transport.resume()
        tree = Tree(staging, dest=prefix,
                    case_insensitive=is_windows(plan.platform) or is_case_insensitive(staging))
        build = Build(self, plan, tree, stream=stream)
        build.run()
        if is_windows(plan.platform):
            # MinGW's ld cannot link 13.x cudart.lib (MSVC objects): GNU import libraries beside it
            # (imported here: a Linux tree's install does without its PE reader, 2 ms of start-up)
            from cudaredist.tree.implib import add_import_libraries

            add_import_libraries(tree, warn=self.reporter.message)
        # NVIDIA's version.json at the root: in the record, verified and uninstalled like the rest
        tree.add_file("version.json", io.BytesIO(version_json(plan)), 0o644, "cuda", "version.json")
        return tree.finish(), build.downloaded, build.cached

    def _complete(self, plan: Plan, staging: Path) -> list[dict[str, str]]:
        """Platform fix-ups from profiles.toml (e.g. ``lib64 -> lib`` on Linux)."""
        made: list[dict[str, str]] = []
        rule = cross_rule(plan.platform, plan.host).links if plan.host else platform_rule(plan.platform).links
        for name, target in rule:
            if (staging / target).is_dir() and not os.path.lexists(staging / name):
                try:
                    fsops.symlink(target, staging / name, directory=True)
                    made.append({"path": name, "link": target})
                except OSError:
                    shutil.copytree(staging / target, staging / name, symlinks=True)
                    # uninstall removes a directory where a link was recorded only when it made it
                    made.append({"path": name, "link": target, "copy": "directory"})
        return made

