"""Sending a delivery to its webhook: claimed, signed, posted, and tried again when due.

A try claims the row with a compare-and-set (pending and due), counts the attempt and pushes
next_attempt_at past the try's longest time, so that a second task for the same row, or beat's
pass, finds nothing to do; a worker that dies mid-try leaves the row due again once that time
has passed. No Celery countdowns: beat's deliver_due_notifications picks up what is due.

Signature (README, "Notifications"): X-Berth-Timestamp is the Unix time of the try, and
X-Berth-Signature is "sha256=" + hex HMAC-SHA256, keyed with the webhook's secret, of
"<timestamp>.<raw body>". A receiver recomputes it and refuses old timestamps (replays).
"""

from __future__ import annotations

import hashlib
import hmac
import http
import json
import logging
import time
from datetime import timedelta

import httpcore
from django.conf import settings
from django.db import transaction
from django.utils import timezone

from console import outbound
from deployments.choices import DeliveryState
from deployments.models import Delivery

log = logging.getLogger(__name__)
BACKOFF_MAX_S = 3600.0
DUE_PER_PASS = 200


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
            Delivery.objects.select_for_update(skip_locked=True)
            .select_related("webhook")
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
    if not delivery.webhook.enabled:
        finish(delivery, DeliveryState.FAILED, None, "The webhook was disabled before it was sent.")
        return
    status, error = try_once(delivery)
    if status is not None and 200 <= status < 300:
        finish(delivery, DeliveryState.DELIVERED, status, "")
    elif delivery.attempts >= settings.WEBHOOK_ATTEMPTS:
        finish(delivery, DeliveryState.FAILED, status, f"{error} Gave up after {tries(delivery)}.")
    else:
        retry_later(delivery, status, error)


def try_once(delivery: Delivery) -> tuple[int | None, str]:
    """POST the delivery once: the status code (None without an answer) and words for a
    failure (empty for a 2xx)."""
    webhook = delivery.webhook
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
