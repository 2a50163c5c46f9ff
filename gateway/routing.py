"""What a request would like of its copy: the one that last served the longest leading part of
its prompt (a deployment routed by `prefix`), or the one its session used (`session`).

Prefix. An engine caches the KV of a prompt's leading blocks (vLLM: blocks of `block_size`
tokens, each found by its tokens and every block before it). A copy that served a prompt's
prefix a moment ago still holds it, so another request with that prefix skips most of its
prefill there. The gateway has no tokenizer: it cuts the prompt's text into blocks of
block_size × CHARS_PER_TOKEN characters (about a block of tokens each) and hashes them in a
chain, seeded by the deployment, so that a block matches only behind the same blocks. The index
maps each chained hash to the copy that served it last.

Session. A request naming a session (the header X-Berth-Session, else the OpenAI body's
`user`) goes to the copy its session used last.

Either way the wish gives way to load: a copy with more than BERTH_ROUTING_LOAD_MARGIN requests
in flight over the least loaded one is passed over (gateway/picking.py), and the request's
blocks or session are then remembered at the copy it went to. Both indexes are bounded in
entries and in memory and drop the least recently used first; their sizes are on /metrics.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from django.conf import settings

from deployments.choices import RoutingPolicy
from gateway.directory import Route, Upstream

SESSION_HEADER = "x-berth-session"
CHARS_PER_TOKEN = 4  # about, for English text and code under the common tokenizers
MOST_BLOCKS = 512  # the leading blocks hashed (with vLLM's 16: the first 8,192 tokens or so)
# Accounted memory of one entry: an OrderedDict's node with an int key and an int value
# (tests/integration/test_routing.py checks it with tracemalloc: about 110 bytes on CPython
# 3.11, so the bound errs on the side of less memory).
ENTRY_BYTES = 200


class LruIndex:
    """Keys (ints) to the copy that used them last, least recently used first; bounded."""

    def __init__(self, most_entries: int, most_bytes: int) -> None:
        self.most = max(1, min(most_entries, most_bytes // ENTRY_BYTES))
        self.entries: OrderedDict[int, int] = OrderedDict()

    def __len__(self) -> int:
        return len(self.entries)

    @property
    def bytes(self) -> int:
        return len(self.entries) * ENTRY_BYTES

    def deepest(self, keys: Sequence[int], wanted: set[int]) -> int | None:
        """The copy of the last key, in a run of keys all held, whose copy is one of `wanted`."""
        found = None
        for key in keys:
            copy_id = self.entries.get(key)
            if copy_id is None:
                break
            if copy_id in wanted:
                found = copy_id
        return found

    def remember(self, keys: Iterable[int], copy_id: int) -> None:
        entries = self.entries
        for key in keys:
            entries[key] = copy_id
            entries.move_to_end(key)
        while len(entries) > self.most:
            entries.popitem(last=False)


def indexes() -> tuple[LruIndex, LruIndex]:
    """A process's prefix index and session index, as the settings bound them."""
    entries = int(settings.GATEWAY_PREFIX_INDEX_ENTRIES)
    most_bytes = int(settings.GATEWAY_PREFIX_INDEX_MIB) << 20
    return LruIndex(entries, most_bytes), LruIndex(entries, most_bytes)


def prompt_text(path_is_chat: bool, body: dict[str, Any]) -> str:
    """The prompt as one text, each chat message framed by its role (as a chat template does):
    two chats agree in their text as far as their messages do."""
    if not path_is_chat:
        prompt = body.get("prompt")
        return prompt if isinstance(prompt, str) else repr(prompt)
    parts = []
    for message in body.get("messages") or ():
        if isinstance(message, dict):
            parts.append(f"\x1e{message.get('role', '')}\x1f{content_text(message.get('content'))}")
    return "".join(parts)


def content_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\x1d".join(str(part.get("text", "")) for part in content if isinstance(part, dict))
    return ""


def block_hashes(seed: int, text: str, block_chars: int) -> list[int]:
    """The chained hash of each whole block of the text's leading MOST_BLOCKS."""
    hashes = []
    previous = seed
    end = min(len(text) - len(text) % block_chars, MOST_BLOCKS * block_chars)
    for start in range(0, end, block_chars):
        previous = hash((previous, text[start : start + block_chars]))
        hashes.append(previous)
    return hashes


def session_of(headers_session: str, body: dict[str, Any]) -> str:
    user = body.get("user")
    return headers_session or (user if isinstance(user, str) else "")


@dataclass
class Wish:
    """The keys a request's copy is looked up by, per deployment, in its index."""

    index: LruIndex
    keys: dict[int, list[int]]  # deployment id → keys, shallowest first

    def preferred(self, candidates: Iterable[Upstream]) -> int | None:
        by_deployment: dict[int, set[int]] = {}
        for upstream in candidates:
            by_deployment.setdefault(upstream.deployment_id, set()).add(upstream.copy_id)
        for deployment_id, keys in self.keys.items():
            found = self.index.deepest(keys, by_deployment.get(deployment_id, set()))
            if found is not None:
                return found
        return None

    def went_to(self, upstream: Upstream) -> None:
        self.index.remember(self.keys.get(upstream.deployment_id, ()), upstream.copy_id)


def wish_for(
    routes: Sequence[Route],
    path_is_chat: bool,
    body: dict[str, Any],
    session: str,
    prefixes: LruIndex,
    sessions: LruIndex,
) -> Wish | None:
    """The request's wish under its deployments' policies; None where they route by load."""
    prefix_routes = [r for r in routes if r.routing == RoutingPolicy.PREFIX]
    if prefix_routes:
        text = prompt_text(path_is_chat, body)
        return Wish(
            prefixes,
            {r.id: block_hashes(r.id, text, r.block_size * CHARS_PER_TOKEN) for r in prefix_routes},
        )
    session = session_of(session, body)
    session_routes = [r for r in routes if r.routing == RoutingPolicy.SESSION]
    if session_routes and session:
        return Wish(sessions, {r.id: [hash((r.id, session))] for r in session_routes})
    return None


def index_metrics(prefixes: LruIndex, sessions: LruIndex) -> str:
    """The indexes' sizes in Prometheus' text format (this process's)."""
    lines = []
    for metric, value, about in (
        ("berth_gateway_prefix_index_entries", len(prefixes), "Prompt blocks in the prefix index."),
        ("berth_gateway_prefix_index_bytes", prefixes.bytes, "Memory the prefix index holds."),
        ("berth_gateway_session_index_entries", len(sessions), "Sessions in the session index."),
    ):
        lines += [f"# HELP {metric} {about}", f"# TYPE {metric} gauge", f"{metric} {value}"]
    return "\n".join(lines) + "\n"
