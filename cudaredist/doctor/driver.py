"""The driver (libcuda.so.1 / nvcuda.dll through ctypes) and the GPUs it sees."""

from __future__ import annotations

import contextlib
import ctypes
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cudaredist.doctor.checks import Check, Loader, Toolkit, _run, _short
from cudaredist.errors import ManifestError
from cudaredist.fsops import WINDOWS
from cudaredist.plan import version_key

# CUresult values the driver check names (cuda.h)
CUDA_SUCCESS = 0
CUDA_ERROR_NO_DEVICE = 100
CUDA_ERROR_STUB_LIBRARY = 34
_CU_ERRORS = {code: f"CUDA_ERROR_{name}" for code, name in {
    1: "INVALID_VALUE", 2: "OUT_OF_MEMORY", 3: "NOT_INITIALIZED", 4: "DEINITIALIZED", 34: "STUB_LIBRARY",
    35: "INSUFFICIENT_DRIVER", 46: "DEVICE_UNAVAILABLE", 100: "NO_DEVICE", 101: "INVALID_DEVICE",
    304: "OPERATING_SYSTEM", 803: "SYSTEM_DRIVER_MISMATCH", 804: "COMPAT_NOT_SUPPORTED_ON_DEVICE",
    999: "UNKNOWN"}.items()}
_ATTR_CC_MAJOR = 75  # CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR
_ATTR_CC_MINOR = 76


# -- driver -------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Device:
    index: int
    name: str
    major: int
    minor: int

    @property
    def sm(self) -> str:
        return f"{self.major}{self.minor}"


@dataclass(frozen=True)
class DriverInfo:
    """What loading the driver library and asking it said."""

    library: str
    loaded: bool
    path: str = ""  # the file that was loaded ("" when unknown)
    load_error: str = ""
    version: int | None = None  # cuDriverGetVersion: 1000 * major + 10 * minor
    version_result: int | None = None
    init_result: int | None = None
    devices: tuple[Device, ...] = ()
    device_error: str = ""
    kernel_module: str = ""  # the driver's own version (580.95.05), where the OS says

    @property
    def cuda(self) -> str:
        return "" if self.version is None else f"{self.version // 1000}.{self.version % 1000 // 10}"


def default_driver_library(windows: bool = WINDOWS) -> str:
    return "nvcuda.dll" if windows else "libcuda.so.1"


def _loaded_path(lib: Any, symbol: str) -> str:
    """The file a loaded library came from (dladdr / GetModuleFileNameW); "" if unknown."""
    with contextlib.suppress(Exception):
        if WINDOWS:
            buf = ctypes.create_unicode_buffer(32768)
            if ctypes.windll.kernel32.GetModuleFileNameW(ctypes.c_void_p(lib._handle), buf, 32768):  # type: ignore[attr-defined]
                return str(buf.value)
            return ""

        class DlInfo(ctypes.Structure):
            _fields_ = [("dli_fname", ctypes.c_char_p), ("dli_fbase", ctypes.c_void_p),
                        ("dli_sname", ctypes.c_char_p), ("dli_saddr", ctypes.c_void_p)]

        info = DlInfo()
        for libc in (None, "libdl.so.2"):
            dladdr = getattr(ctypes.CDLL(libc), "dladdr", None)
            if dladdr is not None:
                dladdr.argtypes = [ctypes.c_void_p, ctypes.POINTER(DlInfo)]
                if dladdr(ctypes.cast(getattr(lib, symbol), ctypes.c_void_p), ctypes.byref(info)) and \
                        info.dli_fname:
                    return os.path.realpath(bytes(info.dli_fname).decode(errors="replace"))
                break
    return ""


def _kernel_module_version(proc_file: str = "/proc/driver/nvidia/version") -> str:
    with contextlib.suppress(OSError):
        m = re.search(r"Kernel Module(?: for \S+)?\s+(\d+\.\d+(?:\.\d+)?)", Path(proc_file).read_text())
        if m:
            return m.group(1)
    return ""


def probe_driver(library: str | None = None, *, loader: Loader = ctypes.CDLL,
                 proc_file: str = "/proc/driver/nvidia/version") -> DriverInfo:
    """Load the driver library and ask it: cuDriverGetVersion, cuInit, then the devices."""
    library = library or default_driver_library()
    try:
        lib = loader(library)
    except OSError as exc:
        return DriverInfo(library, loaded=False, load_error=str(exc))
    path = _loaded_path(lib, "cuInit")
    kernel = _kernel_module_version(proc_file)
    try:
        get_version, init = lib.cuDriverGetVersion, lib.cuInit
    except AttributeError as exc:
        return DriverInfo(library, True, path, load_error=f"not a CUDA driver library: {exc}",
                          kernel_module=kernel)
    version = ctypes.c_int(0)
    version_result = int(get_version(ctypes.byref(version)))
    init_result = int(init(ctypes.c_uint(0)))
    devices: list[Device] = []
    device_error = ""
    if init_result == CUDA_SUCCESS:
        try:
            devices = _devices(lib)
        except (AttributeError, RuntimeError) as exc:
            device_error = str(exc)
    return DriverInfo(library, True, path, "", version.value if version_result == 0 else None,
                      version_result, init_result, tuple(devices), device_error, kernel)


def _devices(lib: Any) -> list[Device]:
    def call(fn: Any, *args: Any) -> None:
        result = int(fn(*args))
        if result != CUDA_SUCCESS:
            raise RuntimeError(f"{fn.__name__} returned {result} ({cu_error_name(result)})")

    count = ctypes.c_int(0)
    call(lib.cuDeviceGetCount, ctypes.byref(count))
    out = []
    for i in range(count.value):
        dev = ctypes.c_int(0)
        call(lib.cuDeviceGet, ctypes.byref(dev), ctypes.c_int(i))
        name = ctypes.create_string_buffer(256)
        call(lib.cuDeviceGetName, name, ctypes.c_int(len(name)), dev)
        major, minor = ctypes.c_int(0), ctypes.c_int(0)
        call(lib.cuDeviceGetAttribute, ctypes.byref(major), ctypes.c_int(_ATTR_CC_MAJOR), dev)
        call(lib.cuDeviceGetAttribute, ctypes.byref(minor), ctypes.c_int(_ATTR_CC_MINOR), dev)
        out.append(Device(i, name.value.decode(errors="replace"), major.value, minor.value))
    return out


def cu_error_name(code: int) -> str:
    return _CU_ERRORS.get(code, f"CUresult {code}")


@dataclass(frozen=True)
class DriverBranch:
    major: int
    branch: int
    linux: str = ""
    windows: str = ""


def driver_branches(path: Path | None = None) -> dict[int, DriverBranch]:
    """manifests/drivers.toml: the driver branch each CUDA major version needs."""
    from cudaredist.profiles import data_dir, load_toml

    path = path or data_dir() / "drivers.toml"
    try:
        return {int(k): DriverBranch(int(k), int(v["branch"]), str(v.get("linux", "")),
                                     str(v.get("windows", "")))
                for k, v in load_toml(str(path)).get("cuda", {}).items()}
    except (AttributeError, KeyError, TypeError, ValueError) as exc:
        raise ManifestError(f"cannot read {path}: {exc}", source=str(path)) from exc


def _branch_advice(major: int, branches: Mapping[int, DriverBranch], windows: bool) -> str:
    b = branches.get(major)
    if b is None:
        return f"a driver that supports CUDA {major}.0 (cuDriverGetVersion {major * 1000} or more)"
    first = b.windows if windows else b.linux
    return (f"driver branch R{b.branch} or newer" + (f" ({first} or later)" if first else "")
            + f", which runs every CUDA {major}.x")


def check_driver(info: DriverInfo, release: str | None, *, windows: bool = WINDOWS,
                 branches: Mapping[int, DriverBranch] | None = None) -> Check:
    branches = driver_branches() if branches is None else branches
    wanted = (version_key(release) + (0, 0))[:2] if release else None
    install = _branch_advice(wanted[0], branches, windows) if wanted else "an NVIDIA driver"
    where = f" from {info.path}" if info.path else ""
    if not info.loaded:
        return Check("driver", "warn",
                     f"no NVIDIA driver: {info.library} cannot be loaded ({info.load_error}); a "
                     "compile-only machine: builds work, CUDA programs cannot run "
                     "(cudaGetDeviceCount gives 35, cudaErrorInsufficientDriver)",
                     f"to run CUDA programs here install {install}; nothing to do for build-only jobs")
    if info.init_result == CUDA_ERROR_STUB_LIBRARY or info.version_result == CUDA_ERROR_STUB_LIBRARY:
        stub_dir = os.path.dirname(info.path) if info.path else "the stubs directory"
        return Check("driver", "fail",
                     f"the stub libcuda{where} was loaded instead of the driver: cuInit returned "
                     f"{CUDA_ERROR_STUB_LIBRARY} (CUDA_ERROR_STUB_LIBRARY); the stub is for linking only",
                     f"take {stub_dir} out of LD_LIBRARY_PATH (and out of /etc/ld.so.conf.d), and do "
                     f"not copy or link the stub as libcuda.so.1; on a machine with a GPU install {install}")
    if info.load_error or info.version is None:
        why = info.load_error or f"cuDriverGetVersion returned {info.version_result}"
        return Check("driver", "fail", f"{info.library}{where} is not a working CUDA driver: {why}",
                     f"reinstall {install}")
    module = f"driver {info.kernel_module}, " if info.kernel_module else ""
    said = f"{module}{info.library}{where} supports CUDA {info.cuda} (cuDriverGetVersion {info.version})"
    if wanted is not None and info.version // 1000 < wanted[0]:
        return Check("driver", "fail",
                     f"{said}: too old for CUDA {release}, which needs a CUDA {wanted[0]} driver; "
                     "its programs fail with cudaErrorInsufficientDriver (35)",
                     f"install {install}")
    if info.init_result not in (None, CUDA_SUCCESS):
        code = int(info.init_result)
        if code == CUDA_ERROR_NO_DEVICE:
            return Check("driver", "warn", f"{said}, but cuInit found no GPU ({cu_error_name(code)})",
                         "check that the GPU is visible to this machine or container (nvidia-smi; "
                         "docker --gpus all; CUDA_VISIBLE_DEVICES)")
        return Check("driver", "fail", f"{said}, but cuInit failed with {code} ({cu_error_name(code)})",
                     "check the driver installation (nvidia-smi; dmesg for NVRM errors); a kernel "
                     "module and user-space library of different versions gives this after an upgrade "
                     "until the machine reboots")
    if wanted is not None and (info.version // 1000, info.version % 1000 // 10) < wanted:
        return Check("driver", "ok",
                     f"{said}: older than CUDA {release}, which runs through minor-version "
                     f"compatibility (any CUDA {wanted[0]} driver runs CUDA {wanted[0]}.x programs); build "
                     "SASS for the GPU (-arch=sm_XY): this driver cannot JIT PTX from a newer toolkit, "
                     "and APIs new in the newer minor release are unavailable")
    return Check("driver", "ok", said + ("; cuInit ok" if info.init_result == CUDA_SUCCESS else ""))


# -- gpu ----------------------------------------------------------------------------------------
def arch_flags(devices: Sequence[Device]) -> tuple[str, str]:
    """(nvcc flags, CMAKE_CUDA_ARCHITECTURES) that build SASS for exactly these devices."""
    sms = sorted({d.sm for d in devices}, key=int)
    if len(sms) == 1:
        return f"-arch=sm_{sms[0]}", sms[0]
    return " ".join(f"-gencode arch=compute_{s},code=sm_{s}" for s in sms), ";".join(sms)


def nvcc_gpu_codes(tk: Toolkit | None, env: Mapping[str, str]) -> tuple[str, ...]:
    """The sm_XY targets the tree's nvcc can build (``nvcc --list-gpu-code``); () if unknown."""
    if tk is None or tk.not_run() or not tk.nvcc().is_file():
        return ()
    rc, out = _run([str(tk.nvcc()), "--list-gpu-code"], env, timeout=60)
    return tuple(re.findall(r"\bsm_\d+[a-z]?\b", out)) if rc == 0 else ()


def check_gpu(info: DriverInfo, codes: Sequence[str] = ()) -> Check:
    """Devices and compute capabilities, the matching -arch, and whether the tree can target them."""
    if not info.loaded or info.init_result is None:
        return Check("gpu", "warn", "no GPU can be seen without a driver",
                     "run `cudaredist doctor` on the machine that runs the programs; set -arch / "
                     "CMAKE_CUDA_ARCHITECTURES for the GPUs you target")
    if info.init_result != CUDA_SUCCESS:
        return Check("gpu", "warn" if info.init_result == CUDA_ERROR_NO_DEVICE else "fail",
                     f"no usable GPU: cuInit returned {info.init_result} ({cu_error_name(info.init_result)})",
                     "see the driver check")
    if info.device_error:
        return Check("gpu", "fail", f"the driver could not list the GPUs: {info.device_error}",
                     "see the driver check; nvidia-smi shows what the driver sees")
    if not info.devices:
        return Check("gpu", "warn", "the driver reports no GPU",
                     "check that the GPU is visible to this machine or container (nvidia-smi; "
                     "CUDA_VISIBLE_DEVICES)")
    listed = ", ".join(f"{d.index}: {d.name} (compute capability {d.major}.{d.minor}, sm_{d.sm})"
                       for d in info.devices)
    flags, cmake = arch_flags(info.devices)
    said = f"{len(info.devices)} GPU{'s' if len(info.devices) > 1 else ''}: {listed}; build with {flags} " \
           f"(CMAKE_CUDA_ARCHITECTURES={cmake})"
    if not codes:
        return Check("gpu", "ok", said)
    known = {int(c[3:].rstrip("abcdefghijklmnopqrstuvwxyz")) for c in codes}
    lo, hi = min(known), max(known)
    unknown = [int(d.sm) for d in info.devices if int(d.sm) not in known]
    if older := _short([f"sm_{sm}" for sm in unknown if sm < lo]):
        return Check("gpu", "fail", f"{said}; this toolkit cannot build for {older}: its nvcc targets "
                     f"sm_{lo} to sm_{hi}",
                     f"use an older CUDA release whose `nvcc --list-gpu-code` still lists {older}")
    if unknown:  # newer than the oldest target the tree knows
        ptx = min(max(k for k in known if k <= sm) for sm in unknown)
        return Check("gpu", "warn",
                     f"{said}; this toolkit's nvcc does not list {_short([f'sm_{sm}' for sm in unknown])} "
                     f"(it targets sm_{lo} to sm_{hi})",
                     "embed PTX the driver can compile for it "
                     f"(-gencode arch=compute_{ptx},code=compute_{ptx}), or install a newer CUDA release "
                     "that knows this GPU")
    return Check("gpu", "ok", said + "; this toolkit's nvcc targets all of them")


