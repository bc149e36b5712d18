"""Installs onto case-insensitive targets: a windows-* tree (even built on Linux), and any prefix
whose filesystem folds case (probed; a real exFAT here)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from cudaredist.cache.store import Cache
from cudaredist.errors import ConflictError
from cudaredist.fetch.transport import Transport
from cudaredist.install import Installer
from cudaredist.sources.nvidia.index import Index, normalize_base
from tests.archives import Exe, MirrorArchive, build_mirror, resolve_plan, toolkit
from tests.invariants import assert_installed, leftovers
from tests.mounts import exfat


@pytest.fixture
def transport() -> Iterator[Transport]:
    t = Transport()
    yield t
    t.close()


def _install(transport: Transport, cache: Cache, mirror: Path, prefix: Path, platform: str) -> None:
    plan = resolve_plan(Index(transport, cache), "13.0", bases=[normalize_base(str(mirror))],
                        platform=platform, profile="nvcc")
    Installer(transport, cache, jobs=4, lock_timeout=10).install(plan, prefix)


def _with_crt(platform: str, members: dict[str, bytes]) -> list[MirrorArchive]:
    archives = toolkit(platform)
    for a in archives:
        if a.component == "cuda_crt":
            a.members = {**a.members, **members}
    return archives


def test_windows_tree_built_on_linux_refuses_case_variants(tmp_path: Path, transport: Transport) -> None:
    """cudart ships include/cuda_runtime.h; crt another file that is the same path on NTFS."""
    mirror = tmp_path / "mirror"
    build_mirror(mirror, "13.0.1", _with_crt("windows-x86_64", {"INCLUDE/CUDA_RUNTIME.H": b"// other"}))
    prefix = tmp_path / "world" / "cuda"
    with pytest.raises(ConflictError, match="case-insensitive") as info:
        _install(transport, Cache(tmp_path / "cache"), mirror, prefix, "windows-x86_64")
    assert {info.value.first, info.value.second} == {"cuda_cudart", "cuda_crt"}
    assert not prefix.exists() and leftovers(prefix) == []


def _no_links(archives: list[MirrorArchive]) -> list[MirrorArchive]:
    """exFAT has no symlinks: cudart without its .so chain (its header is the bytes crt repeats)."""
    for a in archives:
        if a.component == "cuda_cudart":
            a.members = {"include/cuda_runtime.h": b"// rt", "lib/libcudart.so.13": Exe(b"\x7fELF")}
    return archives


@pytest.fixture
def exfat_dir(tmp_path: Path) -> Iterator[Path]:
    with exfat(tmp_path / "mnt", tmp_path / "exfat.img") as mnt:
        yield mnt


def test_prefix_on_exfat_is_probed_case_insensitive(tmp_path: Path, transport: Transport,
                                                    exfat_dir: Path) -> None:
    """A Linux tree without symlinks on exFAT: the same bytes under two spellings are one file
    there, not a conflict; different bytes are a conflict."""
    mirror = tmp_path / "mirror"
    same = {"INCLUDE/CUDA_RUNTIME.H": b"// rt"}  # cudart's bytes under another spelling
    build_mirror(mirror, "13.0.1", _no_links(_with_crt("linux-x86_64", same)))
    cache = Cache(tmp_path / "cache")
    prefix = exfat_dir / "cuda"
    _install(transport, cache, mirror, prefix, "linux-x86_64")
    assert_installed(prefix, "13.0.1", cache)
    assert (prefix / "include" / "cuda_runtime.h").read_bytes() == b"// rt"

    other = tmp_path / "mirror2"
    differ = {"INCLUDE/CUDA_RUNTIME.H": b"// other"}
    build_mirror(other, "13.0.1", _no_links(_with_crt("linux-x86_64", differ)))
    with pytest.raises(ConflictError, match="case-insensitive"):
        _install(transport, cache, other, exfat_dir / "cuda2", "linux-x86_64")
