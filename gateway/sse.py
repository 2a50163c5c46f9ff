"""Just enough of server-sent events to find the first token and count the rest, cheaply.

Before the first token the gateway reads each event (a role-only opening chunk is not a token:
the reply wait is about the model starting its answer). After it, bytes are relayed as they
come and only counted with ``bytes.count``: nothing is parsed or rebuilt per chunk.
"""

from __future__ import annotations

import json
from typing import Any

SEPARATOR = b"\n\n"
DATA = b"data:"
DONE = b"[DONE]"
TOKEN_FIELDS = ("content", "reasoning_content", "reasoning", "tool_calls", "function_call")


def split_events(buffer: bytes) -> tuple[list[bytes], bytes]:
    """Complete events' data payloads, and what is left of an event still arriving."""
    *complete, rest = buffer.split(SEPARATOR)
    return [payload for event in complete if (payload := event_data(event)) is not None], rest


def event_data(event: bytes) -> bytes | None:
    lines = [line[len(DATA) :].strip() for line in event.splitlines() if line.startswith(DATA)]
    return b"\n".join(lines) if lines else None


def parse(payload: bytes) -> Any:
    try:
        return json.loads(payload)
    except ValueError:
        return None


def starts_reply(payload: bytes) -> bool:
    """Whether an event shows that the model has begun its answer (or ended without one)."""
    if payload == DONE:
        return True
    chunk = parse(payload)
    if not isinstance(chunk, dict) or "error" in chunk:
        return True  # not ours to judge: relay it as it is
    choices = chunk.get("choices")
    if not choices:
        return "usage" in chunk
    return any(choice_has_token(choice) for choice in choices if isinstance(choice, dict))


def choice_has_token(choice: dict[str, Any]) -> bool:
    if choice.get("text") or choice.get("finish_reason") is not None:
        return True
    delta = choice.get("delta")
    return isinstance(delta, dict) and any(delta.get(name) for name in TOKEN_FIELDS)


def count_chunks(piece: bytes | bytearray) -> int:
    """Events with a JSON body in a relayed piece: one per generated token, as engines stream."""
    return piece.count(b"data: {")


def usage_in(piece: bytes) -> int | None:
    """completion_tokens of a usage chunk in this piece, if there is one (it ends a stream)."""
    tokens = (usage_of(piece) or {}).get("completion_tokens")
    return tokens if isinstance(tokens, int) else None


def without_usage(piece: bytes) -> bytes:
    """The piece less its usage-only events (choices empty), which a client that did not ask
    for usage is not sent; an event cut at the piece's end is left as it is."""
    if b'"usage":{' not in piece:
        return piece
    *complete, rest = piece.split(SEPARATOR)
    kept = [event for event in complete if not usage_only(event)]
    return SEPARATOR.join([*kept, rest])


def usage_only(event: bytes) -> bool:
    payload = event_data(event)
    chunk = parse(payload) if payload is not None else None
    return (
        isinstance(chunk, dict)
        and isinstance(chunk.get("usage"), dict)
        and not chunk.get("choices")
    )


def usage_of(piece: bytes) -> dict[str, Any] | None:
    """The usage object of a usage chunk in this piece, if there is one."""
    if b'"usage":{' not in piece:
        return None
    for payload in split_events(piece + SEPARATOR)[0]:
        chunk = parse(payload)
        if isinstance(chunk, dict) and isinstance(chunk.get("usage"), dict):
            return dict(chunk["usage"])
    return None
