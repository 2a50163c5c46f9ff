"""The gateway benchmark at its smoke size (a few seconds): it runs end to end against the
engine simulator, every token of every stream arrives through the gateway, and the report
prints its ratios. No timings are asserted here: the machines are shared and noisy; `make bench`
prints the full-size figures against the targets."""

from __future__ import annotations

import functools

import bench_gateway
import pytest

pytestmark = [pytest.mark.bench, pytest.mark.timeout(180)]


@functools.cache
def smoke_rows() -> list[bench_gateway.Row]:
    return bench_gateway.run(bench_gateway.SMOKE, ("uvicorn",))


def test_each_level_is_measured_straight_to_the_engine_and_through_the_gateway() -> None:
    rows = smoke_rows()
    assert [(row.streams, row.path) for row in rows] == [
        (1, "direct"),
        (1, "uvicorn"),
        (16, "direct"),
        (16, "uvicorn"),
    ]
    assert all(row.figures.ttft_median_ms > 0 and row.figures.tokens_per_s > 0 for row in rows)


def test_every_token_of_every_stream_arrives_through_the_gateway() -> None:
    for row in smoke_rows():
        assert row.figures.tokens_per_reply == (bench_gateway.SMOKE.reply_tokens,), row


def test_the_report_prints_the_gateways_figures_as_ratios_of_the_direct_baseline() -> None:
    text = "\n".join(bench_gateway.lines(smoke_rows(), bench_gateway.SMOKE))
    print(text)
    assert "Targets: TTFT added < 2 ms at 1 and 16 streams" in text
    assert "TTFT p99" in text and "p99 added <= 20 ms" in text
    through = [line for line in text.splitlines() if "gateway, own process" in line]
    assert len(through) == 2 and all(line.rstrip().endswith("%") for line in through)
