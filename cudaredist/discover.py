"""CUDA toolkits found on this machine besides the managed ones, and how each was found (I/O, read-only).

Looked at, in order: ``CUDA_PATH`` / ``CUDA_HOME``, ``CUDA_PATH_V<major>_<minor>`` (NVIDIA's
Windows installer sets them), ``/usr/local/cuda*`` (NVIDIA's Linux installers and packages),
the active conda environment, and NVIDIA's pip wheels in this interpreter's site-packages.
"""

from __future__ import annotations

import contextlib
import glob
import json
import os
import re
import site
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cudaredist.fsops import WINDOWS
from cudaredist.record import RECORD_DIR


@dataclass(frozen=True)
class Found:
    path: Path
    release: str           # "13.0.88" from version.json, "13.0" from cuda.h, "" when unknown
    how: str               # e.g. "CUDA_PATH", "/usr/local/cuda-*", "conda env", "pip wheels"
    managed: bool = False  # installed by cudaredist (it has an install record)

    def to_json(self) -> dict[str, Any]:
        return {"path": str(self.path), "release": self.release, "found_by": self.how,
                "cudaredist": self.managed}


def release_of(root: Path) -> str:
    """The toolkit release of the tree at ``root``, from version.json or include/cuda.h."""
    with contextlib.suppress(OSError, ValueError, AttributeError):
        data = json.loads((root / "version.json").read_text("utf-8"))
        version = data.get("cuda", {}).get("version") or data.get("cuda_cudart", {}).get("version")
        if isinstance(version, str):
            return version
    for header in (root / "include" / "cuda.h", *root.glob("targets/*/include/cuda.h")):
        with contextlib.suppress(OSError):
            m = re.search(r"#define\s+CUDA_VERSION\s+(\d+)", header.read_text("utf-8", "replace"))
            if m:
                return f"{int(m[1]) // 1000}.{int(m[1]) % 1000 // 10}"
    return ""


def _is_toolkit(root: Path) -> bool:
    return (root / "bin").is_dir() and (
        any((root / "bin" / n).exists() for n in ("nvcc", "nvcc.exe"))
        or (root / "include" / "cuda_runtime.h").is_file())


def _candidates(environ: Mapping[str, str], prefixes: Iterable[str]) -> Iterable[tuple[Path, str]]:
    versioned = sorted(v for v in environ if re.fullmatch(r"CUDA_PATH_V\d+_\d+", v))
    for var in ("CUDA_PATH", "CUDA_HOME", *versioned):
        if environ.get(var):
            yield Path(environ[var]), var
    for p in sorted(glob.glob("/usr/local/cuda*")):
        yield Path(p), "/usr/local/cuda*"
    if environ.get("CONDA_PREFIX"):
        conda = Path(environ["CONDA_PREFIX"])
        yield (conda / "Library" if WINDOWS else conda), "conda env (CONDA_PREFIX)"
    for sp in prefixes:
        # NVIDIA's wheels: nvidia/cu13 (13.x, one tree) or nvidia/cuda_nvcc (12.x, one per component)
        for sub in ("nvidia/cu13", "nvidia/cu12", "nvidia/cuda_nvcc"):
            yield Path(sp) / sub, f"pip wheels ({sys.executable})"


def system_toolkits(environ: Mapping[str, str] | None = None,
                    site_dirs: Iterable[str] | None = None) -> list[Found]:
    """Toolkits on this machine, each once (by real path), in the order they were found."""
    environ = os.environ if environ is None else environ
    if site_dirs is None:
        site_dirs = [*site.getsitepackages(), site.getusersitepackages()]
    seen: dict[str, Found] = {}
    for path, how in _candidates(environ, site_dirs):
        if _is_toolkit(path) and (real := os.path.realpath(path)) not in seen:
            seen[real] = Found(path, release_of(path), how, (path / RECORD_DIR).is_dir())
    return list(seen.values())
