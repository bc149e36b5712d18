"""Import libraries for a Windows tree, built from the DLLs' export tables.

Two gaps, one format. GNU ld cannot link 13.x ``lib/x64/cudart.lib``, MSVC objects built with
control-flow guard and /GS (``undefined reference to __GSHandlerCheck``), so the tree gets
``lib/x64/libcudart.dll.a`` beside it (GNU ld takes ``libNAME.dll.a`` before ``NAME.lib``; MSVC
never reads it). And NVIDIA's wheels carry no import library for most DLLs (``cublas64_13.dll``
but no ``lib/x64/cublas.lib``): the tree gets one, which MSVC's link, lld-link and GNU ld read.

The library is what Microsoft's ``lib.exe`` and llvm-dlltool write (the PE/COFF
specification's "import library" format): an ``ar`` archive with a symbol table, one
*short import object* per export (an ``IMPORT_OBJECT_HEADER`` and two names; the linker
synthesises the thunk and the import table entries), and three small COFF objects that
make the DLL's import directory entry: ``__IMPORT_DESCRIPTOR_<dll>`` (its ``.idata$2``
entry and name), ``__NULL_IMPORT_DESCRIPTOR`` (the directory's terminator) and
``<0x7f><dll>_NULL_THUNK_DATA`` (the terminators of its lookup and address tables).

Exports: every named export is imported by name. One whose address lies in a section
that is not executable is *data*: its object defines only ``__imp_NAME`` (the address
of the import table slot), as MSVC's and GNU's import libraries do, so C code reaches it
through ``__declspec(dllimport)``. A forwarded export (``NTDLL.RtlFoo``) is imported as
code from this DLL; the loader follows the forward. Exports by ordinal only have no name
to link against and are left out.
"""

from __future__ import annotations

import io
import mmap
import re
import struct
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from cudaredist.errors import ImportLibraryError
from cudaredist.tree.staging import Tree

# COFF machine types (PE/COFF specification, "Machine Types")
MACHINE_I386 = 0x14C
MACHINE_AMD64 = 0x8664
MACHINE_ARM64 = 0xAA64
# relocation type "32-bit address relative to the image base" (an RVA), per machine
_ADDR32NB = {MACHINE_AMD64: 0x3, MACHINE_ARM64: 0x2}
# x86 is left out on purpose: a 32-bit link resolves a __stdcall function (CUDA's CUDARTAPI on
# x86) by its decorated name, _name@N with N the bytes of its arguments, which the DLL's export
# table does not carry (llvm-dlltool needs a .def file that has them). An import library written
# from the DLL alone would name symbols no 32-bit object asks for; CUDA 12 and later publish no
# 32-bit Windows libraries at all.
X86_REFUSED = ("a 32-bit (x86) DLL: its import library needs each __stdcall function's decorated name "
               "(_name@N), which the DLL does not export, so cudaredist writes none (CUDA 12 and later "
               "have no 32-bit Windows libraries; link against NVIDIA's own .lib)")

_SCN_MEM_EXECUTE = 0x20000000
# the COFF file header and a section header, as a DLL holds them and as an object is written
_FILE_HEADER = struct.Struct("<HHIIIHH")
_SECTION = struct.Struct("<8sIIIIIIHHI")
_IMPORT_CODE, _IMPORT_DATA = 0, 1
_IMPORT_NAME = 1  # import by the name as given (no prefix or decoration stripped)

# The DLL file name is the library name plus a bitness and version tail:
# cudart64_13.dll -> cudart, nvrtc64_130_0.dll -> nvrtc, nvJitLink_130_0.dll -> nvJitLink.
_DLL_TAIL = re.compile(r"(?:32|64)?(?:_\d+)*$")


@dataclass(frozen=True)
class Export:
    name: str
    ordinal: int
    data: bool = False       # the address lies in a non-executable section
    forward: str = ""        # "OTHERDLL.Name" for a forwarded export


@dataclass(frozen=True)
class DllExports:
    dll: str                 # the DLL's own name from its export directory, e.g. "cudart64_13.dll"
    machine: int
    exports: tuple[Export, ...]


# -- reading a PE DLL ----------------------------------------------------------------------------
def read_exports(data: bytes | mmap.mmap, *, where: str = "the DLL") -> DllExports:
    """The named exports of a PE image (PE32 or PE32+), from its bytes or a map of its file."""
    def bad(what: str) -> ImportLibraryError:
        return ImportLibraryError(f"{where} is not a well-formed PE DLL: {what}", dll=where)

    try:
        if data[:2] != b"MZ":
            raise bad("no MZ header")
        pe = struct.unpack_from("<I", data, 0x3C)[0]
        if data[pe:pe + 4] != b"PE\0\0":
            raise bad("no PE signature")
        machine, nsections, _t, _p, _n, opt_size, _c = _FILE_HEADER.unpack_from(data, pe + 4)
        opt = pe + 4 + _FILE_HEADER.size
        magic = struct.unpack_from("<H", data, opt)[0]
        if magic not in (0x10B, 0x20B):
            raise bad(f"unknown optional header magic {magic:#x}")
        dirs = opt + (96 if magic == 0x10B else 112)  # PE32's data directories, or PE32+'s
        ndirs = struct.unpack_from("<I", data, dirs - 4)[0]
        table = opt + opt_size
        # (rva, virtual size, raw offset, raw size, flags) of each section
        sections = [(rva, max(vsize, rsize), roff, rsize, flags) for _n, vsize, rva, rsize, roff, *_r, flags
                    in (_SECTION.unpack_from(data, table + _SECTION.size * i) for i in range(nsections))]

        def section_of(rva: int) -> tuple[int, int, int, int, int]:
            for s in sections:
                if s[0] <= rva < s[0] + s[1]:
                    return s
            raise bad(f"RVA {rva:#x} lies in no section")

        def at(rva: int) -> int:
            s = section_of(rva)
            if rva - s[0] >= s[3]:
                raise bad(f"RVA {rva:#x} has no file data")
            return s[2] + rva - s[0]

        def cstr(rva: int) -> str:
            off = at(rva)
            end = data.find(b"\0", off)
            if end < 0:
                raise bad(f"the name at RVA {rva:#x} has no end")
            return data[off:end].decode("ascii")

        if ndirs < 1:
            raise bad("no data directories")
        exp_rva, exp_size = struct.unpack_from("<II", data, dirs)
        if exp_rva == 0 or exp_size == 0:
            raise ImportLibraryError(f"{where} exports nothing (it has no export table)", dll=where)
        e = at(exp_rva)
        (name_rva, base, nfuncs, nnames, funcs_rva, names_rva,
         ords_rva) = struct.unpack_from("<12xIIIIIII", data, e)
        funcs = struct.unpack_from(f"<{nfuncs}I", data, at(funcs_rva)) if nfuncs else ()
        names = struct.unpack_from(f"<{nnames}I", data, at(names_rva)) if nnames else ()
        ords = struct.unpack_from(f"<{nnames}H", data, at(ords_rva)) if nnames else ()
        exports: list[Export] = []
        for name_ptr, index in zip(names, ords, strict=True):
            if index >= nfuncs:
                raise bad(f"export ordinal index {index} beyond its {nfuncs} addresses")
            target = funcs[index]
            name = cstr(name_ptr)
            if exp_rva <= target < exp_rva + exp_size:
                exports.append(Export(name, base + index, forward=cstr(target)))
            else:
                exports.append(Export(name, base + index, data=not section_of(target)[4] & _SCN_MEM_EXECUTE))
        return DllExports(cstr(name_rva), machine, tuple(sorted(exports, key=lambda x: x.name)))
    except (struct.error, IndexError, UnicodeDecodeError) as exc:
        raise ImportLibraryError(f"{where} is not a well-formed PE DLL ({exc}); cannot read its "
                                 "export table", dll=where) from exc


# -- writing the import library --------------------------------------------------------------------
_SYM_EXTERNAL, _SYM_STATIC, _SYM_SECTION = 2, 3, 0x68
_DATA_RW = 0x00000040 | 0x40000000 | 0x80000000  # initialized data, readable, writable
_ALIGN_2, _ALIGN_4, _ALIGN_8 = 0x00200000, 0x00300000, 0x00400000


def _coff(machine: int, sections: Sequence[tuple[bytes, bytes, Sequence[tuple[int, int]], int]],
          symbols: Sequence[tuple[bytes, int, int, int]]) -> bytes:
    """A COFF object: sections (name, data, relocations (offset, symbol index), flags) and
    symbols (name, value, section number, storage class)."""
    header_size = _FILE_HEADER.size + _SECTION.size * len(sections)
    body = bytearray()
    headers = bytearray()
    reloc_type = _ADDR32NB[machine]
    for name, content, relocs, flags in sections:
        offset = header_size + len(body)
        body += content
        reloc_off = header_size + len(body)
        for r_off, r_sym in relocs:
            body += struct.pack("<IIH", r_off, r_sym, reloc_type)
        headers += _SECTION.pack(name, 0, 0, len(content), offset if content else 0,
                                 reloc_off if relocs else 0, 0, len(relocs), 0, flags)
    strtab = bytearray()
    symtab = bytearray()
    for sym, value, section, storage in symbols:
        if len(sym) <= 8:
            symtab += sym.ljust(8, b"\0")
        else:  # a longer name is in the string table
            symtab += struct.pack("<II", 0, 4 + len(strtab))
            strtab += sym + b"\0"
        symtab += struct.pack("<IhHBB", value, section, 0, storage, 0)
    head = _FILE_HEADER.pack(machine, len(sections), 0, header_size + len(body), len(symbols), 0, 0)
    return head + bytes(headers) + bytes(body) + symtab + struct.pack("<I", 4 + len(strtab)) + bytes(strtab)


def _ar(members: Sequence[tuple[str, bytes, Sequence[bytes]]]) -> bytes:
    """A GNU-style ar archive with a first linker member ("/") indexing every member's symbols."""
    def member(name: bytes, data: bytes) -> bytes:
        # timestamp, owner, group 0 and mode 644: the same DLL always gives the same bytes
        head = b"%-16s%-12d%-6d%-6d%-8s%-10d`\n" % (name, 0, 0, 0, b"644", len(data))
        return head + data + b"\n" * (len(data) & 1)

    longnames = bytearray()
    bodies: list[bytes] = []
    for name, data, _syms in members:
        if len(name) < 16:
            bodies.append(member(f"{name}/".encode(), data))
        else:
            bodies.append(member(f"/{len(longnames)}".encode(), data))
            longnames += name.encode() + b"/\n"
    names = member(b"//", bytes(longnames)) if longnames else b""
    nsyms = sum(len(syms) for _n, _d, syms in members)
    strings = b"".join(s + b"\0" for _n, _d, syms in members for s in syms)
    offset = 8 + len(member(b"/", bytes(4 + 4 * nsyms + len(strings)))) + len(names)
    offsets: list[int] = []
    for body, (_name, _data, syms) in zip(bodies, members, strict=True):
        offsets += [offset] * len(syms)
        offset += len(body)
    symtab = member(b"/", struct.pack(f">I{nsyms}I", nsyms, *offsets) + strings)
    return b"!<arch>\n" + symtab + names + b"".join(bodies)


def import_library(info: DllExports) -> bytes:
    """The bytes of an import library for ``info`` (deterministic)."""
    dll = info.dll
    if info.machine == MACHINE_I386:
        raise ImportLibraryError(f"{dll} is {X86_REFUSED}", dll=dll)
    if info.machine not in _ADDR32NB:
        raise ImportLibraryError(f"{dll}: machine type {info.machine:#x} is not one an import library "
                                 "can be written for (x64, arm64)", dll=dll)
    stem = dll.rsplit(".", 1)[0] if "." in dll else dll
    descriptor = b"__IMPORT_DESCRIPTOR_" + stem.encode()
    thunk = b"\x7f" + stem.encode() + b"_NULL_THUNK_DATA"
    name = dll.encode("ascii") + b"\0"
    import_descriptor = _coff(info.machine, [
        # the import directory entry: lookup table RVA, stamp, forwarder chain, name RVA, IAT RVA
        (b".idata$2", bytes(20), [(12, 2), (0, 3), (16, 4)], _ALIGN_4 | _DATA_RW),
        (b".idata$6", name + b"\0" * (len(name) & 1), [], _ALIGN_2 | _DATA_RW),
    ], [
        (descriptor, 0, 1, _SYM_EXTERNAL),
        (b".idata$2", 0xC0000040, 1, _SYM_SECTION),
        (b".idata$6", 0, 2, _SYM_STATIC),
        (b".idata$4", 0xC0000040, 0, _SYM_SECTION),
        (b".idata$5", 0xC0000040, 0, _SYM_SECTION),
        (b"__NULL_IMPORT_DESCRIPTOR", 0, 0, _SYM_EXTERNAL),
        (thunk, 0, 0, _SYM_EXTERNAL),
    ])
    # the directory's terminator; the terminators of the lookup and address tables (one pointer each)
    null_descriptor = _coff(info.machine, [(b".idata$3", bytes(20), [], _ALIGN_4 | _DATA_RW)],
                            [(b"__NULL_IMPORT_DESCRIPTOR", 0, 1, _SYM_EXTERNAL)])
    null_thunk = _coff(info.machine, [(b".idata$5", bytes(8), [], _ALIGN_8 | _DATA_RW),
                                      (b".idata$4", bytes(8), [], _ALIGN_8 | _DATA_RW)],
                       [(thunk, 0, 1, _SYM_EXTERNAL)])
    members: list[tuple[str, bytes, Sequence[bytes]]] = [
        (dll, import_descriptor, [descriptor]),
        (dll, null_descriptor, [b"__NULL_IMPORT_DESCRIPTOR"]),
        (dll, null_thunk, [thunk]),
    ]
    for exp in info.exports:
        names = exp.name.encode("ascii") + b"\0" + name
        kind = _IMPORT_DATA if exp.data else _IMPORT_CODE
        # the hint is where the loader looks first in the export name table: its ordinal index
        short_import = struct.pack("<HHHHIIHH", 0, 0xFFFF, 0, info.machine, 0, len(names), 0,
                                   kind | (_IMPORT_NAME << 2)) + names
        syms = [b"__imp_" + exp.name.encode()] + ([] if exp.data else [exp.name.encode()])
        members.append((dll, short_import, syms))
    return _ar(members)


# -- the tree ----------------------------------------------------------------------------------------
# where a machine's import libraries live: bin/x64/cublas64_13.dll (or 12.x's bin/) -> lib/x64/
_ARCH_DIRS = {MACHINE_AMD64: "x64", MACHINE_ARM64: "arm64"}
_LIBRARY = re.compile(r"[A-Za-z][A-Za-z0-9_-]*")  # not nvrtc64_130_0.alt.dll's "nvrtc64_130_0.alt"


def library_name(dll_file: str) -> str:
    """The MSVC library name a runtime DLL belongs to: cudart64_13.dll -> cudart."""
    return _DLL_TAIL.sub("", dll_file.rsplit(".", 1)[0])


def _dll_exports(path: Path, rel: str) -> DllExports:
    """Through a map: only the headers and the export table are read (cublasLt64_13.dll: 480 MB)."""
    with open(path, "rb") as fh:
        try:
            view = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)
        except ValueError:  # an empty file
            return read_exports(b"", where=rel)
        with view:
            return read_exports(view, where=rel)


def add_import_libraries(tree: Tree, warn: Callable[[str], object] = lambda _msg: None) -> list[str]:
    """Write through ``tree`` (so the record hashes it) ``libNAME.dll.a`` beside each DLL's
    ``[nvvm/]lib/<arch>/NAME.lib``, or ``NAME.lib`` where there is none; returns the paths written.
    A name two DLLs claim is left alone (which one is meant is not guessed), and so is a DLL whose
    exports cannot be read (``warn`` says so: its users lose a link step, not the install)."""
    written: list[str] = []
    for base in ("", "nvvm/"):
        bin_dir = tree.root / base / "bin"
        if not bin_dir.is_dir() or bin_dir.is_symlink():
            continue
        claims: dict[tuple[str, str], list[tuple[str, DllExports]]] = {}
        for dll in sorted([*bin_dir.glob("*.[dD][lL][lL]"), *bin_dir.glob("*/*.[dD][lL][lL]")]):
            rel, name = dll.relative_to(tree.root).as_posix(), library_name(dll.name)
            if not _LIBRARY.fullmatch(name) or dll.is_symlink() or not dll.is_file():
                continue
            try:
                info = _dll_exports(dll, rel)
            except ImportLibraryError as exc:
                warn(f"{exc}; no import library is written for it (a link against {name} needs one)")
                continue
            if info.machine == MACHINE_I386:
                warn(f"{rel} is {X86_REFUSED}")
            elif info.machine in _ARCH_DIRS:
                lib_dir = f"{base}lib/{_ARCH_DIRS[info.machine]}"
                claims.setdefault((lib_dir, name.lower()), []).append((rel, info))
        for (lib_dir, key), found in sorted(claims.items(), key=lambda claim: claim[0]):
            here = tree.root / lib_dir
            present = {p.name.lower(): p.name for p in here.iterdir()} if here.is_dir() else {}
            msvc = present.get(f"{key}.lib")
            rel, info = found[0]
            target = f"lib{msvc[:-4]}.dll.a" if msvc else f"{library_name(Path(rel).name)}.lib"
            if len(found) > 1 or target.lower() in present:
                continue
            tree.add_file(f"{lib_dir}/{target}", io.BytesIO(import_library(info)), 0o644,
                          tree.component_of(rel) or "cudaredist", f"generated from {rel}")
            written.append(f"{lib_dir}/{target}")
    return written
