"""A warm install asks no server: index pages and manifests fetched less than the index TTL ago
answer for it (cache/store.py ``fresh_index``); ``--refresh``, a TTL of 0 or an older copy ask again."""

from __future__ import annotations

import functools
import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest
import respx

from cudaredist.api import InstallRequest, install
from cudaredist.cache.store import ENV_INDEX_TTL, Cache, index_ttl_default
from cudaredist.fetch.transport import Transport
from cudaredist.sources.base import Where
from cudaredist.sources.nvidia.index import LISTING, Index
from tests.loopback import QuietHandler, serving
from tests.sources.nvidia.test_index import BASE, _listing, _manifest

Serve = Callable[[Path], str]


@pytest.fixture
def router() -> Iterator[respx.MockRouter]:
    with respx.mock(assert_all_called=False, assert_all_mocked=True) as r:
        yield r


def _routes(router: respx.MockRouter) -> tuple[respx.Route, respx.Route]:
    listing = router.get(BASE).mock(return_value=httpx.Response(200, text=_listing("13.0.1")))
    manifest = router.get(f"{BASE}redistrib_13.0.1.json").mock(
        return_value=httpx.Response(200, content=_manifest("13.0.1")))
    return listing, manifest


def _resolve(cache: Cache) -> str:
    with Transport(httpx.Client()) as transport:
        return Index(transport, cache).release("13.0", [BASE]).label


def test_a_fresh_copy_answers_for_the_server(router: respx.MockRouter, tmp_path: Path) -> None:
    listing, manifest = _routes(router)
    assert _resolve(Cache(tmp_path / "c", index_ttl=600)) == "13.0.1"
    assert (listing.call_count, manifest.call_count) == (1, 1)
    assert _resolve(Cache(tmp_path / "c", index_ttl=600)) == "13.0.1"  # another run, same cache
    assert (listing.call_count, manifest.call_count) == (1, 1)


@pytest.mark.parametrize("age", [601.0, -120.0])  # older than the TTL; from the future (a clock set back)
def test_a_copy_not_fresh_is_fetched_again(router: respx.MockRouter, tmp_path: Path, age: float) -> None:
    listing, manifest = _routes(router)
    cache = Cache(tmp_path / "c", index_ttl=600)
    _resolve(cache)
    for name in (LISTING, "redistrib_13.0.1.json"):
        path = cache.index_dir(BASE) / name
        os.utime(path, (time.time() - age, time.time() - age))
    _resolve(cache)
    assert (listing.call_count, manifest.call_count) == (2, 2)


def test_without_a_ttl_every_run_asks(router: respx.MockRouter, tmp_path: Path) -> None:
    listing, manifest = _routes(router)
    _resolve(Cache(tmp_path / "c"))  # commands other than install: 0
    _resolve(Cache(tmp_path / "c"))
    assert (listing.call_count, manifest.call_count) == (2, 2)


def test_the_ttl_comes_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ENV_INDEX_TTL, raising=False)
    assert index_ttl_default() == 600.0
    for raw, want in (("0", 0.0), ("30", 30.0), ("-5", 0.0), ("soon", 600.0)):
        monkeypatch.setenv(ENV_INDEX_TTL, raw)
        assert index_ttl_default() == want


class _Counting(QuietHandler):
    def __init__(self, *args: object, seen: list[str], **kw: object) -> None:
        self.seen = seen
        super().__init__(*args, **kw)  # type: ignore[arg-type]

    def do_GET(self) -> None:
        self.seen.append(self.path)
        super().do_GET()


def _install(base: str, prefix: Path, cache: Path, *, refresh: bool = False) -> None:
    out = install(InstallRequest(trains=("13.0",), prefix=prefix, platform="linux-x86_64", cache_dir=cache,
                                 refresh=refresh, where=Where(base_url=base)))
    assert not out.failed and not out.done[0].noop


def test_a_warm_install_asks_no_server_and_refresh_asks(mirror: Path, tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ENV_INDEX_TTL, raising=False)
    seen: list[str] = []
    with serving(functools.partial(_Counting, directory=str(mirror), seen=seen)) as base:
        _install(base, tmp_path / "p1", tmp_path / "cache")
        assert any(p.endswith(".json") for p in seen)
        seen.clear()
        _install(base, tmp_path / "p2", tmp_path / "cache")  # a fresh prefix from a warm cache
        assert seen == []
        _install(base, tmp_path / "p3", tmp_path / "cache", refresh=True)
        assert "/redistrib_13.0.1.json" in seen and "/" in seen
        seen.clear()
        monkeypatch.setenv(ENV_INDEX_TTL, "0")
        _install(base, tmp_path / "p4", tmp_path / "cache")
        assert "/redistrib_13.0.1.json" in seen


def test_the_package_index_pages_are_fresh_for_the_ttl(tmp_path: Path) -> None:
    from cudaredist.sources.pypi import index as pypi
    from cudaredist.sources.pypi import source as planner
    from tests.sources.pypi.test_pypi_source import INDEX, FakeIndex, add_release_13_0, transport

    fake = FakeIndex()
    with respx.mock(assert_all_called=False) as router:
        fake.mount(router)
        add_release_13_0(fake)

        def plan(ttl: float) -> object:
            idx = pypi.WheelIndex(transport(), Cache(tmp_path / "c", index_ttl=ttl), index_url=INDEX)
            return planner.resolve_plan(idx, "13.0", platform="linux-x86_64")

        first = plan(600)
        pages = [u for u in fake.requests if "/simple/" in u]
        assert pages
        assert plan(600) == first
        assert [u for u in fake.requests if "/simple/" in u] == pages  # no page asked again
        plan(0)
        assert len([u for u in fake.requests if "/simple/" in u]) == 2 * len(pages)


def test_a_warm_install_from_an_html_index_asks_no_server(tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """A PEP 503 index (HTML only: no sizes) whose every wheel is cached: the sizes come from the
    cache (the bytes are checked against the page's sha256 anyway), not from a HEAD per wheel."""
    from tests.sources.pypi.test_pypi_source import INDEX, FakeIndex, add_release_13_0

    monkeypatch.delenv(ENV_INDEX_TTL, raising=False)
    fake = FakeIndex(html=True)
    add_release_13_0(fake)
    with respx.mock(assert_all_called=False) as router:
        fake.mount(router)
        for n, prefix in enumerate((tmp_path / "p1", tmp_path / "p2")):
            calls = len(router.calls)
            out = install(InstallRequest(trains=("13.0",), prefix=prefix, platform="linux-x86_64",
                                         cache_dir=tmp_path / "cache", source="pypi",
                                         where=Where(index_url=INDEX)))
            assert not out.failed and not out.done[0].noop
            asked = [f"{c.request.method} {c.request.url}" for c in list(router.calls)[calls:]]
            assert n == 0 or asked == [], asked


def test_the_index_lock_waits_as_long_as_lock_timeout_says(mirror: Path, tmp_path: Path) -> None:
    """Another process holds the lock of the base's index pages: --lock-timeout 0.5 gives up after
    half a second (it waited a fixed 600 s)."""
    import filelock

    from cudaredist.errors import BusyError

    with serving(functools.partial(QuietHandler, directory=str(mirror))) as base:
        cache = Cache(tmp_path / "cache")
        cache.prepare()
        (cache.root / "locks").mkdir(exist_ok=True)
        held = filelock.FileLock(str(cache.root / "locks" / f"index-{cache.index_dir(base).name}.lock"))
        with held:
            t0 = time.monotonic()
            with pytest.raises(BusyError, match="for more than 0.5s"):
                install(InstallRequest(trains=("13.0",), prefix=tmp_path / "p", platform="linux-x86_64",
                                       cache_dir=cache.root, lock_timeout=0.5, where=Where(base_url=base)))
            assert time.monotonic() - t0 < 30


def test_the_metapackage_wheel_lock_waits_as_long_as_lock_timeout_says(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Another process holds the cache entry lock of the metapackage wheel a pypi install reads its
    requirements from: --lock-timeout 0.5 gives up after half a second (it waited as long as
    CUDAREDIST_LOCK_TIMEOUT, or 600 s, says)."""
    import filelock

    from cudaredist.errors import BusyError
    from tests.sources.pypi.test_pypi_source import INDEX, FakeIndex, add_release_13_0

    monkeypatch.setenv("CUDAREDIST_LOCK_TIMEOUT", "3")
    fake = FakeIndex()
    add_release_13_0(fake)
    wheel = next(f for files in fake.projects.values() for f in files
                 if f["filename"] == "cuda_toolkit-13.0.2-py2.py3-none-any.whl")
    cache = Cache(tmp_path / "cache")
    cache.prepare()
    (cache.root / "locks").mkdir(exist_ok=True)
    with respx.mock(assert_all_called=False) as router, \
            filelock.FileLock(str(cache.root / "locks" / f"{wheel['hashes']['sha256']}.lock")):
        fake.mount(router)
        with pytest.raises(BusyError, match="for more than 0.5s"):
            install(InstallRequest(trains=("13.0",), prefix=tmp_path / "p", platform="linux-x86_64",
                                   cache_dir=cache.root, source="pypi", lock_timeout=0.5,
                                   where=Where(index_url=INDEX)))
    assert not (tmp_path / "p").exists()


def test_a_copy_keeps_the_urls_it_came_through(tmp_path: Path) -> None:
    """The hops are stored beside the page (trust judges them on each use); a copy without them (an
    older cudaredist's) is not fresh: the server is asked again."""
    cache = Cache(tmp_path / "c", index_ttl=600)
    hops = ("http://0.0.0.0:8080/redistrib_13.0.1.json",)
    cache.store_index(BASE, "redistrib_13.0.1.json", b"{}", hops)
    assert cache.fresh_index(BASE, "redistrib_13.0.1.json") == (b"{}", hops)
    asked: list[str] = []
    again = cache.index_page(BASE, "redistrib_13.0.1.json", lambda: (asked.append("x") or b"{1}", ()),
                             usable=lambda h: h != hops)  # this run's trust refuses the stored hop
    assert (again, asked) == ((b"{1}", ()), ["x"])
    (cache.index_dir(BASE) / "redistrib_13.0.1.json.from").unlink()
    assert cache.fresh_index(BASE, "redistrib_13.0.1.json") is None
    assert cache.load_index(BASE, "redistrib_13.0.1.json") == b"{1}"
