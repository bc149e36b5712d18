"""A Windows host without symlink rights: each link becomes a copy of its target once every file
is there, in dependency order, so a chain arriving in any order loses no name.

Under Wine (the Windows CPython here) ``os.symlink`` "succeeds" and makes nothing: the tree sees
that and takes the same path. On other hosts the missing right (WinError 1314) is injected."""

from __future__ import annotations

import errno
import io
import itertools
import os
from pathlib import Path

import pytest

from cudaredist.tree import staging
from cudaredist.tree.staging import Tree

LIB = b"\x7fELF the library"
CHAIN = [("lib/libx.so", "libx.so.13"), ("lib/libx.so.13", "libx.so.13.0.1")]


@pytest.fixture
def no_symlink_rights(monkeypatch: pytest.MonkeyPatch) -> None:
    if os.name == "nt":
        return  # the real host decides: Wine makes nothing, Windows without rights refuses

    def refuse(*_a: object, **_k: object) -> None:
        exc = OSError(errno.EPERM, "A required privilege is not held by the client")
        exc.winerror = 1314  # type: ignore[attr-defined]
        raise exc

    monkeypatch.setattr(staging, "WINDOWS", True)
    monkeypatch.setattr(staging.os, "symlink", refuse)


@pytest.mark.parametrize("order", list(itertools.permutations(range(3))),
                         ids=lambda o: "-".join(map(str, o)))
def test_a_chain_of_links_is_copied_in_dependency_order(tmp_path: Path, no_symlink_rights: None,
                                                        order: tuple[int, ...]) -> None:
    """libx.so -> libx.so.13 -> libx.so.13.0.1, and a directory link lib64 -> lib whose file is
    read through it, in every arrival order."""
    (tmp_path / "t").mkdir()
    tree = Tree(tmp_path / "t")
    steps = [lambda: tree.add_file("lib/libx.so.13.0.1", io.BytesIO(LIB), 0o755, "c", "a.tar.xz"),
             lambda: [tree.add_symlink(rel, target, "c", "a.tar.xz") for rel, target in CHAIN],
             lambda: tree.add_symlink("lib64", "lib", "c", "a.tar.xz")]
    for i in order:
        steps[i]()
    records = {r.path: r for r in tree.finish()}
    for name in ("lib/libx.so.13.0.1", "lib/libx.so.13", "lib/libx.so", "lib64/libx.so", "lib64/libx.so.13"):
        assert (tmp_path / "t" / name).read_bytes() == LIB, name
    assert records["lib/libx.so"].link == "libx.so.13"  # the record keeps what the archive said


def test_a_loop_of_links_copies_nothing_and_ends(tmp_path: Path, no_symlink_rights: None) -> None:
    (tmp_path / "t").mkdir()
    tree = Tree(tmp_path / "t")
    tree.add_symlink("a", "b", "c", "x.zip")
    tree.add_symlink("b", "a", "c", "x.zip")
    tree.finish()
    assert not (tmp_path / "t" / "a").exists() and not (tmp_path / "t" / "b").exists()
