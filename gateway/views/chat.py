"""The chat page: pick a model offered in chat and talk to it.

With JavaScript (static/gateway/chat.js) replies stream from ``chat_send``, which runs the
gateway's own logic under the user's session (the browser needs no API key; CSRF applies).
Without it, the page's plain form posts one message and shows the whole reply.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

from asgiref.sync import async_to_sync
from django.http import HttpRequest, HttpResponse, JsonResponse, StreamingHttpResponse
from django.http.response import HttpResponseBase
from django.shortcuts import render
from django.views.decorators.http import require_POST

from deployments.access import visible_deployments
from deployments.choices import CopyState
from gateway import service
from gateway.keys import caller_of
from gateway.relay import CHAT, Call, Reply

MAX_MESSAGE_CHARS = 32_000
MAX_TURNS = 50


def chat_names(user: Any) -> list[str]:
    """Chat names the user's teams offer with at least one copy serving."""
    offered = (
        visible_deployments(user)
        .exclude(chat_name="")
        .filter(copies__state=CopyState.READY)
        .values_list("chat_name", flat=True)
    )
    return sorted(set(offered))


def chat(request: HttpRequest) -> HttpResponse:
    names = chat_names(request.user)
    context: dict[str, Any] = {"chat_names": names, "chosen": request.GET.get("model", "")}
    if request.method == "POST":
        context.update(ask_once(request, names))
    return render(request, "gateway/chat.html", context)


def ask_once(request: HttpRequest, names: list[str]) -> dict[str, Any]:
    """The form without JavaScript: one message, the whole reply."""
    model = request.POST.get("model", "")
    message = request.POST.get("message", "").strip()[:MAX_MESSAGE_CHARS]
    if model not in names or not message:
        return {"chosen": model, "problem": "Pick a model offered in chat and write a message."}
    body = {"model": model, "messages": [{"role": "user", "content": message}]}
    reply = async_to_sync(ask)(Call(CHAT, body, caller_of(request.user)))
    answer = json.loads(reply.body)
    context: dict[str, Any] = {"chosen": model, "asked": message}
    if reply.status != 200:
        return {**context, "problem": error_message(answer)}
    return {**context, "answer": answer["choices"][0]["message"]["content"] or ""}


async def ask(call: Call) -> Reply:
    # Runs on the server's event loop, where the gateway's pooled client lives.
    return await service.current().handle(call)


def error_message(answer: Any) -> str:
    error = answer.get("error") if isinstance(answer, dict) else None
    return str(error.get("message")) if isinstance(error, dict) else "The model did not answer."


@require_POST
def chat_send(request: HttpRequest) -> HttpResponseBase:
    """A streamed reply for chat.js: the engine's server-sent events, relayed as they come.

    The gateway is called only once Django iterates the response, on the server's event loop;
    its errors arrive as an SSE error event, as an engine reports one mid-stream."""
    try:
        call = chat_call(request, json.loads(request.body))
    except (ValueError, TypeError, KeyError) as error:
        return JsonResponse({"error": {"message": str(error), "code": 400}}, status=400)
    streamed = StreamingHttpResponse(relayed(call), content_type="text/event-stream")
    streamed["Cache-Control"] = "no-cache"
    streamed["X-Accel-Buffering"] = "no"
    return streamed


def chat_call(request: HttpRequest, body: Any) -> Call:
    if not isinstance(body, dict):
        raise ValueError("Send a JSON object with model and messages.")
    model = body["model"]
    if model not in chat_names(request.user):
        raise ValueError(f"{model!r} is not offered in chat to you.")
    messages = [turn(m) for m in body["messages"][-MAX_TURNS:]]
    if not messages:
        raise ValueError("Write a message first.")
    chat_body = {"model": model, "messages": messages, "stream": True}
    chat_body["stream_options"] = {"include_usage": True}  # tokens per second for the page
    return Call(CHAT, chat_body, caller_of(request.user))


def turn(message: Any) -> dict[str, str]:
    role, content = message["role"], message["content"]
    if role not in ("user", "assistant") or not isinstance(content, str):
        raise ValueError("Each message needs a role (user or assistant) and text.")
    return {"role": role, "content": content[:MAX_MESSAGE_CHARS]}


async def relayed(call: Call) -> AsyncIterator[bytes]:
    reply = await ask(call)
    try:
        if reply.status != 200:
            yield b"data: " + reply.body + b"\n\ndata: [DONE]\n\n"
            return
        yield reply.body
        while reply.more is not None and (piece := await reply.more()) is not None:
            yield piece
    finally:
        if reply.close is not None:
            await reply.close()
