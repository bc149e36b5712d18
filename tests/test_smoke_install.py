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


def test_no_cache_unpacked_from_the_flag_or_the_environment(mirror: Path, serve, tmp_path: Path,  # type: ignore[no-untyped-def]
                                                            monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """--no-cache-unpacked (or CUDAREDIST_CACHE_UNPACKED=0, which --cache-unpacked overrides) keeps
    the archives but no unpacked entry; the tree is the same."""
    base = serve(mirror)

    def entries(cache: Path) -> list[str]:
        return [p.name for p in (cache / "unpacked").glob("[0-9a-f]*")]

    for name, flags, env in (("flag", ["--no-cache-unpacked"], None), ("env", [], "0"),
                             ("flag-over-env", ["--cache-unpacked"], "false"), ("default", [], None)):
        if env is None:
            monkeypatch.delenv("CUDAREDIST_CACHE_UNPACKED", raising=False)
        else:
            monkeypatch.setenv("CUDAREDIST_CACHE_UNPACKED", env)
        cache, prefix = tmp_path / name / "cache", tmp_path / name / "cuda"
        r = CliRunner().invoke(app, ["install", "13.0", "--prefix", str(prefix), "--platform", "linux-x86_64",
                                     "--base-url", base, "--cache-dir", str(cache), "-q", *flags])
        assert r.exit_code == 0, (name, r.output)
        assert bool(entries(cache)) == (name in ("flag-over-env", "default")), name
        assert any((cache / "archives").iterdir()) and os.access(prefix / "bin" / "nvcc", os.X_OK)
