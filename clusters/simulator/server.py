"""vLLM's OpenAI-compatible HTTP API on aiohttp: one event loop, tokens paced with sleeps.

Routes and bodies follow vLLM's OpenAI server (reference/vllm.md §3.5): /health (200, empty; 503
once the engine is dead), /version, /metrics, and under /v1, which needs ``--api-key`` when one
was given: models, chat/completions, completions, embeddings. Errors use vLLM's body
``{"error": {"message", "type", "param", "code"}}`` and its messages.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from http import HTTPStatus
from typing import Any

from aiohttp import web
from aiohttp.abc import AbstractAccessLogger
from prometheus_client import CONTENT_TYPE_LATEST

from clusters.simulator import text
from clusters.simulator.contract import SimSettings
from clusters.simulator.metrics import EngineMetrics, FinishedRequest
from clusters.simulator.prefix_cache import PrefixCache
from clusters.simulator.scheduler import Scheduler
from clusters.simulator.vlog import VllmLog

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
ENGINE_DEAD = "EngineCore encountered an issue. See stack trace (above) for the root cause."


@dataclass
class EngineState:
    """Everything the handlers read; built by engine.py once the engine is 'ready'."""

    model: str
    served_names: list[str]
    max_model_len: int
    pooling: bool
    embedding_dim: int
    api_keys: list[str]
    version: str
    settings: SimSettings
    scheduler: Scheduler
    metrics: EngineMetrics
    log: VllmLog
    prefix_cache: PrefixCache
    dead: bool = False
    created: int = field(default_factory=lambda: int(time.time()))

    @property
    def name(self) -> str:
        return self.served_names[0]


class ApiError(Exception):
    def __init__(self, status: int, message: str, err_type: str = "BadRequestError") -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.err_type = err_type

    def response(self) -> web.Response:
        return error_response(self.status, self.message, self.err_type)


def error_response(status: int, message: str, err_type: str) -> web.Response:
    body = {"error": {"message": message, "type": err_type, "param": None, "code": status}}
    return web.json_response(body, status=status)


def dumps(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"))


# ---------------------------------------------------------------- request checks


def guard_middleware(state: EngineState) -> Any:
    bearers = {f"Bearer {key}" for key in state.api_keys}

    @web.middleware
    async def guard(request: web.Request, handler: Handler) -> web.StreamResponse:
        # vLLM checks the key only under /v1: /health and /metrics stay open to probes.
        if request.path.startswith("/v1"):
            if bearers and request.headers.get("Authorization") not in bearers:
                return error_response(401, "Unauthorized", "AuthenticationError")
            if state.dead:
                return error_response(500, ENGINE_DEAD, "InternalServerError")
        try:
            return await handler(request)
        except ApiError as error:
            return error.response()

    return guard


async def read_body(request: web.Request) -> dict[str, Any]:
    try:
        body = json.loads(await request.read())
    except ValueError as error:
        raise ApiError(400, f"Invalid JSON body: {error}") from error
    if not isinstance(body, dict):
        raise ApiError(400, "The request body must be a JSON object.")
    return body


def check_model(state: EngineState, body: dict[str, Any]) -> None:
    model = body.get("model")
    if model and model not in state.served_names:
        aliases = ", ".join(state.served_names)  # vLLM 0.32 names what it does serve
        raise ApiError(
            404, f"The model `{model}` does not exist. Valid aliases: {aliases}.", "NotFoundError"
        )


def positive_int(body: dict[str, Any], key: str, default: int | None) -> int | None:
    value = body.get(key, default)
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ApiError(400, f"{key} must be at least 1, got {value}.")
    return value


def check_length(state: EngineState, prompt_tokens: int, max_tokens: int | None) -> None:
    """vLLM's _validate_input: the prompt, then prompt + max_tokens, against max_model_len."""
    limit = state.max_model_len
    if prompt_tokens >= limit:
        raise ApiError(
            400,
            f"This model's maximum context length is {limit} tokens. However, your request has "
            f"{prompt_tokens} input tokens. Please reduce the length of the input messages.",
        )
    if max_tokens is not None and prompt_tokens + max_tokens > limit:
        raise ApiError(
            400,
            f"'max_tokens' or 'max_completion_tokens' is too large: {max_tokens}. This model's "
            f"maximum context length is {limit} tokens and your request has {prompt_tokens} "
            f"input tokens ({max_tokens} > {limit} - {prompt_tokens}).",
        )


# ---------------------------------------------------------------- generation plan and pacing


@dataclass(frozen=True)
class Generation:
    """What one request will produce: tokens per choice and why it stops."""

    prompt_tokens: int
    tokens: int
    finish_reason: str
    n: int
    max_tokens: int
    prompt: tuple[str, ...] = ()  # its tokens, for the prefix cache (a batch's: none)
    # Where in the filler text the reply starts: a chat continuing its final (assistant)
    # message goes on from that message's words, as a deterministic model would.
    first_word: int = 0

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.tokens * self.n


def plan_generation(
    state: EngineState,
    body: dict[str, Any],
    prompt_tokens: int,
    prompt: Sequence[str] = (),
    first_word: int = 0,
) -> Generation:
    max_tokens = positive_int(body, "max_completion_tokens", None)
    max_tokens = max_tokens or positive_int(body, "max_tokens", None)
    n = positive_int(body, "n", 1) or 1
    check_length(state, prompt_tokens, max_tokens)
    limit = max_tokens or state.max_model_len - prompt_tokens
    # A continued answer ends where the whole one would: its words so far count.
    natural = max(1, state.settings.reply_tokens - first_word)
    wanted = max(natural, body.get("min_tokens") or 0)
    if body.get("ignore_eos"):
        wanted = limit + 1  # vLLM's ignore_eos: run to max_tokens
    tokens = max(1, min(wanted, limit))
    finish = "length" if wanted > limit else "stop"
    return Generation(prompt_tokens, tokens, finish, n, limit, tuple(prompt), first_word)


def first_token_delay(state: EngineState, prompt_tokens: int) -> float:
    rate = state.settings.prefill_tokens_per_second
    return state.settings.ttft_s + (prompt_tokens / rate if rate > 0 else 0.0)


def token_interval(state: EngineState) -> float:
    rate = state.settings.tokens_per_second
    return 1.0 / rate if rate > 0 else 0.0


async def paced(count: int, first_at: float, interval: float) -> AsyncIterator[range]:
    """Yield token indices as they fall due. A late loop catches up in one batch instead of
    drifting, so hundreds of streams cost one wake-up each per tick, not one per token."""
    sent = 0
    while sent < count:
        now = time.monotonic()
        due = 0
        if now >= first_at:
            due = count if interval <= 0 else int((now - first_at) / interval + 1e-6) + 1
        due = min(due, count)
        if due > sent:
            yield range(sent, due)
            sent = due
            continue
        await asyncio.sleep(max(0.0, first_at + sent * interval - now))


@dataclass
class Tracker:
    """Times one request for the histograms; abort unless it is marked done."""

    generation: Generation
    queue_s: float = 0.0
    started: float = field(default_factory=time.monotonic)
    first_token_at: float | None = None
    emitted: int = 0
    finish_reason: str = "abort"

    def record(self, state: EngineState) -> None:
        now = time.monotonic()
        first = self.first_token_at or now
        state.metrics.finished(
            FinishedRequest(
                prompt_tokens=self.generation.prompt_tokens,
                generation_tokens=self.emitted,
                finished_reason=self.finish_reason,
                queue_s=self.queue_s,
                ttft_s=first - self.started,
                e2e_s=now - self.started,
                max_tokens=self.generation.max_tokens,
                n=self.generation.n,
            )
        )


async def generate(
    state: EngineState,
    generation: Generation,
    emit: Callable[[range], Awaitable[None]] | None = None,
) -> Tracker:
    """Admit the request, then produce its tokens at the simulated pace: handed to ``emit`` as
    they fall due, or (non-streaming, ``emit`` None) all at once after one sleep."""
    tracker = Tracker(generation)
    try:
        async with state.scheduler.admit(generation.prompt_tokens, generation.total_tokens) as q:
            tracker.queue_s = q
            cached = state.prefix_cache.take(generation.prompt)
            state.metrics.prefix_hits.inc(cached)
            prefill = generation.prompt_tokens - cached
            first_at = time.monotonic() + first_token_delay(state, prefill)
            if emit is None:
                await produce_silently(state, tracker, first_at)
            else:
                await produce_paced(state, tracker, first_at, emit)
            if not state.dead:
                tracker.finish_reason = generation.finish_reason
        return tracker
    finally:
        tracker.record(state)


async def produce_paced(
    state: EngineState,
    tracker: Tracker,
    first_at: float,
    emit: Callable[[range], Awaitable[None]],
) -> None:
    interval = token_interval(state)
    choices = tracker.generation.n
    async for batch in paced(tracker.generation.tokens, first_at, interval):
        if state.dead:
            return
        tracker.first_token_at = tracker.first_token_at or time.monotonic()
        await emit(batch)
        tracker.emitted += len(batch) * choices
        state.scheduler.generated(len(batch) * choices, interval)


async def produce_silently(state: EngineState, tracker: Tracker, first_at: float) -> None:
    interval = token_interval(state)
    generation = tracker.generation
    await asyncio.sleep(max(0.0, first_at - time.monotonic()))
    tracker.first_token_at = time.monotonic()
    await asyncio.sleep((generation.tokens - 1) * interval)
    if not state.dead:
        tracker.emitted = generation.tokens * generation.n
        state.scheduler.generated(tracker.emitted, interval)


# ---------------------------------------------------------------- OpenAI objects


def usage(generation: Generation, completion_tokens: int | None = None) -> dict[str, Any]:
    completion = (
        generation.tokens * generation.n if completion_tokens is None else completion_tokens
    )
    return {
        "prompt_tokens": generation.prompt_tokens,
        "total_tokens": generation.prompt_tokens + completion,
        "completion_tokens": completion,
        "prompt_tokens_details": None,
    }


def chat_message(content: str) -> dict[str, Any]:
    return {
        "role": "assistant",
        "content": content,
        "refusal": None,
        "annotations": None,
        "audio": None,
        "function_call": None,
        "tool_calls": [],
        "reasoning_content": None,
    }


def chat_choice(index: int, generation: Generation) -> dict[str, Any]:
    return {
        "index": index,
        "message": chat_message(
            "".join(text.filler_token(generation.first_word + i) for i in range(generation.tokens))
        ),
        "logprobs": None,
        "finish_reason": generation.finish_reason,
        "stop_reason": None,
    }


def completion_choice(index: int, generation: Generation) -> dict[str, Any]:
    return {
        "index": index,
        "text": text.filler_text(generation.tokens),
        "logprobs": None,
        "finish_reason": generation.finish_reason,
        "stop_reason": None,
        "prompt_logprobs": None,
    }


def envelope(state: EngineState, request_id: str, obj: str) -> dict[str, Any]:
    return {
        "id": request_id,
        "object": obj,
        "created": int(time.time()),
        "model": state.name,
        "system_fingerprint": fingerprint(state.version),
    }


def fingerprint(version: str) -> str:
    """vLLM's `vllm-<version>-<8 hex>`: the build that answered (the same for every reply)."""
    digest = hashlib.sha256(f"berth-engine-simulator-{version}".encode()).hexdigest()
    return f"vllm-{version}-{digest[:8]}"


# ---------------------------------------------------------------- streaming


class SseStream:
    """One SSE response: writes batches of chunks in one write each."""

    def __init__(self, response: web.StreamResponse) -> None:
        self.response = response

    async def send(self, chunks: list[dict[str, Any]]) -> None:
        payload = "".join(f"data: {dumps(chunk)}\n\n" for chunk in chunks)
        await self.response.write(payload.encode())

    async def done(self) -> None:
        await self.response.write(b"data: [DONE]\n\n")
        await self.response.write_eof()


async def open_stream(request: web.Request) -> SseStream:
    response = web.StreamResponse(
        headers={"Content-Type": "text/event-stream; charset=utf-8", "Cache-Control": "no-cache"}
    )
    await response.prepare(request)
    return SseStream(response)


def wants_usage(body: dict[str, Any]) -> bool:
    options = body.get("stream_options")
    return isinstance(options, dict) and bool(options.get("include_usage"))


async def stream_generation(
    request: web.Request,
    state: EngineState,
    generation: Generation,
    head: dict[str, Any],
    choice: Callable[[int, range, bool], dict[str, Any]],
    opening: list[dict[str, Any]],
) -> web.StreamResponse:
    """Stream ``choice`` chunks for each batch of tokens, then usage and [DONE]."""
    stream = await open_stream(request)
    last = generation.tokens - 1

    # The envelope is the same for every chunk: render it once, not once per token.
    prefix = f'data: {dumps(head)[:-1]},"choices":['

    async def emit(batch: range) -> None:
        chunks = [
            f"{prefix}{dumps(choice(number, range(index, index + 1), index == last))}]}}\n\n"
            for index in batch
            for number in range(generation.n)
        ]
        await stream.response.write("".join(chunks).encode())

    try:
        if opening:
            await stream.send(opening)
        tracker = await generate(state, generation, emit)
        if tracker.finish_reason == "abort":
            return stream.response  # engine died mid-stream: the connection just ends
        if wants_usage(request["body"]):
            await stream.send([{**head, "choices": [], "usage": usage(generation)}])
        await stream.done()
    except ConnectionError:
        pass  # the client left; the tracker has recorded an abort
    return stream.response


# ---------------------------------------------------------------- handlers


async def health(request: web.Request) -> web.Response:
    state: EngineState = request.app["state"]
    return web.Response(status=503 if state.dead else 200)


async def version(request: web.Request) -> web.Response:
    return web.json_response({"version": request.app["state"].version})


async def metrics(request: web.Request) -> web.Response:
    state: EngineState = request.app["state"]
    response = web.Response(body=state.metrics.exposition())
    response.headers["Content-Type"] = CONTENT_TYPE_LATEST
    return response


async def models(request: web.Request) -> web.Response:
    state: EngineState = request.app["state"]
    data = [model_card(state, name) for name in state.served_names]
    return web.json_response({"object": "list", "data": data})


def model_card(state: EngineState, name: str) -> dict[str, Any]:
    permission = {
        "id": f"modelperm-{uuid.uuid4().hex}",
        "object": "model_permission",
        "created": state.created,
        "allow_create_engine": False,
        "allow_sampling": True,
        "allow_logprobs": True,
        "allow_search_indices": False,
        "allow_view": True,
        "allow_fine_tuning": False,
        "organization": "*",
        "group": None,
        "is_blocking": False,
    }
    return {
        "id": name,
        "object": "model",
        "created": state.created,
        "owned_by": "vllm",
        "root": state.model,
        "parent": None,
        "max_model_len": state.max_model_len,
        "permission": [permission],
    }


async def chat_completions(request: web.Request) -> web.StreamResponse:
    state: EngineState = request.app["state"]
    if state.pooling:
        raise ApiError(400, "The model does not support Chat Completions API")
    body = request["body"] = await read_body(request)
    check_model(state, body)
    messages = body.get("messages")
    if not isinstance(messages, list) or not all(isinstance(m, dict) for m in messages):
        raise ApiError(400, "messages must be a list of message objects.")
    last = messages[-1] if messages else {}
    continues = bool(body.get("continue_final_message")) and last.get("role") == "assistant"
    tokens = text.chat_tokens(messages, continue_final=continues)
    said = len(text.tokens_of(text.content_text(last.get("content")))) if continues else 0
    generation = plan_generation(state, body, len(tokens), tokens, first_word=said)
    request_id = f"chatcmpl-{uuid.uuid4().hex}"
    if body.get("stream"):
        return await stream_chat(request, state, generation, request_id)
    tracker = await generate(state, generation)
    if tracker.finish_reason == "abort":
        raise ApiError(500, ENGINE_DEAD, "InternalServerError")
    reply = envelope(state, request_id, "chat.completion")
    reply["choices"] = [chat_choice(i, generation) for i in range(generation.n)]
    reply.update(usage=usage(generation), prompt_logprobs=None, kv_transfer_params=None)
    return web.json_response(reply, dumps=dumps)


async def stream_chat(
    request: web.Request, state: EngineState, generation: Generation, request_id: str
) -> web.StreamResponse:
    head = envelope(state, request_id, "chat.completion.chunk")

    def choice(number: int, tokens: range, last: bool) -> dict[str, Any]:
        content = "".join(text.filler_token(generation.first_word + i) for i in tokens)
        return {
            "index": number,
            "delta": {"content": content},
            "logprobs": None,
            "finish_reason": generation.finish_reason if last else None,
            **({"stop_reason": None} if last else {}),
        }

    role = {"role": "assistant", "content": ""}
    opening = [
        {**head, "choices": [{"index": i, "delta": role, "logprobs": None, "finish_reason": None}]}
        for i in range(generation.n)
    ]
    return await stream_generation(request, state, generation, head, choice, opening)


async def completions(request: web.Request) -> web.StreamResponse:
    state: EngineState = request.app["state"]
    if state.pooling:
        raise ApiError(400, "The model does not support Completions API")
    body = request["body"] = await read_body(request)
    check_model(state, body)
    if "prompt" not in body:
        raise ApiError(400, "prompt is required.")
    prompts = text.split_prompts(body["prompt"])
    try:
        counts = [text.count_prompt_tokens(p) for p in prompts]
    except ValueError as error:
        raise ApiError(400, str(error)) from error
    for count in counts:
        plan_generation(state, body, count)  # each prompt must fit on its own
    single = plan_generation(state, body, max(counts))
    cacheable = tuple(text.prompt_tokens(prompts[0])) if len(prompts) == 1 else ()
    generation = Generation(sum(counts), single.tokens, single.finish_reason,
                            single.n * len(prompts), single.max_tokens, cacheable)  # fmt: skip
    request_id = f"cmpl-{uuid.uuid4().hex}"
    if body.get("stream"):
        return await stream_completion(request, state, generation, request_id)
    tracker = await generate(state, generation)
    if tracker.finish_reason == "abort":
        raise ApiError(500, ENGINE_DEAD, "InternalServerError")
    reply = envelope(state, request_id, "text_completion")
    reply["choices"] = [completion_choice(i, generation) for i in range(generation.n)]
    reply.update(usage=usage(generation), kv_transfer_params=None)
    return web.json_response(reply, dumps=dumps)


async def stream_completion(
    request: web.Request, state: EngineState, generation: Generation, request_id: str
) -> web.StreamResponse:
    head = envelope(state, request_id, "text_completion")

    def choice(number: int, tokens: range, last: bool) -> dict[str, Any]:
        return {
            "index": number,
            "text": "".join(text.filler_token(i) for i in tokens),
            "logprobs": None,
            "finish_reason": generation.finish_reason if last else None,
            "stop_reason": None,
        }

    return await stream_generation(request, state, generation, head, choice, [])


def embedding_inputs(value: Any) -> list[Any]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, list) and value and all(isinstance(t, int) for t in value):
        return [value]
    if isinstance(value, list) and value:
        return value
    raise ApiError(400, "input must be a string, a list of strings or a list of token ids.")


def count_embedding_input(state: EngineState, item: Any) -> int:
    try:
        count = text.count_prompt_tokens(item)
    except ValueError as error:
        raise ApiError(400, str(error)) from error
    if count > state.max_model_len:
        raise ApiError(
            400,
            f"This model's maximum context length is {state.max_model_len} tokens. However, you "
            f"requested {count} tokens in the input for embedding generation. Please reduce the "
            "length of the input.",
        )
    return count


def embedding_item(index: int, item: Any, dims: int, fmt: str) -> dict[str, Any]:
    vector = text.embedding(item if isinstance(item, str) else dumps(item), dims)
    encoded: Any = text.encode_base64(vector) if fmt == "base64" else vector
    return {"index": index, "object": "embedding", "embedding": encoded}


async def embeddings(request: web.Request) -> web.StreamResponse:
    state: EngineState = request.app["state"]
    if not state.pooling:
        raise ApiError(400, "The model does not support Embeddings API")
    body = await read_body(request)
    check_model(state, body)
    inputs = embedding_inputs(body.get("input"))
    counts = [count_embedding_input(state, item) for item in inputs]
    dims = min(positive_int(body, "dimensions", None) or state.embedding_dim, state.embedding_dim)
    fmt = body.get("encoding_format") or "float"
    if fmt not in ("float", "base64"):
        raise ApiError(400, f"encoding_format must be float or base64, got {fmt}.")
    generation = Generation(sum(counts), 0, "stop", 1, 1)
    tracker = Tracker(generation)
    try:
        async with state.scheduler.admit(generation.prompt_tokens, generation.prompt_tokens) as q:
            tracker.queue_s = q
            await asyncio.sleep(first_token_delay(state, generation.prompt_tokens))
            tracker.finish_reason = "stop"
    finally:
        tracker.record(state)
    reply = envelope(state, f"embd-{uuid.uuid4().hex}", "list")
    reply["data"] = [embedding_item(i, item, dims, fmt) for i, item in enumerate(inputs)]
    reply["usage"] = usage(generation, 0)
    return web.json_response(reply, dumps=dumps)


ROUTES: list[tuple[str, str, Handler]] = [
    ("GET", "/health", health),
    ("GET", "/version", version),
    ("GET", "/metrics", metrics),
    ("GET", "/v1/models", models),
    ("POST", "/v1/chat/completions", chat_completions),
    ("POST", "/v1/completions", completions),
    ("POST", "/v1/embeddings", embeddings),
]


def make_app(state: EngineState) -> web.Application:
    app = web.Application(middlewares=[guard_middleware(state)], client_max_size=64 << 20)
    app["state"] = state
    for method, path, handler in ROUTES:
        app.router.add_route(method, path, handler)
    return app


def uvicorn_access_logger(log: VllmLog) -> type[AbstractAccessLogger]:
    """Access lines as uvicorn writes them under vLLM."""

    class UvicornAccessLogger(AbstractAccessLogger):
        def log(self, request: web.BaseRequest, response: web.StreamResponse, time: float) -> None:
            peer = request.transport.get_extra_info("peername") if request.transport else None
            where = f"{peer[0]}:{peer[1]}" if peer else f"{request.remote}:0"
            version = f"{request.version.major}.{request.version.minor}"
            phrase = HTTPStatus(response.status).phrase
            line = f'{where} - "{request.method} {request.path_qs} HTTP/{version}" '
            log.uvicorn(f"{line}{response.status} {phrase}")

    return UvicornAccessLogger
