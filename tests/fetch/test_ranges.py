"""The marker beside a segmented download, on every OS: written in place without ``os.pwrite``
(Unix only), its handle closed however the download ends, and a cleanup that never hides the
error being reported (on Windows an open handle keeps a file from being deleted)."""

from __future__ import annotations

import contextlib
import errno
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from cudaredist.fetch import ranges, transport
from cudaredist.fetch.client import RetryPolicy, make_client
from cudaredist.fetch.ranges import Marker, discard_partial, marker_path, resume_point
from cudaredist.fetch.transport import Transport
from tests.faultserver import FaultServer
from tests.fetch.test_transport import BLOB, SIZE, Blob, blob, srv  # noqa: F401 - fixtures


def test_marker_is_rewritten_in_place(tmp_path: Path) -> None:
    dest = tmp_path / "a.part"
    dest.write_bytes(b"x" * 5000)
    with contextlib.closing(Marker(dest, 10)) as mark:
        assert marker_path(dest).read_bytes() == b"%020d" % 10
        mark.update(4321)
        mark.update(1234)  # shorter digits: the fixed width overwrites every byte
        assert marker_path(dest).read_bytes() == b"%020d" % 1234
    assert resume_point(dest, 5000) == 1234


@pytest.fixture
def segmented() -> Iterator[Transport]:
    t = Transport(make_client(timeout=2), retry=RetryPolicy(backoff=0.01), sleep=lambda _s: None,
                  connections=4, segment_size=64 << 10)
    yield t
    t.close()


def test_a_segmented_download_that_fails_closes_its_marker(
        segmented: Transport, srv: FaultServer, blob: Blob, tmp_path: Path,  # noqa: F811
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The disk fills up right after the marker is made: the caller gets that error, the
    marker's handle is closed, and the partial download and its marker can both be deleted."""
    made: list[Marker] = []

    class Recorded(Marker):
        def __init__(self, dest: Path, start: int) -> None:
            super().__init__(dest, start)
            made.append(self)

    def full(*_a: object, **_k: object) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(transport, "Marker", Recorded)
    monkeypatch.setattr(transport, "OrderedHasher", full)
    dest = tmp_path / "out.part"
    with pytest.raises(OSError) as caught:
        segmented.download(srv.url(BLOB), dest, size=SIZE, sha256=blob[2])
    assert caught.value.errno == errno.ENOSPC
    assert [m._fd for m in made] == [None]  # closed
    discard_partial(dest)
    assert not dest.exists() and not marker_path(dest).exists()


def test_a_segmented_download_works_and_marks_its_end(
        segmented: Transport, srv: FaultServer, blob: Blob, tmp_path: Path) -> None:  # noqa: F811
    """The default for any archive of 8 MiB and more with --jobs above 1 (os.pwrite broke it on
    Windows)."""
    dest = tmp_path / "out.part"
    segmented.download(srv.url(BLOB), dest, size=SIZE, sha256=blob[2])
    assert dest.read_bytes() == blob[1]
    assert len(srv.ranges_for(BLOB)) == 4
    assert resume_point(dest, SIZE) == SIZE  # the fetcher drops the marker once committed


@pytest.mark.skipif(os.name != "nt", reason="Windows only: an open handle blocks a delete there")
def test_discarding_a_file_another_handle_holds_does_not_raise(tmp_path: Path) -> None:
    """Cleanup runs while another error is reported: a file a scanner holds open must not
    turn into the error the user reads."""
    dest = tmp_path / "held.part"
    dest.write_bytes(b"partial")
    marker_path(dest).write_bytes(b"%020d" % 3)
    with open(marker_path(dest), "rb"):  # Python's open shares read/write, not delete
        with pytest.raises(PermissionError):
            marker_path(dest).unlink()  # the premise: Windows refuses while it is open
        discard_partial(dest)
    assert not dest.exists()  # what could go, went


def test_discard_keeps_going_when_one_file_cannot_go(tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """The same rule on any host, with the Windows refusal injected (WinError 32)."""
    dest = tmp_path / "held.part"
    dest.write_bytes(b"partial")
    marker_path(dest).write_bytes(b"%020d" % 3)
    real_unlink = Path.unlink

    def refuse(self: Path, missing_ok: bool = False) -> None:
        if self.name.endswith(".valid"):
            err = PermissionError(errno.EACCES, "The process cannot access the file because it is "
                                                "being used by another process", str(self))
            err.winerror = 32  # type: ignore[attr-defined]
            raise err
        real_unlink(self, missing_ok)

    monkeypatch.setattr(Path, "unlink", refuse)
    discard_partial(dest)
    assert not dest.exists() and marker_path(dest).exists()
    assert ranges.resume_point(dest, 100) == 0  # what stays resumes nothing
