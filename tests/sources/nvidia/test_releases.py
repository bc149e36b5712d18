"""Train resolution: listing -> labels -> the release a train means (cudaredist.sources.nvidia.releases)."""

from __future__ import annotations

import pytest

from cudaredist.errors import ResolveError
from cudaredist.sources.nvidia.releases import (
    check_train,
    labels_from_listing,
    labels_from_names,
    pick_release,
    sort_labels,
    train_of,
)

WHERE = "https://developer.download.nvidia.com/compute/cuda/redist/"
# The releases FACTS.md §8 lists, plus two invented far-future ones for numeric ordering.
PUBLISHED = ["12.8.0", "12.8.1", "12.9.0", "12.9.1", "13.0.0", "13.0.1", "13.0.2", "13.1.0",
             "13.2.0", "13.2.2", "13.3.0", "13.3.1", "13.4.1", "13.4.2"]


@pytest.mark.parametrize(("train", "labels", "expected"), [
    pytest.param("13.4", PUBLISHED, "13.4.2", id="train-highest-patch"),
    pytest.param("13", PUBLISHED, "13.4.2", id="major-highest-minor-and-patch"),
    pytest.param("12", PUBLISHED, "12.9.1", id="older-major"),
    pytest.param("13.4.1", PUBLISHED, "13.4.1", id="exact-release-not-newest"),
    pytest.param("13.2", PUBLISHED, "13.2.2", id="date-trap-13.2.2-released-after-13.3"),
    pytest.param("13.3", PUBLISHED, "13.3.1", id="date-trap-other-side"),
    pytest.param("13", ["13.9.1", "13.10.0", "13.2.0"], "13.10.0", id="numeric-not-lexical-minor"),
    pytest.param("13.4", ["13.4.9", "13.4.10", "13.4.2"], "13.4.10", id="numeric-not-lexical-patch"),
    pytest.param("13.4", ["13.4.1", "13.40.0", "13.41.2"], "13.4.1", id="13.4-is-not-a-prefix-of-13.40"),
    pytest.param("1", ["1.0.0", "10.0.0", "11.2.3"], "1.0.0", id="1-is-not-a-prefix-of-10"),
    pytest.param("v13.0", PUBLISHED, "13.0.2", id="leading-v"),
    pytest.param(" 13.0\n", PUBLISHED, "13.0.2", id="surrounding-whitespace"),
    pytest.param("13.4", list(reversed(PUBLISHED)), "13.4.2", id="input-order-irrelevant"),
])
def test_pick_release(train: str, labels: list[str], expected: str) -> None:
    assert pick_release(train, labels, WHERE) == expected


def test_missing_train_message_and_fields() -> None:
    with pytest.raises(ResolveError) as info:
        pick_release("13.5", PUBLISHED, WHERE)
    err = info.value
    published = "12.8, 12.9, 13.0, 13.1, 13.2, 13.3, 13.4"
    assert str(err) == f"CUDA train 13.5 has no release at {WHERE}; published trains: {published}."
    assert err.requested == "13.5"
    assert err.where == WHERE
    assert err.available == tuple(published.split(", "))


def test_missing_major_lists_trains() -> None:
    with pytest.raises(ResolveError) as info:
        pick_release("14", PUBLISHED, WHERE)
    assert str(info.value).startswith(f"CUDA train 14 has no release at {WHERE}; published trains: 12.8,")
    assert info.value.available[-1] == "13.4"


@pytest.mark.parametrize(("release", "hint"), [
    pytest.param("13.4.3", "Releases of train 13.4: 13.4.2, 13.4.1.", id="train-exists"),
    pytest.param("13.2.1", "Releases of train 13.2: 13.2.2, 13.2.0.", id="gap-inside-train"),
    pytest.param("13.5.0", "", id="train-missing-too"),
])
def test_missing_exact_release_lists_that_trains_releases(release: str, hint: str) -> None:
    with pytest.raises(ResolveError) as info:
        pick_release(release, PUBLISHED, WHERE)
    message = str(info.value)
    assert message.startswith(f"CUDA release {release} has no release at {WHERE}; published trains: ")
    assert info.value.requested == release
    if hint:
        assert message.endswith(hint)
    else:
        assert "Releases of train" not in message


def test_empty_listing_says_none() -> None:
    with pytest.raises(ResolveError) as info:
        pick_release("13", [], WHERE)
    assert "published trains: none" in str(info.value)
    assert info.value.available == ()


@pytest.mark.parametrize("train", [
    pytest.param("", id="empty"),
    pytest.param("13.", id="trailing-dot"),
    pytest.param(".4", id="leading-dot"),
    pytest.param("13..4", id="double-dot"),
    pytest.param("13.4.1.2", id="four-parts"),
    pytest.param("thirteen", id="word"),
    pytest.param("13.x", id="wildcard"),
    pytest.param("13.4-rc1", id="suffix"),
    pytest.param("latest", id="latest"),
    pytest.param("13.4\n1", id="embedded-newline"),
    pytest.param("\u0661\u0663.\u0664", id="arabic-indic-digits"),
    pytest.param("\uff11\uff13", id="fullwidth-digits"),
    pytest.param("-13", id="negative"),
    pytest.param("13 .4", id="inner-space"),
])
def test_malformed_train(train: str) -> None:
    with pytest.raises(ResolveError) as info:
        check_train(train)
    assert "is not a CUDA train or release" in str(info.value)
    # pick_release validates before it looks at the labels
    with pytest.raises(ResolveError, match="is not a CUDA train or release"):
        pick_release(train, PUBLISHED, WHERE)


@pytest.mark.parametrize(("html", "expected"), [
    pytest.param("<a href='redistrib_12.6.3.json'>redistrib_12.6.3.json</a>", ["12.6.3"],
                 id="single-quotes-as-nvidia"),
    pytest.param('<a href="redistrib_13.0.1.json">x</a>', ["13.0.1"], id="double-quotes"),
    pytest.param("<a href=redistrib_13.0.1.json>x</a>", ["13.0.1"], id="unquoted"),
    pytest.param("<A HREF = 'redistrib_13.0.1.json'>x</A>", ["13.0.1"], id="uppercase-and-spaces"),
    pytest.param('<a href="https://developer.download.nvidia.com/compute/cuda/redist/redistrib_13.4.1.json">',
                 ["13.4.1"], id="absolute-url"),
    pytest.param('<a href="/compute/cuda/redist/redistrib_13.4.1.json">', ["13.4.1"], id="absolute-path"),
    pytest.param("<a href='redistrib_13.0.1.json.sha256'>x</a>", [], id="junk-suffix"),
    pytest.param("<a href='redistrib_13.0.json'>x</a>", [], id="junk-two-part"),
    pytest.param("<a href='redistrib_x.y.z.json'>x</a>", [], id="junk-letters"),
    pytest.param("<a href='redistrib_13.0.1.jsonx'>x</a>", [], id="junk-extension"),
    pytest.param("<a href='other_13.0.1.json'>redistrib_13.0.1.json</a>", [], id="name-only-in-text"),
    pytest.param("<a href='cuda_nvcc/'>cuda_nvcc/</a><a href='../'>../</a>", [], id="directories"),
    pytest.param("<a href='redistrib_13.0.1.json'></a><a href=\"redistrib_13.0.1.json\"></a>", ["13.0.1"],
                 id="duplicates-once"),
    pytest.param("<a href='redistrib_13.9.1.json'></a><a href='redistrib_13.10.0.json'></a>"
                 "<a href='redistrib_12.9.1.json'></a>", ["13.10.0", "13.9.1", "12.9.1"], id="highest-first"),
    pytest.param("", [], id="empty-page"),
])
def test_labels_from_listing(html: str, expected: list[str]) -> None:
    assert labels_from_listing(html) == expected


def test_listing_with_absurd_label_does_not_crash() -> None:
    # int() refuses more than 4300 digits; a hostile listing must not turn into a traceback
    huge = "9" * 5000 + ".0.0"
    labels = labels_from_listing(f"<a href='redistrib_{huge}.json'></a><a href='redistrib_13.0.1.json'></a>")
    assert set(labels) == {huge, "13.0.1"}


@pytest.mark.parametrize(("names", "expected"), [
    pytest.param(["redistrib_13.0.1.json", "index.html", "cuda_nvcc"], ["13.0.1"], id="mirror-dir"),
    pytest.param(["redistrib_13.0.1.json.part", "xredistrib_13.0.1.json"], [], id="near-misses"),
    pytest.param(["redistrib_13.0.1.json\n"], [], id="trailing-newline"),
    pytest.param(["redistrib_12.9.1.json", "redistrib_13.10.0.json", "redistrib_13.2.0.json"],
                 ["13.10.0", "13.2.0", "12.9.1"], id="sorted"),
])
def test_labels_from_names(names: list[str], expected: list[str]) -> None:
    assert labels_from_names(names) == expected


def test_trains_and_train_of() -> None:
    assert train_of("13.10.2") == "13.10"
    with pytest.raises(ResolveError) as info:  # the trains it names: distinct, in numeric order
        pick_release("14", ["13.10.0", "13.9.1", "12.9.1", "13.9.0"], WHERE)
    assert info.value.available == ("12.9", "13.9", "13.10")
    assert sort_labels(["13.2.2", "13.10.0", "13.3.1"]) == ["13.10.0", "13.3.1", "13.2.2"]
