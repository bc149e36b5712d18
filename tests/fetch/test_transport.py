"""The transport against a loopback fault server: retries, resume, segmented ranges, proxies, TLS."""

from __future__ import annotations

import datetime as dt
import email.utils
import hashlib
import random
import ssl
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from cudaredist.errors import FetchError, IntegrityError
from cudaredist.fetch.client import RetryPolicy, make_client, retry_after_seconds
from cudaredist.fetch.transport import Transport
from tests.faultserver import FaultServer, ForwardProxy
from tests.hosts import need_cryptography

SIZE = 300_000
BLOB = "/files/blob.bin"
Blob = tuple[Path, bytes, str]  # (served root, the bytes, their sha256)


@pytest.fixture
def blob(tmp_path: Path) -> Blob:
    root = tmp_path / "www"
    (root / "files").mkdir(parents=True)
    data = random.Random(7).randbytes(SIZE)
    (root / "files" / "blob.bin").write_bytes(data)
    return root, data, hashlib.sha256(data).hexdigest()


@pytest.fixture
def srv(blob: Blob) -> Iterator[FaultServer]:
    with FaultServer(blob[0]) as s:
        yield s


class Sleeps(list[float]):
    """An injected ``sleep`` that records the delays instead of waiting."""

    def __call__(self, seconds: float) -> None:
        self.append(seconds)


@pytest.fixture
def sleeps() -> Sleeps:
    return Sleeps()


@pytest.fixture
def transport(sleeps: Sleeps) -> Iterator[Transport]:
    t = Transport(make_client(timeout=0.5), retry=RetryPolicy(backoff=0.01), sleep=sleeps)
    yield t
    t.close()


@pytest.fixture
def segmented(sleeps: Sleeps) -> Iterator[Transport]:
    """300 kB in 4 ranges of 75 kB."""
    t = Transport(make_client(timeout=0.5), retry=RetryPolicy(backoff=0.01), sleep=sleeps,
                  connections=4, segment_size=64 << 10)
    yield t
    t.close()


def fetch(t: Transport, srv: FaultServer, blob: Blob, dest: Path, **kw: int) -> bytes:
    _, data, sha = blob
    t.download(srv.url(BLOB), dest, size=kw.get("size", len(data)), sha256=sha)
    return dest.read_bytes()


# -- single stream ---------------------------------------------------------------------------------
def test_plain_download_is_one_request(transport: Transport, srv: FaultServer, blob: Blob,
                                       tmp_path: Path) -> None:
    assert fetch(transport, srv, blob, tmp_path / "out") == blob[1]
    assert srv.ranges_for(BLOB) == [None]


@pytest.mark.parametrize("rst", [pytest.param(False, id="fin"), pytest.param(True, id="rst")])
def test_broken_transfer_resumes_with_range(transport: Transport, srv: FaultServer, blob: Blob,
                                            tmp_path: Path, rst: bool) -> None:
    srv.reset(BLOB, at=100_000, rst=rst)
    assert fetch(transport, srv, blob, tmp_path / "out") == blob[1]
    ranges = srv.ranges_for(BLOB)
    assert len(ranges) == 2 and ranges[0] is None
    if rst:  # a RST may discard bytes in flight: resumed at or before the break (None: from 0)
        assert ranges[1] is None or 0 < int(ranges[1][6:-1]) <= 100_000
    else:
        assert ranges[1] == "bytes=100000-"


def test_progress_renews_the_retry_budget(sleeps: Sleeps, srv: FaultServer, blob: Blob,
                                          tmp_path: Path) -> None:
    """Five breaks, each after new bytes, succeed with only two tries per stall."""
    for at in (50_000, 100_000, 150_000, 200_000, 250_000):
        srv.reset(BLOB, at=at)
    with Transport(make_client(timeout=0.5), retry=RetryPolicy(attempts=2, backoff=0.01), sleep=sleeps) as t:
        assert fetch(t, srv, blob, tmp_path / "out") == blob[1]
    assert srv.ranges_for(BLOB) == [None] + [f"bytes={n}-" for n in (50_000, 100_000, 150_000, 200_000,
                                                                      250_000)]


def test_a_break_at_the_same_byte_every_time_gives_up(transport: Transport, srv: FaultServer, blob: Blob,
                                                      tmp_path: Path, sleeps: Sleeps) -> None:
    srv.reset(BLOB, at=100_000, times=None)
    with pytest.raises(FetchError, match="giving up") as exc:
        fetch(transport, srv, blob, tmp_path / "out")
    assert exc.value.url == srv.url(BLOB)
    assert srv.ranges_for(BLOB) == [None] + ["bytes=100000-"] * 4  # 5 attempts, 4 backoffs
    assert len(sleeps) == 4


def test_stalled_transfer_times_out_and_resumes(transport: Transport, srv: FaultServer, blob: Blob,
                                                tmp_path: Path) -> None:
    srv.stall(BLOB, at=120_000, seconds=3)
    t0 = time.monotonic()
    assert fetch(transport, srv, blob, tmp_path / "out") == blob[1]
    assert time.monotonic() - t0 < 2.5  # the 0.5 s read timeout fired, not the 3 s stall
    assert srv.ranges_for(BLOB) == [None, "bytes=120000-"]


@pytest.mark.parametrize("code", [503, 500, 502, 429])
def test_transient_statuses_are_retried_with_backoff(transport: Transport, srv: FaultServer, blob: Blob,
                                                     tmp_path: Path, sleeps: Sleeps, code: int) -> None:
    srv.status(BLOB, code, times=2)
    assert fetch(transport, srv, blob, tmp_path / "out") == blob[1]
    assert [r.status for r in srv.requests_for(BLOB)] == [code, code, 200]
    # full jitter within a doubling cap: [cap/2, cap] with cap = 0.01, 0.02
    assert 0.005 <= sleeps[0] <= 0.01 and 0.01 <= sleeps[1] <= 0.02


def test_retry_after_is_honoured(transport: Transport, srv: FaultServer, blob: Blob, tmp_path: Path,
                                 sleeps: Sleeps) -> None:
    srv.status(BLOB, 429, retry_after="7")
    when = email.utils.format_datetime(dt.datetime.now(dt.timezone.utc) + dt.timedelta(seconds=30),
                                       usegmt=True)
    srv.status(BLOB, 503, retry_after=when)
    srv.status(BLOB, 503, retry_after="3600")
    assert fetch(transport, srv, blob, tmp_path / "out") == blob[1]
    assert sleeps[0] == 7.0
    assert 25 < sleeps[1] <= 30
    assert sleeps[2] == RetryPolicy().max_retry_after  # capped


def test_persistent_503_gives_up_after_the_attempts(transport: Transport, srv: FaultServer, blob: Blob,
                                                    tmp_path: Path) -> None:
    srv.status(BLOB, 503, times=None)
    with pytest.raises(FetchError, match=r"after 5 attempts: HTTP 503"):
        fetch(transport, srv, blob, tmp_path / "out")
    assert len(srv.requests_for(BLOB)) == 5


@pytest.mark.parametrize("code", [404, 403, 401, 410])
def test_client_errors_are_not_retried(transport: Transport, srv: FaultServer, blob: Blob, tmp_path: Path,
                                       sleeps: Sleeps, code: int) -> None:
    srv.status(BLOB, code, times=None)
    with pytest.raises(FetchError) as exc:
        fetch(transport, srv, blob, tmp_path / "out")
    assert exc.value.status == code and exc.value.url == srv.url(BLOB)
    assert "blob.bin" in str(exc.value) and srv.url(BLOB) in str(exc.value)
    assert len(srv.requests_for(BLOB)) == 1 and not sleeps


def test_flipped_byte_is_an_integrity_error(transport: Transport, srv: FaultServer, blob: Blob,
                                            tmp_path: Path) -> None:
    srv.flip(BLOB, at=1234)
    with pytest.raises(IntegrityError) as exc:
        fetch(transport, srv, blob, tmp_path / "out")
    assert exc.value.what == "sha256" and exc.value.expected == blob[2]
    assert len(srv.requests_for(BLOB)) == 1


def test_honestly_short_file_is_a_size_error(transport: Transport, srv: FaultServer, blob: Blob,
                                             tmp_path: Path) -> None:
    srv.truncate(BLOB, to=1000)
    with pytest.raises(IntegrityError) as exc:
        fetch(transport, srv, blob, tmp_path / "out")
    assert (exc.value.what, exc.value.expected, exc.value.actual) == ("size", SIZE, 1000)
    assert len(srv.requests_for(BLOB)) == 1


def test_dishonest_content_length_is_retried_then_gives_up(transport: Transport, srv: FaultServer, blob: Blob,
                                                           tmp_path: Path) -> None:
    srv.truncate(BLOB, to=1000, honest=False)
    with pytest.raises(FetchError, match="giving up"):
        fetch(transport, srv, blob, tmp_path / "out")
    assert srv.ranges_for(BLOB) == [None] + ["bytes=1000-"] * 4


def test_body_longer_than_declared_is_refused(transport: Transport, srv: FaultServer, blob: Blob,
                                              tmp_path: Path) -> None:
    srv.pad(BLOB, b"trailing junk")
    with pytest.raises(IntegrityError) as exc:
        fetch(transport, srv, blob, tmp_path / "out")
    assert exc.value.what == "size"
    with pytest.raises(IntegrityError, match="more than"):
        fetch(transport, srv, blob, tmp_path / "out", size=SIZE - 10)


def test_ignored_range_on_resume_starts_over_and_hashes_right(transport: Transport, srv: FaultServer,
                                                              blob: Blob, tmp_path: Path) -> None:
    srv.ignore_range(BLOB)
    srv.reset(BLOB, at=150_000)
    assert fetch(transport, srv, blob, tmp_path / "out") == blob[1]
    assert [(r.range, r.status) for r in srv.requests_for(BLOB)] == [(None, 200), ("bytes=150000-", 200)]


def test_bad_content_range_is_retried(transport: Transport, srv: FaultServer, blob: Blob, tmp_path: Path,
                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """A 206 that starts elsewhere than asked is not spliced in."""
    from cudaredist.fetch.client import Retryable, check_content_range

    with pytest.raises(Retryable):
        check_content_range("bytes 10-99/100", 0, 100, "u")
    with pytest.raises(IntegrityError):
        check_content_range("bytes 0-99/100", 0, 200, "u")
    with pytest.raises(Retryable):
        check_content_range("garbage", 0, 100, "u")
    check_content_range("bytes 5-99/*", 5, 100, "u")


# -- segmented ---------------------------------------------------------------------------------------
QUARTERS = ["bytes=0-74999", "bytes=75000-149999", "bytes=150000-224999", "bytes=225000-299999"]


def test_segmented_download_uses_ranges(segmented: Transport, srv: FaultServer, blob: Blob,
                                        tmp_path: Path) -> None:
    assert fetch(segmented, srv, blob, tmp_path / "out") == blob[1]
    ranges = srv.ranges_for(BLOB)
    assert ranges[0] == QUARTERS[0] and set(ranges) == set(QUARTERS) and len(ranges) == 4


def test_segmented_hash_survives_many_small_writers(sleeps: Sleeps, srv: FaultServer, blob: Blob,
                                                    tmp_path: Path) -> None:
    """The in-order hasher reads behind eight writers; repeated to shake out read-ahead races."""
    with Transport(make_client(timeout=2), retry=RetryPolicy(backoff=0.01), sleep=sleeps, connections=8,
                   segment_size=16 << 10) as t:
        for i in range(5):
            assert fetch(t, srv, blob, tmp_path / f"out{i}") == blob[1]
    assert len(srv.requests_for(BLOB)) == 40


@pytest.mark.parametrize("rst", [pytest.param(False, id="fin"), pytest.param(True, id="rst")])
def test_segment_resumes_after_a_reset(segmented: Transport, srv: FaultServer, blob: Blob, tmp_path: Path,
                                       rst: bool) -> None:
    srv.reset(BLOB, at=190_000, rst=rst)  # inside the third quarter
    assert fetch(segmented, srv, blob, tmp_path / "out") == blob[1]
    ranges = srv.ranges_for(BLOB)
    assert len(ranges) == 5 and set(QUARTERS) <= set(ranges)
    third = [r for r in ranges if r is not None and r.endswith("-224999")]
    assert len(third) == 2  # the third quarter, then its resumption
    start = int(third[1][6:].split("-")[0])
    assert (start == 190_000) if not rst else (150_000 <= start <= 190_000)


def test_segment_stall_and_503_are_retried(segmented: Transport, srv: FaultServer, blob: Blob,
                                           tmp_path: Path) -> None:
    srv.status(BLOB, 503)
    srv.stall(BLOB, at=260_000, seconds=3)
    assert fetch(segmented, srv, blob, tmp_path / "out") == blob[1]
    ranges = srv.ranges_for(BLOB)
    assert ranges[:2] == [QUARTERS[0], QUARTERS[0]]  # the 503, then the retry
    assert "bytes=260000-299999" in ranges


def test_segmented_falls_back_to_one_stream_without_range(segmented: Transport, srv: FaultServer, blob: Blob,
                                                          tmp_path: Path) -> None:
    srv.ignore_range(BLOB)
    assert fetch(segmented, srv, blob, tmp_path / "out") == blob[1]
    assert [(r.range, r.status) for r in srv.requests_for(BLOB)] == [(QUARTERS[0], 200), (None, 200)]


def test_fallback_stream_restarts_when_broken(segmented: Transport, srv: FaultServer, blob: Blob,
                                              tmp_path: Path) -> None:
    srv.ignore_range(BLOB)
    srv.reset(BLOB, at=200_000)
    assert fetch(segmented, srv, blob, tmp_path / "out") == blob[1]
    got = [(r.range, r.status) for r in srv.requests_for(BLOB)]
    # the reset hits either the probing range (which read on) or the plain stream
    assert got in ([(QUARTERS[0], 200), (None, 200)],
                   [(QUARTERS[0], 200), (None, 200), ("bytes=200000-", 200)])


def test_segmented_flipped_byte_is_an_integrity_error(segmented: Transport, srv: FaultServer, blob: Blob,
                                                      tmp_path: Path) -> None:
    srv.flip(BLOB, at=280_000)
    with pytest.raises(IntegrityError) as exc:
        fetch(segmented, srv, blob, tmp_path / "out")
    assert exc.value.what == "sha256"


def test_segmented_404_is_not_retried(segmented: Transport, srv: FaultServer, blob: Blob,
                                      tmp_path: Path) -> None:
    srv.status(BLOB, 404, times=None)
    with pytest.raises(FetchError) as exc:
        fetch(segmented, srv, blob, tmp_path / "out")
    assert exc.value.status == 404 and len(srv.requests_for(BLOB)) == 1


def test_segmented_short_file_is_a_size_error(segmented: Transport, srv: FaultServer, blob: Blob,
                                              tmp_path: Path) -> None:
    srv.truncate(BLOB, to=200_000)
    with pytest.raises(IntegrityError) as exc:
        fetch(segmented, srv, blob, tmp_path / "out")
    assert (exc.value.what, exc.value.actual) == ("size", 200_000)


# -- small documents and local files ---------------------------------------------------------------------
def test_get_bytes_retries_and_limits(transport: Transport, srv: FaultServer, blob: Blob) -> None:
    srv.status(BLOB, 502)
    assert transport.get_bytes(srv.url(BLOB)) == blob[1]
    with pytest.raises(FetchError, match="larger than"):
        transport.get_bytes(srv.url(BLOB), limit=1000)
    with pytest.raises(FetchError) as exc:
        transport.get_bytes(srv.url("/files/none.json"))
    assert exc.value.status == 404


def test_local_files(transport: Transport, blob: Blob, tmp_path: Path) -> None:
    root, data, sha = blob
    src = root / "files" / "blob.bin"
    transport.download(src.as_uri(), tmp_path / "a", size=SIZE, sha256=sha)
    assert (tmp_path / "a").read_bytes() == data
    with pytest.raises(FetchError) as exc:
        transport.download((root / "nope").as_uri(), tmp_path / "b", size=SIZE, sha256=sha)
    assert exc.value.status == 404
    with pytest.raises(IntegrityError, match="more than"):
        transport.download(str(src), tmp_path / "c", size=SIZE - 1, sha256=sha)
    with pytest.raises(IntegrityError) as ie:
        transport.download(str(src), tmp_path / "d", size=SIZE, sha256="0" * 64)
    assert ie.value.what == "sha256"


@pytest.mark.parametrize(("value", "expected"), [
    pytest.param(None, None, id="absent"),
    pytest.param("12", 12.0, id="seconds"),
    pytest.param(" 3 ", 3.0, id="spaces"),
    pytest.param("soon", None, id="garbage"),
    pytest.param("Wed, 21 Oct 2015 07:28:00 GMT", 0.0, id="date-in-the-past"),
])
def test_retry_after_parsing(value: str | None, expected: float | None) -> None:
    assert retry_after_seconds(value) == expected


def test_backoff_doubles_with_jitter_and_caps() -> None:
    p = RetryPolicy(backoff=1.0, max_backoff=5.0, max_retry_after=60)
    for attempt, cap in [(0, 1.0), (1, 2.0), (2, 4.0), (3, 5.0), (9, 5.0)]:
        for _ in range(20):
            assert cap / 2 <= p.delay(attempt) <= cap
    assert p.delay(0, retry_after=120) == 60
    assert p.delay(0, retry_after=-1) == 0


# -- proxies and TLS -----------------------------------------------------------------------------------
@pytest.fixture
def proxy() -> Iterator[ForwardProxy]:
    p = ForwardProxy()
    yield p
    p.close()


def test_http_proxy_from_the_environment(proxy: ForwardProxy, srv: FaultServer, blob: Blob, tmp_path: Path,
                                         monkeypatch: pytest.MonkeyPatch, sleeps: Sleeps) -> None:
    monkeypatch.setenv("HTTP_PROXY", proxy.url)
    url = srv.url(BLOB).replace("127.0.0.1", "0.0.0.0")  # not loopback: loopback never takes a proxy
    with Transport(make_client(timeout=2), retry=RetryPolicy(backoff=0.01), sleep=sleeps) as t:
        t.download(url, tmp_path / "out", size=SIZE, sha256=blob[2])
    assert (tmp_path / "out").read_bytes() == blob[1]
    assert proxy.seen == [url]
    assert srv.ranges_for(BLOB) == [None]


def test_no_proxy_bypasses_the_proxy(proxy: ForwardProxy, srv: FaultServer, blob: Blob, tmp_path: Path,
                                     monkeypatch: pytest.MonkeyPatch, sleeps: Sleeps) -> None:
    monkeypatch.setenv("HTTP_PROXY", proxy.url)
    monkeypatch.setenv("NO_PROXY", "127.0.0.1")
    with Transport(make_client(timeout=2), retry=RetryPolicy(backoff=0.01), sleep=sleeps) as t:
        assert fetch(t, srv, blob, tmp_path / "out") == blob[1]
    assert proxy.seen == []
    assert len(srv.requests_for(BLOB)) == 1


@pytest.fixture(scope="module")
def tls_files(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Path]:
    """(ca.pem, server cert chain, server key): a throwaway CA and a cert for 127.0.0.1."""
    import ipaddress

    need_cryptography()
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    d = tmp_path_factory.mktemp("tls")
    now = dt.datetime.now(dt.timezone.utc)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "cudaredist test CA")])
    ca = (x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name)
          .public_key(ca_key.public_key()).serial_number(x509.random_serial_number())
          .not_valid_before(now - dt.timedelta(minutes=5)).not_valid_after(now + dt.timedelta(days=1))
          .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
          .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                       content_commitment=False, key_encipherment=False,
                                       data_encipherment=False, key_agreement=False,
                                       encipher_only=False, decipher_only=False), critical=True)
          .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False)
          .sign(ca_key, hashes.SHA256()))
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")]))
            .issuer_name(ca_name).public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(minutes=5)).not_valid_after(now + dt.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
                           critical=False)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
            .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()),
                           critical=False)
            .sign(ca_key, hashes.SHA256()))
    pem = serialization.Encoding.PEM
    (d / "ca.pem").write_bytes(ca.public_bytes(pem))
    (d / "server.pem").write_bytes(cert.public_bytes(pem) + ca.public_bytes(pem))
    (d / "server.key").write_bytes(key.private_bytes(pem, serialization.PrivateFormat.PKCS8,
                                                     serialization.NoEncryption()))
    return d / "ca.pem", d / "server.pem", d / "server.key"


@pytest.fixture
def https_srv(blob: Blob, tls_files: tuple[Path, Path, Path]) -> Iterator[FaultServer]:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(tls_files[1], tls_files[2])
    with FaultServer(blob[0], ssl_context=ctx) as s:
        yield s


def test_ssl_cert_file_is_trusted(https_srv: FaultServer, blob: Blob, tls_files: tuple[Path, Path, Path],
                                  tmp_path: Path, monkeypatch: pytest.MonkeyPatch, sleeps: Sleeps) -> None:
    monkeypatch.setenv("SSL_CERT_FILE", str(tls_files[0]))
    with Transport(make_client(timeout=2), retry=RetryPolicy(backoff=0.01), sleep=sleeps) as t:
        https_srv.reset(BLOB, at=100_000)
        assert fetch(t, https_srv, blob, tmp_path / "out") == blob[1]
    assert https_srv.ranges_for(BLOB) == [None, "bytes=100000-"]


def test_untrusted_certificate_fails_at_once_with_advice(https_srv: FaultServer, blob: Blob, tmp_path: Path,
                                                         sleeps: Sleeps) -> None:
    with Transport(make_client(timeout=2), retry=RetryPolicy(backoff=0.01), sleep=sleeps) as t, \
            pytest.raises(FetchError, match="SSL_CERT_FILE") as exc:
        fetch(t, https_srv, blob, tmp_path / "out")
    assert exc.value.url == https_srv.url(BLOB)
    assert not sleeps and not https_srv.requests  # not retried; no request got through


def test_connection_refused_is_retried_then_reported(transport: Transport, sleeps: Sleeps,
                                                     tmp_path: Path) -> None:
    import socket

    with socket.socket() as s:  # a port that was free a moment ago: nothing listens there
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    url = f"http://127.0.0.1:{port}/files/blob.bin"
    with pytest.raises(FetchError, match="ConnectError") as exc:
        transport.download(url, tmp_path / "out", size=SIZE, sha256="0" * 64)
    assert exc.value.url == url and len(sleeps) == 4


def test_install_through_a_proxy(mirror: Path, proxy: ForwardProxy, tmp_path: Path,
                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """The CLI's own transport picks HTTP_PROXY up: the index, the manifest and every archive."""
    from typer.testing import CliRunner

    from cudaredist.cli import app

    with FaultServer(mirror) as origin:
        monkeypatch.setenv("HTTP_PROXY", proxy.url)
        base = origin.base.replace("127.0.0.1", "0.0.0.0")  # not loopback: loopback never takes a proxy
        r = CliRunner().invoke(app, ["install", "13.0", "--prefix", str(tmp_path / "cuda"), "--platform",
                                     "linux-x86_64", "--base-url", base, "--trusted-host", "0.0.0.0", "-q"])
        assert r.exit_code == 0, r.output
        assert sorted(proxy.seen) == sorted(base + q.path.lstrip("/") for q in origin.requests)
    assert base + "redistrib_13.0.1.json" in proxy.seen
    assert sum(u.endswith(".tar.xz") for u in proxy.seen) == 7


# -- redirects: trust is judged on every URL that answered ---------------------------------------------
def _redirecting(to: str) -> Iterator[str]:
    """A loopback server that answers every request with a 302 to the same path under ``to``."""
    import http.server

    from tests.loopback import serving

    class Redirect(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(302)
            self.send_header("Location", to.rstrip("/") + self.path)
            self.send_header("Content-Length", "0")
            self.end_headers()

        do_HEAD = do_GET

        def log_message(self, format: str, *args: object) -> None:
            pass

    with serving(Redirect) as url:
        yield url


@pytest.mark.parametrize("target, trusted", [
    pytest.param("http://0.0.0.0:{port}/", None, id="loopback-to-plain-http"),
    pytest.param("http://0.0.0.0:{port}/", "0.0.0.0:1", id="trusted-host-port-is-not-the-target"),
])
def test_a_redirect_to_a_host_that_may_not_supply_hashes_is_refused(
        mirror: Path, tmp_path: Path, target: str, trusted: str | None) -> None:
    from typer.testing import CliRunner

    from cudaredist.cli import app

    with FaultServer(mirror) as origin:
        port = origin.base.rsplit(":", 1)[1].strip("/")
        for base in _redirecting(target.format(port=port)):
            r = CliRunner().invoke(app, ["install", "13.0", "--prefix", str(tmp_path / "cuda"), "--platform",
                                         "linux-x86_64", "--base-url", base,
                                         *(["--trusted-host", trusted] if trusted else [])])
    assert r.exit_code == 1, r.output
    assert f"refusing to read a manifest or index page through {base}" in r.stderr
    assert f"it redirects to http://0.0.0.0:{port}/" in r.stderr and "Traceback" not in r.output
    assert not (tmp_path / "cuda").exists()


def test_a_redirect_between_trusted_places_is_recorded_where_it_answered(mirror: Path,
                                                                         tmp_path: Path) -> None:
    import json

    from typer.testing import CliRunner

    from cudaredist.cli import app

    with FaultServer(mirror) as origin:
        final = origin.base.replace("127.0.0.1", "localhost")
        for base in _redirecting(final):
            r = CliRunner().invoke(app, ["install", "13.0", "--prefix", str(tmp_path / "cuda"), "--platform",
                                         "linux-x86_64", "--base-url", base, "-q"])
    assert r.exit_code == 0, r.output
    rec = json.loads((tmp_path / "cuda" / ".cudaredist" / "record.json").read_text())
    assert rec["provenance"]["hashes_from"] == f"{final}redistrib_13.0.1.json (a loopback address)"


def test_a_cached_manifest_is_judged_by_this_runs_trust(mirror: Path, tmp_path: Path) -> None:
    """Within the index TTL a later run reads the cached listing and manifest, but the URLs they came
    through are kept with them and judged again: a redirect to a host only the first run trusted
    (--trusted-host) is asked again and refused, under --offline too; the record names that host."""
    import json

    from typer.testing import CliRunner

    from cudaredist.cli import app

    def install(prefix: str, base: str, *flags: str) -> tuple[int, str, dict[str, object] | None]:
        r = CliRunner().invoke(app, ["install", "13.0", "--prefix", str(tmp_path / prefix), "--platform",
                                     "linux-x86_64", "--base-url", base, "-q", *flags])
        rec = tmp_path / prefix / ".cudaredist" / "record.json"
        return r.exit_code, r.stderr, json.loads(rec.read_text()) if rec.exists() else None

    with FaultServer(mirror) as origin:
        port = origin.base.rsplit(":", 1)[1].strip("/")
        final = f"http://0.0.0.0:{port}/"
        for base in _redirecting(final):
            code, err, rec = install("p1", base, "--trusted-host", "0.0.0.0")
            assert code == 0 and rec is not None, err
            came = f"{final}redistrib_13.0.1.json (--trusted-host 0.0.0.0)"
            assert rec["provenance"] == {**rec["provenance"], "hashes_from": came}  # type: ignore[dict-item]
            asked = len(origin.requests)
            code, err, rec = install("p3", base, "--trusted-host", "0.0.0.0")  # from the cached copies
            assert (code, len(origin.requests)) == (0, asked), err  # nothing asked: all cached
            assert rec is not None and rec["provenance"]["hashes_from"] == came  # type: ignore[index]
            code, err, rec = install("p2", base)
            assert (code, rec) == (1, None)
            assert f"refusing to read a manifest or index page through {base}: it redirects to {final}" in err
            code, err, rec = install("p4", base, "--offline")
            assert (code, rec) == (1, None)
            assert f"refusing to use the copy of {base} cached in" in err and "Traceback" not in err


def test_loopback_never_goes_through_a_proxy(mirror: Path, tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """A dead proxy in HTTP_PROXY: a loopback install does not use it (it failed after 5 attempts)."""
    from typer.testing import CliRunner

    from cudaredist.cli import app

    with FaultServer(mirror) as origin:
        monkeypatch.setenv("HTTP_PROXY", "http://127.0.0.1:9")
        monkeypatch.setenv("ALL_PROXY", "http://127.0.0.1:9")
        r = CliRunner().invoke(app, ["install", "13.0", "--prefix", str(tmp_path / "cuda"), "--platform",
                                     "linux-x86_64", "--base-url", origin.base, "-q"])
    assert r.exit_code == 0, r.output


def test_all_of_127_8_is_asked_directly_whatever_the_proxy(mirror: Path, tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """trust.py calls 127.0.0.2 "a loopback address", so the client asks it directly: a proxy that
    would answer for it with another release is never asked (one loopback predicate for both)."""
    import functools
    import json
    from urllib.parse import urlsplit

    from typer.testing import CliRunner

    from cudaredist.cli import app
    from tests.archives import build_mirror, toolkit
    from tests.loopback import QuietHandler, directory_handler, serving

    if sys.platform != "linux":
        pytest.skip("only Linux routes all of 127.0.0.0/8 to the loopback device; elsewhere 127.0.0.2 "
                    "needs an alias")
    impostor = tmp_path / "impostor"
    build_mirror(impostor, "13.0.2", toolkit("linux-x86_64", "13.0.2"))
    asked: list[str] = []

    class Impostor(QuietHandler):  # a forward proxy that answers every URL from its own mirror
        def translate_path(self, path: str) -> str:
            asked.append(path)
            return super().translate_path(urlsplit(path).path)

    with serving(functools.partial(Impostor, directory=str(impostor))) as proxy, \
            serving(directory_handler(mirror), host="127.0.0.2") as base:
        for name in ("HTTP_PROXY", "ALL_PROXY"):
            monkeypatch.setenv(name, proxy)
        r = CliRunner().invoke(app, ["install", "13.0", "--prefix", str(tmp_path / "cuda"), "--platform",
                                     "linux-x86_64", "--base-url", base, "-q"])
    assert (r.exit_code, asked) == (0, []), r.output
    rec = json.loads((tmp_path / "cuda" / ".cudaredist" / "record.json").read_text())
    assert rec["provenance"]["hashes_from"] == f"{base} (a loopback address)"
    assert rec["plan"]["release"] == "13.0.1"
