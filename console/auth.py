"""Authentication beyond the session: API keys, and 401 (not a login redirect) for API paths."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.contrib.auth.middleware import LoginRequiredMiddleware
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.utils import timezone

from console import keys
from console.api_schema import error_body
from console.models import ApiKey

REST_API_PREFIX = "/api/"
API_PREFIXES = (REST_API_PREFIX, "/v1/")  # the REST API and the gateway


def is_api_path(path: str) -> bool:
    return path.startswith(API_PREFIXES)


def is_rest_api_path(path: str) -> bool:
    return path.startswith(REST_API_PREFIX)


def api_error(request: HttpRequest, status: int, message: str) -> JsonResponse:
    """A refusal before any view: in the REST API's error body, the one its OpenAPI document
    declares for 401 and 403, or in the gateway's (OpenAI's), the one its clients read."""
    if is_rest_api_path(request.path):
        return JsonResponse(error_body(message), status=status)
    return JsonResponse({"error": {"message": message, "code": status}}, status=status)


class ApiKeyMiddleware:
    """A request with `Authorization: Bearer berth_…` acts as the key's owner.

    Such requests carry no cookies to forge, so CSRF does not apply to them.
    """

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        token = keys.bearer(request.headers.get("Authorization", ""))
        if token is not None and is_api_path(request.path):
            key = ApiKey.find(token)
            if key is None or not key.user.is_active:
                return api_error(request, 401, keys.NOT_VALID)
            refusal = keys.console_refusal(key, request.method or "GET", request.path)
            if refusal:
                return api_error(request, 403, refusal)
            ApiKey.objects.filter(pk=key.pk).update(last_used_at=timezone.now())
            request.user = key.user
            request.api_key = key  # type: ignore[attr-defined]
            request._dont_enforce_csrf_checks = True  # type: ignore[attr-defined]
        return self.get_response(request)


class BerthLoginRequiredMiddleware(LoginRequiredMiddleware):
    """Every URL needs a login; API paths answer 401 instead of redirecting to the login page."""

    def handle_no_permission(self, request: HttpRequest, view_func: Any) -> HttpResponse:
        if is_api_path(request.path):
            return api_error(
                request, 401, "Authentication required: send Authorization: Bearer <API key>."
            )
        return super().handle_no_permission(request, view_func)
