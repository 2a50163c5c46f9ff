"""The placement benchmark at its smoke size: its quality figures hold (no timings asserted)."""

from __future__ import annotations

import functools

import bench_placement


@functools.cache
def smoke_report() -> bench_placement.Report:
    return bench_placement.run(smoke=True, seed=20251129)


def test_every_plan_places_as_many_copies_as_the_exact_solver() -> None:
    per_request = smoke_report().per_request
    assert per_request.instances == 20
    assert per_request.matches == per_request.instances, per_request.mismatches
    assert per_request.placed == per_request.optimum


def test_no_plan_over_commits_anything() -> None:
    assert smoke_report().per_request.over_commits == 0


def test_placing_in_arrival_order_never_beats_the_offline_optimum() -> None:
    # A ratio above 1 would mean the exact solver missed a placement.
    over_time = smoke_report().over_time
    assert over_time.sequences == 4
    for measure in bench_placement.MEASURES:
        for name in bench_placement.STRATEGIES:
            ratios = over_time.ratios[(measure, name)]
            assert ratios and all(0 < r <= 1 + 1e-9 for r in ratios), (measure, name)


def test_the_report_reads_as_text() -> None:
    text = "\n".join(bench_placement.lines(smoke_report(), smoke=True))
    assert "(a) Quality per request" in text
    assert "equal to the optimum      20/20 (100.0 %)" in text
    assert "(c) Speed on 100 machines x 8 GPUs, 500 reservations (median)" in text
