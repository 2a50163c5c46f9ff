"""Secrets out of what engines print, before Berth stores a line (one door: logs.write_lines).

Engines are untrusted and talkative: vLLM's start-up line lists its non-default arguments
(`'api_key': ['…']` when a key is on its command line), servers echo headers at debug level,
and a model's own code may print anything. Every stored line is shown to the deployment's
viewers, so a line is stored only after the copy's own key and anything shaped like a key
have been replaced.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

HIDDEN = "[hidden]"
_QUOTE = r"(?P<quote>['\"]?)"
_SECRET = r"(?P<secret>(?!None\b|null\b|\[hidden\])[^'\"\s,\[\]{}]+)"
PATTERNS = (
    # {'api_key': ['…']}, "api_key": "…", api_key=…, api-key: …
    re.compile(r"(?P<lead>['\"]?api[_-]?key['\"]?\s*[:=]\s*\[?\s*)" + _QUOTE + _SECRET, re.I),
    re.compile(r"(?P<lead>--api-key[=\s]+)" + _QUOTE + _SECRET),
    re.compile(r"(?P<lead>\b(?:VLLM|LLAMA|OPENAI)_API_KEY\s*[=:]\s*)" + _QUOTE + _SECRET),
    re.compile(r"(?P<lead>\bBearer\s+)" + _QUOTE + r"(?P<secret>[A-Za-z0-9._~+/=-]{8,})", re.I),
    # Shapes that are secrets wherever they stand: Berth's engine keys, Hugging Face tokens.
    re.compile(r"(?P<lead>)(?P<quote>)(?P<secret>\bengine-[A-Za-z0-9_-]{32}(?![A-Za-z0-9_-]))"),
    re.compile(r"(?P<lead>)(?P<quote>)(?P<secret>\bhf_[A-Za-z0-9]{20,})"),
)


def redact(text: str, secrets: Iterable[str] = ()) -> str:
    """`text` with every known secret and every key-shaped value replaced by [hidden]."""
    for secret in secrets:
        if secret:
            text = text.replace(secret, HIDDEN)
    for pattern in PATTERNS:
        text = pattern.sub(lambda m: m["lead"] + m["quote"] + HIDDEN, text)
    return text
