"""Pages of the console itself: home, health, and the user's API keys."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_not_required
from django.db import connection
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET, require_POST

from console import keys
from console.forms import ApiKeyForm
from console.models import ApiKey


def home(request: HttpRequest) -> HttpResponse:
    return redirect("deployment_list")


@login_not_required
@require_GET
def health(request: HttpRequest) -> JsonResponse:
    """For load balancers and process managers: is the database reachable?"""
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
    except Exception:
        return JsonResponse({"status": "unavailable", "database": "unreachable"}, status=503)
    return JsonResponse({"status": "ok"})


@never_cache  # the page shows a new key's secret once: no cache may keep it
def api_keys(request: HttpRequest) -> HttpResponse:
    form = ApiKeyForm(request.POST or None)
    new_secret = None
    if request.method == "POST" and form.is_valid():
        data = form.cleaned_data
        _, new_secret = keys.issue(
            request.user, data["name"], data["scope"], data["expires_in_days"]
        )
        form = ApiKeyForm()
    context = {
        "form": form,
        "keys": ApiKey.objects.filter(user=request.user),
        "new_secret": new_secret,
    }
    return render(request, "console/api_keys.html", context)


@require_POST
def revoke_api_key(request: HttpRequest, pk: int) -> HttpResponse:
    key = get_object_or_404(
        ApiKey.objects.filter(revoked_at__isnull=True), pk=pk, user=request.user
    )
    keys.revoke(request.user, key)
    messages.success(request, f"API key “{key.name}” was revoked; requests using it now fail.")
    return redirect("api_keys")
