"""The Content-Security-Policy every page is served with: scripts, styles, sockets and forms from
this origin only, never inline (no page has an inline handler or style: static/js/live.js binds
what buttons do). The Django admin's own pages use inline style attributes, and the API's docs
page configures Swagger UI with an inline script: those two get what they need, nothing more."""

from __future__ import annotations

from collections.abc import Callable

from django.http import HttpRequest, HttpResponse

STRICT = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; font-src 'self'; object-src 'none'; base-uri 'self'; "
    "form-action 'self'; frame-ancestors 'none'"
)
ADMIN = STRICT.replace("style-src 'self'", "style-src 'self' 'unsafe-inline'")
API_DOCS = ADMIN.replace("script-src 'self'", "script-src 'self' 'unsafe-inline'")


def policy_for(path: str) -> str:
    if path.startswith("/api/v1/docs"):
        return API_DOCS
    if path.startswith("/admin/"):
        return ADMIN
    return STRICT


class ContentSecurityPolicyMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        response = self.get_response(request)
        response.headers.setdefault("Content-Security-Policy", policy_for(request.path))
        return response
