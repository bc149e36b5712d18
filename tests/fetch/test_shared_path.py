"""Two archives write one path, and the download of the one writing it first breaks mid-file:
the other, waiting to compare its copy, must wake, and the install fail within seconds with the
download's own error (a real ``cudaredist install`` process, killed if it hangs)."""

from __future__ import annotations

import os
import random
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.archives import build_mirror, toolkit
from tests.faultserver import FaultServer
from tests.invariants import leftovers

NVCC = "/cuda_nvcc/linux-x86_64/cuda_nvcc-linux-x86_64-13.0.88-archive.tar.xz"
CRT = "/cuda_crt/linux-x86_64/cuda_crt-linux-x86_64-13.0.88-archive.tar.xz"


@pytest.mark.e2e  # a real install whose download breaks mid-file (slow)
def test_waiter_wakes_when_the_writers_download_breaks(tmp_path: Path) -> None:
    shared = random.Random(7).randbytes(400_000)  # incompressible: the archive breaks inside it
    archives = toolkit("linux-x86_64")
    for a in archives:
        if a.component == "cuda_nvcc":
            a.members = {"lib/shared.bin": shared, **a.members}
        if a.component == "cuda_crt":
            a.members = {**a.members, "lib/shared.bin": shared}
    root = tmp_path / "mirror"
    build_mirror(root, "13.0.1", archives)
    size = (root / NVCC.lstrip("/")).stat().st_size
    with FaultServer(root) as srv:
        srv.reset(NVCC, at=size // 2, times=None)  # every try breaks at the same byte: nvcc fails
        srv.stall(CRT, at=100, seconds=0.5)        # crt reaches the shared path after nvcc claimed it
        env = {k: v for k, v in os.environ.items() if k not in ("CUDA_PATH", "CUDA_HOME")}
        prefix = tmp_path / "world" / "cuda"
        t0 = time.monotonic()
        try:
            p = subprocess.run(
                [sys.executable, "-m", "cudaredist", "install", "13.0", "--base-url", srv.base,
                 "--prefix", str(prefix), "--cache-dir", str(tmp_path / "cache"), "--platform",
                 "linux-x86_64", "--quiet", "--jobs", "4"],
                capture_output=True, text=True, timeout=45, env=env, check=False)
        except subprocess.TimeoutExpired as exc:
            raise AssertionError("the install hangs after a shared path's writer failed") from exc
        took = time.monotonic() - t0
        crt_requests = srv.requests_for(CRT)
    assert crt_requests, "crt was never asked for"
    assert p.returncode == 1, p.stderr
    assert "Traceback" not in p.stderr
    assert srv.url(NVCC) in p.stderr  # the download's own error, not the waiter's
    assert "could not compare" not in p.stderr
    assert took < 30, took  # backoff between the 5 tries is at most ~7.5 s
    assert not prefix.exists() and leftovers(prefix) == []
