"""The keys and team pages' quota forms: set a quota on a key, the team or one of its
deployments, or remove one; back to the page with the words of what was done or refused."""

from __future__ import annotations

from django.contrib import messages
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.http import require_POST

from gateway import quota_setting, quotas
from gateway.quotas import QuotaRefused

REFUSALS = (QuotaRefused, PermissionDenied, Http404)


def back(request: HttpRequest) -> HttpResponse:
    target = request.POST.get("next", "")
    if url_has_allowed_host_and_scheme(target, {request.get_host()}, request.is_secure()):
        return redirect(target)
    return redirect("api_keys")


@require_POST
def set_quota(request: HttpRequest) -> HttpResponse:
    limits = {name: request.POST.get(name, "").strip() for name in quotas.LIMIT_FIELDS}
    try:
        subject = quota_setting.subject_from_form(request.user, request.POST.get("subject", ""))
        quota = quota_setting.set_quota(
            request.user, subject, limits, shadow=request.POST.get("shadow") == "on"
        )
    except REFUSALS as refused:
        messages.error(request, f"The quota was not set: {refused}")
    else:
        words = f"{quotas.subject_words(quota)}: {quotas.limits_words(quota)}"
        messages.success(request, f"Quota set on {words}.")
    return back(request)


@require_POST
def remove_quota(request: HttpRequest, pk: int) -> HttpResponse:
    try:
        words = quota_setting.remove_quota(request.user, pk)
    except REFUSALS as refused:
        messages.error(request, f"The quota was not removed: {refused}")
    else:
        messages.success(request, f"The quota on {words} was removed.")
    return back(request)
