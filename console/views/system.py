"""The console's own pages: home, health for load balancers and monitors, the system's status."""

from __future__ import annotations

from django.conf import settings
from django.contrib.auth.decorators import login_not_required
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import render
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET

from console import overview, system_status
from console.access import require_platform_admin


@require_GET
def home(request: HttpRequest) -> HttpResponse:
    """The fleet overview (console/overview.py)."""
    return render(request, "console/overview.html", overview.overview(request.user))


@login_not_required
@require_GET
@never_cache
def health(request: HttpRequest) -> JsonResponse:
    """For monitoring: ok/down for each part of the platform, 503 when any is down. Nothing
    more (no versions, hosts or figures: anyone may ask); the staff's status page has those."""
    return health_answer(system_status.health_parts())


@login_not_required
@require_GET
@never_cache
def health_web(request: HttpRequest) -> JsonResponse:
    """For a load balancer or process manager: can this web process serve pages? A stopped
    worker is no reason to take the web server out of rotation, so only its own needs count."""
    return health_answer(system_status.web_parts())


def health_answer(parts: dict[str, str]) -> JsonResponse:
    down = system_status.DOWN in parts.values()
    status = system_status.DOWN if down else system_status.OK
    return JsonResponse({"status": status, "parts": parts}, status=503 if down else 200)


@require_GET
@never_cache
def platform_status(request: HttpRequest) -> HttpResponse:
    """Staff only: each part's heartbeat, the queues, PostgreSQL, Redis and the engines."""
    require_platform_admin(request.user)
    context = {
        "beats": system_status.beats(),
        "stale_s": settings.HEARTBEAT_STALE_S,
        "queues": system_status.queue_lengths(),
        "database_version": system_status.database_version(),
        "redis_version": system_status.redis_version(),
        "engines": system_status.engines(),
    }
    return render(request, "console/status.html", context)
