"""Sending a delivery to its destination: claimed, sent (a signed POST to a webhook, or an
e-mail through the server's SMTP settings), and tried again when due.

A try claims the row with a compare-and-set (pending and due), counts the attempt and pushes
next_attempt_at past the try's longest time, so that a second task for the same row, or beat's
pass, finds nothing to do; a worker that dies mid-try leaves the row due again once that time
has passed. No Celery countdowns: beat's deliver_due_notifications picks up what is due.

Signature (README, "Notifications"): X-Berth-Timestamp is the Unix time of the try, and
X-Berth-Signature is "sha256=" + hex HMAC-SHA256, keyed with the webhook's secret, of
"<timestamp>.<raw body>". A receiver recomputes it and refuses old timestamps (replays).
An e-mail carries the same facts in words (mail_words.py); its delivery log's status code is
the SMTP server's reply to the message (250 when it took it).
"""

from __future__ import annotations

import hashlib
import hmac
import http
import json
import logging
import smtplib
import ssl
import time
from datetime import timedelta

import httpcore
from django.conf import settings
from django.db import transaction
from django.utils import timezone

from console import outbound
from deployments import mail_words
from deployments.choices import DeliveryState
from deployments.models import Delivery, Webhook

log = logging.getLogger(__name__)
BACKOFF_MAX_S = 3600.0
DUE_PER_PASS = 200
# The SMTP reply that a message was taken ("250 OK"), kept as its delivery's status code.
SMTP_TAKEN = 250


def signature(secret: str, timestamp: str, body: bytes) -> str:
    signed = timestamp.encode() + b"." + body
    return "sha256=" + hmac.new(secret.encode(), signed, hashlib.sha256).hexdigest()


def backoff_s(attempts: int) -> float:
    """The wait after the n-th failed try: base × 2^(n-1), at most an hour."""
    return float(min(settings.WEBHOOK_RETRY_BASE_S * 2 ** (attempts - 1), BACKOFF_MAX_S))


def claim(delivery_id: int) -> Delivery | None:
    """The delivery, claimed for one try, if it is pending and due; else None."""
    now = timezone.now()
    longest_try = timedelta(seconds=settings.WEBHOOK_TIMEOUT_S * 4 + 30)
    with transaction.atomic():
        delivery = (
            # of=self: the destinations are outer joins, which PostgreSQL cannot lock.
            Delivery.objects.select_for_update(skip_locked=True, of=("self",))
            .select_related("webhook", "recipient", "webhook__team", "recipient__team")
            .filter(pk=delivery_id, state=DeliveryState.PENDING, next_attempt_at__lte=now)
            .first()
        )
        if delivery is None:
            return None
        delivery.attempts += 1
        delivery.next_attempt_at = now + longest_try
        delivery.save(update_fields=["attempts", "next_attempt_at"])
    return delivery


def deliver(delivery_id: int) -> None:
    delivery = claim(delivery_id)
    if delivery is None:
        return
    if not delivery.destination.enabled:
        finish(delivery, DeliveryState.FAILED, None, "It was disabled before it was sent.")
        return
    status, error = try_once(delivery)
    if not error:
        finish(delivery, DeliveryState.DELIVERED, status, "")
    elif delivery.attempts >= settings.WEBHOOK_ATTEMPTS:
        finish(delivery, DeliveryState.FAILED, status, f"{error} Gave up after {tries(delivery)}.")
    else:
        retry_later(delivery, status, error)


def try_once(delivery: Delivery) -> tuple[int | None, str]:
    """Send the delivery once: the status code (None without an answer) and words for a
    failure (empty when it was taken)."""
    if isinstance(delivery.destination, Webhook):
        return post_once(delivery, delivery.destination)
    return mail_once(delivery)


def post_once(delivery: Delivery, webhook: Webhook) -> tuple[int | None, str]:
    body = json.dumps(delivery.payload, separators=(",", ":")).encode()
    timestamp = str(int(time.time()))
    headers = {
        "X-Berth-Event": delivery.event,
        "X-Berth-Delivery": str(delivery.pk),
        "X-Berth-Timestamp": timestamp,
        "X-Berth-Signature": signature(webhook.secret(), timestamp, body),
    }
    try:
        target = outbound.check(webhook.url, allow_private=webhook.allow_private)
        answer = outbound.post(target, body, headers, settings.WEBHOOK_TIMEOUT_S)
    except outbound.OutboundRefused as refused:
        return None, str(refused)
    except httpcore.TimeoutException:
        return None, f"No answer within {settings.WEBHOOK_TIMEOUT_S:g} s."
    except (httpcore.NetworkError, httpcore.ProtocolError, OSError) as error:
        return None, f"Could not reach {webhook.url}: {error or type(error).__name__}."
    return answer.status, words_for_status(answer.status)


def mail_once(delivery: Delivery) -> tuple[int | None, str]:
    if not settings.SMTP_HOST:
        return None, "This server no longer has SMTP settings (BERTH_SMTP_HOST)."
    assert delivery.recipient is not None
    message = mail_words.message_of(delivery.payload, delivery.recipient.address)
    where = f"{settings.SMTP_HOST}:{settings.SMTP_PORT}"
    try:
        with smtp_connection() as smtp:
            smtp.send_message(message)
    except smtplib.SMTPRecipientsRefused as refused:
        [(code, reply)] = refused.recipients.values()
        return code, f"The mail server {where} refused the address: {code} {reply.decode()}."
    except smtplib.SMTPAuthenticationError as refused:
        return refused.smtp_code, f"The mail server {where} refused the login (BERTH_SMTP_USER)."
    except smtplib.SMTPResponseException as refused:
        words = refused.smtp_error.decode(errors="replace")
        return refused.smtp_code, f"The mail server {where} answered {refused.smtp_code} {words}."
    except (smtplib.SMTPException, OSError) as error:
        return None, f"Could not reach the mail server {where}: {error or type(error).__name__}."
    return SMTP_TAKEN, ""


def smtp_connection() -> smtplib.SMTP:
    """A connected, logged-in SMTP session as the settings ask (STARTTLS, TLS or plain)."""
    timeout = settings.SMTP_TIMEOUT_S
    context = ssl.create_default_context(cafile=settings.SMTP_CA_FILE or None)
    smtp: smtplib.SMTP
    if settings.SMTP_SECURITY == "tls":
        smtp = smtplib.SMTP_SSL(
            settings.SMTP_HOST, settings.SMTP_PORT, timeout=timeout, context=context
        )
    else:
        smtp = smtplib.SMTP(settings.SMTP_HOST, settings.SMTP_PORT, timeout=timeout)
    try:
        if settings.SMTP_SECURITY == "starttls":
            smtp.starttls(context=context)
        if settings.SMTP_USER:
            smtp.login(settings.SMTP_USER, settings.SMTP_PASSWORD)
    except BaseException:
        smtp.close()
        raise
    return smtp


def words_for_status(status: int) -> str:
    if 200 <= status < 300:
        return ""
    try:
        phrase = http.HTTPStatus(status).phrase
    except ValueError:
        phrase = "unknown status"
    words = f"The server answered {status} {phrase}."
    if 300 <= status < 400:
        words += " Redirects are not followed: give the address it redirects to."
    return words


def tries(delivery: Delivery) -> str:
    return f"{delivery.attempts} tr{'y' if delivery.attempts == 1 else 'ies'}"


def finish(delivery: Delivery, state: str, status: int | None, error: str) -> None:
    Delivery.objects.filter(pk=delivery.pk).update(
        state=state,
        last_status_code=status,
        last_error=error,
        next_attempt_at=None,
        delivered_at=timezone.now() if state == DeliveryState.DELIVERED else None,
    )


def retry_later(delivery: Delivery, status: int | None, error: str) -> None:
    wait = backoff_s(delivery.attempts)
    Delivery.objects.filter(pk=delivery.pk).update(
        last_status_code=status,
        last_error=f"{error} Trying again in {wait:g} s.",
        next_attempt_at=timezone.now() + timedelta(seconds=wait),
    )


def deliver_due() -> int:
    """Send again what is due (beat, every reconcile interval): each in a task of its own, so
    that one slow receiver holds up no other."""
    from deployments import tasks  # tasks import this module

    due = Delivery.objects.filter(
        state=DeliveryState.PENDING, next_attempt_at__lte=timezone.now()
    ).order_by("next_attempt_at")
    ids = list(due.values_list("pk", flat=True)[:DUE_PER_PASS])
    for delivery_id in ids:
        tasks.deliver_notification.delay(delivery_id)
    return len(ids)
