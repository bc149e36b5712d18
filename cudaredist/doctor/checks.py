"""What every check shares: the result types, the toolkit under test, subprocess helpers."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

from cudaredist import msvc
from cudaredist.profiles import cross_rule
from cudaredist.redo import request_argv, shell_line

# the programs run on this host: one owner, cudaredist.msvc (hostcc judges compilers with them)
Which = msvc.Which
_which, _run, _first_line = msvc.which_on, msvc.run_program, msvc.first_line

Status = Literal["ok", "warn", "fail"]
_RANK = {"ok": 0, "warn": 1, "fail": 2}
ORDER = ("toolkit", "nvcc", "host-compiler", "probe", "msbuild", "driver", "compat", "gpu", "environment")


@dataclass(frozen=True)
class Check:
    name: str
    status: Status
    detail: str
    fix: str = ""  # what to do when the status is not ok ("" when ok)


@dataclass(frozen=True)
class Report:
    prefix: str | None
    release: str | None
    checks: tuple[Check, ...]

    @property
    def failed(self) -> bool:
        return any(c.status == "fail" for c in self.checks)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class Toolkit:
    """What the toolkit check learned about the tree, for the checks after it."""

    prefix: Path
    release: str | None  # "13.0.2" from the record; None for a tree cudaredist did not install
    platform: str | None
    nvcc_version: str | None  # the record's cuda_nvcc component version ("13.0.88")
    has_nvcc: bool
    native: bool  # runs on this host (not a windows tree on Linux, say)
    windows: bool  # a Windows tree
    host: str = ""  # a cross tree: the platform its tools are for (``install --host``)
    # the install record (None: none), for what redoes its request (:func:`cudaredist.redo.request_argv`)
    record: Mapping[str, Any] | None = field(default=None, compare=False, repr=False)

    def include(self) -> Path:
        """Where nvcc reads the tree's headers: a Linux cross tree's targets/<dir>/include."""
        if self.host and self.platform:
            target_dir = cross_rule(self.platform, self.host).target_dir
            if target_dir:
                return self.prefix / "targets" / target_dir / "include"
        return self.prefix / "include"

    def redo(self, *, reinstall: bool = False, source: str | None = None) -> str:
        """The command that makes this tree again (``TRAIN`` to fill in without a record)."""
        return shell_line(request_argv(self.record, self.prefix, reinstall=reinstall, source=source))

    def nvcc(self) -> Path:
        return self.prefix / "bin" / ("nvcc.exe" if self.windows else "nvcc")

    def not_run(self) -> str | None:
        """Why the tree's programs are not run here, or None."""
        if not self.native:
            return (f"not run: a {self.platform or ('Windows' if self.windows else 'Linux')} tree does not "
                    "run on this host (a cross-compiling tree)")
        return None if self.has_nvcc else "not run: the tree has no nvcc (a runtime-only profile)"


def _short(items: Sequence[str], n: int = 3) -> str:
    return ", ".join(items[:n]) + (f" and {len(items) - n} more" if len(items) > n else "")


