"""Train resolution: index listing -> release labels -> the release a train means (pure)."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from cudaredist.errors import ResolveError
from cudaredist.plan import matches, version_key

# ASCII digits only (\d also matches "١٣"); a "\n" before "$" is not part of a train
_HREF = re.compile(r"""href\s*=\s*['"]?(?:[^'"\s>]*/)?redistrib_(\d+\.\d+\.\d+)\.json['"\s>]""",
                   re.I | re.A)
_FILE = re.compile(r"redistrib_(\d+\.\d+\.\d+)\.json", re.A)
_TRAIN = re.compile(r"\d+(?:\.\d+){0,2}", re.A)


# the top page of a mirror whose manifests sit deeper (cudaredist.publish.mirror.index_page)
_MANIFESTS = re.compile(r"<a href='([^'<>:?#]+/)' rel='manifests'>", re.A)


def manifests_link(html: str) -> str:
    """The folder a mirror's top page says holds its manifests (``release/cuda/redist/``), or ""."""
    found = _MANIFESTS.search(html)
    return found.group(1) if found else ""


def labels_from_listing(html: str) -> list[str]:
    """Release labels linked from a directory page, highest first."""
    return sort_labels(set(_HREF.findall(html)))


def labels_from_names(names: Iterable[str]) -> list[str]:
    """Release labels among plain file names (a local mirror directory), highest first."""
    return sort_labels({m.group(1) for n in names if (m := _FILE.fullmatch(n))})


def sort_labels(labels: Iterable[str]) -> list[str]:
    return sorted(labels, key=version_key, reverse=True)


def train_of(label: str) -> str:
    return ".".join(label.split(".")[:2])


def train_rows(labels: Sequence[str], date: Callable[[str], str]) -> list[dict[str, Any]]:
    """The trains of ``labels`` (highest first), lowest first: {train, release (its newest),
    release_date (``date`` of that, asked for every train at once), releases}."""
    newest: dict[str, str] = {}
    for lbl in labels:
        newest.setdefault(train_of(lbl), lbl)
    with ThreadPoolExecutor(8) as pool:
        dates = dict(zip(newest.values(), pool.map(date, newest.values()), strict=True))
    return [{"train": t, "release": r, "release_date": dates[r],
             "releases": [x for x in labels if train_of(x) == t]}
            for t, r in sorted(newest.items(), key=lambda kv: version_key(kv[0]))]


def check_train(train: str) -> str:
    train = train.strip().removeprefix("v")
    if not _TRAIN.fullmatch(train):
        raise ResolveError(
            f"{train!r} is not a CUDA train or release: use MAJOR (13), MAJOR.MINOR (13.4) "
            "or MAJOR.MINOR.PATCH (13.4.1)", requested=train)
    return train


def pick_release(train: str, labels: Iterable[str], where: str) -> str:
    """``13.4`` -> highest 13.4.x; ``13`` -> highest 13.x.y; ``13.4.1`` -> exactly that."""
    train = check_train(train)
    labels = list(labels)
    matching = [lbl for lbl in labels if matches(train, lbl)]
    if matching:
        return max(matching, key=version_key)
    published = sorted({train_of(lbl) for lbl in labels}, key=version_key)  # lowest first
    shown = ", ".join(published) if published else "none"
    kind = "release" if len(version_key(train)) == 3 else "train"
    hint = ""
    if kind == "release":
        same = [lbl for lbl in labels if train_of(lbl) == train_of(train)]
        if same:
            hint = f" Releases of train {train_of(train)}: {', '.join(sort_labels(same))}."
    raise ResolveError(
        f"CUDA {kind} {train} has no release at {where}; published trains: {shown}.{hint}",
        requested=train, where=where, available=tuple(published))
