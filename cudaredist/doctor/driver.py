"""The driver (libcuda.so.1 / nvcuda.dll through ctypes) and the GPUs it sees."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence

from cudaredist.compat import (
    CUDA_ERROR_NO_DEVICE,
    CUDA_ERROR_STUB_LIBRARY,
    CUDA_SUCCESS,
    Decision,
    Device,
    DriverBranch,
    DriverInfo,
    _mm,
    cu_error_name,
    driver_branches,
)
from cudaredist.doctor.checks import Check, Status, Toolkit, _run, _short
from cudaredist.fsops import WINDOWS


def check_driver(info: DriverInfo, release: str | None, *, windows: bool = WINDOWS,
                 branches: Mapping[int, DriverBranch] | None = None) -> Check:
    branches = driver_branches().cuda if branches is None else branches
    wanted = _mm(release) if release else None
    install = "an NVIDIA driver"
    if wanted and (b := branches.get(wanted[0])) is not None:
        first = b.windows if windows else b.linux
        install = (f"driver branch R{b.branch} or newer" + (f" ({first} or later)" if first else "")
                   + f", which runs every CUDA {wanted[0]}.x")
    elif wanted:
        install = f"a driver that supports CUDA {wanted[0]}.0 (cuDriverGetVersion {wanted[0] * 1000} or more)"
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


def check_compat(d: Decision, release: str) -> Check:
    """How the train's programs run here: natively, with the tree's compat package, or not at all
    (:func:`cudaredist.compat.decide`, the decision env, run and the action take)."""
    said = {"native": f"CUDA {release} programs run natively on this driver",
            "compat": f"CUDA {release} programs run with the tree's compat package (env and run put "
                      "it first on LD_LIBRARY_PATH)",
            "sass": f"CUDA {release} programs run only where they carry SASS for this GPU "
                    "(minor-version compatibility); PTX-only ones fail with cudaErrorUnsupportedPtxVersion "
                    "(222): this driver cannot JIT a newer toolkit's PTX",
            "none": f"CUDA {release} programs cannot run here",
            "unknown": f"whether CUDA {release} programs run here is unknown"}[d.runs]
    status: Status = "ok" if d.runs in ("native", "compat") else "fail" if d.runs == "none" else "warn"
    return Check("compat", status, f"{said}: {d.reason}", d.fix if status != "ok" else "")


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


