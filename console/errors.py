"""The error pages (console/urls.py's handlers, settings.CSRF_FAILURE_VIEW): what happened, in
words, and where to go. 403 and 404 show the message the code raised: console/access.py,
deployments/access.py and the views write those for the person who reads them. The 500 page is
a static template rendered without the request (whatever failed could fail again). API paths
answer in the API's JSON instead, as its own errors do (console/api_v1.py).
"""

from __future__ import annotations

from collections.abc import Callable

from django.http import HttpRequest, HttpResponse, JsonResponse
from django.middleware.csrf import REASON_NO_CSRF_COOKIE
from django.shortcuts import render
from django.urls import Resolver404
from django.utils.http import url_has_allowed_host_and_scheme
from django.views import defaults

from console.api_schema import error_body
from console.api_v1 import CSRF_REFUSED
from console.auth import is_api_path, is_rest_api_path

SERVER_ERROR = (
    "Berth failed on this request; the error is in the web server's log. "
    "Try again, and tell a platform admin if it keeps failing."
)
# What a refused form post means, by the reason Django's CSRF check gives: why, what to do.
CSRF_NO_COOKIE = (
    "Your browser did not send Berth's cookie with the form: cookies for this site may be blocked.",
    "Allow cookies for this site, then reload the page and try again.",
)
CSRF_OTHER_ADDRESS = (
    "The form was sent from another address than the one Berth is served at.",
    "Open Berth at its own address, reload the page and try again. If Berth is reached through a "
    "proxy at another address, a platform admin must add it to BERTH_CSRF_TRUSTED_ORIGINS.",
)
CSRF_OLD_FORM = (
    "The form's security token is no longer valid: the page was open for too long, or you logged "
    "in or out in another tab since it was opened.",
    "Reload the page and try again (what you typed in the form is not kept).",
)


def raised_words(exception: Exception | None) -> str:
    """The message the code raised, or "" where there is none to show: a URL that matches
    nothing (Django's message is a dictionary of the patterns it tried)."""
    if exception is None or isinstance(exception, Resolver404) or not exception.args:
        return ""
    message = exception.args[0]
    return message if isinstance(message, str) else ""


def page_back(request: HttpRequest) -> str:
    """The page the user came from, when it is one of Berth's own; else ""."""
    referer = request.headers.get("Referer", "")
    safe = url_has_allowed_host_and_scheme(
        referer, allowed_hosts={request.get_host()}, require_https=request.is_secure()
    )
    return referer if safe else ""


def permission_denied(request: HttpRequest, exception: Exception | None = None) -> HttpResponse:
    words = raised_words(exception) or "Your role does not allow this."
    if is_api_path(request.path):
        return JsonResponse(error_body(words), status=403)
    context = {"words": words, "back": page_back(request)}
    return render(request, "403.html", context, status=403)


def page_not_found(request: HttpRequest, exception: Exception | None = None) -> HttpResponse:
    words = raised_words(exception) or f"There is no page at {request.path}."
    if is_api_path(request.path):
        return JsonResponse(error_body(words), status=404)
    return render(request, "404.html", {"words": words, "back": page_back(request)}, status=404)


def server_error(request: HttpRequest) -> HttpResponse:
    if is_api_path(request.path):
        return JsonResponse(error_body(SERVER_ERROR), status=500)
    return defaults.server_error(request)


def csrf_cause(reason: str) -> tuple[str, str]:
    if reason == REASON_NO_CSRF_COOKIE:
        return CSRF_NO_COOKIE
    if reason.startswith(("Origin checking failed", "Referer checking failed")):
        return CSRF_OTHER_ADDRESS
    return CSRF_OLD_FORM


def csrf_failure(request: HttpRequest, reason: str = "") -> HttpResponse:
    if is_api_path(request.path):
        return JsonResponse(error_body(CSRF_REFUSED), status=403)
    why, what_to_do = csrf_cause(reason)
    context = {"why": why, "what_to_do": what_to_do, "back": page_back(request)}
    return render(request, "403_csrf.html", context, status=403)


# --- the REST API answers JSON, whatever refused the request --------------------------------


def is_json(response: HttpResponse) -> bool:
    return response.get("Content-Type", "").startswith("application/json")


def method_not_allowed(request: HttpRequest, allow: str) -> HttpResponse:
    # django-ninja lists them from a set: sorted, the same on every answer.
    allowed = ", ".join(sorted(method.strip() for method in allow.split(",") if method.strip()))
    words = f"{request.method} is not allowed at {request.path}; it answers {allowed}."
    response = JsonResponse(error_body(words), status=405)
    response["Allow"] = allowed  # RFC 9110: a 405 lists the methods the resource does answer
    return response


class JsonApiErrors:
    """Every /api/ path answers the API's JSON error body, also where no API view answered:
    django-ninja's 405 is plain text, and with DEBUG on Django answers an unknown URL (a
    malformed id included) with its HTML debug page, since handler404 applies only with DEBUG
    off. The OpenAPI document promises JSON for every answer, and clients read it so."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        response = self.get_response(request)
        if not is_rest_api_path(request.path) or is_json(response):
            return response
        if response.status_code == 404:
            return JsonResponse(error_body(f"There is no page at {request.path}."), status=404)
        if response.status_code == 405:
            return method_not_allowed(request, response.get("Allow", ""))
        return response
