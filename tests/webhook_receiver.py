"""A real HTTPS server that receives webhooks, for the notification tests: a certificate
authority and a server certificate (for 127.0.0.1 and localhost) made for the test, and
http.server behind TLS, answering each POST with the next status of a script."""

from __future__ import annotations

import datetime
import ipaddress
import json
import ssl
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID


@dataclass
class Received:
    path: str
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


@dataclass
class Receiver:
    url: str
    ca_file: Path
    statuses: list[int] = field(default_factory=list)  # answered in turn; the last one repeats
    received: list[Received] = field(default_factory=list)

    def next_status(self) -> int:
        return self.statuses.pop(0) if len(self.statuses) > 1 else self.statuses[0]


def name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def certificate(
    subject: str, key: Any, issuer: str, signer: Any, *, ca: bool, sans: list[Any] | None = None
) -> x509.Certificate:
    now = datetime.datetime.now(datetime.UTC)
    builder = (
        x509.CertificateBuilder()
        .subject_name(name(subject))
        .issuer_name(name(issuer))
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
    )
    if sans:
        builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
    return builder.sign(signer, hashes.SHA256())


def write_certificates(folder: Path) -> tuple[Path, Path, Path]:
    """The test CA's certificate, and the server's certificate and key, as PEM files."""
    ca_key, server_key = (
        ec.generate_private_key(ec.SECP256R1()),
        ec.generate_private_key(ec.SECP256R1()),
    )
    ca = certificate("Berth test CA", ca_key, "Berth test CA", ca_key, ca=True)
    # rebind.invalid resolves nowhere: a request to it reaches this server only when pinned.
    names = [x509.DNSName("localhost"), x509.DNSName("rebind.invalid")]
    sans = [x509.IPAddress(ipaddress.ip_address("127.0.0.1")), *names]
    server = certificate("127.0.0.1", server_key, "Berth test CA", ca_key, ca=False, sans=sans)
    pem = serialization.Encoding.PEM
    ca_file, cert_file, key_file = folder / "ca.pem", folder / "server.pem", folder / "key.pem"
    ca_file.write_bytes(ca.public_bytes(pem))
    cert_file.write_bytes(server.public_bytes(pem))
    key_file.write_bytes(
        server_key.private_bytes(
            pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )
    return ca_file, cert_file, key_file


@contextmanager
def https_receiver(folder: Path, statuses: list[int] | None = None) -> Iterator[Receiver]:
    ca_file, cert_file, key_file = write_certificates(folder)
    receiver = Receiver(url="", ca_file=ca_file, statuses=list(statuses or [200]))

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 - http.server's name
            body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
            receiver.received.append(Received(self.path, dict(self.headers.items()), body))
            self.send_response(receiver.next_status())
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert_file, key_file)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    receiver.url = f"https://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield receiver
    finally:
        server.shutdown()
        server.server_close()
