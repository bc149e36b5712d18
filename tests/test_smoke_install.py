"""A first real install from a loopback mirror, through the CLI."""

from __future__ import annotations

import os
from pathlib import Path

from typer.testing import CliRunner

from cudaredist.cli import app
from tests.hosts import assert_link


def test_install_linux_tree_from_loopback(mirror: Path, serve, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    base = serve(mirror)
    prefix = tmp_path / "cuda 13.0"
    r = CliRunner().invoke(app, ["install", "13.0", "--prefix", str(prefix), "--platform",
                                 "linux-x86_64", "--base-url", base, "-q"])
    assert r.exit_code == 0, r.output
    assert_link(prefix / "lib" / "libcudart.so", "libcudart.so.13")
    assert_link(prefix / "lib64", "lib")
    assert os.access(prefix / "bin" / "nvcc", os.X_OK)
    assert (prefix / "include" / "crt" / "host_config.h").read_bytes() == b"// hc"
    assert (prefix / "licenses" / "cuda_cccl" / "LICENSE").read_bytes() == b"cccl eula"
