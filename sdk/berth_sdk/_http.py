"""Talking to the console's API: one request at a time, with a key, a timeout, and retries.

A safe request (GET, HEAD, OPTIONS) that fails to connect, times out, or is answered 502, 503 or
429 is sent again after a backoff (0.5 s, 1 s, 2 s… with jitter, at most 8 s), or after the
server's Retry-After when it gives one (at most 60 s), up to `max_retries` times. A request
that changes something is never sent twice: the first try may have reached the server.
"""

from __future__ import annotations

import asyncio
import email.utils
import random
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import httpx

from berth_sdk import __version__
from berth_sdk.errors import APIConnectionError, APITimeoutError, BerthError, api_error

API_PATH = "/api/v1"
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
RETRIED_STATUSES = frozenset({429, 502, 503})
DEFAULT_TIMEOUT_S = 30.0


@dataclass(frozen=True)
class Request:
    """One call of the API: its method, its path under /api/v1, and what it sends."""

    method: str
    path: str
    params: Mapping[str, str | list[str]] = field(default_factory=dict)  # a list: repeated
    body: Mapping[str, Any] | None = None

    @property
    def safe(self) -> bool:
        return self.method in SAFE_METHODS


@dataclass(frozen=True)
class RetryPolicy:
    """How often and how long a safe request is tried again."""

    max_retries: int = 3
    backoff_seconds: float = 0.5
    max_backoff_seconds: float = 8.0
    max_retry_after_seconds: float = 60.0

    def should_retry(self, request: Request, attempt: int, status: int | None) -> bool:
        """Whether try number `attempt` (0 first) may be followed by another; `status` is
        None when no answer came (a connection error or a timeout)."""
        if not request.safe or attempt >= self.max_retries:
            return False
        return status is None or status in RETRIED_STATUSES

    def delay(self, attempt: int, retry_after: str | None = None) -> float:
        told = retry_after_seconds(retry_after)
        if told is not None:
            return min(told, self.max_retry_after_seconds)
        ceiling = min(self.max_backoff_seconds, self.backoff_seconds * 2**attempt)
        return random.uniform(ceiling / 2, ceiling)  # jitter: many clients do not retry at once


def retry_after_seconds(value: str | None) -> float | None:
    """Retry-After as seconds: a number of seconds, or an HTTP date; None when absent or bad."""
    if not value:
        return None
    value = value.strip()
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return max(0.0, (when - datetime.now(UTC)).total_seconds())


def headers(api_key: str) -> dict[str, str]:
    return {
        "Authorization": f"Bearer {api_key}",
        "Accept": "application/json",
        "User-Agent": f"berth-sdk/{__version__}",
    }


def timeout_of(timeout: float | httpx.Timeout | None) -> httpx.Timeout:
    if isinstance(timeout, httpx.Timeout):
        return timeout
    return httpx.Timeout(DEFAULT_TIMEOUT_S if timeout is None else timeout)


def not_reached(error: httpx.TransportError, url: str) -> APIConnectionError:
    if isinstance(error, httpx.TimeoutException):
        return APITimeoutError(f"the console at {url} did not answer in time ({error})", url)
    return APIConnectionError(f"cannot reach the console at {url}: {error}", url)


def answer(response: httpx.Response) -> Any:
    """The JSON of a successful answer; an error answer raised as the BerthAPIError it is."""
    method, url = response.request.method, str(response.request.url)
    try:
        data = response.json() if response.content else None
    except ValueError:
        data = None
    if response.is_success:
        if data is None and response.content:
            raise BerthError(f"{method} {url} answered {response.status_code} without JSON")
        return data
    said = data.get("error") if isinstance(data, dict) else None
    if isinstance(data, dict) and "detail" in data:
        message, about = str(data["detail"]), str(data.get("field") or "")
    elif isinstance(said, dict) and "message" in said:
        # The key check answers before the API does, in the gateway's (OpenAI's) error body.
        message, about = str(said["message"]), ""
    else:
        # Not the API's error body: most often a base_url that is not the console's address.
        message = (
            f"{method} {url} answered {response.status_code} {response.reason_phrase} "
            "without Berth's error body: is the URL the console's address?"
        )
        about = ""
    raise api_error(response.status_code, message, about, method, url, data)


class Transport:
    """The synchronous client's connection to the console."""

    def __init__(
        self,
        base_url: str,
        api_key: str,
        timeout: float | httpx.Timeout | None = None,
        retry: RetryPolicy | None = None,
    ) -> None:
        self.base_url = base_url
        self.retry = retry or RetryPolicy()
        self.client = httpx.Client(
            base_url=f"{base_url}{API_PATH}", headers=headers(api_key), timeout=timeout_of(timeout)
        )

    def send(self, request: Request) -> Any:
        attempt = 0
        while True:
            try:
                response = self.client.request(
                    request.method, request.path, params=dict(request.params), json=request.body
                )
            except httpx.TransportError as error:
                if not self.retry.should_retry(request, attempt, None):
                    raise not_reached(error, self.base_url) from error
                time.sleep(self.retry.delay(attempt))
            else:
                if not self.retry.should_retry(request, attempt, response.status_code):
                    return answer(response)
                time.sleep(self.retry.delay(attempt, response.headers.get("Retry-After")))
            attempt += 1

    def close(self) -> None:
        self.client.close()


class AsyncTransport:
    """The asynchronous client's connection to the console; the same rules as Transport."""

    def __init__(
        self,
        base_url: str,
        api_key: str,
        timeout: float | httpx.Timeout | None = None,
        retry: RetryPolicy | None = None,
    ) -> None:
        self.base_url = base_url
        self.retry = retry or RetryPolicy()
        self.client = httpx.AsyncClient(
            base_url=f"{base_url}{API_PATH}", headers=headers(api_key), timeout=timeout_of(timeout)
        )

    async def send(self, request: Request) -> Any:
        attempt = 0
        while True:
            try:
                response = await self.client.request(
                    request.method, request.path, params=dict(request.params), json=request.body
                )
            except httpx.TransportError as error:
                if not self.retry.should_retry(request, attempt, None):
                    raise not_reached(error, self.base_url) from error
                await asyncio.sleep(self.retry.delay(attempt))
            else:
                if not self.retry.should_retry(request, attempt, response.status_code):
                    return answer(response)
                await asyncio.sleep(self.retry.delay(attempt, response.headers.get("Retry-After")))
            attempt += 1

    async def aclose(self) -> None:
        await self.client.aclose()
