"""A cross tree (``install --host``): nvcc judged and probed with the target's cross compiler.

With the compiler profiles.toml names for the target (``aarch64-linux-gnu-g++``; or the one
``-ccbin`` / ``NVCC_CCBIN`` name) installed, the host-compiler check and the probe run as for a
native tree, in the environment ``cudaredist env`` gives (``NVCC_CCBIN``, ``-target-dir``). Without
it, the device code is compiled alone (cicc, ptxas, against the target's headers, preprocessed
by this host's own compiler) and the checks say that only the compile step was checked.
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path

from cudaredist.doctor.checks import Check, Toolkit, Which, _run, _which
from cudaredist.doctor.compiler import (
    PROBE_SOURCE,
    check_host_compiler,
    check_probe,
    decision,
    explain_probe_failure,
    probe_fix,
    select_host_compiler,
)
from cudaredist.profiles import cross_rule

# where Debian and Ubuntu have each cross compiler profiles.toml names
_PACKAGES = {"aarch64-linux-gnu-g++": "g++-aarch64-linux-gnu"}


def cross_checks(tk: Toolkit, env: Mapping[str, str], *, which: Which = _which) -> list[Check]:
    """The host-compiler and probe checks of a cross tree."""
    assert tk.platform is not None
    rule = cross_rule(tk.platform, tk.host)
    if skip := tk.not_run():
        return [Check("host-compiler", "ok", skip), Check("probe", "ok", skip)]
    if not rule.target_dir:  # Windows: MSVC's ARM64 cross tools come from the developer prompt
        return [check_host_compiler(tk, env, windows=tk.windows, which=which), check_probe(tk, env)]
    choice = decision(tk, env, windows=False, which=which)[0]  # the environment `cudaredist env` gives
    ready = {**env, **dict(choice.variables if choice else ())}
    hc = select_host_compiler(ready, windows=False, which=which)
    if hc.path is not None:
        probe = check_probe(tk, ready)
        return [check_host_compiler(tk, ready, windows=False, which=which),
                replace(probe, detail=f"{probe.detail} (for {tk.platform}, with {hc.spec} and "
                                      f"-target-dir {rule.target_dir})")]
    package = _PACKAGES.get(rule.compiler)
    fix = (f"install it (Debian/Ubuntu: apt-get install {package})" if package else "install it") + \
        ", or name another with NVCC_CCBIN or -ccbin, to check the link step too"
    return [Check("host-compiler", "warn", f"this {tk.host} -> {tk.platform} tree builds with {hc.spec} "
                  f"({hc.source}), which is not installed: only the compile step was checked", fix),
            compile_only(tk, env, fix)]


def compile_only(tk: Toolkit, env: Mapping[str, str], fix: str, *, timeout: float = 300) -> Check:
    """The probe's device code compiled to a cubin with the target's headers (no host compiler of
    the target needed), preprocessed by this host's own compiler: nvcc's flags from the
    environment are left out (their -target-dir asks for the target's compiler)."""
    include = tk.include()
    dropped = ("NVCC_CCBIN", "NVCC_APPEND_FLAGS", "NVCC_PREPEND_FLAGS")
    plain = {k: v for k, v in env.items() if k not in dropped}
    with tempfile.TemporaryDirectory(prefix="cudaredist-probe-") as tmp:
        (Path(tmp) / "probe.cu").write_text(PROBE_SOURCE, encoding="utf-8")
        started = time.monotonic()
        rc, out = _run([str(tk.nvcc()), "-cubin", "-arch=sm_90", f"-I{include}", "-isystem",
                        str(include / "cccl"), "probe.cu", "-o", "probe.cubin"], plain, cwd=tmp,
                       timeout=timeout)
        took = time.monotonic() - started
        built = rc == 0 and (Path(tmp) / "probe.cubin").is_file()
    if built:
        return Check("probe", "warn", f"{tk.nvcc()} compiled the probe's kernel against {include} in "
                     f"{took:.1f} s; only the compile step was checked (no {tk.platform} compiler to "
                     "build and link the host side)", fix)
    first, meaning, template = explain_probe_failure(out)
    return Check("probe", "fail", f"{tk.nvcc()} could not compile the probe's kernel (exit {rc}): {first}; "
                 f"{meaning}", probe_fix(template, tk, plain, _which))
