"""Archive member names -> tree paths, and the safety rules (cudaredist.tree.paths)."""

from __future__ import annotations

import posixpath
import re

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from cudaredist.errors import UnsafeArchiveError
from cudaredist.tree.paths import clean_member, link_target_inside, strip_top, tree_path
from tests.hosts import WINDOWS

ARCHIVE = "cuda_cudart-linux-x86_64-13.0.96-archive.tar.xz"
_DRIVE = re.compile(r"^[A-Za-z]:")
# Windows reads a backslash in any name as a separator: refused in tars there too, first
_TAR_ROOTED = "backslashes" if WINDOWS else "absolute"


@pytest.mark.parametrize(("name", "zip_entry", "expected"), [
    pytest.param("top/bin/nvcc", False, "top/bin/nvcc", id="plain"),
    pytest.param("top/", False, "top", id="dir-slash"),
    pytest.param("./top/./lib//libcudart.so", False, "top/lib/libcudart.so", id="dots-and-doubled-slashes"),
    pytest.param(".", False, "", id="only-dot"),
    pytest.param("top/a..b/..c", False, "top/a..b/..c", id="dots-inside-names"),
    pytest.param("top/ab:c", True, "top/ab:c", id="colon-not-a-drive"),
])
def test_clean_member_accepts(name: str, zip_entry: bool, expected: str) -> None:
    assert clean_member(name, archive=ARCHIVE, zip_entry=zip_entry) == expected


def test_a_tar_backslash_is_a_character_except_on_windows() -> None:
    if not WINDOWS:
        assert clean_member("top/a\\b", archive=ARCHIVE) == "top/a\\b"
        return
    with pytest.raises(UnsafeArchiveError, match="uses backslashes"):
        clean_member("top/a\\b", archive=ARCHIVE)


@pytest.mark.parametrize(("name", "zip_entry", "reason"), [
    pytest.param("../evil", False, "'..'", id="dotdot-first"),
    pytest.param("top/../../evil", False, "'..'", id="dotdot-inner"),
    pytest.param("top/..", False, "'..'", id="dotdot-last"),
    pytest.param("/etc/passwd", False, "absolute", id="absolute"),
    pytest.param("//server/share", False, "absolute", id="double-slash"),
    pytest.param("C:/x", True, "absolute", id="drive-slash"),
    pytest.param("c:x", True, "absolute", id="drive-relative"),
    pytest.param("./C:/x", True, "drive letter", id="drive-after-dot"),
    pytest.param("top/C:/Windows/x", True, "drive letter", id="drive-inside"),
    pytest.param("top/x:y", False, "drive letter", id="drive-relative-inside"),
    pytest.param("\\evil", False, _TAR_ROOTED, id="tar-leading-backslash"),
    pytest.param("./\\evil", False, _TAR_ROOTED, id="tar-leading-backslash-after-dot"),
    pytest.param("top\\..\\..\\evil", True, "backslashes", id="zip-backslash-dotdot"),
    pytest.param("top\\bin\\nvcc.exe", True, "backslashes", id="zip-backslash"),
    pytest.param("top/a\x00b", False, "control", id="nul"),
    pytest.param("top/a\nb", False, "control", id="newline"),
])
def test_clean_member_refuses(name: str, zip_entry: bool, reason: str) -> None:
    with pytest.raises(UnsafeArchiveError) as info:
        clean_member(name, archive=ARCHIVE, zip_entry=zip_entry)
    assert (info.value.archive, info.value.member) == (ARCHIVE, name)
    assert reason in str(info.value) and ARCHIVE in str(info.value)


@pytest.mark.parametrize(("clean", "top", "expected"), [
    pytest.param("top/bin/nvcc", None, ("top", "bin/nvcc"), id="first-member-sets-top"),
    pytest.param("top", "top", ("top", ""), id="top-itself"),
    pytest.param("top/lib/x", "top", ("top", "lib/x"), id="under-top"),
])
def test_strip_top(clean: str, top: str | None, expected: tuple[str, str]) -> None:
    assert strip_top(clean, top, archive=ARCHIVE) == expected


def test_strip_top_refuses_a_second_top_folder() -> None:
    with pytest.raises(UnsafeArchiveError, match="outside the archive's top folder 'top'") as info:
        strip_top("other/x", "top", archive=ARCHIVE)
    assert info.value.member == "other/x"


@pytest.mark.parametrize(("rest", "expected"), [
    pytest.param("LICENSE", "licenses/cuda_cccl/LICENSE", id="license"),
    pytest.param("LICENSE.txt", "licenses/cuda_cccl/LICENSE.txt", id="license-txt"),
    pytest.param("include/LICENSE", "include/LICENSE", id="nested-license-stays"),
    pytest.param("include/cccl/thrust/version.h", "include/cccl/thrust/version.h", id="other"),
])
def test_tree_path(rest: str, expected: str) -> None:
    assert tree_path(rest, component="cuda_cccl") == expected


def test_tree_path_under_a_root() -> None:
    assert tree_path("visual_studio_integration/MSBuildExtensions/CUDA 13.4.props", component="c",
                     root="extras") == "extras/visual_studio_integration/MSBuildExtensions/CUDA 13.4.props"
    assert tree_path("LICENSE", component="c", root="extras") == "licenses/c/LICENSE"


@pytest.mark.parametrize(("link", "target", "expected"), [
    pytest.param("lib/libcudart.so", "libcudart.so.13", "lib/libcudart.so.13", id="sibling"),
    pytest.param("lib64", "lib", "lib", id="top-level"),
    pytest.param("bin/x", "../lib/y", "lib/y", id="up-then-down"),
    pytest.param("a/b/c", "../../d", "d", id="up-to-root"),
    pytest.param("a/b", "./c/./d", "a/c/d", id="dots"),
    pytest.param("a/b", ".", "a", id="own-dir"),
])
def test_link_target_inside_accepts(link: str, target: str, expected: str) -> None:
    assert link_target_inside(link, target, archive=ARCHIVE) == expected


@pytest.mark.parametrize(("link", "target", "reason"), [
    pytest.param("lib/x", "/etc/passwd", "absolute", id="absolute"),
    pytest.param("lib/x", "C:/Windows", "absolute", id="drive"),
    pytest.param("lib/x", "..\\..\\x", "absolute", id="backslash"),
    pytest.param("x", "..", "leaves the prefix", id="root-parent"),
    pytest.param("lib/x", "../..", "leaves the prefix", id="two-up"),
    pytest.param("a/b/c", "../../../etc", "leaves the prefix", id="three-up"),
    pytest.param("w", "x/y/../..", "climbs with '..' after a name", id="down-then-up"),
    pytest.param("w", "lib/../lib/x", "climbs with '..' after a name", id="down-up-down"),
    pytest.param("lib/x", "", "empty target", id="empty"),
])
def test_link_target_inside_refuses(link: str, target: str, reason: str) -> None:
    with pytest.raises(UnsafeArchiveError) as info:
        link_target_inside(link, target, archive=ARCHIVE)
    assert reason in str(info.value)
    assert info.value.member == link


# -- properties -------------------------------------------------------------------------------------
names = st.lists(st.sampled_from(["a", "b", "..", ".", "", "C:", "c:x", "\\", "..\\x", "/", "x\x00",
                                  "top", "é", ":", "a:b"]), max_size=6).map("/".join) | st.text(max_size=30)


@settings(max_examples=500, database=None, deadline=None)
@given(name=names, zip_entry=st.booleans())
@example(name="./C:/x", zip_entry=True)
@example(name="top/C:/x", zip_entry=False)
def test_clean_member_property(name: str, zip_entry: bool) -> None:
    try:
        clean = clean_member(name, archive=ARCHIVE, zip_entry=zip_entry)
    except UnsafeArchiveError as exc:
        assert exc.member == name
        return
    parts = clean.split("/") if clean else []
    assert ".." not in parts
    assert "" not in parts and "." not in parts
    assert not clean.startswith(("/", "\\"))
    assert not any(_DRIVE.match(p) for p in parts)
    assert not any(ord(c) < 0x20 for c in clean)
    if zip_entry:
        assert "\\" not in clean


paths = st.lists(st.sampled_from(["a", "b", "lib", ".", ".."]), max_size=5).map("/".join)


@settings(max_examples=500, database=None, deadline=None)
@given(link=paths | st.text(max_size=15), target=paths | st.text(max_size=15))
@example(link="w", target="x/y/../..")
def test_link_target_inside_property(link: str, target: str) -> None:
    try:
        resolved = link_target_inside(link, target, archive=ARCHIVE)
    except UnsafeArchiveError:
        return
    assert resolved != ".."
    assert not resolved.startswith(("..", "/"))
    # '..' may only lead the target, so lexical normalisation equals what the OS resolves
    parts = [p for p in target.split("/") if p not in ("", ".")]
    assert ".." not in parts[len(parts) - len([p for p in parts if p != ".."]):]
    assert resolved == posixpath.normpath(posixpath.join(posixpath.dirname(link), target))
