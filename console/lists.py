"""The list toolkit: a list's filters as one form, read by its page and by its API alike.

Each field of a ListFilter narrows the rows through the form's `filter_<field>(rows, value)`. A
page leaves a bad value out and shows the rest (the form says what was wrong beside the field);
the API refuses it with the field's name and the reason (`refusal`).

A list that pages hands out cursors (`encode_cursor`): the key of the last row shown, signed
with the list's name, so that a cursor changed by hand or taken from another list is refused
(`decode_cursor`) rather than read as a place it never was.

A ListFilter with `orders` also sorts and pages (`page`): ?sort= one of its orders, ?limit= and
?cursor=, keyset-paged (the next page starts after the last row's sort key, never at an
offset: a row added or gone meanwhile neither repeats nor hides another).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import date, datetime
from decimal import Decimal
from typing import Any, ClassVar, TypeVar

from django import forms
from django.core import signing
from django.db.models import Q, QuerySet

Rows = TypeVar("Rows", bound=QuerySet[Any])
CURSOR_SALT = "berth.lists.cursor"
PAGE_SIZE = 50  # rows per page, on a page and by default in the API
MOST_PER_PAGE = 200  # the API's ?limit= at most
PAGING = ("sort", "limit", "cursor")  # what a paged list reads beside its filters


class FilterRefused(Exception):
    """A filter value the API cannot use (400): `field` names the filter."""

    def __init__(self, message: str, field: str) -> None:
        super().__init__(message)
        self.message = message
        self.field = field


@dataclass(frozen=True)
class Order:
    """One way a list sorts (?sort=name): ORM fields, "-" first for descending, the last one
    unique (the primary key), so that the order is total and a cursor names one place."""

    name: str
    label: str
    fields: tuple[str, ...]


def both_ways(name: str, label: str, fields: tuple[str, ...]) -> tuple[Order, Order]:
    """A column's order, and the same reversed ("-name"), as its heading toggles them."""
    reverse = tuple(f[1:] if f.startswith("-") else f"-{f}" for f in fields)
    return Order(name, label, fields), Order(f"-{name}", f"{label}, reversed", reverse)


@dataclass(frozen=True)
class Heading:
    """A column heading; a sortable one links to its order (the other way when it is the
    current one) and says which way the list is sorted by it."""

    label: str
    href: str = ""
    aria_sort: str = ""

    def __str__(self) -> str:
        return self.label  # as a heading given in words shows


def headings(columns: Sequence[tuple[str, str]], filters: ListFilter, params: Any) -> list[Heading]:
    """The table's headings: (label, order name or "" when the column does not sort)."""
    current = filters.order().name
    shown = []
    for label, order in columns:
        if not order:
            shown.append(Heading(label))
            continue
        sorted_here = current.lstrip("-") == order
        descending = current.startswith("-")
        toggled = f"-{order}" if sorted_here and not descending else order
        aria = ("descending" if descending else "ascending") if sorted_here else "none"
        shown.append(Heading(label, "?" + with_params(params, sort=toggled, cursor=""), aria))
    return shown


def with_params(params: Any, **changes: str) -> str:
    """The query string of `params` with `changes` (an empty value removes the parameter)."""
    query = params.copy()
    for name, value in changes.items():
        query.pop(name, None)
        if value:
            query[name] = value
    return str(query.urlencode())


@dataclass(frozen=True)
class ListPage:
    rows: list[Any]
    next_cursor: str | None


def pager(page: ListPage, cursor_error: str, params: Any) -> dict[str, str]:
    """What templates/partials/pager.html shows under a list's page: the link to the next page
    (this page's filters and order kept), and why a cursor given was not used."""
    after = with_params(params, cursor=page.next_cursor) if page.next_cursor else ""
    return {"next_page": after, "cursor_error": cursor_error}


class ListFilter(forms.Form):
    # A paged list's orders, the first its default; a list without them neither sorts nor pages.
    orders: ClassVar[tuple[Order, ...]] = ()
    list_name: ClassVar[str] = ""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if self.orders:
            names = ", ".join(order.name for order in self.orders)
            self.fields["sort"] = forms.ChoiceField(
                required=False,
                label="Sort by",
                choices=[(order.name, order.label) for order in self.orders],
                error_messages={"invalid_choice": f"no such order %(value)s; use one of {names}"},
            )
            self.fields["limit"] = forms.IntegerField(
                required=False,
                min_value=1,
                max_value=MOST_PER_PAGE,
                error_messages={"invalid": f"must be a whole number from 1 to {MOST_PER_PAGE}"},
            )
            self.fields["cursor"] = forms.CharField(required=False)

    def valid(self) -> dict[str, Any]:
        """The values that passed, even when another one did not; empty values filter nothing."""
        self.is_valid()
        cleaned = getattr(self, "cleaned_data", {})
        return {name: value for name, value in cleaned.items() if value not in (None, "")}

    def apply(self, rows: Rows) -> Rows:
        for name, value in self.valid().items():
            if name not in PAGING:
                rows = getattr(self, f"filter_{name}")(rows, value)
        return rows

    def order(self) -> Order:
        chosen = self.valid().get("sort")
        return next((o for o in self.orders if o.name == chosen), self.orders[0])

    def page(self, rows: QuerySet[Any]) -> ListPage:
        """One page of rows (already filtered), in the order asked, after the cursor given:
        FilterRefused naming `cursor` for one this list and order did not give."""
        order = self.order()
        ordered = rows.order_by(*order.fields)
        cursor = self.valid().get("cursor")
        if cursor:
            ordered = ordered.filter(after(order.fields, decode_cursor(self.cursor_name(), cursor)))
        limit = self.valid().get("limit") or PAGE_SIZE
        taken = list(ordered[: limit + 1])
        if len(taken) <= limit:
            return ListPage(taken, None)
        last = key_of(taken[limit - 1], order.fields)
        return ListPage(taken[:limit], encode_cursor(self.cursor_name(), last))

    def page_leniently(self, rows: QuerySet[Any]) -> tuple[ListPage, str]:
        """A page's page: a cursor that is no good starts again at the first page, and says why."""
        try:
            return self.page(rows), ""
        except FilterRefused as refused:
            self.cleaned_data.pop("cursor", None)
            shown = self.page(rows)
            return shown, f"The page asked for is not one of this list: it {refused.message}."

    def cursor_name(self) -> str:
        # The order is part of the name: a cursor of one order means nothing in another.
        return f"{self.list_name} sorted by {self.order().name}"

    def strictly(self, rows: Rows) -> Rows:
        """The rows every filter selects, or FilterRefused naming the first bad value (the API:
        a filter it would leave out silently would answer a question nobody asked)."""
        self.is_valid()
        unknown = sorted(set(self.data) - set(self.fields))
        if unknown:
            raise FilterRefused(f"no such filter; use one of {', '.join(self.fields)}", unknown[0])
        for name, errors in self.errors.items():
            raise FilterRefused(" ".join(errors), name)
        return self.apply(rows)


def choices_of(rows: QuerySet[Any], field: str) -> list[tuple[str, str]]:
    """The distinct non-empty values of a column, as choices."""
    values = rows.values_list(field, flat=True).distinct().order_by(field)
    return [(value, value) for value in values if value]


def encode_cursor(list_name: str, key: Sequence[Any]) -> str:
    """An opaque, URL-safe cursor for `list_name` holding `key` (JSON values: where to go on)."""
    return signing.dumps([list_name, list(key)], salt=CURSOR_SALT, compress=True)


def decode_cursor(list_name: str, text: str) -> list[Any]:
    """The key a cursor of `list_name` holds, or FilterRefused naming `cursor`."""
    try:
        name, key = signing.loads(text, salt=CURSOR_SALT)
    except (signing.BadSignature, ValueError, TypeError):
        raise FilterRefused(
            "is not a cursor Berth gave (changed or cut short); leave it out to start from the "
            "first page, or pass next_cursor exactly as it was answered",
            "cursor",
        ) from None
    if name != list_name:
        raise FilterRefused(
            f"is a cursor of the {name} list, not of the {list_name} list; pass the "
            f"next_cursor the {list_name} list answered",
            "cursor",
        )
    return list(key)


def field_value(row: Any, field: str) -> Any:
    value = row
    for part in field.lstrip("-").split("__"):
        value = getattr(value, part)
    return value


def key_of(row: Any, fields: Sequence[str]) -> list[Any]:
    """The row's sort key as JSON values (a cursor holds it)."""
    key = []
    for field in fields:
        value = field_value(row, field)
        if isinstance(value, datetime | date):
            value = value.isoformat()
        elif isinstance(value, Decimal):
            value = str(value)
        key.append(value)
    return key


def after(fields: Sequence[str], key: Sequence[Any]) -> Q:
    """Rows that come after `key` in this order: the first field beyond it, or equal there and
    the next beyond, and so on (a keyset's comparison, field by field)."""
    if len(key) != len(fields):
        raise FilterRefused("is not a cursor of this list's order", "cursor")
    beyond = Q(pk__in=[])
    equal_so_far = Q()
    for field, value in zip(fields, key, strict=True):
        name = field.lstrip("-")
        step = "lt" if field.startswith("-") else "gt"
        beyond |= equal_so_far & Q(**{f"{name}__{step}": value})
        equal_so_far &= Q(**{name: value})
    return beyond
