"""The gateway as a thin ASGI app (its own process: gateway/asgi.py), and the console's /metrics.

It reads the key and the body, hands the call to the gateway, and relays the reply piece by
piece. From the moment the body is read it listens for the client going away, and then cancels
the request, which closes the upstream connection and so cancels the request at the copy too.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Awaitable, Callable, Coroutine, MutableMapping
from importlib import import_module
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user
from django.http import HttpRequest
from django.http.cookie import parse_cookie

from console import heartbeats
from console.access import is_platform_admin
from console.keys import bearer
from gateway import conf, errors, service
from gateway.errors import GatewayError
from gateway.keys import Caller, caller_of
from gateway.limits import TooMany
from gateway.meter import METER
from gateway.metrics import SCRAPER, access_changes, limits_text, scrape_token_matches
from gateway.metrics import text as metrics_text
from gateway.relay import JSON, RELAYED, Call, Reply, error_reply
from gateway.routing import SESSION_HEADER, index_metrics

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
MODELS = "/v1/models"
METRICS = "/metrics"
HEALTH = "/health"
PROMETHEUS = [(b"content-type", b"text/plain; version=0.0.4; charset=utf-8")]
# Bodies bigger than this are parsed in a thread, so that the event loop keeps serving.
PARSE_OFF_THE_LOOP_BYTES = 256 << 10
# A request refused before its body is all read (413, 401, 404...) has this much more of it read
# and thrown away before the answer goes out: a server that closes a connection on unread bytes
# (a client's "Connection: close") makes the kernel reset it, and a client still sending never
# reads the answer. Past this much the connection is dropped, so no one ties the gateway up.
DISCARD_AT_MOST_BYTES = 64 << 20


class ClientGone(Exception):
    """The client disconnected before its request was read."""


class Body:
    """The request's body, read once as it arrives; what a refusal leaves unread is discarded."""

    def __init__(self, receive: Receive) -> None:
        self.receive = receive
        self.ended = False  # the last piece was read, or the client left

    async def piece(self) -> bytes:
        message = await self.receive()
        if message["type"] == "http.disconnect":
            self.ended = True
            raise ClientGone()
        self.ended = not message.get("more_body", False)
        return bytes(message.get("body", b""))

    async def read(self, limit: int) -> bytes:
        """The whole body; over `limit` bytes, a 413 in words."""
        chunks: list[bytes] = []
        size = 0
        while not self.ended:
            chunk = await self.piece()
            size += len(chunk)
            if size > limit:
                raise errors.body_too_large(limit)
            chunks.append(chunk)
        return b"".join(chunks)

    async def discard(self, at_most: int = DISCARD_AT_MOST_BYTES) -> None:
        """Read what is left and throw it away (up to `at_most` bytes), so that the answer to a
        refused request reaches a client that sends its whole body before it reads."""
        discarded = 0
        with contextlib.suppress(ClientGone):
            while not self.ended and discarded <= at_most:
                discarded += len(await self.piece())


async def application(scope: Scope, receive: Receive, send: Send) -> None:
    """ASGI entry point of the gateway's process (gateway/asgi.py)."""
    if scope["type"] == "lifespan":
        await lifespan(receive, send)
        return
    if scope["path"] == HEALTH:
        await send_reply(Reply(200, JSON, b'{"status": "ok"}'), send)
        return
    if scope["path"] == METRICS:  # also here, with what this gateway process itself counts
        await metrics(scope, receive, send, gateway_process=True)
        return
    body = Body(receive)
    try:
        prepared = await prepare(scope, body)
    except ClientGone:
        return
    if isinstance(prepared, Reply):
        await body.discard()
        await send_reply(prepared, send)
        return
    # From here on the client may leave at any time, also while the copy is still silent.
    await until_disconnect(receive, serve(prepared, send))


async def prepare(scope: Scope, body: Body) -> Call | Reply:
    """The call to relay, or the reply that ends the request here (a GatewayError's body)."""
    path, method = scope["path"], scope["method"]
    try:
        route_known(path, method)
        caller = await authenticate(scope)
        if path == MODELS:
            return await service.current().models(caller)
        if not caller.may_chat:
            raise errors.read_key_cannot_chat()
        parsed_body = await parsed(await body.read(conf.max_body_bytes()))
        return Call(path, parsed_body, caller, header(scope, SESSION_HEADER.encode()))
    except GatewayError as error:
        return error_reply(error)


async def serve(call: Call, send: Send) -> None:
    limit_key = call.caller.limit_key
    try:
        service.LIMITS.admit(limit_key)
    except TooMany as refused:
        await send_reply(error_reply(refused), send)
        return
    try:
        reply = await service.current().handle(call)
        try:
            await send_reply(reply, send)
        finally:
            if reply.close is not None:
                await reply.close()  # also when cancelled: it closes the request at the copy
    finally:
        service.LIMITS.done(limit_key)


def route_known(path: str, method: str) -> None:
    expected = "GET" if path == MODELS else "POST" if path in RELAYED else None
    if expected is None:
        raise GatewayError(404, f"There is no {path} here. The gateway answers {listing()}.")
    if method != expected:
        raise GatewayError(405, f"{path} takes {expected} requests, not {method}.")


def listing() -> str:
    return ", ".join((f"GET {MODELS}", *(f"POST {p}" for p in RELAYED)))


async def authenticate(scope: Scope) -> Caller:
    secret = bearer(header(scope, b"authorization"))
    if secret is None:
        raise errors.missing_key()
    try:
        caller = await service.KEYS.caller(secret)
    except Exception as error:  # the database is away: the key cannot be checked
        why = "API keys cannot be checked just now. Try again shortly."
        raise GatewayError(503, why) from error
    if caller is None:
        raise errors.bad_key()
    return caller


def header(scope: Scope, name: bytes) -> str:
    for key, value in scope["headers"]:
        if key.lower() == name:
            return bytes(value).decode("latin-1")
    return ""


async def parsed(raw: bytes) -> dict[str, Any]:
    if len(raw) > PARSE_OFF_THE_LOOP_BYTES:
        return await asyncio.to_thread(parse_body, raw)
    return parse_body(raw)


def parse_body(raw: bytes) -> dict[str, Any]:
    try:
        body = json.loads(raw)
    except ValueError as error:
        raise errors.not_json(str(error)) from None
    if not isinstance(body, dict) or not isinstance(body.get("model"), str) or not body["model"]:
        raise errors.no_model()
    return body


async def until_disconnect(receive: Receive, work: Coroutine[Any, Any, None]) -> None:
    """Run the work; a client that disconnects meanwhile cancels it."""
    working = asyncio.create_task(work)
    watching = asyncio.create_task(wait_for_disconnect(receive))
    try:
        await asyncio.wait((working, watching), return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in (working, watching):
            task.cancel()
        with contextlib.suppress(asyncio.CancelledError, OSError):
            await working


async def send_reply(reply: Reply, send: Send) -> None:
    streaming = reply.more is not None
    await send({"type": "http.response.start", "status": reply.status, "headers": reply.headers})
    await send({"type": "http.response.body", "body": reply.body, "more_body": streaming})
    if reply.more is None:
        return
    while (piece := await reply.more()) is not None:
        await send({"type": "http.response.body", "body": piece, "more_body": True})
    await send({"type": "http.response.body", "body": b"", "more_body": False})


async def wait_for_disconnect(receive: Receive) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass


async def lifespan(receive: Receive, send: Send) -> None:
    """When the gateway runs as its own server: beat its heartbeat while it runs
    (console/heartbeats.py), and flush the figures and the usage records on the way out."""
    stop = asyncio.Event()
    beating: asyncio.Task[None] | None = None
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            beating = asyncio.create_task(heartbeats.keep_beating("gateway", stop))
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            stop.set()
            if beating is not None:
                await beating
            with contextlib.suppress(Exception):
                await service.run_blocking(service.FIGURES.flush)
            with contextlib.suppress(Exception):
                await service.run_blocking(service.USAGE.flush)
            await send({"type": "lifespan.shutdown.complete"})
            return


async def metrics(
    scope: Scope, receive: Receive, send: Send, gateway_process: bool = False
) -> None:
    """Prometheus' /metrics: with an API key (its teams' deployments), or the whole fleet's
    figures with the scrape token or as a platform admin (fleet_metrics, task_figures); the
    console serves it, and the gateway's process too, adding its own key cache's figure and its
    own per-request metrics (gateway/meter.py: this process's, since it started)."""
    try:
        caller = await metrics_reader(scope)
    except GatewayError as error:
        reply = error_reply(error)
    else:
        text = await service.run_blocking(lambda: metrics_text(caller))
        if gateway_process:
            text += access_changes(service.KEYS.access_changes_seen)
            text += limits_text(service.LIMITS.refused)
            text += METER.text(caller)
            text += index_metrics(*service.ROUTING_INDEXES)
            text += service.QUEUES.text(caller)
        reply = Reply(200, PROMETHEUS, text.encode())
    await send_reply(reply, send)


async def metrics_reader(scope: Scope) -> Caller:
    authorization = header(scope, b"authorization")
    if authorization and scrape_token_matches(bearer(authorization)):
        return SCRAPER
    if authorization:
        return await authenticate(scope)
    session_key = parse_cookie(header(scope, b"cookie")).get(settings.SESSION_COOKIE_NAME)
    if not session_key:
        raise errors.missing_key()
    return await service.run_blocking(lambda: staff_caller(session_key))


def staff_caller(session_key: str) -> Caller:
    """Blocking: the staff user a session cookie names, checked as Django checks it."""
    request = HttpRequest()
    request.session = import_module(settings.SESSION_ENGINE).SessionStore(session_key)
    user = get_user(request)
    if not user.is_authenticated:
        raise errors.missing_key()
    if not is_platform_admin(user):
        raise GatewayError(403, "Only platform admins may read /metrics without an API key.")
    return caller_of(user)


def in_front_of(django_app: Callable[..., Awaitable[None]]) -> Callable[..., Awaitable[None]]:
    """The console's /metrics here, everything else to Django (for console/asgi.py)."""

    async def route(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["path"] == METRICS:
            await metrics(scope, receive, send)
        else:
            await django_app(scope, receive, send)

    return route
