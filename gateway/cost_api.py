"""GET /api/v1/cost: what the room deployments held cost, per deployment or team and UTC day
(gateway/cost.py computes it)."""

from __future__ import annotations

from datetime import date
from decimal import Decimal
from typing import Any

from django.http import HttpRequest
from django.utils import timezone
from ninja import Field, Query, Router, Schema

from console.api_schema import ERRORS
from gateway import cost

router = Router(tags=["cost"])


class CostDayOut(Schema):
    day: date = Field(description="a UTC day")
    cost: float = Field(description="in the prices' currency")
    tokens: int = Field(description="prompt and completion tokens served that day")
    cost_per_million_tokens: float | None = Field(description="null: no tokens served")


class CostItemOut(Schema):
    id: int | None = Field(description="the deployment's or team's id; null: deleted")
    name: str = Field(description="its name (a deleted deployment's is kept)")
    cost: float = Field(description="over the whole range")
    tokens: int
    cost_per_million_tokens: float | None = Field(description="null: no tokens served")
    unpriced: list[str] = Field(
        description="what it held that has no price yet (counted as 0): give one in the admin"
    )
    days: list[CostDayOut] = Field(description="the days with a cost or tokens, oldest first")


class CostReportOut(Schema):
    currency: str
    from_: date = Field(alias="from")
    to: date
    items: list[CostItemOut]


class CostQueryIn(Schema):
    """Documented here; read by cost.read_query, which refuses a bad value by name (400)."""

    group_by: str | None = Field(None, description="deployment (the default) or team")
    from_: str | None = Field(
        None, alias="from", description="the first UTC day, 2026-03-01; 6 days before to"
    )
    to: str | None = Field(None, description="the last UTC day, included; today")


def money(amount: Decimal | None) -> float | None:
    return None if amount is None else round(float(amount), 4)


def item_out(line: cost.Line) -> dict[str, Any]:
    days = [
        {
            "day": day,
            "cost": money(line.cost_by_day.get(day, Decimal(0))),
            "tokens": line.tokens_by_day.get(day, 0),
            "cost_per_million_tokens": money(
                cost.per_million(
                    line.cost_by_day.get(day, Decimal(0)), line.tokens_by_day.get(day, 0)
                )
            ),
        }
        for day in line.days()
    ]
    return {
        "id": line.id,
        "name": line.name,
        "cost": money(line.cost),
        "tokens": line.tokens,
        "cost_per_million_tokens": money(cost.per_million(line.cost, line.tokens)),
        "unpriced": sorted(line.unpriced),
        "days": days,
    }


@router.get("/cost", response={200: CostReportOut, **ERRORS}, by_alias=True)
def show_cost(request: HttpRequest, query: Query[CostQueryIn]) -> dict[str, Any]:
    """The cost of the GPU (and CPU) room your teams' deployments held (every team's, for
    platform admins), at the admin's prices: GPUs held × hours × the price per GPU-hour of the
    product (CPU: cores × hours × the price per core-hour), per UTC day, costliest first."""
    asked = cost.read_query(request.GET, timezone.now().date())
    lines = cost.report(cost.rooms_seen_by(request.user), asked.group_by, asked.first, asked.last)
    return {
        "currency": cost.current_prices().currency,
        "from": asked.first,
        "to": asked.last,
        "items": [item_out(line) for line in lines],
    }
