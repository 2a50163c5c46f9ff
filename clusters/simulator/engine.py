"""Engine simulator: a drop-in for ``vllm serve`` that needs no GPU.

Usage (the argv a launcher would give vLLM, after ``-m clusters.simulator.engine``)::

    python -m clusters.simulator.engine serve MODEL [vllm serve flags…]
    python -m clusters.simulator.engine --version

From Python: ``serve_argv(model, *flags)`` builds that argv and ``build_env(**settings)`` the
environment (both in clusters.simulator.contract, re-exported here).

Modelled flags: ``--host`` (default all interfaces), ``--port`` (8000; 0 picks a free one, and
the ``Starting vLLM API server`` line says which), ``--uds`` (a Unix socket instead of both),
``--api-key`` (repeatable; VLLM_API_KEY too),
``--served-model-name`` (several), ``--max-model-len`` (``4096``, ``4k``, ``4K``, ``auto``),
``--gpu-memory-utilization`` (0.9), ``--kv-cache-dtype``, ``--kv-cache-memory-bytes``,
``--block-size``, ``--max-num-seqs``, ``--max-num-batched-tokens``,
``--[no-]enable-chunked-prefill``, ``--enforce-eager``, ``-tp/--tensor-parallel-size``,
``-pp/--pipeline-parallel-size``, ``--dtype``, ``--runner``, ``--convert``, ``--task``,
``--disable-log-stats``, ``--disable-uvicorn-access-log``. Every other flag is accepted and
logged as ignored. ``VLLM_ALLOW_LONG_MAX_MODEL_LEN=1`` is honoured.

Environment (simulated hardware, speed and failures; sizes in bytes or ``80GiB``):

=================================== =========== =================================================
BERTH_SIM_GPU_MEMORY                80GiB       memory of each GPU it was given (CUDA's total)
BERTH_SIM_GPU_NAME                  H100 80GB   'A100' or < 70 GiB: vLLM's small scheduler
                                                defaults (2048 batched tokens, 256 seqs)
BERTH_SIM_FREE_MEMORY               the total   free memory on the device at startup
BERTH_SIM_HIDDEN_MEMORY             0           memory used inside its share that no estimate
                                                knows of (OOM / short KV after placement)
BERTH_SIM_MODEL_JSON                none        model facts: inline JSON or a file (config.json
                                                keys + weights_bytes, encoder_only, …)
BERTH_SIM_WEIGHTS_BYTES             1.4 GiB     checkpoint bytes (overrides the JSON)
BERTH_SIM_NUM_LAYERS                28          num_hidden_layers (overrides the JSON)
BERTH_SIM_NUM_KV_HEADS              8           num_key_value_heads (overrides the JSON)
BERTH_SIM_HEAD_DIM                  128         head_dim (overrides the JSON)
BERTH_SIM_ENCODER_ONLY              0           1: no KV cache, embeddings only
BERTH_SIM_LOAD_S_PER_GB             0.5         load seconds per GB (10^9 B) of weights per GPU
BERTH_SIM_INIT_S                    1.0         seconds of profiling and graph capture
BERTH_SIM_TOKENS_PER_SECOND         40          tokens per second of each stream
BERTH_SIM_TTFT_S                    0.1         time to first token (plus the prefill below)
BERTH_SIM_PREFILL_TOKENS_PER_SECOND 20000       prompt tokens per second before the first token
BERTH_SIM_REPLY_TOKENS              32          natural reply length ('stop'); max_tokens below
                                                it gives 'length'; ignore_eos runs to max_tokens
BERTH_SIM_CRASH_AFTER_S             none        die N s after serving starts: /health 503, exit 1
BERTH_SIM_CRASH_KIND                cuda_error  cuda_error | oom: what the crash prints
BERTH_SIM_DEAD_LINGER_S             1.0         seconds a dead engine answers 503 before exiting
                                                (negative: stays up, dead)
BERTH_SIM_HANG_AT_START             0           1: hang while loading; its port refuses connections
BERTH_SIM_OOM_AT_LOAD               0           1: torch.OutOfMemoryError while loading weights
BERTH_SIM_FAIL_ATTEMPTS             0           the first N starts fail …
BERTH_SIM_ATTEMPTS_FILE             none        … counted in this file (one integer)
BERTH_SIM_FAIL_KIND                 free_memory free_memory | oom | cuda_error
BERTH_SIM_VLLM_VERSION              0.11.0      printed at start, served on /version
BERTH_SIM_STATS_INTERVAL_S          10          period of the 'Avg prompt throughput' lines
=================================== =========== =================================================

Exit status: 0 after SIGTERM/SIGINT (``Shutting down FastAPI HTTP server.``), 1 when the engine
fails to start or dies, 2 for a malformed argv or BERTH_SIM_* value. The memory rules live in
memory.py; the lines the console's log classifier looks for are vLLM's own (reference/vllm.md
§3.4, §3.5). Never imports Django or ``placement``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import signal
import socket
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from aiohttp import web

from clusters.simulator import memory
from clusters.simulator.cli import parse_argv, unrecognized
from clusters.simulator.config import ConfigFailure, Resolved, gpu_state, next_attempt, resolve
from clusters.simulator.contract import SettingsError, SimSettings, build_env, serve_argv
from clusters.simulator.memory import GIB, MemoryPlan, StartupFailure, gib
from clusters.simulator.metrics import EngineMetrics
from clusters.simulator.prefix_cache import PrefixCache
from clusters.simulator.scheduler import Scheduler
from clusters.simulator.server import ROUTES, EngineState, make_app, uvicorn_access_logger
from clusters.simulator.vlog import API, CORE, VllmLog

__all__ = ["build_env", "main", "serve_argv"]

CUDA_ERROR = (
    "CUDA error: an illegal memory access was encountered\n"
    "CUDA kernel errors might be asynchronously reported at some other API call, so the "
    "stacktrace below might be incorrect."
)
ENGINE_INIT_FAILED = (
    "RuntimeError: Engine core initialization failed. See root cause above. "
    "Failed core proc(s): {'EngineCore': 1}"
)
WEIGHT_FILES = ("*.safetensors", "*.bin", "*.pt")
ENGINE_DEAD_ERROR = (
    "vllm.v1.engine.exceptions.EngineDeadError: EngineCore encountered an issue. "
    "See stack trace (above) for the root cause."
)


ACCESS_LOGGER = logging.getLogger("berth.simulator.access")  # only a switch: lines go to VllmLog


class Shutdown(Exception):
    """SIGTERM or SIGINT arrived."""


class BindFailure(Exception):
    pass


class Engine:
    """One simulated ``vllm serve`` process, from the version line to the last shutdown line."""

    def __init__(
        self, ns: argparse.Namespace, ignored: list[list[str]], settings: SimSettings
    ) -> None:
        self.ns = ns
        self.ignored = ignored
        self.settings = settings
        self.log = VllmLog()
        self.model = str(ns.model_tag or ns.model or "Qwen/Qwen3-0.6B")
        self.names = list(ns.served_model_name or [self.model])
        self.stop = asyncio.Event()
        self.exit_code = 0
        self.state: EngineState | None = None

    # ------------------------------------------------------------ the whole life

    async def run(self) -> int:
        self._install_signals()
        try:
            return await self._run()
        except Shutdown:
            self._log_shutdown(serving=False)
            return 0
        except ConfigFailure as failure:
            self.log.printed_traceback(API, "config", failure.line)
            return 1
        except BindFailure as failure:
            self.log.plain(API, f"ERROR:    {failure}")
            return 1
        except StartupFailure as failure:
            self._log_engine_failure(failure)
            return 1

    def _install_signals(self) -> None:
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, self.stop.set)

    async def _run(self) -> int:
        self._log_banner()
        resolved = resolve(self.ns, self.model, self.settings)
        self.log.api("model.py:547", f"Resolved architecture: {resolved.facts.architecture}")
        if resolved.shape.max_model_len is not None:  # auto is known only after profiling
            self.log.api("model.py:1510", f"Using max model len {resolved.shape.max_model_len}")
        sock = self._reserve_port()
        plan = await self._start_engine(resolved)
        return await self._serve(resolved, plan, sock)

    # ------------------------------------------------------------ before the engine

    def _log_banner(self) -> None:
        self.log.api("api_server.py:1839", f"vLLM API server version {self.settings.vllm_version}")
        self.log.api("utils.py:233", f"non-default args: {self._non_default_args()}")
        for flag in self.ignored:
            shown = " ".join(flag)
            self.log.api(
                "simulator.py:1",
                f"The engine simulator does not model {shown}; ignored.",
                level="WARNING",
            )

    def _non_default_args(self) -> dict[str, object]:
        defaults = vars(parse_argv(["serve"])[0])
        shown: dict[str, object] = {}
        for key, value in vars(self.ns).items():
            if key in ("command", "version") or value == defaults.get(key):
                continue
            shown[key] = ["[redacted]"] * len(value) if key == "api_key" else value
        return shown

    def _reserve_port(self) -> socket.socket:
        """Bind now, listen only when ready: until then a client gets 'connection refused',
        which is how a launcher tells 'still starting' from 'serving' (reference §3.5)."""
        if self.ns.uds:
            return self._reserve_socket(self.ns.uds)
        host = self.ns.host or "0.0.0.0"
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, self.ns.port))
        except OSError as error:
            sock.close()
            raise BindFailure(
                f"[Errno {error.errno}] error while attempting to bind on address "
                f"({host!r}, {self.ns.port}): {(error.strerror or str(error)).lower()}"
            ) from error
        return sock

    def _reserve_socket(self, path: str) -> socket.socket:
        """--uds: bound as vLLM binds it (no stale file removed first)."""
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.bind(path)
        except OSError as error:
            sock.close()
            raise BindFailure(
                f"[Errno {error.errno}] error while attempting to bind on address {path!r}: "
                f"{(error.strerror or str(error)).lower()}"
            ) from error
        return sock

    # ------------------------------------------------------------ engine start-up

    async def _start_engine(self, resolved: Resolved) -> MemoryPlan:
        """Print vLLM's start-up lines, stopping where vLLM would; sleeps stand for the work."""
        began = time.monotonic()
        facts, shape = resolved.facts, resolved.shape
        gpu = gpu_state(self.settings)
        self.log.core(
            "core.py:77",
            f"Initializing a V1 LLM engine (v{self.settings.vllm_version}) with config: "
            f"model='{self.model}', dtype=torch.{shape.dtype}, "
            f"max_seq_len={shape.max_model_len or facts.max_model_len}, "
            f"tensor_parallel_size={shape.tensor_parallel_size}, "
            f"pipeline_parallel_size={shape.pipeline_parallel_size}, "
            f"kv_cache_dtype={shape.kv_cache_dtype}, enforce_eager={shape.enforce_eager}, "
            f"served_model_name={self.names[0]}",
        )
        injected = self._injected_failure(resolved)
        self._fail_at("init_device", injected)
        memory.check_free_memory(shape, gpu)
        await self._load(resolved, injected)
        plan = await self._profile(resolved, injected)
        self.log.core(
            "core.py:210",
            f"init engine (profile, create kv cache, warmup model) took "
            f"{time.monotonic() - began:.2f} seconds",
        )
        return plan

    def _injected_failure(self, resolved: Resolved) -> StartupFailure | None:
        """BERTH_SIM_FAIL_ATTEMPTS: this start fails if it is one of the first N."""
        path = self.settings.attempts_file
        attempt = next_attempt(path) if path else 1
        if attempt > self.settings.fail_attempts:
            return None
        kind = self.settings.fail_kind
        gpu = gpu_state(self.settings)
        if kind == "free_memory":
            requested = int(resolved.shape.gpu_memory_utilization * gpu.total)
            busy = memory.GpuState(gpu.total, requested // 2, gpu.hidden)
            try:
                memory.check_free_memory(resolved.shape, busy)
            except StartupFailure as failure:
                return failure
        if kind == "cuda_error":
            return StartupFailure("load", "RuntimeError", CUDA_ERROR)
        return self._forced_oom(resolved)

    def _forced_oom(self, resolved: Resolved) -> StartupFailure:
        """An OOM halfway through the weights (BERTH_SIM_OOM_AT_LOAD, or an injected attempt)."""
        gpu = gpu_state(self.settings)
        weights = memory.weights_per_gpu(resolved.facts, resolved.shape)
        return memory.load_oom(resolved.facts, resolved.shape, gpu, gpu.hidden + weights // 2)

    @staticmethod
    def _fail_at(stage: str, failure: StartupFailure | None) -> None:
        if failure is not None and failure.stage == stage:
            raise failure

    async def _load(self, resolved: Resolved, injected: StartupFailure | None) -> None:
        """Sleep in proportion to the weights; an OOM stops the load where memory ran out."""
        facts, shape = resolved.facts, resolved.shape
        self.log.core("gpu_model_runner.py:2602", f"Starting to load model {self.model}...")
        if self.settings.hang_at_start:
            await self._sleep(None)
        weights = memory.weights_per_gpu(facts, shape)
        load_s = weights / 1e9 * self.settings.load_s_per_gb
        failure = self._load_failure(resolved, injected)
        if failure is not None:
            await self._sleep(load_s * 0.5)
            raise failure
        await self._sleep(load_s)
        shards = max(1, round(facts.weights_bytes / (5 * GIB)))
        self.log.plain(
            CORE,
            f"Loading safetensors checkpoint shards: 100% Completed | {shards}/{shards} "
            f"[00:{min(59, int(load_s)):02d}<00:00, {load_s / shards:.2f}s/it]",
        )
        self.log.core("default_loader.py:267", f"Loading weights took {load_s:.2f} seconds")
        self.log.core(
            "gpu_model_runner.py:2653",
            f"Model loading took {gib(weights)} GiB memory and {load_s + 0.05:.6f} seconds",
        )

    def _weights_missing(self) -> bool:
        """A local folder without a checkpoint: vLLM's loader finds nothing to load."""
        folder = Path(self.model)
        return folder.is_dir() and not any(any(folder.glob(p)) for p in WEIGHT_FILES)

    def _load_failure(
        self, resolved: Resolved, injected: StartupFailure | None
    ) -> StartupFailure | None:
        if self.settings.oom_at_load:
            return self._forced_oom(resolved)
        if injected is not None and injected.stage == "load":
            return injected
        if self._weights_missing():
            return StartupFailure(
                "load", "RuntimeError", f"Cannot find any model weights with `{self.model}`"
            )
        try:
            memory.check_weights(resolved.facts, resolved.shape, gpu_state(self.settings))
        except StartupFailure as failure:
            return failure
        return None

    async def _profile(self, resolved: Resolved, injected: StartupFailure | None) -> MemoryPlan:
        facts, shape = resolved.facts, resolved.shape
        gpu = gpu_state(self.settings)
        await self._sleep(self.settings.init_s / 2)
        self._fail_at("profile", injected)
        found = memory.profile(facts, shape, gpu)
        self._log_profile(found)
        memory.check_kv_cache(facts, shape, gpu, found)
        plan = memory.plan_memory(facts, shape, gpu)
        if shape.max_model_len is None:
            self.log.core("model.py:1510", f"Using max model len {plan.max_model_len}")
        if plan.kv_bytes_per_token:
            self.log.core("kv_cache_utils.py:1087", f"GPU KV cache size: {plan.kv_tokens:,} tokens")
            self.log.core(
                "kv_cache_utils.py:1091",
                f"Maximum concurrency for {plan.max_model_len:,} tokens per request: "
                f"{plan.concurrency:.2f}x",
            )
        await self._sleep(self.settings.init_s / 2)
        if plan.cudagraph:
            self.log.plain(
                CORE,
                "Capturing CUDA graphs (mixed prefill-decode, PIECEWISE): 100%|██████████| 67/67",
            )
            took = max(1, round(self.settings.init_s / 2))
            self.log.core(
                "gpu_model_runner.py:3480",
                f"Graph capturing finished in {took} secs, took {gib(plan.cudagraph)} GiB",
            )
        return plan

    def _log_profile(self, found: memory.Profile) -> None:
        self.log.core(
            "gpu_worker.py:298",
            f"Memory profiling takes {self.settings.init_s / 2:.2f} seconds. Total non KV cache "
            f"memory: {gib(found.non_kv)}GiB; torch peak memory increase: "
            f"{gib(found.activation)}GiB; non-torch forward increase memory: "
            f"{gib(found.non_torch)}GiB; weights memory: {gib(found.weights)}GiB.",
        )
        if found.cudagraph:
            self.log.core(
                "gpu_worker.py:305",
                f"Estimated CUDA graph memory: {gib(found.cudagraph)} GiB total",
            )
        self.log.core(
            "gpu_worker.py:299", f"Available KV cache memory: {gib(found.kv_available)} GiB"
        )

    async def _sleep(self, seconds: float | None) -> None:
        """Sleep, but wake for SIGTERM: a loading engine stops at once. None sleeps forever."""
        try:
            await asyncio.wait_for(self.stop.wait(), seconds)
        except TimeoutError:
            return
        raise Shutdown

    def _log_engine_failure(self, failure: StartupFailure) -> None:
        self.log.core("core.py:708", "EngineCore failed to start.", level="ERROR")
        self.log.logged_traceback(CORE, "core.py:708", failure.stage, failure.line)
        self.log.printed_traceback(API, "api_startup", ENGINE_INIT_FAILED)

    # ------------------------------------------------------------ serving

    def _build_state(self, resolved: Resolved, plan: MemoryPlan) -> EngineState:
        shape = resolved.shape
        cache_info = {
            "block_size": str(shape.block_size),
            "cache_dtype": shape.kv_cache_dtype,
            "gpu_memory_utilization": str(shape.gpu_memory_utilization),
            "num_gpu_blocks": str(plan.num_gpu_blocks),
            "enable_prefix_caching": str(self.prefix_caching(resolved)),
        }
        metrics = EngineMetrics(self.names[0], plan.max_model_len, cache_info)
        scheduler = Scheduler(shape.max_num_seqs, plan.num_gpu_blocks, shape.block_size, metrics)
        keys = list(self.ns.api_key or [])
        if not keys and (env_key := os.environ.get("VLLM_API_KEY")):
            keys = [env_key]
        return EngineState(
            model=self.model,
            served_names=self.names,
            max_model_len=plan.max_model_len,
            pooling=resolved.pooling,
            embedding_dim=resolved.facts.hidden_size,
            api_keys=keys,
            version=self.settings.vllm_version,
            settings=self.settings,
            scheduler=scheduler,
            metrics=metrics,
            log=self.log,
            prefix_cache=PrefixCache(
                shape.block_size, plan.num_gpu_blocks, self.prefix_caching(resolved)
            ),
        )

    def prefix_caching(self, resolved: Resolved) -> bool:
        """On unless --no-enable-prefix-caching, as in vLLM V1; a pooling model's is off."""
        return self.ns.enable_prefix_caching is not False and not resolved.pooling

    async def _serve(self, resolved: Resolved, plan: MemoryPlan, sock: socket.socket) -> int:
        self.state = self._build_state(resolved, plan)
        tasks = "['encode', 'embed']" if resolved.pooling else "['generate']"
        self.log.api("api_server.py:1611", f"Supported_tasks: {tasks}")
        runner = await self._start_http(sock)
        background = [asyncio.create_task(self._log_stats())]
        if self.settings.crash_after_s is not None:
            background.append(asyncio.create_task(self._crash_later(self.settings.crash_after_s)))
        try:
            await self.stop.wait()
            await asyncio.sleep(self.settings.shutdown_delay_s)  # a slow drain, when asked for
        finally:
            for task in background:
                task.cancel()
            self._log_shutdown(serving=True)
            await runner.cleanup()
            for line in ("Waiting for application shutdown.", "Application shutdown complete."):
                self.log.uvicorn(line)
            self.log.uvicorn(f"Finished server process [{self.log.pid}]")
        return self.exit_code

    async def _start_http(self, sock: socket.socket) -> web.AppRunner:
        assert self.state is not None
        access = None if self.ns.disable_uvicorn_access_log else ACCESS_LOGGER
        runner = web.AppRunner(
            make_app(self.state),
            access_log_class=uvicorn_access_logger(self.log),
            access_log=access,
            shutdown_timeout=1.0,
        )
        await runner.setup()
        await web.SockSite(runner, sock, backlog=2048).start()
        if sock.family == socket.AF_UNIX:
            where = f"unix:{sock.getsockname()}"
        else:
            host, port = sock.getsockname()[:2]
            where = f"http://{host}:{port}"
        self.log.api("api_server.py:1880", f"Starting vLLM API server 0 on {where}")
        self.log.api("launcher.py:36", "Available routes are:")
        for method, path, _ in ROUTES:
            self.log.api("launcher.py:44", f"Route: {path}, Methods: {method}")
        self.log.uvicorn(f"Started server process [{self.log.pid}]")
        self.log.uvicorn("Waiting for application startup.")
        self.log.uvicorn("Application startup complete.")
        return runner

    def _log_shutdown(self, serving: bool) -> None:
        self.log.api("launcher.py:101", "Shutting down FastAPI HTTP server.")
        if serving:
            self.log.uvicorn("Shutting down")

    async def _log_stats(self) -> None:
        """vLLM's periodic throughput line, printed while there is traffic."""
        assert self.state is not None
        scheduler = self.state.scheduler
        while not self.ns.disable_log_stats:
            await asyncio.sleep(self.settings.stats_interval_s)
            prompt, generation, _ = scheduler.throughput.take()
            if not (prompt or generation or scheduler.running or scheduler.waiting):
                continue
            self.log.api(
                "loggers.py:123",
                f"Engine 000: Avg prompt throughput: {prompt:.1f} tokens/s, Avg generation "
                f"throughput: {generation:.1f} tokens/s, Running: {scheduler.running} reqs, "
                f"Waiting: {scheduler.waiting} reqs, GPU KV cache usage: "
                f"{scheduler.kv_usage() * 100:.1f}%, Prefix cache hit rate: 0.0%",
            )

    async def _crash_later(self, seconds: float) -> None:
        """BERTH_SIM_CRASH_AFTER_S: the engine core dies; the API server reports it and exits."""
        assert self.state is not None
        await asyncio.sleep(seconds)
        self.state.dead = True
        self.exit_code = 1
        self.log.core("core.py:710", "EngineCore encountered a fatal error.", level="ERROR")
        self.log.logged_traceback(CORE, "core.py:710", "serve", self._crash_line())
        self.log.api("async_llm.py:480", "AsyncLLM output_handler failed.", level="ERROR")
        self.log.logged_traceback(API, "async_llm.py:480", "", ENGINE_DEAD_ERROR)
        if self.settings.dead_linger_s >= 0:
            await asyncio.sleep(self.settings.dead_linger_s)
            self.stop.set()

    def _crash_line(self) -> str:
        if self.settings.crash_kind == "oom":
            gpu = gpu_state(self.settings)
            failure = memory.cuda_oom(gpu.total // 2, gpu.total // 2, 2 * GIB, gpu.total, 0)
            return failure.line
        return f"RuntimeError: {CUDA_ERROR}"


def main(argv: Sequence[str] | None = None) -> int:
    ns, ignored = parse_argv(sys.argv[1:] if argv is None else argv)
    try:
        settings = SimSettings.from_environ()
    except SettingsError as error:
        print(f"engine simulator: {error}", file=sys.stderr)
        return 2
    if ns.version:
        print(settings.vllm_version)
        return 0
    if ns.command != "serve":
        print("usage: python -m clusters.simulator.engine serve MODEL [flags…]", file=sys.stderr)
        return 2
    if unknown := unrecognized(ignored, settings.vllm_version):
        print("usage: vllm serve [model_tag] [options]", file=sys.stderr)
        print(f"vllm: error: unrecognized arguments: {' '.join(unknown)}", file=sys.stderr)
        return 2
    with contextlib.suppress(KeyboardInterrupt):
        return asyncio.run(Engine(ns, ignored, settings).run())
    return 0


if __name__ == "__main__":
    sys.exit(main())
