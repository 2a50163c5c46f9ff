"""The REST API at /api/v1/ (django-ninja): deployments, fit checks, estimates, models, clusters.

Every endpoint needs a login: the console's session (CSRF applies to its POSTs) or an API key
(`Authorization: Bearer berth_…`, checked by console.auth.ApiKeyMiddleware, which also puts the
key's owner in request.user and exempts the request from CSRF). Access goes through
console.access, changes through deployments.actions only. Errors are JSON
`{"detail": "<field>: <what is wrong and what is allowed>", "field": "<field>"}`.
Memory is shown in GiB (2^30 bytes) with two decimals, in fields ending in `_gb`.

The routers live with their apps (deployments/api.py, catalog/api.py, clusters/api.py); this
module assembles them and turns every refusal into that error body.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse
from ninja import NinjaAPI
from ninja.errors import AuthenticationError, HttpError, ValidationError
from ninja.operation import Operation
from ninja.parser import Parser
from ninja.security import HttpBearer, SessionAuth

from catalog.api import router as catalog_router
from clusters.api import router as clusters_router
from console import keys
from console.api import router as me_router
from console.api_schema import InvalidForModel, error_body
from console.events_api import router as events_router
from console.keys_api import router as keys_router
from console.lists import FilterRefused
from deployments.actions import ActionRefused
from deployments.api import placement_router
from deployments.api import router as deployments_router
from deployments.applying_api import router as applying_router
from deployments.revisions_api import router as revisions_router
from deployments.transitions import IllegalTransition
from gateway.api import router as usage_router
from gateway.cost_api import router as cost_router
from gateway.quotas import QuotaRefused
from gateway.quotas_api import router as quotas_router

DESCRIPTION = """Host and watch LLMs on your GPU clusters.

Authenticate with an API key (`Authorization: Bearer berth_…`; create one under *API keys*) or
the console's session (then POSTs need the `X-CSRFToken` header). Errors are
`{"detail": "<field>: <what is wrong and what is allowed>", "field": "<field>"}`: 422 for a
request against a rule this document states (malformed, out of range) or impossible for the
model, 400 for one Berth cannot do for what is there (a name taken, a model not in the catalog,
a deployment already stopped), 403 when your role in the team only lets you read, 404 for what
is not in your teams (an unknown path or a malformed id too), 405 for a method a path does not
take. Memory is in GiB (2^30 bytes) with two decimals, in fields ending in `_gb`."""
CSRF_REFUSED = (
    "CSRF check failed: send the X-CSRFToken header with the csrftoken cookie's value, "
    "or use an API key (Authorization: Bearer …) instead of the session."
)
BODY_NOT_JSON = "body: is not valid JSON; send a JSON object with Content-Type: application/json"


# --- authentication ------------------------------------------------------------------------


class ApiKeyAuth(HttpBearer):
    """`Authorization: Bearer berth_…`. The middleware has already checked the key (a wrong one
    never gets here: it answers 401), so this only accepts the owner it found."""

    def authenticate(self, request: HttpRequest, token: str) -> Any:
        return request.user if getattr(request, "api_key", None) is not None else None


class SessionWithCsrf(SessionAuth):
    """The console's login cookie; a POST must carry the CSRF token like any form would."""

    def _get_key(self, request: HttpRequest) -> str | None:
        try:
            return super()._get_key(request)
        except HttpError:
            raise PermissionDenied(CSRF_REFUSED) from None


class StrictJsonParser(Parser):
    """JSON as the standard has it: NaN and Infinity are not numbers any field accepts."""

    def parse_body(self, request: HttpRequest) -> Any:
        return json.loads(request.body, parse_constant=refuse_constant)


def refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


# --- errors --------------------------------------------------------------------------------


def validation_field(location: Iterable[Any]) -> str:
    """`("body", "payload", "copies")` → `copies`: the path as the client wrote it."""
    parts = [str(part) for part in location]
    if parts[:1] == ["body"]:
        parts = parts[2:]  # the source and the endpoint's parameter name mean nothing to a client
    elif parts[:1] in (["path"], ["query"]):
        parts = parts[1:]
    return ".".join(parts) or "body"


def validation_message(error: dict[str, Any]) -> str:
    message = str(error.get("msg", "is not valid"))
    return message.removeprefix("Value error, ")


def readable_validation(errors: list[dict[str, Any]]) -> dict[str, str]:
    problems = [(validation_field(e.get("loc", ())), validation_message(e)) for e in errors]
    detail = "; ".join(f"{field}: {message}" for field, message in problems)
    return {"detail": detail, "field": problems[0][0] if problems else ""}


# --- the API -------------------------------------------------------------------------------


class BerthApi(NinjaAPI):
    def get_openapi_operation_id(self, operation: Operation) -> str:
        # The view's own name (host, scale, check_fit…) is what a generated client should call.
        return operation.view_func.__name__


api = BerthApi(
    title="Berth API",
    version="1",
    description=DESCRIPTION,
    urls_namespace="api-v1",
    auth=[ApiKeyAuth(), SessionWithCsrf()],
    parser=StrictJsonParser(),
)
api.add_router("", deployments_router)
api.add_router("", revisions_router)
api.add_router("", applying_router)
api.add_router("", placement_router)
api.add_router("", catalog_router)
api.add_router("", clusters_router)
api.add_router("", keys_router)
api.add_router("", me_router)
api.add_router("", events_router)
api.add_router("", quotas_router)
api.add_router("", cost_router)
api.add_router("", usage_router)


def respond(request: HttpRequest, status: int, body: dict[str, str]) -> HttpResponse:
    return api.create_response(request, body, status=status)


@api.exception_handler(keys.KeyRefused)
def key_refused(request: HttpRequest, error: keys.KeyRefused) -> HttpResponse:
    return respond(request, 400, error_body(error.message, error.field))


@api.exception_handler(FilterRefused)
def filter_refused(request: HttpRequest, error: FilterRefused) -> HttpResponse:
    return respond(request, 400, error_body(error.message, error.field))


@api.exception_handler(QuotaRefused)
def quota_refused(request: HttpRequest, error: QuotaRefused) -> HttpResponse:
    return respond(request, 422, error_body(error.message, error.field))


@api.exception_handler(ActionRefused)
def refused(request: HttpRequest, error: ActionRefused) -> HttpResponse:
    return respond(request, 400, error_body(error.message, error.field))


@api.exception_handler(InvalidForModel)
def invalid_for_model(request: HttpRequest, error: InvalidForModel) -> HttpResponse:
    return respond(request, 422, error_body(error.message, error.field))


@api.exception_handler(ValidationError)
def invalid_input(request: HttpRequest, error: ValidationError) -> HttpResponse:
    return respond(request, 422, readable_validation(error.errors))


@api.exception_handler(Http404)
def not_found(request: HttpRequest, error: Http404) -> HttpResponse:
    return respond(request, 404, error_body(str(error) or "Not found."))


@api.exception_handler(PermissionDenied)
def forbidden(request: HttpRequest, error: PermissionDenied) -> HttpResponse:
    return respond(request, 403, error_body(str(error) or "Your role does not allow this."))


@api.exception_handler(IllegalTransition)
def changed_meanwhile(request: HttpRequest, error: IllegalTransition) -> HttpResponse:
    # The action checked the state, then the worker moved it before the row lock: ask again.
    return respond(request, 409, error_body(f"{error}; it changed meanwhile, try again."))


@api.exception_handler(AuthenticationError)
def unauthenticated(request: HttpRequest, error: AuthenticationError) -> HttpResponse:
    return respond(
        request, 401, error_body("Authentication required: log in, or send Authorization: Bearer.")
    )


@api.exception_handler(HttpError)
def http_error(request: HttpRequest, error: HttpError) -> HttpResponse:
    if error.status_code == 400 and str(error).startswith("Cannot parse request body"):
        return respond(request, 400, {"detail": BODY_NOT_JSON, "field": "body"})
    return respond(request, error.status_code, error_body(str(error)))
