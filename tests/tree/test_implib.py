"""GNU import libraries from a DLL's export table (cudaredist/tree/implib.py).

The reader and the archive layout are checked on a PE built in Python (tests/pe.py); the
whole path is checked with the real toolchain: a DLL built by MinGW, its import library
written by cudaredist, a program linked against it by GNU ld and run under Wine.
"""

from __future__ import annotations

import io
import re
import struct
import subprocess
from pathlib import Path

import pytest

from cudaredist.errors import ImportLibraryError
from cudaredist.tree.implib import (
    MACHINE_AMD64,
    MACHINE_ARM64,
    MACHINE_I386,
    DllExports,
    Export,
    add_import_libraries,
    import_library,
    library_name,
    read_exports,
)
from cudaredist.tree.staging import Tree
from tests.pe import make_dll
from tests.wintools import (  # noqa: F401
    imported_dlls,
    lld_link,
    llvm,
    mingw_gxx,
    mingw_objdump,
    run_under_wine,
    tool,
    wine_prefix,
)


# -- reading exports -------------------------------------------------------------------------------
@pytest.mark.parametrize("pe32", [pytest.param(False, id="pe32plus"), pytest.param(True, id="pe32")])
def test_reads_named_exports_with_kind(pe32: bool) -> None:
    info = read_exports(make_dll("tiny64_1.dll", code=("alpha", "gamma"), data=("beta",),
                                 forwards={"fwd": "OTHER.target"}, ordinal_only=2, pe32=pe32))
    assert info.dll == "tiny64_1.dll"
    assert info.machine == MACHINE_AMD64
    # ordinals follow the export address table (base 1); the unnamed ones are not listed
    assert info.exports == (
        Export("alpha", 1),
        Export("beta", 3, data=True),
        Export("fwd", 4, forward="OTHER.target"),
        Export("gamma", 2),
    )


@pytest.mark.parametrize("mangle", [
    pytest.param(lambda b: b"ZM" + b[2:], id="no-mz"),
    pytest.param(lambda b: b[:0x40] + b"XX\0\0" + b[0x44:], id="no-pe-signature"),
    pytest.param(lambda b: b[:0x100], id="truncated"),
    pytest.param(lambda b: b[:0xC8] + bytes(8) + b[0xD0:], id="no-export-table"),
])
def test_malformed_dll_is_one_clear_error(mangle: object) -> None:
    data = mangle(make_dll())  # type: ignore[operator]
    with pytest.raises(ImportLibraryError) as err:
        read_exports(data, where="bin/x64/x.dll")
    assert err.value.dll == "bin/x64/x.dll"
    assert "bin/x64/x.dll" in str(err.value)


# -- the archive -------------------------------------------------------------------------------------
def parse_ar(data: bytes) -> tuple[dict[bytes, int], list[tuple[int, str, bytes]]]:
    """(symbol -> member offset, [(offset, name, body)]) of a GNU/MS ar archive."""
    assert data[:8] == b"!<arch>\n"
    off, longnames, members, symbols = 8, b"", [], {}
    while off < len(data):
        head = data[off:off + 60]
        assert head[58:60] == b"`\n", head
        name, size = head[:16].decode().rstrip(), int(head[48:58])
        body = data[off + 60:off + 60 + size]
        if name == "/":
            n = struct.unpack_from(">I", body)[0]
            offsets = struct.unpack_from(f">{n}I", body, 4)
            names = body[4 + 4 * n:].split(b"\0")[:n]
            symbols = dict(zip(names, offsets, strict=True))
        elif name == "//":
            longnames = body
        else:
            if name.startswith("/"):
                start = int(name[1:])
                name = longnames[start:longnames.index(b"/\n", start)].decode()
            else:
                name = name.rstrip("/")
            members.append((off, name, body))
        off += 60 + size + (size & 1)
    return symbols, members


def coff_sections(obj: bytes) -> list[tuple[str, int, int, list[int]]]:
    """(name, size, flags, relocation types) of a COFF object's sections."""
    nsec = struct.unpack_from("<H", obj, 2)[0]
    out = []
    for i in range(nsec):
        name, _vs, _va, size, _raw, reloc_off, _ln, nrel, _nln, flags = struct.unpack_from(
            "<8sIIIIIIHHI", obj, 20 + 40 * i)
        types = [struct.unpack_from("<H", obj, reloc_off + 10 * j + 8)[0] for j in range(nrel)]
        out.append((name.rstrip(b"\0").decode(), size, flags, types))
    return out


def test_archive_layout() -> None:
    info = DllExports("tiny64_1.dll", MACHINE_AMD64, (Export("alpha", 1), Export("beta", 3, data=True)))
    lib = import_library(info)
    symbols, members = parse_ar(lib)
    by_offset = {off: body for off, _name, body in members}
    # every symbol of the index points at the member that defines it; data has no thunk symbol
    assert sorted(symbols) == sorted([b"__IMPORT_DESCRIPTOR_tiny64_1", b"__NULL_IMPORT_DESCRIPTOR",
                                      b"\x7ftiny64_1_NULL_THUNK_DATA", b"__imp_alpha", b"alpha",
                                      b"__imp_beta"])
    assert all(off in by_offset for off in symbols.values())
    assert symbols[b"alpha"] == symbols[b"__imp_alpha"] != symbols[b"__imp_beta"]
    assert {name for _o, name, _b in members} == {"tiny64_1.dll"}

    def short(sym: bytes) -> tuple[int, int, int, bytes]:
        body = by_offset[symbols[sym]]
        sig1, sig2, version, machine, _stamp, size, _hint, kind = struct.unpack_from("<HHHHIIHH", body)
        assert (sig1, sig2, version, size) == (0, 0xFFFF, 0, len(body) - 20)
        return machine, kind & 3, kind >> 2 & 7, body[20:]

    assert short(b"alpha") == (MACHINE_AMD64, 0, 1, b"alpha\0tiny64_1.dll\0")  # code, by name
    assert short(b"__imp_beta") == (MACHINE_AMD64, 1, 1, b"beta\0tiny64_1.dll\0")  # data, by name

    desc = by_offset[symbols[b"__IMPORT_DESCRIPTOR_tiny64_1"]]
    assert struct.unpack_from("<H", desc)[0] == MACHINE_AMD64
    addr32nb = 3  # IMAGE_REL_AMD64_ADDR32NB
    assert coff_sections(desc) == [(".idata$2", 20, 0xC0300040, [addr32nb] * 3),
                                   (".idata$6", 14, 0xC0200040, [])]
    assert b"tiny64_1.dll\0" in desc
    null = by_offset[symbols[b"__NULL_IMPORT_DESCRIPTOR"]]
    assert coff_sections(null) == [(".idata$3", 20, 0xC0300040, [])]
    assert coff_sections(by_offset[symbols[b"\x7ftiny64_1_NULL_THUNK_DATA"]]) == [
        (".idata$5", 8, 0xC0400040, []), (".idata$4", 8, 0xC0400040, [])]
    assert import_library(info) == lib  # deterministic: no time stamps


def test_long_dll_name_goes_to_the_long_name_table() -> None:
    info = DllExports("nvrtc-builtins64_130.dll", MACHINE_AMD64, (Export("f", 1),))
    _symbols, members = parse_ar(import_library(info))
    assert {name for _o, name, _b in members} == {"nvrtc-builtins64_130.dll"}


def test_unknown_machine_is_refused() -> None:
    with pytest.raises(ImportLibraryError, match="machine type 0x1c4"):
        import_library(DllExports("x.dll", 0x1C4, (Export("f", 1),)))


@pytest.mark.parametrize("in_tree", [False, True], ids=["import_library", "tree"])
def test_a_32_bit_dll_gets_no_import_library_and_says_why(tmp_path: Path, in_tree: bool) -> None:
    """x86 resolves __stdcall functions by _name@N, which no export table carries: an undecorated
    library would link nothing, so none is written (CUDA 12+ has no 32-bit Windows libraries)."""
    why = "a 32-bit (x86) DLL: its import library needs each __stdcall function's decorated name (_name@N)"
    if not in_tree:
        with pytest.raises(ImportLibraryError, match=re.escape(f"cudart32_110.dll is {why}")):
            import_library(DllExports("cudart32_110.dll", MACHINE_I386, (Export("cudaMalloc", 1),)))
        return
    warned: list[str] = []
    tree = _tree(tmp_path, {**_dlls("bin/cudart32_110.dll", machine=MACHINE_I386), "bin/nvcc.exe": b"MZ"})
    assert add_import_libraries(tree, warned.append) == []
    assert not (tmp_path / "lib").exists()
    assert warned == [f"bin/cudart32_110.dll is {why}, which the DLL does not export, so cudaredist writes "
                      "none (CUDA 12 and later have no 32-bit Windows libraries; link against NVIDIA's own "
                      ".lib)"]


# -- which DLLs -------------------------------------------------------------------------------------
@pytest.mark.parametrize(("dll", "name"), [
    pytest.param("cudart64_13.dll", "cudart", id="cudart"),
    pytest.param("cublasLt64_13.dll", "cublasLt", id="cublasLt"),
    pytest.param("nvrtc64_130_0.dll", "nvrtc", id="nvrtc"),
    pytest.param("nvJitLink_130_0.dll", "nvJitLink", id="no-bitness"),
    pytest.param("nvrtc-builtins64_130.dll", "nvrtc-builtins", id="dash"),
    pytest.param("cudart32_110.dll", "cudart", id="32-bit"),
])
def test_library_name(dll: str, name: str) -> None:
    assert library_name(dll) == name


def _tree(root: Path, files: dict[str, bytes]) -> Tree:
    tree = Tree(root, case_insensitive=True)
    for rel, data in files.items():
        tree.add_file(rel, io.BytesIO(data), 0o644, "libcublas" if "cublas" in rel else "cuda_cudart", "a")
    return tree


def _dlls(*rels: str, machine: int = MACHINE_AMD64) -> dict[str, bytes]:
    return {rel: make_dll(rel.rsplit("/", 1)[-1], machine=machine) for rel in rels}


MSVC = b"msvc"


@pytest.mark.parametrize(("files", "written"), [
    pytest.param({**_dlls("bin/x64/cudart64_13.dll"), "lib/x64/cudart.lib": MSVC, "lib/x64/cuda.lib": MSVC,
                  "lib/x64/cudart_static.lib": MSVC, "bin/nvcc.exe": b"MZ"},
                 ["lib/x64/libcudart.dll.a"], id="13.x-redist-cudart"),
    pytest.param({**_dlls("bin/x64/cudart64_13.dll", "bin/x64/cublas64_13.dll", "bin/x64/cublasLt64_13.dll",
                          "bin/x64/nvrtc64_130_0.dll", "bin/x64/nvrtc64_130_0.alt.dll"),
                  "lib/x64/cudart.lib": MSVC},
                 ["lib/x64/cublas.lib", "lib/x64/cublasLt.lib", "lib/x64/libcudart.dll.a",
                  "lib/x64/nvrtc.lib"], id="wheels-without-lib"),
    pytest.param({**_dlls("bin/cudart64_12.dll", "bin/curand64_10.dll"), "lib/x64/cudart.lib": MSVC,
                  "lib/x64/curand.lib": MSVC, "lib/x64/libcurand.dll.a": b"ours"},
                 ["lib/x64/libcudart.dll.a"], id="12.x-bin-and-an-existing-gnu-library"),
    pytest.param({**_dlls("bin/x64/cudart64_13.dll", "bin/cudnn64_9.dll", "bin/cudnn_ops64_9.dll"),
                  "lib/x64/cudart.lib": MSVC, "lib/x64/CUDNN.LIB": MSVC},
                 ["lib/x64/libCUDNN.dll.a", "lib/x64/libcudart.dll.a", "lib/x64/cudnn_ops.lib"],
                 id="product-dlls-in-bin-and-a-case-folded-lib"),
    pytest.param({**_dlls("nvvm/bin/x64/nvvm64_40_0.dll"), "nvvm/bin/cicc.exe": b"MZ"},
                 ["nvvm/lib/x64/nvvm.lib"], id="nvvm-of-the-wheel"),
    pytest.param({**_dlls("bin/arm64/cudart64_13.dll", "bin/arm64/cublas64_13.dll", machine=MACHINE_ARM64),
                  "lib/arm64/cudart.lib": MSVC},
                 ["lib/arm64/cublas.lib", "lib/arm64/libcudart.dll.a"], id="arm64"),
    pytest.param({**_dlls("bin/x64/cudart64_12.dll", "bin/x64/cudart64_13.dll"), "lib/x64/cudart.lib": MSVC},
                 [], id="two-dlls-claim-one-name"),
    pytest.param({}, [], id="empty"),
])
def test_which_dlls_get_which_library(tmp_path: Path, files: dict[str, bytes], written: list[str]) -> None:
    tree = _tree(tmp_path, files)
    assert sorted(add_import_libraries(tree), key=str.lower) == sorted(written, key=str.lower)
    for rel in written:
        data = (tmp_path / rel).read_bytes()
        assert data.startswith(b"!<arch>\n") and parse_ar(data)[0]


def test_added_through_the_tree(tmp_path: Path) -> None:
    tree = _tree(tmp_path, {"bin/x64/tiny64_1.dll": make_dll(), "lib/x64/tiny.lib": b"msvc",
                            "bin/x64/broken64_1.dll": b"MZ not a PE", "lib/x64/broken.lib": b"msvc",
                            "bin/x64/cublas64_13.dll": make_dll("cublas64_13.dll")})
    warnings: list[str] = []
    assert add_import_libraries(tree, warn=warnings.append) == ["lib/x64/cublas.lib", "lib/x64/libtiny.dll.a"]
    assert len(warnings) == 1 and "bin/x64/broken64_1.dll" in warnings[0] and "broken" in warnings[0]
    records = {r.path: r for r in tree.finish()}
    for rel, dll, component in (("lib/x64/libtiny.dll.a", "tiny64_1.dll", "cuda_cudart"),
                                ("lib/x64/cublas.lib", "cublas64_13.dll", "libcublas")):
        data = (tmp_path / rel).read_bytes()
        assert records[rel].component == component and records[rel].size == len(data)
        assert records[rel].mode == 0o644
        assert data == import_library(read_exports(make_dll(dll)))
    assert "lib/x64/libbroken.dll.a" not in records and "lib/x64/broken.lib" in records  # NVIDIA's, untouched


def test_empty_and_unterminated_dlls_are_one_clear_error(tmp_path: Path) -> None:
    good = make_dll("tiny64_1.dll")
    name_at = good.index(b"tiny64_1.dll")
    tree = _tree(tmp_path, {"bin/x64/empty64_1.dll": b"", "bin/x64/tiny64_1.dll": good[:name_at + 4]})
    warnings: list[str] = []
    assert add_import_libraries(tree, warn=warnings.append) == []
    assert [w.split(" ")[0] for w in warnings] == ["bin/x64/empty64_1.dll", "bin/x64/tiny64_1.dll"], warnings


# -- the real toolchain --------------------------------------------------------------------------------
TINY_DLL = r"""
extern "C" {
__declspec(dllexport) int tiny_add(int a, int b) { return a + b + 1000; }
__declspec(dllexport) int tiny_counter = 42;
__declspec(dllexport) const char *tiny_name(void) { return "tiny"; }
}
"""

TINY_MAIN = r"""
#include <cstdio>
extern "C" {
__declspec(dllimport) int tiny_add(int a, int b);
__declspec(dllimport) extern int tiny_counter;
__declspec(dllimport) const char *tiny_name(void);
}
int main() {
    tiny_counter += 1;
    std::printf("%d %d %s\n", tiny_add(2, 3), tiny_counter, tiny_name());
    return 0;
}
"""


def _gxx(*args: str) -> None:
    r = subprocess.run([mingw_gxx(), *args], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, f"{' '.join(args)}:\n{r.stderr[-4000:]}"


@pytest.mark.e2e  # a real MinGW build and a Wine start (slow)
def test_mingw_dll_round_trip(tmp_path: Path, wine_prefix: Path) -> None:  # noqa: F811
    """A DLL built by GNU ld, its import library written by cudaredist, a program linked with
    -ltiny against it, run under Wine: code and data exports both resolve."""
    src, dll_dir, lib_dir, app = tmp_path / "src", tmp_path / "bin", tmp_path / "lib", tmp_path / "app"
    for d in (src, dll_dir, lib_dir, app):
        d.mkdir()
    (src / "tiny.cpp").write_text(TINY_DLL)
    (src / "main.cpp").write_text(TINY_MAIN)
    _gxx("-shared", "-O2", "-o", str(dll_dir / "tiny64_1.dll"), str(src / "tiny.cpp"))

    info = read_exports((dll_dir / "tiny64_1.dll").read_bytes())
    dump = subprocess.run([mingw_objdump(), "-p", str(dll_dir / "tiny64_1.dll")], capture_output=True,
                          text=True, check=True).stdout
    assert info.dll == "tiny64_1.dll" and info.machine == MACHINE_AMD64
    assert {e.name: e.data for e in info.exports} == {"tiny_add": False, "tiny_counter": True,
                                                      "tiny_name": False}
    for e in info.exports:
        assert f"] {e.name}" in dump  # GNU objdump's own reading of the export table agrees

    (lib_dir / "libtiny.dll.a").write_bytes(import_library(info))
    _gxx("-O2", "-static-libgcc", "-static-libstdc++", "-o", str(app / "main.exe"), str(src / "main.cpp"),
         f"-L{lib_dir}", "-ltiny")
    assert "tiny64_1.dll" in imported_dlls(app / "main.exe")

    (app / "tiny64_1.dll").write_bytes((dll_dir / "tiny64_1.dll").read_bytes())
    r = run_under_wine(app / "main.exe", wine_prefix)
    assert (r.returncode, r.stdout.strip()) == (0, "1005 43 tiny"), r.stderr


TINY_START = r"""
__declspec(dllimport) int tiny_add(int a, int b);
__declspec(dllimport) extern int tiny_counter;
int start(void) { return tiny_add(2, 3) - 1000 + tiny_counter; }  /* 47: an exit code is 8 bits */
"""


@pytest.mark.e2e  # a real MinGW build, lld-link and a Wine start (slow)
def test_dll_without_a_library_gets_one_msvc_and_gnu_linkers_read(tmp_path: Path,
                                                                 wine_prefix: Path) -> None:  # noqa: F811
    """A tree with a DLL and no import library for it (as NVIDIA's wheels lay out cuBLAS): the
    tree's ``lib/x64/tiny.lib`` links with GNU ld (``-l:tiny.lib``, as ``-ltiny``) and with
    lld-link, an MSVC-compatible linker; both programs start under Wine and reach the DLL."""
    src, out = tmp_path / "src", tmp_path / "out"
    src.mkdir()
    out.mkdir()
    (src / "tiny.cpp").write_text(TINY_DLL)
    (src / "main.cpp").write_text(TINY_MAIN)
    (src / "start.c").write_text(TINY_START)
    _gxx("-shared", "-O2", "-o", str(src / "tiny64_1.dll"), str(src / "tiny.cpp"))
    (tmp_path / "tree").mkdir()
    tree = _tree(tmp_path / "tree", {"bin/x64/tiny64_1.dll": (src / "tiny64_1.dll").read_bytes()})
    assert add_import_libraries(tree) == ["lib/x64/tiny.lib"]
    lib_dir = tmp_path / "tree" / "lib" / "x64"

    for flag, exe in (("-l:tiny.lib", out / "gnu.exe"), ("-ltiny", out / "gnu2.exe")):
        _gxx("-O2", "-static-libgcc", "-static-libstdc++", "-o", str(exe), str(src / "main.cpp"),
             f"-L{lib_dir}", flag)
        assert imported_dlls(exe) == ["kernel32.dll", "msvcrt.dll", "tiny64_1.dll"], flag
    # lld-link: an object without a C runtime, its entry point start(), the .lib the tree got
    gcc = mingw_gxx().replace("g++", "gcc")
    r = subprocess.run([gcc, "-c", "-O2", "-fno-asynchronous-unwind-tables", "-o", str(src / "start.o"),
                        str(src / "start.c")], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    r = subprocess.run([lld_link(), "/nologo", f"/out:{out / 'msvc.exe'}", "/entry:start",
                        "/subsystem:console", "/nodefaultlib", str(src / "start.o"), f"/libpath:{lib_dir}",
                        "tiny.lib"],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    assert imported_dlls(out / "msvc.exe") == ["tiny64_1.dll"]

    (out / "tiny64_1.dll").write_bytes((src / "tiny64_1.dll").read_bytes())
    ran = run_under_wine(out / "gnu.exe", wine_prefix)
    assert (ran.returncode, ran.stdout.strip()) == (0, "1005 43 tiny"), ran.stderr
    ran = run_under_wine(out / "msvc.exe", wine_prefix)
    assert ran.returncode == 5 + 42, (ran.returncode, ran.stderr)


# Windows on Arm: no GNU binutils there; llvm-mingw links with lld's MinGW driver (ld.lld -m arm64pe)
TINY_ARM64 = """
    .text
    .globl tiny_add
    .p2align 2
tiny_add:
    add w0, w0, w1
    ret
    .data
    .globl tiny_counter
    .p2align 2
tiny_counter:
    .word 42
"""

MAIN_ARM64 = """
    .text
    .globl mainCRTStartup
    .p2align 2
mainCRTStartup:
    stp x29, x30, [sp, #-16]!
    bl tiny_add
    adrp x8, __imp_tiny_counter
    ldr x8, [x8, :lo12:__imp_tiny_counter]
    ldp x29, x30, [sp], #16
    ret
"""


def test_arm64_import_library_links_with_lld(tmp_path: Path) -> None:
    """An ARM64 DLL (assembled by llvm-mc, linked by lld-link), its import library written by
    cudaredist, a program linked with -ltiny by lld's MinGW driver: the program imports both
    exports from the DLL, the code one through a thunk, the data one through __imp_."""
    for name, text in (("tiny.s", TINY_ARM64), ("main.s", MAIN_ARM64)):
        (tmp_path / name).write_text(text)
        llvm("llvm-mc", "-triple=aarch64-pc-windows-msvc", "-filetype=obj", str(tmp_path / name),
              "-o", str(tmp_path / name.replace(".s", ".obj")))
    dll = tmp_path / "tiny64_1.dll"
    llvm("lld-link", "/dll", "/noentry", "/nodefaultlib", "/machine:arm64", "/export:tiny_add",
          "/export:tiny_counter,DATA", f"/out:{dll}", str(tmp_path / "tiny.obj"))
    info = read_exports(dll.read_bytes())
    assert info.machine == MACHINE_ARM64
    assert {e.name: e.data for e in info.exports} == {"tiny_add": False, "tiny_counter": True}
    lib = tmp_path / "lib" / "arm64"
    lib.mkdir(parents=True)
    (lib / "libtiny.dll.a").write_bytes(import_library(info))
    exe = tmp_path / "main.exe"
    llvm("ld.lld", "-m", "arm64pe", "-o", str(exe), str(tmp_path / "main.obj"), f"-L{lib}", "-ltiny",
          "-e", "mainCRTStartup", "--subsystem", "console")
    imports = llvm("llvm-readobj", "--coff-imports", str(exe))
    assert "Name: tiny64_1.dll" in imports
    assert "Symbol: tiny_add (0)" in imports and "Symbol: tiny_counter (0)" in imports
    assert "Arch: aarch64" in imports
