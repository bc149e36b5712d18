"""Index listing, manifest fetch, offline cache and mirror fallback (sources.nvidia.index), with respx."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import respx

from cudaredist.cache.store import Cache
from cudaredist.errors import FetchError, OfflineError, ResolveError
from cudaredist.fetch.client import RetryPolicy
from cudaredist.fetch.transport import Transport
from cudaredist.sources.nvidia.index import LISTING, Index, default_bases, normalize_base
from tests.archives import resolve_plan
from tests.hosts import WINDOWS

BASE = "https://developer.download.nvidia.com/compute/cuda/redist/"
MIRROR = "https://mirror.example.org/cuda/redist/"
SHA = "cd" * 32


def _manifest(label: str, platforms: tuple[str, ...] = ("linux-x86_64", "windows-x86_64")) -> bytes:
    doc: dict[str, object] = {"release_date": "2025-09-04", "release_label": label, "release_product": "cuda"}
    for comp in ("cuda_nvcc", "cuda_cudart", "cuda_cccl", "cuda_crt", "libnvvm",
                 "cuda_profiler_api", "cuda_nvtx"):
        body: dict[str, object] = {"name": comp, "license": "CUDA Toolkit", "version": "13.0.88"}
        for plat in platforms:
            ext = "zip" if plat.startswith("windows") else "tar.xz"
            body[plat] = {"relative_path": f"{comp}/{plat}/{comp}-{plat}-13.0.88-archive.{ext}",
                          "sha256": SHA, "md5": "0" * 32, "size": "1234"}
        doc[comp] = body
    return json.dumps(doc, indent=4).encode()


def _listing(*labels: str, quote: str = "'") -> str:
    rows = "\n".join(f"<a href={quote}redistrib_{lbl}.json{quote}>redistrib_{lbl}.json</a>" for lbl in labels)
    dirs = "<a href='../'>../</a>\n<a href='cuda_nvcc/'>cuda_nvcc/</a>"
    return f"<html><body><pre>\n{dirs}\n{rows}\n</pre></body></html>"


@pytest.fixture
def router() -> Iterator[respx.MockRouter]:
    with respx.mock(assert_all_called=False, assert_all_mocked=True) as r:
        yield r


@pytest.fixture
def sleeps() -> list[float]:
    return []


@pytest.fixture
def transport(router: respx.MockRouter, sleeps: list[float]) -> Iterator[Transport]:
    t = Transport(httpx.Client(), retry=RetryPolicy(attempts=3), sleep=sleeps.append)
    yield t
    t.close()


@pytest.fixture
def cache(tmp_path: Path) -> Cache:
    return Cache(tmp_path / "cache")


def _no_network() -> Transport:
    """A transport whose every request fails the test: --offline must not use it."""
    def refuse(request: httpx.Request) -> httpx.Response:
        raise AssertionError(f"--offline touched the network: {request.url}")

    return Transport(httpx.Client(transport=httpx.MockTransport(refuse)), sleep=lambda s: None)


# -- listing -------------------------------------------------------------------------------------------
def test_listing_mixed_hrefs(router: respx.MockRouter, transport: Transport, cache: Cache) -> None:
    html = (_listing("12.9.1") + _listing("13.0.1", quote='"')
            + f'<a href="{BASE}redistrib_13.10.0.json">abs</a>'
            + "<a href='redistrib_13.0.1.json.md5'>junk</a><a href='redistrib_13.json'>junk</a>"
            + "redistrib_99.0.0.json in plain text")
    route = router.get(BASE).mock(return_value=httpx.Response(200, text=html))
    assert Index(transport, cache).labels(BASE) == ["13.10.0", "13.0.1", "12.9.1"]
    assert route.call_count == 1
    assert cache.load_index(BASE, LISTING) == html.encode()


def test_manifest_fetch_is_parsed_and_cached(router: respx.MockRouter, transport: Transport,
                                             cache: Cache) -> None:
    body = _manifest("13.0.1")
    router.get(f"{BASE}redistrib_13.0.1.json").mock(return_value=httpx.Response(200, content=body))
    m = Index(transport, cache).manifest(BASE, "13.0.1")
    assert (m.label, m.source) == ("13.0.1", f"{BASE}redistrib_13.0.1.json")
    assert set(m.components) == {"cuda_nvcc", "cuda_cudart", "cuda_cccl", "cuda_crt", "libnvvm",
                                 "cuda_profiler_api", "cuda_nvtx"}
    assert cache.load_index(BASE, "redistrib_13.0.1.json") == body


def test_resolve_picks_the_trains_highest_release(router: respx.MockRouter, transport: Transport,
                                                  cache: Cache) -> None:
    listing = _listing("13.0.1", "13.0.2", "13.0.10", "13.1.0")
    router.get(BASE).mock(return_value=httpx.Response(200, text=listing))
    route = router.get(f"{BASE}redistrib_13.0.10.json").mock(
        return_value=httpx.Response(200, content=_manifest("13.0.10")))
    assert Index(transport, cache).release("13.0", [BASE]).label == "13.0.10"
    assert route.call_count == 1


def test_manifest_404_is_a_fetch_error_with_the_url(router: respx.MockRouter, transport: Transport,
                                                    cache: Cache, sleeps: list[float]) -> None:
    url = f"{BASE}redistrib_13.0.1.json"
    route = router.get(url).mock(return_value=httpx.Response(404))
    with pytest.raises(FetchError) as info:
        Index(transport, cache).manifest(BASE, "13.0.1")
    assert (info.value.url, info.value.status) == (url, 404)
    assert url in str(info.value) and "404" in str(info.value)
    assert route.call_count == 1 and sleeps == []  # a 404 is not retried
    assert cache.load_index(BASE, "redistrib_13.0.1.json") is None


@pytest.mark.parametrize("failures", [
    pytest.param([httpx.Response(503)], id="503"),
    pytest.param([httpx.Response(500), httpx.Response(502)], id="500-then-502"),
    pytest.param([httpx.Response(429, headers={"Retry-After": "7"})], id="429-retry-after"),
    pytest.param([httpx.ConnectError("refused")], id="connect-error"),
    pytest.param([httpx.ReadTimeout("slow")], id="read-timeout"),
])
def test_transient_failures_are_retried(router: respx.MockRouter, transport: Transport, cache: Cache,
                                        sleeps: list[float], failures: list[object]) -> None:
    body = _manifest("13.0.1")
    route = router.get(f"{BASE}redistrib_13.0.1.json").mock(
        side_effect=[*failures, httpx.Response(200, content=body)])
    assert Index(transport, cache).manifest(BASE, "13.0.1").label == "13.0.1"
    assert route.call_count == len(failures) + 1
    assert len(sleeps) == len(failures)
    if "429" in str(failures[0]):
        assert sleeps == [7.0]


def test_persistent_5xx_gives_up_after_the_policy(router: respx.MockRouter, transport: Transport,
                                                   cache: Cache, sleeps: list[float]) -> None:
    route = router.get(BASE).mock(return_value=httpx.Response(503))
    with pytest.raises(FetchError) as info:
        Index(transport, cache).labels(BASE)
    assert route.call_count == 3
    assert len(sleeps) == 2
    assert info.value.url == BASE
    assert "after 3 attempts" in str(info.value)


# -- offline -------------------------------------------------------------------------------------------
def test_offline_reads_what_online_cached(router: respx.MockRouter, transport: Transport,
                                          cache: Cache) -> None:
    router.get(BASE).mock(return_value=httpx.Response(200, text=_listing("13.0.1", "13.0.2", "12.9.1")))
    router.get(f"{BASE}redistrib_13.0.2.json").mock(
        return_value=httpx.Response(200, content=_manifest("13.0.2")))
    online = Index(transport, cache).release("13.0", [BASE])

    offline = Index(_no_network(), cache, offline=True)
    assert offline.labels(BASE) == ["13.0.2", "13.0.1", "12.9.1"]  # highest first, as online
    again = offline.release("13.0", [BASE])
    assert again == online


def test_offline_missing_manifest_names_file_url_and_cache(router: respx.MockRouter, transport: Transport,
                                                          cache: Cache) -> None:
    router.get(BASE).mock(return_value=httpx.Response(200, text=_listing("13.0.1", "13.0.2")))
    Index(transport, cache).labels(BASE)
    with pytest.raises(OfflineError) as info:
        Index(_no_network(), cache, offline=True).release("13.0", [BASE])
    url = f"{BASE}redistrib_13.0.2.json"
    message = str(info.value)
    assert info.value.url == url
    assert "redistrib_13.0.2.json" in message and url in message and str(cache.root) in message
    assert message.startswith("--offline: ")


def test_offline_without_any_listing(cache: Cache) -> None:
    with pytest.raises(OfflineError) as info:
        Index(_no_network(), cache, offline=True).labels(BASE)
    assert info.value.url == BASE
    assert BASE in str(info.value) and str(cache.root) in str(info.value)


def test_offline_local_mirror_needs_no_cache(mirror: Path, cache: Cache) -> None:
    base = mirror.as_uri() + "/"
    index = Index(_no_network(), cache, offline=True)
    assert index.labels(base) == ["13.0.1", "12.9.1"]
    assert index.release("13", [base]).label == "13.0.1"


# -- local bases ------------------------------------------------------------------------------------------
def test_local_directory_base(mirror: Path, cache: Cache) -> None:
    index = Index(_no_network(), cache)
    base = normalize_base(str(mirror))
    assert base == mirror.as_uri() + "/"
    assert index.labels(base) == ["13.0.1", "12.9.1"]
    assert index.manifest(base, "12.9.1").components.keys() == {"cuda_nvcc", "cuda_cudart", "cuda_cccl",
                                                                  "cuda_profiler_api", "cuda_nvtx"}


def test_missing_local_directory(tmp_path: Path, cache: Cache) -> None:
    base = (tmp_path / "nope").as_uri() + "/"
    with pytest.raises(FetchError, match="does not exist") as info:
        Index(_no_network(), cache).labels(base)
    assert info.value.url == base


# -- mirror, then base ---------------------------------------------------------------------------------------
def _serve(router: respx.MockRouter, base: str, *labels: str) -> dict[str, respx.Route]:
    routes = {"listing": router.get(base).mock(return_value=httpx.Response(200, text=_listing(*labels)))}
    for lbl in labels:
        routes[lbl] = router.get(f"{base}redistrib_{lbl}.json").mock(
            return_value=httpx.Response(200, content=_manifest(lbl)))
    return routes


def test_mirror_lacking_the_train_falls_back_to_base(router: respx.MockRouter, transport: Transport,
                                                     cache: Cache) -> None:
    _serve(router, MIRROR, "12.9.1")
    base_routes = _serve(router, BASE, "12.9.1", "13.0.1")
    plan = resolve_plan(Index(transport, cache), "13.0", bases=[MIRROR, BASE], platform="linux-x86_64",
                        profile="nvcc")
    assert (plan.release, plan.base_url) == ("13.0.1", BASE)
    assert base_routes["13.0.1"].call_count == 1
    assert all(i.url.startswith(BASE) and i.fallback_urls == () for i in plan.items)


@pytest.mark.parametrize(("mirror_down", "tries"), [
    pytest.param({"return_value": httpx.Response(500)}, 3, id="mirror-5xx"),
    pytest.param({"side_effect": httpx.ConnectError}, 1, id="mirror-unreachable"),  # given up at once
    pytest.param({"return_value": httpx.Response(404)}, 1, id="mirror-404"),
])
def test_broken_mirror_falls_back_to_base(router: respx.MockRouter, transport: Transport, cache: Cache,
                                          mirror_down: dict[str, object], tries: int) -> None:
    mirror_route = router.get(MIRROR).mock(**mirror_down)
    _serve(router, BASE, "13.0.1")
    plan = resolve_plan(Index(transport, cache), "13.0", bases=[MIRROR, BASE], platform="linux-x86_64",
                        profile="nvcc")
    assert plan.base_url == BASE
    assert mirror_route.call_count == tries


def test_mirror_with_the_train_gets_base_as_fallback(router: respx.MockRouter, transport: Transport,
                                                     cache: Cache) -> None:
    _serve(router, MIRROR, "13.0.1")
    base_routes = _serve(router, BASE, "13.0.1", "13.0.2")
    plan = resolve_plan(Index(transport, cache), "13.0", bases=[MIRROR, BASE], platform="windows-x86_64",
                        profile="nvcc")
    assert (plan.release, plan.base_url) == ("13.0.1", MIRROR)  # the mirror's newest, not the base's
    assert base_routes["listing"].call_count == 0
    assert len(plan.items) == 7
    for item in plan.items:
        rel = item.archive.relative_path
        assert item.urls == (MIRROR + rel, BASE + rel)
        assert item.fallback_urls == (BASE + rel,)


def test_no_base_has_the_train(router: respx.MockRouter, transport: Transport, cache: Cache) -> None:
    _serve(router, MIRROR, "12.9.1")
    _serve(router, BASE, "12.9.1", "13.0.1")
    with pytest.raises(ResolveError) as info:
        resolve_plan(Index(transport, cache), "13.4", bases=[MIRROR, BASE], platform="linux-x86_64",
                     profile="nvcc")
    message = str(info.value)
    assert MIRROR in message and BASE in message
    assert "published trains: 12.9, 13.0" in message
    assert (info.value.requested, info.value.where) == ("13.4", f"{MIRROR}, {BASE}")
    assert info.value.available == ("12.9", "13.0")  # the union of what the bases publish


def test_mirror_down_and_base_without_the_train_is_a_fetch_error(router: respx.MockRouter,
                                                                 transport: Transport, cache: Cache) -> None:
    router.get(MIRROR).mock(return_value=httpx.Response(404))
    _serve(router, BASE, "13.0.1")
    with pytest.raises(FetchError) as info:
        resolve_plan(Index(transport, cache), "13.4", bases=[MIRROR, BASE], platform="linux-x86_64",
                     profile="nvcc")
    assert info.value.url == MIRROR and "13.4 has no release" in str(info.value)


def test_single_base_error_is_raised_as_is(router: respx.MockRouter, transport: Transport,
                                           cache: Cache) -> None:
    _serve(router, BASE, "13.0.1")
    with pytest.raises(ResolveError) as info:
        resolve_plan(Index(transport, cache), "13.5", bases=[BASE], platform="linux-x86_64", profile="nvcc")
    assert str(info.value) == f"CUDA train 13.5 has no release at {BASE}; published trains: 13.0."
    assert info.value.available == ("13.0",)


def test_offline_with_mirror_and_base_uncached_stays_offline_error(cache: Cache) -> None:
    with pytest.raises(OfflineError) as info:
        resolve_plan(Index(_no_network(), cache, offline=True), "13.0", bases=[MIRROR, BASE],
                     platform="linux-x86_64", profile="nvcc")
    assert MIRROR in str(info.value) and BASE in str(info.value)


# -- base URLs -------------------------------------------------------------------------------------------
@pytest.mark.parametrize(("url", "expected"), [
    pytest.param("https://h/redist", "https://h/redist/", id="https-gets-slash"),
    pytest.param("http://h/redist/", "http://h/redist/", id="http-kept"),
    pytest.param("HTTPS://h/x", "HTTPS://h/x/", id="scheme-case"),
    pytest.param("file:///srv/mirror", "file:///srv/mirror/", id="file-url"),
    pytest.param(*(("C:\\srv\\mirror", "file:///C:/srv/mirror/") if WINDOWS else ("/srv/mirror", "file:///srv/mirror/")),
                 id="directory"),
    pytest.param("  https://h/x  ", "https://h/x/", id="whitespace"),
])
def test_normalize_base(url: str, expected: str) -> None:
    assert normalize_base(url) == expected


@pytest.mark.parametrize("url", [
    pytest.param("", id="empty"),
    pytest.param("ftp://h/x", id="ftp"),
    pytest.param("s3://bucket/x", id="s3"),
])
def test_normalize_base_refuses(url: str) -> None:
    with pytest.raises(ResolveError):
        normalize_base(url)


def test_default_bases(monkeypatch: pytest.MonkeyPatch) -> None:
    assert default_bases() == [BASE]
    assert default_bases(mirror=MIRROR) == [MIRROR, BASE]
    assert default_bases(mirror=MIRROR, fallback=False) == [MIRROR]
    assert default_bases(BASE, BASE) == [BASE]
    monkeypatch.setenv("CUDAREDIST_MIRROR", "https://env.example/m")
    monkeypatch.setenv("CUDAREDIST_BASE_URL", "https://env.example/b")
    assert default_bases() == ["https://env.example/m/", "https://env.example/b/"]
    assert default_bases("https://cli/b", "https://cli/m") == ["https://cli/m/", "https://cli/b/"]
