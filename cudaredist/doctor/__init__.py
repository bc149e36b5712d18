"""Why CUDA does not work on this machine: checks of the tree, nvcc, the host compiler, a probe
build, the driver, the GPUs and the environment, each giving ok, warn or fail and a fix.

Every check is a function over injected inputs (an environment mapping, a ``which`` over its
PATH, a driver library and loader) returning a :class:`Check`; :func:`run` strings them
together in the order a build meets them:

    toolkit        the tree: install record, release, platform, sizes, links and exec bits
    nvcc           bin/nvcc --version runs and reports the release the record names
    host-compiler  the compiler nvcc will run, judged by the tree's own include/crt/host_config.h
                   (preprocessed with that compiler), never by a version table; on MSVC whether
                   the tree's CCCL needs /Zc:preprocessor; a cross tree: its cross compiler
    probe          a kernel and a host call compiled and linked with bin/nvcc, in a temp dir; a
                   cross tree without its cross compiler: the device code compiled only
    msbuild        a Windows tree: NVIDIA's MSBuild files where CMake's Visual Studio generator
                   (-T cuda=<tree>) looks for them
    driver         libcuda.so.1 / nvcuda.dll through ctypes: absent, the stub, too old, minor compat
    compat         how the tree's programs run here: natively, with its forward-compatibility package
                   (compat/; the decision env and run take), or not at all (803, 804 explained)
    gpu            devices and compute capabilities, and the -arch / CMAKE_CUDA_ARCHITECTURES value
    environment    CUDA_PATH / CUDA_HOME / PATH naming another toolkit; what a plain `nvcc` runs
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from cudaredist import compat
from cudaredist.doctor import driver, toolkit
from cudaredist.doctor.checks import Check, Report, Toolkit, Which, _which
from cudaredist.doctor.compiler import check_host_compiler, check_probe, cross_checks
from cudaredist.fsops import WINDOWS
from cudaredist.installdir import install_dir
from cudaredist.managed import scan
from cudaredist.redo import shell_line, train_argv


# -- the whole run ------------------------------------------------------------------------------
def find_toolkit(train: str, platform: str | None = None, root: Path | str | None = None) -> Path | None:
    """The newest managed toolkit of ``train`` in ``root`` (this host's platform first), else one
    of the train whose record is damaged (the toolkit check says so), or None."""
    here = scan(install_dir(root))
    if (found := here.best(train, platform)) is not None:
        return found.path
    damaged = here.damaged_of(train, platform)
    return Path(damaged.prefix) if damaged is not None else None


@dataclass(frozen=True)
class Inputs:
    """What the checks read from the machine, injectable for tests."""

    env: Mapping[str, str] = field(default_factory=lambda: dict(os.environ))
    which: Which = _which
    driver_library: str | None = None
    host_windows: bool = WINDOWS
    compat: str | None = None  # --compat: auto (None), on, off


def run(prefix: Path | None = None, *, train: str | None = None, inputs: Inputs | None = None,
        find: Callable[[str], Path | None] = find_toolkit) -> Report:
    """All checks in order; without a prefix or train, driver, gpu and environment only."""
    inputs = inputs or Inputs()
    env = inputs.env
    checks: list[Check] = []
    tk: Toolkit | None = None
    release: str | None = None
    if train is not None and prefix is None:
        prefix = find(train)
        if prefix is None:
            checks.append(Check("toolkit", "fail", f"no managed toolkit for {train}: cudaredist has not "
                                "installed one for this train (see `cudaredist list`)",
                                f"install one: {shell_line(train_argv(train))}"))
    if prefix is not None:
        toolkit_check, tk = toolkit.check_toolkit(prefix, host_windows=inputs.host_windows)
        checks.append(toolkit_check)
        if tk is not None:
            nvcc_check, reported = toolkit.check_nvcc(tk, env)
            checks.append(nvcc_check)
            release = tk.release or reported
            if tk.host:  # a cross tree: its cross compiler, or the compile step only
                checks += cross_checks(tk, env, which=inputs.which)
            else:
                checks.append(check_host_compiler(tk, env, windows=tk.windows, which=inputs.which))
                checks.append(check_probe(tk, env, which=inputs.which, host_windows=inputs.host_windows))
            checks.append(toolkit.check_msbuild(tk))
    info = compat.probe_driver(inputs.driver_library or compat.default_driver_library(inputs.host_windows))
    drv = driver.check_driver(info, release, windows=inputs.host_windows)
    if tk and tk.record and release and tk.native and not tk.windows and not tk.host:
        decided = compat.decide(tk.prefix, tk.record["plan"], info, inputs.compat)
        if decided.runs == "compat" and drv.status == "fail" and info.init_result == compat.CUDA_SUCCESS:
            drv = Check("driver", "ok", f"{drv.detail}; the tree's compat package runs them (see compat)")
        checks += [drv, driver.check_compat(decided, release)]
    else:
        checks += [drv] + [Check("compat", "ok", "forward compatibility is for a Linux tree run on its own "
                                 "host")] * (tk is not None)
    checks.append(driver.check_gpu(info, driver.nvcc_gpu_codes(tk, env)))
    checks.append(toolkit.check_environment(env, tk, which=inputs.which, host_windows=inputs.host_windows))
    return Report(str(prefix) if prefix is not None else None, release, tuple(checks))
