"""Admission like vLLM's scheduler: at most max_num_seqs running, KV blocks permitting.

A request reserves the blocks of its prompt plus its planned output when it enters the batch
and frees them when it leaves; vLLM grows allocations step by step and preempts instead, but
the gauges (running, waiting, KV usage) move the same way under load, which is what a gateway
or a dashboard sees.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

from clusters.simulator.metrics import EngineMetrics


@dataclass
class Throughput:
    """Counts since the last periodic stats line."""

    prompt_tokens: int = 0
    generation_tokens: int = 0
    since: float = field(default_factory=time.monotonic)

    def take(self) -> tuple[float, float, float]:
        now = time.monotonic()
        elapsed = max(now - self.since, 1e-9)
        rates = (self.prompt_tokens / elapsed, self.generation_tokens / elapsed, elapsed)
        self.prompt_tokens = self.generation_tokens = 0
        self.since = now
        return rates


class Scheduler:
    def __init__(
        self, max_num_seqs: int, num_blocks: int, block_size: int, metrics: EngineMetrics
    ) -> None:
        self.max_num_seqs = max_num_seqs
        self.num_blocks = num_blocks  # 0: no KV cache (encoder-only), only the seat limit
        self.block_size = block_size
        self.metrics = metrics
        self.running = 0
        self.waiting = 0
        self.used_blocks = 0
        self.throughput = Throughput()
        self._changed = asyncio.Condition()

    def blocks_for(self, tokens: int) -> int:
        return math.ceil(tokens / self.block_size) if self.num_blocks else 0

    def _fits(self, blocks: int) -> bool:
        if self.running >= self.max_num_seqs:
            return False
        return not self.num_blocks or self.used_blocks + blocks <= self.num_blocks

    def kv_usage(self) -> float:
        return self.used_blocks / self.num_blocks if self.num_blocks else 0.0

    def _publish(self) -> None:
        self.metrics.running.set(self.running)
        self.metrics.waiting.set(self.waiting)
        self.metrics.kv_usage.set(self.kv_usage())

    @asynccontextmanager
    async def admit(self, prompt_tokens: int, total_tokens: int) -> AsyncIterator[float]:
        """Wait for a seat and blocks; yields the seconds spent waiting."""
        blocks = min(self.blocks_for(total_tokens), self.num_blocks)
        queued_at = time.monotonic()
        async with self._changed:
            self.waiting += 1
            self._publish()
            try:
                await self._changed.wait_for(lambda: self._fits(blocks))
            finally:
                self.waiting -= 1
            self.running += 1
            self.used_blocks += blocks
            self._publish()
        self.metrics.admitted(prompt_tokens)
        self.throughput.prompt_tokens += prompt_tokens
        try:
            yield time.monotonic() - queued_at
        finally:
            async with self._changed:
                self.running -= 1
                self.used_blocks -= blocks
                self._publish()
                self._changed.notify_all()

    def generated(self, tokens: int, seconds_per_token: float) -> None:
        self.metrics.generated(tokens, seconds_per_token)
        self.throughput.generation_tokens += tokens
