"""Requests the server itself sends out (webhooks): where they may go, and how they are sent.

One rule for every outbound address: https only, and every address the host resolves to must be
a public one; private, loopback, link-local (the cloud metadata service among them), unspecified,
multicast and reserved addresses are refused unless a platform admin allowed them for that
target. The check runs when a target is saved and again right before each request, and the
request connects to the very address that was checked (pinned), so that a name re-pointed between
the check and the connection (DNS rebinding) cannot reach inside. TLS still verifies the
certificate against the host's name (httpcore sends the name as SNI and checks it).
"""

from __future__ import annotations

import ipaddress
import socket
import ssl
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import httpcore
from django.conf import settings

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
URL_MAX_LENGTH = 2000


class OutboundRefused(Exception):
    """An address requests may not go to; its words say which and why."""


@dataclass(frozen=True)
class Target:
    """A checked URL: its host's name, port, and the address a request will connect to."""

    url: str
    host: str
    port: int
    address: str


def kind_of_address(ip: IPAddress) -> str:
    """Words for an address no request may reach by default; empty for a public address."""
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        return kind_of_address(ip.ipv4_mapped)
    checks = (
        (ip.is_unspecified, "an unspecified address"),
        (ip.is_loopback, "a loopback address"),
        (ip.is_link_local, "a link-local address, where the cloud metadata service lives"),
        (ip.is_multicast, "a multicast address"),
        (ip.is_private, "a private address"),
        (ip.is_reserved, "a reserved address"),
        (not ip.is_global, "not a public address"),
    )
    return next((words for refused, words in checks if refused), "")


def split_https_url(url: str) -> tuple[str, int]:
    """The host and port of an https:// URL, or OutboundRefused saying what is wrong."""
    if len(url) > URL_MAX_LENGTH:
        raise OutboundRefused(f"The URL is longer than {URL_MAX_LENGTH} characters.")
    try:
        parts = urlsplit(url.strip())
        port = parts.port or 443
    except ValueError:
        raise OutboundRefused(
            f"“{url}” is not a URL: give one like https://example.com/hook."
        ) from None
    if parts.scheme != "https":
        raise OutboundRefused(
            f"“{url}” does not start with https://: webhooks are sent over HTTPS only, so that "
            "nobody on the way reads or changes them."
        )
    if not parts.hostname:
        raise OutboundRefused(f"“{url}” names no host: give one like https://example.com/hook.")
    if parts.username or parts.password:
        raise OutboundRefused("Put no user name or password in the URL: requests are signed.")
    return parts.hostname, port


def resolve(host: str, port: int) -> list[str]:
    try:
        found = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError) as error:
        raise OutboundRefused(f"The host {host} cannot be resolved ({error}).") from None
    return list(dict.fromkeys(str(info[4][0]) for info in found))


def check(url: str, *, allow_private: bool = False) -> Target:
    """The URL checked and its address to connect to; OutboundRefused with words when refused."""
    host, port = split_https_url(url)
    addresses = resolve(host, port)
    if not allow_private:
        for address in addresses:
            kind = kind_of_address(ipaddress.ip_address(address.split("%")[0]))
            if kind:
                named = host if host == address else f"{host} ({address})"
                raise OutboundRefused(
                    f"Webhooks may not reach {named}: it is {kind}. Give a public address; "
                    "only a platform admin may allow a private one."
                )
    return Target(url=url.strip(), host=host, port=port, address=addresses[0])


class PinnedBackend(httpcore.SyncBackend):
    """Connects to the checked address whatever the name resolves to now; TLS still uses the
    name (httpcore passes the origin's host as the server name)."""

    def __init__(self, address: str) -> None:
        self.address = address

    def connect_tcp(self, host: str, port: int, *args: Any, **kwargs: Any) -> Any:
        return super().connect_tcp(self.address, port, *args, **kwargs)


def tls_context() -> ssl.SSLContext:
    """The system's certificate authorities, or BERTH_WEBHOOK_CA_FILE's when set."""
    return ssl.create_default_context(cafile=settings.WEBHOOK_CA_FILE or None)


@dataclass(frozen=True)
class Answer:
    status: int
    body: str


def post(target: Target, body: bytes, headers: dict[str, str], timeout_s: float) -> Answer:
    """POST the body to the checked target, connected to its pinned address. Redirects are not
    followed (httpcore never follows them): a 3xx is an answer like any other."""
    timeouts = {"connect": timeout_s, "read": timeout_s, "write": timeout_s, "pool": timeout_s}
    with httpcore.ConnectionPool(
        ssl_context=tls_context(), network_backend=PinnedBackend(target.address), retries=0
    ) as pool:
        response = pool.request(
            "POST",
            target.url,
            headers={**headers, "Content-Type": "application/json", "User-Agent": "Berth"},
            content=body,
            extensions={"timeout": timeouts},
        )
        return Answer(status=response.status, body=response.content[:500].decode(errors="replace"))
