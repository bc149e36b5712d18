"""Resuming a download an earlier run left in ``tmp/<sha256>.part``: Range from where it stopped,
the whole sha256 checked, a prefix that does not verify downloaded again from zero, and a
partial older than a week ignored."""

from __future__ import annotations

import os
import time
from pathlib import Path

from cudaredist.cache.store import PARTIAL_DAYS
from tests.fetch import test_faults
from tests.fetch.test_faults import NVCC, SEG, Rig
from tests.invariants import assert_installed, partials

served = test_faults.served  # the fault rig's fixtures: one mirror, a 12.9.1 install to start from
rig = test_faults.rig


def archive(rig: Rig) -> bytes:
    return (rig.srv.root / NVCC.lstrip("/")).read_bytes()


def test_resumes_a_partial_download(rig: Rig) -> None:
    rig.cache.partial(rig.sha).write_bytes(archive(rig)[:100_000])
    rig.install("13.0")
    assert rig.nvcc_requests() == ["bytes=100000-"]
    assert_installed(rig.prefix, "13.0.1", rig.cache)
    assert partials(rig.cache) == []


def test_resumes_a_segmented_download_from_its_marker(rig: Rig) -> None:
    """A killed segmented download leaves a pre-sized file with holes: the marker says how much
    of its start is in place."""
    part = rig.cache.partial(rig.sha)
    part.write_bytes(archive(rig)[:100_000] + b"\0" * (rig.size - 100_000))
    part.with_name(part.name + ".valid").write_bytes(b"%020d" % 100_000)
    rig.install("13.0", rig.transport(**SEG))
    ranges = rig.nvcc_requests()
    assert ranges and all(r is not None for r in ranges)
    starts = sorted(int(r.split("=")[1].split("-")[0]) for r in ranges)
    assert starts[0] == 100_000, ranges
    assert_installed(rig.prefix, "13.0.1", rig.cache)
    assert partials(rig.cache) == []


def test_a_prefix_that_does_not_verify_starts_over(rig: Rig) -> None:
    bad = bytearray(archive(rig)[:100_000])
    bad[5000] ^= 0xFF
    rig.cache.partial(rig.sha).write_bytes(bytes(bad))
    rig.install("13.0")
    assert rig.nvcc_requests() == ["bytes=100000-", None]  # resumed, failed sha256, from zero
    assert_installed(rig.prefix, "13.0.1", rig.cache)


def test_an_old_partial_is_dropped(rig: Rig) -> None:
    part = rig.cache.partial(rig.sha)
    part.write_bytes(archive(rig)[:100_000])
    old = time.time() - (PARTIAL_DAYS + 1) * 86400
    os.utime(part, (old, old))
    rig.install("13.0")
    assert rig.nvcc_requests() == [None]
    assert_installed(rig.prefix, "13.0.1", rig.cache)


def test_a_failed_download_keeps_its_partial_for_the_next_run(rig: Rig, tmp_path: Path) -> None:
    import pytest

    from cudaredist.errors import FetchError
    from cudaredist.fetch.client import RetryPolicy

    rig.srv.reset(NVCC, at=150_000, times=None)
    with pytest.raises(FetchError):
        rig.install("13.0", rig.transport(retry=RetryPolicy(attempts=2, backoff=0.01)))
    assert rig.cache.partial(rig.sha).stat().st_size == 150_000
    with rig.srv.lock:
        rig.srv.scripts.clear()
        rig.srv.requests.clear()
    rig.install("13.0")
    assert rig.nvcc_requests() == ["bytes=150000-"]
    assert_installed(rig.prefix, "13.0.1", rig.cache)


def test_a_resumed_prefix_that_fails_while_read_along_says_why_and_downloads_once_more(rig: Rig) -> None:
    """The extraction read the resumed bytes along: the tree is built again, from one new download,
    and the message names the failed check (it said "None; trying the next URL")."""
    from cudaredist.install import Installer
    from cudaredist.progress import Reporter
    from cudaredist.sources.nvidia.index import Index
    from tests.fetch.test_faults import resolve_plan

    class Said(Reporter):
        lines: list[str] = []

        def message(self, text: str) -> None:
            self.lines.append(text)

    bad = bytearray(archive(rig)[:100_000])
    bad[5000] ^= 0xFF
    rig.cache.partial(rig.sha).write_bytes(bytes(bad))
    said = Said()
    with rig.transport() as t:
        plan = resolve_plan(Index(t, rig.cache), "13.0", bases=[rig.srv.base], platform="linux-x86_64",
                            profile="nvcc")
        Installer(t, rig.cache, jobs=4, lock_timeout=10, reporter=said).install(plan, rig.prefix)
    assert_installed(rig.prefix, "13.0.1", rig.cache)
    assert rig.nvcc_requests() == ["bytes=100000-", None]
    wrong = [line for line in said.lines if line.startswith("None") or "trying the next URL" in line]
    assert wrong == [], said.lines
