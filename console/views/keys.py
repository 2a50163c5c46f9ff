"""The user's API keys: issue one (its secret shown once), list and revoke them."""

from __future__ import annotations

from django.contrib import messages
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_POST

from console import keys
from console.forms import ApiKeyForm
from console.models import ApiKey


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
