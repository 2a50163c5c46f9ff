"""Benchmark: a step in load from 1 to 32 streams, on an autoscaled deployment against a fixed
one sized for the peak, in the same run (the machines here are noisy, so only ratios count).

Run by `make bench` at full size and inside `make test` at a smoke size, both through
tests/bench/test_bench_autoscale.py (which starts the console's real processes and the gateway
on the test database). Each deployment gets the same load through the gateway: 1 stream, then
32, then 1 again; engines admit 8 requests at once (max_num_seqs), so 32 streams need 4 copies
(the autoscaled one aims at 8 in flight per copy, 1 to 4 copies). Printed:

- p99 time to first token of the requests started during the step (goal ≤ 1.5 × fixed);
- seconds from the step until the target holds again (4 copies serve);
- copy-seconds used (copies holding room, summed over the run) (goal ≤ 0.7 × fixed).

The step lasts its planned seconds, longer where the target has not held by then (a loaded
machine starts copies slowly): up to LONGEST_WAIT_S more, and the report says how long it lasted.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import httpx

logging.getLogger("httpx").setLevel(logging.WARNING)  # not a line per request
PEAK_STREAMS = 32
PER_COPY = 8  # the engines' max_num_seqs, and the autoscaled deployment's target
PEAK_COPIES = math.ceil(PEAK_STREAMS / PER_COPY)
ENGINE_SETTINGS = {"max_model_len": 4096, "max_num_seqs": PER_COPY}
POLICY = {"min_copies": 1, "max_copies": PEAK_COPIES, "target_in_flight": PER_COPY,
          "up_window_s": 2, "down_window_s": 5}  # fmt: skip
REQUEST = {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 32,
           "ignore_eos": True, "stream": True}  # fmt: skip


@dataclass(frozen=True)
class Size:
    before_s: float  # one stream
    step_s: float  # 32 streams
    after_s: float  # one stream again


FULL = Size(15, 30, 20)
SMOKE = Size(4, 10, 6)
LONGEST_WAIT_S = 90  # beyond the planned step, for the target to hold


@dataclass
class Sample:
    started: float
    ttft_s: float | None
    ok: bool


@dataclass
class Run:
    """One deployment's figures under the step."""

    samples: list[Sample] = field(default_factory=list)
    step_at: float = 0.0
    step_end: float = 0.0
    copy_seconds: float = 0.0
    target_held_after_s: float | None = None

    def step_ttft_p99_ms(self) -> float:
        during = sorted(
            s.ttft_s
            for s in self.samples
            if s.ok and s.ttft_s is not None and self.step_at <= s.started < self.step_end
        )
        if not during:
            return float("nan")
        return during[min(len(during) - 1, math.ceil(0.99 * len(during)) - 1)] * 1000

    @property
    def failed(self) -> int:
        return sum(not s.ok for s in self.samples)


class Streams:
    """Clients sending one streamed chat after the other, as many as `set` says."""

    def __init__(self, gateway: str, key: str, model: str) -> None:
        self.url = f"{gateway}/v1/chat/completions"
        self.headers = {"Authorization": f"Bearer {key}"}
        self.body = {**REQUEST, "model": model}
        self.samples: list[Sample] = []
        self.wanted = 0
        self.lock = threading.Lock()
        self.pool = ThreadPoolExecutor(max_workers=PEAK_STREAMS)

    def set(self, streams: int) -> None:
        with self.lock:
            before, self.wanted = self.wanted, streams
        for number in range(before, streams):
            self.pool.submit(self.client, number)

    def client(self, number: int) -> None:
        with httpx.Client(timeout=120) as http:
            while number < self.wanted:
                self.samples.append(self.one(http))

    def one(self, http: httpx.Client) -> Sample:
        started = time.monotonic()
        first: float | None = None
        try:
            with http.stream("POST", self.url, json=self.body, headers=self.headers) as reply:
                body = b""
                for chunk in reply.iter_bytes():
                    if first is None and b'"content"' in chunk:
                        first = time.monotonic() - started
                    body += chunk
        except httpx.HTTPError:
            return Sample(started, None, False)
        done = reply.status_code == 200 and body.rstrip().endswith(b"data: [DONE]")
        return Sample(started, first, done)

    def stop(self) -> list[Sample]:
        self.set(0)
        self.pool.shutdown(wait=True)
        return self.samples


def step(
    streams: Streams,
    size: Size,
    copies_holding_room: Callable[[], int],
    copies_serving: Callable[[], int],
) -> Run:
    """Run the load profile, sampling the copies every quarter second."""
    run = Run()
    phases = [(1, size.before_s), (PEAK_STREAMS, size.step_s), (1, size.after_s)]
    last = time.monotonic()
    try:
        for streams_now, seconds in phases:
            streams.set(streams_now)
            began = time.monotonic()
            peak = streams_now == PEAK_STREAMS
            if peak:
                run.step_at = began
            while not phase_over(run, peak, time.monotonic() - began, seconds):
                time.sleep(0.25)
                now = time.monotonic()
                run.copy_seconds += copies_holding_room() * (now - last)
                last = now
                if peak and run.target_held_after_s is None and copies_serving() >= PEAK_COPIES:
                    run.target_held_after_s = now - run.step_at
            if peak:
                run.step_end = time.monotonic()
    finally:
        run.samples = streams.stop()
    return run


def phase_over(run: Run, peak: bool, elapsed_s: float, planned_s: float) -> bool:
    """A phase ends after its planned seconds; the step only once the target holds too, or at
    the latest LONGEST_WAIT_S later."""
    if elapsed_s < planned_s:
        return False
    return (
        not peak or run.target_held_after_s is not None or elapsed_s >= planned_s + LONGEST_WAIT_S
    )


def report(fixed: Run, scaled: Run, size: Size) -> list[str]:
    ttft = scaled.step_ttft_p99_ms() / fixed.step_ttft_p99_ms()
    copies = scaled.copy_seconds / fixed.copy_seconds
    held = scaled.target_held_after_s
    held_words = f"{held:.1f} s" if held is not None else f"not within {LONGEST_WAIT_S} s more"
    lasted = scaled.step_end - scaled.step_at
    longer_words = (
        ", longer than planned: the target had not held" if lasted > size.step_s + 1 else ""
    )
    return [
        f"Autoscaling, a step from 1 to {PEAK_STREAMS} streams ({size.before_s:g} s, "
        f"{size.step_s:g} s, {size.after_s:g} s); baseline: a fixed deployment of "
        f"{PEAK_COPIES} copies (sized for the peak) under the same load",
        f"  the autoscaled step lasted {lasted:.1f} s{longer_words}",
        f"  p99 time to first token during the step: {scaled.step_ttft_p99_ms():.0f} ms against "
        f"{fixed.step_ttft_p99_ms():.0f} ms = {ttft:.2f} × fixed (goal ≤ 1.5 ×)",
        f"  the target held again (≤ {PER_COPY} in flight per copy) after: {held_words}",
        f"  copy-seconds: {scaled.copy_seconds:.0f} against {fixed.copy_seconds:.0f} = "
        f"{copies:.2f} × fixed (goal ≤ 0.7 ×)",
        f"  requests: {len(scaled.samples)} autoscaled, {len(fixed.samples)} fixed; failed: "
        f"{scaled.failed} and {fixed.failed}",
    ]
