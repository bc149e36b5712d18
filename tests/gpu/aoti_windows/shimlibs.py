"""Windows import libraries for PyTorch's own DLLs, made from the Linux PyTorch of this machine.

AOTInductor's Windows cross-compile links the model DLL against the Windows PyTorch's torch.lib,
torch_cpu.lib and torch_cuda.lib (``aot_inductor.aoti_shim_library_path``; PyTorch's own test takes
them from a Windows wheel). The generated code calls only PyTorch's C shim (``aoti_torch_*``,
extern "C"), so these libraries list the C symbols that the Linux libtorch*.so of the same release
export, as torch.dll, torch_cpu.dll and torch_cuda.dll would; the model DLL links, and imports them
by those names. Written with cudaredist's own import-library writer. ``--cxx`` adds the C++ symbols
(MinGW mangles as Linux does, MSVC's torch.lib does not): the fallback when the C names do not link.

    shimlibs.py OUT TORCH_LIB_DIR [--cxx]
"""

import struct
import sys
from pathlib import Path

from cudaredist.tree.implib import MACHINE_AMD64, DllExports, Export, import_library

STT_OBJECT, STT_FUNC = 1, 2
SHT_DYNSYM = 11


def c_exports(so: Path, cxx: bool = False) -> list[Export]:
    """The defined global functions and objects of an ELF64 shared library, C names only unless ``cxx``."""
    data = so.read_bytes()
    shoff, = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum = struct.unpack_from("<HH", data, 0x3A)
    sections = [struct.unpack_from("<IIQQQQIIQQ", data, shoff + i * shentsize) for i in range(shnum)]
    out: dict[str, Export] = {}
    for _name, kind, _flags, _addr, offset, size, link, _info, _align, entsize in sections:
        if kind != SHT_DYNSYM:
            continue
        strtab = sections[link][4]
        for i in range(1, size // entsize):
            st_name, st_info, _o, shndx, _v, _s = struct.unpack_from("<IBBHQQ", data, offset + i * entsize)
            name = data[strtab + st_name:data.index(b"\0", strtab + st_name)].decode("latin-1")
            if 0 < shndx < 0xFF00 and st_info >> 4 in (1, 2) and st_info & 0xF in (STT_FUNC, STT_OBJECT) \
                    and (not name.startswith("_") or cxx and name.startswith("_Z")) and name.isascii():
                out[name] = Export(name, len(out) + 1, data=st_info & 0xF == STT_OBJECT)
    return sorted(out.values(), key=lambda e: e.name)


def main() -> None:
    out, torch_lib, cxx = Path(sys.argv[1]), Path(sys.argv[2]), "--cxx" in sys.argv[3:]
    out.mkdir(parents=True, exist_ok=True)
    for name in ("torch", "torch_cpu", "torch_cuda"):
        exports = c_exports(torch_lib / f"lib{name}.so", cxx)
        shims = sum(e.name.startswith("aoti_torch_") for e in exports)
        library = import_library(DllExports(f"{name}.dll", MACHINE_AMD64, tuple(exports)))
        (out / f"{name}.lib").write_bytes(library)
        print(f"{name}.lib: {len(exports)} exports of lib{name}.so ({shims} aoti_torch_*)")


if __name__ == "__main__":
    main()
