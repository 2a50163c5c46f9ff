"""What can go wrong, as exceptions a caller can catch by kind.

Every exception of this package is a BerthError. The server's refusals are BerthAPIError (one
subclass per HTTP status), carrying the server's own words and the field they are about. A
deployment that will not serve is DeploymentFailedError; one not ready in time is
DeploymentTimeoutError, which is also a TimeoutError.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from berth_sdk.config_files import ApplyPlan
    from berth_sdk.results import Deployment, DeploymentStatus


class BerthError(Exception):
    """The base of every error this package raises."""


class ConfigurationError(BerthError, ValueError):
    """The client lacks what it needs to connect (the console's URL or an API key)."""


class APIConnectionError(BerthError):
    """The console could not be reached (after the retries a safe request gets)."""

    def __init__(self, message: str, url: str) -> None:
        super().__init__(message)
        self.message = message
        self.url = url


class APITimeoutError(APIConnectionError, TimeoutError):
    """The console did not answer within the client's timeout."""


class BerthAPIError(BerthError):
    """The console answered with an error: its HTTP status, its message, and the field the
    message is about ("" when it is not about one field); `body`, the whole answer's JSON."""

    def __init__(
        self,
        status_code: int,
        message: str,
        field: str = "",
        method: str = "",
        url: str = "",
        body: Any = None,
    ) -> None:
        super().__init__(message)
        self.status_code = status_code
        self.message = message
        self.field = field
        self.method = method
        self.url = url
        self.body = body

    def __str__(self) -> str:
        return f"{self.message} (HTTP {self.status_code})"


class BadRequestError(BerthAPIError):
    """400: the request is well-formed but Berth refuses it (an unknown model, a taken name…)."""


class AuthenticationError(BerthAPIError):
    """401: no API key, or one that is revoked, expired or never existed."""


class PermissionDeniedError(BerthAPIError):
    """403: your role (or the key's scope) does not allow this."""


class NotFoundError(BerthAPIError):
    """404: nothing of that id or name in your teams."""


class ConflictError(BerthAPIError):
    """409: the object changed meanwhile; asking again usually works."""


class ApplyRefusedError(ConflictError):
    """409 of an apply: an item of the plan would not fit or is refused, so nothing was done;
    `plan` says which, and why."""

    def __init__(self, plan: ApplyPlan, message: str, method: str = "", url: str = "") -> None:
        super().__init__(409, message, "", method, url)
        self.plan = plan


class UnprocessableError(BerthAPIError):
    """422: a value is malformed, out of range, or impossible for the model."""


class RateLimitError(BerthAPIError):
    """429: too many requests for this key; safe requests were already retried."""


class ServerError(BerthAPIError):
    """5xx: the console failed; safe requests were already retried on 502 and 503."""


BY_STATUS: dict[int, type[BerthAPIError]] = {
    400: BadRequestError,
    401: AuthenticationError,
    403: PermissionDeniedError,
    404: NotFoundError,
    409: ConflictError,
    422: UnprocessableError,
    429: RateLimitError,
}


def api_error(
    status_code: int,
    message: str,
    field: str = "",
    method: str = "",
    url: str = "",
    body: Any = None,
) -> BerthAPIError:
    """The BerthAPIError subclass for this status."""
    kind = BY_STATUS.get(status_code, ServerError if status_code >= 500 else BerthAPIError)
    return kind(status_code, message, field, method, url, body)


class DeploymentFailedError(BerthError):
    """The deployment reached a state it will not serve from by itself (FAILED, ERROR,
    MUST_REDOWNLOAD) or was stopped while being waited for."""

    def __init__(self, deployment: Deployment) -> None:
        self.deployment = deployment
        self.deployment_id: int = deployment.id
        self.status: DeploymentStatus = deployment.state
        self.last_error_code: str | None = deployment.last_error_code
        self.last_error_message: str = deployment.last_error_message
        said = deployment.last_error_message or deployment.last_message
        code = f" {deployment.last_error_code}:" if deployment.last_error_code else ""
        super().__init__(f"deployment {deployment.name} is {deployment.state}:{code} {said}")


class DeploymentTimeoutError(BerthError, TimeoutError):
    """The deployment was not DEPLOYED within the time waited; it goes on in the background."""

    def __init__(
        self, deployment_id: int, timeout_seconds: float, status: DeploymentStatus | None
    ) -> None:
        self.deployment_id = deployment_id
        self.timeout_seconds = timeout_seconds
        self.status = status
        super().__init__(
            f"deployment {deployment_id} is still {status or 'not ready'} after "
            f"{timeout_seconds:g} s; it goes on in the background: wait again, or read its logs"
        )
