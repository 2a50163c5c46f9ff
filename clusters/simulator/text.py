"""Token counts, filler replies and embedding vectors: deterministic, cheap, no tokenizer.

A "token" is a word or a punctuation mark; chat messages add the few template tokens a chat
template adds. That is close enough to a real tokenizer for usage counts, length limits and
load tests, and it costs no CPU worth measuring.
"""

from __future__ import annotations

import base64
import hashlib
import math
import random
import re
import struct
from collections.abc import Iterable, Sequence
from typing import Any

_TOKEN = re.compile(r"\w+|[^\w\s]")
FILLER = (
    "The quick brown fox jumps over the lazy dog while the simulated engine streams "
    "deterministic filler words so that gateways and dashboards can be tested without a GPU ."
).split()


def count_tokens(text: str) -> int:
    return len(_TOKEN.findall(text))


def tokens_of(text: str) -> list[str]:
    return _TOKEN.findall(text)


def content_text(content: Any) -> str:
    """A message's content: a string, or OpenAI content parts of which only text counts."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = [p.get("text", "") for p in content if isinstance(p, dict)]
        return " ".join(p for p in parts if isinstance(p, str))
    return ""


def count_chat_tokens(messages: Sequence[dict[str, Any]]) -> int:
    return len(chat_tokens(messages))


def chat_tokens(messages: Sequence[dict[str, Any]], continue_final: bool = False) -> list[str]:
    """The chat template's tokens: each message framed by its role (4 tokens:
    <|im_start|>role\n … <|im_end|>), then the reply's opening (3: <|im_start|>assistant\n).
    The prefix cache hashes them: two chats share blocks as far as their messages agree.
    Continuing the final message (vLLM's continue_final_message): it is left open, and no
    reply is opened."""
    tokens: list[str] = []
    for message in messages:
        role = str(message.get("role", ""))
        tokens += ["<|im_start|>", role, "\n", *tokens_of(content_text(message.get("content")))]
        tokens.append("<|im_end|>")
    if continue_final:
        return tokens[:-1]
    return [*tokens, "<|im_start|>", "assistant", "\n"]


def prompt_tokens(prompt: Any) -> list[str]:
    """A completions prompt's tokens: its words, or its token ids as given."""
    if isinstance(prompt, str):
        return tokens_of(prompt)
    return [str(token) for token in prompt]


def count_prompt_tokens(prompt: Any) -> int:
    """A completions prompt: text, or token ids (counted as given)."""
    if isinstance(prompt, str):
        return count_tokens(prompt)
    if isinstance(prompt, list) and all(isinstance(t, int) for t in prompt):
        return len(prompt)
    raise ValueError("prompt must be a string, a list of strings or a list of token ids")


def split_prompts(prompt: Any) -> list[Any]:
    """Completions accept one prompt or a batch: a list of strings or of token-id lists."""
    if isinstance(prompt, list) and prompt and not all(isinstance(t, int) for t in prompt):
        return list(prompt)
    return [prompt]


def filler_token(index: int) -> str:
    word = FILLER[index % len(FILLER)]
    return word if index == 0 else f" {word}"


def filler_text(count: int) -> str:
    return "".join(filler_token(i) for i in range(count))


def embedding(text: str, dimensions: int) -> list[float]:
    """A unit vector seeded by the text: equal inputs give equal vectors, others differ."""
    seed = int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "big")
    rng = random.Random(seed)
    vector = [rng.gauss(0.0, 1.0) for _ in range(dimensions)]
    norm = math.sqrt(sum(v * v for v in vector)) or 1.0
    return [v / norm for v in vector]


def encode_base64(vector: Iterable[float]) -> str:
    """OpenAI's base64 embeddings: little-endian float32."""
    values = list(vector)
    return base64.b64encode(struct.pack(f"<{len(values)}f", *values)).decode()
