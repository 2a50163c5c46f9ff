"""The zone every time is shown in, and the one way a time is written on a page.

A user's zone is the one they chose on their account page; without one, their browser's (a
script, static/js/time_zone.js, writes it to a cookie); without JavaScript, UTC. Pages say which
(the sidebar's foot), and every time they show carries its date and its zone. Downloads are in
UTC (deployments/views/logs.py), whatever the viewer's zone.
"""

from __future__ import annotations

import functools
import zoneinfo
from collections.abc import Callable
from datetime import UTC, datetime, tzinfo
from typing import Any

from django.http import HttpRequest, HttpResponse
from django.utils import timezone
from django.utils.timesince import timesince, timeuntil

from console.models import UserSettings

BROWSER_ZONE_COOKIE = "berth_time_zone"


@functools.cache
def known_zones() -> tuple[str, ...]:
    """Every IANA zone this server knows, sorted (the account page's choices)."""
    return tuple(sorted(zoneinfo.available_timezones()))


@functools.cache
def known_zone_set() -> frozenset[str]:
    return frozenset(known_zones())


def is_known_zone(name: str) -> bool:
    return name in known_zone_set()


def chosen_zone(user: Any) -> str:
    """The zone the user chose on their account page; empty when they left it to the browser."""
    if not getattr(user, "is_authenticated", False):
        return ""
    chosen = UserSettings.objects.filter(user=user).values_list("time_zone", flat=True).first()
    return chosen or ""


def zone_for(user: Any, browser_zone: str | None) -> tzinfo:
    """The user's chosen zone, else the browser's (when it names a real zone: a cookie is
    anyone's to write, so a bad one is ignored, never an error), else UTC."""
    for name in (chosen_zone(user), browser_zone or ""):
        if name and is_known_zone(name):
            return zoneinfo.ZoneInfo(name)
    return UTC


class TimeZoneMiddleware:
    """Shows each request's times in its user's zone (after AuthenticationMiddleware)."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        zone = zone_for(request.user, request.COOKIES.get(BROWSER_ZONE_COOKIE))
        with timezone.override(zone):
            return self.get_response(request)


def zone_name(zone: tzinfo) -> str:
    """The zone as the account page and the sidebar name it: "Europe/Paris", "UTC"."""
    return getattr(zone, "key", None) or "UTC"


def exact(moment: datetime, seconds: bool = False) -> str:
    """A moment in the active zone with its date and zone: "2 Dec 2026, 04:12 CET"."""
    local = timezone.localtime(moment)
    clock = f"{local:%H:%M:%S}" if seconds else f"{local:%H:%M}"
    return f"{local.day} {local:%b %Y}, {clock} {local:%Z}"


def ago(moment: datetime, now: datetime | None = None) -> str:
    """How long ago (or how far ahead) a moment is, in words: "3 minutes ago", "in 2 days"."""
    now = now or timezone.now()
    if abs((now - moment).total_seconds()) < 60:
        return "just now"
    if moment > now:
        words = f"in {timeuntil(moment, now, depth=1)}"
    else:
        words = f"{timesince(moment, now, depth=1)} ago"
    return words.replace("\xa0", " ")  # Django joins number and unit with no-break spaces
