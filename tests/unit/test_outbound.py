"""Where the server's own requests may go: https only, every resolved address public unless a
platform admin allowed private ones; the request connects to the address that was checked."""

from __future__ import annotations

import pytest
from django.test import override_settings

from console import outbound
from tests.unit.test_settings import start_with
from tests.webhook_receiver import https_receiver

PUBLIC_HINT = "Give a public address; only a platform admin may allow a private one."


@pytest.mark.parametrize(
    "url,words",
    [
        ("https://127.0.0.1/hook", "Webhooks may not reach 127.0.0.1: it is a loopback address."),
        ("https://10.0.0.5/hook", "Webhooks may not reach 10.0.0.5: it is a private address."),
        ("https://192.168.1.20/", "Webhooks may not reach 192.168.1.20: it is a private address."),
        ("https://172.16.0.1/", "Webhooks may not reach 172.16.0.1: it is a private address."),
        (
            "https://169.254.169.254/latest/meta-data/",
            "Webhooks may not reach 169.254.169.254: it is a link-local address, where the cloud "
            "metadata service lives.",
        ),
        ("https://[::1]/hook", "Webhooks may not reach ::1: it is a loopback address."),
        ("https://[fc00::5]/hook", "Webhooks may not reach fc00::5: it is a private address."),
        ("https://[fe80::1]/", "Webhooks may not reach fe80::1: it is a link-local address"),
        ("https://[::ffff:10.0.0.5]/", "Webhooks may not reach ::ffff:10.0.0.5: it is a private"),
        ("https://0.0.0.0/", "Webhooks may not reach 0.0.0.0: it is an unspecified address."),
        ("https://224.0.0.1/", "Webhooks may not reach 224.0.0.1: it is a multicast address."),
        ("https://100.64.0.1/", "Webhooks may not reach 100.64.0.1: it is not a public address."),
        ("https://localhost:8443/hook", "Webhooks may not reach localhost (127.0.0.1): it is a"),
    ],
)
def test_addresses_inside_are_refused_with_words(url, words):
    with pytest.raises(outbound.OutboundRefused) as refused:
        outbound.check(url)
    assert str(refused.value).startswith(words)
    assert str(refused.value).endswith(PUBLIC_HINT)


@pytest.mark.parametrize(
    "url,words",
    [
        (
            "http://example.com/hook",
            "“http://example.com/hook” does not start with https://: webhooks are sent over "
            "HTTPS only, so that nobody on the way reads or changes them.",
        ),
        ("ftp://example.com/", "“ftp://example.com/” does not start with https://"),
        ("https:///path", "“https:///path” names no host: give one like https://example.com/hook."),
        ("https://example.com:99999/", "“https://example.com:99999/” is not a URL"),
        (
            "https://user:pw@example.com/",
            "Put no user name or password in the URL: requests are signed.",
        ),
        ("https://no-such-host.invalid/", "The host no-such-host.invalid cannot be resolved"),
        ("https://e.com/" + "x" * 2000, "The URL is longer than 2000 characters."),
    ],
)
def test_urls_that_are_not_https_to_a_host_are_refused_with_words(url, words):
    with pytest.raises(outbound.OutboundRefused) as refused:
        outbound.check(url)
    assert str(refused.value).startswith(words)


def test_a_platform_admin_s_allowance_lets_a_loopback_address_through():
    target = outbound.check("https://localhost:8443/hook", allow_private=True)
    assert (target.host, target.port) == ("localhost", 8443)
    assert target.address in {"127.0.0.1", "::1"}


def test_a_request_connects_to_the_checked_address_and_verifies_the_name(tmp_path):
    """rebind.invalid resolves nowhere: the POST reaches the receiver only through the pinned
    address, and TLS accepts it only because the certificate names rebind.invalid."""
    with https_receiver(tmp_path, statuses=[204]) as receiver:
        port = int(receiver.url.rsplit(":", 1)[1])
        url = f"https://rebind.invalid:{port}/pinned"
        target = outbound.Target(url=url, host="rebind.invalid", port=port, address="127.0.0.1")
        with override_settings(WEBHOOK_CA_FILE=str(receiver.ca_file)):
            answer = outbound.post(target, b"{}", {"X-Test": "1"}, timeout_s=5)
    assert answer.status == 204
    assert receiver.received[0].path == "/pinned"
    assert receiver.received[0].headers["Host"] == f"rebind.invalid:{port}"


def test_a_server_whose_certificate_is_not_trusted_is_not_posted_to(tmp_path):
    with https_receiver(tmp_path) as receiver:
        target = outbound.check(f"{receiver.url}/hook", allow_private=True)
        with pytest.raises(Exception, match="CERTIFICATE_VERIFY_FAILED"):
            outbound.post(target, b"{}", {}, timeout_s=5)
    assert receiver.received == []


@pytest.mark.parametrize(
    "variable,value,expected",
    [
        ("BERTH_WEBHOOK_ATTEMPTS", "0", "BERTH_WEBHOOK_ATTEMPTS=0 is outside 1..20."),
        ("BERTH_WEBHOOK_ATTEMPTS", "five", "BERTH_WEBHOOK_ATTEMPTS='five' is not a whole number."),
        ("BERTH_WEBHOOK_RETRY_BASE_S", "0", "BERTH_WEBHOOK_RETRY_BASE_S=0 is outside 0.1..3600."),
        ("BERTH_WEBHOOK_TIMEOUT_S", "120", "BERTH_WEBHOOK_TIMEOUT_S=120 is outside 1..60."),
        (
            "BERTH_WEBHOOK_CA_FILE",
            "/no/such/ca.pem",
            "BERTH_WEBHOOK_CA_FILE='/no/such/ca.pem' is not a readable file",
        ),
        (
            "BERTH_CONSOLE_URL",
            "berth.example.com",
            "BERTH_CONSOLE_URL='berth.example.com' is not an address: give one like "
            "https://berth.example.com.",
        ),
    ],
)
def test_bad_notification_settings_stop_start_up_with_words(variable, value, expected):
    result = start_with(**{variable: value})
    assert result.returncode != 0
    assert expected in result.stderr
