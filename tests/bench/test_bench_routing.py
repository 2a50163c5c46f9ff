"""The routing benchmark (tests/bench/bench_routing.py): prefix-aware against least-loaded
routing in one run on the same copies. At its smoke size (inside make test) it runs end to end
and prints its figures; at full size (BERTH_BENCH_FULL=1, make bench) it asserts the targets:
prefix's mean TTFT at least 2× lower, its output tokens/s at least 1.3× higher, the TTFT p99 of
64 streams with the prefix index on at most 2 ms over direct. At both sizes, one copy is killed
during the streams and at least 99 % of them must end with the whole answer."""

from __future__ import annotations

import functools
import os

import bench_routing
import pytest

pytestmark = [pytest.mark.bench, pytest.mark.timeout(300)]

FULL = os.environ.get("BERTH_BENCH_FULL") == "1"
SIZE = bench_routing.FULL if FULL else bench_routing.SMOKE


@functools.cache
def result() -> bench_routing.Result:
    return bench_routing.run(SIZE)


def test_every_turn_of_every_conversation_is_answered_whole_under_each_policy() -> None:
    figures = result().figures
    assert list(figures) == ["least_loaded", "prefix"]
    for policy in figures.values():
        assert policy.turns == SIZE.conversations * SIZE.turns
        assert policy.tokens_per_reply == (SIZE.reply_tokens,)


def test_prefix_routing_finds_the_prompts_cached_and_answers_sooner() -> None:
    outcome = result()
    print("\n" + "\n".join(bench_routing.lines(outcome, SIZE)))
    if FULL:
        assert outcome.ttft_ratio >= 2.0
        assert outcome.throughput_ratio >= 1.3
        assert outcome.p99_ms["gateway"] - outcome.p99_ms["direct"] <= 2.0


def test_streams_whose_copy_is_killed_end_whole_at_another_copy() -> None:
    whole, streams = result().survived
    assert streams == SIZE.streams
    assert whole / streams >= 0.99
