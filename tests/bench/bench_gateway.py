"""Benchmark: streams through the gateway against the same streams straight to the engine.

    python tests/bench/bench_gateway.py            # full size (make bench)
    python tests/bench/bench_gateway.py --smoke    # a few seconds (inside make test)

One engine simulator is started, then the gateway as the Procfile runs it (its own process:
uvicorn, gateway.asgi) and, for comparison, the same ASGI app under daphne (as it would run
inside the console's web process, routed before Django). For 1, 16 and 64 concurrent streams it
measures the time to first token (client side, from sending the request to the first token) and
the tokens per second of all streams together, straight to the engine and through each gateway,
in the same run, and prints the gateway's figures as ratios against that direct baseline: the
machines here are noisy and shared.

The gateway's server reads its table of ready copies and its API key from a fixed table instead
of the database (both are cached in memory in production; the hot path never reads the
database), so the benchmark needs no database.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import socket
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

ENGINE_KEY = "sk-bench-engine"
CLIENT_KEY = "berth_bench-client-key-not-in-any-database"
MODEL = "bench-qwen"
TARGETS = (
    "Targets: TTFT added < 2 ms at 1 and 16 streams; at 64, median added <= 2 ms, p99 added "
    "<= 20 ms, tokens/s >= 97 %."
)


@dataclass(frozen=True)
class Size:
    levels: tuple[int, ...]
    rounds: dict[int, int]  # requests each stream sends, one after the other, per level
    reply_tokens: int
    tokens_per_second: float
    ttft_s: float


FULL = Size((1, 16, 64), {1: 20, 16: 6, 64: 3}, 64, 200.0, 0.03)
SMOKE = Size((1, 16), {1: 6, 16: 1}, 32, 200.0, 0.02)


# ---------------------------------------------------------------- processes


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def start_engine(size: Size) -> tuple[subprocess.Popen[bytes], int]:
    speed = {"ttft_s": size.ttft_s, "tokens_per_second": size.tokens_per_second}
    return start_simulator([MODEL], [], reply_tokens=size.reply_tokens, **speed)


def start_simulator(
    names: list[str], flags: list[str], **settings: Any
) -> tuple[subprocess.Popen[bytes], int]:
    """An engine simulator on a free port, loaded at once, answering to `names` with
    ENGINE_KEY; `settings` are its own (clusters.simulator.contract.SimSettings)."""
    from clusters.simulator.contract import build_env, serve_argv

    port = free_port()
    env = build_env(load_s_per_gb=0.0, init_s=0.0, stats_interval_s=3600, **settings)
    argv = serve_argv("Qwen/Qwen3-0.6B", "--host", "127.0.0.1", "--port", str(port),
                      "--api-key", ENGINE_KEY, "--served-model-name", *names,
                      "--max-model-len", "4096", "--disable-uvicorn-access-log", *flags)  # fmt: skip
    return spawn(argv, env), port


def start_gateway(server: str, engine_port: int) -> tuple[subprocess.Popen[bytes], int]:
    port = free_port()
    argv = [sys.executable, __file__, "serve", server, str(port), str(engine_port)]
    return spawn(argv, {}), port


def spawn(argv: list[str], extra: dict[str, str]) -> subprocess.Popen[bytes]:
    inherited = {k: v for k, v in os.environ.items() if not k.startswith("BERTH_SIM_")}
    return subprocess.Popen(
        argv,
        cwd=ROOT,
        env={**inherited, **extra},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )


def wait_until_up(url: str, key: str, process: subprocess.Popen[bytes]) -> None:
    import httpx

    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"{url} exited with {process.returncode} before it served")
        try:
            headers = {"Authorization": f"Bearer {key}"}
            if httpx.get(f"{url}/v1/models", headers=headers, timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    raise RuntimeError(f"{url} did not serve within 60 s")


def stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        os.killpg(process.pid, 15)
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, 9)
            process.wait(timeout=10)


# ---------------------------------------------------------------- the gateway's server process


def serve(server: str, port: int, engine_port: int) -> None:
    """Run the gateway with a fixed table: one deployment, one ready copy at the engine."""
    without_database()
    fix_the_table(engine_port)
    if server == "uvicorn":
        import uvicorn

        from gateway.app import application

        uvicorn.run(application, host="127.0.0.1", port=port, log_level="error", access_log=False)
        return
    from daphne.server import Server

    from gateway.app import application

    endpoint = f"tcp:port={port}:interface=127.0.0.1"
    Server(application, endpoints=[endpoint], verbosity=0).run()


def without_database(**extra: str) -> None:
    """Django set up for a gateway whose table and key are fixed (install): no database and
    no Redis to reach, no figures to flush."""
    os.environ.update(
        DJANGO_SETTINGS_MODULE="console.settings",
        BERTH_DEBUG="true",
        DATABASE_URL="postgresql://bench@127.0.0.1:9/not-used",
        REDIS_URL="redis://127.0.0.1:9/0",
        BERTH_GATEWAY_FLUSH_S="3600",
        BERTH_GATEWAY_REFRESH_S="300",
        BERTH_LOG_LEVEL="ERROR",
        **extra,
    )
    import django

    django.setup()


def fix_the_table(engine_port: int) -> None:
    from gateway import directory

    url = f"http://127.0.0.1:{engine_port}"
    upstream = directory.Upstream(1, 1, url, {"Authorization": f"Bearer {ENGINE_KEY}"})
    install([bench_route(directory, 1, MODEL, (upstream,))])


def bench_route(
    directory: Any, number: int, name: str, upstreams: tuple[Any, ...], **more: Any
) -> Any:
    return directory.Route(
        id=number, name=name, team_id=1, team_name="bench", created=0, chat_name="",
        state="DEPLOYED", served_name=name, reply_wait_s=180, upstreams=upstreams, **more,
    )  # fmt: skip


def install(routes: list[Any]) -> None:
    """The gateway's table is these routes, and CLIENT_KEY is a known key of team 1."""
    from console.models import hash_secret
    from gateway import directory, service
    from gateway.keys import Caller
    from gateway.quotas import Book

    table = directory.Table.of(routes)
    service.load_table = lambda keys: table  # type: ignore[assignment]
    service.load_book = Book  # no quotas: read with the table, from the database it has not
    caller = Caller(1, "bench", False, frozenset({1}))
    service.KEYS.known[hash_secret(CLIENT_KEY)] = (math.inf, caller)


# ---------------------------------------------------------------- load


@dataclass
class Sample:
    ttft_s: float
    tokens: int


async def one_stream(session: Any, url: str, key: str) -> Sample:
    from gateway import sse

    body = {"model": MODEL, "messages": [{"role": "user", "content": "Tell me a story."}],
            "stream": True}  # fmt: skip
    headers = {"Authorization": f"Bearer {key}", "Content-Type": "application/json"}
    sent = time.perf_counter()
    first: float | None = None
    tokens = 0
    pending = b""
    async with session.post(url, data=json.dumps(body), headers=headers) as response:
        assert response.status == 200, await response.text()
        async for piece in response.content.iter_any():
            if first is None:
                payloads, pending = sse.split_events(pending + piece)
                starts = [i for i, p in enumerate(payloads) if sse.starts_reply(p)]
                if starts:
                    first = time.perf_counter()
                    tokens += len(payloads) - starts[0] - (payloads[-1] == sse.DONE)
                continue
            tokens += sse.count_chunks(piece)
    return Sample((first or time.perf_counter()) - sent, tokens)


async def one_client(session: Any, url: str, key: str, rounds: int) -> list[Sample]:
    return [await one_stream(session, url, key) for _ in range(rounds)]


async def load(base: str, key: str, streams: int, rounds: int) -> tuple[list[Sample], float]:
    import aiohttp

    url = f"{base}/v1/chat/completions"
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session:
        # One round first, so that both paths have a warm connection for every stream.
        await asyncio.gather(*(one_stream(session, url, key) for _ in range(streams)))
        began = time.perf_counter()
        clients = [one_client(session, url, key, rounds) for _ in range(streams)]
        results = await asyncio.gather(*clients)
        elapsed = time.perf_counter() - began
    return [sample for result in results for sample in result], elapsed


@dataclass(frozen=True)
class Figures:
    ttft_median_ms: float
    tokens_per_s: float
    ttft_p99_ms: float
    tokens_per_reply: tuple[int, ...] = ()  # each reply's count: every token must arrive


def measure(base: str, key: str, streams: int, rounds: int) -> Figures:
    samples, elapsed = asyncio.run(load(base, key, streams, rounds))
    ttfts = sorted(s.ttft_s * 1000 for s in samples)
    p99 = ttfts[max(0, math.ceil(len(ttfts) * 0.99) - 1)]
    counts = tuple(sorted({s.tokens for s in samples}))
    return Figures(statistics.median(ttfts), sum(s.tokens for s in samples) / elapsed, p99, counts)


# ---------------------------------------------------------------- the report


@dataclass(frozen=True)
class Row:
    streams: int
    path: str
    figures: Figures
    direct: Figures

    @property
    def ttft_added_ms(self) -> float:
        return self.figures.ttft_median_ms - self.direct.ttft_median_ms

    @property
    def ttft_p99_added_ms(self) -> float:
        return self.figures.ttft_p99_ms - self.direct.ttft_p99_ms

    @property
    def throughput_ratio(self) -> float:
        return self.figures.tokens_per_s / self.direct.tokens_per_s


def run(size: Size, servers: tuple[str, ...]) -> list[Row]:
    engine, engine_port = start_engine(size)
    gateways: dict[str, tuple[subprocess.Popen[bytes], int]] = {}
    try:
        engine_url = f"http://127.0.0.1:{engine_port}"
        wait_until_up(engine_url, ENGINE_KEY, engine)
        for server in servers:
            gateways[server] = start_gateway(server, engine_port)
            process, port = gateways[server]
            wait_until_up(f"http://127.0.0.1:{port}", CLIENT_KEY, process)
        ports = {server: port for server, (_process, port) in gateways.items()}
        return [row for level in size.levels for row in compare(size, level, engine_url, ports)]
    finally:
        for process, _port in gateways.values():
            stop(process)
        stop(engine)


def compare(size: Size, streams: int, engine_url: str, ports: dict[str, int]) -> list[Row]:
    """The direct baseline is measured before and after the gateways and averaged, so that a
    machine that slows down during the run favours neither side."""
    rounds = size.rounds[streams]
    before = measure(engine_url, ENGINE_KEY, streams, rounds)
    via = {
        server: measure(f"http://127.0.0.1:{port}", CLIENT_KEY, streams, rounds)
        for server, port in ports.items()
    }
    after = measure(engine_url, ENGINE_KEY, streams, rounds)
    direct = Figures(
        (before.ttft_median_ms + after.ttft_median_ms) / 2,
        (before.tokens_per_s + after.tokens_per_s) / 2,
        (before.ttft_p99_ms + after.ttft_p99_ms) / 2,
        tuple(sorted(set(before.tokens_per_reply) | set(after.tokens_per_reply))),
    )
    rows = [Row(streams, "direct", direct, direct)]
    return rows + [Row(streams, server, figures, direct) for server, figures in via.items()]


PATHS = {
    "direct": "straight to the engine",
    "uvicorn": "gateway, own process (uvicorn, as in Procfile)",
    "daphne": "gateway in a daphne process (as in the console)",
}


def lines(rows: list[Row], size: Size) -> list[str]:
    head = (
        f"Gateway benchmark: engine simulator at {size.tokens_per_second:g} tokens/s per "
        f"stream, {size.reply_tokens} tokens a reply, first token after {size.ttft_s * 1000:g} ms"
    )
    out = [head, f"The gateway's server runs on {server_speedups()}.", TARGETS, ""]
    out.append(f"{'streams':>7}  {'path':<47} {'TTFT median':>11} {'added':>9} "
               f"{'TTFT p99':>11} {'added':>9} {'tokens/s':>9} {'vs direct':>9}")  # fmt: skip
    for row in rows:
        direct = row.path == "direct"
        added = "" if direct else f"{row.ttft_added_ms:+.2f} ms"
        added_p99 = "" if direct else f"{row.ttft_p99_added_ms:+.2f} ms"
        ratio = "" if direct else f"{row.throughput_ratio:.1%}"
        out.append(
            f"{row.streams:>7}  {PATHS[row.path]:<47} {row.figures.ttft_median_ms:>8.2f} ms "
            f"{added:>9} {row.figures.ttft_p99_ms:>8.2f} ms {added_p99:>9} "
            f"{row.figures.tokens_per_s:>9.0f} {ratio:>9}"
        )
    return out


def server_speedups() -> str:
    """uvicorn uses uvloop and httptools when they are installed (uvicorn[standard])."""
    from importlib.util import find_spec

    loop = "uvloop" if find_spec("uvloop") else "asyncio's own loop"
    http = "httptools" if find_spec("httptools") else "h11"
    return f"{loop} and {http}"


def main(argv: list[str]) -> int:
    if argv[:1] == ["serve"]:
        serve(argv[1], int(argv[2]), int(argv[3]))
        return 0
    parser = argparse.ArgumentParser(description="Streams through the gateway vs direct.")
    parser.add_argument("--smoke", action="store_true", help="a few seconds, for make test")
    parser.add_argument("--servers", help="uvicorn (the Procfile's), daphne, or both (default)")
    args = parser.parse_args(argv)
    size = SMOKE if args.smoke else FULL
    servers = args.servers or ("uvicorn" if args.smoke else "uvicorn,daphne")
    rows = run(size, tuple(servers.split(",")))
    print("\n".join(lines(rows, size)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
