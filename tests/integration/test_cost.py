"""Cost (issue 38): the room copies held × hours × the admin's price per GPU-hour (or CPU
core-hour), from the history each reservation leaves (deployments.HeldRoom), shown on the
deployment's page, in GET /api/v1/cost and in the deployment API's `cost`."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta
from decimal import Decimal

import pytest
from django.core.exceptions import ValidationError

from clusters.models import Accelerator, Price, PriceUnit
from deployments import placing
from deployments.choices import DeploymentState
from deployments.models import Deployment, HeldRoom, Reservation, record_held
from deployments.transitions import move_deployment
from gateway import cost
from gateway.models import UsageRecord
from tests import factories

H100 = "NVIDIA-H100-80GB-HBM3"
T0 = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)


def held_copy(deployment, ordinal: int = 0) -> HeldRoom:
    """A copy placed as the reconciler places it: its reservation, and the room it records."""
    copy = factories.make_copy(deployment, ordinal)
    placing.reserve(deployment, [copy])
    return HeldRoom.objects.get(reservation_id=Reservation.objects.get(copy=copy).pk)


def pin(room: HeldRoom, start: datetime, end: datetime | None) -> None:
    HeldRoom.objects.filter(pk=room.pk).update(held_from=start, held_until=end)


def served(deployment, at: datetime, prompt: int | None, completion: int) -> None:
    UsageRecord.objects.create(
        at=at,
        deployment=deployment,
        deployment_name=deployment.name,
        model="m",
        prompt_tokens=prompt,
        completion_tokens=completion,
        duration_s=1.0,
        status=200,
    )


def stopped_and_priced(team) -> Deployment:
    """A stopped deployment whose half an H100, at 2.00 an hour, was held for 3 hours on
    2026-03-02 (3.00) and served 1.5M tokens (2.00 per 1M): what the SDK and CLI tests read
    back through a running console."""
    Price.objects.create(unit=PriceUnit.GPU_HOUR, product=H100, per_hour=Decimal("2.00"))
    deployment = factories.make_deployment("priced", team, copies_wanted=0)
    for state in (DeploymentState.STOPPING, DeploymentState.STOPPED):
        move_deployment(deployment.pk, state)
    HeldRoom.objects.create(
        reservation_id=1, deployment=deployment, deployment_name=deployment.name, team=team,
        copy_ordinal=0, product=H100, vendor="nvidia", gpus=Decimal("0.5"),
        held_from=T0, held_until=T0 + timedelta(hours=3),
    )  # fmt: skip
    served(deployment, T0 + timedelta(hours=1), 1_000_000, 500_000)
    return deployment


@pytest.fixture
def h100_price(db):
    factories.make_cluster()
    return Price.objects.create(unit=PriceUnit.GPU_HOUR, product=H100, per_hour=Decimal("2.00"))


def test_half_an_h100_for_three_hours_costs_three(red, h100_price):
    deployment = factories.make_deployment("half", red, accelerators_per_copy=Decimal("0.5"))
    room = held_copy(deployment)
    assert (room.product, room.gpus, room.held_until) == (H100, Decimal("0.5000"), None)

    placing.release(room_copy(room))  # given back: the history keeps it, closed
    assert HeldRoom.objects.get(pk=room.pk).held_until is not None

    pin(room, T0, T0 + timedelta(hours=3))
    spent = cost.deployment_costs([deployment.pk], now=T0 + timedelta(hours=5))[deployment.pk]
    assert (spent.today, spent.total, spent.currency) == (Decimal("3"), Decimal("3"), "USD")


def room_copy(room: HeldRoom):
    return Reservation.objects.get(pk=room.reservation_id).copy


def test_a_copy_still_held_costs_until_now_and_today_starts_at_midnight(red, h100_price):
    deployment = factories.make_deployment("whole", red)
    room = held_copy(deployment)
    pin(room, T0 - timedelta(hours=10), None)  # 23:00 the day before, still held
    spent = cost.deployment_costs([deployment.pk], now=T0)[deployment.pk]
    # 1 GPU × 2.00: 10 hours in all, 9 of them today (since 00:00 UTC).
    assert (spent.total, spent.today) == (Decimal("20"), Decimal("18"))


def test_cost_per_million_tokens_is_cost_over_tokens_served(red, h100_price):
    deployment = factories.make_deployment("served", red, accelerators_per_copy=Decimal("0.5"))
    pin(held_copy(deployment), T0, T0 + timedelta(hours=3))  # 3.00
    served(deployment, T0 + timedelta(minutes=5), 500_000, 700_000)
    served(deployment, T0 + timedelta(minutes=6), None, 300_000)  # the engine gave no prompt count
    spent = cost.deployment_costs([deployment.pk], now=T0 + timedelta(hours=4))[deployment.pk]
    assert (spent.tokens, spent.per_million_tokens) == (1_500_000, Decimal("2"))


def test_a_cpu_copy_costs_its_cores_times_the_core_hour(red):
    cluster = factories.make_cpu_cluster(cores=16)
    Price.objects.create(unit=PriceUnit.CORE_HOUR, per_hour=Decimal("0.05"))
    deployment = factories.make_deployment(
        "on-cpu", red, cluster=cluster, accelerators_per_copy=Decimal("0.25")
    )
    cpu = Accelerator.objects.get(machine__cluster=cluster)
    copy = factories.make_copy(deployment)
    reservation = Reservation.objects.create(
        copy=copy, machine=cpu.machine, accelerator=cpu, reserved_bytes=2**30, share=Decimal("0.25")
    )
    record_held([reservation])
    room = HeldRoom.objects.get(reservation_id=reservation.pk)
    assert (room.cores, room.gpus) == (Decimal("4.0000"), Decimal("0"))
    pin(room, T0, T0 + timedelta(hours=2))
    spent = cost.deployment_costs([deployment.pk], now=T0 + timedelta(hours=2))[deployment.pk]
    assert spent.total == Decimal("0.4")  # 4 cores × 2 h × 0.05


def test_the_report_splits_a_room_over_the_days_it_was_held_and_keeps_a_deleted_deployment(
    red, h100_price
):
    deployment = factories.make_deployment("overnight", red)
    room = held_copy(deployment)
    deployment.copies.all().delete()  # the copy and its reservation go: the room is closed
    assert HeldRoom.objects.get(pk=room.pk).held_until is not None
    pin(room, datetime(2026, 3, 1, 22, 0, tzinfo=UTC), datetime(2026, 3, 2, 2, 0, tzinfo=UTC))
    deployment.delete()

    now = datetime(2026, 3, 3, tzinfo=UTC)
    [line] = cost.report(
        HeldRoom.objects.all(), "team", date(2026, 3, 1), date(2026, 3, 2), now=now
    )
    assert (line.id, line.name, line.cost) == (red.pk, "red", Decimal("8"))
    assert dict(line.cost_by_day) == {
        date(2026, 3, 1): Decimal("4"),
        date(2026, 3, 2): Decimal("4"),
    }


def test_a_product_without_a_price_is_named_and_counted_as_nothing(red):
    factories.make_cluster()
    deployment = factories.make_deployment("unpriced", red)
    pin(held_copy(deployment), T0, T0 + timedelta(hours=1))
    spent = cost.deployment_costs([deployment.pk], now=T0 + timedelta(hours=2))[deployment.pk]
    assert (spent.total, spent.unpriced) == (Decimal("0"), (H100,))


# --- the price's rules ----------------------------------------------------------------------


def test_a_negative_price_is_refused_in_words(h100_price):
    price = Price(unit=PriceUnit.GPU_HOUR, product=H100, per_hour=Decimal("-1"))
    with pytest.raises(ValidationError) as refused:
        price.full_clean(validate_unique=False)
    assert refused.value.message_dict["per_hour"] == [
        "a price cannot be negative (-1): give 0 or more, e.g. 2.00"
    ]


def test_a_price_on_a_product_no_cluster_has_is_refused_naming_the_products_here(db):
    factories.make_cluster()
    price = Price(unit=PriceUnit.GPU_HOUR, product="NVIDIA-X", per_hour=Decimal("1"))
    with pytest.raises(ValidationError) as refused:
        price.full_clean()
    assert refused.value.message_dict["product"] == [
        "no cluster has an accelerator NVIDIA-X; products here: NVIDIA-H100-80GB-HBM3"
    ]


def test_a_second_currency_is_refused(h100_price):
    price = Price(unit=PriceUnit.CORE_HOUR, per_hour=Decimal("0.05"), currency="EUR")
    with pytest.raises(ValidationError) as refused:
        price.full_clean()
    assert refused.value.message_dict["currency"] == [
        "prices here are in USD: give this one in USD too (one currency)"
    ]


def test_the_admin_adds_a_price_and_refuses_a_negative_one(as_alice, h100_price):
    h100_price.delete()
    url = "/admin/clusters/price/add/"
    form = {"unit": "gpu_hour", "product": H100, "per_hour": "-2", "currency": "USD"}
    page = as_alice.post(url, form)
    assert "a price cannot be negative (-2): give 0 or more, e.g. 2.00" in page.content.decode()
    assert as_alice.post(url, {**form, "per_hour": "2.50"}).status_code == 302
    assert Price.objects.get(product=H100).per_hour == Decimal("2.5")


# --- where it is shown ----------------------------------------------------------------------


def test_the_cost_api_gives_each_deployment_its_cost_per_day(as_bob, red, h100_price):
    deployment = factories.make_deployment("api-cost", red, accelerators_per_copy=Decimal("0.5"))
    pin(held_copy(deployment), T0, T0 + timedelta(hours=3))
    served(deployment, T0 + timedelta(hours=1), 1_000_000, 500_000)
    answer = as_bob.get("/api/v1/cost?group_by=deployment&from=2026-03-01&to=2026-03-02")
    assert answer.status_code == 200
    assert answer.json() == {
        "currency": "USD",
        "from": "2026-03-01",
        "to": "2026-03-02",
        "items": [
            {
                "id": deployment.pk,
                "name": "api-cost",
                "cost": 3.0,
                "tokens": 1_500_000,
                "cost_per_million_tokens": 2.0,
                "unpriced": [],
                "days": [
                    {
                        "day": "2026-03-02",
                        "cost": 3.0,
                        "tokens": 1_500_000,
                        "cost_per_million_tokens": 2.0,
                    }
                ],
            }
        ],
    }


def test_another_teams_cost_is_not_shown(as_carol, blue, h100_price):
    deployment = factories.make_deployment("blue-cost", blue)
    pin(held_copy(deployment), T0, T0 + timedelta(hours=1))
    answer = as_carol.get("/api/v1/cost?group_by=team&from=2026-03-02&to=2026-03-02")
    assert answer.json()["items"] == []


@pytest.mark.parametrize(
    ("query", "detail"),
    [
        ("group_by=region", "group_by: 'region' is not one of deployment, team"),
        (
            "from=2026-03-05&to=2026-03-01",
            "from: 2026-03-05 is after to (2026-03-01); give a from on or before to",
        ),
        (
            "from=yesterday",
            "from: 'yesterday' is not a day: write YYYY-MM-DD (UTC), e.g. 2026-03-01",
        ),
        (
            "from=2025-01-01&to=2026-03-01",
            "from: 2025-01-01 to 2026-03-01 is 425 days; ask for at most 400 days at a time",
        ),
        ("bucket=hour", "bucket: no such parameter; use one of group_by, from, to"),
    ],
)
def test_the_cost_api_refuses_a_bad_value_in_words(as_bob, query, detail):
    answer = as_bob.get(f"/api/v1/cost?{query}")
    assert (answer.status_code, answer.json()["detail"]) == (400, detail)


def test_the_deployment_api_and_page_show_its_cost(as_bob, red, h100_price):
    deployment = factories.make_deployment("shown", red, accelerators_per_copy=Decimal("0.5"))
    room = held_copy(deployment)
    placing.release(room_copy(room))
    pin(room, T0, T0 + timedelta(hours=3))
    served(deployment, T0, 1_000_000, 500_000)

    shown = as_bob.get(f"/api/v1/deployments/{deployment.pk}").json()["cost"]
    assert shown == {
        "currency": "USD",
        "today": 0.0,
        "total": 3.0,
        "tokens": 1_500_000,
        "per_million_tokens": 2.0,
        "unpriced": [],
    }
    page = as_bob.get(f"/deployments/{deployment.pk}/").content.decode()
    assert "0.00 USD today (UTC) · 3.00 USD in all · 2.00 USD per 1M tokens" in " ".join(
        page.split()
    )
