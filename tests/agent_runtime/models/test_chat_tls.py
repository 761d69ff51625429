"""The Chat Completions drivers over TLS (models/chat_http.py): a provider's
certificate is verified with the process's TLS context (`SSL_CERT_FILE` names the
authorities), and an HTTPS proxy from the environment is reached with a CONNECT
that carries the proxy's credentials, never the provider's request. Everything
runs on 127.0.0.1 with a certificate made here."""

from __future__ import annotations

import base64
import contextlib
import ipaddress
import re
import socket
import ssl
import threading
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from chat_completions_wire import completion
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from fake_provider_server import (
    PROMPT,
    FakeProviderServer,
    driver_run,
    json_reply,
    recorded_retries,
)

from agent_runtime import RunStatus
from agent_runtime.models import openai as openai_driver
from agent_runtime.models.loop_clients import tls_context

MODEL = {"provider": "local", "model": "test-model"}


@pytest.fixture
def certificate(tmp_path: Path) -> tuple[Path, Path]:
    """A self-signed certificate for 127.0.0.1 (its own authority), and its key."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "fake provider")])
    now = datetime.now(UTC)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - timedelta(days=1)).not_valid_after(now + timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName(
                [x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()),
                           critical=False)
            .sign(key, hashes.SHA256()))
    cert_path, key_path = tmp_path / "provider.pem", tmp_path / "provider.key"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(key.private_bytes(serialization.Encoding.PEM,
                                           serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    return cert_path, key_path


@pytest.fixture
def https_server(certificate: tuple[Path, Path]) -> Iterator[FakeProviderServer]:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(*certificate)
    with FakeProviderServer(tls=context) as server:
        yield server


@pytest.fixture(autouse=True)
def fresh_tls_context(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The process's TLS context is made once; each test makes its own, from its
    environment, and leaves none behind."""
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY", "SSL_CERT_DIR"):
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.lower(), raising=False)
    tls_context.cache_clear()
    yield
    tls_context.cache_clear()


class ConnectProxy:
    """An HTTPS proxy on 127.0.0.1: answers a CONNECT by opening the tunnel it asks
    for and relaying bytes both ways; records each CONNECT's head. Leaving it ends
    every thread it started (a thread left running would refuse later tests' forks)."""

    def __init__(self) -> None:
        self.heads: list[str] = []
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._sockets: list[socket.socket] = []
        self._threads = [threading.Thread(target=self._accept, daemon=True)]

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._listener.getsockname()[1]}"

    def __enter__(self) -> ConnectProxy:
        self._threads[0].start()
        return self

    def __exit__(self, *exc: object) -> None:
        # A shutdown wakes a thread blocked in accept or recv; a close alone does not.
        for each in [self._listener, *self._sockets]:
            with contextlib.suppress(OSError):
                each.shutdown(socket.SHUT_RDWR)
        for thread in list(self._threads):
            thread.join(timeout=60)
        for each in [self._listener, *self._sockets]:
            each.close()

    def _start(self, target: Any, *args: Any) -> None:
        thread = threading.Thread(target=target, args=args, daemon=True)
        self._threads.append(thread)
        thread.start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return  # shut down
            self._sockets.append(client)
            self._start(self._tunnel, client)

    def _tunnel(self, client: socket.socket) -> None:
        head = b""
        while b"\r\n\r\n" not in head:
            try:
                received = client.recv(4096)
            except OSError:
                return
            if not received:
                return
            head += received
        text = head.decode("latin-1")
        self.heads.append(text)
        host, port = text.split(" ", 2)[1].rsplit(":", 1)
        upstream = socket.create_connection((host, int(port)))
        self._sockets.append(upstream)
        client.sendall(b"HTTP/1.1 200 Connection established\r\n\r\n")
        self._start(_relay, upstream, client)
        _relay(client, upstream)


def _relay(source: socket.socket, sink: socket.socket) -> None:
    try:
        while data := source.recv(65536):
            sink.sendall(data)
    except OSError:
        pass
    finally:
        for each in (source, sink):  # the other direction's relay ends too
            with contextlib.suppress(OSError):
                each.shutdown(socket.SHUT_RDWR)


def compatible(server: FakeProviderServer) -> dict[str, Any]:
    return {"providers": {"local": {"driver": "openai-compatible",
                                    "baseURL": f"{server.url}/v1"}}}


def test_a_provider_over_tls_is_verified_with_the_authorities_ssl_cert_file_names(
        https_server: FakeProviderServer, certificate: tuple[Path, Path],
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SSL_CERT_FILE", str(certificate[0]))
    https_server.add(json_reply(completion("over TLS")))
    result = driver_run(compatible(https_server)).run(PROMPT, model=MODEL)
    assert (result.status, result.output) == (RunStatus.COMPLETED, "over TLS")
    assert https_server.url.startswith("https://")
    assert https_server.requests[0].path == "/v1/chat/completions"


def test_a_certificate_no_authority_vouches_for_fails_the_call_naming_it(
        https_server: FakeProviderServer) -> None:
    settings = compatible(https_server)
    adapter, waits = recorded_retries(openai_driver.create_adapter, "local", settings)
    result = driver_run(settings, models={"local": adapter}).run(PROMPT, model=MODEL)
    assert result.status is RunStatus.FAILED
    assert result.error is not None
    assert result.error["details"] == {"code": "connection_error"}
    assert "the certificate of 127.0.0.1 failed verification" in result.error["message"]
    assert re.search(r"self.signed certificate", result.error["message"])  # OpenSSL's words
    assert waits == []  # not retried: another try meets the same certificate
    assert https_server.requests == []


def test_an_https_proxy_gets_a_connect_with_its_credentials_and_the_provider_does_not(
        https_server: FakeProviderServer, certificate: tuple[Path, Path],
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SSL_CERT_FILE", str(certificate[0]))
    https_server.add(json_reply(completion("tunnelled")))
    with ConnectProxy() as proxy:
        monkeypatch.setenv("HTTPS_PROXY", proxy.url.replace("http://", "http://relay:s3cret@"))
        result = driver_run(compatible(https_server)).run(PROMPT, model=MODEL)
    assert (result.status, result.output) == (RunStatus.COMPLETED, "tunnelled")
    [head] = proxy.heads
    target = https_server.url.removeprefix("https://")
    assert head.startswith(f"CONNECT {target} HTTP/1.1\r\n")
    credentials = base64.b64encode(b"relay:s3cret").decode()
    assert f"proxy-authorization: basic {credentials}".lower() in head.lower()
    [request] = https_server.requests
    assert "proxy-authorization" not in request.headers
    assert request.path == "/v1/chat/completions"
