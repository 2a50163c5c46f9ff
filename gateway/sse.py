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


class UsageHidden:
    """A stream relayed to a client that did not ask for usage, which the gateway asked of the
    engine all the same (for the usage records): its usage-only events are left out. vLLM
    stamps its system_fingerprint on the usage chunk when usage is asked for, on the terminal
    chunk (the one with a finish_reason) when it is not; so the terminal event is held until
    the usage event comes and given its fingerprint: the client reads what the engine would
    have sent it. Only whole events are passed on (an event still arriving waits for its end)."""

    def __init__(self) -> None:
        self.rest = b""  # an event still arriving
        self.terminal: bytes | None = None  # the terminal event, held for the usage's stamp

    def relay(self, piece: bytes) -> bytes:
        *complete, self.rest = (self.rest + piece).split(SEPARATOR)
        kept: list[bytes] = []
        for event in complete:
            if b'"usage":{' in event and usage_only(event):
                if self.terminal is not None:
                    kept.append(stamped(self.terminal, event))
                    self.terminal = None
                continue
            if self.terminal is not None:
                kept.append(self.terminal)
                self.terminal = None
            if b'"finish_reason":"' in event:
                self.terminal = event
            else:
                kept.append(event)
        return b"".join(event + SEPARATOR for event in kept)

    def end(self) -> bytes:
        """What is still held when the stream ends (a stream cut short, or one without usage)."""
        held = [self.terminal + SEPARATOR] if self.terminal is not None else []
        self.terminal, rest, self.rest = None, self.rest, b""
        return b"".join([*held, rest])


def stamped(terminal: bytes, usage_event: bytes) -> bytes:
    """The terminal event with the usage event's system_fingerprint, when it has one."""
    usage = parse(event_data(usage_event) or b"")
    chunk = parse(event_data(terminal) or b"")
    fingerprint = usage.get("system_fingerprint") if isinstance(usage, dict) else None
    if not fingerprint or not isinstance(chunk, dict):
        return terminal
    chunk["system_fingerprint"] = fingerprint
    return DATA + b" " + json.dumps(chunk, separators=(",", ":")).encode()


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
