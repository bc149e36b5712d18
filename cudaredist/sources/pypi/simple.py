"""Package index pages: the Simple API in its JSON (PEP 691) and HTML (PEP 503) forms (pure)."""

from __future__ import annotations

import json
import posixpath
from dataclasses import dataclass
from urllib.parse import unquote, urldefrag, urljoin, urlsplit

from cudaredist.errors import ManifestError


@dataclass(frozen=True)
class IndexFile:
    filename: str
    url: str
    sha256: str
    size: int | None = None
    upload_time: str = ""
    yanked: bool = False


def parse_simple_json(data: bytes, page_url: str) -> list[IndexFile]:
    try:
        files = json.loads(data)["files"]
        if not isinstance(files, list):
            raise TypeError("'files' is not a list")
    except (ValueError, KeyError, TypeError) as exc:
        raise ManifestError(f"{page_url} is not a PEP 691 project page: {exc}", source=page_url) from exc
    out: list[IndexFile] = []
    for f in files:
        if not isinstance(f, dict) or not isinstance(f.get("filename"), str):
            continue
        url = urldefrag(urljoin(page_url, str(f.get("url", "")))).url
        hashes = f.get("hashes")
        hashes = hashes if isinstance(hashes, dict) else {}
        size = f.get("size")
        out.append(IndexFile(f["filename"], url, str(hashes.get("sha256", "")).lower(),
                             size if isinstance(size, int) and not isinstance(size, bool) else None,
                             str(f.get("upload-time") or ""), bool(f.get("yanked"))))
    return out


def parse_simple_html(data: bytes, page_url: str) -> list[IndexFile]:
    """Each anchor's file, named as pip names it: by its URL's last segment (PEP 503 has the
    anchor's text say the same)."""
    import html.parser  # only for an index that answers HTML (PEP 691 JSON needs none: ~2 ms)

    out: list[IndexFile] = []

    class Anchors(html.parser.HTMLParser):
        def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
            found = dict(attrs)
            if tag == "a" and (href := found.get("href")):
                url, frag = urldefrag(urljoin(page_url, href))  # the fragment: sha256=...
                algo, _, digest = frag.partition("=")
                out.append(IndexFile(unquote(posixpath.basename(urlsplit(url).path)), url,
                                     digest.lower() if algo == "sha256" else "",
                                     yanked="data-yanked" in found))

    Anchors().feed(data.decode("utf-8", "replace"))
    return out


def parse_simple_page(data: bytes, page_url: str) -> list[IndexFile]:
    """Either form: servers answer JSON when they speak PEP 691, HTML otherwise."""
    if data.lstrip()[:1] == b"{":
        return parse_simple_json(data, page_url)
    return parse_simple_html(data, page_url)


