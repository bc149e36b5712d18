"""A mirror over plain HTTP never chooses what runs: hashes only from an authenticated origin.

The trojan mirror is reached by a host name, ``cuda-cache.test``, never by a loopback literal
(loopback counts as a secure origin, so it would prove nothing): a server on 127.0.0.1 is the
process's HTTP proxy (``HTTP_PROXY``), so the client resolves no name and sends
``GET http://cuda-cache.test:PORT/...`` to it, exactly as it would to a cache on the LAN. The
server refuses any other host name, and logs every request, so a test can prove that the mirror
was never asked for a manifest or an index page.

The mirror serves the real archives except a ``crt`` that adds ``include/crt/TROJAN.h``, with the
manifest (or index page) rewritten to match, both for NVIDIA's redist layout and for
``--source pypi``.
"""

from __future__ import annotations

import functools
import hashlib
import http.server
import json
import re
import shutil
import socket
import ssl
import threading
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from typer.testing import CliRunner

from cudaredist.cli import app
from cudaredist.errors import UsageError
from cudaredist.fetch.client import make_client
from cudaredist.trust import Trust
from tests.archives import MirrorArchive, build_mirror, toolkit
from tests.hosts import need_cryptography
from tests.loopback import directory_handler, serving
from tests.sources.pypi.test_pypi_source import LINUX_TAG, FakeIndex, add_release_13_0, make_wheel

NAME = "cuda-cache.test"
LABEL = "13.0.1"
TROJAN = "include/crt/TROJAN.h"
runner = CliRunner()


# -- the rule itself ------------------------------------------------------------------------------------
@pytest.mark.parametrize(("url", "hosts", "why"), [
    pytest.param("https://developer.download.nvidia.com/compute/cuda/redist/", (), "HTTPS", id="https"),
    pytest.param("file:///srv/redist/", (), "a local directory", id="file-url"),
    pytest.param("/srv/redist", (), "a local directory", id="path"),
    pytest.param("http://127.0.0.1:8080/", (), "a loopback address", id="ipv4-loopback"),
    pytest.param("http://127.9.8.7/", (), "a loopback address", id="loopback-net"),
    pytest.param("http://[::1]:8080/", (), "a loopback address", id="ipv6-loopback"),
    pytest.param("http://localhost:8080/", (), "a loopback address", id="localhost"),
    pytest.param(f"http://{NAME}:8080/", (), None, id="lan-name"),
    pytest.param("http://10.1.2.3:8080/", (), None, id="lan-address"),
    pytest.param("http://127.0.0.1.evil.test/", (), None, id="loopback-lookalike"),
    pytest.param(f"http://{NAME}:8080/", (NAME,), f"--trusted-host {NAME}", id="host-any-port"),
    pytest.param(f"http://{NAME.upper()}:8080/", (f"{NAME}:8080",), f"--trusted-host {NAME}:8080",
                 id="host-and-port"),
    pytest.param(f"http://{NAME}:9090/", (f"{NAME}:8080",), None, id="other-port"),
    pytest.param(f"http://{NAME}/", (f"{NAME}:80",), f"--trusted-host {NAME}:80", id="default-port"),
    pytest.param(f"http://{NAME}:8080/", (f"http://{NAME}:8080/",), f"--trusted-host {NAME}:8080",
                 id="pasted-url"),
    pytest.param("http://other.test:8080/", (NAME,), None, id="other-host"),
])
def test_secure_origins(url: str, hosts: tuple[str, ...], why: str | None) -> None:
    assert Trust.of(hosts).reason(url) == why


def test_environment_is_space_separated_and_yields_to_the_option(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CUDAREDIST_TRUSTED_HOST", f"a.test  {NAME}:8080")
    assert Trust.of().trusted(f"http://{NAME}:8080/") and Trust.of().trusted("http://a.test:1/")
    assert not Trust.of(["b.test"]).trusted("http://a.test:1/")  # the option replaces the variable


@pytest.mark.parametrize("bad", ["host/path", "host:port", ":8080", "user@host"])
def test_bad_trusted_host(bad: str) -> None:
    with pytest.raises(UsageError, match="trusted-host"):
        Trust.of([bad])


NV = "https://developer.download.nvidia.com/compute/cuda/redist/"
LAN = f"http://{NAME}:8080/redist/"
LOOP = "http://127.0.0.1:8080/redist/"


@pytest.mark.parametrize(("base", "mirror", "fallback", "manifests", "archives", "untrusted"), [
    pytest.param(NV, None, True, [NV], [NV], [], id="nvidia"),
    pytest.param(NV, LAN, True, [NV], [LAN, NV], [("the mirror", LAN)], id="fleet-mode"),
    pytest.param(NV, LAN, False, [NV], [LAN], [("the mirror", LAN)], id="fleet-mode-no-fallback"),
    pytest.param(NV, LOOP, True, [LOOP, NV], [LOOP, NV], [], id="loopback-mirror"),
    pytest.param(NV, LOOP, False, [LOOP], [LOOP], [], id="loopback-mirror-only"),
    pytest.param(LAN, LOOP, True, [LOOP], [LOOP, LAN], [("the base URL", LAN)], id="plain-http-base"),
])
def test_trusted_bases(base: str, mirror: str | None, fallback: bool, manifests: list[str],
                       archives: list[str], untrusted: list[tuple[str, str]]) -> None:
    from cudaredist.sources.nvidia.index import trusted_bases

    got = trusted_bases(base, mirror, fallback=fallback, trust=Trust())
    assert (list(got.manifests), list(got.archives), list(got.untrusted)) == (manifests, archives, untrusted)


@pytest.mark.parametrize(("base", "mirror", "fallback"), [
    pytest.param(LAN, None, True, id="plain-http-base"),
    pytest.param(LAN, LAN.replace("8080", "9090"), True, id="both"),
    pytest.param(NV, LAN, False, id="no-fallback-keeps-the-base-for-manifests"),
])
def test_nothing_authenticated(base: str, mirror: str | None, fallback: bool) -> None:
    from cudaredist.errors import TrustError
    from cudaredist.sources.nvidia.index import trusted_bases

    if base == NV:  # the authenticated base still reads manifests: not refused
        assert trusted_bases(base, mirror, fallback=fallback, trust=Trust()).manifests == (NV,)
        return
    with pytest.raises(TrustError) as info:
        trusted_bases(base, mirror, fallback=fallback, trust=Trust())
    assert info.value.host.startswith(NAME) and f"--trusted-host {NAME}:8080" in str(info.value)
    assert trusted_bases(base, mirror, fallback=fallback, trust=Trust.of([NAME])).manifests


# -- a plain-HTTP host reached by name ------------------------------------------------------------------
class _NamedHandler(http.server.SimpleHTTPRequestHandler):
    server: _NamedServer

    def log_message(self, format: str, *args: object) -> None:
        pass

    def _as_host(self) -> bool:
        parts = urlsplit(self.path)
        # proxied plain HTTP names the host in the request line; inside a TLS tunnel, in Host
        host = parts.hostname or urlsplit("//" + self.headers.get("Host", "")).hostname
        self.server.log.append(parts.path)
        if host != NAME:  # only the name reaches it, never a loopback literal
            self.send_error(502, f"only {NAME} is served here")
            return False
        self.path = parts.path
        return True

    def do_CONNECT(self) -> None:
        """HTTPS through the proxy: the tunnel ends here, in TLS with a certificate for the name."""
        ctx = self.server.tls
        if ctx is None or urlsplit("//" + self.path).hostname != NAME:
            self.send_error(502, f"no TLS for {self.path}")
            return
        self.send_response(200, "Connection established")
        self.end_headers()
        self.wfile.flush()
        try:
            self.connection = ctx.wrap_socket(self.connection, server_side=True)
        except (ssl.SSLError, OSError):  # the client refused the certificate: that is its answer
            self.close_connection = True
            return
        self.rfile = self.connection.makefile("rb")
        self.wfile = self.connection.makefile("wb")
        self.close_connection = False  # the requests inside the tunnel follow on this socket

    def finish(self) -> None:
        super().finish()
        if isinstance(self.connection, ssl.SSLSocket):  # it took over the accepted socket
            self.connection.close()

    def do_GET(self) -> None:
        if self._as_host():
            super().do_GET()

    def do_HEAD(self) -> None:
        if self._as_host():
            super().do_HEAD()


class _NamedServer(http.server.ThreadingHTTPServer):
    daemon_threads = True
    log: list[str]
    tls: ssl.SSLContext | None

    def handle_error(self, request: object, client_address: object) -> None:
        pass  # a client that hangs up on a refused body (BrokenPipe) is the point, not a server fault


class NamedHost:
    """``http://cuda-cache.test:PORT/`` serving ``root``: the process's HTTP proxy on 127.0.0.1
    (with ``tls``, ``https://cuda-cache.test:PORT/`` through CONNECT, the process's HTTPS proxy)."""

    def __init__(self, root: Path, tls: ssl.SSLContext | None = None) -> None:
        self.srv = _NamedServer(("127.0.0.1", 0), functools.partial(_NamedHandler, directory=str(root)))
        self.srv.log, self.srv.tls = [], tls
        self.url = f"{'https' if tls else 'http'}://{NAME}:{self.srv.server_address[1]}/"
        self.proxy = f"http://127.0.0.1:{self.srv.server_address[1]}"
        threading.Thread(target=self.srv.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()

    @property
    def log(self) -> list[str]:
        return self.srv.log

    @property
    def host(self) -> str:
        return f"{NAME}:{self.srv.server_address[1]}"

    def close(self) -> None:
        self.srv.shutdown()
        self.srv.server_close()


@pytest.fixture
def named(monkeypatch: pytest.MonkeyPatch) -> Iterator[type[NamedHost]]:
    hosts: list[NamedHost] = []

    def start(root: Path, tls: ssl.SSLContext | None = None) -> NamedHost:
        host = NamedHost(root, tls)
        hosts.append(host)
        monkeypatch.setenv("HTTPS_PROXY" if tls else "HTTP_PROXY", host.proxy)
        monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")  # loopback bases are asked directly
        return host

    yield start  # type: ignore[misc]
    for h in hosts:
        h.close()


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def cli(*args: str) -> tuple[int, str]:
    r = runner.invoke(app, list(args))
    assert "Traceback" not in r.stderr, r.stderr
    return r.exit_code, r.stderr


def record(prefix: Path) -> dict[str, object]:
    rec = json.loads((prefix / ".cudaredist" / "record.json").read_text())
    assert isinstance(rec, dict)
    return rec


def cached_shas(cache: Path) -> set[str]:
    return {p.name for p in (cache / "archives").glob("*") if re.fullmatch(r"[0-9a-f]{64}", p.name)}


# -- the redist source ----------------------------------------------------------------------------------
@pytest.fixture
def trees(tmp_path: Path) -> tuple[Path, Path, Path]:
    """(the real tree, a trojan copy, an honest copy): the trojan's crt adds TROJAN.h, and its
    manifest is rewritten to match."""
    real = tmp_path / "real"
    build_mirror(real, LABEL, toolkit("linux-x86_64"))
    trojan = tmp_path / "trojan"
    shutil.copytree(real, trojan)
    build_mirror(trojan, LABEL, [MirrorArchive("cuda_crt", "linux-x86_64", "13.0.88", {
        "include/crt/host_config.h": b"// hc", TROJAN: b"#error owned\n"})])
    honest = tmp_path / "honest"
    shutil.copytree(real, honest)
    return real, trojan, honest


def crt_sha(tree: Path) -> str:
    manifest = json.loads((tree / f"redistrib_{LABEL}.json").read_text())
    return str(manifest["cuda_crt"]["linux-x86_64"]["sha256"])


def install(prefix: Path, *args: str) -> tuple[int, str]:
    return cli("install", "13.0", "--platform", "linux-x86_64", "--prefix", str(prefix), *args)


Trees = tuple[Path, Path, Path]


def test_trojan_mirror_in_front_of_an_authenticated_base(named: type[NamedHost], trees: Trees,
                                                         tmp_path: Path) -> None:
    """The safe fleet mode: manifest from the base, archives from the mirror, each checked; the
    mirror's wrong crt is refused and fetched from the base, and never enters the cache."""
    real, trojan, _honest = trees
    mirror = named(trojan)
    prefix = tmp_path / "cuda"
    code, err = install(prefix, "--mirror", mirror.url, "--base-url", str(real))
    assert code == 0, err
    assert not (prefix / TROJAN).exists() and (prefix / "include/crt/host_config.h").is_file()
    assert not any(p.endswith((".json", "/")) for p in mirror.log), mirror.log  # no manifest, no listing
    assert f"{mirror.url}cuda_crt/" in err and "trying" in err  # refused by sha256, fetched from the base
    rec = record(prefix)
    prov = rec["provenance"]
    assert isinstance(prov, dict)
    assert prov["manifest"] == real.as_uri() + "/"
    assert prov["hashes_from"] == f"{real.as_uri()}/ (a local directory)"
    served = prov["archives"]
    assert served["cuda_crt"].startswith(real.as_uri())
    assert all(url.startswith(mirror.url) for c, url in served.items() if c != "cuda_crt"), served
    shas = cached_shas(tmp_path / "cache")
    assert crt_sha(real) in shas and crt_sha(trojan) not in shas

    shown = runner.invoke(app, ["info", "--prefix", str(prefix)])
    assert shown.exit_code == 0 and f"hashes:    from {real.as_uri()}/ (a local directory)" in shown.stdout
    assert f"from {mirror.url}cuda_nvcc/" in shown.stdout


def test_trojan_mirror_with_no_fallback_fails_and_poisons_nothing(named: type[NamedHost],
                                                                  trees: tuple[Path, Path, Path],
                                                                  tmp_path: Path) -> None:
    real, trojan, _honest = trees
    mirror = named(trojan)
    prefix = tmp_path / "cuda"
    code, err = install(prefix, "--mirror", mirror.url, "--base-url", str(real), "--no-fallback")
    assert code == 1, err
    assert "cuda_crt" in err and ("sha256" in err or "the manifest declares" in err), err  # refused
    assert not prefix.exists()
    assert crt_sha(trojan) not in cached_shas(tmp_path / "cache")
    assert not any(p.endswith((".json", "/")) for p in mirror.log), mirror.log


def test_base_unreachable_and_an_untrusted_mirror_names_the_ways_out(named: type[NamedHost],
                                                                     trees: tuple[Path, Path, Path],
                                                                     tmp_path: Path) -> None:
    _real, trojan, _honest = trees
    mirror = named(trojan)
    code, err = install(tmp_path / "cuda", "--mirror", mirror.url,
                        "--base-url", f"http://127.0.0.1:{closed_port()}/")
    assert code == 1 and err.count("\n") == 1, err
    for words in ("is plain HTTP", "Three ways out", "https://", f"--trusted-host {mirror.host}",
                  "install --lock"):
        assert words in err, err
    assert mirror.log == []  # not even asked: its manifest would not be believed
    assert not (tmp_path / "cuda").exists()


@pytest.mark.parametrize("command", ["install", "resolve", "lock", "mirror", "trains"])
def test_plain_http_with_nothing_authenticated_is_refused_before_any_request(
        named: type[NamedHost], trees: tuple[Path, Path, Path], tmp_path: Path, command: str) -> None:
    _real, trojan, _honest = trees
    mirror = named(trojan)
    extra = {"install": ["--prefix", str(tmp_path / "cuda")], "mirror": ["--out", str(tmp_path / "m")]}
    args = [command] + ([] if command == "trains" else ["13.0"]) + extra.get(command, [])
    for how in (["--base-url", mirror.url], ["--mirror", mirror.url, "--base-url", mirror.url + "other/"],
                ["--mirror", mirror.url, "--base-url", mirror.url + "b/", "--no-fallback"]):
        code, err = cli(*args, *how)
        assert code == 1 and err.count("\n") == 1, (how, err)
        assert "refusing to read the manifest" in err and mirror.url in err, err
        assert f"--trusted-host {mirror.host}" in err and "Nothing was downloaded" in err, err
    assert mirror.log == []
    assert not (tmp_path / "cuda").exists() and not (tmp_path / "m").exists()


def test_trusted_host_is_believed(named: type[NamedHost], trees: tuple[Path, Path, Path], tmp_path: Path,
                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """--trusted-host (or the variable) makes a plain-HTTP mirror an authenticated one: it serves
    the manifest, so the fleet keeps working with the base down."""
    _real, _trojan, honest = trees
    mirror = named(honest)
    down = f"http://127.0.0.1:{closed_port()}/"
    code, err = install(tmp_path / "a", "--mirror", mirror.url, "--base-url", down,
                        "--trusted-host", mirror.host)
    assert code == 0, err
    assert f"redistrib_{LABEL}.json" in "".join(mirror.log)
    prov = record(tmp_path / "a")["provenance"]
    assert isinstance(prov, dict) and prov["hashes_from"] == f"{mirror.url} (--trusted-host {mirror.host})"
    monkeypatch.setenv("CUDAREDIST_TRUSTED_HOST", f"other.test {NAME}")
    code, err = install(tmp_path / "b", "--mirror", mirror.url, "--base-url", down)
    assert code == 0, err


@pytest.fixture(scope="module")
def tls_for_name(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, ssl.SSLContext]:
    """(ca.pem, a server context): a throwaway CA and a certificate for cuda-cache.test."""
    import datetime as dt

    need_cryptography()
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    d = tmp_path_factory.mktemp("tls")
    now = dt.datetime.now(dt.timezone.utc)

    def cert(subject: str, key: ec.EllipticCurvePrivateKey, issuer: str, signer: ec.EllipticCurvePrivateKey,
             ca: bool) -> x509.Certificate:
        b = (x509.CertificateBuilder()
             .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)]))
             .issuer_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, issuer)]))
             .public_key(key.public_key()).serial_number(x509.random_serial_number())
             .not_valid_before(now - dt.timedelta(minutes=5)).not_valid_after(now + dt.timedelta(days=1))
             .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
             .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
             .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(signer.public_key()),
                            critical=False))
        if ca:
            b = b.add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                              content_commitment=False, key_encipherment=False,
                                              data_encipherment=False, key_agreement=False,
                                              encipher_only=False, decipher_only=False), critical=True)
        else:
            b = b.add_extension(x509.SubjectAlternativeName([x509.DNSName(NAME)]), critical=False)
        return b.sign(signer, hashes.SHA256())

    ca_key, key = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
    ca = cert("cudaredist trust test CA", ca_key, "cudaredist trust test CA", ca_key, True)
    leaf = cert(NAME, key, "cudaredist trust test CA", ca_key, False)
    pem = serialization.Encoding.PEM
    (d / "ca.pem").write_bytes(ca.public_bytes(pem))
    (d / "server.pem").write_bytes(leaf.public_bytes(pem) + ca.public_bytes(pem))
    (d / "server.key").write_bytes(key.private_bytes(pem, serialization.PrivateFormat.PKCS8,
                                                     serialization.NoEncryption()))
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(d / "server.pem", d / "server.key")
    return d / "ca.pem", ctx


def test_an_https_mirror_by_name_is_authenticated(named: type[NamedHost], trees: Trees, tmp_path: Path,
                                                  tls_for_name: tuple[Path, ssl.SSLContext],
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """HTTPS to a name, its certificate checked (SSL_CERT_FILE here): the mirror serves the
    manifest, alone with --no-fallback; without the CA the certificate is refused, not believed."""
    _real, _trojan, honest = trees
    ca, ctx = tls_for_name
    mirror = named(honest, ctx)
    down = f"http://127.0.0.1:{closed_port()}/"
    code, err = install(tmp_path / "untrusted-ca", "--mirror", mirror.url, "--base-url", down,
                        "--no-fallback")
    assert code == 1 and "certificate" in err and "SSL_CERT_FILE" in err, err
    monkeypatch.setenv("SSL_CERT_FILE", str(ca))
    code, err = install(tmp_path / "cuda", "--mirror", mirror.url, "--base-url", down, "--no-fallback")
    assert code == 0, err
    prov = record(tmp_path / "cuda")["provenance"]
    assert isinstance(prov, dict) and prov["hashes_from"] == f"{mirror.url} (HTTPS)"
    assert all(u.startswith(mirror.url) for u in prov["archives"].values()), prov
    assert f"/redistrib_{LABEL}.json" in mirror.log


def test_a_lock_file_takes_archives_from_an_untrusted_mirror(named: type[NamedHost],
                                                             trees: tuple[Path, Path, Path],
                                                             tmp_path: Path) -> None:
    """The lock is the authenticated source: its install reads no manifest, so the base may be
    down; the trojan's crt is still refused against the lock's sha256."""
    real, trojan, honest = trees
    lock = tmp_path / "cuda.lock"
    code, err = cli("lock", "13.0", "--platform", "linux-x86_64", "--base-url", str(real), "-o", str(lock))
    assert code == 0, err
    down = f"http://127.0.0.1:{closed_port()}/"
    mirror = named(honest)
    code, err = install(tmp_path / "ok", "--lock", str(lock), "--mirror", mirror.url, "--base-url", down)
    assert code == 0, err
    prov = record(tmp_path / "ok")["provenance"]
    assert isinstance(prov, dict) and prov["hashes_from"] == f"the lock file {lock}"
    mirror.close()
    bad = named(trojan)
    code, err = install(tmp_path / "bad", "--lock", str(lock), "--mirror", bad.url, "--base-url", down,
                        "--cache-dir", str(tmp_path / "cache2"))
    assert code == 1 and "cuda_crt" in err and ("sha256" in err or "declares" in err), err
    assert not (tmp_path / "bad").exists() and crt_sha(trojan) not in cached_shas(tmp_path / "cache2")


# -- the PyPI source ------------------------------------------------------------------------------------
def write_simple(root: Path, index: FakeIndex) -> Path:
    """A PEP 503 tree: <root>/simple/<project>/index.html, the files in <root>/files/."""
    for name, files in index.projects.items():
        (root / "simple" / name).mkdir(parents=True, exist_ok=True)
        links = "".join(f'<a href="../../files/{f["filename"]}#sha256={f["hashes"]["sha256"]}">'
                        f'{f["filename"]}</a>\n' for f in files)
        (root / "simple" / name / "index.html").write_text(f"<html><body>{links}</body></html>")
    (root / "files").mkdir(parents=True, exist_ok=True)
    for fn, data in index.blobs.items():
        (root / "files" / fn).write_bytes(data)
    return root / "simple"


CRT_WHEEL = f"nvidia_cuda_crt-13.0.88-{LINUX_TAG}.whl"


@pytest.fixture
def indexes(tmp_path: Path) -> tuple[Path, Path]:
    """(the real index, a trojan copy whose crt wheel adds TROJAN.h and whose page matches it)."""
    idx = FakeIndex()
    add_release_13_0(idx, windows=False)
    real = write_simple(tmp_path / "pypi-real", idx)
    bad = FakeIndex()
    add_release_13_0(bad, windows=False)
    bad.projects["nvidia-cuda-crt"] = []
    bad.add(CRT_WHEEL, make_wheel("nvidia_cuda_crt", "13.0.88", {
        "nvidia/cu13/include/crt/host_config.h": b"// hc", f"nvidia/cu13/{TROJAN}": b"#error owned\n"}))
    trojan = write_simple(tmp_path / "pypi-trojan", bad)
    return real, trojan


def pypi_install(prefix: Path, *args: str) -> tuple[int, str]:
    return install(prefix, "--source", "pypi", *args)


def test_pypi_trojan_mirror_in_front_of_an_authenticated_index(named: type[NamedHost],
                                                               indexes: tuple[Path, Path],
                                                               tmp_path: Path) -> None:
    real, trojan = indexes
    mirror = named(trojan.parent)
    prefix = tmp_path / "cuda"
    code, err = pypi_install(prefix, "--index-url", str(real), "--mirror", mirror.url + "simple/")
    assert code == 0, err
    assert not (prefix / TROJAN).exists() and (prefix / "include/crt/host_config.h").is_file()
    assert "trying" in err and CRT_WHEEL in err
    prov = record(prefix)["provenance"]
    assert isinstance(prov, dict)
    assert prov["hashes_from"] == f"{real.as_uri()}/ (a local directory)"
    served = prov["archives"]
    assert served["cuda_crt"].startswith(real.parent.as_uri()), served
    assert all(u.startswith(mirror.url + "files/") for c, u in served.items() if c != "cuda_crt"), served
    trojan_sha = hashlib.sha256((trojan.parent / "files" / CRT_WHEEL).read_bytes()).hexdigest()
    assert trojan_sha not in cached_shas(tmp_path / "cache")

    code, err = pypi_install(tmp_path / "nf", "--index-url", str(real), "--mirror", mirror.url + "simple/",
                             "--no-fallback", "--cache-dir", str(tmp_path / "cache2"))
    assert code == 1 and CRT_WHEEL in err and ("sha256" in err or "declares" in err), err
    assert not (tmp_path / "nf").exists() and trojan_sha not in cached_shas(tmp_path / "cache2")


def test_pypi_no_fallback_takes_the_metapackage_wheel_from_the_mirror_too(named: type[NamedHost],
                                                                          indexes: tuple[Path, Path],
                                                                          tmp_path: Path) -> None:
    """--no-fallback: every wheel from the mirror, cuda-toolkit's metadata wheel as well (it was
    fetched from the index's URL). The index's copy of it is damaged here (same size, other bytes),
    so reading it would fail its sha256; the index still answers for pages and sizes."""
    import shutil

    real, _trojan = indexes
    mirror = named(shutil.copytree(real.parent, tmp_path / "mirror-copy"))
    meta = real.parent / "files" / "cuda_toolkit-13.0.2-py2.py3-none-any.whl"
    meta.write_bytes(b"\0" * meta.stat().st_size)
    prefix = tmp_path / "cuda"
    code, err = pypi_install(prefix, "--index-url", str(real), "--mirror", mirror.url + "simple/",
                             "--no-fallback")
    assert code == 0, err
    assert f"/files/{meta.name}" in mirror.log, mirror.log
    assert (prefix / "include/crt/host_config.h").is_file()


def test_pypi_plain_http_index_is_refused_and_trusted_host_accepts_it(named: type[NamedHost],
                                                                      indexes: tuple[Path, Path],
                                                                      tmp_path: Path) -> None:
    real, _trojan = indexes
    host = named(real.parent)
    for command in (["install", "13.0", "--prefix", str(tmp_path / "cuda")], ["resolve", "13.0"],
                    ["lock", "13.0"], ["mirror", "13.0", "--out", str(tmp_path / "m")], ["trains"]):
        code, err = cli(*command, "--source", "pypi", "--index-url", host.url + "simple/")
        assert code == 1 and err.count("\n") == 1, err
        assert "refusing to read the index pages" in err and f"--trusted-host {host.host}" in err, err
    assert host.log == [] and not (tmp_path / "cuda").exists()

    prefix = tmp_path / "cuda"
    code, err = pypi_install(prefix, "--index-url", host.url + "simple/", "--trusted-host", host.host)
    assert code == 0, err
    prov = record(prefix)["provenance"]
    assert isinstance(prov, dict) and prov["hashes_from"] == f"{host.url}simple/ (--trusted-host {host.host})"

    # a lock written from the trusted index installs without --trusted-host: the lock is the source
    lock = tmp_path / "cuda.lock"
    code, err = cli("lock", "13.0", "--platform", "linux-x86_64", "--source", "pypi", "--index-url",
                    host.url + "simple/", "--trusted-host", host.host, "-o", str(lock))
    assert code == 0, err
    code, err = install(tmp_path / "locked", "--lock", str(lock), "--cache-dir", str(tmp_path / "c3"))
    assert code == 0, err


def test_pypi_index_unreachable_and_an_untrusted_mirror_names_the_ways_out(named: type[NamedHost],
                                                                           indexes: tuple[Path, Path],
                                                                           tmp_path: Path) -> None:
    real, _trojan = indexes
    mirror = named(real.parent)
    down = f"http://127.0.0.1:{closed_port()}/simple/"
    code, err = pypi_install(tmp_path / "cuda", "--index-url", down, "--mirror", mirror.url + "simple/")
    assert code == 1 and err.count("\n") == 1, err
    for words in ("is plain HTTP", "Three ways out", f"--trusted-host {mirror.host}", "install --lock"):
        assert words in err, err
    assert mirror.log == [] and not (tmp_path / "cuda").exists()
    # vouched for, the mirror answers for the pages while the index is down
    code, err = pypi_install(tmp_path / "cuda", "--index-url", down, "--mirror", mirror.url + "simple/",
                             "--trusted-host", mirror.host)
    assert code == 0, err
    prov = record(tmp_path / "cuda")["provenance"]
    assert isinstance(prov, dict)
    assert prov["hashes_from"] == f"{mirror.url}simple/ (--trusted-host {mirror.host})"
    assert all(u.startswith(mirror.url) for u in prov["archives"].values()), prov


def test_an_https_document_redirected_to_plain_http_is_refused() -> None:
    """TLS must hold to the last hop of a manifest or index page: a redirect to http:// would hand
    the hashes to whoever is on that path."""
    import httpx
    import respx

    from cudaredist.errors import TrustError
    from cudaredist.fetch.client import RetryPolicy
    from cudaredist.fetch.transport import Transport

    listing = b"<a href='redistrib_13.0.1.json'>redistrib_13.0.1.json</a>"
    with respx.mock() as router, Transport(retry=RetryPolicy(attempts=1)) as t:
        router.get("https://redist.test/a/").mock(
            return_value=httpx.Response(302, headers={"Location": "http://redist.test/a/"}))
        router.get("http://redist.test/a/").mock(return_value=httpx.Response(200, content=listing))
        router.get("https://redist.test/b/").mock(
            return_value=httpx.Response(302, headers={"Location": "https://cdn.test/b/"}))
        router.get("https://cdn.test/b/").mock(return_value=httpx.Response(200, content=listing))
        with pytest.raises(TrustError, match=r"it redirects to http://redist\.test/a/, which may not supply"):
            t.get_bytes("https://redist.test/a/")
        assert t.get_bytes("https://redist.test/b/") == listing  # https to https is fine


def test_a_localhost_name_is_connected_to_loopback_whatever_it_resolves_to(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``*.localhost`` is this machine (RFC 6761), as curl takes it: a name that DNS or a hosts file
    sends elsewhere (127.0.0.2 stands in for a LAN box) is connected to loopback all the same, so "a
    loopback address" in the record is what answered."""
    for name in ("here", "lan"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "who").write_text(name)
    real = socket.getaddrinfo
    with serving(directory_handler(tmp_path / "here")) as here, \
            serving(directory_handler(tmp_path / "lan"), host="127.0.0.2") as lan:
        def resolve(host: str, port: object, *args: object, **kw: object) -> object:
            if host == "mirror.localhost":  # a hosts entry pointing it at the LAN box
                host, port = "127.0.0.2", urlsplit(lan).port
            return real(host, port, *args, **kw)  # type: ignore[arg-type]

        monkeypatch.setattr(socket, "getaddrinfo", resolve)
        with make_client() as client:
            assert client.get(f"http://mirror.localhost:{urlsplit(here).port}/who").text == "here"
    assert Trust().reason(f"http://mirror.localhost:{urlsplit(here).port}/") == "a loopback address"
