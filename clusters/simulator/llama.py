"""The engine simulator's llama-server mode: a drop-in for llama.cpp's `llama-server`, as the real
one (0.3.36's tree) behaves where Berth depends on it (reference/real-engines.md §2, and the
conformance suite):

    python -m clusters.simulator.llama --model FILE.gguf --alias NAME --host H --port P \
        [--ctx-size N] [--threads N] [--metrics] [--n-gpu-layers N] [--parallel N] \
        [--cache-ram MIB]

- Lines: `llama_server: model loaded`, then `llama_server: listening on http://H:P`, each with
  llama.cpp's prefix (time since start, a level letter). A flag it does not know: exit 1,
  `error: invalid argument: FLAG`. A GGUF file that is not there: exit 1,
  `gguf_init_from_file: failed to open GGUF file 'PATH' (No such file or directory)`.
  `--ctx-size` above the model's trained context is capped, with a warning, not refused.
- Endpoints: /health → `{"status":"ok"}`; /v1/models and /models carry an Ollama-style `models`
  list and the OpenAI `data` list; chat and completions, streaming and not — the request's
  `model` is ignored; /metrics (only with --metrics) with llama.cpp's `llamacpp:*` names.
- The key (LLAMA_API_KEY, or --api-key) guards everything but /health and the model lists;
  a wrong key is a 401 with llama.cpp's error body. SIGTERM: exit 0.

The vLLM simulator's settings (clusters.simulator.contract.SimSettings) give the time to the first
token (BERTH_SIM_TTFT_S), the natural reply length (BERTH_SIM_REPLY_TOKENS) and the model's
trained context (BERTH_SIM_MODEL_JSON's max_position_embeddings); a malformed one exits 2, as
the vLLM mode does. Never imports Django or `placement`.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aiohttp import web

from clusters.simulator import text
from clusters.simulator.contract import SettingsError, SimSettings

PUBLIC = {"/health", "/v1/health", "/models", "/v1/models", "/api/tags"}
VALUED = {
    "--model": "model",
    "-m": "model",
    "--alias": "alias",
    "-a": "alias",
    "--host": "host",
    "--port": "port",
    "--ctx-size": "ctx_size",
    "-c": "ctx_size",
    "--threads": "threads",
    "-t": "threads",
    "--n-gpu-layers": "n_gpu_layers",
    "-ngl": "n_gpu_layers",
    "--parallel": "parallel",
    "-np": "parallel",
    "--cache-ram": "cache_ram",
    "-cram": "cache_ram",
    "--api-key": "api_key",
}
SWITCHES = {"--metrics": "metrics"}
TRAINED_CONTEXT = 2048  # without model facts: the tiny Llama's


class BadArgument(ValueError):
    """llama.cpp's words for a command line or a model file it refuses (it exits 1)."""


@dataclass
class Options:
    model: str = ""
    alias: str = ""
    host: str = "127.0.0.1"
    port: str = "8080"
    ctx_size: str = "0"
    threads: str = "1"
    n_gpu_layers: str = "0"
    parallel: str = "4"
    cache_ram: str = "8192"  # MiB of prompt cache; the simulator keeps none, whatever it is
    api_key: str = ""
    metrics: bool = False


def parse(argv: Sequence[str]) -> Options:
    options, rest = Options(), list(argv)
    while rest:
        flag = rest.pop(0)
        if flag in SWITCHES:
            setattr(options, SWITCHES[flag], True)
        elif flag in VALUED and rest:
            setattr(options, VALUED[flag], rest.pop(0))
        else:
            raise BadArgument(f"error: invalid argument: {flag}")
    return options


@dataclass
class Counters:
    """What /metrics reports: llama.cpp's names, counted as requests are served."""

    prompt_tokens: int = 0
    predicted_tokens: int = 0
    processing: int = 0
    decodes: int = 0

    def exposition(self) -> str:
        values = {
            "prompt_tokens_total": ("counter", self.prompt_tokens),
            "tokens_predicted_total": ("counter", self.predicted_tokens),
            "n_decode_total": ("counter", self.decodes),
            "requests_processing": ("gauge", self.processing),
            "requests_deferred": ("gauge", 0),
        }
        lines = []
        for name, (kind, value) in values.items():
            lines += [f"# HELP llamacpp:{name} {name}", f"# TYPE llamacpp:{name} {kind}"]
            lines.append(f"llamacpp:{name} {value}")
        return "\n".join(lines) + "\n"


@dataclass
class Server:
    options: Options
    settings: SimSettings
    started: float = field(default_factory=time.monotonic)
    counters: Counters = field(default_factory=Counters)

    def log(self, level: str, where: str, message: str) -> None:
        """llama.cpp's line: seconds since start as 0.SS.mmm.uuu, a level letter, the source."""
        elapsed = time.monotonic() - self.started
        seconds, fraction = divmod(elapsed, 1)
        stamp = f"0.{int(seconds):02d}.{int(fraction * 1000):03d}.{int(fraction * 1e6) % 1000:03d}"
        print(f"{stamp} {level} {where} {message}", file=sys.stderr, flush=True)

    @property
    def name(self) -> str:
        return self.options.alias or Path(self.options.model).name


def reply_tokens(body: dict[str, Any], natural: int) -> tuple[int, str]:
    asked = body.get("max_tokens")
    if isinstance(asked, int) and asked < natural:
        return asked, "length"
    return natural, "stop"


async def generate(server: Server, body: dict[str, Any], prompt_tokens: int) -> tuple[int, str]:
    tokens, finish = reply_tokens(body, server.settings.reply_tokens)
    server.counters.processing += 1
    try:
        await asyncio.sleep(server.settings.ttft_s)
    finally:
        server.counters.processing -= 1
    server.counters.prompt_tokens += prompt_tokens
    server.counters.predicted_tokens += tokens
    server.counters.decodes += tokens
    return tokens, finish


def fingerprint() -> str:
    return "b0-berthsim"  # llama.cpp's build number and commit: b<N>-<hash>


def envelope(server: Server, obj: str) -> dict[str, Any]:
    return {
        "id": f"chatcmpl-{uuid.uuid4().hex[:32]}",
        "object": obj,
        "created": int(time.time()),
        "model": server.name,
        "system_fingerprint": fingerprint(),
    }


def usage(prompt: int, completion: int) -> dict[str, int]:
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
    }


async def chat(request: web.Request) -> web.StreamResponse:
    server: Server = request.app["server"]
    body = await request.json()
    prompt = text.count_chat_tokens(body.get("messages") or [])
    tokens, finish = await generate(server, body, prompt)
    words = text.filler_text(tokens)
    if body.get("stream"):
        return await stream(request, server, words, finish, prompt, tokens)
    reply = envelope(server, "chat.completion")
    reply["choices"] = [
        {"index": 0, "message": {"role": "assistant", "content": words}, "finish_reason": finish}
    ]
    reply["usage"] = usage(prompt, tokens)
    return web.json_response(reply)


async def stream(
    request: web.Request, server: Server, words: str, finish: str, prompt: int, tokens: int
) -> web.StreamResponse:
    response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await response.prepare(request)
    head = envelope(server, "chat.completion.chunk")
    deltas = [{"content": piece} for piece in words.split(" ")] if words else []
    for position, delta in enumerate(deltas):
        last = position == len(deltas) - 1
        choice = {"index": 0, "delta": delta, "finish_reason": finish if last else None}
        await response.write(f"data: {json.dumps({**head, 'choices': [choice]})}\n\n".encode())
    tail = {**head, "choices": [], "usage": usage(prompt, tokens)}
    await response.write(f"data: {json.dumps(tail)}\n\ndata: [DONE]\n\n".encode())
    return response


async def completions(request: web.Request) -> web.Response:
    server: Server = request.app["server"]
    body = await request.json()
    prompt = text.count_prompt_tokens(body.get("prompt", ""))
    tokens, finish = await generate(server, body, prompt)
    reply = envelope(server, "text_completion")
    reply["choices"] = [{"index": 0, "text": text.filler_text(tokens), "finish_reason": finish}]
    reply["usage"] = usage(prompt, tokens)
    return web.json_response(reply)


def compact(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"))  # llama.cpp writes JSON without spaces


async def health(request: web.Request) -> web.Response:
    return web.json_response({"status": "ok"}, dumps=compact)


async def models(request: web.Request) -> web.Response:
    server: Server = request.app["server"]
    name = server.name
    return web.json_response(
        {
            "models": [{"name": name, "model": name, "type": "model", "tags": [""]}],
            "object": "list",
            "data": [
                {"id": name, "object": "model", "created": int(time.time()), "owned_by": "llamacpp"}
            ],
        }
    )


async def metrics(request: web.Request) -> web.Response:
    server: Server = request.app["server"]
    if not server.options.metrics:
        return web.json_response(not_supported("metrics"), status=501)
    return web.Response(text=server.counters.exposition(), content_type="text/plain")


def not_supported(what: str) -> dict[str, Any]:
    message = f"This server does not support {what}. Start it with `--{what}`"
    return {"error": {"code": 501, "message": message, "type": "not_supported_error"}}


def key_guard(server: Server, key: str) -> Any:
    @web.middleware
    async def guard(request: web.Request, handler: Any) -> web.StreamResponse:
        given = request.headers.get("Authorization", "").removeprefix("Bearer ")
        if key and request.path not in PUBLIC and given != key:
            server.log("W", "srv    operator():", "unauthorized: Invalid API Key")
            error = {"code": 401, "message": "Invalid API Key", "type": "authentication_error"}
            return web.json_response({"error": error}, status=401)
        return await handler(request)

    return guard


def make_app(server: Server) -> web.Application:
    key = server.options.api_key or os.environ.get("LLAMA_API_KEY", "")
    app = web.Application(middlewares=[key_guard(server, key)])
    app["server"] = server
    for path in ("/health", "/v1/health"):
        app.router.add_get(path, health)
    for path in ("/models", "/v1/models"):
        app.router.add_get(path, models)
    app.router.add_get("/metrics", metrics)
    app.router.add_post("/v1/chat/completions", chat)
    app.router.add_post("/chat/completions", chat)
    app.router.add_post("/v1/completions", completions)
    return app


def trained_context(settings: SimSettings) -> int:
    facts = settings.model_json or {}
    return int(facts.get("max_position_embeddings") or TRAINED_CONTEXT)


def load(server: Server) -> None:
    """Open the model file as llama.cpp does; raises BadArgument with its first error line."""
    path = server.options.model
    if not Path(path).is_file():
        raise BadArgument(
            f"gguf_init_from_file: failed to open GGUF file '{path}' (No such file or directory)"
        )
    server.log("I", "srv    load_model:", f"loading model '{path}'")
    asked, trained = int(server.options.ctx_size or 0), trained_context(server.settings)
    if asked > trained:
        server.log(
            "W",
            "srv    load_model:",
            f"the slot context ({asked}) exceeds the training context of the model "
            f"({trained}) - capping",
        )
    server.log("I", "srv  llama_server:", "model loaded")


async def serve(server: Server) -> int:
    runner = web.AppRunner(make_app(server), access_log=None)
    await runner.setup()
    host = server.options.host
    if host.endswith(".sock"):  # llama-server's Unix socket: a --host that names one
        await web.UnixSite(runner, host).start()
        where = f"unix://{host}"
    else:
        await web.TCPSite(runner, host, int(server.options.port)).start()
        where = f"http://{host}:{server.options.port}"
    server.log("I", "srv  llama_server:", f"listening on {where}")
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    await stop.wait()
    server.log("I", "srv    operator():", "operator(): cleaning up before exit...")
    await runner.cleanup()
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    try:
        settings = SimSettings.from_environ()
    except SettingsError as error:
        print(f"engine simulator: {error}", file=sys.stderr)
        return 2
    try:
        server = Server(parse(sys.argv[1:] if argv is None else argv), settings)
    except BadArgument as refused:
        print(refused, file=sys.stderr, flush=True)  # before any logging: bare, as llama.cpp
        return 1
    server.log("I", "srv  llama_server:", "initializing ...")
    try:
        load(server)
    except BadArgument as refused:
        server.log("E", *str(refused).split(" ", 1))
        return 1
    return asyncio.run(serve(server))


if __name__ == "__main__":
    sys.exit(main())
