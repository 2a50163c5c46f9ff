"""A stream whose copy dies goes on at another copy: the client sees one stream.

When a copy's connection breaks after the first token (or its stream ends without [DONE]), the
gateway asks another ready copy of the deployment to continue the answer from the prompt plus
the text already sent: a chat as its messages with that text as the assistant's message to
continue (vLLM's `continue_final_message`, with no generation prompt), a completion as its
prompt with that text appended. `max_tokens` is lowered by the tokens already sent (one per
event, as engines stream them). The new copy's events before its first token are dropped and
the rest are relayed under the stream's first id, so nothing is lost or repeated; its closing
usage counts the whole answer. At most BERTH_STREAM_RESUMES continuations a request (a stream
with several choices, `n` > 1, is not continued); each is said in the deployment's Events. A
reply the client does not stream has sent it nothing yet: it is asked again, whole, of another
copy.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from django.conf import settings

from deployments.choices import EventKind
from deployments.models import Copy, Deployment, Event
from gateway import sse


@dataclass(frozen=True)
class SoFar:
    """What the client has been sent of the answer."""

    stream_id: str | None
    text: str
    tokens: int


def may_continue(chat: bool, body: dict[str, Any], resumes: int) -> bool:
    """Whether a chat's (else a completion's) stream may go on at another copy once more."""
    if resumes >= int(settings.GATEWAY_STREAM_RESUMES):
        return False
    if body.get("n") not in (None, 1):
        return False
    return chat or isinstance(body.get("prompt"), str)


def may_retry() -> bool:
    """A reply not streamed to its client breaks off unseen: it is asked again, whole, of
    another copy (once), unless continuing is turned off."""
    return int(settings.GATEWAY_STREAM_RESUMES) > 0


def sent_so_far(sent: bytes, chat: bool) -> SoFar:
    """The answer's text and token events in the bytes the client was sent."""
    stream_id = None
    text: list[str] = []
    tokens = 0
    for payload in sse.split_events(sent)[0]:
        chunk = sse.parse(payload)
        if not isinstance(chunk, dict):
            continue
        stream_id = stream_id or chunk.get("id")
        for choice in chunk.get("choices") or ():
            piece = (choice.get("delta") or {}).get("content") if chat else choice.get("text")
            if piece:
                text.append(piece)
                tokens += 1
    return SoFar(stream_id, "".join(text), tokens)


def continuation_body(chat: bool, body: dict[str, Any], so_far: SoFar) -> dict[str, Any]:
    """The client's body, asking for the rest of the answer (before upstream_body's own
    changes: the engine's model name, a stream with usage)."""
    asked = dict(body)
    for limit in ("max_tokens", "max_completion_tokens"):
        if isinstance(asked.get(limit), int):
            asked[limit] = max(1, asked[limit] - so_far.tokens)
    if not chat:
        asked["prompt"] = body["prompt"] + so_far.text
        return asked
    messages = list(body.get("messages") or [])
    asked["messages"] = [*messages, {"role": "assistant", "content": so_far.text}]
    asked["continue_final_message"] = True
    asked["add_generation_prompt"] = False
    return asked


def continued_events(held: bytes, so_far: SoFar) -> bytes:
    """The new copy's first bytes from its first token on, under the stream's first id."""
    events = held.split(sse.SEPARATOR)
    for index, event in enumerate(events):
        payload = sse.event_data(event)
        if payload is not None and sse.starts_reply(payload):
            return same_id(sse.SEPARATOR.join(events[index:]), held, so_far)
    return b""


def same_id(piece: bytes, held: bytes, so_far: SoFar) -> bytes:
    if so_far.stream_id is None:
        return piece
    for payload in sse.split_events(held)[0]:
        chunk = sse.parse(payload)
        if isinstance(chunk, dict) and isinstance(chunk.get("id"), str):
            return piece.replace(chunk["id"].encode(), so_far.stream_id.encode())
    return piece


def whole_usage(piece: bytes, carried: int) -> bytes:
    """A relayed piece whose usage event counts the tokens earlier copies generated too (and
    not them among the prompt's, where the new copy read them)."""
    if b'"usage":{' not in piece:
        return piece
    events = piece.split(sse.SEPARATOR)
    for index, event in enumerate(events):
        chunk = sse.parse(sse.event_data(event) or b"")
        if isinstance(chunk, dict) and isinstance(chunk.get("usage"), dict):
            usage = chunk["usage"]
            completion = int(usage.get("completion_tokens") or 0) + carried
            prompt = max(0, int(usage.get("prompt_tokens") or 0) - carried)
            chunk["usage"] = {**usage, "prompt_tokens": prompt, "completion_tokens": completion,
                              "total_tokens": prompt + completion}  # fmt: skip
            events[index] = sse.DATA + b" " + json.dumps(chunk, separators=(",", ":")).encode()
    return sse.SEPARATOR.join(events)


def say_continued(deployment_id: int, from_copy: int, to_copy: int, tokens: int, why: str) -> None:
    """Blocking: the deployment's Event, on the copy that broke off."""
    deployment = Deployment.objects.filter(pk=deployment_id).first()
    if deployment is None:
        return
    ordinals = dict(Copy.objects.filter(pk__in=[from_copy, to_copy]).values_list("pk", "ordinal"))
    broken, taking = ordinals.get(from_copy), ordinals.get(to_copy)
    Event.objects.create(
        deployment=deployment,
        deployment_name=deployment.name,
        copy_id=from_copy if broken is not None else None,
        kind=EventKind.SYSTEM,
        message=(
            f"A stream broke off at copy {broken} after {tokens} tokens ({why}); copy {taking} "
            "continued it."
        ),
    )
