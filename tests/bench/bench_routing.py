"""Benchmark (issue 39): prefix-aware routing against least-loaded routing, in one run on the
same copies.

    python tests/bench/bench_routing.py            # full size (make bench)
    python tests/bench/bench_routing.py --smoke    # a few seconds (inside make test)

Four engine simulators are started, each one copy of two deployments that differ only in their
routing: `bench-least` (least_loaded) and `bench-prefix` (prefix); then the gateway as the
Procfile runs it (uvicorn, gateway.asgi) with a fixed table of those two deployments (no
database: the table and the key are cached in memory in production anyway).

The load: 32 conversations at once, 8 turns each, each turn sending the whole conversation so
far (as chat clients do) after its own 2,000-token opening (a user's document, a long system
prompt with their context), with a pause between a reply and the next question (people read:
without one, the copy that has just answered is the least loaded, and least_loaded routing
sticks to it by chance). A copy's KV cache holds about a third of the conversations' text
(`--kv-cache-memory-bytes`), as a share of a GPU does: spread at random over the copies, a turn
seldom finds its conversation still cached; routed by prefix, it finds it at the copy it used.
The simulator's prefill time counts only the tokens its prefix cache did not hold (vLLM's
`vllm:prefix_cache_*` figures say how many it did).

Each policy runs the same load with conversations of its own (no policy finds the other's
text cached); the report gives mean TTFT and output tokens/s of each and their ratios.
Targets: prefix's mean TTFT at least 2× lower, and its output tokens/s at least 1.3× higher.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import random
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_gateway  # noqa: E402  (the processes, the key and the engine's key)

POLICIES = {"least_loaded": "bench-least", "prefix": "bench-prefix"}
TARGETS = "Targets: prefix's mean TTFT at least 2× lower, its output tokens/s at least 1.3× higher."


@dataclass(frozen=True)
class Size:
    copies: int
    conversations: int
    turns: int
    opening_tokens: int
    reply_tokens: int
    kv_cache_bytes: int  # each copy's: a third to a half of all the conversations' text
    tokens_per_second: float = 100.0
    prefill_tokens_per_second: float = 5_000.0  # a GPU share's: prefill is what a hit saves
    ttft_s: float = 0.02
    think_s: float = 0.1  # between a reply and the next question, on average (0 to twice)
    streams: int = 64  # for the gateway's overhead, and the streams a copy is killed under
    overhead_rounds: int = 5


# Qwen3-0.6B keeps 112 KiB of KV per token: 2.5 GiB is about 23,400 tokens a copy, a third
# of 32 conversations of up to 2,250 tokens each.
FULL = Size(4, 32, 8, 2000, 16, 5 << 29)
# Half a GiB: about 4,700 tokens a copy, half of 8 conversations of up to 1,150 tokens.
SMOKE = Size(2, 8, 3, 1000, 16, 1 << 29, streams=8, overhead_rounds=1)


# ---------------------------------------------------------------- processes


def start_copy(size: Size) -> tuple[Any, int]:
    return bench_gateway.start_simulator(
        list(POLICIES.values()),
        ["--kv-cache-memory-bytes", str(size.kv_cache_bytes)],
        ttft_s=size.ttft_s,
        tokens_per_second=size.tokens_per_second,
        prefill_tokens_per_second=size.prefill_tokens_per_second,
        reply_tokens=size.reply_tokens,
    )


def start_gateway(engine_ports: list[int]) -> tuple[Any, int]:
    port = bench_gateway.free_port()
    ports = ",".join(map(str, engine_ports))
    return bench_gateway.spawn([sys.executable, __file__, "serve", str(port), ports], {}), port


def serve(port: int, engine_ports: list[int]) -> None:
    """The gateway with a fixed table: both deployments, a ready copy at each engine."""
    bench_gateway.without_database(BERTH_USAGE_METERING="false")  # no database for the records
    import uvicorn

    from gateway import directory
    from gateway.app import application

    headers = {"Authorization": f"Bearer {bench_gateway.ENGINE_KEY}"}
    routes = []
    for number, (policy, name) in enumerate(POLICIES.items(), start=1):
        upstreams = tuple(
            directory.Upstream(number * 100 + i, number, f"http://127.0.0.1:{engine}", headers)
            for i, engine in enumerate(engine_ports)
        )
        routes.append(bench_gateway.bench_route(directory, number, name, upstreams, routing=policy))
    bench_gateway.install(routes)
    uvicorn.run(application, host="127.0.0.1", port=port, log_level="error", access_log=False)


# ---------------------------------------------------------------- load


@dataclass
class Turn:
    ttft_s: float
    tokens: int
    text: str


async def one_turn(
    session: Any,
    url: str,
    model: str,
    messages: list[dict[str, str]],
    key: str = bench_gateway.CLIENT_KEY,
    started: asyncio.Event | None = None,
) -> Turn:
    from gateway import sse

    body = {"model": model, "messages": messages, "stream": True,
            "stream_options": {"include_usage": True}}  # fmt: skip
    headers = {"Authorization": f"Bearer {key}"}
    sent = time.perf_counter()
    first: float | None = None
    pieces: list[str] = []
    tokens = 0
    pending = b""
    async with session.post(url, data=json.dumps(body), headers=headers) as response:
        assert response.status == 200, await response.text()
        async for piece in response.content.iter_any():
            payloads, pending = sse.split_events(pending + piece)
            for payload in payloads:
                if payload == sse.DONE:
                    continue
                event = json.loads(payload)
                if event.get("usage"):
                    tokens = event["usage"]["completion_tokens"]
                for choice in event["choices"]:
                    delta = choice["delta"].get("content") or ""
                    if delta and first is None:
                        first = time.perf_counter()
                        if started is not None:
                            started.set()
                    pieces.append(delta)
    return Turn((first or time.perf_counter()) - sent, tokens, "".join(pieces))


def opening(policy: str, conversation: int, tokens: int) -> str:
    """A conversation's own opening text: words no other conversation (or policy) has."""
    return " ".join(f"{policy[0]}{conversation}w{i}" for i in range(tokens))


async def conversation(session: Any, url: str, policy: str, number: int, size: Size) -> list[Turn]:
    messages = [{"role": "system", "content": opening(policy, number, size.opening_tokens)}]
    turns = []
    pauses = random.Random(number)  # the same pauses for both policies
    for question in range(size.turns):
        if question:
            await asyncio.sleep(pauses.uniform(0, 2 * size.think_s))
        messages.append({"role": "user", "content": f"And what about point {question}?"})
        answered = await one_turn(session, url, POLICIES[policy], messages)
        messages.append({"role": "assistant", "content": answered.text})
        turns.append(answered)
    return turns


@dataclass(frozen=True)
class Figures:
    policy: str
    mean_ttft_ms: float
    median_ttft_ms: float
    tokens_per_s: float
    turns: int
    tokens_per_reply: tuple[int, ...]  # each reply's count: every token must arrive


async def load(base: str, policy: str, size: Size) -> Figures:
    import aiohttp

    url = f"{base}/v1/chat/completions"
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session:
        began = time.perf_counter()
        talks = [conversation(session, url, policy, n, size) for n in range(size.conversations)]
        done = await asyncio.gather(*talks)
        elapsed = time.perf_counter() - began
    turns = [turn for talk in done for turn in talk]
    ttfts = [turn.ttft_s * 1000 for turn in turns]
    tokens = sum(turn.tokens for turn in turns)
    return Figures(policy, statistics.fmean(ttfts), statistics.median(ttfts), tokens / elapsed,
                   len(turns), tuple(sorted({turn.tokens for turn in turns})))  # fmt: skip


def cache_figures(engine_ports: list[int]) -> tuple[float, float]:
    """Prefix cache hits and queries (tokens) of all the copies together."""
    import re

    import httpx

    hits = queries = 0.0
    for port in engine_ports:
        text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5).text
        hits += sum(
            map(float, re.findall(r"^vllm:prefix_cache_hits_total\{[^}]*\} (\S+)$", text, re.M))
        )
        queries += sum(
            map(float, re.findall(r"^vllm:prefix_cache_queries_total\{[^}]*\} (\S+)$", text, re.M))
        )
    return hits, queries


def p99(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[max(0, math.ceil(len(ordered) * 0.99) - 1)]


async def overhead(
    base: str, engine_ports: list[int], streams: int, rounds: int
) -> dict[str, float]:
    """p99 TTFT of `streams` streams at once straight to the copies (spread over them in turn)
    and through the gateway, routed by prefix (the index on) and least_loaded (none), `rounds`
    times each, the two gateway groups in alternating order."""
    import aiohttp

    ask = [{"role": "user", "content": "Tell me a story."}]
    ttfts: dict[str, list[float]] = {"direct": [], "gateway": [], "gateway, no index": []}
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session:
        for number in range(rounds + 1):  # the first round warms the connections: not counted
            direct = [
                one_turn(session, f"http://127.0.0.1:{engine_ports[n % len(engine_ports)]}"
                         "/v1/chat/completions", POLICIES["prefix"], ask, bench_gateway.ENGINE_KEY)
                for n in range(streams)
            ]  # fmt: skip
            through = [
                one_turn(session, f"{base}/v1/chat/completions", POLICIES["prefix"], ask)
                for _ in range(streams)
            ]
            unindexed = [
                one_turn(session, f"{base}/v1/chat/completions", POLICIES["least_loaded"], ask)
                for _ in range(streams)
            ]
            # The order changes every round: a group sent right after two others came out
            # slower here whichever it was (the client's own connections, perhaps).
            gateways = [("gateway", through), ("gateway, no index", unindexed)][
                :: 1 - 2 * (number % 2)
            ]
            for path, turns in [("direct", direct), *gateways]:
                done = await asyncio.gather(*turns)
                if number:
                    ttfts[path] += [turn.ttft_s * 1000 for turn in done]
    return {path: p99(values) for path, values in ttfts.items()}


async def kill_during(base: str, copy: Any, streams: int, reply_tokens: int) -> tuple[int, int]:
    """`streams` streams at once; one copy killed once every stream has its first token. How
    many ended with exactly the answer the engines generate (the simulator's filler, whole
    and once), of how many."""
    import aiohttp

    from clusters.simulator.text import filler_text

    url = f"{base}/v1/chat/completions"
    started = [asyncio.Event() for _ in range(streams)]
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session:
        ask = [{"role": "user", "content": "Tell me a long story."}]
        talks = [
            asyncio.ensure_future(
                one_turn(session, url, POLICIES["least_loaded"], ask, started=started[n])
            )
            for n in range(streams)
        ]
        await asyncio.gather(*(event.wait() for event in started))
        bench_gateway.stop(copy)
        ended = await asyncio.gather(*talks, return_exceptions=True)
    whole = [isinstance(turn, Turn) and turn.text == filler_text(reply_tokens)
             for turn in ended]  # fmt: skip
    return sum(whole), streams


@dataclass(frozen=True)
class Result:
    figures: dict[str, Figures]
    hit_share: dict[str, float]  # the copies' prefix cache hits over queries, per policy
    p99_ms: dict[str, float]  # TTFT at 64 streams: direct, through the gateway with and without
    survived: tuple[int, int]  # streams whole after a copy was killed, of how many

    @property
    def ttft_ratio(self) -> float:
        """least_loaded's mean TTFT over prefix's: how many times lower prefix's is."""
        return self.figures["least_loaded"].mean_ttft_ms / self.figures["prefix"].mean_ttft_ms

    @property
    def throughput_ratio(self) -> float:
        return self.figures["prefix"].tokens_per_s / self.figures["least_loaded"].tokens_per_s


def run(size: Size) -> Result:
    engines = [start_copy(size) for _ in range(size.copies)]
    gateway = None
    try:
        ports = [port for _process, port in engines]
        for process, port in engines:
            bench_gateway.wait_until_up(
                f"http://127.0.0.1:{port}", bench_gateway.ENGINE_KEY, process
            )
        gateway = start_gateway(ports)
        base = f"http://127.0.0.1:{gateway[1]}"
        bench_gateway.wait_until_up(base, bench_gateway.CLIENT_KEY, gateway[0])
        figures, shares = {}, {}
        for policy in POLICIES:
            hits_before, queries_before = cache_figures(ports)
            figures[policy] = asyncio.run(load(base, policy, size))
            hits, queries = cache_figures(ports)
            shares[policy] = (hits - hits_before) / max(queries - queries_before, 1.0)
        p99_ms = asyncio.run(overhead(base, ports, size.streams, size.overhead_rounds))
        survived = asyncio.run(kill_during(base, engines[0][0], size.streams, size.reply_tokens))
        return Result(figures, shares, p99_ms, survived)
    finally:
        if gateway is not None:
            bench_gateway.stop(gateway[0])
        for process, _port in engines:
            bench_gateway.stop(process)


def lines(result: Result, size: Size) -> list[str]:
    head = (
        f"Routing: {size.conversations} conversations × {size.turns} turns, "
        f"{size.opening_tokens}-token openings, over {size.copies} copies "
        f"(KV cache {size.kv_cache_bytes / 2**30:g} GiB each). {TARGETS}"
    )
    rows = [head, f"{'policy':>13} {'mean TTFT':>10} {'median':>9} {'tokens/s':>9} {'cached':>7}"]
    for policy, figures in result.figures.items():
        rows.append(
            f"{policy:>13} {figures.mean_ttft_ms:>7.1f} ms {figures.median_ttft_ms:>6.1f} ms "
            f"{figures.tokens_per_s:>9.1f} {result.hit_share[policy]:>6.0%}"
        )
    rows.append(
        f"prefix against least_loaded: mean TTFT {result.ttft_ratio:.2f}× lower, "
        f"output tokens/s {result.throughput_ratio:.2f}× higher"
    )
    direct, through = result.p99_ms["direct"], result.p99_ms["gateway"]
    unindexed = result.p99_ms["gateway, no index"]
    rows.append(
        f"{size.streams} streams, prefix index on: TTFT p99 {direct:.1f} ms direct, "
        f"{through:.1f} ms through the gateway ({through - direct:+.1f} ms; target <= +2 ms); "
        f"routed least_loaded (no index) {unindexed:.1f} ms ({unindexed - direct:+.1f} ms)"
    )
    whole, streams = result.survived
    rows.append(
        f"one of {size.copies} copies killed during {streams} streams: {whole} of {streams} "
        f"whole ({whole / streams:.1%}; target >= 99 %)"
    )
    return rows


def main(argv: list[str]) -> int:
    if argv[:1] == ["serve"]:
        serve(int(argv[1]), [int(port) for port in argv[2].split(",")])
        return 0
    parser = argparse.ArgumentParser(description="Prefix-aware routing against least-loaded.")
    parser.add_argument("--smoke", action="store_true", help="a few seconds, for make test")
    args = parser.parse_args(argv)
    size = SMOKE if args.smoke else FULL
    result = run(size)
    print("\n".join(lines(result, size)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
