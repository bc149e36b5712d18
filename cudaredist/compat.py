"""The host's NVIDIA driver (libcuda.so.1 / nvcuda.dll through ctypes, /proc/driver/nvidia/version),
NVIDIA's driver branches (manifests/drivers.toml), and the one decision on forward compatibility:
whether a tree's ``compat/`` (NVIDIA's cuda_compat, ``install --with compat``) goes first on
LD_LIBRARY_PATH here. ``env``, ``run``, the action and ``doctor`` all render :func:`decide`.

Done wrong, forward compatibility breaks what works: compat libraries that shadow a newer kernel
driver fail every program with 803 (cudaErrorSystemDriverMismatch); on a GPU NVIDIA does not support
it on (GeForce), with 804. So ``auto`` puts it first only where all of NVIDIA's conditions hold, and
nothing here writes ld.so.conf or any file.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cudaredist.errors import ManifestError, UsageError
from cudaredist.fsops import WINDOWS
from cudaredist.plan import version_key
from cudaredist.profiles import data_dir, load_toml

Loader = Callable[[str], Any]  # ctypes.CDLL
MODES = ("auto", "on", "off")

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
    devices, device_error = _devices(lib) if init_result == CUDA_SUCCESS else ((), "")
    return DriverInfo(library, True, path, "", version.value if version_result == 0 else None,
                      version_result, init_result, devices, device_error, kernel)


def _devices(lib: Any) -> tuple[tuple[Device, ...], str]:
    """The GPUs the driver lists, or none and why it could not list them."""
    def call(fn: Any, *args: Any) -> None:
        result = int(fn(*args))
        if result != CUDA_SUCCESS:
            raise RuntimeError(f"{fn.__name__} returned {result} ({cu_error_name(result)})")

    count = ctypes.c_int(0)
    out = []
    try:
        call(lib.cuDeviceGetCount, ctypes.byref(count))
        for i in range(count.value):
            dev = ctypes.c_int(0)
            call(lib.cuDeviceGet, ctypes.byref(dev), ctypes.c_int(i))
            name = ctypes.create_string_buffer(256)
            call(lib.cuDeviceGetName, name, ctypes.c_int(len(name)), dev)
            major, minor = ctypes.c_int(0), ctypes.c_int(0)
            call(lib.cuDeviceGetAttribute, ctypes.byref(major), ctypes.c_int(_ATTR_CC_MAJOR), dev)
            call(lib.cuDeviceGetAttribute, ctypes.byref(minor), ctypes.c_int(_ATTR_CC_MINOR), dev)
            out.append(Device(i, name.value.decode(errors="replace"), major.value, minor.value))
    except (AttributeError, RuntimeError) as exc:
        return (), str(exc)
    return tuple(out), ""


def cu_error_name(code: int) -> str:
    return _CU_ERRORS.get(code, f"CUresult {code}")


@dataclass(frozen=True)
class DriverBranch:
    major: int
    branch: int
    linux: str = ""
    windows: str = ""


@dataclass(frozen=True)
class Branches:
    """manifests/drivers.toml: the branch each CUDA major needs, and NVIDIA's branch matrix."""

    cuda: Mapping[int, DriverBranch]
    kinds: Mapping[int, tuple[str, str]]  # branch -> (lts | production | feature, end of life "YYYY-MM")
    no_compat_gpus: tuple[str, ...]  # words in a GPU's name: NVIDIA supports no compat on it
    min_cc: Mapping[int, tuple[int, int]]  # compat branch -> the oldest compute capability it runs on


def driver_branches(path: Path | None = None) -> Branches:
    path = path or data_dir() / "drivers.toml"
    try:
        data = load_toml(str(path))
        compat = data.get("compat", {})
        return Branches(
            {int(k): DriverBranch(int(k), int(v["branch"]), str(v.get("linux", "")),
                                  str(v.get("windows", ""))) for k, v in data.get("cuda", {}).items()},
            {int(k): (str(v["kind"]), str(v.get("eol", ""))) for k, v in data.get("branch", {}).items()},
            tuple(map(str, compat.get("unsupported_gpus", ()))),
            {int(k): _mm(str(v)) for k, v in compat.get("min_cc", {}).items()})
    except (AttributeError, KeyError, TypeError, ValueError) as exc:
        raise ManifestError(f"cannot read {path}: {exc}", source=str(path)) from exc


def _mm(version: str) -> tuple[int, int]:
    return (version_key(version) + (0, 0))[:2]  # type: ignore[return-value]


# -- forward compatibility ------------------------------------------------------------------------
@dataclass(frozen=True)
class Decision:
    """Whether ``directory`` (the tree's compat/) goes first on LD_LIBRARY_PATH, and why, in one line;
    for doctor: how the train's programs run here and what to do."""

    first: bool
    reason: str
    directory: str = ""
    runs: str = "native"  # native | compat | sass (SASS only: minor-version compatibility) | none | unknown
    fix: str = ""


def compat_of(prefix: Path | str, plan: Mapping[str, Any]) -> tuple[str, str]:
    """(compat/ directory, its driver version) of a tree installed ``--with compat``; ("", "") if none.
    The version is the cuda_compat component's (the driver's), else the product's release."""
    directory = Path(prefix) / "compat"
    versions = [str(c.get("version") or c.get("release")) for c in (*plan.get("components", ()),
                *plan.get("products", ())) if c.get("name") in ("cuda_compat", "compat")]
    return (str(directory), versions[0]) if versions and directory.is_dir() else ("", "")


def decide(prefix: Path | str, plan: Mapping[str, Any], info: DriverInfo, mode: str | None = None, *,
           branches: Branches | None = None) -> Decision:
    """The forward-compatibility decision for the tree at ``prefix`` (its record's ``plan``) on the host
    whose driver ``info`` describes. ``mode``: auto (None), on or off."""
    if (mode := mode or "auto") not in MODES:
        raise UsageError(f"unknown --compat {mode!r}; choose one of {', '.join(MODES)}")
    directory, compat = compat_of(prefix, plan)
    train, kernel = _mm(str(plan["release"])), info.kernel_module
    # the CUDA version the host's own driver runs; None where unknown or where the libcuda loaded is
    # the tree's compat one (LD_LIBRARY_PATH already names it); a driver whose cuInit failed runs none
    ours = directory and info.path.startswith(os.path.realpath(directory) + os.sep)
    host = None if info.version is None or info.init_result not in (None, CUDA_SUCCESS) or ours \
        else (info.version // 1000, info.version % 1000 // 10)
    # without compat: natively; SASS only (minor-version compatibility, PTX fails with 222); not at all
    runs = "native" if host is not None and host >= train else "sass" if host and host[0] == train[0] \
        else "none" if info.loaded and host is not None else "unknown"
    if mode == "on":
        if not directory:
            raise UsageError(f"--compat on: {prefix} has no forward-compatibility package (compat/); "
                             "install it with `--with compat`, or use --compat auto")
        shadows = kernel and version_key(kernel) >= version_key(compat)
        warn = f"; it is not newer than the host driver {kernel}: expect error 803" if shadows else ""
        return Decision(True, f"--compat on: compat {compat} first on LD_LIBRARY_PATH{warn}", directory,
                        "compat")
    if mode == "off" and directory:
        return Decision(False, "--compat off: the tree's compat package stays off LD_LIBRARY_PATH", directory,
                        runs, "drop --compat off to let auto decide")
    cuda = f"CUDA {train[0]}.{train[1]}"
    why, fix = _refusal(info, compat, cuda, kernel, runs, plan,
                        branches if branches is not None else driver_branches())
    if why or not directory:
        return Decision(False, why or f"the host driver {kernel} is older than {cuda}; the tree has no "
                        "compat package", directory, runs, fix if why else "install with `--with compat`")
    return Decision(True, f"the host driver {kernel} (CUDA {info.cuda if host else 'unknown'}) is older "
                          f"than {cuda}: the tree's compat package {compat} goes first on LD_LIBRARY_PATH",
                    directory, "compat")


def _refusal(info: DriverInfo, compat: str, cuda: str, kernel: str, runs: str,
             plan: Mapping[str, Any], branches: Branches) -> tuple[str, str]:
    """(why auto leaves compat off, what to do), or ("", "") where all of NVIDIA's conditions hold
    (``compat`` "": the tree has none, so: whether one would help)."""
    upgrade = f"upgrade the host driver to one that runs {cuda}" + (f" (R{compat.split('.')[0]} or newer)"
                                                                    if compat else "")
    if not info.loaded or info.load_error:  # none, or a library that is not a CUDA driver
        return "no NVIDIA driver here: nothing for a compat package to run on", "see the driver check"
    if runs == "native":
        return f"the host driver {kernel or info.cuda} runs {cuda} natively: compat not needed", ""
    if not kernel:
        return "the kernel driver's version is unknown (no /proc/driver/nvidia/version): compat left off", \
            "pass --compat on to use the compat package anyway"
    if compat and version_key(kernel) >= version_key(compat):
        return f"the compat package {compat} is not newer than the host driver {kernel}: it would fail " \
            "every program with error 803 (cudaErrorSystemDriverMismatch)", \
            f"install a compat package newer than {kernel} (`--with compat`), or {upgrade}"
    if not info.devices:
        return "no GPU visible: nothing to run compat on", "check that the GPU is visible (nvidia-smi)"
    for d in info.devices:
        if any(w.lower() in d.name.lower() for w in branches.no_compat_gpus):
            return f"GPU {d.index} ({d.name}) is not one NVIDIA supports forward compatibility on (data-" \
                "center, NGC-ready RTX, Jetson): it would fail with error 804", \
                f"this {d.name} cannot use forward compatibility; {upgrade}"
        newest = version_key(compat)[0] if compat else max(branches.min_cc, default=0)
        floor = max((cc for b, cc in branches.min_cc.items() if b <= newest), default=(0, 0))
        if (d.major, d.minor) < floor:
            return f"GPU {d.index} ({d.name}, compute capability {d.major}.{d.minor}) is older than what " \
                f"compat drivers of R{newest} and later run on ({floor[0]}.{floor[1]})", \
                f"{upgrade}, or use an older CUDA train"
    branch = version_key(kernel)[0]
    kind, eol = branches.kinds.get(branch, ("", ""))
    if kind not in ("lts", "production"):
        what = "a New Feature Branch" if kind else "not in NVIDIA's branch matrix (manifests/drivers.toml)"
        return f"the host driver branch R{branch} is {what}: not a forward-compatibility host", upgrade
    released = str(plan.get("release_date") or "")
    if eol and released[:7] > eol:
        return f"the host driver branch R{branch} reached its end of life ({eol}) before {cuda} " \
            f"({released}): not a forward-compatibility host for it", upgrade
    return "", ""


def for_tree(prefix: Path | str, plan: Mapping[str, Any], mode: str | None = None, *,
             probe: Callable[[], DriverInfo] | None = None) -> Decision:
    """:func:`decide` against this host's driver, for a Linux tree; a tree without compat/ probes nothing."""
    if not compat_of(prefix, plan)[0] and mode in (None, "auto", "off"):
        return Decision(False, "the tree has no compat package")
    return decide(prefix, plan, (probe or probe_driver)(), mode)
