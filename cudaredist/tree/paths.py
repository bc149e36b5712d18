"""Archive member names -> paths in the toolkit tree, and the safety rules for them (pure)."""

from __future__ import annotations

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
    raw = name
    if any(ord(c) < 0x20 for c in name):
        raise UnsafeArchiveError(f"{archive}: member {raw!r} has control characters in its name; refused",
                                 archive=archive, member=raw)
    if "\\" in name and (zip_entry or WINDOWS):
        raise UnsafeArchiveError(
            f"{archive}: entry {raw!r} uses backslashes; refused (Windows reads them as "
            "directory separators)", archive=archive, member=raw)
    if name.startswith("/") or _DRIVE.match(name) or name.startswith("\\"):
        raise UnsafeArchiveError(f"{archive}: member {raw!r} is an absolute path; refused",
                                 archive=archive, member=raw)
    parts = [p for p in name.split("/") if p not in ("", ".")]
    if parts and parts[0].startswith("\\"):  # "./\\x": rooted once the "." is gone
        raise UnsafeArchiveError(f"{archive}: member {raw!r} is an absolute path; refused",
                                 archive=archive, member=raw)
    if ".." in parts:
        raise UnsafeArchiveError(f"{archive}: member {raw!r} contains '..'; refused",
                                 archive=archive, member=raw)
    # "./C:/x" or "top/C:/x": once the leading parts are gone, Windows reads "C:/x" as absolute
    if any(_DRIVE.match(p) for p in parts):
        raise UnsafeArchiveError(f"{archive}: member {raw!r} contains a drive letter; refused",
                                 archive=archive, member=raw)
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
    if target.startswith("/") or _DRIVE.match(target) or "\\" in target:
        raise UnsafeArchiveError(
            f"{archive}: symlink {link_path!r} -> {target!r} points to an absolute path; refused",
            archive=archive, member=link_path)
    if not target:
        raise UnsafeArchiveError(f"{archive}: symlink {link_path!r} has an empty target; refused",
                                 archive=archive, member=link_path)
    # Lexical normalisation is only right if no '..' follows a name: in "x/y/../.." the OS
    # resolves x/y first, and if another member made x/y a link to "..", this leaves the tree.
    parts = [p for p in target.split("/") if p not in ("", ".")]
    ups = 0
    while ups < len(parts) and parts[ups] == "..":
        ups += 1
    if ".." in parts[ups:]:
        raise UnsafeArchiveError(
            f"{archive}: symlink {link_path!r} -> {target!r} climbs with '..' after a name, which "
            "can leave the prefix through another link; refused", archive=archive, member=link_path)
    resolved = posixpath.normpath(posixpath.join(posixpath.dirname(link_path), target))
    if resolved == ".." or resolved.startswith("../") or resolved.startswith("/"):
        raise UnsafeArchiveError(
            f"{archive}: symlink {link_path!r} -> {target!r} leaves the prefix; refused",
            archive=archive, member=link_path)
    return resolved


def zip_entry_mode(create_system: int, external_attr: int, *, archive: str, member: str) -> int:
    """A zip entry's file mode from its central directory record (0o644 unless a Unix writer
    stored one); symlink entries are refused: a zip keeps no link a Windows tree could use."""
    unix_mode = (external_attr >> 16) & 0xFFFF if create_system == 3 else 0
    if stat.S_ISLNK(unix_mode):
        raise UnsafeArchiveError(f"{archive}: entry {member!r} is a symlink; zip archives with links "
                                 "are refused", archive=archive, member=member)
    return unix_mode & 0o777 or 0o644
