"""The Usage page (/usage/): requests and tokens over time per team, key, user or deployment, as
charts and a table, with each deployment's or team's cost per day beside them, and its CSV.

The sums are gateway/usage_report.py's and the cost gateway/cost.py's; this module only reads the
page's filters, chooses whose usage the user sees and lays the numbers out. Members of a team, of
any role, see their team's usage (the page changes nothing); platform admins see every team's.
"""

from __future__ import annotations

import csv
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from typing import Any

from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET

from console.access import is_platform_admin, team_roles
from console.lists import FilterRefused
from console.models import Team
from console.views.events import Echo, spreadsheet_safe
from gateway import cost, usage_report

PARAMETERS = ("group_by", "from", "to", "bucket", "team")
GROUP_LABELS = {"team": "Team", "key": "API key", "user": "User", "deployment": "Deployment"}
# What a row whose team, key, user or deployment is gone (or was never there) is called.
NO_NAME = {"team": "(no team)", "key": "(no key)", "user": "(no user)", "deployment": "(none)"}
CSV_COLUMNS = ("bucket_start_utc", "group_by", "id", "name", "requests", "prompt_tokens",
               "completion_tokens", "mean_ttft_s")  # fmt: skip


@dataclass(frozen=True)
class Asked:
    """The page's filters, read: the usage query, and the team chosen (None: every team seen)."""

    query: usage_report.UsageQuery
    team: Team | None


def seen_teams(user: Any) -> QuerySet[Team]:
    """The teams whose usage the user sees: every team of theirs (platform admins: all)."""
    if is_platform_admin(user):
        return Team.objects.order_by("name")
    return Team.objects.filter(pk__in=list(team_roles(user))).order_by("name")


def read_asked(user: Any, params: Any) -> Asked:
    """The filters, or FilterRefused naming the first one that is no good."""
    unknown = sorted(set(params) - set(PARAMETERS))
    if unknown:
        raise FilterRefused(f"no such filter; use one of {', '.join(PARAMETERS)}", unknown[0])
    usage_params = {name: params.get(name) for name in PARAMETERS if name != "team"}
    return Asked(usage_report.read_query(usage_params), team_named(user, params.get("team")))


def team_named(user: Any, name: str | None) -> Team | None:
    if not name:
        return None
    team = seen_teams(user).filter(name=name).first()
    if team is None:  # the same words whether it exists or not: a name is not a secret to probe
        raise FilterRefused(f"{name!r} is not one of your teams; choose one from the list", "team")
    return team


def team_scope(user: Any, team: Team | None) -> list[int] | None:
    """The team ids whose records are summed (None: every team's, for platform admins)."""
    if team is not None:
        return [team.pk]
    if is_platform_admin(user):
        return None
    return list(team_roles(user))


def items_for(user: Any, asked: Asked) -> list[dict[str, Any]]:
    return usage_report.every_item(team_scope(user, asked.team), asked.query)


# The page's table stops here (a year per hour by key is many thousand rows); the charts and
# the CSV have every row.
TABLE_ROWS = 500


@require_GET
def usage(request: HttpRequest) -> HttpResponse:
    context: dict[str, Any] = {
        "params": request.GET,
        "teams": seen_teams(request.user),
        "groups": GROUP_LABELS,
        "export_query": request.GET.urlencode(),
    }
    try:
        asked = read_asked(request.user, request.GET)
    except FilterRefused as refused:
        context["refusal"] = f"{refused.field}: {refused.message}"
        context["refused_field"] = refused.field
        return render(request, "gateway/usage.html", context)
    items = items_for(request.user, asked)
    context.update(
        asked=asked,
        group_label=GROUP_LABELS[asked.query.group_by],
        usage_columns=usage_columns(asked.query.group_by),
        cost_columns=cost_columns(asked.query.group_by),
        rows=[table_row(item, asked.query) for item in items[:TABLE_ROWS]],
        rows_left_out=max(0, len(items) - TABLE_ROWS),
        table_rows=TABLE_ROWS,
        items_count=len(items),
        chart=chart_data(items, asked.query),
        cost=cost_section(request.user, asked),
    )
    return render(request, "gateway/usage.html", context)


def usage_columns(group_by: str) -> tuple[str, ...]:
    return ("Bucket", GROUP_LABELS[group_by], "Requests", "Prompt tokens", "Completion tokens",
            "Tokens", "Mean time to first token")  # fmt: skip


def cost_columns(group_by: str) -> tuple[str, ...]:
    return ("Day", GROUP_LABELS[group_by], "Cost", "Tokens", "Cost per 1M tokens")


def bucket_label(moment: datetime, bucket: str) -> str:
    utc = moment.astimezone(UTC)
    return utc.strftime("%Y-%m-%d %H:%M") if bucket == "hour" else utc.strftime("%Y-%m-%d")


def shown_name(item: dict[str, Any], group_by: str) -> str:
    return str(item["name"]) if item["name"] is not None else NO_NAME[group_by]


def table_row(item: dict[str, Any], query: usage_report.UsageQuery) -> dict[str, Any]:
    return {
        **item,
        "bucket": bucket_label(item["bucket_start"], query.bucket),
        "shown_name": shown_name(item, query.group_by),
        "tokens": item["prompt_tokens"] + item["completion_tokens"],
    }


def chart_data(items: list[dict[str, Any]], query: usage_report.UsageQuery) -> dict[str, Any]:
    """What static/gateway/usage_charts.js draws: the buckets, and one series per group with
    its tokens and requests in each bucket (0 where it had none)."""
    labels = sorted({bucket_label(item["bucket_start"], query.bucket) for item in items})
    at = {label: index for index, label in enumerate(labels)}
    series: dict[tuple[Any, str], dict[str, Any]] = {}
    for item in items:
        name = shown_name(item, query.group_by)
        line = series.setdefault(
            (item["id"], name),
            {"name": name, "tokens": [0] * len(labels), "requests": [0] * len(labels)},
        )
        index = at[bucket_label(item["bucket_start"], query.bucket)]
        line["tokens"][index] += item["prompt_tokens"] + item["completion_tokens"]
        line["requests"][index] += item["requests"]
    return {"labels": labels, "series": list(series.values())}


# --- cost per day -------------------------------------------------------------------------------


def days_of(query: usage_report.UsageQuery) -> tuple[date, date]:
    """The UTC days the range touches, its first and its last (an end at midnight excludes it)."""
    return query.start.astimezone(UTC).date(), (query.end - timedelta.resolution).astimezone(
        UTC
    ).date()


def cost_section(user: Any, asked: Asked) -> dict[str, Any]:
    """The cost of each deployment or team per day in the range, or why there is none."""
    group_by = asked.query.group_by
    if group_by not in cost.GROUPS:
        return {"note": "Cost is counted per deployment and per team: group by one to see it."}
    first, last = days_of(asked.query)
    if (last - first).days + 1 > cost.MOST_DAYS:
        return {"note": f"Cost is shown for at most {cost.MOST_DAYS} days: choose a shorter range."}
    rooms = cost.rooms_seen_by(user)
    if asked.team is not None:
        rooms = rooms.filter(team=asked.team)
    lines = cost.report(rooms, group_by, first, last)
    rows = [cost_row(line, day) for line in lines for day in line.days()]
    unpriced = sorted({name for line in lines for name in line.unpriced})
    return {"rows": rows, "currency": cost.current_prices().currency, "unpriced": unpriced}


def cost_row(line: cost.Line, day: date) -> dict[str, Any]:
    spent, tokens = line.cost_by_day.get(day, Decimal(0)), line.tokens_by_day.get(day, 0)
    return {
        "day": day.isoformat(),
        "name": line.name,
        "cost": spent,
        "tokens": tokens,
        "per_million": cost.per_million(spent, tokens),
    }


# --- CSV ---------------------------------------------------------------------------------------


@require_GET
def export_usage(request: HttpRequest) -> HttpResponse:
    """The usage the filters select as CSV, every row, buckets in UTC."""
    try:
        asked = read_asked(request.user, request.GET)
    except FilterRefused as refused:
        text = f"{refused.field}: {refused.message}\n"
        return HttpResponse(text, status=400, content_type="text/plain; charset=utf-8")
    lines = csv_lines(items_for(request.user, asked), asked.query.group_by)
    response = HttpResponse("".join(lines), content_type="text/csv; charset=utf-8")
    response["Content-Disposition"] = 'attachment; filename="berth-usage.csv"'
    return response


def csv_lines(items: list[dict[str, Any]], group_by: str) -> Iterator[str]:
    writer = csv.writer(Echo())
    yield writer.writerow(CSV_COLUMNS)
    for item in items:
        at = item["bucket_start"].astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        name = spreadsheet_safe(item["name"] or "")
        ttft = "" if item["mean_ttft_s"] is None else item["mean_ttft_s"]
        cells = (at, group_by, item["id"] or "", name, item["requests"], item["prompt_tokens"],
                 item["completion_tokens"], ttft)  # fmt: skip
        yield writer.writerow(cells)
