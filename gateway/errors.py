"""The gateway's own errors, as OpenAI-style bodies: ``{"error": {message, type, param, code}}``.

Each message says what the client can do about it. The engine's own error responses are not
made here: they pass through unchanged.
"""

from __future__ import annotations

import json
from collections.abc import Iterable

from console import keys

ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    405: "invalid_request_error",
    409: "invalid_request_error",
    413: "invalid_request_error",
    429: "rate_limit_error",
    502: "bad_gateway",
    503: "service_unavailable",
    504: "timeout",
}


class GatewayError(Exception):
    """A request the gateway answers itself, with an HTTP status and a message (and, when the
    client should come back, after how many seconds: Retry-After)."""

    def __init__(self, status: int, message: str, retry_after_s: int | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.retry_after_s = retry_after_s

    def body(self) -> bytes:
        return error_body(self.status, self.message)


def error_body(status: int, message: str) -> bytes:
    error = {
        "message": message,
        "type": ERROR_TYPES.get(status, "api_error"),
        "param": None,
        "code": status,
    }
    return json.dumps({"error": error}).encode()


def listed(names: Iterable[str]) -> str:
    shown = list(names)
    return ", ".join(shown) if shown else "none"


def missing_key() -> GatewayError:
    return GatewayError(401, "Authentication required: send Authorization: Bearer <API key>.")


def bad_key() -> GatewayError:
    return GatewayError(401, keys.NOT_VALID)


def read_key_cannot_chat() -> GatewayError:
    return GatewayError(
        403,
        "This API key's scope is read: it may list models (GET /v1/models) and read figures, "
        "not chat. Use a chat or operate key.",
    )


def chat_name_in_two_teams(name: str, deployments: list[tuple[str, str]]) -> GatewayError:
    teams = "; ".join(f"{team}: {deployment}" for team, deployment in sorted(deployments))
    return GatewayError(
        409,
        f"The chat name {name} is offered by more than one of your teams ({teams}). Ask for a "
        "deployment by its name instead, or have one team choose another chat name.",
    )


def body_too_large(limit: int) -> GatewayError:
    return GatewayError(
        413,
        f"The request body is over {limit >> 20} MiB, the gateway's limit "
        "(BERTH_GATEWAY_MAX_BODY_MIB): send a smaller one.",
    )


def not_json(why: str) -> GatewayError:
    return GatewayError(400, f"The request body is not JSON: {why}.")


def no_model() -> GatewayError:
    return GatewayError(
        400, 'The request body must be a JSON object with a "model": a chat name or a deployment.'
    )


def unknown_model(name: str, on_offer: Iterable[str]) -> GatewayError:
    return GatewayError(
        404, f"There is no model named {name!r} on offer to you. On offer: {listed(on_offer)}."
    )


def no_copy_ready(name: str, states: Iterable[tuple[str, str]]) -> GatewayError:
    why = "; ".join(f"{deployment} is {state.lower()}" for deployment, state in states)
    return GatewayError(503, f"No copy of {name} is ready to serve: {why}. Try again later.")


def still_waking(name: str, wait_s: int) -> GatewayError:
    return GatewayError(
        503,
        f"{name} is starting after being idle; try again in about {wait_s} s.",
        retry_after_s=wait_s,
    )


def too_many_waiting(name: str, held: int, wait_s: int) -> GatewayError:
    return GatewayError(
        503,
        f"{name} is starting after being idle and {held} requests already wait for it (the "
        f"gateway's limit, BERTH_GATEWAY_WAKE_HOLD); try again in about {wait_s} s.",
        retry_after_s=wait_s,
    )


def unreachable(name: str) -> GatewayError:
    return GatewayError(503, f"No copy of {name} could be reached just now. Try again shortly.")


def reply_wait_passed(seconds: int) -> GatewayError:
    # The words of the product's troubleshooting page: the model was busy for too long.
    return GatewayError(
        504,
        f"The model did not start its reply within {seconds} s; it may be busy. You can try again.",
    )


def broke_off(why: str) -> bytes:
    """An SSE error event for a stream that broke after it began (as vLLM reports one)."""
    error = {"message": f"The model's reply broke off: {why}", "type": "api_error", "code": 502}
    return b"data: " + json.dumps({"error": error}).encode() + b"\n\ndata: [DONE]\n\n"
