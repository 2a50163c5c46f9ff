"""Reading usage: requests, tokens and time to first token per team, key, user or deployment,
per hour or day, over a time range (GET /api/v1/usage, the SDK's usage(), `berth usage`).

Whole hours already rolled up are read from UsageHour, the rest from the records themselves,
and the two are added up. Operators see the usage of the teams they operate, platform admins
everyone's. A value that cannot be used is refused (FilterRefused) naming its parameter.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from typing import Any

from django.db.models import Count, F, Q, QuerySet, Sum
from django.db.models.functions import TruncDay, TruncHour
from django.utils import timezone

from console.access import is_platform_admin, operated_teams, require_operator_somewhere
from console.lists import MOST_PER_PAGE, PAGE_SIZE, FilterRefused, decode_cursor, encode_cursor
from gateway.models import UsageHour, UsageRecord
from gateway.usage import rolled_up_until

# What each group is: the id and the name of what it names, as the records hold them.
GROUPS = {
    "team": ("team_id", "team__name"),
    "key": ("api_key_id", "api_key__name"),
    "user": ("user_id", "user__username"),
    "deployment": ("deployment_id", "deployment_name"),
}
BUCKETS = {"hour": TruncHour, "day": TruncDay}
PARAMETERS = ("group_by", "from", "to", "bucket", "limit", "cursor")
DEFAULT_DAYS = 7  # a range left out: the last week
HOUR = timedelta(hours=1)
SUMS = ("requests", "prompt", "completion", "ttft_sum", "ttft_n")


@dataclass(frozen=True)
class UsageQuery:
    group_by: str
    start: datetime
    end: datetime
    bucket: str
    limit: int
    cursor: str

    @property
    def cursor_name(self) -> str:
        # A cursor of one grouping means nothing in another.
        return f"usage by {self.group_by} per {self.bucket}"


@dataclass(frozen=True)
class UsagePage:
    items: list[dict[str, Any]]
    next_cursor: str | None


def read_query(params: Any, now: datetime | None = None) -> UsageQuery:
    """The query's parameters, or FilterRefused naming the first one that is no good."""
    unknown = sorted(set(params) - set(PARAMETERS))
    if unknown:
        raise FilterRefused(f"no such parameter; use one of {', '.join(PARAMETERS)}", unknown[0])
    group_by = chosen(params, "group_by", GROUPS, "team")
    bucket = chosen(params, "bucket", BUCKETS, "day")
    end = moment(params, "to", end_of_day=True) or (now or timezone.now())
    start = moment(params, "from", end_of_day=False) or end - timedelta(days=DEFAULT_DAYS)
    if start >= end:
        raise FilterRefused(
            f"{start.isoformat()} is not before to ({end.isoformat()}); give a from before to",
            "from",
        )
    return UsageQuery(group_by, start, end, bucket, page_size(params), params.get("cursor", ""))


def chosen(params: Any, name: str, allowed: dict[str, Any], default: str) -> str:
    value = params.get(name) or default
    if value not in allowed:
        raise FilterRefused(f"{value!r} is not one of {', '.join(allowed)}", name)
    return str(value)


def moment(params: Any, name: str, end_of_day: bool) -> datetime | None:
    """An ISO 8601 date or time (UTC when it names no offset); a date as `to` includes its day."""
    text = params.get(name)
    if not text:
        return None
    try:
        if len(text) == 10:
            day = date.fromisoformat(text)
            return datetime.combine(day + timedelta(days=end_of_day), time(), UTC)
        parsed = datetime.fromisoformat(text)
    except ValueError:
        raise FilterRefused(
            f"{text!r} is not a date or time: write 2026-03-01 or 2026-03-01T14:30 (UTC, or "
            "with an offset such as +02:00)",
            name,
        ) from None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


def page_size(params: Any) -> int:
    text = params.get("limit")
    if not text:
        return PAGE_SIZE
    if not str(text).isdigit() or not 1 <= int(text) <= MOST_PER_PAGE:
        raise FilterRefused(f"must be a whole number from 1 to {MOST_PER_PAGE}", "limit")
    return int(text)


# --- the sums ----------------------------------------------------------------------------------


def usage_page(user: Any, params: Any, now: datetime | None = None) -> UsagePage:
    """One page of the usage the user may see, oldest bucket first, then by the group's name."""
    require_operator_somewhere(user)
    query = read_query(params, now)
    rows = ordered(summed(operated_scope(user), query))
    if query.cursor:
        last = decode_cursor(query.cursor_name, query.cursor)
        rows = [row for row in rows if order_key(row[0]) > tuple(last)]
    shown = rows[: query.limit]
    next_cursor = None
    if len(rows) > query.limit:
        next_cursor = encode_cursor(query.cursor_name, list(order_key(shown[-1][0])))
    return UsagePage([item_of(key, sums) for key, sums in shown], next_cursor)


def every_item(teams: Collection[int] | None, query: UsageQuery) -> list[dict[str, Any]]:
    """Every item of the range, not a page (the usage page's charts, table and CSV), in the
    API's order and shape."""
    return [item_of(key, sums) for key, sums in ordered(summed(teams, query))]


Key = tuple[datetime, int | None, str | None]


def ordered(totals: dict[Key, list[float]]) -> list[tuple[Key, list[float]]]:
    return sorted(totals.items(), key=lambda item: order_key(item[0]))


def order_key(key: Key) -> tuple[str, str, int]:
    bucket, group_id, name = key
    return (bucket.isoformat(), name or "", group_id or 0)


def summed(teams: Collection[int] | None, query: UsageQuery) -> dict[Key, list[float]]:
    """(bucket, group id, group name) → [requests, prompt, completion, ttft sum, ttft count],
    from the hours rolled up and the records after them, added up: of the given teams only
    (None: every team's, and the records whose team is gone)."""
    totals: dict[Key, list[float]] = {}
    for rows in sources(query):
        for row in grouped(within(teams, rows), query):
            key = (row["bucket"], row["group_id"], row["group_name"])
            sums = totals.setdefault(key, [0, 0, 0, 0.0, 0])
            for index, name in enumerate(
                ("requests", "prompt", "completion", "ttft_sum", "ttft_n")
            ):
                sums[index] += row[name] or 0
    return totals


def sources(query: UsageQuery) -> list[QuerySet[Any]]:
    """The hours rolled up that lie wholly in the range, and the records of the rest of it."""
    first_hour = ceil_hour(query.start)
    rolled_end = min(floor_hour(query.end), rolled_up_until() or first_hour)
    if rolled_end <= first_hour:
        return [UsageRecord.objects.filter(at__gte=query.start, at__lt=query.end)]
    hours = UsageHour.objects.filter(hour__gte=first_hour, hour__lt=rolled_end)
    records = UsageRecord.objects.filter(
        Q(at__gte=query.start, at__lt=first_hour) | Q(at__gte=rolled_end, at__lt=query.end)
    )
    return [hours, records]


def floor_hour(moment: datetime) -> datetime:
    return moment.replace(minute=0, second=0, microsecond=0)


def ceil_hour(moment: datetime) -> datetime:
    floor = floor_hour(moment)
    return floor if floor == moment else floor + HOUR


def operated_scope(user: Any) -> list[int] | None:
    """The API's teams: those the user operates (None, every team, for platform admins)."""
    if is_platform_admin(user):
        return None
    return list(operated_teams(user).values_list("pk", flat=True))


def within(teams: Collection[int] | None, rows: QuerySet[Any]) -> QuerySet[Any]:
    return rows if teams is None else rows.filter(team_id__in=list(teams))


def grouped(rows: QuerySet[Any], query: UsageQuery) -> QuerySet[Any]:
    group_id, group_name = GROUPS[query.group_by]
    hourly = rows.model is UsageHour
    when = "hour" if hourly else "at"
    if hourly:
        sums = {
            "requests": Sum("requests"),
            "prompt": Sum("prompt_tokens"),
            "completion": Sum("completion_tokens"),
            "ttft_sum": Sum("ttft_sum_s"),
            "ttft_n": Sum("ttft_count"),
        }
    else:
        sums = {
            "requests": Count("id"),
            "prompt": Sum("prompt_tokens"),
            "completion": Sum("completion_tokens"),
            "ttft_sum": Sum("ttft_s"),
            "ttft_n": Count("ttft_s"),
        }
    return (
        rows.annotate(
            bucket=BUCKETS[query.bucket](when, tzinfo=UTC),
            group_id=F(group_id),
            group_name=F(group_name),
        )
        .values("bucket", "group_id", "group_name")
        .annotate(**sums)
        .order_by()
    )


def item_of(key: Key, sums: list[float]) -> dict[str, Any]:
    bucket, group_id, name = key
    requests, prompt, completion, ttft_sum, ttft_count = sums
    return {
        "id": group_id,
        "name": name,
        "bucket_start": bucket,
        "requests": int(requests),
        "prompt_tokens": int(prompt),
        "completion_tokens": int(completion),
        "mean_ttft_s": round(ttft_sum / ttft_count, 4) if ttft_count else None,
    }
