"""The engine simulator, run as a real process, behaves like ``vllm serve`` from the outside.

Every simulator here is a subprocess on a free 127.0.0.1 port, started with the argv a launcher
would give vLLM, with fast load and token settings; every fixture kills what it started.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import aiohttp
import httpx
import openai
import pytest
from prometheus_client.parser import text_string_to_metric_families

from clusters.simulator import build_env, serve_argv
from clusters.simulator.memory import GIB, EngineShape, GpuState, ModelFacts, plan_memory

pytestmark = pytest.mark.timeout(60)

REPO = Path(__file__).resolve().parents[2]
API_KEY = "sk-sim-test"
FAST = build_env(load_s_per_gb=0.02, init_s=0.05, ttft_s=0.01, tokens_per_second=100)
LLAMA_8B = {  # meta-llama/Llama-3.1-8B-Instruct, reference/vllm.md §6
    "architectures": ["LlamaForCausalLM"],
    "hidden_size": 4096,
    "intermediate_size": 14336,
    "num_hidden_layers": 32,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "vocab_size": 128256,
    "max_position_embeddings": 131072,
    "torch_dtype": "bfloat16",
    "weights_bytes": 16_060_522_496,
}
BGE_M3 = {  # BAAI/bge-m3: an encoder, so no KV cache and embeddings only
    "architectures": ["XLMRobertaModel"],
    "hidden_size": 1024,
    "num_hidden_layers": 24,
    "num_attention_heads": 16,
    "vocab_size": 250002,
    "max_position_embeddings": 8192,
    "torch_dtype": "float32",
    "weights_bytes": 2_271_000_000,
}
STARTUP_LINES = [
    "vLLM API server version 0.11.0",
    "non-default args: {",
    "Starting to load model",
    "Loading weights took",
    "Model loading took",
    "Memory profiling takes",
    "Available KV cache memory:",
    "GPU KV cache size:",
    "Maximum concurrency for",
    "init engine (profile, create kv cache, warmup model) took",
    "Starting vLLM API server 0 on http://127.0.0.1:",
    "INFO:     Application startup complete.",
]
LOG_LINE = re.compile(r"^\((APIServer|EngineCore_DP0) pid=\d+\) (INFO|WARNING|ERROR) \d\d-\d\d ")


# ---------------------------------------------------------------- harness


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class Sim:
    """A running simulator: its output is collected by a thread so waits can be bounded."""

    def __init__(self, argv: list[str], env: dict[str, str], port: int) -> None:
        self.port = port
        self.base = f"http://127.0.0.1:{port}"
        self.lines: list[str] = []
        self.proc = subprocess.Popen(
            argv, cwd=REPO, env=env, text=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
        )
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line.rstrip("\n"))

    @property
    def output(self) -> str:
        return "\n".join(self.lines)

    def wait_for(self, text: str, timeout: float = 15.0) -> str:
        deadline = time.monotonic() + timeout
        while True:
            for line in list(self.lines):
                if text in line:
                    return line
            finished = self.proc.poll() is not None and not self._reader.is_alive()
            if finished or time.monotonic() >= deadline:
                break
            time.sleep(0.02)
        raise AssertionError(f"no line with {text!r}; output:\n{self.output}")

    def wait_exit(self, timeout: float = 15.0) -> int:
        code = self.proc.wait(timeout=timeout)
        self._reader.join(timeout=5)
        return code

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=5)
        self._reader.join(timeout=5)


def start_sim(model: str, *flags: str, env: dict[str, str] | None = None) -> Sim:
    port = free_port()
    argv = serve_argv(model, "--host", "127.0.0.1", "--port", str(port), *flags)
    inherited = {k: v for k, v in os.environ.items() if not k.startswith("BERTH_SIM_")}
    return Sim(argv, {**inherited, **FAST, **(env or {})}, port)


@pytest.fixture
def launch() -> Iterator[list[Sim]]:
    """Start simulators with ``start_sim`` and append them here; all are killed afterwards."""
    started: list[Sim] = []
    yield started
    for sim in started:
        sim.kill()


def run(launch: list[Sim], model: str, *flags: str, **env: str) -> Sim:
    sim = start_sim(model, *flags, env=env)
    launch.append(sim)
    return sim


@pytest.fixture(scope="module")
def chat_sim() -> Iterator[Sim]:
    sim = start_sim(
        "Qwen/Qwen3-0.6B",
        "--api-key", API_KEY,
        "--served-model-name", "small-chat", "qwen",
        "--max-model-len", "512",
        "--swap-space", "16",
        "--trust-remote-code",
        env=build_env(reply_tokens=6),
    )  # fmt: skip
    try:
        sim.wait_for("Application startup complete.")
        yield sim
    finally:
        sim.kill()


@pytest.fixture(scope="module")
def embed_sim() -> Iterator[Sim]:
    sim = start_sim("BAAI/bge-m3", "--api-key", API_KEY, env=build_env(model_json=BGE_M3))
    try:
        sim.wait_for("Application startup complete.")
        yield sim
    finally:
        sim.kill()


def client(sim: Sim) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{sim.base}/v1", api_key=API_KEY, max_retries=0, timeout=10)


def scrape(sim: Sim) -> dict[str, float]:
    """Every sample on /metrics, keyed by name and labels."""
    body = httpx.get(f"{sim.base}/metrics", timeout=5).text
    samples = {}
    for family in text_string_to_metric_families(body):
        for sample in family.samples:
            labels = ",".join(f"{k}={v}" for k, v in sorted(sample.labels.items()))
            samples[f"{sample.name}{{{labels}}}"] = sample.value
    return samples


def sample(samples: dict[str, float], name: str, **labels: str) -> float:
    wanted = ",".join(f"{k}={v}" for k, v in sorted({"engine": "0", **labels}.items()))
    return samples[f"{name}{{{wanted}}}"]


# ---------------------------------------------------------------- serving


def test_the_openai_client_gets_a_chat_answer_cut_by_max_tokens(chat_sim: Sim) -> None:
    reply = client(chat_sim).chat.completions.create(
        model="small-chat", messages=[{"role": "user", "content": "Say hello"}], max_tokens=5
    )
    assert reply.model == "small-chat"
    assert reply.choices[0].message.content == "The quick brown fox jumps"
    assert reply.choices[0].finish_reason == "length"
    # 2 words + 4 template tokens for the message + 3 for the reply's header
    assert (reply.usage.prompt_tokens, reply.usage.completion_tokens) == (9, 5)


def test_a_streamed_chat_arrives_token_by_token_and_ends_with_usage(chat_sim: Sim) -> None:
    stream = client(chat_sim).chat.completions.create(
        model="qwen",
        messages=[{"role": "user", "content": "Hi"}],
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(stream)
    contents = [c.choices[0].delta.content for c in chunks if c.choices]
    assert chunks[0].choices[0].delta.role == "assistant"
    assert "".join(c or "" for c in contents) == "The quick brown fox jumps over"
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "stop"
    assert chunks[-1].usage.completion_tokens == 6


def test_completions_stop_by_themselves_unless_max_tokens_cuts_them(chat_sim: Sim) -> None:
    api = client(chat_sim)
    natural = api.completions.create(model="small-chat", prompt="Once upon a time")
    cut = api.completions.create(model="small-chat", prompt="Once upon a time", max_tokens=2)
    assert (natural.choices[0].text, natural.choices[0].finish_reason) == (
        "The quick brown fox jumps over",
        "stop",
    )
    assert (cut.choices[0].text, cut.choices[0].finish_reason) == ("The quick", "length")
    assert cut.usage.prompt_tokens == 4


def test_streamed_completions_honour_ignore_eos(chat_sim: Sim) -> None:
    stream = client(chat_sim).completions.create(
        model="small-chat", prompt="x", max_tokens=10, stream=True, extra_body={"ignore_eos": True}
    )
    chunks = list(stream)
    assert len(chunks) == 10
    assert chunks[-1].choices[0].finish_reason == "length"


def test_the_openai_client_gets_embeddings_from_a_pooling_model(embed_sim: Sim) -> None:
    api = client(embed_sim)
    reply = api.embeddings.create(model="BAAI/bge-m3", input=["a cat", "a dog", "a cat"])
    vectors = [item.embedding for item in reply.data]
    assert [len(v) for v in vectors] == [1024, 1024, 1024]
    assert vectors[0] == pytest.approx(vectors[2]) and vectors[0] != pytest.approx(vectors[1])
    assert sum(v * v for v in vectors[0]) == pytest.approx(1.0, abs=1e-4)
    assert reply.usage.prompt_tokens == 6


def test_a_pooling_model_refuses_chat_as_vllm_does(embed_sim: Sim) -> None:
    with pytest.raises(openai.BadRequestError) as raised:
        client(embed_sim).chat.completions.create(
            model="BAAI/bge-m3", messages=[{"role": "user", "content": "hi"}]
        )
    assert raised.value.body["message"] == "The model does not support Chat Completions API"


def test_an_encoder_has_no_kv_cache_lines(embed_sim: Sim) -> None:
    assert "Supported_tasks: ['encode', 'embed']" in embed_sim.output
    assert "GPU KV cache size" not in embed_sim.output


@pytest.mark.parametrize("header", [None, "Bearer wrong", API_KEY])
def test_a_missing_or_wrong_api_key_gets_401(chat_sim: Sim, header: str | None) -> None:
    headers = {"Authorization": header} if header else {}
    response = httpx.get(f"{chat_sim.base}/v1/models", headers=headers, timeout=5)
    assert response.status_code == 401
    assert response.json() == {
        "error": {"message": "Unauthorized", "type": "AuthenticationError", "param": None,
                  "code": 401}
    }  # fmt: skip


def test_health_and_metrics_need_no_key_and_health_is_empty(chat_sim: Sim) -> None:
    health = httpx.get(f"{chat_sim.base}/health", timeout=5)
    assert (health.status_code, health.content) == (200, b"")
    assert httpx.get(f"{chat_sim.base}/metrics", timeout=5).status_code == 200


def test_models_and_version_describe_the_served_names(chat_sim: Sim) -> None:
    models = client(chat_sim).models.list()
    assert [m.id for m in models.data] == ["small-chat", "qwen"]
    assert models.data[0].model_extra["max_model_len"] == 512
    assert httpx.get(f"{chat_sim.base}/version", timeout=5).json() == {"version": "0.11.0"}


def test_an_unknown_model_gets_vllms_404(chat_sim: Sim) -> None:
    with pytest.raises(openai.NotFoundError) as raised:
        client(chat_sim).completions.create(model="gpt-4", prompt="hi")
    # vLLM 0.32's words (the conformance suite's real engine): it names what it serves.
    assert raised.value.body["message"] == (
        "The model `gpt-4` does not exist. Valid aliases: small-chat, qwen."
    )


def test_a_prompt_longer_than_max_model_len_gets_vllms_400(chat_sim: Sim) -> None:
    with pytest.raises(openai.BadRequestError) as raised:
        client(chat_sim).completions.create(model="qwen", prompt="word " * 600)
    assert raised.value.status_code == 400
    assert raised.value.body["message"] == (
        "This model's maximum context length is 512 tokens. However, your request has 600 "
        "input tokens. Please reduce the length of the input messages."
    )


def test_max_tokens_past_the_context_gets_vllms_400(chat_sim: Sim) -> None:
    with pytest.raises(openai.BadRequestError) as raised:
        client(chat_sim).completions.create(model="qwen", prompt="word " * 500, max_tokens=20)
    assert raised.value.body["message"] == (
        "'max_tokens' or 'max_completion_tokens' is too large: 20. This model's maximum "
        "context length is 512 tokens and your request has 500 input tokens (20 > 512 - 500)."
    )


def test_metrics_parse_and_their_counters_grow_with_traffic(chat_sim: Sim) -> None:
    before = scrape(chat_sim)
    client(chat_sim).completions.create(model="qwen", prompt="one two three", max_tokens=4)
    after = scrape(chat_sim)
    name = {"model_name": "small-chat"}
    grew = {
        metric: sample(after, metric, **name) - sample(before, metric, **name)
        for metric in (
            "vllm:prompt_tokens_total",
            "vllm:generation_tokens_total",
            "vllm:time_to_first_token_seconds_count",
            "vllm:e2e_request_latency_seconds_count",
        )
    }
    assert grew == {
        "vllm:prompt_tokens_total": 3,
        "vllm:generation_tokens_total": 4,
        "vllm:time_to_first_token_seconds_count": 1,
        "vllm:e2e_request_latency_seconds_count": 1,
    }
    assert sample(after, "vllm:num_requests_running", **name) == 0
    assert sample(after, "vllm:kv_cache_usage_perc", **name) == 0
    assert sample(after, "vllm:request_success_total", finished_reason="length", **name) >= 1


def test_the_prefix_cache_hits_the_blocks_two_chats_share_and_counts_them_in_tokens(
    chat_sim: Sim,
) -> None:
    system = {"role": "system", "content": " ".join(f"w{i}" for i in range(100))}
    name = {"model_name": "small-chat"}

    def hits_and_queries(user: str) -> tuple[float, float]:
        before = scrape(chat_sim)
        client(chat_sim).chat.completions.create(
            model="qwen", messages=[system, {"role": "user", "content": user}], max_tokens=2
        )
        after = scrape(chat_sim)
        return tuple(  # type: ignore[return-value]
            sample(after, metric, **name) - sample(before, metric, **name)
            for metric in ("vllm:prefix_cache_hits_total", "vllm:prefix_cache_queries_total")
        )

    # 113 tokens: the system message's 104 and the user's 6 (4 of framing), then 3 of the reply's.
    assert hits_and_queries("alpha beta") == (0, 113)
    # The first 107 tokens agree (up to the user's words): 6 whole blocks of 16.
    assert hits_and_queries("gamma delta") == (96, 113)
    # All of it again: every whole block but the last token's, 7 blocks.
    assert hits_and_queries("alpha beta") == (112, 113)


def test_hundreds_of_concurrent_streams_are_paced_not_serialised(chat_sim: Sim) -> None:
    """300 streams of 20 tokens at 100 tokens/s: each takes ~0.2 s, so together well under
    a few seconds on one core — and never faster than the pace."""

    async def one(session: aiohttp.ClientSession) -> int:
        body = {"model": "qwen", "prompt": "go", "max_tokens": 20, "ignore_eos": True,
                "stream": True}  # fmt: skip
        async with session.post(f"{chat_sim.base}/v1/completions", json=body) as response:
            raw = await response.text()
        return sum(1 for line in raw.splitlines() if line.startswith('data: {"id"'))

    async def all_of_them() -> list[int]:
        headers = {"Authorization": f"Bearer {API_KEY}"}
        connector = aiohttp.TCPConnector(limit=0)
        async with aiohttp.ClientSession(headers=headers, connector=connector) as session:
            return await asyncio.gather(*(one(session) for _ in range(300)))

    began = time.monotonic()
    counts = asyncio.run(all_of_them())
    elapsed = time.monotonic() - began
    assert counts == [20] * 300
    assert 0.19 <= elapsed < 8.0


def test_startup_lines_appear_in_vllms_order_and_format(chat_sim: Sim) -> None:
    positions = [
        next(i for i, line in enumerate(chat_sim.lines) if text in line) for text in STARTUP_LINES
    ]
    assert positions == sorted(positions)
    for text in STARTUP_LINES[:-1]:
        line = chat_sim.wait_for(text, timeout=0)
        assert LOG_LINE.match(line), line
    assert "Model loading took 1.40 GiB memory and" in chat_sim.output
    assert "Maximum concurrency for 512 tokens per request: " in chat_sim.output


def test_flags_it_does_not_model_are_logged_as_ignored(chat_sim: Sim) -> None:
    out = chat_sim.output
    assert "The engine simulator does not model --swap-space 16; ignored." in out
    assert "The engine simulator does not model --trust-remote-code; ignored." in out
    assert API_KEY not in out  # the key is redacted from the args dump


# ---------------------------------------------------------------- failures


def engine_failed(sim: Sim, line: str) -> None:
    """vLLM's failure shape: the cause on an EngineCore ERROR line, then the wrapper, exit 1."""
    assert sim.wait_exit() == 1
    assert "EngineCore failed to start." in sim.output
    assert any(line in text and "ERROR" in text for text in sim.lines), sim.output
    assert sim.lines[-1].endswith(
        "RuntimeError: Engine core initialization failed. See root cause above. "
        "Failed core proc(s): {'EngineCore': 1}"
    )
    assert "Application startup complete." not in sim.output


def test_an_injected_oom_at_load_prints_torchs_line(launch: list[Sim]) -> None:
    sim = run(launch, "m", **build_env(oom_at_load=True))
    engine_failed(sim, "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate ")


def test_weights_bigger_than_the_share_fail_with_a_cuda_oom(launch: list[Sim]) -> None:
    env = build_env(gpu_memory="24GiB", model_json=LLAMA_8B)
    sim = run(launch, "meta-llama/Llama-3.1-8B-Instruct", "--gpu-memory-utilization", "0.5", **env)
    engine_failed(
        sim,
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 478.64 MiB. GPU 0 has a "
        "total capacity of 24.00 GiB of which 321.98 MiB is free. Including non-PyTorch memory, "
        "this process has 11.69 GiB memory in use.",
    )


def test_hidden_memory_turns_a_placement_that_fits_into_an_oom(launch: list[Sim]) -> None:
    env = build_env(gpu_memory="24GiB", model_json=LLAMA_8B, hidden_memory="8GiB")
    sim = run(launch, "meta-llama/Llama-3.1-8B-Instruct", "--max-model-len", "8192", **env)
    engine_failed(sim, "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate ")


def test_a_kv_cache_that_cannot_hold_max_model_len_fails_like_vllm(launch: list[Sim]) -> None:
    env = build_env(gpu_memory="24GiB", model_json=LLAMA_8B)
    sim = run(launch, "meta-llama/Llama-3.1-8B-Instruct", **env)
    engine_failed(sim, "ValueError: To serve at least one request with the model's max seq len")
    available = sim.wait_for("Available KV cache memory:", timeout=0).split(": ")[-1]
    message = re.search(
        r"ValueError: (To serve at least one request with the model's max seq len \(131072\), "
        r"\(16\.00 GiB KV cache is needed, which is larger than the available KV cache memory "
        r"\((\d+\.\d\d) GiB\)\. Based on the available memory, the estimated maximum model "
        r"length is (\d+)\. Try increasing `gpu_memory_utilization` or decreasing "
        r"`max_model_len` when initializing the engine\.)$",
        sim.output,
        re.MULTILINE,
    )
    assert message, sim.output
    assert available == f"{message.group(2)} GiB"
    # Llama-3.1-8B holds 128 KiB per token: 8192 tokens per GiB, to the 16-token block.
    assert abs(int(message.group(3)) - float(message.group(2)) * 8192) < 16 + 8192 * 0.005


def test_a_share_that_holds_only_the_weights_has_no_cache_memory(launch: list[Sim]) -> None:
    env = build_env(gpu_memory="24GiB", model_json=LLAMA_8B)
    flags = ("--gpu-memory-utilization", "0.64", "--max-model-len", "4096")
    sim = run(launch, "meta-llama/Llama-3.1-8B-Instruct", *flags, **env)
    engine_failed(
        sim,
        "ValueError: No available memory for the cache blocks. Try increasing "
        "`gpu_memory_utilization` when initializing the engine.",
    )


def test_free_memory_below_the_share_fails_before_loading(launch: list[Sim]) -> None:
    sim = run(launch, "m", **build_env(gpu_memory="24GiB", free_memory="10GiB"))
    engine_failed(
        sim,
        "ValueError: Free memory on device cuda:0 (10.00/24.00 GiB) on startup is less than "
        "desired GPU memory utilization (0.9, 21.60 GiB). Decrease GPU memory utilization or "
        "reduce GPU memory used by other processes.",
    )
    assert "Starting to load model" not in sim.output


def test_the_first_attempts_fail_and_a_later_one_serves(launch: list[Sim], tmp_path: Path) -> None:
    env = build_env(fail_attempts=2, attempts_file=str(tmp_path / "attempts"))
    for _ in range(2):
        engine_failed(run(launch, "m", **env), "ValueError: Free memory on device cuda:0")
    third = run(launch, "m", **env)
    third.wait_for("Application startup complete.")
    assert httpx.get(f"{third.base}/health", timeout=5).status_code == 200
    assert (tmp_path / "attempts").read_text() == "3"


def test_a_crash_after_n_seconds_turns_health_503_then_exits(launch: list[Sim]) -> None:
    sim = run(launch, "m", **build_env(crash_after_s=0.3, dead_linger_s=1.0))
    sim.wait_for("Application startup complete.")
    assert httpx.get(f"{sim.base}/health", timeout=5).status_code == 200
    sim.wait_for("EngineCore encountered a fatal error.", timeout=5)
    assert httpx.get(f"{sim.base}/health", timeout=5).status_code == 503
    assert sim.wait_exit() == 1
    assert "RuntimeError: CUDA error: an illegal memory access was encountered" in sim.output
    assert (
        "vllm.v1.engine.exceptions.EngineDeadError: EngineCore encountered an issue. "
        "See stack trace (above) for the root cause."
    ) in sim.output


def test_a_hung_start_never_binds_and_sigterm_still_stops_it(launch: list[Sim]) -> None:
    sim = run(launch, "m", **build_env(hang_at_start=True))
    sim.wait_for("Starting to load model m...")
    time.sleep(0.2)
    with pytest.raises(httpx.ConnectError):
        httpx.get(f"{sim.base}/health", timeout=2)
    sim.proc.send_signal(signal.SIGTERM)
    assert sim.wait_exit() == 0
    assert sim.lines[-1].endswith("Shutting down FastAPI HTTP server.")


def test_sigterm_while_serving_exits_cleanly(launch: list[Sim]) -> None:
    sim = run(launch, "m")
    sim.wait_for("Application startup complete.")
    sim.proc.send_signal(signal.SIGTERM)
    assert sim.wait_exit() == 0
    assert "Shutting down FastAPI HTTP server." in sim.output
    assert sim.lines[-2].endswith("INFO:     Application shutdown complete.")


def test_a_taken_port_fails_with_uvicorns_line(launch: list[Sim]) -> None:
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        argv = serve_argv("m", "--host", "127.0.0.1", "--port", str(port))
        sim = Sim(argv, {**os.environ, **FAST}, port)
        launch.append(sim)
        assert sim.wait_exit() == 1
    assert (
        f"ERROR:    [Errno 98] error while attempting to bind on address ('127.0.0.1', {port}): "
        "address already in use"
    ) in sim.output


def test_a_bad_flag_value_exits_2_as_argparse_does(launch: list[Sim]) -> None:
    sim = run(launch, "m", "--dtype", "int3")
    assert sim.wait_exit() == 2
    assert "argument --dtype: invalid choice: 'int3'" in sim.output


# ---------------------------------------------------------------- the memory model itself


def test_the_memory_model_matches_vllms_published_llama_figures() -> None:
    """19.28 GiB of KV for Llama-3.1-8B at 131,072 tokens: vLLM logged 157,936 tokens, 1.20x."""
    facts = ModelFacts(
        num_layers=32, num_kv_heads=8, head_dim=128, hidden_size=4096, intermediate_size=14336,
        vocab_size=128256, max_model_len=131072, weights_bytes=LLAMA_8B["weights_bytes"],
    )  # fmt: skip
    shape = EngineShape(
        gpu_memory_utilization=0.9, max_model_len=131072, block_size=16, max_num_seqs=1024,
        max_num_batched_tokens=8192, dtype="bfloat16", kv_cache_dtype="auto",
        kv_cache_memory_bytes=int(19.28 * GIB),
    )  # fmt: skip
    plan = plan_memory(facts, shape, GpuState(total=80 * GIB, free=80 * GIB, hidden=0))
    assert (plan.kv_tokens, f"{plan.concurrency:.2f}") == (157_936, "1.20")


def test_max_model_len_auto_fits_the_context_to_the_kv_cache() -> None:
    facts = ModelFacts(
        num_layers=32, num_kv_heads=8, head_dim=128, hidden_size=4096, intermediate_size=14336,
        vocab_size=128256, max_model_len=131072, weights_bytes=LLAMA_8B["weights_bytes"],
    )  # fmt: skip
    shape = EngineShape(
        gpu_memory_utilization=0.9, max_model_len=None, block_size=16, max_num_seqs=256,
        max_num_batched_tokens=2048, dtype="bfloat16", kv_cache_dtype="auto",
    )  # fmt: skip
    plan = plan_memory(facts, shape, GpuState(total=24 * GIB, free=24 * GIB, hidden=0))
    # The whole cache but the pool's null block (one block of 16 tokens) goes to one request.
    assert plan.max_model_len == plan.kv_tokens - 16 < 131072
    assert f"{plan.concurrency:.2f}" == "1.00"


def test_build_env_refuses_what_the_simulator_would_not_read() -> None:
    assert build_env(gpu_memory="24GiB", oom_at_load=True, model_json={"layers": 2}) == {
        "BERTH_SIM_GPU_MEMORY": "24GiB",
        "BERTH_SIM_OOM_AT_LOAD": "1",
        "BERTH_SIM_MODEL_JSON": '{"layers": 2}',
    }
    with pytest.raises(TypeError, match="unknown simulator settings: gpu_ram"):
        build_env(gpu_ram="24GiB")
    with pytest.raises(ValueError, match="BERTH_SIM_FAIL_KIND='melt'"):
        build_env(fail_kind="melt")


def test_the_simulator_imports_neither_django_nor_placement() -> None:
    probe = (
        "import sys, clusters.simulator.engine\n"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('django', 'placement'))\n"
        "print(json.dumps(bad))"
    )
    result = subprocess.run(
        [sys.executable, "-c", f"import json\n{probe}"],
        cwd=REPO, capture_output=True, text=True, timeout=30, check=True,
    )  # fmt: skip
    assert json.loads(result.stdout) == []


def test_uds_listens_on_a_unix_socket_and_not_on_the_port(launch, tmp_path):
    """As vLLM's --uds: the socket is listened on, and --host and --port are ignored."""
    path = tmp_path / "engine.sock"
    sim = run(launch, "Qwen/Qwen3-0.6B", "--max-model-len", "512", "--uds", str(path))
    sim.wait_for(f"Starting vLLM API server 0 on unix:{path}")
    sim.wait_for("Application startup complete.")
    with httpx.Client(transport=httpx.HTTPTransport(uds=str(path)), timeout=10) as engine:
        assert engine.get("http://localhost/health").status_code == 200
    with pytest.raises(httpx.ConnectError):
        httpx.get(f"{sim.base}/health", timeout=2)
