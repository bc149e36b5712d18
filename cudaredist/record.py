"""The install record in ``<prefix>/.cudaredist/record.json``: what was installed, and checks on it.

The prefix around it (its lock, leftovers of a killed run, verify, the uninstall) is
:mod:`cudaredist.prefixes`; the command that redoes its request is :mod:`cudaredist.redo`.
"""

from __future__ import annotations

import datetime
import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cudaredist import __version__, fsops
from cudaredist.errors import RecordError
from cudaredist.plan import Plan, matches
from cudaredist.profiles import parse_product_requests

if TYPE_CHECKING:  # the no-op path reads records without loading the archive modules
    from cudaredist.tree.staging import FileRecord

RECORD_DIR = ".cudaredist"
RECORD_FILE = "record.json"
SBOM_FILE = "sbom.cdx.json"  # beside the record: cudaredist.sbom writes it
SCHEMA = 1
# How cudaredist lays a tree out. Bump it when a new cudaredist lays out what the same archives give
# differently (1: a wheel-built Windows tree's generated import libraries such as cublas.lib, the
# Visual Studio integration under extras/): a record of an older (or no) layout "needs updating",
# and install and --refresh build the tree again rather than keep it.
LAYOUT = 1


def satisfies(record: dict[str, Any], *, train: str, platform: str, profile: str | None,
              components: Sequence[str], source: str, products: Sequence[str] = (),
              host: str = "") -> bool:
    """Was the tree installed for this request (its train, platform, source, profile, ``--component``
    and ``--with``)? ``cudnn`` is answered by the cuDNN the tree has, as ``13.4`` is by its 13.4.x.
    Whether it still holds all that request means today is :func:`lacking`."""
    plan, request = record["plan"], record.get("request", {})
    asked = sorted(str(r) for r in parse_product_requests(products))
    return (sorted(p.get("requested", "") for p in plan.get("products", [])) == asked
            and matches(train, plan["release"]) and plan.get("platform") == platform
            and plan.get("host", "") == host
            and plan.get("source", "nvidia") == source
            and plan.get("profile") == (profile or "custom")
            and sorted(request.get("components", [])) == sorted(components))


def record_path(prefix: Path) -> Path:
    return prefix / RECORD_DIR / RECORD_FILE


def build_record(plan: Plan, files: list[FileRecord], *, served: dict[str, str],
                 links: list[dict[str, str]], requested: Sequence[str], meant: Sequence[str],
                 location: Sequence[str]) -> dict[str, Any]:
    """``served``: sha256 -> the URL this run downloaded it from (an archive not in it came from
    the cache); ``links``: the platform fix-ups made; ``requested``: the ``--component`` names;
    ``meant``: the entries the plan's profile meant; ``location``: the options that point a new run
    where the plan came from (none for a source's default)."""
    return {
        "schema": SCHEMA,
        "tool": f"cudaredist {__version__}",
        "installed_at": datetime.datetime.now(datetime.timezone.utc).replace(microsecond=0).isoformat(),
        "content_key": plan.content_key(),
        "plan": plan.to_json(),
        # where the hashes came from, and where each archive's (verified) bytes came from
        "provenance": {
            "manifest": plan.base_url,
            "hashes_from": plan.hashes_from,
            "archives": {i.component: served.get(i.archive.sha256, "cache") for i in plan.items},
        },
        "files": [
            {"path": f.path, "size": f.size, "sha256": f.sha256, "mode": oct(f.mode),
             **({"link": f.link} if f.link else {}), "component": f.component}
            for f in files
        ],
        "links": links,
        # what the profile meant at install: another source's drift is judged against it
        # (drift.lacking); where from, as cudaredist.redo spells it again
        "request": {"components": list(requested), "profile": list(meant), "location": list(location)},
        "layout": LAYOUT,
    }


def write_record(prefix: Path, record: dict[str, Any]) -> None:
    """``record`` as indented JSON with one line per file: json's C encoder writes each line (an
    indented dump of the whole record goes through its pure-Python one, a tenth as fast, and a
    tree has thousands of files)."""
    p = record_path(prefix)
    p.parent.mkdir(parents=True, exist_ok=True)
    head = json.dumps({k: v for k, v in record.items() if k != "files"}, indent=1)
    body = ",\n  ".join(json.dumps(f) for f in record["files"])
    fsops.write_atomic(p, f'{head[:-2]},\n "files": [\n  {body}\n ]\n}}\n'.encode())


# What a record must hold, as data: a field's type (or types), the fields of an object, or [that]
# for a list of them; a name ending in "?" may be absent.
_RECORD: dict[str, Any] = {
    "plan": {"release": str, "platform": str, "profile": str, "base_url": str, "source?": str,
             "release_date?": (str, type(None)), "channel?": str, "hashes_from?": str, "notes?": [str],
             "components": [{"name": str, "version": str, "sha256": str, "url?": str, "relative_path?": str,
                             "size?": int, "layout?": str, "product?": str, "license?": str}],
             "products?": [{"name": str, "release": str, "requested?": str, "release_date?": str,
                            "base_url?": str, "cuda_variant?": str, "note?": str}]},
    "files": [{"path": str, "size": int, "sha256": str, "mode?": str, "link?": str, "component?": str}],
    "links?": [{"path": str, "link": str, "copy?": str}],
    "request?": {"components?": list, "profile?": list, "location?": list},
    "layout?": int,
    "provenance?": {"manifest?": (str, type(None)), "hashes_from?": (str, type(None)), "archives?": dict},
    "host_fixes?": [{"id": str, "path": str, "before": str, "after": str, "source?": str}],
    "tool": str, "installed_at": str, "content_key?": str, "sbom?": str,
}
_TYPE_NAMES = {str: "a string", int: "a number", list: "a list", dict: "an object", type(None): "null"}


def _problem(obj: object, shape: Any, where: str) -> str:
    """The first way ``obj`` does not have ``shape`` (``"plan.platform is missing"``), or ""."""
    if isinstance(shape, list):
        if not isinstance(obj, list):
            return f"{where} is not a list"
        ok = _flat_check(shape[0])
        # a list of flat objects (the files: thousands) checked in one loop; the first that fails is
        # named by the general walk below
        return next((why for k, item in enumerate(obj) if not ok(item)
                     and (why := _problem(item, shape[0], f"{where}[{k}]"))), "")
    if isinstance(shape, dict):
        if not isinstance(obj, dict):
            return f"{where or 'the record'} is not an object"
        for key, kind in shape.items():
            name = key.rstrip("?")
            at = f"{where}.{name}" if where else name
            if name not in obj:
                if not key.endswith("?"):
                    return f"{at} is missing"
            elif why := _problem(obj[name], kind, at):
                return why
        return ""
    kinds = shape if isinstance(shape, tuple) else (shape,)
    if isinstance(obj, bool) or not isinstance(obj, kinds):
        return f"{where} is not {' or '.join(_TYPE_NAMES[t] for t in kinds)}"
    return ""


def _flat_check(shape: Any) -> Callable[[object], bool]:
    """A fast yes for an item that has ``shape`` when that is an object of plain fields (else a
    check that always sends the item to :func:`_problem`)."""
    if not isinstance(shape, dict) or any(isinstance(k, (dict, list)) for k in shape.values()):
        return lambda _item: False
    fields = [(key.rstrip("?"), kind if isinstance(kind, tuple) else (kind,), key.endswith("?"))
              for key, kind in shape.items()]
    absent = object()

    def ok(item: object) -> bool:
        if type(item) is not dict:
            return False
        for name, kinds, optional in fields:
            v = item.get(name, absent)
            if v is absent:
                if not optional:
                    return False
            elif type(v) not in kinds:  # exact: a bool is no number
                return False
        return True

    return ok


def read_record(prefix: Path) -> dict[str, Any] | None:
    """The record, or None when the prefix holds no cudaredist install; a record that cannot be
    read, or lacks a field the commands use, is a :class:`RecordError` naming it."""
    p = record_path(prefix)

    def bad(what: str) -> RecordError:
        return RecordError(f"the install record {p} {what}; reinstall over it with --reinstall, or "
                           f"delete {prefix}", prefix=str(prefix))

    try:
        data = json.loads(p.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        raise bad(f"is unreadable ({exc})") from exc
    if not isinstance(data, dict) or data.get("schema") != SCHEMA:
        raise bad(f"has an unknown format (not schema {SCHEMA}: written by another cudaredist?)")
    if problem := _problem(data, _RECORD, ""):
        raise bad(f"is damaged ({problem})")
    return data
