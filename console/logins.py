"""Failed logins are throttled (django-axes does the counting, here is what Berth says).

After BERTH_LOGIN_FAILURE_LIMIT failures for one user from one address, that pair is refused for
BERTH_LOGIN_LOCKOUT_MINUTES, with a page that says when to try again. Failures for one user from
many addresses never lock that user out (no one can lock `admin` out by guessing from afar);
each failure beyond the limit only makes the next answer slower, up to MAX_DELAY_S.
On /login/ and /admin/login/ alike: both authenticate through axes' backend.
"""

from __future__ import annotations

import time
from typing import Any

from axes.models import AccessAttempt
from django.conf import settings
from django.contrib.auth.signals import user_login_failed
from django.db.models import Sum
from django.dispatch import receiver
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.utils import timezone

from placement.words import when

MAX_DELAY_S = 3.0
DELAY_PER_FAILURE_S = 0.25


def client_address(request: HttpRequest) -> str:
    """The address a login came from: the connection's (behind a proxy, its address)."""
    return str(request.META.get("REMOTE_ADDR", ""))


def lockout_minutes() -> int:
    return int(settings.AXES_COOLOFF_TIME.total_seconds() // 60)


def locked_out(request: HttpRequest, credentials: Any = None, *args: Any) -> HttpResponse:
    """The login page again, saying why and until when (429 Too Many Requests)."""
    username = (credentials or {}).get("username") or request.POST.get("username", "")
    until = timezone.now() + settings.AXES_COOLOFF_TIME
    words = (
        f"Too many failed logins for “{username}” from your address: logins are refused for "
        f"{lockout_minutes()} minutes. Try again after {when(until)}, or ask a platform "
        "admin to reset your password."
    )
    context = {"locked_out": words, "form": None, "next": request.GET.get("next", "")}
    return render(request, "registration/login.html", context, status=429)


def recent_failures(username: str) -> int:
    """Failures for this user from every address within the lockout window."""
    since = timezone.now() - settings.AXES_COOLOFF_TIME
    found = AccessAttempt.objects.filter(username=username, attempt_time__gte=since).aggregate(
        total=Sum("failures_since_start")
    )
    return int(found["total"] or 0)


def delay_for(failures: int) -> float:
    """How much slower the answer to a failed login gets: nothing up to the limit."""
    beyond = max(0, failures - settings.AXES_FAILURE_LIMIT)
    return min(MAX_DELAY_S, DELAY_PER_FAILURE_S * beyond)


@receiver(user_login_failed)
def slow_down(sender: Any, credentials: dict[str, Any], **kwargs: Any) -> None:
    username = str(credentials.get("username") or "")
    if username:
        time.sleep(delay_for(recent_failures(username)))
