"""A minimal PE DLL built in Python (no toolchain): headers, .text, .data and an export table.

Enough for the loader-free parts of an import library: the export directory, code and
data exports, a forwarder and an export by ordinal only.
"""

from __future__ import annotations

import struct

AMD64 = 0x8664
ARM64 = 0xAA64
_TEXT, _DATA, _EDATA = 0x1000, 0x2000, 0x3000
_FILE_ALIGN = 0x200


def make_dll(dll: str = "tiny64_1.dll", *, code: tuple[str, ...] = ("alpha", "gamma"),
             data: tuple[str, ...] = ("beta",), forwards: dict[str, str] | None = None,
             ordinal_only: int = 1, machine: int = AMD64, pe32: bool = False) -> bytes:
    """Exports: each ``code`` name points into .text, each ``data`` name into .data, each
    ``forwards`` name forwards to "OTHER.name"; ``ordinal_only`` more unnamed code exports."""
    forwards = forwards or {}
    # export address table: named ones first (in the order given), then the unnamed ones
    named = [(n, "code") for n in code] + [(n, "data") for n in data] + [(n, "fwd") for n in forwards]
    nfuncs = len(named) + ordinal_only
    edata = bytearray(40)
    funcs_off = len(edata)
    edata += bytes(4 * nfuncs)
    names_off = len(edata)
    edata += bytes(4 * len(named))
    ords_off = len(edata)
    edata += bytes(2 * len(named))

    def put_str(s: str) -> int:
        off = len(edata)
        edata.extend(s.encode() + b"\0")
        return _EDATA + off

    name_rva = put_str(dll)
    funcs = []
    for i, (n, kind) in enumerate(named):
        if kind == "code":
            funcs.append(_TEXT + 16 * i)
        elif kind == "data":
            funcs.append(_DATA + 8 * i)
        else:
            funcs.append(put_str(forwards[n]))
    funcs += [_TEXT + 0x100 + 16 * i for i in range(ordinal_only)]
    # the name pointer table is sorted by name (the loader binary-searches it)
    order = sorted(range(len(named)), key=lambda i: named[i][0])
    name_ptrs = {i: put_str(named[i][0]) for i in order}
    struct.pack_into(f"<{nfuncs}I", edata, funcs_off, *funcs)
    struct.pack_into(f"<{len(named)}I", edata, names_off, *(name_ptrs[i] for i in order))
    struct.pack_into(f"<{len(named)}H", edata, ords_off, *order)
    struct.pack_into("<IIHHIIIIIII", edata, 0, 0, 0, 0, 0, name_rva, 1, nfuncs, len(named),
                     _EDATA + funcs_off, _EDATA + names_off, _EDATA + ords_off)
    export_size = len(edata)

    text = b"\xc3" * 0x200
    data_sec = bytes(0x200)
    sections = [(b".text", _TEXT, text, 0x60000020), (b".data", _DATA, data_sec, 0xC0000040),
                (b".edata", _EDATA, bytes(edata), 0x40000040)]
    opt_size = 224 if pe32 else 240
    headers_size = _FILE_ALIGN
    raw: list[bytes] = []
    table = bytearray()
    offset = headers_size
    for name, rva, content, flags in sections:
        size = -(-len(content) // _FILE_ALIGN) * _FILE_ALIGN
        table += struct.pack("<8sIIIIIIHHI", name, len(content), rva, size, offset, 0, 0, 0, 0, flags)
        raw.append(content.ljust(size, b"\0"))
        offset += size
    dos = bytearray(0x40)
    dos[:2] = b"MZ"
    struct.pack_into("<I", dos, 0x3C, 0x40)
    coff = struct.pack("<HHIIIHH", machine, len(sections), 0, 0, 0, opt_size, 0x2022)
    image_size = _EDATA + 0x1000
    if pe32:
        opt = struct.pack("<HBBIIIIIIIIIHHHHHHIIIIHHIIIIII", 0x10B, 2, 0, 0, 0, 0, _TEXT, _TEXT, _DATA,
                          0x10000000, 0x1000, _FILE_ALIGN, 4, 0, 0, 0, 4, 0, 0, image_size, headers_size,
                          0, 3, 0, 0x100000, 0x1000, 0x100000, 0x1000, 0, 16)
    else:
        opt = struct.pack("<HBBIIIIIQIIHHHHHHIIIIHHQQQQII", 0x20B, 2, 0, 0, 0, 0, _TEXT, _TEXT,
                          0x180000000, 0x1000, _FILE_ALIGN, 6, 0, 0, 0, 6, 0, 0, image_size, headers_size,
                          0, 3, 0x160, 0x100000, 0x1000, 0x100000, 0x1000, 0, 16)
    dirs = bytearray(16 * 8)
    struct.pack_into("<II", dirs, 0, _EDATA, export_size)
    head = bytes(dos) + b"PE\0\0" + coff + opt + bytes(dirs) + bytes(table)
    assert len(opt) + len(dirs) == opt_size, (len(opt), len(dirs))
    return head.ljust(headers_size, b"\0") + b"".join(raw)
