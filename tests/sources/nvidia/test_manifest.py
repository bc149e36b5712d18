"""Parsing redistrib JSON: every real NVIDIA manifest, hostile ones, and arbitrary input."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from cudaredist.errors import ManifestError
from cudaredist.plan import archive_url, version_key
from cudaredist.sources.nvidia.manifest import MAX_ARCHIVE_SIZE, Manifest, check_relative_path, parse_manifest
from tests.conftest import SHARED_MANIFESTS

SHA = "ab" * 32


def _real_labels() -> list[str]:
    found = [p.stem.removeprefix("redistrib_") for p in SHARED_MANIFESTS.glob("redistrib_*.json")]
    # one placeholder keeps the tests collected (and skipped by the fixture) when ../shared is absent
    return sorted(found, key=version_key) or ["absent"]


REAL = _real_labels()


def _raw(shared: Path, label: str) -> tuple[bytes, dict[str, Any]]:
    data = (shared / f"redistrib_{label}.json").read_bytes()
    return data, json.loads(data)


def _raw_entries(raw: dict[str, Any]) -> dict[tuple[str, str, str], dict[str, Any]]:
    """(component, platform, variant or '') -> entry, walked independently of the parser."""
    out: dict[tuple[str, str, str], dict[str, Any]] = {}
    for comp, body in raw.items():
        if not isinstance(body, dict):
            continue
        for plat, value in body.items():
            if not isinstance(value, dict):
                continue
            if "relative_path" in value:
                out[(comp, plat, "")] = value
            else:
                out.update({(comp, plat, var): entry for var, entry in value.items()})
    return out


# -- the real manifests --------------------------------------------------------------------------
@pytest.mark.parametrize("label", REAL)
def test_real_manifest_parses_faithfully(shared_manifests: Path, label: str) -> None:
    data, raw = _raw(shared_manifests, label)
    m = parse_manifest(data, label=label)
    assert m.label == label
    assert m.release_date == raw["release_date"]
    parsed: dict[tuple[str, str, str], Any] = {}
    for key, comp in m.components.items():
        assert comp.version == raw[key]["version"]
        parsed.update({(key, plat, ""): a for plat, a in comp.archives.items()})
        parsed.update({(key, plat, var): a for plat, vs in comp.variants.items() for var, a in vs.items()})
    entries = _raw_entries(raw)
    assert parsed.keys() == entries.keys()
    for where, archive in parsed.items():
        entry = entries[where]
        assert type(archive.size) is int, where
        assert archive.size == int(entry["size"]) > 0, where
        assert archive.sha256 == entry["sha256"].lower(), where
        assert archive.relative_path == entry["relative_path"], where
        assert archive.md5 == entry["md5"], where


@pytest.mark.parametrize("label", REAL)
def test_release_label_filled_from_file_name_before_12_2(shared_manifests: Path, label: str) -> None:
    data, raw = _raw(shared_manifests, label)
    old = version_key(label) < (12, 2)
    # FACTS §2: release_label first appears in 12.2.0
    assert ("release_label" not in raw) is old
    assert parse_manifest(data).label == ("" if old else label)
    assert parse_manifest(data, label=label).label == label


def test_release_label_mismatch_is_refused() -> None:
    doc = json.dumps({"release_label": "13.0.1", "release_date": "2025-09-04"})
    with pytest.raises(ManifestError) as info:
        parse_manifest(doc, label="13.0.2")
    assert info.value.entry == "release_label"
    assert info.value.source == "redistrib_13.0.2.json"
    assert "'13.0.1'" in str(info.value) and "'13.0.2'" in str(info.value)


@pytest.mark.parametrize("label", REAL)
def test_nested_cuda_variant_entries(shared_manifests: Path, label: str) -> None:
    data, raw = _raw(shared_manifests, label)
    m = parse_manifest(data, label=label)
    train = ".".join(label.split(".")[:2])
    nested = (13, 1) <= version_key(label) < (13, 4)  # FACTS §2: cuda_compat variants 13.1.0 - 13.3.1
    compat = m.components.get("cuda_compat")
    if not nested:
        assert compat is None or not compat.variants
        assert "cuda_variant" not in raw.get("cuda_compat", {})
        return
    assert compat is not None
    assert raw["cuda_compat"]["cuda_variant"] == [train]
    assert compat.archives == {}
    assert set(compat.variants) == {"linux-x86_64", "linux-sbsa"}
    for plat, variants in compat.variants.items():
        assert set(variants) == {f"cuda{train}"}
        archive = variants[f"cuda{train}"]
        assert archive.relative_path.startswith(f"cuda_compat/{plat}/")
        assert archive.relative_path.endswith(f"_cuda{train}-archive.tar.xz")
    assert compat.platforms == ("linux-sbsa", "linux-x86_64")


# -- hostile manifests ----------------------------------------------------------------------------
def _doc(entry: object, *, component: str = "cuda_nvcc", platform: str = "linux-x86_64") -> str:
    return json.dumps({"release_label": "13.0.1", "release_date": "2025-09-04",
                       component: {"name": "x", "version": "13.0.88", platform: entry}})


GOOD = {"relative_path": "cuda_nvcc/linux-x86_64/cuda_nvcc-linux-x86_64-13.0.88-archive.tar.xz",
        "sha256": SHA, "md5": "0" * 32, "size": "26657716"}


@pytest.mark.parametrize(("field", "value"), [
    pytest.param("relative_path", "/abs/x.tar.xz", id="path-absolute"),
    pytest.param("relative_path", "http://evil/x.tar.xz", id="path-url"),
    pytest.param("relative_path", "//evil/x.tar.xz", id="path-scheme-relative-url"),
    pytest.param("relative_path", "file:///etc/passwd", id="path-file-url"),
    pytest.param("relative_path", "C:/x.zip", id="path-drive"),
    pytest.param("relative_path", "cuda_nvcc\\..\\..\\x", id="path-backslash-dotdot"),
    pytest.param("relative_path", "\\\\server\\share\\x", id="path-unc"),
    pytest.param("relative_path", "cuda_nvcc/a\\b", id="path-backslash"),
    pytest.param("relative_path", "%2e%2e/%2e%2e/etc/passwd", id="path-percent-encoded-dotdot"),
    pytest.param("relative_path", "cuda_nvcc/%2E%2E/%2e%2E/x", id="path-percent-encoded-upper"),
    pytest.param("relative_path", "cuda_nvcc/%2fetc", id="path-percent-encoded-slash"),
    pytest.param("relative_path", "x.tar.xz?../../y", id="path-query"),
    pytest.param("relative_path", "x.tar.xz#frag", id="path-fragment"),
    pytest.param("relative_path", "cuda_nvcc/..", id="path-ends-in-dotdot"),
    pytest.param("relative_path", "../%2e%2e/x", id="path-percent-encoded-dotdot-after-dotdot"),
    pytest.param("relative_path", "cuda_nvcc\\x.zip", id="path-backslash-only"),
    pytest.param("relative_path", "a//x.tar.xz", id="path-empty-part"),
    pytest.param("relative_path", "a/x\n.tar.xz", id="path-newline"),
    pytest.param("relative_path", "", id="path-empty"),
    pytest.param("relative_path", 5, id="path-number"),
    pytest.param("relative_path", None, id="path-null"),
    pytest.param("sha256", "zz" * 32, id="sha-not-hex"),
    pytest.param("sha256", "a" * 63, id="sha-short"),
    pytest.param("sha256", "a" * 65, id="sha-long"),
    pytest.param("sha256", "a" * 64 + "\n", id="sha-trailing-newline"),
    pytest.param("sha256", " " + "a" * 64, id="sha-leading-space"),
    pytest.param("sha256", int("1" * 64), id="sha-number"),
    pytest.param("sha256", None, id="sha-null"),
    pytest.param("size", "-1", id="size-negative-string"),
    pytest.param("size", -1, id="size-negative-number"),
    pytest.param("size", str(MAX_ARCHIVE_SIZE + 1), id="size-absurd"),
    pytest.param("size", MAX_ARCHIVE_SIZE + 1, id="size-absurd-number"),
    pytest.param("size", "9" * 5000, id="size-5000-digits"),
    pytest.param("size", "1e3", id="size-exponent"),
    pytest.param("size", "12MB", id="size-unit"),
    pytest.param("size", "0x10", id="size-hex"),
    pytest.param("size", "\u00b2", id="size-superscript-digit"),
    pytest.param("size", "\u0661\u0662", id="size-arabic-indic-digits"),
    pytest.param("size", "", id="size-empty"),
    pytest.param("size", 1.5, id="size-float"),
    pytest.param("size", True, id="size-bool"),
    pytest.param("size", None, id="size-null"),
    pytest.param("size", [1], id="size-list"),
])
def test_hostile_entry_is_refused(field: str, value: object) -> None:
    entry = dict(GOOD)
    if value is None:
        del entry[field]
    else:
        entry[field] = value
    with pytest.raises(ManifestError) as info:
        parse_manifest(_doc(entry), label="13.0.1", source="https://mirror.example/redistrib_13.0.1.json")
    err = info.value
    assert err.source == "https://mirror.example/redistrib_13.0.1.json"
    assert err.entry == "cuda_nvcc.linux-x86_64"
    assert str(err).startswith("https://mirror.example/redistrib_13.0.1.json: cuda_nvcc.linux-x86_64: ")
    assert field.replace("_", "") in str(err).replace("_", "")


def test_hostile_nested_variant_names_the_variant() -> None:
    entry = {"cuda13.3": dict(GOOD, relative_path="//evil.example/x")}
    with pytest.raises(ManifestError) as info:
        parse_manifest(_doc(entry, component="cuda_compat"), label="13.0.1")
    assert info.value.entry == "cuda_compat.linux-x86_64.cuda13.3"
    assert info.value.source == "redistrib_13.0.1.json"


PREVIEW = "https://packages.nvidia.com/bin-archive/release/cuda/redist/"
POOL = "../../../pool/linux-x86_64/0a1b/cuda_cudart-linux-x86_64-13.4.29-archive.tar.xz"


@pytest.mark.parametrize(("base", "rel", "expected"), [
    pytest.param(PREVIEW, POOL, "https://packages.nvidia.com/bin-archive/pool/linux-x86_64/0a1b/"
                 "cuda_cudart-linux-x86_64-13.4.29-archive.tar.xz", id="preview-pool"),
    pytest.param(PREVIEW, "../../../../x.tar.xz", "https://packages.nvidia.com/x.tar.xz",
                 id="up-to-the-root"),
    pytest.param(PREVIEW, "a/./b/../c.zip", PREVIEW + "a/c.zip", id="dot-segments-inside"),
    pytest.param("http://127.0.0.1:8080/m/", "../m2/x.zip", "http://127.0.0.1:8080/m2/x.zip", id="port-kept"),
    pytest.param("file:///srv/mirror/release/cuda/redist/", POOL,
                 "file:///srv/mirror/pool/linux-x86_64/0a1b/cuda_cudart-linux-x86_64-13.4.29-archive.tar.xz",
                 id="directory"),
    pytest.param(PREVIEW, "../../../../../etc/passwd", None, id="past-the-site-root"),
    pytest.param("http://127.0.0.1:8080/", "../x.zip", None, id="past-a-shallow-root"),
    pytest.param("https://mirror.example/a/", "a/../../../x.zip", None, id="climbs-after-descending"),
])
def test_relative_path_is_a_url_reference(base: str, rel: str, expected: str | None) -> None:
    doc = _doc(dict(GOOD, relative_path=rel))
    archive = parse_manifest(doc, label="13.0.1").components["cuda_nvcc"].archives["linux-x86_64"]
    if expected is not None:
        assert archive_url(base, archive.relative_path, "cuda_nvcc") == expected
        return
    with pytest.raises(ManifestError) as info:
        archive_url(base, archive.relative_path, "cuda_nvcc")
    assert info.value.entry == "cuda_nvcc"
    assert f"cuda_nvcc: relative_path {rel!r} climbs" in str(info.value) and "site root" in str(info.value)


def test_manifest_shape_changes() -> None:
    """Each change of shape the module docstring lists: handled, or refused in one paragraph."""
    entry = dict(GOOD, signature="abc", mirrors=["x"], extra={"k": 1})  # unknown archive keys
    doc = {"release_label": "13.4.0-ea", "release_product": "cuda", "release_notes": {"url": "x"},
           "cuda_nvcc": {"version": "13.4.0 (early access)", "linux-riscv64": entry, "linux-x86_64": GOOD,
                         "cuda_variant": ["13"], "depends": {"cuda_cudart": {"min": "13.4"}}},
           "cuda_cudart": {"linux-x86_64": dict(GOOD, md5=None)}}
    m = parse_manifest(json.dumps(doc), label="13.4.0")
    assert m.label == "13.4.0" and m.release_date == ""             # the file's release; no date
    nvcc, cudart = m.components["cuda_nvcc"], m.components["cuda_cudart"]
    assert nvcc.version == "13.4.0 (early access)" and nvcc.variants == {}
    assert nvcc.platforms == ("linux-riscv64", "linux-x86_64")       # a new platform key is a platform
    assert (cudart.name, cudart.version, cudart.license_path) == ("cuda_cudart", "", "")
    assert m.components["release_notes"].platforms == ()              # an unknown object: no archives
    for bad, words in [({"release_label": "13.4.01"}, "release_label is '13.4.01'"),
                       ({"cuda_nvcc": {"linux x86": GOOD}}, "platform key 'linux x86' is not a platform"),
                       ({"cuda_nvcc": {"linux-x86_64": {k: v for k, v in GOOD.items() if k != "size"}}},
                        "size must be")]:
        with pytest.raises(ManifestError, match=words):
            parse_manifest(json.dumps(bad), label="13.4.0")


def _every_real_manifest() -> list[Path]:
    return sorted(SHARED_MANIFESTS.rglob("redistrib_*.json")) or [SHARED_MANIFESTS / "absent"]


@pytest.mark.parametrize("path", _every_real_manifest(), ids=lambda p: f"{p.parent.name}/{p.name}")
def test_every_real_manifest_joins_under_its_folder(shared_manifests: Path, path: Path) -> None:
    """CUDA and products alike: every archive and licence path stays under the manifest's folder."""
    label = path.stem.removeprefix("redistrib_")
    m = parse_manifest(path.read_bytes(), label=label)
    assert m.label == label and m.components
    product = "cuda" if path.parent == shared_manifests else path.parent.name
    base = f"https://developer.download.nvidia.com/compute/{product}/redist/"
    for comp in m.components.values():
        paths = [*(a.relative_path for a in comp.archives.values()),
                 *(a.relative_path for vs in comp.variants.values() for a in vs.values())]
        for rel in [*paths, *([comp.license_path] if comp.license_path else [])]:
            assert archive_url(base, check_relative_path(rel, comp.key, label)) == base + rel
        assert all(re.fullmatch(r"[a-z0-9_-]+", p) for p in comp.platforms), comp.platforms


@pytest.mark.parametrize(("field", "value", "expected"), [
    pytest.param("size", "26657716", 26657716, id="size-decimal-string"),
    pytest.param("size", " 42 ", 42, id="size-padded-string"),
    pytest.param("size", 42, 42, id="size-json-number"),
    pytest.param("size", "0", 0, id="size-zero"),
    pytest.param("size", str(MAX_ARCHIVE_SIZE), MAX_ARCHIVE_SIZE, id="size-at-limit"),
    pytest.param("sha256", SHA.upper(), SHA, id="sha-uppercase-lowered"),
    pytest.param("relative_path", "cuda_nvcc/linux-x86_64/a+b~c-1.2_3.tar.xz", None,
                 id="path-plain-punctuation"),
])
def test_accepted_values(field: str, value: object, expected: object) -> None:
    m = parse_manifest(_doc(dict(GOOD, **{field: value})), label="13.0.1")
    archive = m.components["cuda_nvcc"].archives["linux-x86_64"]
    assert getattr(archive, field) == (value if expected is None else expected)


@pytest.mark.parametrize("data", [
    pytest.param(b"", id="empty"),
    pytest.param(b"{", id="truncated"),
    pytest.param(b'{"a": 1,}', id="trailing-comma"),
    pytest.param(b"\xff\xfe\x00\xd8", id="bad-utf16"),
    pytest.param(b"\x80abc", id="bad-utf8"),
    pytest.param("[" * 100_000, id="nested-100k-deep"),
    pytest.param(b"[]", id="top-level-list"),
    pytest.param(b'"redistrib"', id="top-level-string"),
    pytest.param(b"13", id="top-level-number"),
    pytest.param(b"null", id="top-level-null"),
])
def test_malformed_document(data: bytes | str) -> None:
    with pytest.raises(ManifestError) as info:
        parse_manifest(data, label="13.0.1", source="mirror/redistrib_13.0.1.json")
    assert info.value.source == "mirror/redistrib_13.0.1.json"
    assert str(info.value).startswith("mirror/redistrib_13.0.1.json")


def test_string_valued_and_scalar_keys_are_not_components() -> None:
    doc = json.dumps({"release_date": "2025-09-04", "release_label": "13.0.1", "release_product": "cuda",
                      "cuda_nvcc": {"name": "x", "version": "1", "cuda_variant": ["13.0"],
                                    "linux-x86_64": GOOD, "future": 1}})
    m = parse_manifest(doc)
    assert set(m.components) == {"cuda_nvcc"}
    assert m.components["cuda_nvcc"].platforms == ("linux-x86_64",)
    assert m.platforms == ("linux-x86_64",)


# -- properties -------------------------------------------------------------------------------------
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=10), children,
                                                                       max_size=4),
    max_leaves=30,
)
scalars = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(), st.text(max_size=80),
                    st.sampled_from(["../x", "a/b.tar.xz", "%2e%2e/x", SHA, SHA.upper(), "123", "-1",
                                     "\u00b2", "9" * 30, "C:/x", "a\\b"]))


def _mostly(good: str, odd: st.SearchStrategy[object]) -> st.SearchStrategy[object]:
    """Half the time a valid value, so that the checks behind this field are reached too."""
    return st.integers(0, 3).flatmap(lambda i: [st.just(good), st.just(good), odd, scalars][i])


_digit_runs = st.lists(st.sampled_from(["0", "7", "-", " ", ".", "e", "\u00b2", "\u0661"]),
                       min_size=1, max_size=5).map("".join)
_climbs = st.lists(st.sampled_from(["..", "a", ".", "%2e%2e", "%2E."]), max_size=8).map(
    lambda p: "/".join([*p, "x"]))
entries = st.fixed_dictionaries(
    {"relative_path": _mostly("a/b.tar.xz", st.text(alphabet="ab./%2e\\:?#", max_size=12) | _climbs),
     "sha256": _mostly(SHA, st.text(alphabet="0123456789abcdefABCDEF\n ", min_size=63, max_size=66)),
     "size": _mostly("123", _digit_runs | st.integers())},
    optional={"md5": scalars})
_platform_value = st.integers(0, 3).flatmap(  # flatmap keeps the weights; st.one_of would flatten
    lambda i: [entries, entries, st.dictionaries(st.sampled_from(["cuda13.3", "cuda12"]), entries,
                                                 max_size=2), scalars][i])
manifest_like = st.dictionaries(
    st.sampled_from(["release_label", "release_date", "cuda_nvcc", "cuda_compat", "cccl"]),
    st.one_of(json_values, st.dictionaries(
        st.sampled_from(["name", "version", "license", "linux-x86_64", "cuda_variant", "windows-x86_64"]),
        _platform_value, max_size=5)),
    max_size=4)


def _check(result: Manifest) -> None:
    for comp in result.components.values():
        archives = [*comp.archives.values(), *(a for vs in comp.variants.values() for a in vs.values())]
        for a in archives:
            assert type(a.size) is int and 0 <= a.size <= MAX_ARCHIVE_SIZE
            assert len(a.sha256) == 64 and set(a.sha256) <= set("0123456789abcdef")
            assert check_relative_path(a.relative_path, "x", "y") == a.relative_path
            try:  # whatever the parser lets through joins onto the manifest's server, or is refused
                url = archive_url(PREVIEW, a.relative_path)
            except ManifestError:
                continue
            assert url.startswith("https://packages.nvidia.com/") and "\\" not in url


@settings(max_examples=500, database=None, deadline=None)
@given(st.one_of(json_values, manifest_like))
@example({"c": {"linux-x86_64": {"relative_path": "a/b.tar.xz", "sha256": SHA, "size": "\u00b2"}}})
@example({"c": {"linux-x86_64": {"relative_path": "a/b.tar.xz", "sha256": SHA + "\n", "size": "1"}}})
@example({"c": {"linux-x86_64": {"sha256": SHA, "size": "1"}}})
def test_parse_arbitrary_json_only_raises_manifest_error(obj: object) -> None:
    try:
        result = parse_manifest(json.dumps(obj))
    except ManifestError:
        return
    _check(result)


@settings(max_examples=200, database=None, deadline=None)
@given(st.binary(max_size=200) | st.text(max_size=200))
def test_parse_arbitrary_bytes_only_raises_manifest_error(data: bytes | str) -> None:
    try:
        result = parse_manifest(data)
    except ManifestError:
        return
    _check(result)
