"""``file://`` URLs and directories as bases: a path and its URL name one file on every OS."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from cudaredist.fetch.client import is_local, local_path


@pytest.mark.parametrize("name", ["plain", "with space", "ünïcødé", "пример", "a#b%c"])
def test_a_path_and_its_file_url_name_one_file(tmp_path: Path, name: str) -> None:
    """``Path.as_uri`` one way (how a directory base becomes a URL), ``local_path`` back."""
    d = tmp_path / name
    d.mkdir()
    (d / "redistrib_13.0.2.json").write_text("{}")
    for url in (d.as_uri(), d.as_uri() + "/"):
        assert is_local(url)
        assert local_path(url) == d
        assert (local_path(url) / "redistrib_13.0.2.json").is_file()


@pytest.mark.skipif(os.name != "nt", reason="Windows paths: drive letters and UNC shares")
@pytest.mark.parametrize(("url", "path"), [
    pytest.param("file:///C:/x/", "C:\\x", id="drive"),
    pytest.param("file:///c:/Program%20Files/m", "C:\\Program Files\\m", id="quoted-space"),
    pytest.param("file://localhost/C:/x", "C:\\x", id="localhost"),
    pytest.param("file://server/share/mirror/", "\\\\server\\share\\mirror", id="unc"),
    pytest.param("C:\\mirror", "C:\\mirror", id="directory"),
])
def test_windows_file_urls(url: str, path: str) -> None:
    assert str(local_path(url)) == path


@pytest.mark.skipif(os.name == "nt", reason="POSIX paths")
@pytest.mark.parametrize(("url", "path"), [
    pytest.param("file:///srv/mirror/", "/srv/mirror", id="absolute"),
    pytest.param("file://localhost/srv/a%20b", "/srv/a b", id="localhost-quoted"),
    pytest.param("/srv/mirror", "/srv/mirror", id="directory"),
])
def test_posix_file_urls(url: str, path: str) -> None:
    assert str(local_path(url)) == path
