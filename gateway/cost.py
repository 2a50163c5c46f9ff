"""Cost: what the room deployments' copies held cost, at the admin's prices (clusters.Price).

The one rule (DESIGN §11): a room held costs its GPUs × the hours it was held × the price per
GPU-hour of its product; on a CPU machine, its cores × the hours × the price per core-hour. The
rooms are deployments.HeldRoom rows, one per reservation, kept after the reservation is given
back. Days are UTC days. Tokens served are the usage records' prompt and completion tokens, and
cost per 1M tokens is the cost ÷ those tokens × 1e6.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, time, timedelta
from decimal import Decimal
from typing import Any

from django.db.models import F, Q, QuerySet, Sum
from django.db.models.functions import Coalesce, TruncDate
from django.utils import timezone

from clusters.models import Price, PriceUnit
from console.access import is_platform_admin, team_roles
from console.lists import FilterRefused
from deployments.models import HeldRoom
from gateway.models import UsageRecord

SECONDS_PER_HOUR = Decimal(3600)
DAY = timedelta(days=1)
GROUPS = ("deployment", "team")
PARAMETERS = ("group_by", "from", "to")
DEFAULT_DAYS = 7  # a range left out: the last week, today included
MOST_DAYS = 400  # as long as usage records are kept (BERTH_USAGE_DAYS' default)
DEFAULT_CURRENCY = "USD"


@dataclass(frozen=True)
class Prices:
    per_gpu_hour: dict[str, Decimal]
    per_core_hour: Decimal | None
    currency: str


def current_prices() -> Prices:
    rows = list(Price.objects.all())
    gpu = {p.product: p.per_hour for p in rows if p.unit == PriceUnit.GPU_HOUR}
    core = next((p.per_hour for p in rows if p.unit == PriceUnit.CORE_HOUR), None)
    return Prices(gpu, core, rows[0].currency if rows else DEFAULT_CURRENCY)


def hourly_rate(room: HeldRoom, prices: Prices) -> Decimal | None:
    """What an hour of this room costs; None when the admin gave no price for it."""
    if room.cores:
        return None if prices.per_core_hour is None else room.cores * prices.per_core_hour
    price = prices.per_gpu_hour.get(room.product)
    return None if price is None else room.gpus * price


def unpriced_name(room: HeldRoom) -> str:
    return "CPU core-hour" if room.cores else (room.product or "GPU of unknown product")


def hours_held(room: HeldRoom, start: datetime, end: datetime, now: datetime) -> Decimal:
    """The hours of [start, end) in which the room was held (still held: until now)."""
    since = max(room.held_from, start)
    until = min(room.held_until or now, end, now)
    if until <= since:
        return Decimal(0)
    return Decimal((until - since).total_seconds()) / SECONDS_PER_HOUR


def day_start(day: date) -> datetime:
    return datetime.combine(day, time.min, tzinfo=UTC)


def days_between(first: date, last: date) -> list[date]:
    return [first + timedelta(days=n) for n in range((last - first).days + 1)]


def per_million(cost: Decimal, tokens: int) -> Decimal | None:
    """Cost per 1M tokens served; None when none were served (there is nothing to divide)."""
    return cost / tokens * 1_000_000 if tokens else None


@dataclass
class Line:
    """One deployment's or one team's cost and tokens, per day."""

    id: int | None
    name: str
    cost_by_day: dict[date, Decimal] = field(default_factory=lambda: defaultdict(Decimal))
    tokens_by_day: dict[date, int] = field(default_factory=lambda: defaultdict(int))
    unpriced: set[str] = field(default_factory=set)

    @property
    def cost(self) -> Decimal:
        return sum(self.cost_by_day.values(), Decimal(0))

    @property
    def tokens(self) -> int:
        return sum(self.tokens_by_day.values())

    def days(self) -> list[date]:
        return sorted(set(self.cost_by_day) | set(self.tokens_by_day))


def add_room(line: Line, room: HeldRoom, prices: Prices, days: list[date], now: datetime) -> None:
    """The room's cost on each of `days` it was held, added to the line."""
    rate = hourly_rate(room, prices)
    for day in days:
        hours = hours_held(room, day_start(day), day_start(day) + DAY, now)
        if not hours:
            continue
        if rate is None:
            line.unpriced.add(unpriced_name(room))
        else:
            line.cost_by_day[day] += rate * hours


def rooms_between(start: datetime, end: datetime) -> QuerySet[HeldRoom]:
    return HeldRoom.objects.filter(held_from__lt=end).filter(
        Q(held_until__isnull=True) | Q(held_until__gt=start)
    )


def tokens_by_deployment_day(
    deployment_ids: Iterable[int], start: datetime, end: datetime
) -> dict[tuple[int, date], int]:
    """Prompt and completion tokens served per deployment and UTC day."""
    rows = (
        UsageRecord.objects.filter(
            deployment_id__in=list(deployment_ids), at__gte=start, at__lt=end
        )
        .annotate(day=TruncDate("at", tzinfo=UTC))
        .values("deployment_id", "day")
        .annotate(tokens=Sum(Coalesce(F("prompt_tokens"), 0) + F("completion_tokens")))
        .order_by()
    )
    return {(row["deployment_id"], row["day"]): row["tokens"] for row in rows}


def report(
    rooms: QuerySet[HeldRoom], group_by: str, first: date, last: date, now: datetime | None = None
) -> list[Line]:
    """Cost and tokens per day from `first` to `last` (UTC days, both included) of each
    deployment or team that held room in them, the costliest first."""
    now = now or timezone.now()
    start, end = day_start(first), day_start(last) + DAY
    days = days_between(first, last)
    prices = current_prices()
    lines: dict[Any, Line] = {}
    line_of_deployment: dict[int, Line] = {}
    for room in rooms_between(start, end).filter(pk__in=rooms.values("pk")).select_related("team"):
        key, name = group_key(room, group_by)
        line = lines.setdefault(key, Line(key if isinstance(key, int) else None, name))
        add_room(line, room, prices, days, now)
        if room.deployment_id is not None:
            line_of_deployment[room.deployment_id] = line
    tokens = tokens_by_deployment_day(line_of_deployment, start, end)
    for (deployment_id, day), count in tokens.items():
        line_of_deployment[deployment_id].tokens_by_day[day] += count
    return sorted(lines.values(), key=lambda line: (-line.cost, line.name))


def group_key(room: HeldRoom, group_by: str) -> tuple[Any, str]:
    """What the room's cost is added up under: its deployment (or, deleted, its name) or team."""
    if group_by == "team":
        return (room.team_id, room.team.name) if room.team_id else ("no team", "(deleted team)")
    if room.deployment_id is not None:
        return room.deployment_id, room.deployment_name
    return f"deleted {room.deployment_name}", room.deployment_name


@dataclass(frozen=True)
class DeploymentCost:
    today: Decimal
    total: Decimal
    tokens: int
    currency: str
    unpriced: tuple[str, ...]

    @property
    def per_million_tokens(self) -> Decimal | None:
        return per_million(self.total, self.tokens)


def deployment_costs(
    deployment_ids: Iterable[int], now: datetime | None = None
) -> dict[int, DeploymentCost]:
    """Each deployment's cost today (UTC) and since it was first placed, and its tokens served,
    in three queries however many deployments there are."""
    now = now or timezone.now()
    ids = list(deployment_ids)
    today = day_start(now.astimezone(UTC).date())
    prices = current_prices()
    today_cost: dict[int, Decimal] = defaultdict(Decimal)
    total_cost: dict[int, Decimal] = defaultdict(Decimal)
    unpriced: dict[int, set[str]] = defaultdict(set)
    for room in HeldRoom.objects.filter(deployment_id__in=ids):
        rate = hourly_rate(room, prices)
        if rate is None:
            unpriced[room.deployment_id].add(unpriced_name(room))
            continue
        total_cost[room.deployment_id] += rate * hours_held(room, room.held_from, now, now)
        today_cost[room.deployment_id] += rate * hours_held(room, today, now, now)
    tokens = dict(
        UsageRecord.objects.filter(deployment_id__in=ids)
        .values("deployment_id")
        .annotate(tokens=Sum(Coalesce(F("prompt_tokens"), 0) + F("completion_tokens")))
        .values_list("deployment_id", "tokens")
        .order_by()
    )
    return {
        pk: DeploymentCost(
            today_cost[pk],
            total_cost[pk],
            tokens.get(pk, 0),
            prices.currency,
            tuple(sorted(unpriced[pk])),
        )
        for pk in ids
    }


# --- what a reader asks for (GET /api/v1/cost) ------------------------------------------------


@dataclass(frozen=True)
class CostQuery:
    group_by: str
    first: date
    last: date


def read_query(params: Any, today: date) -> CostQuery:
    """The query's parameters, or FilterRefused naming the first one that is no good."""
    unknown = sorted(set(params) - set(PARAMETERS))
    if unknown:
        raise FilterRefused(f"no such parameter; use one of {', '.join(PARAMETERS)}", unknown[0])
    group_by = params.get("group_by") or "deployment"
    if group_by not in GROUPS:
        raise FilterRefused(f"{group_by!r} is not one of {', '.join(GROUPS)}", "group_by")
    last = day_of(params, "to") or today
    first = day_of(params, "from") or last - timedelta(days=DEFAULT_DAYS - 1)
    if first > last:
        raise FilterRefused(
            f"{first.isoformat()} is after to ({last.isoformat()}); give a from on or before to",
            "from",
        )
    if (last - first).days + 1 > MOST_DAYS:
        raise FilterRefused(
            f"{first.isoformat()} to {last.isoformat()} is {(last - first).days + 1} days; "
            f"ask for at most {MOST_DAYS} days at a time",
            "from",
        )
    return CostQuery(group_by, first, last)


def day_of(params: Any, name: str) -> date | None:
    text = params.get(name)
    if not text:
        return None
    try:
        return date.fromisoformat(text)
    except ValueError:
        raise FilterRefused(
            f"{text!r} is not a day: write YYYY-MM-DD (UTC), e.g. 2026-03-01", name
        ) from None


def rooms_seen_by(user: Any) -> QuerySet[HeldRoom]:
    """The rooms of the user's teams' deployments (everyone's, for platform admins)."""
    if is_platform_admin(user):
        return HeldRoom.objects.all()
    return HeldRoom.objects.filter(team_id__in=list(team_roles(user)))
