"""ELF SONAME and the library link chains (libx.so -> libx.so.13 -> libx.so.13.0.96) an archive left out.

NVIDIA's wheels carry no symlinks; the tree gets them back from each library's SONAME.
"""

from __future__ import annotations

import os
import re
import struct
from collections.abc import Callable, Iterable, Iterator
from typing import IO, TYPE_CHECKING

if TYPE_CHECKING:
    from cudaredist.tree.staging import Tree

_DEV_LIB = re.compile(r"^lib[^/]*\.so(?:\.\d+)*$")
_PT_LOAD, _PT_DYNAMIC = 1, 2
_DT_NULL, _DT_STRTAB, _DT_SONAME = 0, 5, 14
# by EI_CLASS (1: 32-bit, 2: 64-bit): where e_phoff is, and the formats of (e_phoff, e_phentsize,
# e_phnum), of a program header as (type, offset, vaddr, filesz) and of a dynamic entry (tag, value)
_CLASSES = {1: (0x1C, "I10xHH", "III4xI12x", "iI"), 2: (0x20, "Q14xHH", "I4xQQ8xQ16x", "qQ")}


def read_soname(fh: IO[bytes]) -> str | None:
    """DT_SONAME of an ELF shared object, read through its program headers (as the loader does)."""
    try:
        head = fh.read(64)
        if len(head) < 52 or head[:4] != b"\x7fELF" or head[4] not in (1, 2) or head[5] not in (1, 2):
            return None
        e = "<" if head[5] == 1 else ">"
        at, fields, ph_fmt, dyn_fmt = _CLASSES[head[4]]
        phoff, phentsize, phnum = struct.unpack_from(e + fields, head, at)
        ph_fmt, dyn_fmt = e + ph_fmt, e + dyn_fmt
        if phentsize < struct.calcsize(ph_fmt) or not 0 < phnum < 4096:
            return None
        fh.seek(phoff)
        table = fh.read(phentsize * phnum)
        loads: list[tuple[int, int, int]] = []  # (vaddr, offset, filesz)
        dynamic: tuple[int, int] | None = None
        for i in range(phnum):
            ptype, offset, vaddr, filesz = struct.unpack_from(ph_fmt, table, i * phentsize)
            if ptype == _PT_LOAD:
                loads.append((vaddr, offset, filesz))
            elif ptype == _PT_DYNAMIC:
                dynamic = (offset, min(filesz, 1 << 20))
        if dynamic is None:
            return None
        fh.seek(dynamic[0])
        dyn = fh.read(dynamic[1])
        step = struct.calcsize(dyn_fmt)
        strtab = soname = None
        for off in range(0, len(dyn) - step + 1, step):
            tag, val = struct.unpack_from(dyn_fmt, dyn, off)
            if tag == _DT_NULL:
                break
            if tag == _DT_STRTAB:
                strtab = val
            elif tag == _DT_SONAME:
                soname = val
        if strtab is None or soname is None:
            return None
        base = next((o + (strtab - v) for v, o, n in loads if v <= strtab < v + n), None)
        if base is None:
            return None
        fh.seek(base + soname)
        name = fh.read(4096).split(b"\0", 1)[0].decode("utf-8")
    except (struct.error, OSError, UnicodeDecodeError, ValueError):
        return None
    return name if name and "/" not in name and name not in (".", "..") else None


def soname_links(filename: str, soname: str) -> list[tuple[str, str]]:
    """(link name, target) pairs in the library's directory: SONAME -> file, libX.so -> SONAME."""
    links: list[tuple[str, str]] = []
    if soname != filename:
        links.append((soname, filename))
    dev = soname[: soname.index(".so") + 3] if ".so" in soname else ""
    if dev and dev not in (soname, filename):
        links.append((dev, soname))
    return links


def chain_links(paths: Iterable[str], soname_of: Callable[[str], str | None],
                taken: Callable[[str], bool]) -> Iterator[tuple[str, str]]:
    """(link path, target) for ``libX.so -> libX.so.N -> libX.so.N.M.P`` beside each shared library.

    ``soname_of`` reads a library's DT_SONAME (None: not an ELF shared object); a link whose
    path ``taken`` says is in use is left out. Lazy, so a caller that creates each link before
    asking for the next one sees its own links as taken.
    """
    for rel in sorted(set(paths)):
        d, _, name = rel.rpartition("/")
        if not _DEV_LIB.match(name):
            continue
        soname = soname_of(rel)
        if not soname:
            continue
        for link, target in soname_links(name, soname):
            link_rel = f"{d}/{link}" if d else link
            if not taken(link_rel):
                yield link_rel, target


def add_soname_links(tree: Tree, paths: Iterable[str], *, component: str, archive: str) -> None:
    """Restore the chains of :func:`chain_links` in an extracted tree (the wheels carry no symlinks).

    The SONAME comes from the ELF itself; a link whose name the archive already uses is left alone
    (``tree`` may hold other archives' files: the staging tree, where no unpacked entry is kept).
    """

    def soname_of(rel: str) -> str | None:
        full = tree.root / rel
        if full.is_symlink() or not full.is_file():
            return None
        with open(full, "rb") as fh:
            return read_soname(fh)

    def taken(rel: str) -> bool:
        return tree.component_of(rel) == component or os.path.isdir(tree.root / rel)

    for link_rel, target in chain_links(paths, soname_of, taken):
        tree.add_symlink(link_rel, target, component, archive)
