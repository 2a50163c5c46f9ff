"""vLLM's Prometheus metrics (reference/vllm.md §5), fed by the traffic the simulator serves.

Names, label names (model_name, engine) and histogram buckets follow vLLM's V1
PrometheusStatLogger, so dashboards and the console's scrapers read both alike. The registry
is the simulator's own, never prometheus_client's global one.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    PlatformCollector,
    ProcessCollector,
    generate_latest,
)

LABELS = ("model_name", "engine")
TTFT_BUCKETS = (
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0,
    2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0,
)  # fmt: skip
TPOT_BUCKETS = (
    0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0,
    2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0,
)  # fmt: skip
LATENCY_BUCKETS = (
    0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0,
    60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0,
)  # fmt: skip
FINISHED_REASONS = ("stop", "length", "abort")


def buckets_1_2_5(limit: int) -> list[float]:
    """1, 2, 5, 10, 20, 50, … up to limit: vLLM's token-count buckets."""
    buckets: list[float] = []
    exponent = 0
    while True:
        for mantissa in (1, 2, 5):
            value = mantissa * 10**exponent
            if value > limit:
                return buckets
            buckets.append(float(value))
        exponent += 1


@dataclass(frozen=True)
class FinishedRequest:
    """What one request did, for the per-request histograms."""

    prompt_tokens: int
    generation_tokens: int
    finished_reason: str
    queue_s: float
    ttft_s: float
    e2e_s: float
    max_tokens: int
    n: int


class EngineMetrics:
    def __init__(self, model_name: str, max_model_len: int, cache_info: Mapping[str, str]) -> None:
        self.registry = CollectorRegistry()
        self.labels = {"model_name": model_name, "engine": "0"}
        ProcessCollector(registry=self.registry)
        PlatformCollector(registry=self.registry)
        self._gauges()
        self._counters()
        self._histograms(max_model_len)
        info = Gauge(
            "vllm:cache_config_info",
            "Information of the LLMEngine CacheConfig",
            [*LABELS, *cache_info],
            registry=self.registry,
        )
        info.labels(**self.labels, **cache_info).set(1)

    def _gauge(self, name: str, doc: str) -> Gauge:
        return Gauge(name, doc, LABELS, registry=self.registry).labels(**self.labels)

    def _counter(self, name: str, doc: str) -> Counter:
        return Counter(name, doc, LABELS, registry=self.registry).labels(**self.labels)

    def _histogram(
        self, name: str, doc: str, buckets: list[float] | tuple[float, ...]
    ) -> Histogram:
        metric = Histogram(name, doc, LABELS, buckets=buckets, registry=self.registry)
        return metric.labels(**self.labels)

    def _gauges(self) -> None:
        self.running = self._gauge(
            "vllm:num_requests_running", "Number of requests in model execution batches."
        )
        self.waiting = self._gauge(
            "vllm:num_requests_waiting", "Number of requests waiting to be processed."
        )
        self.kv_usage = self._gauge(
            "vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage."
        )

    def _counters(self) -> None:
        self.prompt_tokens = self._counter(
            "vllm:prompt_tokens", "Number of prefill tokens processed."
        )
        self.generation_tokens = self._counter(
            "vllm:generation_tokens", "Number of generation tokens processed."
        )
        self.preemptions = self._counter(
            "vllm:num_preemptions", "Cumulative number of preemption from the engine."
        )
        self.prefix_queries = self._counter(
            "vllm:prefix_cache_queries",
            "Prefix cache queries, in terms of number of queried tokens.",
        )
        self.prefix_hits = self._counter(
            "vllm:prefix_cache_hits", "Prefix cache hits, in terms of number of cached tokens."
        )
        success = Counter(
            "vllm:request_success",
            "Count of successfully processed requests.",
            [*LABELS, "finished_reason"],
            registry=self.registry,
        )
        self.success = {
            reason: success.labels(**self.labels, finished_reason=reason)
            for reason in FINISHED_REASONS
        }

    def _histograms(self, max_model_len: int) -> None:
        tokens = buckets_1_2_5(max_model_len)
        self.ttft = self._histogram(
            "vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.",
            TTFT_BUCKETS,
        )  # fmt: skip
        self.tpot = self._histogram(
            "vllm:time_per_output_token_seconds",
            "Histogram of time per output token in seconds.",
            TPOT_BUCKETS,
        )
        self.itl = self._histogram(
            "vllm:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.",
            TPOT_BUCKETS,
        )  # fmt: skip
        self.e2e = self._histogram(
            "vllm:e2e_request_latency_seconds",
            "Histogram of e2e request latency in seconds.",
            LATENCY_BUCKETS,
        )
        self.queue = self._histogram(
            "vllm:request_queue_time_seconds",
            "Histogram of time spent in WAITING phase for request.",
            LATENCY_BUCKETS,
        )
        self.inference = self._histogram(
            "vllm:request_inference_time_seconds",
            "Histogram of time spent in RUNNING phase for request.",
            LATENCY_BUCKETS,
        )
        self.prefill = self._histogram(
            "vllm:request_prefill_time_seconds",
            "Histogram of time spent in PREFILL phase for request.",
            LATENCY_BUCKETS,
        )
        self.decode = self._histogram(
            "vllm:request_decode_time_seconds",
            "Histogram of time spent in DECODE phase for request.",
            LATENCY_BUCKETS,
        )
        self.request_prompt = self._histogram(
            "vllm:request_prompt_tokens", "Number of prefill tokens processed.", tokens
        )
        self.request_generation = self._histogram(
            "vllm:request_generation_tokens", "Number of generation tokens processed.", tokens
        )
        self.params_max_tokens = self._histogram(
            "vllm:request_params_max_tokens", "Histogram of the max_tokens request parameter.",
            tokens,
        )  # fmt: skip
        self.params_n = self._histogram(
            "vllm:request_params_n", "Histogram of the n request parameter.", [1, 2, 5, 10, 20]
        )

    def admitted(self, prompt_tokens: int) -> None:
        """Prefill is counted when the request enters the batch, as vLLM's scheduler does."""
        self.prompt_tokens.inc(prompt_tokens)
        self.prefix_queries.inc(prompt_tokens)

    def generated(self, tokens: int, seconds_per_token: float) -> None:
        if tokens <= 0:
            return
        self.generation_tokens.inc(tokens)
        for _ in range(min(tokens, 8)):  # bounded: histograms need shape, not every sample
            self.itl.observe(seconds_per_token)

    def finished(self, done: FinishedRequest) -> None:
        self.success[done.finished_reason].inc()
        self.ttft.observe(done.ttft_s)
        self.e2e.observe(done.e2e_s)
        self.queue.observe(done.queue_s)
        inference = max(0.0, done.e2e_s - done.queue_s)
        self.inference.observe(inference)
        self.prefill.observe(max(0.0, done.ttft_s - done.queue_s))
        self.decode.observe(max(0.0, done.e2e_s - done.ttft_s))
        if done.generation_tokens > 1:
            self.tpot.observe((done.e2e_s - done.ttft_s) / (done.generation_tokens - 1))
        self.request_prompt.observe(done.prompt_tokens)
        self.request_generation.observe(done.generation_tokens)
        self.params_max_tokens.observe(done.max_tokens)
        self.params_n.observe(done.n)

    def exposition(self) -> bytes:
        return generate_latest(self.registry)
