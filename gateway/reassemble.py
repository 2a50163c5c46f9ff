"""A streamed reply put back together into the one response a non-streaming client asked for.

Upstream requests are always streamed (so the reply wait can apply to every request); this
turns the chunks of a chat or text completion into ``chat.completion`` / ``text_completion``,
with the usage the engine reported at the end.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from gateway import sse


@dataclass
class Choice:
    index: int
    text: list[str] = field(default_factory=list)
    reasoning: list[str] = field(default_factory=list)
    tool_calls: dict[int, dict[str, Any]] = field(default_factory=dict)
    logprobs: Any = None
    finish_reason: str | None = None
    stop_reason: Any = None


@dataclass
class Reassembly:
    """Collects chunks; ``error`` holds an error event the engine sent instead of a reply."""

    chat: bool
    head: dict[str, Any] = field(default_factory=dict)
    choices: dict[int, Choice] = field(default_factory=dict)
    usage: dict[str, Any] | None = None
    error: dict[str, Any] | None = None
    chunks: int = 0

    def feed(self, payload: bytes) -> None:
        chunk = sse.parse(payload)
        if not isinstance(chunk, dict):
            return
        if "error" in chunk:
            self.error = chunk
            return
        self.head = self.head or {k: chunk.get(k) for k in ("id", "created", "model")}
        if chunk.get("system_fingerprint"):  # which engine build answered (vLLM sends it)
            self.head["system_fingerprint"] = chunk["system_fingerprint"]
        if isinstance(chunk.get("usage"), dict):
            self.usage = chunk["usage"]
        for part in chunk.get("choices") or ():
            self.take(part)

    def take(self, part: dict[str, Any]) -> None:
        self.chunks += 1
        index = part.get("index", 0)
        choice = self.choices.setdefault(index, Choice(index))
        delta = part.get("delta") if self.chat else part
        if isinstance(delta, dict):
            add_delta(choice, delta, self.chat)
        choice.logprobs = merge_logprobs(choice.logprobs, part.get("logprobs"))
        choice.finish_reason = part.get("finish_reason") or choice.finish_reason
        choice.stop_reason = part.get("stop_reason", choice.stop_reason)

    def completion_tokens(self) -> int:
        if self.usage and isinstance(self.usage.get("completion_tokens"), int):
            return int(self.usage["completion_tokens"])
        return self.chunks

    def body(self) -> bytes:
        if self.error is not None:
            return json.dumps(self.error).encode()
        kind = "chat.completion" if self.chat else "text_completion"
        reply = {**self.head, "object": kind}
        ordered = [self.choices[i] for i in sorted(self.choices)]
        reply["choices"] = [self.finished(choice) for choice in ordered]
        reply["usage"] = self.usage
        return json.dumps(reply).encode()

    def finished(self, choice: Choice) -> dict[str, Any]:
        done: dict[str, Any] = {"index": choice.index}
        if self.chat:
            done["message"] = message(choice)
        else:
            done["text"] = "".join(choice.text)
        done.update(
            logprobs=choice.logprobs,
            finish_reason=choice.finish_reason,
            stop_reason=choice.stop_reason,
        )
        return done

    def error_status(self) -> int:
        code = (self.error or {}).get("error", {}).get("code")
        return code if isinstance(code, int) and 400 <= code <= 599 else 500


def add_delta(choice: Choice, delta: dict[str, Any], chat: bool) -> None:
    text = delta.get("content") if chat else delta.get("text")
    if text:
        choice.text.append(text)
    reasoning = delta.get("reasoning_content") or delta.get("reasoning")
    if reasoning:
        choice.reasoning.append(reasoning)
    for call in delta.get("tool_calls") or ():
        add_tool_call(choice, call)


def add_tool_call(choice: Choice, call: dict[str, Any]) -> None:
    """Tool calls stream as fragments keyed by index: the name once, the arguments in pieces."""
    index = call.get("index", len(choice.tool_calls))
    merged = choice.tool_calls.setdefault(
        index, {"id": None, "type": "function", "function": {"name": "", "arguments": ""}}
    )
    merged["id"] = call.get("id") or merged["id"]
    function = call.get("function") or {}
    merged["function"]["name"] += function.get("name") or ""
    merged["function"]["arguments"] += function.get("arguments") or ""


def merge_logprobs(before: Any, more: Any) -> Any:
    """Chat logprobs stream as lists under "content"; completion logprobs as parallel lists."""
    if not isinstance(more, dict):
        return before
    if not isinstance(before, dict):
        return {k: list(v) if isinstance(v, list) else v for k, v in more.items()}
    for key, value in more.items():
        if isinstance(value, list) and isinstance(before.get(key), list):
            before[key].extend(value)
    return before


def message(choice: Choice) -> dict[str, Any]:
    built: dict[str, Any] = {"role": "assistant", "content": "".join(choice.text)}
    if choice.reasoning:
        built["reasoning_content"] = "".join(choice.reasoning)
    calls = [choice.tool_calls[i] for i in sorted(choice.tool_calls)]
    built["tool_calls"] = calls
    if calls and not choice.text:
        built["content"] = None
    return built
