"""Benchmark (issue 38's measure): Berth's cost report against the GPU-share-hours worked out by
hand from the reservations, within 1 %.

Five copies of four deployments take two fifths, half, whole and two-GPU room on one cluster of
five H100s through the reconciler's own writer (placing.reserve); each room is then held for a known
time, some given back, one still held. The report (gateway/cost.py, per deployment and UTC day)
over the three days is divided by price × Σ share × hours of the reservations. It prints the
ratio; `make test` runs it as it is (it is small), `make bench` too.
"""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta
from decimal import Decimal

import pytest

from clusters.models import Price, PriceUnit
from deployments import placing
from deployments.models import HeldRoom, Reservation
from gateway import cost
from tests import factories

pytestmark = [pytest.mark.django_db, pytest.mark.bench]
H100 = "NVIDIA-H100-80GB-HBM3"
T0 = datetime(2026, 3, 1, tzinfo=UTC)
NOW = T0 + timedelta(hours=72)
PRICE = Decimal("2.00")  # per GPU-hour
# Per deployment: its size and, per copy, the hours after T0 it held its room from and until
# (None: still held at NOW).
HELD = {
    "whole": (Decimal(1), [(0, None)]),
    "pair": (Decimal(2), [(47, 50)]),
    "two-fifths": (Decimal("0.4"), [(1, 25), (12, 48)]),
    "half": (Decimal("0.5"), [(30, 33.5)]),
}
# By hand: 1 × 72 + 2 GPUs × 1 × 3 + 0.4 × 24 + 0.4 × 36 + 0.5 × 3.5 = 103.75 GPU-share-hours.
SHARE_HOURS_BY_HAND = Decimal("103.75")


def hold_rooms(team) -> dict[int, float]:
    """Places every copy and holds its room as HELD says; the hours each reservation held."""
    hours_of: dict[int, float] = {}
    for name, (size, spans) in HELD.items():
        deployment = factories.make_deployment(name, team, accelerators_per_copy=size)
        for ordinal, (start, end) in enumerate(spans):
            copy = factories.make_copy(deployment, ordinal)
            placing.reserve(deployment, [copy])
            for reservation in Reservation.objects.filter(copy=copy):
                hours_of[reservation.pk] = (end if end is not None else 72) - start
                HeldRoom.objects.filter(reservation_id=reservation.pk).update(
                    held_from=T0 + timedelta(hours=start),
                    held_until=None if end is None else T0 + timedelta(hours=end),
                )
    return hours_of


def test_the_cost_report_is_within_one_percent_of_gpu_share_hours_by_hand(red):
    factories.make_cluster(gpus=5)
    Price.objects.create(unit=PriceUnit.GPU_HOUR, product=H100, per_hour=PRICE)
    hours_of = hold_rooms(red)

    by_hand = sum(
        (r.share * Decimal(str(hours_of[r.pk])) for r in Reservation.objects.all()), Decimal(0)
    )
    assert by_hand == SHARE_HOURS_BY_HAND
    lines = cost.report(
        HeldRoom.objects.all(), "deployment", date(2026, 3, 1), date(2026, 3, 3), now=NOW
    )
    reported = sum((line.cost for line in lines), Decimal(0))
    ratio = reported / (PRICE * by_hand)
    print(f"cost report {reported:.4f} USD / ({PRICE} × {by_hand} GPU-share-hours): {ratio:.6f}")
    assert abs(ratio - 1) <= Decimal("0.01")
