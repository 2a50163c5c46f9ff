"""The Events list: every audit row a user may see, of every kind, in one list (the Events page,
its CSV export and GET /api/v1/events read it alike).

Three tables hold them: a deployment's Events (state changes, operator actions, the system's
own), console's AuditEntry (keys, downloads, files, models, code trust, clusters) and Django's
admin LogEntry (platform admins' changes in the admin, shown to platform admins only). Each is
read newest first by (time, id) and the three are merged, so that a page is a keyset page over
(time, table, id) and never an OFFSET.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, replace
from datetime import UTC, datetime, time, timedelta
from itertools import islice
from typing import Any

from django import forms
from django.contrib.admin.models import ADDITION, CHANGE, DELETION, LogEntry
from django.db.models import Q, QuerySet
from django.utils import timezone
from django.utils.dateparse import parse_date, parse_datetime

from console import audit
from console.access import is_platform_admin, team_roles
from console.lists import (
    MOST_PER_PAGE,
    PAGE_SIZE,
    FilterRefused,
    ListFilter,
    decode_cursor,
    encode_cursor,
)
from console.models import AuditEntry, Team
from deployments.choices import EventKind
from deployments.models import Event
from deployments.redaction import redact

LIST_NAME = "events"
# Rows per page and the API's most per page: the one rule of every list (console/lists.py).
MAX_LIMIT = MOST_PER_PAGE
NEWEST, OLDEST = "newest", "oldest"
# What travels beside the filters: where a page starts and how long it is.
PAGING = ("cursor", "limit")

DEPLOYMENT_KINDS = {f"deployment.{kind}": kind for kind in EventKind.values}
ADMIN_KINDS = {"admin.added": ADDITION, "admin.changed": CHANGE, "admin.deleted": DELETION}
ADMIN_KIND_OF = {flag: kind for kind, flag in ADMIN_KINDS.items()}
# The one vocabulary of kinds: the page's select, the API's `kind`.
KINDS = (*DEPLOYMENT_KINDS, *audit.ACTIONS, *ADMIN_KINDS)


@dataclass(frozen=True)
class Row:
    """One event as every reader shows it."""

    at: datetime
    table: str
    id: int
    team: str
    actor: str
    kind: str
    object: str
    message: str

    @property
    def key(self) -> tuple[datetime, str, int]:
        return (self.at, self.table, self.id)


# --- the three tables --------------------------------------------------------------------


def deployment_row(event: Event) -> Row:
    states = f"{event.from_state} → {event.to_state}" if event.to_state else ""
    copy = f"copy {event.copy.ordinal}" if event.copy else ""
    message = ": ".join(part for part in (copy, states, event.message) if part)
    return Row(
        event.at,
        "deployment",
        event.pk,
        event.team.name if event.team else "",
        event.actor_name,
        f"deployment.{event.kind}",
        event.deployment_name,
        message,
    )


def audit_row(entry: AuditEntry) -> Row:
    team = entry.team.name if entry.team else ""
    what = (entry.action, entry.target, entry.message)
    return Row(entry.at, "audit", entry.pk, team, entry.actor_name, *what)


def admin_row(entry: LogEntry) -> Row:
    what = entry.content_type.name if entry.content_type else "object"
    return Row(
        entry.action_time,
        "admin",
        entry.pk,
        "",
        entry.user.get_username(),
        ADMIN_KIND_OF.get(entry.action_flag, "admin.changed"),
        f"{what} “{entry.object_repr}”",
        entry.get_change_message(),
    )


@dataclass(frozen=True)
class Table:
    """Where one table keeps what the list filters on."""

    name: str
    at: str
    team: str | None  # None: its rows belong to no team
    actor: str
    object: str
    kind_lookup: Callable[[str], Q | None]  # the rows of a kind; None: none of this table's
    row: Callable[[Any], Row]


def deployment_kind(kind: str) -> Q | None:
    return Q(kind=DEPLOYMENT_KINDS[kind]) if kind in DEPLOYMENT_KINDS else None


def audit_kind(kind: str) -> Q | None:
    return Q(action=kind) if kind in audit.ACTIONS else None


def admin_kind(kind: str) -> Q | None:
    return Q(action_flag=ADMIN_KINDS[kind]) if kind in ADMIN_KINDS else None


TABLES = {
    Event: Table(
        "deployment", "at", "team__name", "actor_name", "deployment_name", deployment_kind,
        deployment_row,
    ),
    AuditEntry: Table(
        "audit", "at", "team__name", "actor_name", "target", audit_kind, audit_row
    ),
    LogEntry: Table(
        "admin", "action_time", None, "user__username", "object_repr", admin_kind, admin_row
    ),
}  # fmt: skip


def table_of(rows: QuerySet[Any]) -> Table:
    return TABLES[rows.model]


def visible_tables(user: Any) -> list[QuerySet[Any]]:
    """Each table's rows the user may see: their teams' (platform admins: all, the admin's
    own log too), and the rows of no team that they did themselves (their API keys)."""
    events = Event.objects.select_related("team", "copy")
    entries = AuditEntry.objects.select_related("team")
    admin_log = LogEntry.objects.select_related("user", "content_type")
    if is_platform_admin(user):
        return [events, entries, admin_log]
    teams = list(team_roles(user))
    return [
        events.filter(team_id__in=teams),
        entries.filter(Q(team_id__in=teams) | Q(team__isnull=True, actor=user)),
        admin_log.none(),
    ]


def visible_teams(user: Any) -> QuerySet[Team]:
    teams = Team.objects.order_by("name")
    return teams if is_platform_admin(user) else teams.filter(pk__in=list(team_roles(user)))


# --- the filters -------------------------------------------------------------------------


def moment(text: str, end_of_day: bool) -> datetime:
    """A date (its start; with `end_of_day`, the next day's start, so that the day is whole) or
    a date and time; a time without a zone is UTC, the zone every page writes times in."""
    text = text.strip()
    try:
        day = parse_date(text)
        parsed = None if day else parse_datetime(text)
    except ValueError:  # well formed but no such day or hour (2026-02-30)
        day = parsed = None
    if day is not None:
        start = datetime.combine(day + timedelta(days=1) if end_of_day else day, time())
        return start.replace(tzinfo=UTC)
    if parsed is None:
        raise forms.ValidationError(
            f"“{text}” is not a date or a time; write 2026-03-01 or 2026-03-01T14:30 (UTC, or "
            "with its zone: 2026-03-01T14:30+01:00)"
        )
    return parsed if timezone.is_aware(parsed) else parsed.replace(tzinfo=UTC)


class EventFilter(ListFilter):
    """The Events list's filters (its page, its CSV and GET /api/v1/events)."""

    team = forms.ChoiceField(required=False)
    actor = forms.CharField(required=False, max_length=150)
    object = forms.CharField(required=False, max_length=300)
    kind = forms.ChoiceField(required=False, choices=[("", "any"), *((k, k) for k in KINDS)])
    since = forms.CharField(required=False, max_length=40)
    until = forms.CharField(required=False, max_length=40)
    order = forms.ChoiceField(required=False, choices=[(NEWEST, NEWEST), (OLDEST, OLDEST)])

    def __init__(self, user: Any, data: Mapping[str, Any]) -> None:
        super().__init__({k: v for k, v in data.items() if k not in PAGING})
        self.teams = list(visible_teams(user).values_list("name", flat=True))
        self.fields["team"].choices = [("", "any"), *((name, name) for name in self.teams)]
        self.fields["team"].error_messages["invalid_choice"] = (
            f"%(value)s is not a team of yours; use one of {', '.join(self.teams) or '(none)'}"
        )
        self.fields["kind"].error_messages["invalid_choice"] = (
            f"%(value)s is not a kind of event; use one of {', '.join(KINDS)}"
        )
        self.fields["order"].error_messages["invalid_choice"] = (
            "%(value)s is not an order; use newest or oldest"
        )

    def clean_since(self) -> datetime | None:
        text = self.cleaned_data["since"]
        return moment(text, end_of_day=False) if text else None

    def clean_until(self) -> datetime | None:
        # A date alone means the whole of that day: up to the next day's start.
        text = self.cleaned_data["until"]
        return moment(text, end_of_day=True) if text else None

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean() or {}
        since, until = cleaned.get("since"), cleaned.get("until")
        if since and until and since >= until:
            self.add_error("until", "must be later than since")
        return cleaned

    def ordering(self) -> str:
        return self.valid().get("order", NEWEST)

    def filter_team(self, rows: QuerySet[Any], team: str) -> QuerySet[Any]:
        lookup = table_of(rows).team
        return rows.filter(**{lookup: team}) if lookup else rows.none()

    def filter_actor(self, rows: QuerySet[Any], actor: str) -> QuerySet[Any]:
        return rows.filter(**{f"{table_of(rows).actor}__iexact": actor.strip()})

    def filter_object(self, rows: QuerySet[Any], text: str) -> QuerySet[Any]:
        return rows.filter(**{f"{table_of(rows).object}__icontains": text.strip()})

    def filter_kind(self, rows: QuerySet[Any], kind: str) -> QuerySet[Any]:
        of_kind = table_of(rows).kind_lookup(kind)
        return rows.filter(of_kind) if of_kind is not None else rows.none()

    def filter_since(self, rows: QuerySet[Any], since: datetime) -> QuerySet[Any]:
        return rows.filter(**{f"{table_of(rows).at}__gte": since})

    def filter_until(self, rows: QuerySet[Any], until: datetime) -> QuerySet[Any]:
        return rows.filter(**{f"{table_of(rows).at}__lt": until})

    def filter_order(self, rows: QuerySet[Any], order: str) -> QuerySet[Any]:
        return rows  # not a filter: the paging reads it (ordering())


# --- paging ------------------------------------------------------------------------------

Key = tuple[datetime, str, int]


def after(rows: QuerySet[Any], key: Key | None, order: str) -> QuerySet[Any]:
    """The rows of one table that come after `key` in the merged order (time, table, id)."""
    table = table_of(rows)
    newest = order == NEWEST
    rows = rows.order_by(f"-{table.at}", "-id") if newest else rows.order_by(table.at, "id")
    if key is None:
        return rows
    at, key_table, key_id = key
    beyond = "lt" if newest else "gt"
    # This table's name is fixed, so the tuple comparison is decided by time alone unless the
    # names are equal; then the id breaks the tie.
    if table.name == key_table:
        return rows.filter(
            Q(**{f"{table.at}__{beyond}": at}) | Q(**{table.at: at, f"id__{beyond}": key_id})
        )
    comes_after = table.name < key_table if newest else table.name > key_table
    return rows.filter(**{f"{table.at}__{beyond}{'e' if comes_after else ''}": at})


def merged(tables: Iterable[QuerySet[Any]], order: str, limit: int | None) -> Iterator[Row]:
    def rows_of(rows: QuerySet[Any]) -> Iterator[Row]:
        chosen = rows[:limit] if limit is not None else rows.iterator(chunk_size=500)
        return (table_of(rows).row(item) for item in chosen)

    rows = heapq.merge(*map(rows_of, tables), key=lambda row: row.key, reverse=order == NEWEST)
    return (shown(row) for row in rows)


def shown(row: Row) -> Row:
    # No writer puts a secret in a message; anything key-shaped is still hidden on the way out.
    clean = redact(row.message)
    return row if clean == row.message else replace(row, message=clean)


def cursor_key(text: str, order: str) -> Key:
    saved_order, at, table, pk = decode_cursor(LIST_NAME, text)
    if saved_order != order:
        raise FilterRefused(
            f"was given for order={saved_order}; pass that order with it, or leave it out",
            "cursor",
        )
    return (datetime.fromisoformat(at), table, int(pk))


@dataclass(frozen=True)
class Page:
    rows: list[Row]
    next_cursor: str | None


def paged(tables: list[QuerySet[Any]], order: str, key: Key | None, limit: int) -> Page:
    """`limit` rows after `key` (the first ones without), and the cursor of the next page."""
    chosen = [after(rows, key, order) for rows in tables]
    taken = list(islice(merged(chosen, order, limit + 1), limit + 1))
    if len(taken) <= limit:
        return Page(taken, None)
    last = taken[limit - 1]
    key_of_last = [order, last.at.isoformat(), last.table, last.id]
    return Page(taken[:limit], encode_cursor(LIST_NAME, key_of_last))


def read_limit(text: str | None) -> int:
    if text in (None, ""):
        return PAGE_SIZE
    try:
        limit = int(str(text))
    except ValueError:
        limit = 0
    if not 1 <= limit <= MAX_LIMIT:
        raise FilterRefused(f"must be a whole number from 1 to {MAX_LIMIT}", "limit")
    return limit


def strict_page(user: Any, params: Mapping[str, Any]) -> Page:
    """The API's page: every bad value refused with its name (FilterRefused)."""
    filters = EventFilter(user, params)
    tables = [filters.strictly(rows) for rows in visible_tables(user)]
    limit = read_limit(params.get("limit"))
    order = filters.ordering()
    key = cursor_key(params["cursor"], order) if params.get("cursor") else None
    return paged(tables, order, key, limit)


@dataclass(frozen=True)
class Shown:
    """What the page shows: the filters (their errors beside them), one page, and what was
    wrong with the cursor (then the first page is shown)."""

    filters: EventFilter
    page: Page
    cursor_error: str


def page_for(user: Any, params: Mapping[str, Any]) -> Shown:
    """The page's page: a bad filter value is left out (the form says why), a bad cursor
    starts again from the first page."""
    filters = EventFilter(user, params)
    tables = [filters.apply(rows) for rows in visible_tables(user)]
    order = filters.ordering()
    try:
        key = cursor_key(params["cursor"], order) if params.get("cursor") else None
        error = ""
    except FilterRefused as refused:
        key, error = None, refused.message
    return Shown(filters, paged(tables, order, key, PAGE_SIZE), error)


def every_row(user: Any, params: Mapping[str, Any]) -> Iterator[Row]:
    """Every filtered row, for the export (FilterRefused for a bad value: never export rows
    other than those asked for)."""
    filters = EventFilter(user, params)
    tables = [filters.strictly(rows) for rows in visible_tables(user)]
    order = filters.ordering()
    return merged([after(rows, None, order) for rows in tables], order, None)
