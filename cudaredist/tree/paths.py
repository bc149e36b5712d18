"""Archive member names -> paths in the toolkit tree, and the safety rules for them (pure)."""

from __future__ import annotations

import itertools
import posixpath
import re
import stat

from cudaredist.errors import UnsafeArchiveError
from cudaredist.fsops import WINDOWS

_DRIVE = re.compile(r"^[A-Za-z]:")


def clean_member(name: str, *, archive: str, zip_entry: bool = False) -> str:
    """A member name as a safe relative POSIX path, or :class:`UnsafeArchiveError`.

    Refused: absolute paths, drive letters, ``..`` anywhere, NUL/control characters,
    and in zips backslashes (a Windows extractor treats them as separators).
    """
    def refuse(why: str, kind: str = "member", because: str = "") -> UnsafeArchiveError:
        return UnsafeArchiveError(f"{archive}: {kind} {name!r} {why}; refused{because}", archive=archive,
                                  member=name)

    if any(ord(c) < 0x20 for c in name):
        raise refuse("has control characters in its name")
    if "\\" in name and (zip_entry or WINDOWS):
        raise refuse("uses backslashes", "entry", " (Windows reads them as directory separators)")
    parts = [p for p in name.split("/") if p not in ("", ".")]
    # "./\\x" is rooted once the "." is gone
    if name.startswith(("/", "\\")) or _DRIVE.match(name) or (parts and parts[0].startswith("\\")):
        raise refuse("is an absolute path")
    if ".." in parts:
        raise refuse("contains '..'")
    # "./C:/x" or "top/C:/x": once the leading parts are gone, Windows reads "C:/x" as absolute
    if any(_DRIVE.match(p) for p in parts):
        raise refuse("contains a drive letter")
    return "/".join(parts)


def strip_top(clean: str, top: str | None, *, archive: str) -> tuple[str, str]:
    """Split off the archive's single top folder; returns (top, rest)."""
    head, _, rest = clean.partition("/")
    if top is not None and head != top:
        raise UnsafeArchiveError(
            f"{archive}: member {clean!r} is outside the archive's top folder {top!r}; "
            "redist archives hold exactly one top folder", archive=archive, member=clean)
    return head, rest


def tree_path(rest: str, *, component: str, root: str = "") -> str:
    """Where a path inside the top folder goes in the tree (under ``root``, a folder of the tree).

    Each archive carries its own LICENSE at the top; they differ between components
    (CCCL's EULA is not the toolkit's), so they are kept per component.
    """
    if rest in ("LICENSE", "LICENSE.txt"):
        return f"licenses/{component}/{rest}"
    return f"{root}/{rest}" if root else rest


def link_target_inside(link_path: str, target: str, *, archive: str) -> str:
    """The tree path a symlink at ``link_path`` points to; refuses targets leaving the tree."""
    def refuse(why: str) -> UnsafeArchiveError:
        return UnsafeArchiveError(f"{archive}: symlink {link_path!r} -> {target!r} {why}; refused",
                                  archive=archive, member=link_path)

    if target.startswith("/") or _DRIVE.match(target) or "\\" in target:
        raise refuse("points to an absolute path")
    if not target:
        raise UnsafeArchiveError(f"{archive}: symlink {link_path!r} has an empty target; refused",
                                 archive=archive, member=link_path)
    # Lexical normalisation is only right if no '..' follows a name: in "x/y/../.." the OS
    # resolves x/y first, and if another member made x/y a link to "..", this leaves the tree.
    parts = [p for p in target.split("/") if p not in ("", ".")]
    if ".." in itertools.dropwhile(lambda p: p == "..", parts):
        raise refuse("climbs with '..' after a name, which can leave the prefix through another link")
    resolved = posixpath.normpath(posixpath.join(posixpath.dirname(link_path), target))
    if resolved == ".." or resolved.startswith(("../", "/")):
        raise refuse("leaves the prefix")
    return resolved


def zip_entry_mode(create_system: int, external_attr: int, *, archive: str, member: str) -> int:
    """A zip entry's file mode from its central directory record (0o644 unless a Unix writer
    stored one); symlink entries are refused: a zip keeps no link a Windows tree could use."""
    unix_mode = (external_attr >> 16) & 0xFFFF if create_system == 3 else 0
    if stat.S_ISLNK(unix_mode):
        raise UnsafeArchiveError(f"{archive}: entry {member!r} is a symlink; zip archives with links "
                                 "are refused", archive=archive, member=member)
    return unix_mode & 0o777 or 0o644
