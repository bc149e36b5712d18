"""The benchmark's baseline: a CUDA redist install the way project scripts do it today.

Modelled on executorch's ``.ci/scripts/wheel/install_cuda_redist.py``: for one archive after
another, stream it to a temp file with urllib (a new connection each), hash the whole file
in a second pass (``read_bytes()``, as that script does), check the sha256, extract it with
``tarfile``/``zipfile`` into a staging folder, merge its single top folder into the
destination with ``copytree``, and delete the staging folder and the archive. On Linux
``lib64 -> lib`` is linked at the end. Standard library only.

    python benchmarks/baseline.py --base-url URL --release 13.0.2 --platform linux-x86_64 \
        --dest DIR cuda_nvcc cuda_cudart 'cccl|cuda_cccl' cuda_crt libnvvm
"""

from __future__ import annotations

import argparse
import hashlib
import json
import shutil
import sys
import tarfile
import tempfile
import urllib.request
import zipfile
from pathlib import Path


def fetch(url: str, dest: Path) -> None:
    with urllib.request.urlopen(url, timeout=300) as response, open(dest, "wb") as out:
        shutil.copyfileobj(response, out)


def extract_all(archive: Path, into: Path) -> None:
    """Plain tarfile/zipfile extraction, as project scripts do it (no filter, no hashing)."""
    if archive.suffix == ".zip":
        with zipfile.ZipFile(archive) as zf:
            zf.extractall(into)
    else:
        with tarfile.open(archive) as tf:
            if hasattr(tarfile, "fully_trusted_filter"):
                tf.extractall(into, filter="fully_trusted")
            else:
                tf.extractall(into)


def unpack(archive: Path, into: Path) -> Path:
    extract_all(archive, into)
    (top,) = [p for p in into.iterdir() if p.is_dir()]
    return top


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--base-url", required=True)
    ap.add_argument("--release", required=True)
    ap.add_argument("--platform", required=True)
    ap.add_argument("--dest", required=True, type=Path)
    ap.add_argument("components", nargs="+", help="component names; 'a|b' takes the first one published")
    a = ap.parse_args(argv)
    base = a.base_url.rstrip("/")
    with urllib.request.urlopen(f"{base}/redistrib_{a.release}.json", timeout=120) as r:
        index = json.load(r)
    a.dest.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=a.dest.parent) as tmp:
        work = Path(tmp)
        for choice in a.components:
            names = [n for n in choice.split("|") if a.platform in index.get(n, {})]
            if not names:
                print(f"{a.release} publishes none of {choice} for {a.platform}", file=sys.stderr)
                return 1
            entry = index[names[0]][a.platform]
            archive = work / Path(entry["relative_path"]).name
            fetch(f"{base}/{entry['relative_path']}", archive)
            if hashlib.sha256(archive.read_bytes()).hexdigest() != entry["sha256"]:
                print(f"checksum mismatch for {archive.name}", file=sys.stderr)
                return 1
            staging = work / "staging"
            top = unpack(archive, staging)
            shutil.copytree(top, a.dest, symlinks=True, dirs_exist_ok=True)
            shutil.rmtree(staging)
            archive.unlink()
    lib, lib64 = a.dest / "lib", a.dest / "lib64"
    if a.platform.startswith("linux") and lib.is_dir() and not lib64.exists():
        lib64.symlink_to("lib", target_is_directory=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
