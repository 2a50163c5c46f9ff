"""A real SMTP server that receives the console's e-mail, for the notification tests: aiosmtpd
on a free port with STARTTLS (the test CA of webhook_receiver.py) and a login, keeping each
message it took, refusing recipients the test names with 550."""

from __future__ import annotations

import email
import email.policy
import ssl
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from email.message import EmailMessage
from pathlib import Path
from typing import Any

from aiosmtpd.controller import Controller
from aiosmtpd.smtp import AuthResult, LoginPassword

from tests.processes import free_port
from tests.webhook_receiver import write_certificates

USER, PASSWORD = "berth-mailer", "smtp-password-for-the-test"


@dataclass
class MailReceiver:
    host: str
    port: int
    ca_file: Path
    refused: set[str] = field(default_factory=set)  # answered 550 at RCPT TO
    messages: list[EmailMessage] = field(default_factory=list)
    logins: list[str] = field(default_factory=list)

    def env(self, password_file: Path) -> dict[str, str]:
        """The console's settings for this server; the password through a file."""
        password_file.write_text(PASSWORD)
        return {
            "BERTH_SMTP_HOST": self.host,
            "BERTH_SMTP_PORT": str(self.port),
            "BERTH_SMTP_SECURITY": "starttls",
            "BERTH_SMTP_USER": USER,
            "BERTH_SMTP_PASSWORD_FILE": str(password_file),
            "BERTH_SMTP_FROM": "berth@example.com",
            "BERTH_SMTP_CA_FILE": str(self.ca_file),
        }


class Handler:
    def __init__(self, receiver: MailReceiver) -> None:
        self.receiver = receiver

    async def handle_RCPT(
        self, server: Any, session: Any, envelope: Any, address: str, options: Any
    ) -> str:  # noqa: N802, E501 - aiosmtpd's names
        if address in self.receiver.refused:
            return "550 5.1.1 No such mailbox here"
        envelope.rcpt_tos.append(address)
        return "250 OK"

    async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:  # noqa: N802
        message = email.message_from_bytes(envelope.content, policy=email.policy.default)
        assert isinstance(message, EmailMessage)
        self.receiver.messages.append(message)
        return "250 Message accepted for delivery"


@contextmanager
def smtp_receiver(folder: Path) -> Iterator[MailReceiver]:
    ca_file, cert_file, key_file = write_certificates(folder)
    receiver = MailReceiver(host="127.0.0.1", port=free_port(), ca_file=ca_file)
    tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    tls.load_cert_chain(cert_file, key_file)

    def authenticate(
        server: Any, session: Any, envelope: Any, mechanism: str, data: Any
    ) -> AuthResult:
        login = data if isinstance(data, LoginPassword) else None
        good = login is not None and (login.login, login.password) == (
            USER.encode(),
            PASSWORD.encode(),
        )
        if good:
            receiver.logins.append(USER)
        return AuthResult(success=good)

    controller = Controller(
        Handler(receiver),
        hostname=receiver.host,
        port=receiver.port,
        tls_context=tls,
        require_starttls=True,
        authenticator=authenticate,
        auth_require_tls=True,
    )
    controller.start()
    try:
        yield receiver
    finally:
        controller.stop()
